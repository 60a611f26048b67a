"""What the study store hands back: plain frozen dataclasses, no connection, no secrets in
their ``repr``."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from crowdpref.store.statuses import IN_FLIGHT_OR_DONE, AssignmentStatus, ParticipantStatus


@dataclass(frozen=True)
class Assignment:
    item_id: str
    position: int
    status: str
    swapped: bool | None
    submitted_at: float | None


@dataclass(frozen=True)
class ParticipantState:
    """One participant as the store knows them (no secrets, no external id)."""

    id: int
    username: str
    account_id: int
    account_state: str
    source: str
    status: str
    claimed_at: float
    last_activity_at: float
    records_logged: bool
    drop_requested: bool
    assignments: tuple[Assignment, ...]
    released_at: float | None = None
    release_reason: str | None = None
    dataset_id: str | None = None  # the account's Argilla dataset (None until provisioned)
    session_hash: str | None = None  # salted hash of their platform session (Prolific SESSION_ID)
    checks_answered: int = 0  # quality checks in their batch they answered ...
    checks_passed: int = 0  # ... and passed
    check_verdict: str | None = None  # passed | failed | unanswered; None: no checks graded yet
    excluded_at: float | None = None  # when their submitted work was taken out of the count
    withdrawn_at: float | None = None  # when they withdrew (:meth:`crowdpref.store.Store.withdraw`)

    @property
    def items(self) -> list[str]:
        """Every item the participant holds or held (position order)."""
        return [a.item_id for a in self.assignments]

    @property
    def held(self) -> list[str]:
        return [a.item_id for a in self.assignments if a.status == AssignmentStatus.HELD]

    @property
    def submitted(self) -> dict[str, float]:
        return {a.item_id: a.submitted_at or 0.0 for a in self.assignments if a.status == AssignmentStatus.SUBMITTED}

    @property
    def answered_at(self) -> dict[str, float]:
        """When each item they submitted was submitted (counted or excluded later)."""
        return {a.item_id: a.submitted_at or 0.0 for a in self.assignments
                if a.status in (AssignmentStatus.SUBMITTED, AssignmentStatus.EXCLUDED)}

    @property
    def excluded(self) -> list[str]:
        """Items they submitted that were taken out of the count (failed checks)."""
        return [a.item_id for a in self.assignments if a.status == AssignmentStatus.EXCLUDED]

    @property
    def reopened(self) -> list[str]:
        """Items whose answer was taken out of the count on its own
        (:meth:`crowdpref.store.Store.reopen`)."""
        return [a.item_id for a in self.assignments if a.status == AssignmentStatus.REOPENED]

    @property
    def visible(self) -> list[str]:
        """Items whose records belong in the participant's dataset now (an excluded or reopened
        answer stays in Argilla: it no longer counts, it is not deleted). A withdrawn
        participant's records are deleted: none."""
        if self.withdrawn_at is not None:
            return []
        if self.status == ParticipantStatus.RELEASED:
            return [a.item_id for a in self.assignments
                    if a.status in (AssignmentStatus.SUBMITTED, AssignmentStatus.EXCLUDED, AssignmentStatus.REOPENED)]
        return [a.item_id for a in self.assignments
                if a.status in (*IN_FLIGHT_OR_DONE, AssignmentStatus.EXCLUDED, AssignmentStatus.REOPENED)]

    @property
    def swapped(self) -> dict[str, bool | None]:
        return {a.item_id: a.swapped for a in self.assignments}


@dataclass(frozen=True)
class RetiredRecords:
    """Records of retired assignments still to delete from one participant's Argilla dataset
    (:meth:`crowdpref.store.Store.retired_records`)."""

    participant_id: int
    username: str
    dataset_id: str | None
    items: tuple[str, ...]


@dataclass(frozen=True)
class Claimed:
    """A claim that holds work. ``new`` is False when the participant had claimed before (the
    same work comes back)."""

    participant: ParticipantState
    new: bool

    status: Literal["claimed"] = "claimed"


@dataclass(frozen=True)
class Full:
    """Every item's copies are in flight or done: nothing to hand out now."""

    status: Literal["full"] = "full"


@dataclass(frozen=True)
class Refused:
    """This participant may not claim: ``reason`` is ``released`` (their place was given back)
    or ``excluded`` (e.g. a study-1 participant arriving at study 2)."""

    reason: Literal["released", "excluded"]
    status: Literal["refused"] = "refused"


ClaimResult = Claimed | Full | Refused


@dataclass(frozen=True)
class Account:
    id: int
    username: str
    state: str


@dataclass(frozen=True)
class CollectionInfo:
    id: int
    study: str
    key: str
    copies: int
    per_participant: int
    seed: int
    counterbalance: bool
    username_prefix: str


@dataclass(frozen=True)
class PlatformStudy:
    """The recruitment platform's study a collection was published as."""

    collection_id: int
    platform: str
    external_id: str
    state: str
    group_id: str | None
    places: int | None


@dataclass(frozen=True)
class ItemCounts:
    """Per item: copies submitted, held (in flight), released (given back), excluded
    (submitted by someone who failed the checks, taken out of the count) and reopened (an
    unusable or lost answer taken out of the count) so far."""

    submitted: Counter[str]
    held: Counter[str]
    released: Counter[str]
    excluded: Counter[str] = field(default_factory=Counter)
    reopened: Counter[str] = field(default_factory=Counter)
    withdrawn: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class OnboardingState:
    """One person's way through a study's onboarding (:mod:`crowdpref.onboarding`), known by the
    salted hash of their key (never the key): ``status`` in_progress | passed | screened_out;
    ``step`` introduction | practice | quiz | done; practice answered (each item once) and right;
    quiz attempts used and their scores; when they started and finished, and the time spent
    (the gaps between their steps, each counted up to 30 minutes)."""

    key_hash: str
    source: str
    status: str
    step: str
    practice_answered: int
    practice_correct: int
    attempts_used: int
    last_score: int | None
    best_score: int | None
    started_at: float
    finished_at: float | None
    seconds_spent: float
    session_hash: str | None = None


@dataclass(frozen=True)
class Participation:
    """One participation a platform session or a person's key names, without its work (what a
    webhook's reply needs: :meth:`Store.participations`)."""

    collection_id: int
    participant_id: int
    status: str


@dataclass(frozen=True)
class StatusDelivery:
    """A platform's status change, recorded (:meth:`Store.record_status_delivery`): the
    participation it names (None: nobody this store knows), the outcome written, and whether
    work is left pending for after the reply."""

    found: Participation | None
    outcome: str
    pending: bool
