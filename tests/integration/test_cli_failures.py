"""The real ``crowdpref`` CLI when a service it needs is down or a state file is damaged or
unreadable: one line naming what is wrong and the fix, no traceback, exit 1 for failures and 2
for usage and config errors. Each test runs ``.venv/bin/crowdpref`` in a subprocess with its own
CROWDPREF_HOME and free ports, so nothing of a developer's own stack is touched; where a
service must run, it is the session's embedded one (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from crowdpref.runfolder import write_parquet
from tests.conftest import REPO, cli_environment
from tests.integration.test_study1_collection import _questions

pytestmark = pytest.mark.integration

CROWDPREF = str(REPO / ".venv" / "bin" / "crowdpref")
DEMO = str(REPO / "studies" / "demo.yaml")


def run_cli(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CROWDPREF, *args], env=env, cwd=cwd or REPO, capture_output=True, text=True, timeout=300)


@pytest.fixture()
def cli_env(tmp_path: Path) -> dict[str, str]:
    """A private state folder and free ports: no service of this stack runs."""
    return cli_environment(tmp_path / "state")


def one_line_error(result: subprocess.CompletedProcess[str], exit_code: int, *needles: str,
                   only_line: bool = True) -> str:
    """The command failed with ``exit_code`` and its error is one line containing ``needles``;
    no traceback anywhere. ``only_line``: stderr holds nothing else (a flow run's own log lines
    may come before the error otherwise)."""
    output = result.stdout + result.stderr
    assert result.returncode == exit_code, output
    assert "Traceback" not in output and "│" not in output, output  # rich draws tracebacks in boxes
    lines = result.stderr.strip().splitlines()
    if only_line:
        assert len(lines) == 1, result.stderr
    error = lines[-1]
    assert error.startswith("error: "), result.stderr
    for needle in needles:
        assert needle in error, error
    return error


# --- services down -------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [
    ["run", "aggregate-ratings", DEMO],
    ["run", "collect-responses", DEMO],
    ["simulate", DEMO],
    ["demo", DEMO],
    ["smoke"],
    ["deploy"],
])
def test_the_stack_down_gives_one_line_naming_crowdpref_up(cli_env, command):
    result = run_cli(cli_env, *command)
    error = one_line_error(result, 1, "Prefect server", f"127.0.0.1:{cli_env['CROWDPREF_PREFECT_PORT']}",
                           "is not reachable", "`crowdpref up`", "PREFECT_API_URL")
    assert "Failed to reach API" not in error


def test_argilla_down_with_prefect_up_stops_before_the_flow_runs(cli_env, prefect_server):
    cli_env["CROWDPREF_PREFECT_PORT"] = str(prefect_server.prefect_port)
    result = run_cli(cli_env, "run", "collect-responses", DEMO)
    one_line_error(result, 1, "Argilla server", f"127.0.0.1:{cli_env['CROWDPREF_ARGILLA_PORT']}", "`crowdpref up`",
                   "CROWDPREF_ARGILLA_URL")


def test_drop_with_argilla_down_is_one_line(cli_env):
    run = Path(cli_env["CROWDPREF_HOME"]) / "studies" / "demo"
    write_parquet(_questions(), run / "questions.parquet")
    secrets = Path(cli_env["CROWDPREF_HOME"]) / "secrets"
    secrets.mkdir(parents=True)
    (secrets / "argilla-owner.json").write_text(json.dumps({"username": "o", "password": "p" * 20, "api_key": "k" * 30}))
    result = run_cli(cli_env, "drop", "demo-s1-0001", "--study", DEMO)
    one_line_error(result, 1, "Argilla", "unreachable", "`crowdpref up`")


# --- a stage failing with a clear cause, against the real Prefect server ------------------------
def test_a_stage_failing_with_a_clear_cause_shows_its_line_and_run_link_not_a_traceback(cli_env, prefect_server):
    cli_env["CROWDPREF_PREFECT_PORT"] = str(prefect_server.prefect_port)
    result = run_cli(cli_env, "run", "aggregate-ratings", DEMO)
    error = one_line_error(result, 1, "aggregate-ratings failed", "questions.parquet: not found",
                           "run the generate-questions flow first", f"{prefect_server.prefect_ui_url}/runs/flow-run/",
                           only_line=False)
    # the run's log in the Prefect UI keeps the full traceback
    import httpx

    run_id = error.rsplit("/runs/flow-run/", 1)[1].rstrip(")")
    logs = httpx.post(f"{prefect_server.prefect_url}/logs/filter", timeout=30,
                      json={"logs": {"flow_run_id": {"any_": [run_id]}}, "limit": 200}).json()
    assert any("Traceback" in log["message"] and "CrowdprefError" in log["message"] for log in logs), logs


def test_a_damaged_salt_stops_the_collection_run_in_one_line(cli_env, prefect_server, argilla_server, unique,
                                                             tmp_path):
    name = f"salt{unique}"
    study = tmp_path / f"{name}.yaml"
    study.write_text(yaml.safe_dump({
        "name": name, "seed": 1, "participants": "simulated",
        "study1": {"responses_per_question": 2, "questions_per_participant": 3, "pool_size": 1},
        "study2": {"pairs_per_participant": 1},
    }))
    run = Path(cli_env["CROWDPREF_HOME"]) / "studies" / name
    write_parquet(_questions(), run / "questions.parquet")
    salt = run / "private" / "participant-key-salt.json"
    salt.parent.mkdir(parents=True)
    salt.write_text('{"salt": "0a1b')  # cut off mid-write
    cli_env.update(CROWDPREF_PREFECT_PORT=str(prefect_server.prefect_port), CROWDPREF_ARGILLA_URL=argilla_server.api_url,
                   CROWDPREF_ARGILLA_API_KEY=argilla_server.owner_api_key)
    result = run_cli(cli_env, "run", "collect-responses", str(study))
    one_line_error(result, 1, "collect-responses failed", str(salt), "participant-key salt", "not valid JSON",
                   "delete it and rerun", "/runs/flow-run/", only_line=False)


# --- damaged or unreadable state files ----------------------------------------------------------
@pytest.mark.parametrize("damage", ["not json", "fields missing", "a folder"])
def test_damaged_owner_credentials_stop_up_before_anything_starts(cli_env, damage):
    state = Path(cli_env["CROWDPREF_HOME"])
    creds = state / "secrets" / "argilla-owner.json"
    creds.parent.mkdir(parents=True)
    if damage == "not json":
        creds.write_text('{"username": "crowdpref-owner", "pass')
    elif damage == "fields missing":
        creds.write_text(json.dumps({"username": "crowdpref-owner"}))
    else:
        creds.mkdir()
    result = run_cli(cli_env, "up", "--only", "argilla")
    why = {"not json": "not valid JSON", "fields missing": "fields missing", "a folder": "Is a directory"}[damage]
    one_line_error(result, 1, str(creds), "Argilla owner credentials", why,
                   "delete it and run `crowdpref up`")  # safe: Argilla was never set up with it
    assert not list((state / "run").glob("*.json")) if (state / "run").exists() else True  # nothing started


def test_damaged_owner_credentials_after_setup_say_restore_not_delete(cli_env):
    state = Path(cli_env["CROWDPREF_HOME"])
    (state / "argilla").mkdir(parents=True)
    (state / "argilla" / "argilla.db").write_bytes(b"")  # the embedded Argilla holds the owner's key
    creds = state / "secrets" / "argilla-owner.json"
    creds.parent.mkdir(parents=True)
    creds.write_text("")
    result = run_cli(cli_env, "up", "--only", "argilla")
    error = one_line_error(result, 1, str(creds), "restore it from your backup")
    assert "delete" not in error


def test_lost_owner_credentials_after_setup_are_replaced_by_up_reset_owner(cli_env):
    """The real embedded Argilla, set up by ``crowdpref up``: its owner's credentials file is
    lost; ``up`` refuses in one line naming ``--reset-owner``; ``--reset-owner`` refuses while
    Argilla runs, then (stack down) gives the owner a new password and API key: the new key
    works, the old one no longer does, a participant's account still signs in, and an old copy put
    back is refused in one line."""
    import httpx

    from crowdpref.argilla_client import AnnotatorSession, ArgillaOwner

    state = Path(cli_env["CROWDPREF_HOME"])
    creds = state / "secrets" / "argilla-owner.json"
    api = f"http://127.0.0.1:{cli_env['CROWDPREF_ARGILLA_PORT']}"

    def works(key: str) -> bool:
        return httpx.get(f"{api}/api/v1/me", headers={"X-Argilla-Api-Key": key}, timeout=10).status_code == 200

    try:
        first = run_cli(cli_env, "up", "--only", "argilla")
        assert first.returncode == 0, first.stdout + first.stderr
        old = json.loads(creds.read_text())
        assert works(old["api_key"])
        owner = ArgillaOwner(api, old["api_key"])  # a participant's account, which the reset must keep
        owner.ensure_annotator("reset-participant", owner.ensure_workspace("reset-ws"))
        participant_password = owner.passwords("reset-participant")
        owner.close()
        refused = run_cli(cli_env, "up", "--only", "argilla", "--reset-owner")
        one_line_error(refused, 2, "--reset-owner needs the stack down", "crowdpref down")
        assert json.loads(creds.read_text()) == old  # nothing changed

        assert run_cli(cli_env, "down").returncode == 0
        creds.write_text("")  # lost
        one_line_error(run_cli(cli_env, "up", "--only", "argilla"), 1, str(creds), "crowdpref up --reset-owner")

        reset = run_cli(cli_env, "up", "--only", "argilla", "--reset-owner")
        assert reset.returncode == 0, reset.stdout + reset.stderr
        new = json.loads(creds.read_text())
        assert new["api_key"] != old["api_key"] and new["password"] != old["password"]
        assert new["api_key"] not in reset.stdout + reset.stderr and new["password"] not in reset.stdout + reset.stderr
        assert oct(creds.stat().st_mode & 0o777) == "0o600" and not creds.with_name(creds.name + ".new").exists()
        assert works(new["api_key"]) and not works(old["api_key"])
        wrong = httpx.post(f"{api}/api/v1/token", timeout=30, data={"username": old["username"], "password": old["password"]})
        assert wrong.status_code == 401  # the old password no longer signs in
        signed_in = httpx.post(f"{api}/api/v1/token", timeout=30,
                               data={"username": new["username"], "password": new["password"]})
        assert signed_in.status_code == 201, signed_in.status_code  # the new password too
        assert AnnotatorSession.password_works(api, "reset-participant", participant_password)

        assert run_cli(cli_env, "down").returncode == 0
        creds.write_text(json.dumps(old))  # an old copy put back: valid, but not Argilla's key any more
        one_line_error(run_cli(cli_env, "up", "--only", "argilla"), 1, "exists with a different API key",
                       "crowdpref up --reset-owner")
        # (the new file is Argilla's: the reset's own start served it above, as every normal `up` checks it)
    finally:
        run_cli(cli_env, "down")


@pytest.mark.parametrize("damage", ["garbage", "a folder"])
def test_a_damaged_or_unreadable_store_names_the_file_and_never_advises_deleting_it(cli_env, damage):
    store = Path(cli_env["CROWDPREF_HOME"]) / "store.sqlite"
    store.parent.mkdir(parents=True)
    if damage == "garbage":
        store.write_bytes(b"not a database\x00\xff" * 500)
    else:
        store.mkdir()
    result = run_cli(cli_env, "password", "demo-s1-0001", "--study", DEMO)
    error = one_line_error(result, 1, str(store), "restore it from your backup", "database_url")
    assert "delete it" not in error.replace("do not delete it", "")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode: a folder in the file's "
                    "place covers the unreadable case above")
def test_a_store_without_read_permission_is_one_line(cli_env):
    store = Path(cli_env["CROWDPREF_HOME"]) / "store.sqlite"
    store.parent.mkdir(parents=True)
    store.write_bytes(b"")
    store.chmod(0)
    result = run_cli(cli_env, "password", "demo-s1-0001", "--study", DEMO)
    one_line_error(result, 1, str(store))


def test_an_unreadable_settings_file_is_a_config_error(cli_env, tmp_path):
    folder = tmp_path / "settings.yaml"
    folder.mkdir()  # CROWDPREF_SETTINGS names something that cannot be read as a file
    cli_env["CROWDPREF_SETTINGS"] = str(folder)
    result = run_cli(cli_env, "status")
    one_line_error(result, 2, str(folder), "cannot be read", "CROWDPREF_SETTINGS")


def test_a_corrupt_settings_file_is_a_config_error(cli_env, tmp_path):
    bad = tmp_path / "settings.yaml"
    bad.write_text("argilla_port: [1,\n")
    cli_env["CROWDPREF_SETTINGS"] = str(bad)
    result = run_cli(cli_env, "status")
    one_line_error(result, 2, str(bad), "not valid UTF-8 YAML")
