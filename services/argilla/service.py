"""The embedded Argilla: argilla-server 2.8 from its own virtualenv, crowdpref's SQL-backed search
engine (``sql_search_engine.py``), one rq worker. Its database: SQLite under the state folder with
one server process (the laptop stack); in the public profile (``settings.public``) the database
``argilla`` on the stack's PostgreSQL (``services/postgres.py``, as the role ``argilla``) with
``settings.argilla_worker_count`` uvicorn worker processes (:func:`server_argv`), which share the
token-signing key of :func:`auth_secret`.

The owner account is generated on first start (random password and API key), kept in
``<state>/secrets/argilla-owner.json`` (mode 0600) and never printed in full.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Callable
from pathlib import Path

from crowdpref.errors import CrowdprefError, ServiceError, state_file_error
from crowdpref.portal import argilla_session
from crowdpref.runfolder import write_json, write_text
from crowdpref.settings import Settings
from crowdpref.tls import shared_context
from services import postgres, redis
from services.process import ProcessManager, ServiceSpec, http_ok

TEST_BCRYPT_ROUNDS = "CROWDPREF_TEST_BCRYPT_ROUNDS"  # launch.py's (test stacks only; unset in production)

SERVER = "argilla-server"
WORKER = "argilla-worker"
ENGINE_NAME = "crowdpref-sql"
OWNER_USERNAME = argilla_session.OWNER_USERNAME
LAUNCHER = Path(__file__).with_name("launch.py")
LAUNCHER_PROBLEM = "crowdpref: "  # launch.PROBLEM_PREFIX: a secret-free line for the operator
PREPARE_OPTION = "--crowdpref-prepare"  # launch.PREPARE_OPTION


def server_python(settings: Settings) -> Path:
    python = settings.argilla_venv.expanduser().resolve() / "bin" / "python"
    if not python.exists():
        raise ServiceError(
            f"{python}: the argilla-server virtualenv is missing: run `make setup` "
            "(or set CROWDPREF_ARGILLA_VENV to an existing one)"
        )
    return python


def env(settings: Settings) -> dict[str, str]:
    home = settings.argilla_home
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ARGILLA_HOME_PATH": str(home),
        "ARGILLA_DATABASE_URL": database_url(settings),
        "ARGILLA_REDIS_URL": redis.url(settings),  # with Redis's password (services/redis.py)
        "ARGILLA_SEARCH_ENGINE": ENGINE_NAME,
        "ARGILLA_ENABLE_TELEMETRY": "0",
        "ARGILLA_AUTH_SECRET_KEY": auth_secret(settings),
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "DO_NOT_TRACK": "1",
        # test stacks only (tests/conftest.py): a cheap bcrypt cost, see launch.py's TEST_BCRYPT_ROUNDS
        **({TEST_BCRYPT_ROUNDS: os.environ[TEST_BCRYPT_ROUNDS]} if os.environ.get(TEST_BCRYPT_ROUNDS) else {}),
    }


def database_url(settings: Settings) -> str:
    """``ARGILLA_DATABASE_URL``: the stack's PostgreSQL in the public profile (its password read
    from ``secrets/postgres-argilla``, which ``crowdpref up`` makes), else SQLite in Argilla's home."""
    if settings.public:
        return postgres.argilla_database_url(settings)
    return f"sqlite+aiosqlite:///{settings.argilla_home / 'argilla.db'}"


def auth_secret(settings: Settings) -> str:
    """Argilla's token-signing key (``ARGILLA_AUTH_SECRET_KEY``), generated once into the secrets
    folder and kept across restarts, so browser sessions survive `down`/`up`; every Argilla worker
    process shares it, and the portal signs Argilla sessions with it."""
    path = settings.secrets_dir / "argilla-auth-secret"
    if not path.exists():
        write_text(secrets.token_hex(32), path, private=True)
    try:
        secret = path.read_text(encoding="utf-8").strip()
        if not secret:
            raise ValueError("empty")
    except (OSError, ValueError) as exc:  # a new key only logs browsers out: safe to recreate
        raise state_file_error(path, "the Argilla token-signing key", exc,
                               "delete it and run `crowdpref up` (a new key is made; browsers sign in again)") from None
    return secret


def _new_owner_credentials() -> dict[str, str]:
    return {
        "username": OWNER_USERNAME,
        "password": secrets.token_urlsafe(20),
        "api_key": "crowdpref.apikey." + secrets.token_urlsafe(24),
    }


