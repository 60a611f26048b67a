"""Commands on a running study's work: ``drop`` a participant, ``reopen`` an item, show its
``progress``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from crowdpref.cli.common import _require_argilla, _settings, app, console, friendly_errors
from crowdpref.errors import CrowdprefError
from crowdpref.settings import Settings


@app.command()
@friendly_errors
def drop(
    username: str = typer.Argument(..., help="The participant's Argilla username."),
    study: Path = typer.Option(..., "--study", help="The study config the participant belongs to."),
) -> None:
    """Mark a participant as dropped (the next collect run releases their items to the pool).

    Their submitted answers stay; their unanswered items leave their dataset and return to the
    pool, where the next participant's claim takes them."""
    from crowdpref.config import load_study
    from crowdpref.studies import open_collection

    config = load_study(study)
    key = "study2" if username.startswith(f"{config.study2.username_prefix}-") else "study1"
    collection = open_collection(study, key)  # type: ignore[arg-type]
    collection.request_drop(username)
    console.print(f"{username}: marked dropped; the next collect run releases their unanswered items to the pool")


@app.command()
@friendly_errors
def reopen(
    item: str = typer.Argument(..., help="A question id (study 1) or pair id (study 2), e.g. from the export's message."),
    study: Path = typer.Option(..., "--study", help="The study config the item belongs to."),
    participant: list[str] = typer.Option(
        None, "--participant", help="Reopen this participant's answer (their Argilla username; repeatable). "
        "Default: the item's counted answers that cannot be used (read from Argilla)."),
    reason: str = typer.Option("reopened by the operator", "--reason", help="Recorded in the event log."),
) -> None:
    """Send an item back to the pool: its counted answer stops counting (it stays in Argilla,
    an event records why) and the next participant's claim takes the slot. Use it for an answer
    you judge unusable; the exports reopen answers that are empty or discarded by themselves."""
    from crowdpref.config import load_study
    from crowdpref.reopen import reopen_item
    from crowdpref.store import open_store

    config = load_study(study)
    settings = _settings()
    if not participant:
        participant = _unusable_answerers(study, config, settings, item)
    store = open_store(settings)
    try:
        key, reopened = reopen_item(store, config.name, item, reason, usernames=participant)
    finally:
        store.close()
    flow = "collect-responses" if key == "study1" else "collect-ratings"
    console.print(f"{item} ({key}): the answer of {', '.join(reopened)} no longer counts; the slot is back in the "
                  f"pool - the next claim takes it (`crowdpref run {flow} {study}` advances the collection)",
                  highlight=False, soft_wrap=True)


def _unusable_answerers(study: Path, config: Any, settings: Settings, item: str) -> list[str]:
    """Who gave a counted answer to ``item`` that cannot be used, read from Argilla; a one-line
    refusal naming the counted answers when every one of them can be used."""
    from crowdpref.reopen import item_collection, unusable_answers
    from crowdpref.store import open_store
    from crowdpref.studies import open_collection
    from crowdpref.study1 import answer_problem
    from crowdpref.study2 import rating_problem

    store = open_store(settings)
    try:
        key, _ = item_collection(store, config.name, item)
    finally:
        store.close()
    _require_argilla(settings)
    collection = open_collection(study, key, settings)  # type: ignore[arg-type]
    holders = [p for p in collection.participants() if item in p.submitted]
    submitted = [(p, answer) for p in holders for answer in collection._own_answers(p) if answer.status == "submitted"]
    problem = answer_problem if key == "study1" else rating_problem(config.study2.scale_points)
    found = [u.username for u in unusable_answers(holders, submitted, problem) if u.item_id == item]
    if not found:
        raise CrowdprefError(f"every counted answer to {item} can be used (by {', '.join(p.username for p in holders) or 'nobody'}): "
                             "name the one to reopen with --participant USERNAME")
    return found


