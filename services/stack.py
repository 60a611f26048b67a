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
from services import caddy, portal, postgres, privileges, redis
from services.argilla import service as argilla
from services.prefect import service as prefect
from services.process import ProcessManager

COMPONENTS = ("argilla", "prefect", "portal", "worker", "caddy")  # caddy: the one origin (HTTPS, or HTTP on the laptop)
# what runs flows: a worker on the `crowdpref` pool (crowdpref up, or crowdpref deploy) or a
# serve process (deployments/serve.py); started through deployments/deploy.py
WORKER, SERVE = "prefect-worker", "prefect-serve"
# stop order is the reverse of this order (the flow runners last: stopped first)
SERVICE_NAMES = (postgres.NAME, redis.NAME, argilla.SERVER, argilla.WORKER, prefect.NAME, portal.NAME, portal.FAKE_PROLIFIC,
                 caddy.NAME, SERVE, WORKER)
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
        postgres.NAME: f"postgresql://{settings.host}:{settings.postgres_port} (the public profile's databases)",
        redis.NAME: f"redis://{settings.host}:{settings.redis_port}",
        argilla.SERVER: settings.argilla_api_url,
        argilla.WORKER: f"rq worker on redis://{settings.host}:{settings.redis_port}",
        prefect.NAME: settings.prefect_ui_url,
        portal.NAME: settings.portal_public_url if settings.public else
        f"{settings.portal_public_url} (through caddy; on this host: http://{settings.host}:{settings.portal_port})",
        portal.FAKE_PROLIFIC: f"http://{settings.host}:{settings.fake_prolific_port} (simulated studies only)",
        SERVE: "deployments served from one process",
        WORKER: "process worker on pool 'crowdpref'",
        caddy.NAME: f"{settings.public_url} (HTTPS on port {settings.https_port}, HTTP {settings.http_port} redirects)"
        if settings.public else f"{settings.site_url} (the portal and Argilla on one origin, plain HTTP on this host)",
    }


def _health(settings: Settings) -> dict[str, Callable[[], bool]]:
    return {
        postgres.NAME: lambda: postgres.healthy(settings),
        redis.NAME: lambda: redis.healthy(settings),
        argilla.SERVER: lambda: argilla.server_healthy(settings),
        argilla.WORKER: lambda: argilla.worker_healthy(settings),
        prefect.NAME: lambda: prefect.healthy(settings),
        portal.NAME: lambda: portal.healthy(settings),
        portal.FAKE_PROLIFIC: lambda: portal.fake_prolific_healthy(settings),
        SERVE: lambda: _deploy().serve_healthy(settings),
        WORKER: lambda: _deploy().worker_healthy(settings),
        caddy.NAME: lambda: caddy.healthy(settings),
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
    supervise: bool | None = None,
) -> list[ServiceStatus]:
    """Start the embedded services of ``components`` that are not running yet; wait for health.
    A running portal whose settings changed is restarted; ``on_note`` hears it in one line.
    ``worker``: the Prefect worker on the ``crowdpref`` pool, for the embedded Prefect server
    only, and not while a serve process runs the deployments (``on_note`` says so).
    ``supervise`` (default: in the public profile, ``settings.public``): each service under its
    keeper, as the service's own user, which starts it again when it dies (services/keeper.py).
    An Argilla that
    already runs is not restarted, so it gets no migration either: ``up`` only asks it over HTTP
    whether it takes the owner's API key (no launcher process, ~6 s of CPU less)."""
    wanted = set(components)
    unknown = wanted - set(COMPONENTS)
    if unknown:
        raise ValueError(f"unknown components {sorted(unknown)}; choose from {COMPONENTS}")
    if "caddy" in wanted:  # no Caddy installed: one line before anything starts
        caddy.binary()
    # run as root: each service as its own user (services/privileges.py), its accounts made first
    manager = privileges.manager(settings, keep=settings.public if supervise is None else supervise)
    if settings.public:  # Argilla's database and the study store: first (and stopped last)
        on_step("postgres")
        postgres.start_service(settings, manager)
    if "argilla" in wanted and settings.embedded_argilla:
        on_step("redis")
        if manager.start(redis.spec(settings), settings.host).restarted:
            # it ran with another password, or none (an older crowdpref): Argilla's server and worker
            # hold the old one in their Redis URL, so they start again with the new one below
            manager.stop(argilla.WORKER)
            manager.stop(argilla.SERVER)
            on_note("redis restarted with its password (secrets/redis-password); the Argilla server and worker "
                    "restart with it")
        on_step("argilla database + owner, server")
        running = manager.running(argilla.SERVER) is not None and argilla.server_healthy(settings)
        if running:
            argilla.check_running_owner(settings)  # it runs, and up never restarts it: no launcher
        argilla.start_server(settings, manager, prepare_first=not running)
        on_step("argilla worker")
        manager.start(argilla.worker_spec(settings), settings.host)
    if "prefect" in wanted and settings.embedded_prefect:
        on_step("prefect server")
        if manager.start(prefect.spec(settings), settings.host).restarted:
            # it ran with another auth string, or none: a worker holding the old one is refused (401),
            # so it starts again below; a serve process is left to its owner (it runs deployments)
            manager.stop(WORKER)
            serving = f"; restart {SERVE} (deployments/serve.py), it holds the old one" if manager.running(SERVE) else ""
            auth = "its auth string in secrets/" + settings.prefect_auth_string_file.name if settings.prefect_requires_auth \
                else "no auth string (the laptop stack)"
            on_note(f"prefect server restarted with this profile's API authentication ({auth}); the prefect worker "
                    f"restarts with it{serving}")
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
            _deploy().start_worker(settings, manager)  # the pool first (created if missing); needs the server
    # the front door (the portal and Argilla on one origin), once what it forwards to is healthy
    if "caddy" in wanted:
        on_step("caddy (HTTPS)" if settings.public else "caddy (one origin, plain HTTP on this host)")
        if caddy.start(settings, manager).restarted:
            on_note("caddy restarted: its Caddyfile changed since it started")
    return status(settings)


def start_fake_prolific(settings: Settings) -> None:
    """The fake Prolific simulated studies recruit on (the demo); ``down`` stops it."""
    ProcessManager(settings.state_dir).start(portal.fake_prolific_spec(settings), settings.host)


def down(settings: Settings) -> list[str]:
    """Stop every embedded service that has a pid record; returns the names stopped."""
    manager = ProcessManager(settings.state_dir)
    stopped = [name for name in reversed(SERVICE_NAMES) if name != postgres.NAME and manager.stop(name)]
    if postgres.stop_service(settings, manager):  # last, with a fast shutdown (open sessions ended)
        stopped.append(postgres.NAME)
    return stopped


def status(settings: Settings) -> list[ServiceStatus]:
    """Every core service, plus the flow runners (worker / serve) when one was started."""
    manager = ProcessManager(settings.state_dir)
    urls, health = _urls(settings), _health(settings)
    rows = []
    for name in SERVICE_NAMES:
        running = manager.running(name)
        if running is None and (name in ON_DEMAND or name == WORKER and not _worker_expected(settings, manager)
                                or name == postgres.NAME and not settings.public):
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