def check_secrets(settings: Settings) -> None:
    """Read what Argilla's start reads from the state folder (its token key, Redis's password and,
    in the public profile, the password of its PostgreSQL role), so that a damaged file stops ``crowdpref up``
    in one line before anything starts. The role's password is not there yet on a fresh state
    folder: ``up`` makes it when it provisions PostgreSQL, so a missing one is left to ``up``."""
    auth_secret(settings)
    redis.password(settings)
    if settings.public and postgres.password_file(settings, postgres.ARGILLA_ROLE).exists():
        database_url(settings)


def ensure_owner_credentials(settings: Settings) -> dict[str, str]:
    """The owner's credentials, generated once (random, not a fixed default)."""
    path = settings.owner_credentials_file
    if not path.exists():
        write_json(_new_owner_credentials(), path, private=True)
    return settings.owner_credentials()  # a damaged or unreadable file: one line naming it and the fix


def reset_owner(settings: Settings) -> dict[str, str]:
    """New owner password and API key, for when the credentials file was lost or damaged after
    the embedded Argilla was set up: written to a private ``.new`` file, set on the owner account
    in Argilla's database, and only then moved over the credentials file. A kill in between
    leaves the old file (or none) and the next ``crowdpref up --reset-owner`` does it again.
    Argilla must not be running (its clients would still hold the old key)."""
    path = settings.owner_credentials_file
    fresh = path.with_name(path.name + ".new")
    creds = _new_owner_credentials()
    write_json(creds, fresh, private=True)
    settings.argilla_home.mkdir(parents=True, exist_ok=True)
    _run_launcher(settings, "reset-owner", "--migrate", str(fresh), what="database migration or owner reset")
    if path.is_dir():  # damaged: a folder in the file's place
        path.rmdir()
    os.replace(fresh, path)
    return creds


def masked(secret: str) -> str:
    """A recognisable prefix of a secret, never the whole of it."""
    return secret[:6] + "..." if len(secret) > 12 else "***"


def _run_launcher(settings: Settings, *args: str, what: str,
                  launch_as: Callable[[ServiceSpec], ServiceSpec] | None = None) -> None:
    """``launch.py ARGS`` (``launch_as``: run as the server's own user, services/privileges.py)."""
    log = settings.logs_dir / f"{SERVER}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    step = ServiceSpec(SERVER, [str(server_python(settings)), str(LAUNCHER), *args], env(settings), health=lambda: True)
    if launch_as is not None:
        step = launch_as(step)
    with open(log, "ab") as handle:
        start = handle.tell()
        result = subprocess.run(
            list(step.argv),
            env=dict(step.env),
            stdout=handle,
            stderr=subprocess.STDOUT,
            timeout=180,
        )
    if result.returncode != 0:
        said = _launcher_problem(log, start)
        raise ServiceError(f"argilla {what} failed (exit {result.returncode}){said and ': ' + said}: see {log}")


def _launcher_problem(log: Path, offset: int) -> str:
    """The last ``crowdpref:`` line the launcher wrote to ``log`` after byte ``offset``, without
    the prefix ("" if none)."""
    try:
        with open(log, "rb") as handle:
            handle.seek(offset)
            written = handle.read().decode(errors="replace")
    except OSError:
        return ""
    said = [line[len(LAUNCHER_PROBLEM):] for line in written.splitlines() if line.startswith(LAUNCHER_PROBLEM)]
    return said[-1] if said else ""


def prepare(settings: Settings, launch_as: Callable[[ServiceSpec], ServiceSpec] | None = None) -> None:
    """Migrate the database and make sure the owner exists (both idempotent), in one launcher
    process (``ensure-owner --migrate``: argilla-server's import, seconds of CPU, paid once);
    ``launch_as``: as the server's own user (services/privileges.py)."""
    settings.argilla_home.mkdir(parents=True, exist_ok=True)
    ensure_owner_credentials(settings)
    _run_launcher(settings, "ensure-owner", "--migrate", str(settings.owner_credentials_file),
                  what="database migration or owner creation", launch_as=launch_as)


def prepares_in_server(settings: Settings) -> bool:
    """Whether the server's own process does :func:`prepare`'s work before it serves
    (``launch.py start --crowdpref-prepare``): with one server process, argilla-server's import
    (~5 s of CPU) is then paid once per start instead of twice. The laptop stack (SQLite, one
    process) only: with several (``uvicorn launch:app --workers N``) uvicorn's parent never
    imports the launcher, and the public profile starts Argilla rarely (systemd's units keep
    their ``ExecStartPre=`` steps), so :func:`prepare` runs first there."""
    return settings.argilla_worker_count == 1 and not settings.public


