"""The keeper (services/keeper.py) under :class:`ProcessManager` with ``keep=True``, on small
programs: a killed service comes back as a new process and says so in its log, ``stop`` ends
keeper and service with nothing started again, a service that cannot start fails the start at
once, a killed keeper takes its service with it; and ``crowdpref up`` keeps its services where it
used to supervise them (the public profile, or ``supervise=True``). Where ``up`` runs as root the
keeper runs as the service's user: tests/integration/test_keeper_users.py."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import replace

import pytest

from crowdpref.errors import ServiceError
from services import keeper, stack
from services.process import ProcessManager, RunningService, ServiceSpec, group_members
from tests.conftest import isolated_settings

SHELL = "/bin/bash"


def _until(condition, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout_s} s")


@pytest.fixture()
def manager(tmp_path):
    """A manager that keeps its services; whatever a failing test left running is stopped."""
    kept = ProcessManager(tmp_path, keep=True)
    yield kept
    kept.stop("svc", timeout_s=5)


def _spec(argv, term_signals: int = 1) -> ServiceSpec:
    return ServiceSpec("svc", argv, {"PATH": os.environ["PATH"]}, health=lambda: True, start_timeout_s=10,
                       term_signals=term_signals)


def test_a_killed_service_comes_back_and_stop_ends_both_with_no_restart(manager):
    first = manager.start(_spec(["sleep", "300"]), "127.0.0.1")
    keeper_pid = _record_pid(manager)
    assert first.pid != keeper_pid and os.getpgid(first.pid) == first.pid  # the service leads its own group
    assert "crowdpref-keeper" in _cmdline(keeper_pid)

    os.killpg(first.pid, signal.SIGKILL)  # its whole group, as a uvicorn parent and workers die
    second = _until(lambda: (r := manager.running("svc")) is not None and r.pid != first.pid and r)
    assert _record_pid(manager) == keeper_pid
    log = manager.log_path("svc").read_text()
    assert "crowdpref-keeper: svc died (" in log and "starting it again in 1 s" in log
    os.killpg(second.pid, signal.SIGKILL)  # dying again at once: a longer wait before the next start
    third = _until(lambda: (r := manager.running("svc")) is not None and r.pid != second.pid and r)
    assert "starting it again in 2 s" in manager.log_path("svc").read_text()

    assert manager.stop("svc", timeout_s=10) is True
    assert group_members(third.pid) == [] and group_members(keeper_pid) == []
    time.sleep(1.5)  # longer than the keeper's first delay: nothing came back
    assert manager.running("svc") is None and not manager.record_path("svc").exists()
    assert "started again" in manager.log_path("svc").read_text()


def test_stop_passes_the_service_its_sigterms(manager):
    """A service that needs two SIGTERMs (the Prefect worker) gets them from its keeper."""
    program = "trap 'echo first term' TERM; sleep 300 & wait; trap - TERM; echo second; sleep 300 & wait"
    service = manager.start(_spec([SHELL, "-c", program], term_signals=2), "127.0.0.1")
    started = time.monotonic()
    assert manager.stop("svc", timeout_s=10) is True
    assert time.monotonic() - started < 8, "the keeper did not stop it: the manager's SIGKILL did"
    assert group_members(service.pid) == []
    assert "first term\nsecond" in manager.log_path("svc").read_text()


def test_a_service_that_cannot_start_fails_the_start_at_once(manager):
    started = time.monotonic()
    with pytest.raises(ServiceError, match=r"svc exited with code 3 while starting: see .*svc\.log"):
        manager.start(replace(_spec([SHELL, "-c", "echo cannot start >&2; exit 3"]), health=lambda: False), "127.0.0.1")
    assert time.monotonic() - started < 5
    assert "cannot start" in manager.log_path("svc").read_text()
    assert not manager.record_path("svc").exists()


def test_a_killed_keeper_takes_its_service_with_it(manager):
    service = manager.start(_spec(["sleep", "300"]), "127.0.0.1")
    os.kill(_record_pid(manager), signal.SIGKILL)
    _until(lambda: not group_members(service.pid))  # parent-death signal: no service outlives its keeper
    assert manager.running("svc") is None
    manager.stop("svc")


def test_a_released_service_ends_with_its_keeper(manager):
    """PostgreSQL is stopped with pg_ctl: ``down`` releases its keeper first, which then starts
    nothing again."""
    service = manager.start(_spec(["sleep", "300"]), "127.0.0.1")
    keeper_pid = _record_pid(manager)
    manager.release("svc")
    os.kill(service.pid, signal.SIGTERM)  # stopped by other means
    _until(lambda: not group_members(keeper_pid) and not group_members(service.pid))
    assert manager.running("svc") is None
    log = manager.log_path("svc").read_text()
    assert "svc is being stopped: not started again" in log and "svc ended (" in log and "started again (" not in log


def test_the_keeper_runs_after_the_privilege_drop():
    dropped = ["/usr/bin/setpriv", "--reuid=1", "--no-new-privs", "--", "/usr/bin/prog", "--flag"]
    wrapped = keeper.wrap(dropped, "svc", 2)
    assert wrapped[:4] == dropped[:4] and wrapped[4].endswith("bash") and wrapped[-2:] == ["/usr/bin/prog", "--flag"]
    assert wrapped[wrapped.index("crowdpref-keeper") + 1:][:2] == ["svc", "2"]
    plain = keeper.wrap(["/usr/bin/prog"], "svc", 1)
    assert plain[0].endswith("bash") and plain[-1] == "/usr/bin/prog"


def test_up_keeps_its_services_in_the_public_profile_or_when_asked(tmp_path, monkeypatch):
    kept: list[tuple[str, bool]] = []
    monkeypatch.setattr(ProcessManager, "start", lambda self, spec, host: kept.append((spec.name, self.keep))
                        or RunningService(spec.name, 1, None, 0.0))
    monkeypatch.setattr(stack, "status", lambda s: [])
    monkeypatch.setattr(stack.postgres, "start_service", lambda s, manager: kept.append(("postgres", manager.keep)))
    laptop = isolated_settings(tmp_path)
    public = isolated_settings(tmp_path, public_url="https://study.example.org")
    for settings, supervise, expected in ((laptop, None, [("portal", False)]),
                                          (laptop, True, [("portal", True)]),
                                          (public, None, [("postgres", True), ("portal", True)]),
                                          (public, False, [("postgres", False), ("portal", False)])):
        kept.clear()
        stack.up(settings, ["portal"], supervise=supervise)
        assert kept == expected, (settings.public, supervise)


def _record_pid(manager: ProcessManager) -> int:
    import json

    return json.loads(manager.record_path("svc").read_text())["pid"]


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return handle.read().replace(b"\0", b" ").decode()
