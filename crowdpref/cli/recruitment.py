"""Commands that bring participants in: ``prolific-webhooks`` (subscribe the portal to Prolific's
submission webhooks), ``invite`` (signed invitation links, each recorded) and ``revoke-invite``
(withdraw one of them)."""

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
    label: str = typer.Option(None, "--label", help="Whom the link goes to (recorded, never in the link): "
                              "revoke-invite takes it. With -n N the links are labelled LABEL-1 .. LABEL-N.",
                              show_default=False),
) -> None:
    """Print signed invitation links for a study without Prolific (pilots, an own panel): one
    per participant; each opens a page whose button claims one batch of work in the portal.
    Each link is recorded in the study store (its id, the label) so that revoke-invite can
    withdraw it alone. Warns, on stderr, when the links issued outnumber the study's places."""
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
    if label is not None and not label.strip():
        raise ConfigError("--label is empty: give a name for whom the link goes to, or leave --label out")
    labels = [None] * count if label is None else [label.strip()] if count == 1 else [
        f"{label.strip()}-{n}" for n in range(1, count + 1)]
    settings = _settings()
    store = open_store(settings)
    try:
        portal = Portal(settings, store)
        _refuse_unservable(study, config.name, portal, settings)
        taken = {i.label for i in store.invites(config.name)} & set(labels) - {None}
        if taken:
            raise ConfigError(f"--label: {sorted(taken)[0]!r} already labels a link of study '{config.name}': "
                              "give each link its own label")
        issued = [(secrets.token_hex(6), name) for name in labels]
        _warn_past_places(store, config.name, key, count)
        store.record_invites(config.name, key, issued)
        for invite_id, _ in issued:
            print(portal.invite_link(config.name, key, invite_id))  # type: ignore[arg-type]
    finally:
        store.close()


def _warn_past_places(store: Any, name: str, key: str, count: int) -> None:
    """Say on stderr when the links not revoked (these ``count`` included) outnumber the places of
    the study's collection: each batch of work (items x R / per participant, rounded up) is one
    place. Nothing is said before the collection is opened (its places are not known yet)."""
    import math

    from crowdpref.cli.common import err_console

    info = store.find_collection(name, key)
    if info is None:
        return
    places = math.ceil(len(store.items(info.id)) * info.copies / max(1, info.per_participant))
    before = sum(1 for i in store.invites(name, key) if i.revoked_at is None)
    if before + count > places:
        err_console.print(f"warning: {before + count} links for {places} places in {name} {key}"
                          f"{f' ({before} issued before)' if before else ''}: whoever comes after the "
                          "places are taken finds the study full", highlight=False, soft_wrap=True)


@app.command("revoke-invite")
@friendly_errors
def revoke_invite(
    study: Path = typer.Argument(..., help="The study config the link was issued for."),
    which: str = typer.Argument(..., help="The link's label (invite --label), its id, or the link itself."),
) -> None:
    """Withdraw one invitation link: the portal refuses it from now on (403), every other link
    keeps working. Work its person already claimed stays theirs until released for inactivity."""
    from crowdpref.config import load_study
    from crowdpref.errors import ConfigError
    from crowdpref.portal.service import Portal
    from crowdpref.store import open_store

    config = load_study(study)
    settings = _settings()
    store = open_store(settings)
    try:
        recorded = store.invites(config.name)
        target = which.strip()
        if "invite=" in target:  # the link itself: its signed id (never expired for this)
            from itsdangerous import BadSignature

            try:
                token = Portal(settings, store).invites.loads(target.split("invite=", 1)[1].split("&", 1)[0])
            except BadSignature:
                raise ConfigError(f"{which!r}: not an invitation link of this deployment (its signature fails)") from None
            target = str(token.get("id", "")) if isinstance(token, dict) else ""
        matches = [i for i in recorded if target in (i.id, i.label)]
        if not matches:
            raise ConfigError(f"no invitation link of study '{config.name}' has the label or id {which!r}: "
                              "see the labels you gave to `crowdpref invite --label`")
        if len(matches) > 1:
            raise ConfigError(f"{which!r} names {len(matches)} links of study '{config.name}': give the link's id")
        revoked = store.revoke_invites(config.name, [i.id for i in matches])
    finally:
        store.close()
    [match] = matches
    named = f"'{match.label}' ({match.id})" if match.label else match.id
    if revoked:
        console.print(f"revoked invitation link {named} of {config.name} {match.key}", highlight=False)
    else:
        console.print(f"invitation link {named} of {config.name} {match.key} was already revoked", highlight=False)


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
