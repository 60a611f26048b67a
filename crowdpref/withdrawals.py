"""Withdrawals: a participant who withdraws takes their work out of the study.

Prolific tells participants that returning a submission means it should not be used, and asks
researchers to delete the data of people who withdraw. Three triggers reach :func:`withdraw`:
a RETURNED, REJECTED or TIMED-OUT status for a participant who had completed (the portal's
Prolific webhook, or the ``sync-prolific`` backstop), and ``crowdpref withdraw`` for someone who
asks by message. A withdrawal

- releases an active participant first (their unanswered work returns to the pool);
- marks them withdrawn in the study store in one transaction (:meth:`Store.withdraw`): none of
  their answers counts again and the slots of their counted answers return to the pool, so
  while the study collects each item still ends with R answers by others;
- deletes their records from their Argilla dataset (when the collection is at hand);
- and from then on every aggregation and release build leaves their rows out
  (:func:`withdrawn_in`, :func:`leave_out_all`): their answers, the pairs built from those
  answers with those pairs' ratings, and their ratings. That is the one rule, applied to every
  frame by its columns, so no file of the run folder has to be rewritten and a withdrawal after
  publication is honoured by the next ``publish-dataset`` run (whose Hub push deletes what the
  release no longer has).

Nothing here prints or stores an external id: participants are named by their Argilla username.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from crowdpref.errors import CrowdprefError
from crowdpref.store import ACTIVE, COMPLETE, RELEASING, CollectionInfo, ParticipantState, Store, StoreError

KEY_COLUMNS = ("participant_key", "rater_key")
"""Columns naming a participant (a writer in study 1, a rater in study 2)."""
RESPONSE_COLUMNS = ("response_id", "first_response_id", "second_response_id", "response_a_id", "response_b_id",
                    "chosen_response_id", "rejected_response_id")
"""Columns naming an answer of study 1."""
PLATFORM_WITHDRAWALS = ("RETURNED", "REJECTED", "TIMED-OUT")
"""Prolific statuses that withdraw a participant who had completed."""
STAT = "withdrawn_participants"
"""The ``aggregation.json`` field: withdrawals the aggregation left out."""

T = TypeVar("T")


# --- the withdrawal itself ------------------------------------------------------------------------
@dataclass(frozen=True)
class Withdrawal:
    """What one call to :func:`withdraw` did (no external id in it)."""

    username: str
    study_key: str
    now: bool  # False: they had withdrawn already; nothing changed
    items: tuple[str, ...] = ()  # items whose counted answer went back to the pool
    released: bool = False  # an active participant's unanswered work was released first
    argilla: str | None = None  # why their records could not be deleted from Argilla (None: done or not tried)

    @property
    def message(self) -> str:
        """One line for the operator's terminal or the webhook's outcome."""
        if not self.now:
            line = f"{self.username} ({self.study_key}): already withdrawn; nothing changed"
        else:
            line = (f"{self.username} ({self.study_key}): withdrawn; "
                    + ("their unanswered work was released first; " if self.released else "")
                    + (f"{len(self.items)} counted answers no longer count" if len(self.items) != 1
                       else "1 counted answer no longer counts")
                    + " (the slots are back in the pool) and the next aggregation and release leave their rows out")
        if self.argilla:
            line += f"; their records could not be deleted from Argilla now ({self.argilla}): withdraw again later"
        return line


def withdraw(target: Any, participant: ParticipantState, reason: str,
             info: CollectionInfo | None = None) -> Withdrawal:
    """Withdraw ``participant`` for ``reason`` (recorded in the store's ``withdrawn`` event).

    ``target`` is a :class:`~crowdpref.collection.Collection` (Argilla at hand: an active
    participant is released first, their records are deleted from their dataset) or a
    :class:`Store` with the participant's collection ``info`` (a finished participant only).
    Idempotent: a second call changes nothing in the store (``now`` False) and deletes any of
    their records still in Argilla."""
    collection = None if isinstance(target, Store) else target
    store: Store = collection.store if collection is not None else target
    info = collection.info if collection is not None else info
    if info is None:
        raise StoreError("withdraw needs the participant's collection (a Collection, or the store and its info)")
    participant = store.participant(info.id, participant.username)  # as it stands now
    released = False
    if participant.status in (ACTIVE, RELEASING) and participant.withdrawn_at is None:
        if collection is None:
            raise StoreError(f"{participant.username} is still {participant.status}: their work must be released "
                             "first, which needs Argilla (withdraw them through their collection)")
        if participant.status == ACTIVE:
            released = collection.release(participant, reason)
        participant = store.participant(info.id, participant.username)
        if participant.status == RELEASING:  # a release begun earlier (or by another process): finish it
            collection.finish_release(participant)
            participant = store.participant(info.id, participant.username)
    items = store.withdraw(info.id, participant.id, reason)
    problem = None
    if collection is not None and getattr(collection, "owner", None) is not None:
        try:
            dataset = collection.owner.find_dataset(collection.dataset_name, workspace=participant.username)
            if dataset is not None:
                collection.owner.delete_records(dataset, participant.items)
        except CrowdprefError as exc:
            problem = str(exc).splitlines()[0][:200] if str(exc) else exc.__class__.__name__
    return Withdrawal(participant.username, info.key, items is not None, tuple(items or ()), released, problem)


def withdraw_on_platform(target: Any, participant: ParticipantState, status: str,
                         info: CollectionInfo | None = None, via: str = "") -> Withdrawal | None:
    """The rule for a platform status: a completed participant whose submission became
    RETURNED, REJECTED or TIMED-OUT withdrew. None when the status or the participant's state
    says nothing of the kind (an active participant's return releases their work instead)."""
    if status.upper() not in PLATFORM_WITHDRAWALS or participant.status != COMPLETE:
        return None
    return withdraw(target, participant, f"{status.upper()} on Prolific after completion{via}", info)


def participations(store: Store, study_name: str, *, key: str | None = None,
                   username: str | None = None) -> list[tuple[CollectionInfo, ParticipantState]]:
    """The participations in study ``study_name`` of the person known by ``key`` (their Prolific
    id or invite key: looked up by its salted hash) or by their Argilla ``username``."""
    found: list[tuple[CollectionInfo, ParticipantState]] = []
    if key is not None:
        found += [(i, p) for i, p in store.find_by_key(key) if i.study == study_name]
    if username is not None:
        for study_key in ("study1", "study2"):
            info = store.find_collection(study_name, study_key)
            if info is None:
                continue
            try:
                found.append((info, store.participant(info.id, username)))
            except StoreError:
                pass
    return found


# --- leaving their rows out --------------------------------------------------------------------------
@dataclass(frozen=True)
class Withdrawn:
    """Who withdrew, as the run folder's files name them: their participant keys (study-1
    ``participant_key``, study-2 ``rater_key``), and - once :meth:`resolve` saw the files - the
    answers they wrote and the pairs built from those answers."""

    keys: frozenset[str] = frozenset()
    responses: frozenset[str] = frozenset()
    pairs: frozenset[str] = frozenset()

    @property
    def participants(self) -> int:
        return len(self.keys)

    def resolve(self, frames: Iterable[pd.DataFrame | None]) -> Withdrawn:
        """Add the answers of the withdrawn writers and the pairs holding them, found in
        ``frames`` (any frame with ``participant_key`` and ``response_id``; any with
        ``pair_id`` and answer ids)."""
        if not self.keys:
            return self
        frames = [f for f in frames if isinstance(f, pd.DataFrame)]
        responses = set(self.responses)
        for frame in frames:
            if {"participant_key", "response_id"} <= set(frame.columns):
                responses |= set(frame.loc[frame["participant_key"].isin(self.keys), "response_id"].astype(str))
        pairs = set(self.pairs)
        for frame in frames:
            columns = [c for c in RESPONSE_COLUMNS if c in frame.columns and c != "response_id"]
            if "pair_id" in frame.columns and columns:
                hit = frame[columns].isin(responses).any(axis=1)
                pairs |= set(frame.loc[hit, "pair_id"].astype(str))
        return Withdrawn(self.keys, frozenset(responses), frozenset(pairs))

    def leave_out(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` without the rows of people who withdrew: rows naming them (participant or
        rater key), naming an answer they wrote, or belonging to a pair built from one."""
        if not self.keys or not len(frame):
            return frame
        drop = pd.Series(False, index=frame.index)
        for column in KEY_COLUMNS:
            if column in frame.columns:
                drop |= frame[column].isin(self.keys)
        for column in RESPONSE_COLUMNS:
            if column in frame.columns:
                drop |= frame[column].isin(self.responses)
        if "pair_id" in frame.columns:
            drop |= frame["pair_id"].isin(self.pairs)
        return frame.loc[~drop.to_numpy(dtype=bool)].reset_index(drop=True) if drop.any() else frame


def withdrawn_in(store: Store, study_name: str, private_dir: Path) -> Withdrawn:
    """Who withdrew from study ``study_name`` (both collections), by the participant keys of the
    run folder whose ``private/`` holds the key salt."""
    usernames = [u for key in ("study1", "study2") if (info := store.find_collection(study_name, key)) is not None
                 for u in store.withdrawn_usernames(info.id)]
    if not usernames:
        return Withdrawn()
    from crowdpref.pseudonyms import Pseudonyms

    ids = Pseudonyms(private_dir)
    return Withdrawn(frozenset(ids.participant_key(u) for u in usernames))


def leave_out_all(frames: Mapping[str, pd.DataFrame | None], withdrawn: Withdrawn,
                  extra: Iterable[pd.DataFrame | None] = ()) -> dict[str, pd.DataFrame | None]:
    """Every frame of ``frames`` without the rows of people who withdrew (the answers and pairs
    resolved over ``frames`` and ``extra``, e.g. the full responses and pairs files)."""
    if not withdrawn.keys:
        return dict(frames)
    resolved = withdrawn.resolve([*frames.values(), *extra])
    return {name: None if frame is None else resolved.leave_out(frame) for name, frame in frames.items()}


def leave_out_fields(inputs: T, withdrawn: Withdrawn) -> T:
    """A dataclass of frames (the aggregation's inputs) with every frame passed through
    :func:`leave_out_all`."""
    assert is_dataclass(inputs) and not isinstance(inputs, type)
    frames = {f.name: getattr(inputs, f.name) for f in fields(inputs)
              if isinstance(getattr(inputs, f.name), pd.DataFrame)}
    return replace(inputs, **leave_out_all(frames, withdrawn))  # type: ignore[type-var]


def stale(aggregation: Mapping[str, Any] | None, withdrawn: Withdrawn) -> bool:
    """True when people withdrew after the aggregation (``aggregation.json``) was computed:
    its preferences and statistics still hold their ratings; aggregate again first."""
    done = (aggregation or {}).get(STAT) or 0
    return withdrawn.participants != int(done)
