"""The supervisor as a service of the stack (what ``crowdpref up`` starts, ``status`` checks
and ``down`` stops): its name, check interval, heartbeat and :class:`ServiceSpec`. The loop
itself, and how fast it restarts what died, is in services/supervisor.py (which imports the
stack; this module does not, so the stack can import it)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from crowdpref.settings import Settings
from services.process import ProcessManager, ServiceSpec

NAME = "supervisor"
INTERVAL_S = 2.0


def heartbeat_file(settings: Settings) -> Path:
    return settings.pids_dir / f"{NAME}.beat"


def healthy(settings: Settings, interval_s: float = INTERVAL_S) -> bool:
    """The supervisor's loop ran in the last few rounds (its heartbeat file is fresh)."""
    try:
        age = time.time() - heartbeat_file(settings).stat().st_mtime
    except FileNotFoundError:
        return False
    return age < max(15.0, 5 * interval_s) and ProcessManager(settings.state_dir).running(NAME) is not None


def spec(settings: Settings, components: Iterable[str], interval_s: float = INTERVAL_S) -> ServiceSpec:
    """The supervisor as a background service: ``python -m services.supervisor`` from the
    checkout, with every setting of ``settings`` in its environment (as the portal gets them),
    so it starts the same services the command that started it would."""
    repo = Path(__file__).resolve().parents[1]
    argv = [sys.executable, "-m", "services.supervisor", "--interval", f"{interval_s:g}"]
    for component in components:
        argv += ["--component", component]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TZ", "HOME")}
    env.update({"PYTHONUNBUFFERED": "1", **settings.as_environment()})
    return ServiceSpec(
        name=NAME,
        argv=argv,
        env=env,
        health=lambda: healthy(settings, interval_s),
        cwd=repo,
        start_timeout_s=30,
    )
