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
- a study-1 writer while study 2 runs: retires the study-2 pairs that hold their answers
  (:func:`retire_writers`, :meth:`Store.retire_items`: no claim hands them out again, every
  pair that stays still ends with R ratings) and deletes the raters' unsubmitted records of
  those pairs from the raters' datasets (:func:`clear_retired`; what Argilla could not take now
  stays listed in the store, and the next withdrawal or study-2 monitoring pass deletes it).
  Ratings already given to such a pair stay with their rater, who finishes and is paid; they
  count for nothing and no export holds them;
- rewrites the run folder's exports without their rows (:func:`rewrite_run_folder`);
- and from then on every aggregation and release build leaves their rows out
  (:func:`withdrawn_in`, :func:`leave_out_all`): their answers, the pairs built from those
  answers with those pairs' ratings, and their ratings. That is the one rule, applied to every
  frame by its columns (the same rule rewrites the run folder), so a withdrawal after
  publication is honoured by the next ``publish-dataset`` run, whose Hub push deletes what the
  release no longer has and squashes the dataset's history (:mod:`crowdpref.release.hub`).

Nothing here prints or stores an external id: participants are named by their Argilla username.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pandas as pd

from crowdpref.errors import CrowdprefError, first_line
from crowdpref.runfolder import write_parquet
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
ARGILLA_DOWN: tuple[type[BaseException], ...] = (CrowdprefError, OSError, httpx.HTTPError)
"""What a call to Argilla raises when it is down or refuses (the work stays recorded for later)."""


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
    retired: int = 0  # study-2 pairs holding their answers retired now

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
        if self.retired:
            line += (f"; {self.retired} study-2 pair{'s' if self.retired != 1 else ''} holding their answers "
                     "retired (no longer handed out)")
        if self.argilla:
            line += (f"; their records (or retired pairs' records) could not be deleted from Argilla now "
                     f"({self.argilla}): withdraw again later")
        return line


def withdraw(target: Any, participant: ParticipantState, reason: str,
             info: CollectionInfo | None = None, run_folder: Path | None = None) -> Withdrawal:
    """Withdraw ``participant`` for ``reason`` (recorded in the store's ``withdrawn`` event).

    ``target`` is a :class:`~crowdpref.collection.Collection` (Argilla at hand: an active
    participant is released first, their records are deleted from their dataset) or a
    :class:`Store` with the participant's collection ``info`` (a finished participant only).
    With the run folder (the collection's, or ``run_folder``): a study-1 writer's study-2
    pairs are retired (:func:`retire_writers`) and the run folder's exports rewritten without
    their rows (:func:`rewrite_run_folder`); with Argilla at hand, the raters' unsubmitted
    records of retired pairs are deleted (:func:`clear_retired`). Idempotent: a second call
    changes nothing in the store (``now`` False) and deletes any of their records (and any
    retired record) still in Argilla."""
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
    owner = getattr(collection, "owner", None) if collection is not None else None
    if owner is not None:
        try:
            dataset = owner.find_dataset(collection.dataset_name, workspace=participant.username)
            if dataset is not None:
                owner.delete_records(dataset, participant.items)
        except ARGILLA_DOWN as exc:
            problem = first_line(exc)
    folder = getattr(collection, "folder", None)
    run_path = run_folder or (Path(folder).parent if folder is not None else None)
    retired = retire_writers(store, info.study, run_path) if run_path is not None else []
    if owner is not None:
        problem = problem or clear_retired(store, owner, info.study)
    if run_path is not None:
        rewrite_run_folder(run_path, withdrawn_in(store, info.study, run_path / "private"))
    return Withdrawal(participant.username, info.key, items is not None, tuple(items or ()), released, problem,
                      len(retired))


RETIRED_REASON = "a writer of an answer in the pair withdrew"
"""The reason :func:`retire_writers` records on each retired pair (no ids)."""


def writer_pairs(pairs: pd.DataFrame, responses: Iterable[str]) -> list[str]:
    """The pair ids of ``pairs`` (``pairs.parquet`` rows) holding one of ``responses``. Pure."""
    wanted = set(responses)
    if not wanted or pairs.empty:
        return []
    hit = pairs["first_response_id"].isin(wanted) | pairs["second_response_id"].isin(wanted)
    return sorted(pairs.loc[hit, "pair_id"].astype(str))


