"""The participant portal as an embedded service (``python -m crowdpref.portal`` from the
pipeline venv), and the fake Prolific the demo runs for simulated studies."""

from __future__ import annotations

import os
import sys

from crowdpref.settings import Settings
from services.process import ServiceSpec, http_ok

NAME = "portal"
FAKE_PROLIFIC = "fake-prolific"


def _env(settings: Settings) -> dict[str, str]:
    """The portal process gets exactly these settings (each under its CROWDPREF_* name), so it
    serves the same state folder, store, Argilla and studies as the command that started it."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TZ")}
    env.update({"PYTHONUNBUFFERED": "1", "HOME": str(settings.state_dir)})
    env.update(settings.as_environment())
    return env


def healthy(settings: Settings) -> bool:
    return http_ok(f"http://{settings.host}:{settings.portal_port}/healthz")


def spec(settings: Settings) -> ServiceSpec:
    return ServiceSpec(
        name=NAME,
        argv=[sys.executable, "-m", "crowdpref.portal", "--host", settings.host, "--port", str(settings.portal_port)],
        env=_env(settings),
        health=lambda: healthy(settings),
        port=settings.portal_port,
        port_setting="CROWDPREF_PORTAL_PORT",
        start_timeout_s=60,
        # `crowdpref up` restarts a running portal whose settings changed (PROLIFIC_TOKEN,
        # CROWDPREF_PORTAL_URL, ...): the pid record keeps a salted hash of them, never a value
        restart_on_change=("CROWDPREF_",),
    )


def fake_prolific_healthy(settings: Settings) -> bool:
    return http_ok(f"http://{settings.host}:{settings.fake_prolific_port}/health")


def fake_prolific_spec(settings: Settings) -> ServiceSpec:
    """The fake Prolific of the simulation (``python -m crowdpref.simulation.prolific_server``): part
    of the installed package, so it needs no checkout."""
    return ServiceSpec(
        name=FAKE_PROLIFIC,
        argv=[sys.executable, "-m", "crowdpref.simulation.prolific_server", "--host", settings.host,
              "--port", str(settings.fake_prolific_port)],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1"},
        health=lambda: fake_prolific_healthy(settings),
        port=settings.fake_prolific_port,
        port_setting="CROWDPREF_FAKE_PROLIFIC_PORT",
        start_timeout_s=30,
    )
