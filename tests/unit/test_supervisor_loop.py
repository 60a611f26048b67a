"""The supervisor's loop (services/supervisor.py) without real services: what it watches per
component and profile, that it starts again (through ``stack.up``, never a second supervisor)
only the component of a service whose process is gone, that a failed start is logged in one
line and not tried again for RETRY_AFTER_FAILURE_S, and when ``up`` starts it (the public
profile, or ``supervise=True``). The real kill-and-restart is tests/integration/test_supervisor.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from crowdpref.errors import ServiceError
from services import stack, supervisor
from services.process import ProcessManager, RunningService
from tests.conftest import isolated_settings


@pytest.fixture()
def settings(tmp_path: Path):
    return isolated_settings(tmp_path / "home")


def _alive(monkeypatch, alive: set[str]) -> None:
    def running(self, name):
        return RunningService(name, 1, None, 0.0) if name in alive else None

    monkeypatch.setattr(ProcessManager, "running", running)


def test_what_it_watches(settings):
    assert supervisor.watched(settings, ["argilla", "portal"]) == {
        "redis": "argilla", "argilla-server": "argilla", "argilla-worker": "argilla", "portal": "portal"}
    assert supervisor.watched(settings, ["prefect", "worker"]) == {"prefect-server": "prefect",
                                                                   "prefect-worker": "worker"}
    elsewhere = isolated_settings(settings.home, argilla_url="http://argilla.example:6900", argilla_api_key="k")
    assert supervisor.watched(elsewhere, ["argilla", "portal"]) == {"portal": "portal"}
    public = isolated_settings(settings.home, public_url="https://study.example.org")
    assert supervisor.watched(public, ["portal", "caddy"]) == {"postgres": "portal", "portal": "portal",
                                                              "caddy": "caddy"}


def test_it_starts_again_only_what_died(settings, monkeypatch):
    calls, lines = [], []
    monkeypatch.setattr(stack, "up", lambda s, components, supervise=None, restart=False: calls.append((list(components), supervise, restart)))
    _alive(monkeypatch, {"redis", "argilla-server", "argilla-worker"})  # the portal is gone
    supervisor.supervise(settings, ["argilla", "portal"], interval_s=0.01, log=lines.append, rounds=1)
    assert calls == [(["portal"], False, True)]
    assert any("portal died: starting portal again" in line for line in lines)
    assert supervisor.heartbeat_file(settings).exists()

    calls.clear()
    _alive(monkeypatch, {"redis", "argilla-worker", "portal"})
    supervisor.supervise(settings, ["argilla", "portal"], interval_s=0.01, log=lines.append, rounds=1)
    assert calls == [(["argilla"], False, True)]

    calls.clear()
    _alive(monkeypatch, {"redis", "argilla-server", "argilla-worker", "portal"})
    supervisor.supervise(settings, ["argilla", "portal"], interval_s=0.01, log=lines.append, rounds=3)
    assert calls == []


def test_a_failed_start_is_one_line_and_waits(settings, monkeypatch):
    calls, lines = [], []

    def failing(s, components, supervise=None, restart=False):
        calls.append(list(components))
        raise ServiceError("portal: port 1 on 127.0.0.1 is in use by a program crowdpref did not start\nmore")

    monkeypatch.setattr(stack, "up", failing)
    _alive(monkeypatch, {"redis", "argilla-server", "argilla-worker"})
    supervisor.supervise(settings, ["argilla", "portal"], interval_s=0.01, log=lines.append, rounds=5)
    assert calls == [["portal"]]  # not again within RETRY_AFTER_FAILURE_S
    failure = [line for line in lines if "did not start again" in line]
    assert len(failure) == 1 and "\n" not in failure[0] and "in use" in failure[0]


def test_up_starts_it_in_the_public_profile_or_when_asked(settings, monkeypatch):
    started = []
    monkeypatch.setattr(ProcessManager, "start",
                        lambda self, spec, host: started.append(spec.name) or RunningService(spec.name, 1, None, 0.0))
    monkeypatch.setattr(stack, "status", lambda s: [])
    monkeypatch.setattr(stack.postgres, "start_service", lambda s, manager: started.append("postgres"))
    stack.up(settings, ["portal"])
    assert started == ["portal"]
    started.clear()
    stack.up(settings, ["portal"], supervise=True)
    assert started == ["portal", "supervisor"]
    public = isolated_settings(settings.home, public_url="https://study.example.org")
    started.clear()
    stack.up(public, ["portal"])
    assert started == ["postgres", "portal", "supervisor"]
    started.clear()
    stack.up(public, ["portal"], supervise=False)
    assert started == ["postgres", "portal"]
    # it watches what up was asked for
    spec = supervisor.spec(settings, ["argilla", "portal"])
    assert spec.argv[-4:] == ["--component", "argilla", "--component", "portal"]
    assert "CROWDPREF_HOME" in spec.env
