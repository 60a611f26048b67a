"""services/stack.py's rules for the Prefect worker, without starting Prefect: ``up`` starts it
(component ``worker``) unless a serve process (deployments/serve.py) runs the deployments, and
``status`` lists it as missing only where ``up`` would have started it. The whole round trip
(``up`` starts it, every deployment Ready, ``down`` stops it) is
tests/integration/test_services_cli.py."""

from __future__ import annotations

import os

import pytest

from crowdpref.settings import load_settings
from services import stack
from services.process import ProcessManager, ServiceSpec


@pytest.fixture()
def settings(tmp_path, monkeypatch):
    monkeypatch.delenv("CROWDPREF_SETTINGS", raising=False)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    return load_settings(home=tmp_path / "state", prefect_api_url=None)


@pytest.fixture()
def started_worker(monkeypatch):
    calls = []
    monkeypatch.setattr("deployments.deploy.start_worker", lambda settings, manager=None: calls.append(settings))
    return calls


def _serve_stand_in(settings) -> ProcessManager:
    """A process recorded as ``prefect-serve`` (a sleep stands in for deployments/serve.py)."""
    manager = ProcessManager(settings.state_dir)
    manager.start(ServiceSpec(stack.SERVE, ["sleep", "60"], dict(os.environ), health=lambda: True), settings.host)
    return manager


def test_up_starts_the_worker_with_the_embedded_prefect(settings, started_worker):
    assert "worker" in stack.COMPONENTS
    stack.up(settings, components=["worker"])
    assert started_worker == [settings]
    rows = {row.name: row for row in stack.status(settings)}
    assert rows[stack.WORKER].pid is None and not rows[stack.WORKER].healthy  # missing: status says so


def test_no_worker_beside_a_serve_process(settings, started_worker):
    manager = _serve_stand_in(settings)
    try:
        notes = []
        stack.up(settings, components=["worker"], on_note=notes.append)
        assert started_worker == []
        assert notes == [f"no Prefect worker started: {stack.SERVE} runs the deployments (deployments/serve.py)"]
        names = [row.name for row in stack.status(settings)]
        assert stack.SERVE in names and stack.WORKER not in names
    finally:
        manager.stop(stack.SERVE, timeout_s=5)


def test_no_worker_for_a_prefect_server_elsewhere(tmp_path, started_worker, monkeypatch):
    monkeypatch.delenv("CROWDPREF_SETTINGS", raising=False)
    monkeypatch.chdir(tmp_path)
    elsewhere = load_settings(home=tmp_path / "state", prefect_api_url="http://prefect.example.org/api")
    stack.up(elsewhere, components=["worker"])
    assert started_worker == []
    assert stack.WORKER not in [row.name for row in stack.status(elsewhere)]
