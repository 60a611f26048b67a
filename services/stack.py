"""The embedded stack as a whole: start what is not running, stop everything we started,
report what runs. Used by ``crowdpref up|down|status`` and by the test fixtures.

What runs the deployments' flows is part of the stack too: the component ``worker`` is a
process worker on the ``crowdpref`` work pool (``prefect-worker``, started by
:func:`deployments.deploy.start_worker`, which creates the pool if missing), so every
deployment that ``crowdpref deploy`` registers is Ready without another command. ``up`` starts
it after the embedded Prefect server is healthy, and again if it died, like every service.
Two exceptions, both kept simple:

- a Prefect server elsewhere (``PREFECT_API_URL``): ``up`` starts neither the server nor a
  worker for it; ``crowdpref deploy`` starts the worker there (or run one on each machine);
- a serve process (``prefect-serve``, ``deployments/serve.py``) is the other runner: it
  registers the deployments with no work pool, so a worker beside it would only poll an empty
  pool. While one runs, ``up`` starts no worker (it says so) and ``status`` does not list the
  worker as missing. Stop the serve process and run ``crowdpref deploy`` to go back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from crowdpref.settings import Settings
from services import portal, redis
from services.argilla import service as argilla
from services.prefect import service as prefect
from services.process import ProcessManager

COMPONENTS = ("argilla", "prefect", "portal", "worker")
# what runs flows: a worker on the `crowdpref` pool (crowdpref up, or crowdpref deploy) or a
# serve process (deployments/serve.py); started through deployments/deploy.py
WORKER, SERVE = "prefect-worker", "prefect-serve"
# stop order is the reverse of this order (the flow runners last: stopped first)
SERVICE_NAMES = (redis.NAME, argilla.SERVER, argilla.WORKER, prefect.NAME, portal.NAME, portal.FAKE_PROLIFIC,
                 SERVE, WORKER)
# reported only once started (the fake Prolific: by the demo, for simulated studies); the
# worker also when it does not run while a serve process does, or the Prefect server is elsewhere
ON_DEMAND = (SERVE, portal.FAKE_PROLIFIC)


@dataclass
class ServiceStatus:
    name: str
    pid: int | None
    url: str
    healthy: bool


def _urls(settings: Settings) -> dict[str, str]:
    return {
        redis.NAME: f"redis://{settings.host}:{settings.redis_port}",
        argilla.SERVER: settings.argilla_api_url,
        argilla.WORKER: f"rq worker on redis://{settings.host}:{settings.redis_port}",
        prefect.NAME: settings.prefect_ui_url,
        portal.NAME: settings.portal_public_url,
        portal.FAKE_PROLIFIC: f"http://{settings.host}:{settings.fake_prolific_port} (simulated studies only)",
        SERVE: "deployments served from one process",
        WORKER: "process worker on pool 'crowdpref'",
    }


def _health(settings: Settings) -> dict[str, Callable[[], bool]]:
    return {
        redis.NAME: lambda: redis.healthy(settings),
        argilla.SERVER: lambda: argilla.server_healthy(settings),
        argilla.WORKER: lambda: argilla.worker_healthy(settings),
        prefect.NAME: lambda: prefect.healthy(settings),
        portal.NAME: lambda: portal.healthy(settings),
        portal.FAKE_PROLIFIC: lambda: portal.fake_prolific_healthy(settings),
        SERVE: lambda: _deploy().serve_healthy(settings),
        WORKER: lambda: _deploy().worker_healthy(settings),
    }


def _worker_expected(settings: Settings, manager: ProcessManager) -> bool:
    """``up`` starts a worker: the Prefect server is ours and no serve process runs the flows."""
    return settings.embedded_prefect and manager.running(SERVE) is None


def _deploy():  # deployments/ imports Prefect-side helpers; load it only when asked
    from deployments import deploy

    return deploy


def up(
    settings: Settings,
    components: Iterable[str] = COMPONENTS,
    on_step: Callable[[str], None] = lambda message: None,
    on_note: Callable[[str], None] = lambda message: None,
) -> list[ServiceStatus]:
    """Start the embedded services of ``components`` that are not running yet; wait for health.
    A running portal whose settings changed is restarted; ``on_note`` hears it in one line.
    ``worker``: the Prefect worker on the ``crowdpref`` pool, for the embedded Prefect server
    only, and not while a serve process runs the deployments (``on_note`` says so)."""
    wanted = set(components)
    unknown = wanted - set(COMPONENTS)
    if unknown:
        raise ValueError(f"unknown components {sorted(unknown)}; choose from {COMPONENTS}")
    manager = ProcessManager(settings.state_dir)
    if "argilla" in wanted and settings.embedded_argilla:
        on_step("redis")
        manager.start(redis.spec(settings), settings.host)
        on_step("argilla database + owner")
        argilla.prepare(settings)
        on_step("argilla server")
        manager.start(argilla.server_spec(settings), settings.host)
        on_step("argilla worker")
        manager.start(argilla.worker_spec(settings), settings.host)
    if "prefect" in wanted and settings.embedded_prefect:
        on_step("prefect server")
        manager.start(prefect.spec(settings), settings.host)
    if "portal" in wanted:
        on_step("participant portal")
        if manager.start(portal.spec(settings), settings.host).restarted:
            on_note("participant portal restarted: its settings (environment or command) changed since it started")
    # last: it needs the Prefect server, and a worker that fails to start keeps nothing else down
    if "worker" in wanted and settings.embedded_prefect:
        if manager.running(SERVE) is not None:
            on_note(f"no Prefect worker started: {SERVE} runs the deployments (deployments/serve.py)")
        else:
            on_step("prefect worker")
            _deploy().start_worker(settings)  # the pool first (created if missing); needs the server
    return status(settings)


def start_fake_prolific(settings: Settings) -> None:
    """The fake Prolific simulated studies recruit on (the demo); ``down`` stops it."""
    ProcessManager(settings.state_dir).start(portal.fake_prolific_spec(settings), settings.host)


def down(settings: Settings) -> list[str]:
    """Stop every embedded service that has a pid record; returns the names stopped."""
    manager = ProcessManager(settings.state_dir)
    return [name for name in reversed(SERVICE_NAMES) if manager.stop(name)]


def status(settings: Settings) -> list[ServiceStatus]:
    """Every core service, plus the flow runners (worker / serve) when one was started."""
    manager = ProcessManager(settings.state_dir)
    urls, health = _urls(settings), _health(settings)
    rows = []
    for name in SERVICE_NAMES:
        running = manager.running(name)
        if running is None and (name in ON_DEMAND or name == WORKER and not _worker_expected(settings, manager)):
            continue
        rows.append(
            ServiceStatus(
                name=name,
                pid=running.pid if running else None,
                url=urls[name],
                healthy=bool(running) and health[name](),
            )
        )
    return rows
