"""`crowdpref up` / `status` / `down` as a user runs them: a full embedded stack in its own
state folder, healthy, with a private owner credentials file, and nothing left behind. The
stack includes the Prefect worker on pool 'crowdpref': `up` starts it (again, if it died),
`crowdpref deploy` keeps it, every deployment is then Ready, and `down` stops it."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from services.process import group_members, port_in_use
from tests.conftest import REPO, cli_environment

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "crowdpref.cli"]


def run_cli(env: dict[str, str], *args: str, timeout: int = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)


@pytest.fixture()
def cli_env(tmp_path: Path) -> dict[str, str]:
    return cli_environment(tmp_path / "state")


def test_up_status_down_round_trip(cli_env):
    state = Path(cli_env["CROWDPREF_HOME"])
    try:
        started = run_cli(cli_env, "up")
        assert started.returncode == 0, started.stderr + started.stdout
        assert f"http://127.0.0.1:{cli_env['CROWDPREF_ARGILLA_PORT']}" in started.stdout
        assert f"http://127.0.0.1:{cli_env['CROWDPREF_PREFECT_PORT']}" in started.stdout
        assert f"http://127.0.0.1:{cli_env['CROWDPREF_PORTAL_PORT']}" in started.stdout
        site = f"http://127.0.0.1:{cli_env['CROWDPREF_SITE_PORT']}"  # Caddy: the portal and Argilla on one origin
        assert f"Portal:      {site}  (participants' study links start here" in started.stdout, started.stdout
        argilla_ui = f"Argilla UI:  http://127.0.0.1:{cli_env['CROWDPREF_ARGILLA_PORT']}  (participants: {site})"
        assert argilla_ui in started.stdout  # the owner uses Argilla directly
        portal = httpx.get(f"{site}/s/nosuchstudy/study1", timeout=10)
        assert portal.status_code == 404 and "Study not found" in portal.text  # the portal serves pages
        assert httpx.get(f"{site}/api/v1/status", timeout=10).status_code == 200  # and Argilla, on the same origin

        creds_file = state / "secrets" / "argilla-owner.json"
        creds = json.loads(creds_file.read_text())
        assert stat.S_IMODE(creds_file.stat().st_mode) == 0o600
        assert len(creds["password"]) >= 20 and creds["api_key"] != "argilla.apikey"
        for secret in (creds["password"], creds["api_key"]):
            assert secret not in started.stdout + started.stderr
            for log in (state / "logs").iterdir():
                assert secret not in log.read_text(errors="replace"), log

        again = run_cli(cli_env, "up")  # idempotent: everything already runs
        assert again.returncode == 0, again.stderr

        status = run_cli(cli_env, "status")
        assert status.returncode == 0, status.stdout
        assert status.stdout.count("healthy") == 7 and "unhealthy" not in status.stdout
        assert f"One origin:  {site}" in status.stdout
        assert _health(status.stdout, "prefect-worker") == "healthy"  # the worker is a service

        records = {p.stem: json.loads(p.read_text()) for p in (state / "run").glob("*.json")}
        assert set(records) == {"redis", "argilla-server", "argilla-worker", "prefect-server", "portal",
                                "prefect-worker", "caddy"}
        worker = records["prefect-worker"]
        assert worker["term_signals"] == 2 and _cmdline(worker["pid"])[-6:-2] == ["--pool", "crowdpref", "--type", "process"]

        # a worker that died is started again by `up`, like any service
        os.killpg(worker["pid"], signal.SIGKILL)
        assert _wait(lambda: group_members(worker["pid"]) == [], 10)
        assert _health(run_cli(cli_env, "status").stdout, "prefect-worker") == "stopped"
        revived = run_cli(cli_env, "up")
        assert revived.returncode == 0, revived.stderr + revived.stdout
        worker = json.loads((state / "run" / "prefect-worker.json").read_text())
        assert worker["pid"] != records["prefect-worker"]["pid"]
        records["prefect-worker"] = worker

        # a flow run against both services, recorded by the embedded Prefect server
        smoke = run_cli(cli_env, "smoke")
        assert smoke.returncode == 0, smoke.stderr + smoke.stdout
        api = f"http://127.0.0.1:{cli_env['CROWDPREF_PREFECT_PORT']}/api"
        runs = httpx.post(f"{api}/flow_runs/filter", json={"limit": 10}, timeout=10).json()
        assert [(run["name"] != "", run["state_type"]) for run in runs] == [(True, "COMPLETED")]
        assert any((state / "prefect" / "results").iterdir()), "task results are not persisted in the state folder"
        for secret in (creds["password"], creds["api_key"]):
            assert secret not in smoke.stdout + smoke.stderr

        # deployments registered; deploy keeps the worker `up` started (no second one), which
        # polls the pool, so every deployment is Ready; down must stop it (it needs two SIGTERMs)
        deployed = run_cli(cli_env, "deploy")
        assert deployed.returncode == 0, deployed.stderr + deployed.stdout
        assert "study/study" in deployed.stdout
        assert f"worker already running (pid {worker['pid']})" in deployed.stdout, deployed.stdout
        status = run_cli(cli_env, "status")
        assert status.returncode == 0 and _health(status.stdout, "prefect-worker") == "healthy", status.stdout
        assert json.loads((state / "run" / "prefect-worker.json").read_text())["pid"] == worker["pid"]
        assert len(_worker_processes(state)) == 1

        def not_ready() -> dict[str, str]:
            deployments = httpx.post(f"{api}/deployments/filter", json={}, timeout=15).json()
            assert len(deployments) == len(yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"])
            return {d["name"]: d["status"] for d in deployments if d["status"] != "READY"}

        assert _wait(lambda: not not_ready(), 90), f"deployments not Ready: {not_ready()}"
        pool = httpx.get(f"{api}/work_pools/crowdpref", timeout=15).json()
        assert pool["status"] == "READY", pool
    finally:
        stopped = run_cli(cli_env, "down")
    assert stopped.returncode == 0, stopped.stderr
    assert "prefect-worker" in stopped.stdout
    for name, record in records.items():
        assert group_members(record["pid"]) == [], f"{name} left processes behind"
    assert _worker_processes(state) == [], "down left a Prefect worker running"
    for port in ("CROWDPREF_ARGILLA_PORT", "CROWDPREF_PREFECT_PORT", "CROWDPREF_REDIS_PORT", "CROWDPREF_PORTAL_PORT",
                 "CROWDPREF_SITE_PORT"):
        assert not port_in_use("127.0.0.1", int(cli_env[port])), port
    assert list((state / "run").glob("*.json")) == []
    after = run_cli(cli_env, "status")
    assert after.returncode == 1 and "healthy" not in after.stdout.replace("unhealthy", "")


def _health(table: str, name: str) -> str:
    """The health cell of service ``name`` in the ``status`` table (first line of its row)."""
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip("│┃ ").split("│")]
        if cells and cells[0] == name:
            return cells[-1]
    raise AssertionError(f"no {name} row in:\n{table}")


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def _worker_processes(state: Path) -> list[int]:
    """Live `prefect worker start` processes whose CROWDPREF_HOME is this test's state folder."""
    found = []
    for entry in Path("/proc").iterdir():
        argv = _cmdline(int(entry.name)) if entry.name.isdigit() else []
        if not any(argv[i:i + 3] == ["worker", "start", "--pool"] for i in range(len(argv))):
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"CROWDPREF_HOME={state}".encode() in environ and _proc_live(int(entry.name)):
            found.append(int(entry.name))
    return found


