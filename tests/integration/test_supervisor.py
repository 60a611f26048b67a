"""Restarts on the real public profile (each service under its keeper, services/keeper.py):
SIGKILL the portal, then the Argilla server; each is started again by its keeper and healthy
within the stated time, no claim is lost, and a Prolific webhook sent while the portal was down
is retried by the sender (the fake Prolific, which retries a failed delivery with the same
X-Event-ID as Prolific does) and handled once. No process of the stack runs as root where it
should not: as root every keeper and service runs as its own user (here, with the tests'
``CROWDPREF_SERVICE_USERS=off``, PostgreSQL's only).

The stack is the public profile as ``crowdpref up --public`` starts it, in its own state folder
on free ports: Caddy with ``tls internal`` in front (the participants' browsers and the fake's
webhook sender go through it over HTTPS, trusting only Caddy's internal root), Argilla with 2
uvicorn workers on the stack's PostgreSQL, the study store on the same server, the portal, each
under the keeper the profile runs by default; it is stopped at the end, leaving no process."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, free_port

pytestmark = pytest.mark.integration

# the limits this test holds the keepers to (docs/how-to/server.md states what was measured):
# about 1 s before the keeper starts it again, then the service's own start until healthy, on
# a shared 2-core machine
PORTAL_BACK_S = 60.0
ARGILLA_BACK_S = 180.0


@pytest.fixture()
def supervised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The public profile's stack (PostgreSQL, Argilla, the portal, Caddy) started by
    ``stack.up``, each service under its keeper, the fake Prolific as a thread of this process on the port
    the settings name; the environment holds exactly this stack's settings (the flows' helpers
    read it)."""
    from crowdpref.settings import load_settings
    from crowdpref.simulation.prolific_server import FakeProlific
    from services import caddy, postgres, stack

    if shutil.which("caddy") is None:
        pytest.skip("!!! PUBLIC-PROFILE SUPERVISOR TEST SKIPPED: Debian's caddy is missing - run make setup !!!")
    reason = postgres.unavailable_reason()
    if reason:
        pytest.skip(f"!!! PUBLIC-PROFILE SUPERVISOR TEST SKIPPED: no PostgreSQL server: {reason} !!!")
    for name in list(os.environ):
        if name.startswith(("CROWDPREF_", "ARGILLA_", "PREFECT_", "HF_", "OPENAI_", "PROLIFIC_")) and \
                name != "CROWDPREF_SERVICE_USERS":  # the test's user (tests/conftest.py)
            monkeypatch.delenv(name)
    studies = tmp_path / "studies"
    studies.mkdir()
    https = free_port()
    for name, value in {
        "CROWDPREF_HOME": str(tmp_path / "home"), "CROWDPREF_ARGILLA_PORT": str(free_port()),
        "CROWDPREF_PREFECT_PORT": str(free_port()), "CROWDPREF_REDIS_PORT": str(free_port()),
        "CROWDPREF_PORTAL_PORT": str(free_port()), "CROWDPREF_FAKE_PROLIFIC_PORT": str(free_port()),
        "CROWDPREF_ARGILLA_VENV": str(REPO / ".venv-argilla"), "CROWDPREF_PORTAL_STUDIES": str(studies),
        "CROWDPREF_PUBLIC_URL": f"https://localhost:{https}", "CROWDPREF_PUBLIC_TLS": "internal",
        "CROWDPREF_HTTPS_PORT": str(https), "CROWDPREF_HTTP_PORT": str(free_port()),
        "CROWDPREF_POSTGRES_PORT": str(free_port()),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    settings = load_settings()
    assert settings.public and settings.argilla_worker_count == 2
    # Prolific retries a failed delivery up to 12 times over 24 h; the fake's 12 tries, 6 s
    # apart, cover the portal's restart (PORTAL_BACK_S) on a loaded machine. Every event is also
    # sent twice (at-least-once delivery): the portal must handle it once. Its deliveries go
    # through Caddy (HTTPS, Caddy's internal root trusted).
    fake = FakeProlific(port=settings.fake_prolific_port, page_size=5, retry_delay_s=6.0,
                        duplicate_deliveries=True, trust=caddy.internal_root(settings)).start()
    pids: list[int] = []
    try:
        started = time.monotonic()
        rows = stack.up(settings, ["argilla", "portal", "caddy"])  # the public profile keeps them by default
        print(f"public stack with its keepers up in {time.monotonic() - started:.1f} s")
        assert {r.name for r in rows if r.healthy} >= {"postgres", "redis", "argilla-server", "argilla-worker",
                                                        "portal", "caddy"}, rows
        pids = list(stack_processes(settings.pids_dir))
        yield settings, fake, studies
    finally:
        try:
            pids += [pid for pid in stack_processes(settings.pids_dir) if pid not in pids]
        finally:
            stack.down(settings)
            fake.stop()
        from services.process import _is_live

        assert not [pid for pid in pids if _is_live(pid)], "a process of the stack outlived `down`"


def stack_processes(pids_dir: Path) -> dict[int, tuple[str, dict[str, str]]]:
    """Every process of a stack - the process of each pid record in ``pids_dir`` (a keeper) and
    all its descendants - with its service and its ``/proc/PID/status`` fields."""
    import json

    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except (FileNotFoundError, ProcessLookupError):
            continue
        if not stat:
            continue
        children.setdefault(int(stat[stat.rfind(")") + 2:].split()[1]), []).append(int(entry.name))
    found: dict[int, tuple[str, dict[str, str]]] = {}
    for record in pids_dir.glob("*.json"):
        todo = [json.loads(record.read_text())["pid"]]
        while todo:
            pid = todo.pop()
            try:
                lines = Path(f"/proc/{pid}/status").read_text().splitlines()
            except (FileNotFoundError, ProcessLookupError):
                continue
            found[pid] = (record.stem, {k: v.strip() for k, _, v in (line.partition(":") for line in lines)})
            todo += children.get(pid, [])
    return found


def _uids(settings) -> dict[int, tuple[str, list[int]]]:
    """Each process of the stack: its service and user ids (real, effective, saved, file system)."""
    return {pid: (service, [int(word) for word in status["Uid"].split()])
            for pid, (service, status) in stack_processes(settings.pids_dir).items()}


def assert_no_root_where_it_drops(settings) -> None:
    """As root, ``up`` leaves no root process behind it: each keeper runs as its service's user
    (services/keeper.py). Where the services run as their own users (services/privileges.py),
    none of the stack's processes is root; with the tests' ``CROWDPREF_SERVICE_USERS=off`` (the
    checkout's interpreters may be out of other users' reach), PostgreSQL's keeper and server run
    as ``postgres`` (tests/integration/test_keeper_users.py runs the others as their users). There
    is no root supervisor."""
    import pwd

    from services import privileges

    processes = _uids(settings)
    services = {service for service, _ in processes.values()}
    assert {"postgres", "redis", "argilla-server", "argilla-worker", "portal", "caddy"} <= services, processes
    assert "supervisor" not in services
    if os.geteuid() != 0:
        assert all(0 not in uids for _, uids in processes.values()), processes
        return
    dropped = services if privileges.active(settings) else {"postgres"}
    as_root = {pid: (service, uids) for pid, (service, uids) in processes.items() if service in dropped and 0 in uids}
    assert not as_root, f"root processes of services that drop privileges: {as_root}"
    postgres_uid = pwd.getpwnam("postgres").pw_uid
    assert {tuple(uids) for service, uids in processes.values() if service == "postgres"} == {(postgres_uid,) * 4}


def _kill(pid: int, group: bool) -> None:
    if group:
        os.killpg(os.getpgid(pid), signal.SIGKILL)
    else:
        os.kill(pid, signal.SIGKILL)


def _back(settings, name: str, old_pid: int, healthy, limit_s: float) -> float:
    """Seconds until ``name`` runs as a new process and answers its health check."""
    from services.process import ProcessManager

    manager = ProcessManager(settings.state_dir)
    killed = time.monotonic()
    while time.monotonic() - killed < limit_s:
        running = manager.running(name)
        if running is not None and running.pid != old_pid and healthy():
            return time.monotonic() - killed
        time.sleep(0.25)
    log = settings.logs_dir / f"{name}.log"
    logs = f"--- {name}.log:\n" + log.read_text(errors="replace")[-1500:] if log.exists() else ""
    raise AssertionError(f"{name} was not back and healthy within {limit_s:.0f} s\n{logs}")


def test_killed_services_come_back_with_no_claim_or_webhook_lost(supervised, unique):
    from crowdpref.config import load_study
    from crowdpref.prolific import ProlificClient
    from crowdpref.recruitment import ensure_prolific_study, setup_webhooks
    from crowdpref.runfolder import write_parquet
    from crowdpref.simulation.arrivals import ProlificDoor
    from crowdpref.studies import open_collection
    from services import caddy, portal
    from services.argilla import service as argilla
    from services.process import ProcessManager
    from tests.integration.test_study1_collection import _questions

    settings, fake, studies = supervised
    manager = ProcessManager(settings.state_dir)
    assert_no_root_where_it_drops(settings)
    name = f"sup{unique}"
    study = studies / f"{name}.yaml"
    study.write_text(yaml.safe_dump({
        "name": name, "seed": 5, "participants": "simulated",
        "questions": {"categories": ["empathy", "ethics"], "per_category": 3},
        "study1": {"responses_per_question": 2, "questions_per_participant": 3, "too_fast_seconds": 0},
        "study2": {"ratings_per_pair": 3, "pairs_per_participant": 6},
        "screening": {"fallback": "profanity-check"},
        "prolific": {"auto_approve": True, "study1": {"places": 4}},
    }))
    write_parquet(_questions(), settings.runs_dir / name / "questions.parquet")
    collection = open_collection(str(study), "study1")
    config = load_study(study)
    store = collection.store
    cid = collection.info.id
    with ProlificClient(fake.base_url, fake.token) as client:
        ensure_prolific_study(collection, config, settings, client)
        setup_webhooks(settings, store, client, "workspace", force=True)
        door = ProlificDoor(collection, config.seed, settings.portal_public_url, client, fake.app_url,
                            verify=str(caddy.internal_root(settings)))  # the browsers reach the portal through Caddy
        try:
            first = door.arrive("sim-study1-0001")
            assert first is not None and len(first.participant.held) == 3

            # 1. the portal dies; a participant returns the study while it is down
            old = manager.running(portal.NAME).pid
            _kill(old, group=False)
            assert door.leave("sim-study1-0001", "return")
            portal_s = _back(settings, portal.NAME, old, lambda: portal.healthy(settings), PORTAL_BACK_S)
            print(f"portal SIGKILLed: back and healthy after {portal_s:.1f} s")
            assert fake.wait_for_deliveries(timeout=120)
            attempts = [d for d in fake.deliveries if d[1] == "RETURNED"]
            # the first delivery met the dead portal: Caddy's 502 (its upstream refused the connection)
            assert attempts[0][3] == 502, attempts
            assert attempts[-1][3] is not None and 200 <= attempts[-1][3] < 300, attempts
            assert len({d[0] for d in attempts}) == 1, "one event, retried under the same X-Event-ID"
            assert sum(d[3] is not None and 200 <= d[3] < 300 for d in attempts) == 2, "both copies answered"

            def handled() -> list[dict]:
                return [d for d in store.deliveries("prolific") if d["event_id"] == attempts[0][0]]

            deadline = time.monotonic() + 30  # the release runs after the reply, then the delivery is done
            while [d["state"] for d in handled()] != ["done"] and time.monotonic() < deadline:
                time.sleep(0.25)
            after = store.participant(cid, first.participant.username)
            assert after.status == "released" and after.release_reason.startswith("RETURNED"), after
            handled = handled()
            assert len(handled) == 1 and handled[0]["state"] == "done", handled
            assert [e["participant_id"] for e in store.events(cid, kinds=["released"])] == [after.id]

            # a claim made after the restart, through the new portal process
            second = door.arrive("sim-study1-0002")
            assert second is not None and len(second.participant.held) == 3
            held = set(second.participant.held)

            # 2. the Argilla server dies (its whole process group)
            old = manager.running(argilla.SERVER).pid
            _kill(old, group=True)
            argilla_s = _back(settings, argilla.SERVER, old, lambda: argilla.server_healthy(settings), ARGILLA_BACK_S)
            print(f"argilla-server SIGKILLed: back and healthy after {argilla_s:.1f} s")

            # no claim lost: the second participant still holds the same work, and comes back to it
            assert set(store.participant(cid, second.participant.username).held) == held
            again = door.come_back("sim-study1-0002")
            assert again is not None and again.participant.username == second.participant.username
            assert set(again.participant.held) == held
            # and a new arrival claims (a new Argilla account) on the restarted server
            third = door.arrive("sim-study1-0003")
            assert third is not None and len(third.participant.held) == 3
            # every slot accounted for: 6 questions x 2 answers; the first person's 3 went back
            progress = collection.progress()
            assert (progress.outstanding, progress.unclaimed) == (6, 6), progress
        finally:
            door.close()
    assert_no_root_where_it_drops(settings)  # the services started again too
    # each keeper said it in its service's log
    assert "crowdpref-keeper: portal died (killed by SIGKILL)" in (settings.logs_dir / "portal.log").read_text()
    assert "crowdpref-keeper: argilla-server died (killed by SIGKILL)" in \
        (settings.logs_dir / "argilla-server.log").read_text()
