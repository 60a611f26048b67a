"""Commands on one participant: their account's ``password`` and ``withdraw``."""

from __future__ import annotations

from pathlib import Path

import typer

from crowdpref.cli.common import _argilla_down, _reachable, _settings, app, console, friendly_errors
from crowdpref.errors import ConfigError, CrowdprefError, ServiceError


@app.command()
@friendly_errors
def password(
    username: str = typer.Argument(..., help="A participant's Argilla username."),
    study: Path = typer.Option(..., "--study", help="The study config the participant belongs to."),
) -> None:
    """Print one participant account's password (derived from the state folder's account key,
    for the study owner: the store keeps none)."""
    from crowdpref.account_passwords import AccountPasswords
    from crowdpref.config import load_study
    from crowdpref.store import open_store

    config = load_study(study)
    settings = _settings()
    store = open_store(settings)
    for key in ("study1", "study2"):
        info = store.find_collection(config.name, key)
        account = next((a for a in store.accounts(info.id) if a.username == username), None) if info else None
        if account is not None:
            print(AccountPasswords.from_secrets(settings.secrets_dir)(account.username))
            return
    raise CrowdprefError(f"no account '{username}' in study '{config.name}': check the username (crowdpref demo prints one)")


@app.command()
@friendly_errors
def withdraw(
    prolific_id: str = typer.Argument(None, help="The participant's Prolific id (or invite key). It is never "
                                      "printed; the store compares it with its salted hashes.", show_default=False),
    study: Path = typer.Option(..., "--study", help="The study config the participant took part in."),
    username: str = typer.Option(None, "--username", help="Name them by their Argilla username instead "
                                 "(e.g. an invite participant).", show_default=False),
    reason: str = typer.Option("asked to withdraw", "--reason", help="Recorded in the event log (no ids)."),
) -> None:
    """Withdraw a participant who asked for it (by message): their work stops counting (the slots go
    back to the pool), their records leave their Argilla dataset, a writer's study-2 pairs are
    retired (unrated ones leave the raters' datasets), the run folder's exports are rewritten
    without their rows, and the next aggregation and release leave their answers and ratings out. An active participant's unanswered work is released first. Running it
    again changes nothing and says so."""
    from dataclasses import replace

    from crowdpref.config import load_study
    from crowdpref.store import ACTIVE, RELEASING, open_store
    from crowdpref.studies import open_collection
    from crowdpref.withdrawals import participations
    from crowdpref.withdrawals import withdraw as withdraw_participant

    if (prolific_id is None) == (username is None):
        raise ConfigError("name the participant by their Prolific id (the argument) or by --username, one of them")
    config = load_study(study)
    settings = _settings()
    store = open_store(settings)
    try:
        found = participations(store, config.name, key=prolific_id, username=username)
        if not found:
            who = "with that id" if prolific_id is not None else f"'{username}'"
            raise CrowdprefError(f"no participant {who} in study '{config.name}' (the store keeps ids only as "
                                 "salted hashes): check the id, or name them with --username")
        argilla_down = _reachable(f"{settings.argilla_api_url}/api/v1/status", settings.embedded_argilla)
        if argilla_down is not None and any(p.status in (ACTIVE, RELEASING) for _, p in found):
            raise ServiceError(_argilla_down(settings, argilla_down) + " - an active participant's work must "
                               "leave Argilla before they are withdrawn")
        for info, participant in found:
            if argilla_down is None:
                result = withdraw_participant(open_collection(study, info.key, settings),  # type: ignore[arg-type]
                                              participant, reason)
            else:  # finished participants: the store alone; their records stay until Argilla answers
                result = replace(withdraw_participant(store, participant, reason, info,
                                                      run_folder=settings.runs_dir / config.name),
                                 argilla="Argilla is not reachable")
            console.print(result.message, highlight=False, soft_wrap=True)
    finally:
        store.close()
