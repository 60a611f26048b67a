"""Restart what died, where no systemd does it: the ``supervisor`` service of the stack.

``crowdpref up`` starts it in the public profile (``settings.public``), or on any profile with
``crowdpref up --supervise``, as the background service ``supervisor`` (pid record, log in
``<state>/logs/supervisor.log``); ``crowdpref supervise`` runs the same loop in the foreground.
``crowdpref down`` stops it first, so nothing is restarted while the stack goes down.

Every ``interval_s`` seconds (default 2) it looks at the pid records of the services of the
components it watches (those ``up`` was asked for). A service whose process is gone is started
again through the stack's own start (:func:`services.stack.up` for its component, with
``restart=True``: Argilla's database migration and owner step, done at its first start, are
skipped), which waits until it is healthy. So a dead service is noticed within ``interval_s``
seconds and is back as soon as it answers its health check. Measured on the project's shared
2-core machine (tests/integration/test_supervisor.py): in the public profile on a quiet machine
(2026-11-26) a SIGKILLed portal was healthy again after about 6 s, a SIGKILLed argilla-server
(2 workers on PostgreSQL) after about 8 s; on the laptop stack under a load of about 8
(2026-11-25) 9-18 s (46 s once, at a peak) and 20-57 s. The test holds them to 60 s and 180 s. A start that fails is tried
again at the next round, at most every 30 s per component, and the failure is logged in one
line.

It restarts services whose process died; it does not judge a live process that answers badly.
Under systemd, use ``crowdpref service install`` instead (services/systemd.py): systemd restarts
the units itself, and the supervisor is not needed.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable, Iterable

from crowdpref.errors import first_line
from crowdpref.settings import Settings, load_settings
from services.process import ProcessManager
from services.supervision import INTERVAL_S, NAME, heartbeat_file, healthy, spec  # noqa: F401 - the service's parts

RETRY_AFTER_FAILURE_S = 30.0


def watched(settings: Settings, components: Iterable[str]) -> dict[str, str]:
    """The services the supervisor keeps running, each with the component that starts it:
    those ``crowdpref up`` starts for ``components`` in this profile (in the public profile
    also PostgreSQL, which any component's start brings up first)."""
    from services import postgres, stack

    components = list(components)
    services = {name: component for component in components for name in stack.services_of(settings, component)}
    if settings.public and components:  # the public profile's PostgreSQL: every `up` starts it first
        services = {postgres.NAME: components[0], **services}
    return services


def down_now(settings: Settings, services: dict[str, str]) -> list[str]:
    """The watched services whose process is gone (no live process behind the pid record)."""
    from services import stack

    manager = ProcessManager(settings.state_dir)
    return [name for name in services
            if manager.running(name) is None and (name != stack.WORKER or stack.worker_expected(settings, manager))]


def supervise(
    settings: Settings,
    components: Iterable[str],
    interval_s: float = INTERVAL_S,
    log: Callable[[str], None] = print,
    rounds: int | None = None,
) -> None:
    """The loop: every ``interval_s`` seconds, start again (through :func:`services.stack.up`)
    the component of each watched service that died. ``rounds``: stop after that many (tests)."""
    from services import stack

    components = list(components)
    services = watched(settings, components)
    log(f"supervising {', '.join(services)} every {interval_s:g} s")
    failed_at: dict[str, float] = {}
    done = 0
    while rounds is None or done < rounds:
        heartbeat_file(settings).parent.mkdir(parents=True, exist_ok=True)
        heartbeat_file(settings).touch()
        dead = down_now(settings, services)
        # components in the stack's own start order (Argilla before the portal and the worker)
        for component in [c for c in stack.COMPONENTS if c in {services[name] for name in dead}]:
            if time.monotonic() - failed_at.get(component, -1e9) < RETRY_AFTER_FAILURE_S:
                continue
            names = [name for name in dead if services[name] == component]
            log(f"{', '.join(names)} died: starting {component} again")
            started = time.monotonic()
            try:
                # never a second supervisor; Argilla's database and owner are ready since its first start
                stack.up(settings, [component], supervise=False, restart=True)
            except Exception as exc:  # noqa: BLE001 - one line, tried again later; the loop must live
                failed_at[component] = time.monotonic()
                log(f"{component} did not start again ({first_line(exc, 300, with_type=True)}); "
                    f"next try in {RETRY_AFTER_FAILURE_S:.0f} s")
                continue
            failed_at.pop(component, None)
            log(f"{', '.join(names)} healthy again after {time.monotonic() - started:.1f} s")
        done += 1
        if rounds is None or done < rounds:
            time.sleep(interval_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m services.supervisor", description=__doc__.splitlines()[0])
    parser.add_argument("--component", action="append", default=[], help="a component of the stack to keep running")
    parser.add_argument("--interval", type=float, default=INTERVAL_S, help="seconds between checks")
    args = parser.parse_args(argv)
    from services import stack

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    supervise(load_settings(), args.component or list(stack.COMPONENTS), args.interval,
              log=lambda line: print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}", flush=True))


if __name__ == "__main__":
    main()
