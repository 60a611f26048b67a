"""Sending an item back to the pool when its counted answer cannot be used.

A counted answer can turn out unusable after the store counted it: the participant (or the
owner) discarded or deleted it in Argilla, or it holds nothing usable (a whitespace-only text).
Left alone, the collection says complete while the export can never succeed. Two ways out,
both ending in :meth:`crowdpref.store.Store.reopen` (the answer stops counting, an event says
why, the slot returns to the pool and the next participant's claim takes it):

- the exports call :func:`reopen_unusable` first: an answer that cannot be used is never
  published, so taking it out of the count needs nobody's judgement; the export then stops
  with :class:`ItemsReopened` and the next collection run collects those items again;
- the operator runs ``crowdpref reopen ITEM --study STUDY.yaml`` for an answer they judge
  unusable themselves (:func:`reopen_item`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crowdpref.argilla_client import SubmittedAnswer
from crowdpref.checks import is_check
from crowdpref.errors import ConfigError, CrowdprefError
from crowdpref.store import CollectionInfo, ParticipantState, Store

LOST = "its answer is no longer submitted in Argilla (discarded or deleted)"

AnswerProblem = Callable[[Mapping[str, Any]], "str | None"]
"""A study's test of an answer's values: why it cannot be used, or None when it can."""


class ItemsReopened(CrowdprefError):
    """Counted answers could not be used and went back to the pool: the collection is not
    complete after all (the next collection run goes on; nothing to fix)."""

    def __init__(self, message: str, items: Sequence[str]):
        super().__init__(message)
        self.items = list(items)


@dataclass(frozen=True)
class Unusable:
    item_id: str
    username: str
    reason: str


def unusable_answers(participants: Sequence[ParticipantState],
                     submitted: Sequence[tuple[ParticipantState, SubmittedAnswer]],
                     problem: AnswerProblem) -> list[Unusable]:
    """The answers the store counts (``submitted`` status, never a quality check) that cannot
    be used: not among the participant's submitted answers in Argilla any more, or ``problem``
    names what is wrong with their values. ``submitted``: every participant's own submitted
    answers as just read from Argilla."""
    by_participant: dict[str, dict[str, SubmittedAnswer]] = {}
    for participant, answer in submitted:
        by_participant.setdefault(participant.username, {})[answer.record_external_id] = answer
    out = []
    for participant in participants:
        answers = by_participant.get(participant.username, {})
        for item in participant.submitted:
            if is_check(item):
                continue
            answer = answers.get(item)
            reason = LOST if answer is None else problem(answer.values)
            if reason is not None:
                out.append(Unusable(item, participant.username, reason))
    return out


def reopen_unusable(store: Store, cid: int, participants: Sequence[ParticipantState],
                    submitted: Sequence[tuple[ParticipantState, SubmittedAnswer]], problem: AnswerProblem,
                    study_label: str, collect_flow: str) -> None:
    """Reopen every unusable counted answer (:func:`unusable_answers`), one store transaction
    each, with an event naming why; then raise :class:`ItemsReopened` saying what went back to
    the pool. Returns quietly when every counted answer can be used."""
    retired = set(store.retired_items(cid))  # a retired pair's rating counts for nothing: nothing to reopen
    found = [e for e in unusable_answers(participants, submitted, problem) if e.item_id not in retired]
    for entry in found:
        store.reopen(cid, entry.item_id, entry.reason, usernames=[entry.username])
    if found:
        shown = "; ".join(f"{e.item_id}: {e.reason}" for e in found[:3]) + ("; ..." if len(found) > 3 else "")
        raise ItemsReopened(
            f"{study_label}: {len(found)} counted answer{'s' if len(found) != 1 else ''} could not be used and went "
            f"back to the pool ({shown}): the next {collect_flow} run collects {'them' if len(found) != 1 else 'it'} "
            "again", [e.item_id for e in found])


def reopen_item(store: Store, study_name: str, item_id: str, reason: str,
                usernames: Sequence[str] | None = None) -> tuple[str, list[str]]:
    """The operator's reopen: find which collection of the study has ``item_id`` (a question
    id in study 1, a pair id in study 2) and reopen its counted answers (all, or those of
    ``usernames``). Returns (collection key, usernames reopened)."""
    if is_check(item_id):
        raise ConfigError(f"'{item_id}' is a quality check, not an item of the study: checks never count, "
                          "there is nothing to reopen")
    key, info = item_collection(store, study_name, item_id)
    return key, store.reopen(info.id, item_id, reason, usernames=usernames)


def item_collection(store: Store, study_name: str, item_id: str) -> tuple[str, CollectionInfo]:
    """The collection of the study that has ``item_id`` (a question id in study 1, a pair id in
    study 2): (its key, its info); a one-line error when neither has it."""
    for key in ("study1", "study2"):
        info = store.find_collection(study_name, key)
        if info is not None and item_id in set(store.items(info.id)):
            return key, info
    raise ConfigError(f"'{item_id}' is not a question or pair of study '{study_name}' in the study store: "
                      "copy the id from the export's message or validation.json")
