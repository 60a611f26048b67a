"""``crowdpref up`` on a fresh state folder of the public profile: its check of Argilla's secrets
(one line for a damaged file, before anything starts) must not ask for the password of Argilla's
PostgreSQL role, which ``up`` itself makes when it provisions PostgreSQL. It did, and the first
``up`` of every new server failed with "the password of PostgreSQL role 'argilla' cannot be
read" (issue 32). The services themselves are not started here (``stack.up`` records its call);
a damaged password file still stops ``up`` in one line. ``up`` shows Argilla's public address."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from crowdpref.cli import app
from services import postgres, stack
from tests.conftest import cli_environment


@pytest.fixture()
def public_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "state"
    for name, value in {**cli_environment(home), "CROWDPREF_PUBLIC_URL": "https://study.test"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    return home


def test_the_first_up_of_a_fresh_public_state_folder_gets_to_starting_the_services(public_home, monkeypatch):
    started = []
    monkeypatch.setattr(stack, "up", lambda settings, components, **kw: started.append(list(components)) or [])
    result = CliRunner().invoke(app, ["up", "--only", "argilla"])
    assert result.exit_code == 0, result.output
    assert started == [["argilla"]]
    argilla_line = next(line for line in result.output.splitlines() if line.startswith("Argilla UI:"))
    assert argilla_line.startswith("Argilla UI:  https://study.test  (on this host: http://127.0.0.1:")  # the public address first
    assert not (public_home / "secrets" / f"postgres-{postgres.ARGILLA_ROLE}").exists()  # left to up's provisioning


def test_a_damaged_role_password_still_stops_up_in_one_line(public_home, monkeypatch):
    started = []
    monkeypatch.setattr(stack, "up", lambda settings, components, **kw: started.append(list(components)) or [])
    damaged = public_home / "secrets" / f"postgres-{postgres.ARGILLA_ROLE}"
    damaged.parent.mkdir(parents=True, exist_ok=True)
    damaged.write_text("")
    result = CliRunner().invoke(app, ["up", "--only", "argilla"])
    assert result.exit_code != 0 and started == []
    assert str(damaged) in result.output and "restore it from your backup" in result.output