def writer_responses(store: Store, study_name: str, private_dir: Path) -> set[str]:
    """The response ids (as ``responses.parquet`` names them) of every study-1 writer of
    ``study_name`` who withdrew: computed from the store and the run's key salt, so they are
    known even once the run folder's files no longer hold those answers."""
    from crowdpref.checks import is_check
    from crowdpref.pseudonyms import Pseudonyms

    info = store.find_collection(study_name, "study1")
    usernames = store.withdrawn_usernames(info.id) if info is not None else []
    if not usernames:
        return set()
    ids = Pseudonyms(private_dir)
    return {ids.response_id(item, username) for username in usernames
            for item in store.participant(info.id, username).items if not is_check(item)}  # type: ignore[union-attr]


def retire_writers(store: Store, study_name: str, run_path: Path) -> list[str]:
    """Retire the study-2 pairs (``pairs.parquet`` of the run folder ``run_path``) that hold an
    answer of a study-1 writer who withdrew (:meth:`Store.retire_items`, one transaction; the
    repeat checks of those pairs go with them). Nothing before study 2 has a collection or
    pairs. Idempotent. Returns the pairs retired now."""
    from crowdpref.checks import repeat_id

    study2 = store.find_collection(study_name, "study2")
    pairs_file = run_path / "pairs.parquet"
    if study2 is None or not pairs_file.exists():
        return []
    responses = writer_responses(store, study_name, run_path / "private")
    if not responses:
        return []
    hit = writer_pairs(pd.read_parquet(pairs_file, columns=["pair_id", "first_response_id", "second_response_id"]),
                       responses)
    return store.retire_items(study2.id, hit, RETIRED_REASON, repeats={repeat_id(p): p for p in hit}) if hit else []


def clear_retired(store: Store, owner: Any, study_name: str) -> str | None:
    """Delete from the raters' Argilla datasets the records of retired study-2 assignments the
    store still lists (:meth:`Store.retired_records`), each participant's deletion recorded
    once done. Returns why it stopped (Argilla down or refusing: the rest stays listed for the
    next call), or None when nothing is left."""
    from crowdpref.argilla_client import DatasetRef

    info = store.find_collection(study_name, "study2")
    if info is None:
        return None
    name = f"{study_name}-{info.key}"
    try:
        for todo in store.retired_records(info.id):
            dataset = (DatasetRef(todo.dataset_id, f"{todo.username}/{name}") if todo.dataset_id
                       else owner.find_dataset(name, workspace=todo.username))
            if dataset is not None:
                owner.delete_records(dataset, todo.items)
            store.retired_records_deleted(info.id, todo.participant_id, todo.items)
    except ARGILLA_DOWN as exc:
        return first_line(exc)
    return None


EXPORT_SKIPPED = ("release",)
"""Run-folder paths :func:`rewrite_run_folder` leaves alone: the release is rebuilt whole by the
next ``publish-dataset`` run (its scan and card cover exactly what it holds)."""


def rewrite_run_folder(run_path: Path, withdrawn: Withdrawn) -> list[Path]:
    """Rewrite every ``*.parquet`` export of the run folder (stage outputs, per-study files,
    ``private/``) without the rows of the people who withdrew (:meth:`Withdrawn.leave_out`,
    resolved over all of them), each atomically (a temporary file, then a rename). The
    release folder and hidden folders are left to the next release build. Returns the files
    rewritten (those that held such rows)."""
    if not withdrawn.keys or not run_path.is_dir():
        return []
    files = [path for path in sorted(run_path.rglob("*.parquet"))
             if not any(part.startswith(".") or part in EXPORT_SKIPPED
                        for part in path.relative_to(run_path).parts[:-1])]
    frames = {path: pd.read_parquet(path) for path in files}
    resolved = withdrawn.resolve(frames.values())
    changed = []
    for path, frame in frames.items():
        kept = resolved.leave_out(frame)
        if len(kept) != len(frame):
            write_parquet(kept, path)
            changed.append(path)
    return changed


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
    run folder whose ``private/`` holds the key salt, with the study-1 writers' answer ids and
    the retired study-2 pairs - from the store, so they hold even once the run folder's files
    were rewritten without those answers."""
    usernames = [u for key in ("study1", "study2") if (info := store.find_collection(study_name, key)) is not None
                 for u in store.withdrawn_usernames(info.id)]
    if not usernames:
        return Withdrawn()
    from crowdpref.pseudonyms import Pseudonyms

    ids = Pseudonyms(private_dir)
    study2 = store.find_collection(study_name, "study2")
    return Withdrawn(frozenset(ids.participant_key(u) for u in usernames),
                     frozenset(writer_responses(store, study_name, private_dir)),
                     frozenset(store.retired_items(study2.id) if study2 is not None else ()))


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
