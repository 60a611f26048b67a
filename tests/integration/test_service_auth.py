"""The real services behind tests/unit/test_service_auth.py: Redis started by crowdpref refuses a
client without its password (and never shows it on its command line, in its pid record or its
log), ``crowdpref up`` restarts a Redis an older crowdpref started without one, and Prefect's API,
built from the environment crowdpref gives the public profile's server, refuses a request without
the auth string that every client's environment carries. Cheap: one redis-server each, and
Prefect's API app in this process (a whole Prefect server costs ~11 s of CPU; `crowdpref up` on
the public profile, tests/integration/test_public_postgres.py, starts Argilla only)."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path

import httpx

from services import redis, stack
from services.argilla import service as argilla
from services.prefect import service as prefect
from services.process import ProcessManager, ServiceSpec, group_members, redis_command
from tests.conftest import isolated_settings


def test_redis_refuses_a_client_without_its_password_which_no_command_line_or_log_shows(tmp_path):
    settings = isolated_settings(tmp_path / "home")
    manager = ProcessManager(settings.state_dir)
    try:
        running = manager.start(redis.spec(settings), settings.host)
        password = redis.password(settings)
        assert redis_command(settings.host, settings.redis_port, "PING") == b"-NOAUTH Authentication required."
        assert redis_command(settings.host, settings.redis_port, "SCARD", "rq:workers").startswith(b"-NOAUTH")
        assert redis_command(settings.host, settings.redis_port, "PING", password="0" * 64).startswith(b"-WRONGPASS")
        assert redis_command(settings.host, settings.redis_port, "PING", password=password) == b"+PONG"
        assert redis.healthy(settings) and redis.command(settings, "SCARD", "rq:workers") == b":0"
        assert password not in Path(f"/proc/{running.pid}/cmdline").read_text()
        assert password not in manager.record_path(redis.NAME).read_text()
    finally:
        manager.stop(redis.NAME, timeout_s=5)
    log = manager.log_path(redis.NAME).read_text()
    assert "Ready to accept connections" in log and password not in log


def test_up_restarts_redis_started_without_its_password_and_argilla_with_it(tmp_path, monkeypatch):
    """An older crowdpref's Redis ran without a password (and without a settings hash in its pid
    record): ``up`` starts it again with one, and stops Argilla's server and worker, which hold
    the old Redis URL, so they start again with the new one."""
    settings = isolated_settings(tmp_path / "home")
    manager = ProcessManager(settings.state_dir)
    old = ServiceSpec(redis.NAME, [redis.find_redis_binary(settings), "--bind", settings.host, "--port",
                                   str(settings.redis_port), "--save", "", "--dir", str(tmp_path)],
                      {"PATH": "/usr/bin:/bin"}, health=lambda: True, port=settings.redis_port)
    stand_in = {"PATH": os.environ["PATH"]}
    started_server: list[bool] = []
    monkeypatch.setattr(argilla, "start_server",
                        lambda settings, manager, prepare_first: started_server.append(prepare_first))
    monkeypatch.setattr(argilla, "worker_spec",
                        lambda settings: ServiceSpec(argilla.WORKER, ["sleep", "60"], stand_in, health=lambda: True))
    try:
        first = manager.start(old, settings.host)
        server = manager.start(ServiceSpec(argilla.SERVER, ["sleep", "60"], stand_in, health=lambda: True), settings.host)
        worker = manager.start(ServiceSpec(argilla.WORKER, ["sleep", "60"], stand_in, health=lambda: True), settings.host)
        notes: list[str] = []
        stack.up(settings, components=["argilla"], on_note=notes.append)
        restarted = manager.running(redis.NAME)
        assert restarted is not None and restarted.pid != first.pid and redis.healthy(settings)
        assert notes == [("redis restarted with its password (secrets/redis-password); the Argilla server and worker "
                          "restart with it")]
        assert manager.running(argilla.SERVER) is None and not group_members(server.pid)
        assert started_server == [True]  # started again (migrated and owned first, as a first start)
        again = manager.running(argilla.WORKER)
        assert again is not None and again.pid != worker.pid
        # the next `up` changes nothing
        stack.up(settings, components=["argilla"], on_note=notes.append)
        assert manager.running(redis.NAME).pid == restarted.pid and len(notes) == 1
    finally:
        for name in (argilla.WORKER, argilla.SERVER, redis.NAME):
            manager.stop(name, timeout_s=5)


def test_prefects_api_refuses_a_request_without_the_auth_string_every_client_sends(tmp_path, monkeypatch):
    """Prefect's own settings, read from the environments crowdpref gives its server and a client
    (the worker's), hold the same auth string; the API app Prefect builds from the server's answers
    401 without it and 200 with the header crowdpref's and Prefect's clients send; its health
    check stays open, and its UI asks for it (``auth: BASIC`` in the UI settings: a login page)."""
    from prefect.server.api.server import create_api_app
    from prefect.settings import Settings as PrefectSettings
    from prefect.settings import temporary_settings

    from deployments import deploy

    for name in ("PREFECT_API_AUTH_STRING", prefect.SERVER_AUTH, "PREFECT_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    settings = isolated_settings(tmp_path / "home", public_url="https://study.example.org")
    auth = prefect.ensure_auth_string(settings)
    server_env = {k: v for k, v in prefect.spec(settings).env.items() if k.startswith("PREFECT_")}
    worker_env = {k: v for k, v in deploy.worker_spec(settings).env.items() if k.startswith("PREFECT_")}
    with monkeypatch.context() as env:
        for key, value in server_env.items():
            env.setenv(key, value)
        server = PrefectSettings()
    with monkeypatch.context() as env:
        for key, value in worker_env.items():
            env.setenv(key, value)
        client = PrefectSettings()
    assert server.server.api.auth_string.get_secret_value() == auth
    assert client.api.auth_string.get_secret_value() == auth and client.api.url == settings.prefect_url
    with temporary_settings(updates={"server.api.auth_string": auth}):  # type: ignore[dict-item]
        app = create_api_app(ignore_cache=True)
    with deploy._client(settings) as ours:
        header = ours.headers["Authorization"]
    assert header == "Basic " + base64.b64encode(auth.encode()).decode()

    async def answers() -> dict[str, int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://prefect") as http:
            return {
                "without": (await http.get("/admin/version")).status_code,
                "wrong": (await http.get("/admin/version", auth=("crowdpref", "wrong"))).status_code,
                "with": (await http.get("/admin/version", headers={"Authorization": header})).status_code,
                "health": (await http.get("/health")).status_code,
            }

    assert asyncio.run(answers()) == {"without": 401, "wrong": 401, "with": 200, "health": 200}
