"""Redis's password (every profile) and the Prefect API's auth string (the public profile): where
each secret lives, which processes get it (and which never do), and what ``crowdpref up`` does
with a service started without it - without starting Argilla or Prefect (sleep processes stand in
for them). The real Redis refusing a client without its password, and Prefect's API refusing a
request without the auth string, are tests/integration/test_service_auth.py."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from crowdpref.errors import StateFileError
from deployments import deploy
from services import portal, redis, stack
from services.argilla import service as argilla
from services.prefect import service as prefect
from services.process import ProcessManager, ServiceSpec, group_members
from tests.conftest import isolated_settings


@pytest.fixture(autouse=True)
def _no_auth_from_the_environment(monkeypatch):
    for name in ("PREFECT_API_AUTH_STRING", prefect.SERVER_AUTH, "PREFECT_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _public(tmp_path: Path):
    return isolated_settings(tmp_path / "home", public_url="https://study.example.org")


def _private(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700


# --- Redis ----------------------------------------------------------------------------------------------
def test_redis_gets_its_password_from_a_private_file_and_argilla_in_its_url_never_on_a_command_line(tmp_path):
    settings = isolated_settings(tmp_path / "home")
    spec = redis.spec(settings)
    password = redis.password_file(settings).read_text()
    assert len(password) == 64 and _private(redis.password_file(settings))
    conf = redis.config_file(settings)
    assert conf.parent == settings.secrets_dir and _private(conf)
    assert f"\nrequirepass {password}\n" in conf.read_text()
    assert spec.argv[1] == str(conf)  # redis-server's config file, then the options
    assert password not in " ".join(spec.argv) and password not in json.dumps(dict(spec.env))
    assert argilla.env(settings)["ARGILLA_REDIS_URL"] == f"redis://:{password}@{settings.host}:{settings.redis_port}/0"
    assert password not in json.dumps(portal._env(settings))  # the portal never gets it
    # generated once: the same password (and config digest) next time, so `up` leaves Redis running
    again = redis.spec(settings)
    assert redis.password(settings) == password and again.env == spec.env
    # a new password (the file deleted): another digest, so `up` restarts Redis (restart_on_change)
    redis.password_file(settings).unlink()
    renewed = redis.spec(settings)
    assert redis.password(settings) != password and f"requirepass {redis.password(settings)}\n" in conf.read_text()
    assert renewed.env[redis.CONFIG_DIGEST] != spec.env[redis.CONFIG_DIGEST]
    assert renewed.restart_on_change == (redis.CONFIG_DIGEST,)


def test_a_damaged_redis_password_file_is_one_line_naming_it_and_quoting_nothing(tmp_path):
    settings = isolated_settings(tmp_path / "home")
    path = redis.password_file(settings)
    path.parent.mkdir(parents=True)
    path.write_text("not a password at all\n")
    with pytest.raises(StateFileError) as damaged:
        redis.spec(settings)
    message = str(damaged.value)
    assert message.startswith(f"{path}: the embedded Redis's password cannot be read") and "\n" not in message
    assert "not a password" not in message and "crowdpref up" in message
    assert not redis.healthy(settings)  # a health check says no, it does not raise
    assert not argilla.worker_healthy(settings)


# --- the Prefect API's auth string ----------------------------------------------------------------------
def test_the_public_profiles_prefect_auth_string_reaches_the_server_and_every_client_only(tmp_path):
    settings = _public(tmp_path)
    server = prefect.spec(settings)
    path = settings.prefect_auth_string_file
    auth = path.read_text()
    assert path.parent == settings.secrets_dir and _private(path)
    user, secret = auth.split(":", 1)
    assert user == prefect.AUTH_USER and len(secret) == 64
    assert server.env[prefect.SERVER_AUTH] == auth
    worker, serve = deploy.worker_spec(settings), deploy.serve_spec(settings)
    clients = {"the CLI and flows (prefect_env)": settings.prefect_env(), "crowdpref deploy": deploy._env(settings),
               "the worker": worker.env, "a serve process": serve.env, "the server's own clients": server.env}
    for who, env in clients.items():
        assert env.get("PREFECT_API_AUTH_STRING") == auth, who
    assert prefect.SERVER_AUTH not in worker.env  # the server's setting stays the server's
    with deploy._client(settings) as client:  # crowdpref's own HTTP client: basic authentication
        assert client.headers["Authorization"] == "Basic " + base64.b64encode(auth.encode()).decode()
    for spec in (server, worker, serve):
        assert secret not in " ".join(spec.argv)
    assert secret not in json.dumps(portal._env(settings))  # the portal never gets it
    assert prefect.spec(settings).env[prefect.SERVER_AUTH] == auth  # generated once
    assert server.restart_on_change == (prefect.SERVER_AUTH,)


def test_the_laptop_stacks_prefect_takes_no_auth_string(tmp_path):
    settings = isolated_settings(tmp_path / "home")
    server = prefect.spec(settings)
    assert prefect.SERVER_AUTH not in server.env and "PREFECT_API_AUTH_STRING" not in server.env
    assert "PREFECT_API_AUTH_STRING" not in settings.prefect_env()
    assert not settings.prefect_auth_string_file.exists()
    with deploy._client(settings) as client:
        assert "Authorization" not in client.headers
    # a Prefect server elsewhere (PREFECT_API_URL) brings its own credentials: none from us
    elsewhere = _public(tmp_path)
    elsewhere = isolated_settings(elsewhere.home, public_url="https://study.example.org",
                                  prefect_api_url="https://prefect.example.org/api")
    assert "PREFECT_API_AUTH_STRING" not in elsewhere.prefect_env()


def test_a_client_without_a_readable_auth_string_fails_in_one_line(tmp_path):
    settings = _public(tmp_path)
    path = settings.prefect_auth_string_file
    with pytest.raises(StateFileError) as missing:
        settings.prefect_env()
    assert str(missing.value) == (f"{path}: the Prefect API's auth string cannot be read (No such file or directory): "
                                  "run `crowdpref up`: it makes the file when it sets up the Prefect server")
    path.parent.mkdir(parents=True)
    path.write_text("damaged-without-a-colon")
    with pytest.raises(StateFileError) as damaged:
        deploy.worker_spec(settings)
    assert "damaged" in str(damaged.value) and "delete it and run `crowdpref up`" in str(damaged.value)
    assert "without-a-colon" not in str(damaged.value)
    assert not deploy.worker_healthy(settings)  # a health check says no, it does not raise


def test_up_restarts_a_prefect_server_started_without_the_auth_string_and_its_worker(tmp_path, monkeypatch):
    settings = _public(tmp_path)
    manager = ProcessManager(settings.state_dir)
    env = {"PATH": os.environ["PATH"]}

    real_spec = prefect.spec

    def stand_in(settings):  # prefect.spec with a sleep for the server (its auth string and restart rule)
        real = real_spec(settings)
        return ServiceSpec(prefect.NAME, ["sleep", "60"], {**env, prefect.SERVER_AUTH: real.env[prefect.SERVER_AUTH]},
                           health=lambda: True, restart_on_change=real.restart_on_change)

    monkeypatch.setattr(prefect, "spec", stand_in)
    monkeypatch.setattr(stack.postgres, "start_service", lambda settings, manager: None)  # not needed here
    try:
        old = manager.start(ServiceSpec(prefect.NAME, ["sleep", "60"], env, health=lambda: True), settings.host)
        worker = manager.start(ServiceSpec(stack.WORKER, ["sleep", "60"], env, health=lambda: True), settings.host)
        notes: list[str] = []
        stack.up(settings, components=["prefect"], on_note=notes.append, supervise=False)
        assert manager.running(prefect.NAME).pid != old.pid
        assert manager.running(stack.WORKER) is None and not group_members(worker.pid)
        assert notes == [("prefect server restarted with this profile's API authentication (its auth string in "
                          "secrets/prefect-auth-string); the prefect worker restarts with it")]
        current = manager.running(prefect.NAME).pid
        stack.up(settings, components=["prefect"], on_note=notes.append, supervise=False)
        assert manager.running(prefect.NAME).pid == current and len(notes) == 1  # same auth string: left running
    finally:
        for name in (stack.WORKER, prefect.NAME):
            manager.stop(name, timeout_s=5)
