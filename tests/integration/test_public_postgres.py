"""The public profile's production Argilla: PostgreSQL as a service of the stack and
argilla-server with 2 uvicorn workers on it, from a fresh state folder inside a 0700 folder
(``public_argilla`` in tests/conftest.py). As root, the server then runs as ``postgres`` with its
folder in /var/lib/crowdpref/<hash>."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest

from crowdpref.store import open_store
from services import postgres, redis, stack
from services.argilla import service as argilla
from services.process import ProcessManager, group_members

pytestmark = pytest.mark.integration


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    """Every live process whose parent is ``pid`` (PostgreSQL's children leave its session)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
                found.append(int(entry.name))
    return found


def _stack_pids(settings) -> set[int]:
    """Every process of the running stack: each service's process group, and the postmaster's
    children (checkpointer, backends...), which PostgreSQL puts in sessions of their own."""
    manager = ProcessManager(settings.state_dir)
    pids: set[int] = set()
    for name in stack.SERVICE_NAMES:
        running = manager.running(name)
        if running is not None:
            pids.update(group_members(os.getpgid(running.pid)))
    postmaster = int((postgres.data_folder(settings) / "data" / "postmaster.pid").read_text().split()[0])
    pids.add(postmaster)
    pids.update(_children(postmaster))
    return pids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _connect(settings, role: str, database: str, password: str | None = None) -> psycopg.Connection:
    return psycopg.connect(host=settings.host, port=settings.postgres_port, user=role, dbname=database,
                           password=password if password is not None else postgres.role_password(settings, role),
                           connect_timeout=10)


def _owner_token(public_argilla) -> str:
    creds = public_argilla.settings.owner_credentials()
    response = httpx.post(f"{public_argilla.api_url}/api/v1/token",
                          data={"username": creds["username"], "password": creds["password"]}, timeout=60)
    assert response.status_code == 201, response.text
    return response.json()["access_token"]


def test_argilla_runs_two_workers_on_the_stacks_postgresql(public_argilla):
    settings = public_argilla.settings
    rows = {row.name: row for row in stack.status(settings)}
    for name in (postgres.NAME, "redis", argilla.SERVER, argilla.WORKER):
        assert rows[name].healthy, f"{name} is not healthy: {rows[name]}"

    manager = ProcessManager(settings.state_dir)
    server = manager.running(argilla.SERVER)
    workers = [pid for pid in group_members(os.getpgid(server.pid)) if "spawn_main" in _cmdline(pid)]
    assert len(workers) == 2, [_cmdline(pid) for pid in group_members(os.getpgid(server.pid))]

    # one sign-in, then requests on fresh connections land on either worker: every one accepts the
    # token, because both share the signing key of secrets/argilla-auth-secret
    token = _owner_token(public_argilla)
    for _ in range(16):
        with httpx.Client(timeout=60) as client:  # a new connection each time
            me = client.get(f"{public_argilla.api_url}/api/v1/me", headers={"Authorization": f"Bearer {token}"})
        assert me.status_code == 200, me.text

    # what Argilla writes lands in the database `argilla` on the stack's server
    name = f"pg-{uuid.uuid4().hex[:8]}"
    created = httpx.post(f"{public_argilla.api_url}/api/v1/workspaces", json={"name": name}, timeout=60,
                         headers={"X-Argilla-Api-Key": public_argilla.owner_api_key})
    assert created.status_code == 201, created.text
    with _connect(settings, "argilla", "argilla") as conn:
        assert conn.execute("SELECT count(*) FROM workspaces WHERE name = %s", (name,)).fetchone()[0] == 1

    # the study store's default is the database `crowdpref` on the same server
    store = open_store(settings)
    try:
        assert store.dialect == "postgresql"
        assert store.engine.url.database == "crowdpref" and store.engine.url.port == settings.postgres_port
    finally:
        store.close()


def test_roles_sign_in_with_their_own_password_to_their_own_database_only(public_argilla):
    settings = public_argilla.settings
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        _connect(settings, "argilla", "argilla", password="not-the-password").close()
    with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
        _connect(settings, "argilla", "crowdpref").close()
    with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
        _connect(settings, "crowdpref", "argilla").close()
    with _connect(settings, "crowdpref", "crowdpref") as conn:
        assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0] is False
    with _connect(settings, "postgres", "postgres") as conn:  # the server keeps SCRAM verifiers only
        stored = dict(conn.execute("SELECT rolname, rolpassword FROM pg_authid WHERE rolcanlogin").fetchall())
    assert set(stored) == {"postgres", "argilla", "crowdpref"}
    assert all(value.startswith("SCRAM-SHA-256$") for value in stored.values())


def test_secrets_stay_private_and_out_of_every_log(public_argilla):
    settings = public_argilla.settings
    passwords = [postgres.role_password(settings, role) for role in ("postgres", "argilla", "crowdpref")]
    passwords.append(redis.password(settings))  # Argilla's server and worker have it in their Redis URL
    for path in [*(postgres.password_file(settings, role) for role in ("postgres", "argilla", "crowdpref")),
                 redis.password_file(settings), redis.config_file(settings)]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    logs = [path for path in settings.logs_dir.iterdir() if path.is_file()]
    assert {"postgres.log", "redis.log", "argilla-server.log", "argilla-worker.log"} <= {path.name for path in logs}
    for path in logs:
        text = path.read_text(errors="replace")
        assert not any(password in text for password in passwords), f"a database or Redis password is in {path}"


