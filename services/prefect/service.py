"""The embedded Prefect server (API + UI), run from the pipeline venv with the offline settings;
its database, and the flows' persisted results, live under ``<state>/prefect``."""

from __future__ import annotations

import os
import sys

from crowdpref.settings import Settings
from services.process import ServiceSpec, http_ok

NAME = "prefect-server"


def env(settings: Settings) -> dict[str, str]:
    """Environment for the server and for anything that talks to it."""
    return {**os.environ, **settings.prefect_env()}


def healthy(settings: Settings) -> bool:
    return http_ok(f"{settings.prefect_url}/health")


def spec(settings: Settings) -> ServiceSpec:
    settings.prefect_results_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable, "-m", "prefect", "server", "start",
        "--host", settings.host,
        "--port", str(settings.prefect_port),
    ]
    return ServiceSpec(
        name=NAME,
        argv=argv,
        env=env(settings),
        health=lambda: healthy(settings),
        port=settings.prefect_port,
        port_setting="CROWDPREF_PREFECT_PORT",
        start_timeout_s=90,
    )
