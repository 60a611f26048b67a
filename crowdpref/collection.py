"""Collecting work from people on Argilla: one mechanism for both studies.

Study 1 collects R written answers per question, study 2 R ratings per answer pair; both hand
each participant Q distinct items in their own workspace and dataset (the method's way: exact
allocation needs per-participant datasets, Argilla has no per-user quota). What differs between
the studies - dataset settings, the record for an item, how an answer becomes a row - is a
:class:`CollectionSpec`; everything else lives here:

- the **ledger** (``<run>/<key>/ledger.json``): who holds which items, what they submitted,
  who was released, and the pool of released slots. It is the single source of truth for
  allocation and is saved after every change, so a crash loses at most one step;
- **provisioning**: account, workspace, dataset and records per participant, idempotent and
  self-repairing (a rerun completes a participant whose provisioning crashed half-way);
- **monitoring**: reads back submitted answers, marks participants complete, releases those
  inactive for too long (or dropped by the operator): their unsubmitted records leave their
  dataset (late answers cannot count twice) and go back to the pool, and new participant
  accounts receive them - so every item ends with exactly R answers, none more;
- **export** of the collected answers and a validation report.

The invariant, checked by :meth:`Ledger.copies_per_item`: for every item, (copies held by
participants who were not released) + (copies submitted by released participants) + (copies
in the pool) == R.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import argilla as rg

from crowdpref.allocation import allocate, reallocate
from crowdpref.argilla_client import ArgillaOwner, SubmittedAnswer
from crowdpref.config import Batches
from crowdpref.errors import CrowdprefError
from crowdpref.roster import Roster
from crowdpref.runfolder import write_json

ATTENTION_CHECK_ID = "attention-check"
LEDGER_FILE = "ledger.json"  # in <run>/<study key>/


class CollectionSpec(Protocol):
    """What one study contributes to the shared collection mechanism."""

    key: str  # "study1" / "study2": folder and dataset name part
    study_name: str
    username_prefix: str
    copies: int  # R
    per_participant: int  # Q
    seed: int
    remainder: str  # "smaller_last" | "error"
    inactive_after_s: float
    batches: Batches  # how the items split into participant batches (remainder included)

    def item_ids(self) -> list[str]: ...

    def dataset_settings(self) -> rg.Settings: ...

    def record(self, item_id: str) -> rg.Record: ...

    def attention_record(self) -> rg.Record | None: ...


# --- the ledger ----------------------------------------------------------------------------
ALLOCATED, PROVISIONED, COMPLETE, RELEASED = "allocated", "provisioned", "complete", "released"


@dataclass
class Participant:
    username: str
    items: list[str]
    origin: str = "allocation"  # or "reallocation-<round>"
    status: str = ALLOCATED
    provisioned_at: float | None = None
    submitted: dict[str, float] = field(default_factory=dict)  # item id -> submitted at (epoch s)
    released_at: float | None = None
    released_items: list[str] = field(default_factory=list)
    release_reason: str | None = None
    drop_requested: bool = False

    @property
    def outstanding(self) -> list[str]:
        return [item for item in self.items if item not in self.submitted]

    @property
    def last_activity(self) -> float | None:
        times = [*self.submitted.values(), self.provisioned_at or 0.0]
        return max(times) if any(times) else None


@dataclass
class Ledger:
    key: str
    copies: int
    per_participant: int
    seed: int
    items: list[str]
    participants: list[Participant] = field(default_factory=list)
    pool: list[str] = field(default_factory=list)
    reallocation_rounds: int = 0

    # persistence -----------------------------------------------------------------------
    def save(self, path: Path) -> None:
        write_json(asdict(self), path)

    @classmethod
    def load(cls, path: Path) -> Ledger:
        data = json.loads(path.read_text())
        data["participants"] = [Participant(**p) for p in data["participants"]]
        return cls(**data)

    # queries ---------------------------------------------------------------------------
    def participant(self, username: str) -> Participant:
        for participant in self.participants:
            if participant.username == username:
                return participant
        raise CrowdprefError(f"no participant '{username}' in the {self.key} ledger")

    def active(self) -> list[Participant]:
        return [p for p in self.participants if p.status in (ALLOCATED, PROVISIONED)]

    def submitted_per_item(self) -> Counter[str]:
        return Counter(item for p in self.participants for item in p.submitted)

    def copies_per_item(self) -> Counter[str]:
        """Copies accounted for per item; must equal ``copies`` for every item."""
        counts: Counter[str] = Counter(self.pool)
        for p in self.participants:
            counts.update(list(p.submitted) if p.status == RELEASED else p.items)  # keys, not timestamps
        return counts

    def check(self) -> list[str]:
        """Ledger anomalies (empty when consistent)."""
        problems = []
        counts = self.copies_per_item()
        for item in self.items:
            if counts[item] != self.copies:
                problems.append(f"item {item} is accounted {counts[item]} times instead of {self.copies}")
        for p in self.participants:
            if len(set(p.items)) != len(p.items):
                problems.append(f"{p.username} holds an item twice")
        return problems

    @property
    def complete(self) -> bool:
        submitted = self.submitted_per_item()
        return all(submitted[item] == self.copies for item in self.items)

    def next_username(self, prefix: str) -> str:
        return f"{prefix}-{len(self.participants) + 1:04d}"


def new_ledger(spec: CollectionSpec) -> Ledger:
    items = spec.item_ids()
    batches = allocate(items, spec.copies, spec.per_participant, seed=spec.seed, remainder=spec.remainder)
    ledger = Ledger(spec.key, spec.copies, spec.per_participant, spec.seed, items)
    for batch in batches:
        ledger.participants.append(Participant(ledger.next_username(spec.username_prefix), list(batch)))
    return ledger


# --- progress ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ParticipantProgress:
    username: str
    status: str
    assigned: int
    submitted: int
    released: int
    origin: str


@dataclass(frozen=True)
class Progress:
    needed: int
    submitted: int
    outstanding: int
    in_pool: int
    participants: list[ParticipantProgress]
    complete: bool
    released_now: list[str] = field(default_factory=list)
    created_now: list[str] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.submitted / self.needed if self.needed else 1.0


def progress(ledger: Ledger, released_now: Sequence[str] = (), created_now: Sequence[str] = ()) -> Progress:
    submitted = sum(len(p.submitted) for p in ledger.participants)
    outstanding = sum(len(p.outstanding) for p in ledger.active())
    return Progress(
        needed=len(ledger.items) * ledger.copies,
        submitted=submitted,
        outstanding=outstanding,
        in_pool=len(ledger.pool),
        participants=[
            ParticipantProgress(p.username, p.status, len(p.items), len(p.submitted), len(p.released_items), p.origin)
            for p in ledger.participants
        ],
        complete=ledger.complete,
        released_now=list(released_now),
        created_now=list(created_now),
    )


# --- the collection --------------------------------------------------------------------------
class Collection:
    """One study's collection on one Argilla server, backed by its ledger in the run folder."""

    def __init__(self, spec: CollectionSpec, owner: ArgillaOwner, folder: Path, clock: Callable[[], float] = time.time):
        self.spec = spec
        self.owner = owner
        self.folder = folder
        self.clock = clock
        self.roster = Roster(folder.parent / "private" / f"{spec.key}-roster.json", owner.api_url)

    @property
    def ledger_path(self) -> Path:
        return self.folder / LEDGER_FILE

    @property
    def dataset_name(self) -> str:
        return f"{self.spec.study_name}-{self.spec.key}"

    def ledger(self) -> Ledger:
        if self.ledger_path.exists():
            return Ledger.load(self.ledger_path)
        ledger = new_ledger(self.spec)
        ledger.save(self.ledger_path)
        return ledger

    # provisioning ------------------------------------------------------------------------
    def provision(self, ledger: Ledger, on_participant: Callable[[str], None] = lambda u: None) -> list[str]:
        """Provision every participant not provisioned yet; returns their usernames. Safe to
        rerun at any point: each step finds what exists and completes what is missing."""
        done = []
        settings = self.spec.dataset_settings()
        for participant in ledger.participants:
            if participant.status != ALLOCATED:
                continue
            self._provision_one(participant, settings)
            participant.status = PROVISIONED
            participant.provisioned_at = self.clock()
            ledger.save(self.ledger_path)
            done.append(participant.username)
            on_participant(participant.username)
        return done

    def _provision_one(self, participant: Participant, settings: rg.Settings) -> None:
        password = self.roster.password_for(participant.username)
        workspace = self.owner.ensure_workspace(participant.username)
        self.owner.ensure_annotator(participant.username, password, workspace)
        dataset = self.owner.ensure_dataset(self.dataset_name, workspace, settings)
        records = [self.spec.record(item) for item in participant.items]
        check = self.spec.attention_record()
        if check is not None:
            records.append(check)
        self.owner.log_records(dataset, records)
        held = set(self.owner.record_ids(dataset))
        expected = {str(r.id) for r in records}
        if held != expected:
            raise CrowdprefError(
                f"workspace '{participant.username}' holds {len(held)} records instead of its "
                f"{len(expected)} allocated ones (extra: {sorted(held - expected)[:3]}): "
                "delete that dataset in Argilla and rerun"
            )

    # monitoring ----------------------------------------------------------------------------
    def monitor(self, ledger: Ledger) -> Progress:
        """Read answers back, complete/release participants, re-allocate the pool to new
        participants and provision them. Never waits for people: returns the progress."""
        now = self.clock()
        released_now = []
        for participant in ledger.active():
            if participant.status != PROVISIONED:
                continue
            self._read_submissions(participant)
            if not participant.outstanding:
                participant.status = COMPLETE
            elif participant.drop_requested:
                self._release(ledger, participant, "dropped by the operator", now)
                released_now.append(participant.username)
            elif now - (participant.last_activity or now) > self.spec.inactive_after_s:
                self._release(ledger, participant, f"no submission for {self.spec.inactive_after_s / 60:.0f} min", now)
                released_now.append(participant.username)
            ledger.save(self.ledger_path)
        created = self._reallocate_pool(ledger)
        if created:
            self.provision(ledger)
        return progress(ledger, released_now, created)

    def _dataset_of(self, username: str) -> rg.Dataset:
        dataset = self.owner.find_dataset(self.dataset_name, workspace=username)
        if dataset is None:
            raise CrowdprefError(
                f"dataset '{username}/{self.dataset_name}' is missing in Argilla: rerun provisioning "
                "(the ledger says it was provisioned)"
            )
        return dataset

    def _read_submissions(self, participant: Participant) -> list[SubmittedAnswer]:
        answers = self._submitted_answers(participant.username)
        held = set(participant.items)
        for answer in answers:
            if answer.record_external_id in held and answer.record_external_id not in participant.submitted:
                at = answer.updated_at.timestamp() if answer.updated_at else self.clock()
                participant.submitted[answer.record_external_id] = at
        return answers

    def _submitted_answers(self, username: str) -> list[SubmittedAnswer]:
        """The participant's own submitted answers (someone else answering in their workspace,
        e.g. the owner trying the UI, never counts)."""
        user_id = self.owner.user_id(username)
        return [a for a in self.owner.answers(self._dataset_of(username))
                if a.status == "submitted" and a.user_id == user_id]

    def _release(self, ledger: Ledger, participant: Participant, reason: str, now: float) -> None:
        """Remove the participant's unsubmitted records from their dataset (so a late answer
        cannot count twice) and put those slots back in the pool. Submitted answers stay."""
        unsubmitted = participant.outstanding
        to_delete = list(unsubmitted)
        if self.spec.attention_record() is not None:
            to_delete.append(ATTENTION_CHECK_ID)
        self.owner.delete_records(self._dataset_of(participant.username), to_delete)
        # an answer may have arrived between our read and the delete: it went with the record,
        # and its slot is re-collected below, so it is never counted twice.
        participant.status = RELEASED
        participant.released_at = now
        participant.released_items = unsubmitted
        participant.release_reason = reason
        ledger.pool.extend(unsubmitted)

    def _reallocate_pool(self, ledger: Ledger) -> list[str]:
        if not ledger.pool:
            return []
        ledger.reallocation_rounds += 1
        handed_out = reallocate(
            ledger.pool, self.spec.per_participant, seed=self.spec.seed + ledger.reallocation_rounds
        )
        created = []
        for batch in handed_out.batches:
            participant = Participant(
                ledger.next_username(self.spec.username_prefix),
                list(batch),
                origin=f"reallocation-{ledger.reallocation_rounds}",
            )
            ledger.participants.append(participant)
            created.append(participant.username)
        ledger.pool = []
        ledger.save(self.ledger_path)
        return created

    def next_release_in(self, ledger: Ledger) -> float | None:
        """Seconds until the earliest provisioned participant with work outstanding counts as
        inactive (0 if one already does); None when nobody is waiting to be released."""
        now = self.clock()
        due = [
            (p.last_activity or now) + self.spec.inactive_after_s - now
            for p in ledger.participants
            if p.status == PROVISIONED and p.outstanding
        ]
        return max(0.0, min(due)) if due else None

    def request_drop(self, ledger: Ledger, username: str) -> None:
        participant = ledger.participant(username)
        if participant.status in (COMPLETE, RELEASED):
            raise CrowdprefError(f"participant '{username}' is already {participant.status}: nothing to drop")
        participant.drop_requested = True
        ledger.save(self.ledger_path)

    # export --------------------------------------------------------------------------------
    def submitted_answers(self, ledger: Ledger) -> list[tuple[Participant, SubmittedAnswer]]:
        """Every provisioned participant's own submitted answers (attention check included),
        one read per participant."""
        return [(p, answer) for p in ledger.participants if p.status != ALLOCATED
                for answer in self._submitted_answers(p.username)]

    def collected_answers(
        self, ledger: Ledger, submitted: Sequence[tuple[Participant, SubmittedAnswer]] | None = None
    ) -> list[tuple[Participant, SubmittedAnswer]]:
        """The answers that count - those the ledger recorded (never the attention check) - from
        ``submitted`` (default: read now)."""
        submitted = self.submitted_answers(ledger) if submitted is None else submitted
        return [(p, answer) for p, answer in submitted if answer.record_external_id in p.submitted]

    def validation_report(self, ledger: Ledger, answers: Sequence[tuple[Participant, SubmittedAnswer]]) -> dict[str, Any]:
        """Every item has its R answers; every workspace held exactly its allocation; anomalies."""
        anomalies = list(ledger.check())
        per_item = Counter(answer.record_external_id for _, answer in answers)
        short = {item: per_item[item] for item in ledger.items if per_item[item] != ledger.copies}
        anomalies += [f"item {item} has {n} answers instead of {ledger.copies}" for item, n in short.items()]
        seen: Counter[tuple[str, str]] = Counter((p.username, a.record_external_id) for p, a in answers)
        anomalies += [f"{user} answered {item} {n} times" for (user, item), n in seen.items() if n > 1]
        workspaces_ok = 0
        for participant in ledger.participants:
            if participant.status == ALLOCATED:
                continue
            held = set(self.owner.record_ids(self._dataset_of(participant.username))) - {ATTENTION_CHECK_ID}
            expected = set(participant.submitted) if participant.status == RELEASED else set(participant.items)
            if held == expected:
                workspaces_ok += 1
            else:
                anomalies.append(
                    f"workspace {participant.username} holds {sorted(held ^ expected)[:3]} beyond/below its allocation"
                )
        return {
            "items": len(ledger.items),
            "answers": len(answers),
            "answers_per_item": ledger.copies,
            "items_with_exactly_r_answers": len(ledger.items) - len(short),
            "participants": len(ledger.participants),
            "released_participants": sum(p.status == RELEASED for p in ledger.participants),
            "workspaces_matching_allocation": workspaces_ok,
            "anomalies": anomalies,
            "valid": not anomalies,
        }
