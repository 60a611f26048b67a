"""The embedded Prefect server (API + UI), run from the pipeline venv with the offline settings;
its database, and the flows' persisted results, live under ``<state>/prefect``.

In the public profile (``settings.prefect_requires_auth``) its API requires an auth string: one
generated once into ``<state>/secrets/prefect-auth-string`` (0600, ``crowdpref:<random>``), given
to the server as ``PREFECT_SERVER_API_AUTH_STRING`` and to every client (the CLI, ``crowdpref
deploy``, the worker and the flows it runs) as ``PREFECT_API_AUTH_STRING`` by
``Settings.prefect_env``; never on a command line. Prefect then answers 401 to any API request
without it in an ``Authorization: Basic`` header, except ``GET /api/health``, and its UI asks for
it on a login page. The laptop stack's server stays open on its loopback address."""

from __future__ import annotations

import os
import secrets
import sys

from crowdpref.runfolder import write_text
from crowdpref.settings import Settings
from services.process import ServiceSpec, http_ok

NAME = "prefect-server"
AUTH_USER = "crowdpref"  # the user part of the auth string (Prefect compares the whole string)
SERVER_AUTH = "PREFECT_SERVER_API_AUTH_STRING"


def ensure_auth_string(settings: Settings) -> str | None:
    """The auth string of the public profile's Prefect API, generated once into
    ``settings.prefect_auth_string_file`` (0600) when missing; None on the laptop stack."""
    if not settings.prefect_requires_auth:
        return None
    path = settings.prefect_auth_string_file
    if not path.exists():
        write_text(f"{AUTH_USER}:{secrets.token_hex(32)}", path, private=True)
    return settings.prefect_auth_string()  # a damaged or unreadable file: one line naming it and the fix


def env(settings: Settings) -> dict[str, str]:
    """Environment for the server and for anything that talks to it."""
    return {**os.environ, **settings.prefect_env()}


def server_env(settings: Settings) -> dict[str, str]:
    """The server's environment: :func:`env`, and in the public profile the auth string it requires.
    The UI's files are copied into the Prefect home (``PREFECT_UI_STATIC_DIRECTORY``): by default
    the server writes them into its own package, which a server run as its own user
    (services/privileges.py) cannot, and then serves no UI."""
    auth = ensure_auth_string(settings)
    ui = {"PREFECT_UI_STATIC_DIRECTORY": str(settings.prefect_home / "ui")}
    return {**env(settings), **ui, SERVER_AUTH: auth} if auth is not None else {**env(settings), **ui}


def healthy(settings: Settings) -> bool:
    return http_ok(f"{settings.prefect_url}/health")  # open without the auth string (Prefect's exception)


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
        env=server_env(settings),
        health=lambda: healthy(settings),
        port=settings.prefect_port,
        port_setting="CROWDPREF_PREFECT_PORT",
        start_timeout_s=90,
        # `crowdpref up` restarts a server started with another auth string, or none (the pid
        # record keeps a salted hash, never the value)
        restart_on_change=(SERVER_AUTH,),
    )
