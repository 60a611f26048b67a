"""Claims of the embedded services' docstrings and the docs that no other test checked.

- services/process.py: a pid record holds the process's kernel start time, "so a recycled pid
  is never mistaken for ours": a record whose pid now belongs to another process is not ours -
  ``status`` does not call it running and ``down`` does not signal it.
- docs/explanation/privacy.md ("The study store is owner-only") and docs/tutorial/demo.md (the
  state folder): the owner account's credentials are generated once (random, not Argilla's
  default key) in ``secrets/argilla-owner.json`` with mode 0600, in a 0700 ``secrets/`` folder,
  like the token-signing key, and are "printed only masked": ``masked`` never shows a secret in
  full.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest

from crowdpref.settings import load_settings
from services.argilla import service as argilla_service
from services.process import ProcessManager, ServiceSpec, group_members, process_start_time


@pytest.fixture()
def sleeper():
    """A process of ours that is NOT the recorded service (its own session, killed at the end)."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def test_a_recycled_pid_is_never_mistaken_for_ours(tmp_path, sleeper):
    manager = ProcessManager(tmp_path)
    manager.start(ServiceSpec("svc", ["sleep", "60"], dict(os.environ), health=lambda: True), "127.0.0.1")
    assert manager.running("svc") is not None
    manager.stop("svc")
    assert manager.running("svc") is None

    # the record's pid now belongs to another process (the sleeper stands in for the recycled pid):
    # same pid, another kernel start time
    record = {"pid": sleeper.pid, "start_time": process_start_time(sleeper.pid) - 1, "port": None,
              "started_at": 0.0, "argv0": "sleep", "term_signals": 1}
    manager.record_path("svc").write_text(json.dumps(record))
    assert manager.running("svc") is None
    assert manager.stop("svc") is False
    assert sleeper.poll() is None, "down signalled a process crowdpref did not start"

    # the same record with the right start time is ours, and stop ends it
    record["start_time"] = process_start_time(sleeper.pid)
    manager.record_path("svc").write_text(json.dumps(record))
    assert manager.running("svc") is not None
    assert manager.stop("svc", timeout_s=5) is True
    sleeper.wait(timeout=10)  # (stop reaps it itself, so its exit status is not reliable here)
    assert group_members(sleeper.pid) == []


def test_owner_credentials_are_random_private_and_made_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CROWDPREF_SETTINGS", raising=False)
    settings = load_settings(home=tmp_path / "state")
    creds = argilla_service.ensure_owner_credentials(settings)
    path = settings.owner_credentials_file
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(settings.secrets_dir.stat().st_mode) == 0o700
    assert creds["api_key"] not in ("argilla.apikey", "owner.apikey") and len(creds["password"]) >= 20
    assert argilla_service.ensure_owner_credentials(settings) == creds  # generated once, then kept

    other = load_settings(home=tmp_path / "other-state")
    assert argilla_service.ensure_owner_credentials(other)["api_key"] != creds["api_key"]  # random

    key = argilla_service.auth_secret(settings)
    key_file = settings.secrets_dir / "argilla-auth-secret"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and argilla_service.auth_secret(settings) == key

    for secret in (creds["password"], creds["api_key"], key):
        shown = argilla_service.masked(secret)
        assert secret not in shown and len(shown) < len(secret)


def test_a_missing_argilla_venv_is_one_line_naming_the_setting_and_the_fix(tmp_path, monkeypatch):
    """crowdpref/cli/__init__.py: "a missing venv" is one of the errors the user can fix - one line, no traceback."""
    from crowdpref.errors import CrowdprefError

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CROWDPREF_SETTINGS", raising=False)
    settings = load_settings(home=tmp_path / "state", argilla_venv=tmp_path / "no-such-venv")
    with pytest.raises(CrowdprefError) as err:
        argilla_service.server_python(settings)
    message = str(err.value)
    assert "\n" not in message and "no-such-venv" in message
    assert "make setup" in message and "CROWDPREF_ARGILLA_VENV" in message