@app.command()
@friendly_errors
def progress(
    study: Path = typer.Option(..., "--study", help="The study config, e.g. studies/demo.yaml."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON (for scripts) instead of a table."),
    ask_prolific: bool = typer.Option(True, "--prolific/--no-prolific",
                                      help="Ask Prolific for the status, places and submissions of the study's "
                                           "Prolific studies (one try, 5 s timeout; needs PROLIFIC_TOKEN)."),
) -> None:
    """A study's progress: answers (study 1) and ratings (study 2) submitted of those needed,
    participants by status, quality checks, places on Prolific and the spend so far.

    It only reads the study store (never creating it, taking no write lock), so it is safe
    while the study runs; a study that has not started says so."""
    _show_progress(study, as_json, ask_prolific)


def _show_progress(study: Path, as_json: bool, ask_prolific: bool) -> None:
    from crowdpref.config import load_study
    from crowdpref.progress import study_progress

    config = load_study(study)
    result = study_progress(config, _settings(), ask_prolific=ask_prolific)
    if as_json:
        import json

        print(json.dumps(result.to_json(), indent=2))
        return
    _print_progress(result)


def _print_progress(result: Any) -> None:
    """The table of ``crowdpref progress``: one column per study, one row per number."""
    from crowdpref.progress import describe_percent

    s1, s2 = result.parts
    if not result.started:
        console.print(f"study '{result.study}' has not started: nothing is in the study store yet "
                      "(the numbers below are the plan)", highlight=False)
    table = Table(title=f"{result.study}: {result.title}")
    table.add_column("")
    for part in result.parts:
        table.add_column(f"study {part.key[-1]} ({part.unit})", justify="right")

    def row(label: str, value: Callable[[Any], object]) -> None:
        table.add_row(label, *(str(value(p)) for p in (s1, s2)))

    row("submitted / needed", describe_percent)
    row("items with all R", lambda p: f"{p.items_done}/{'?' if p.items is None else p.items} {p.item}s "
                                      f"(R = {p.copies})")
    row("held by participants", lambda p: p.held)
    row("not claimed yet", lambda p: p.unclaimed)
    row("excluded / reopened / withdrawn", lambda p: f"{p.excluded} / {p.reopened} / {p.withdrawn}")
    table.add_section()
    for status in s1.participants:
        row(f"participants {status}", lambda p, status=status: p.participants.get(status, 0))
    row("  of them withdrawn", lambda p: p.withdrawn_participants)
    table.add_section()
    row("onboarding", lambda p: p.onboarding.describe() if p.onboarding is not None else "none")
    row("checks per batch", lambda p: p.checks.per_batch or "none")
    row("checks passed / failed / open", lambda p: f"{p.checks.passed} / {p.checks.failed} / {p.checks.unanswered}")
    row("excluded (people / answers)", lambda p: f"{p.checks.excluded_participants} / {p.checks.excluded_answers}")
    row("too fast", lambda p: "flag off" if p.checks.too_fast is None
        else f"{p.checks.too_fast} (< {p.checks.too_fast_seconds:g} s per item)")
    if any(p.spend is not None for p in result.parts):
        table.add_section()
        row("Prolific study (store)", lambda p: "not created" if p.platform is None
            else f"{p.platform.state}, {p.platform.places if p.platform.places is not None else '?'} places")
        if any(p.pacing is not None for p in result.parts):  # a published study: how its places open
            row("launch", lambda p: "-" if p.pacing is None else p.pacing.pace)
            row("places open/needed/cap", lambda p: "-" if p.pacing is None else p.pacing.describe())
        if any(p.live is not None for p in result.parts):
            row("Prolific now", _live_text)
        row("approved / awaiting / rejected", lambda p: "-" if p.spend is None
            else f"{p.spend.approved} / {p.spend.awaiting} / {p.spend.rejected}")
        row("paid so far (+ fee)", lambda p: "-" if p.spend is None else f"{p.spend.paid:,.2f}")
        row("at most, if awaiting approved", lambda p: "-" if p.spend is None else f"{p.spend.at_most:,.2f}")
        row("planned (first places)", lambda p: "-" if p.spend is None or p.spend.planned is None
            else f"{p.spend.planned:,.2f} ({p.spend.planned_places} places)")
    console.print(table)
    spend = next((p.spend for p in result.parts if p.spend is not None), None)
    if spend is not None:
        console.print(f"money: in the Prolific workspace's currency, Prolific's fee ({spend.fee_rate:.1%}, "
                      "prolific.fee_rate) included" + ("; a simulation on the fake Prolific: not real money"
                                                       if spend.simulated else ""), highlight=False)
    if result.prolific_note:
        console.print(result.prolific_note, highlight=False)
    for part in result.parts:
        if part.live is not None and part.live.error:
            console.print(f"study {part.key[-1]}: {part.live.error}; the store's numbers above still hold",
                          highlight=False)


def _live_text(part: Any) -> str:
    live = part.live
    if live is None:
        return "-"
    if live.error:
        return "not reachable"
    taken = "?" if live.places_taken is None else live.places_taken
    submissions = ", ".join(f"{n} {status.lower()}" for status, n in sorted(live.submissions.items()))
    return f"{live.status.lower() if live.status else '?'}, {taken}/{live.places} places taken" + (
        f"; {submissions}" if submissions else "")