def start_server(settings: Settings, manager: ProcessManager, *, prepare_first: bool) -> None:
    """Start the server unless it runs; ``prepare_first``: migrated and owned before it serves
    (in its own process where :func:`prepares_in_server`, else by :func:`prepare` first). A
    migration or owner problem is the launcher's one line, as :func:`prepare` says it."""
    folded = prepare_first and prepares_in_server(settings) and manager.running(SERVER) is None
    if prepare_first and not folded:
        prepare(settings, manager.launch_as)
    elif folded:
        settings.argilla_home.mkdir(parents=True, exist_ok=True)
        ensure_owner_credentials(settings)
    log = manager.log_path(SERVER)
    offset = log.stat().st_size if log.exists() else 0
    try:
        manager.start(server_spec(settings, prepare=folded), settings.host)
    except ServiceError:
        said = _launcher_problem(log, offset) if folded else ""
        if said:
            raise ServiceError(f"argilla database migration or owner creation failed: {said}: see {log}") from None
        raise


def check_running_owner(settings: Settings) -> None:
    """What :func:`prepare` makes sure of, for an Argilla that already runs (migrated when it
    started; ``up`` never restarts it): that it accepts the owner's API key from the credentials
    file - asked over HTTP instead of a launcher process (argilla-server's import, ~6 s of CPU).
    A key it refuses: the one line ``ensure-owner`` would say."""
    import httpx

    creds = ensure_owner_credentials(settings)
    try:
        response = httpx.get(f"{settings.argilla_api_url}/api/v1/me", headers={"X-Argilla-Api-Key": creds["api_key"]},
                             timeout=30, verify=shared_context())
    except httpx.HTTPError as exc:
        raise ServiceError(f"argilla at {settings.argilla_api_url} runs but does not answer ({exc.__class__.__name__}): "
                           "see its log, or run `crowdpref down` then `crowdpref up`") from None
    if response.status_code == 401:
        raise ServiceError(f"owner '{creds['username']}' exists with a different API key than "
                           f"{settings.owner_credentials_file}: restore that file from your backup, or run `crowdpref "
                           "down` then `crowdpref up --reset-owner` to give the owner a new password and API key")
    if response.status_code != 200 or response.json().get("role") != "owner":
        raise ServiceError(f"argilla at {settings.argilla_api_url} answered {response.status_code} to the owner's key "
                           f"from {settings.owner_credentials_file}: see its log")


def server_healthy(settings: Settings) -> bool:
    return http_ok(f"{settings.argilla_api_url}/api/v1/status")


def worker_healthy(settings: Settings) -> bool:
    """The rq worker has registered itself in Redis."""
    try:
        reply = redis.command(settings, "SCARD", "rq:workers")
    except CrowdprefError:  # no readable Redis password: nothing answers
        return False
    return reply is not None and reply.startswith(b":") and int(reply[1:]) > 0


def server_argv(settings: Settings, *, prepare: bool = False) -> list[str]:
    """argilla-server's command: ``launch.py start`` (the stock CLI: one uvicorn process) with one
    worker (``prepare``: migrating and making the owner first, :func:`prepares_in_server`); with
    several, uvicorn itself on ``launch:app`` with ``--workers N``. Its worker processes then
    import ``launch`` afresh (the search engine and the bcrypt patch in each) after they answer
    uvicorn's 5 s liveness ping: the stock ``start`` would hand them ``argilla_server:app``
    without either, and a worker spawned from ``launch.py`` re-imports that script
    (argilla-server with it) before it can answer the ping, so on a busy machine uvicorn kills
    and respawns it over and over."""
    # no access log: the portal's one-hop sign-in URL carries a participant's credentials
    common = ["--host", settings.host, "--port", str(settings.argilla_port), "--no-access-log"]
    if settings.argilla_worker_count == 1:
        first = [PREPARE_OPTION, str(settings.owner_credentials_file)] if prepare else []
        return [str(server_python(settings)), str(LAUNCHER), "start", *first, *common]
    if prepare:
        raise ValueError("several server processes cannot prepare in the server: run prepare() first")
    return [str(server_python(settings)), "-m", "uvicorn", "launch:app", "--app-dir", str(LAUNCHER.parent),
            "--workers", str(settings.argilla_worker_count), *common]


def server_spec(settings: Settings, *, prepare: bool = False) -> ServiceSpec:
    return ServiceSpec(
        name=SERVER,
        argv=server_argv(settings, prepare=prepare),
        env=env(settings),
        health=lambda: server_healthy(settings),
        port=settings.argilla_port,
        port_setting="CROWDPREF_ARGILLA_PORT",
        start_timeout_s=90,
    )


def worker_spec(settings: Settings) -> ServiceSpec:
    return ServiceSpec(
        name=WORKER,
        argv=[str(server_python(settings)), str(LAUNCHER), "worker", "--num-workers", "1"],
        env=env(settings),
        health=lambda: worker_healthy(settings),
        start_timeout_s=60,
    )
