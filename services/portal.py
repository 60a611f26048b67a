"""The participant portal as an embedded service (``python -m crowdpref.portal`` from the
pipeline venv), and the fake Prolific the demo runs for simulated studies."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from crowdpref.account_passwords import AccountPasswords
from crowdpref.portal.argilla_session import check_participants_way_in
from crowdpref.runfolder import write_text
from crowdpref.settings import Settings
from services.process import ServiceSpec, http_ok

NAME = "portal"
FAKE_PROLIFIC = "fake-prolific"


# The settings the portal uses (it faces the internet: it gets nothing else). Each setting is in
# exactly one of these two lists (a test checks it), so a new one is a decision, not an accident.
PORTAL_SETTINGS = (
    "home",  # its state folder: the SQLite store, the Argilla owner's credentials, Argilla's signing key
    "host", "portal_port", "argilla_port",  # where it listens; the embedded Argilla's address
    "argilla_url", "argilla_api_key",  # Argilla: accounts, datasets, webhooks, releases (a key: another Argilla's)
    "argilla_owner_session",  # the embedded Argilla: owner sessions it mints, never the owner's API key
    "argilla_public_url", "portal_url", "public_url",  # the addresses participants and Prolific use
    "site_port",  # the laptop stack's one origin (Caddy, plain HTTP): the addresses participants use there
    "database_url", "postgres_port",  # the study store
    "portal_studies", "portal_trusted_proxies",
    "prolific_token", "prolific_api_url", "prolific_app_url", "prolific_workspace_id",
    "fake_prolific_port",  # simulated studies recruit on the fake Prolific, never the real one
)
NOT_FOR_PORTAL = (
    "hf_token", "hf_repo_id", "hf_endpoint",  # publishing to the Hub: the release flow only
    "openai_base_url", "openai_api_key", "openai_model",  # question expansion, the simulated crowd
    "prefect_port", "prefect_api_url",  # flows: the portal runs none
    "redis_port", "redis_bin", "argilla_venv", "argilla_workers",  # how the stack runs Argilla
    "service_users",  # who up runs the services as
    "secrets_folder",  # as its own user, up gives it its own (services/privileges.py), not the command's
    "public_tls", "acme_email", "https_port", "http_port",  # Caddy's
    "backup_retention_days", "backup_repository", "backup_password_file",  # backups: the backup flow and command only
)


def settings_file(settings: Settings) -> Path:
    """An empty settings file the portal reads instead of ``./crowdpref.settings.yaml`` (or
    ``$CROWDPREF_SETTINGS``), which may hold the Hub token or the LLM key: everything of that
    file the portal uses reaches it in its environment already."""
    return settings.state_dir / "run" / "portal.settings.yaml"


def _env(settings: Settings) -> dict[str, str]:
    """The portal process gets the settings it uses (:data:`PORTAL_SETTINGS`, each under its
    CROWDPREF_* name), so it serves the same state folder, store, Argilla and studies as the
    command that started it, and no other: no Hub token, no LLM key (:data:`NOT_FOR_PORTAL`),
    not even from a settings file (:func:`settings_file`). On the embedded Argilla it signs in as
    the owner with sessions it mints (``argilla_owner_session``), so no owner API key either."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TZ")}
    env.update({"PYTHONUNBUFFERED": "1", "HOME": str(settings.state_dir)})
    names = {type(settings).model_fields[name].validation_alias.choices[0] for name in PORTAL_SETTINGS}  # type: ignore[union-attr]
    env.update({k: v for k, v in settings.as_environment().items() if k in names})
    if settings.embedded_argilla:  # it signs in as the owner with sessions it mints (Argilla's signing key)
        env["CROWDPREF_ARGILLA_OWNER_SESSION"] = "true"
        env.pop("CROWDPREF_ARGILLA_API_KEY", None)
    path = settings_file(settings)
    if not path.exists():
        write_text("# The portal's settings come from its environment only (services/portal.py).\n{}\n", path)
    env["CROWDPREF_SETTINGS"] = str(path)
    return env


def healthy(settings: Settings) -> bool:
    return http_ok(f"http://{settings.host}:{settings.portal_port}/healthz")


def spec(settings: Settings) -> ServiceSpec:
    check_participants_way_in(settings)  # Argilla sessions on its own origin, signed with that Argilla's key
    # the key of participants' account passwords exists before the portal starts (a unit gets it
    # read-only, through LoadCredential=, and could not make it)
    AccountPasswords.from_secrets(settings.secrets_dir)
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
    of the installed package, so it needs no checkout. In the public profile with Caddy's own CA,
    its webhook deliveries (to the public URL's ``/hooks/prolific``) trust that CA's root."""
    from services import caddy

    trust = ["--trust", str(caddy.internal_root(settings))] if settings.public and settings.public_tls == "internal" else []
    return ServiceSpec(
        name=FAKE_PROLIFIC,
        argv=[sys.executable, "-m", "crowdpref.simulation.prolific_server", "--host", settings.host,
              "--port", str(settings.fake_prolific_port), *trust],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1"},
        health=lambda: fake_prolific_healthy(settings),
        port=settings.fake_prolific_port,
        port_setting="CROWDPREF_FAKE_PROLIFIC_PORT",
        start_timeout_s=30,
    )