def test_data_folder_is_where_the_postgres_user_can_reach_it(public_argilla):
    settings = public_argilla.settings
    folder = postgres.data_folder(settings)
    assert (folder / "data" / "PG_VERSION").exists()
    if postgres._is_root():
        closed = not postgres.server_user_can_enter(settings.state_dir)
        assert closed  # the fixture's state folder is inside a 0700 mkdtemp folder
        assert folder == postgres.system_folder(settings.state_dir)
        assert postgres.location_record(settings).read_text().strip() == str(folder)
        assert folder.stat().st_uid == postgres.pwd.getpwnam("postgres").pw_uid
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    else:
        assert folder == settings.state_dir / "postgres"


def test_down_leaves_no_process_and_up_finds_the_data_again(public_argilla):
    """Last of this module: ``down`` stops every process of the stack (PostgreSQL's children
    included), then ``up`` on the same state folder serves what was written before."""
    settings = public_argilla.settings
    name = f"keep-{uuid.uuid4().hex[:8]}"
    created = httpx.post(f"{public_argilla.api_url}/api/v1/workspaces", json={"name": name}, timeout=60,
                         headers={"X-Argilla-Api-Key": public_argilla.owner_api_key})
    assert created.status_code == 201, created.text
    pids = _stack_pids(settings)
    assert len(pids) >= 8  # postgres + its children, redis, argilla's parent and 2 workers, the rq worker

    stopped = stack.down(settings)
    assert stopped[-1] == postgres.NAME and argilla.SERVER in stopped
    assert [pid for pid in pids if _alive(pid)] == []
    assert "database system is shut down" in (settings.logs_dir / "postgres.log").read_text()
    assert not postgres.healthy(settings)

    # a lost role password is made again by `up` and set on the server
    lost = postgres.password_file(settings, "crowdpref")
    old_password = lost.read_text()
    lost.unlink()
    stack.up(settings, components=["argilla"], supervise=False)  # the session's later tests use it again
    assert lost.read_text() != old_password
    store = open_store(settings)
    store.close()
    listed = httpx.get(f"{public_argilla.api_url}/api/v1/me/workspaces", timeout=60,
                       headers={"X-Argilla-Api-Key": public_argilla.owner_api_key})
    assert listed.status_code == 200 and name in [item["name"] for item in listed.json()["items"]]


def test_argillas_worker_delivers_every_response_webhook_on_postgresql(public_argilla, tmp_path):
    """A participant submits through the public profile's Argilla; its worker delivers each
    response event to the portal (the store sees the answers and the participant complete without
    a read of Argilla), and the worker's log holds no failed job. rq ran each async job on an event
    loop of its own while Argilla's database pool kept the asyncpg connections of the first loop:
    13 of 14 jobs failed ("attached to a different loop", "another operation is in progress")."""
    from crowdpref.argilla_client import ArgillaOwner
    from crowdpref.config import parse_study
    from crowdpref.portal.app import create_app
    from crowdpref.portal.service import Portal
    from crowdpref.store import COMPLETE, Store
    from crowdpref.study1 import study1_collection
    from tests.conftest import isolated_settings
    from tests.integration.test_argilla_webhooks import _claim, _submit, _wait_for
    from tests.integration.test_study1_collection import _questions
    from tests.portal_server import PortalThread

    api = public_argilla.api_url
    config = parse_study({"name": f"pg{uuid.uuid4().hex[:8]}", "seed": 5, "participants": "invite",
                          "study1": {"responses_per_question": 2, "questions_per_participant": 3, "pool_size": 0},
                          "study2": {"pairs_per_participant": 6}}, source="test")
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    owner = ArgillaOwner(api, public_argilla.owner_api_key)
    collection = study1_collection(config, _questions(), owner, tmp_path / "run", store)
    settings = isolated_settings(tmp_path / "home", argilla_url=api, argilla_api_key=public_argilla.owner_api_key,
                                 portal_studies=tmp_path)
    settings = settings.model_copy(update={"portal_url": f"http://127.0.0.1:{settings.portal_port}"})  # no Caddy
    portal = Portal(settings, store, open_collection=lambda path, key: collection)
    log = ProcessManager(public_argilla.settings.state_dir).log_path(argilla.WORKER)
    with PortalThread(create_app(portal), port=settings.portal_port):
        webhook_id = portal.register_argilla_webhook(owner)
        try:
            claimed = _claim(collection, "inv-pg")
            username = claimed.participant.username
            first = _submit(api, claimed, collection.dataset_name, 1, owner.passwords(username))
            _wait_for(lambda: list(store.participant(collection.info.id, username).submitted) == first,
                      "the first answer in the store, through the webhook")
            rest = _submit(api, claimed, collection.dataset_name, 3, owner.passwords(username))
            _wait_for(lambda: store.participant(collection.info.id, username).status == COMPLETE,
                      "the participant complete in the store, through the webhooks")
            assert sorted(store.participant(collection.info.id, username).submitted) == sorted(first + rest)
        finally:
            owner.delete_webhook(webhook_id)
            owner.close()
    worker_log = log.read_text(errors="replace")
    assert "Job OK" in worker_log or "Successfully completed" in worker_log, worker_log[-2000:]
    failed = [line for line in worker_log.splitlines() if "Traceback" in line or " failed" in line.lower()
              or "Error" in line]
    assert not failed, "\n".join(failed[:10])