def _proc_live(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def _wait(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(1.0)
    return condition()


def test_up_refuses_a_port_taken_by_someone_else(cli_env):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", int(cli_env["CROWDPREF_PREFECT_PORT"])))
        squatter.listen()
        result = run_cli(cli_env, "up", "--only", "prefect")
    assert result.returncode == 1
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1
    assert cli_env["CROWDPREF_PREFECT_PORT"] in message and "CROWDPREF_PREFECT_PORT" in message
    assert "Traceback" not in result.stderr


def test_bad_settings_are_one_line_exit_2(cli_env):
    cli_env["CROWDPREF_REDIS_PORT"] = "not-a-port"
    result = run_cli(cli_env, "status")
    assert result.returncode == 2
    assert "CROWDPREF_REDIS_PORT" in result.stderr and "Traceback" not in result.stderr


def test_up_restarts_the_portal_when_its_settings_changed(cli_env):
    state = Path(cli_env["CROWDPREF_HOME"])
    record_file = state / "run" / "portal.json"
    first_token, second_token = "prolific-first-" + "a" * 24, "prolific-second-" + "b" * 24

    def portal_environment(pid: int) -> dict[str, str]:
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        return dict(item.decode().split("=", 1) for item in raw if b"=" in item)

    try:
        started = run_cli({**cli_env, "PROLIFIC_TOKEN": first_token}, "up", "--only", "portal")
        assert started.returncode == 0, started.stderr + started.stdout
        first = json.loads(record_file.read_text())
        assert portal_environment(first["pid"])["CROWDPREF_PROLIFIC_TOKEN"] == first_token
        same = run_cli({**cli_env, "PROLIFIC_TOKEN": first_token}, "up", "--only", "portal")
        assert same.returncode == 0 and json.loads(record_file.read_text())["pid"] == first["pid"]  # unchanged: kept
        assert "restarted" not in same.stdout

        changed = {**cli_env, "PROLIFIC_TOKEN": second_token, "CROWDPREF_PORTAL_URL": "https://study.example.org",
                   "CROWDPREF_ARGILLA_PUBLIC_URL": "https://study.example.org"}  # one origin behind a proxy
        again = run_cli(changed, "up", "--only", "portal")
        assert again.returncode == 0, again.stderr + again.stdout
        assert "participant portal restarted: its settings" in again.stdout  # said in one line
        second = json.loads(record_file.read_text())
        assert second["pid"] != first["pid"] and group_members(first["pid"]) == []  # restarted, the old one gone
        environment = portal_environment(second["pid"])
        assert environment["CROWDPREF_PROLIFIC_TOKEN"] == second_token
        assert environment["CROWDPREF_PORTAL_URL"] == "https://study.example.org"
        assert httpx.get(f"http://127.0.0.1:{cli_env['CROWDPREF_PORTAL_PORT']}/healthz", timeout=10).status_code == 200
        for record in (first, second):  # the pid record holds a salted hash, never a token
            assert first_token not in json.dumps(record) and second_token not in json.dumps(record)
            assert len(record["settings_hash"]) == 64
        assert first_token not in record_file.read_text() and second_token not in record_file.read_text()
    finally:
        stopped = run_cli(cli_env, "down")
    assert stopped.returncode == 0, stopped.stderr
    assert not port_in_use("127.0.0.1", int(cli_env["CROWDPREF_PORTAL_PORT"]))
