"""Every long-running service of a profile as ``crowdpref up`` starts it: what
``crowdpref service install`` writes systemd units for (services/systemd.py) and what ``up`` run
as root starts as the same users (services/privileges.py). Its own module so that both read it
without importing the stack's start and stop (services/stack.py), which uses them."""

from __future__ import annotations

from crowdpref.settings import Settings
from services import caddy, portal, postgres, redis
from services.argilla import service as argilla
from services.prefect import service as prefect
from services.process import ServiceSpec


def unit_specs(settings: Settings) -> list[tuple[ServiceSpec, tuple[str, ...]]]:
    """Every long-running service of this profile as the :class:`ServiceSpec` ``up`` starts it
    with, in start order, each with the services it needs running first: what
    ``crowdpref service install`` writes systemd units for (services/systemd.py). A service
    added to ``up`` is added here too. No keeper runs under systemd (systemd restarts the units)."""
    from deployments import deploy  # (Prefect-side helpers: loaded only when asked)

    units: list[tuple[ServiceSpec, tuple[str, ...]]] = []
    # the public profile's PostgreSQL holds Argilla's database and the study store: first, and
    # needed by everything that opens either (its unit prepares and provisions it, see systemd.py)
    store = (postgres.NAME,) if settings.public else ()
    if settings.public:
        postgres.choose_folder(settings)  # where the unit's data folder is, recorded before it runs
        postgres.role_password(settings, postgres.ADMIN_ROLE)  # the unit's initdb step reads it
        postgres.role_password(settings, postgres.ARGILLA_ROLE)  # Argilla's URL below needs it
        units.append((postgres.spec(settings), ()))
    if settings.embedded_argilla:
        argilla.ensure_owner_credentials(settings)  # the server's start-up step creates the owner from it
        units += [(redis.spec(settings), ()),
                  (argilla.server_spec(settings), (*store, redis.NAME)),
                  (argilla.worker_spec(settings), (*store, redis.NAME, argilla.SERVER))]
    if settings.embedded_prefect:
        units.append((prefect.spec(settings), ()))
    units.append((portal.spec(settings), (*store, argilla.SERVER) if settings.embedded_argilla else store))
    if settings.embedded_prefect:
        units.append((deploy.worker_spec(settings), (*store, prefect.NAME)))
    # the one origin participants use, on both profiles: HTTPS at the public URL, or the laptop
    # stack's plain-HTTP site on HOST:SITE_PORT (services/caddy.py)
    units.append((caddy.spec(settings), (portal.NAME, argilla.SERVER) if settings.embedded_argilla else (portal.NAME,)))
    return units
