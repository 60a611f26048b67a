"""Commands that bring participants in: ``prolific-webhooks`` (subscribe the portal to Prolific's
submission webhooks) and ``invite`` (signed invitation links)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from crowdpref.cli.common import _settings, app, console, friendly_errors
from crowdpref.settings import Settings


@app.command("prolific-webhooks")
@friendly_errors
def prolific_webhooks(
    study: Path = typer.Option(..., "--study", help="The study config (it must recruit on Prolific)."),
    force: bool = typer.Option(False, help="Create a new secret and subscription even if one is recorded."),
) -> None:
    """Subscribe the portal to Prolific's submission webhooks: create the workspace's webhook
    secret (kept in the owner-only study store), subscribe the portal's /hooks/prolific and
    confirm it. The portal must be reachable from Prolific (CROWDPREF_PORTAL_URL, HTTPS)."""
    from crowdpref.config import load_study
    from crowdpref.portal.links import webhook_url
    from crowdpref.recruitment import prolific_client, setup_webhooks
    from crowdpref.store import open_store

    config = load_study(study)
    settings = _settings()
    store = open_store(settings)
    try:
        with prolific_client(config, settings) as client:
            recorded = store.get_meta("prolific_webhook_subscription")
            subscription = setup_webhooks(settings, store, client, settings.prolific_workspace_id, force=force)
    finally:
        store.close()
    if recorded and not force:
        console.print(f"already subscribed ({subscription}); --force makes a new secret and subscription")
    else:
        console.print(f"subscribed {webhook_url(settings)} to submission.status.change ({subscription})", highlight=False)


@app.command()
@friendly_errors
def invite(
    study: Path = typer.Argument(..., help="A study config with participants: invite."),
    key: str = typer.Option("study1", "--key", help="study1 or study2."),
    count: int = typer.Option(1, "-n", "--count", min=1, max=10000, help="How many links (one per person)."),
) -> None:
    """Print signed invitation links for a study without Prolific (pilots, an own panel): one
    per participant; each claims one batch of work in the portal."""
    import secrets

    from crowdpref.config import load_study
    from crowdpref.errors import ConfigError
    from crowdpref.portal.service import Portal
    from crowdpref.store import open_store

    config = load_study(study)
    if config.participants != "invite":
        raise ConfigError(f"{study}: participants is '{config.participants}': invitation links are for "
                          "participants: invite")
    if key not in ("study1", "study2"):
        raise ConfigError(f"--key must be study1 or study2 (got {key!r})")
    settings = _settings()
    store = open_store(settings)
    try:
        portal = Portal(settings, store)
        _refuse_unservable(study, config.name, portal, settings)
        for _ in range(count):
            print(portal.invite_link(config.name, key, secrets.token_hex(6)))  # type: ignore[arg-type]
    finally:
        store.close()


def _refuse_unservable(study: Path, name: str, portal: Any, settings: Settings) -> None:
    """Make sure the portal serves this config for study ``name``: it finds a study's config by
    the path recorded in the store (:mod:`crowdpref.study_paths`), so a config anywhere is
    recorded here; ConfigError (one line) when the portal already serves ANOTHER file under
    that name (two configs with one ``name:`` would share a study)."""
    from crowdpref import study_paths
    from crowdpref.config import load_study
    from crowdpref.errors import ConfigError

    served = portal.study_path(name)
    if served is not None and Path(served).resolve() != study.resolve():
        raise ConfigError(f"{study}: the portal serves study '{name}' from {served}, not from this file: give every "
                          "study its own name:, or invite with that file")
    study_paths.remember(portal.store, load_study(study))
