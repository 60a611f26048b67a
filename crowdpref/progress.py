"""A study's progress while it runs, read from the study store (and, when asked, from Prolific):
what ``crowdpref progress`` shows.

For each study (study 1: answers per question; study 2: ratings per pair) :func:`study_progress`
returns a :class:`StudyProgress` with:

- **submitted / needed**: answers (or ratings) that count against items x R, and the items
  that have all R;
  what is held by active participants and what nobody holds yet (the next claims take it);
  answers taken out of the count (excluded, reopened, withdrawn);
- **participants by status**: every status of :class:`~crowdpref.store.ParticipantStatus`
  (zeros included), and how many of them withdrew (a withdrawal is not a status);
- **checks**: the quality-check verdicts the store records (:func:`crowdpref.checks.checks_report`),
  the work excluded for failed checks, and the participants flagged too fast
  (:func:`crowdpref.work_quality.time_on_task`; None when the study's ``too_fast_seconds`` is 0);
- **places on Prolific**: the store's record of the collection's Prolific study (its state and
  places), the pacing of its places as the last collection run or sync decided it
  (:class:`Pacing`: open / needed / cap, and the next step), and, with ``ask_prolific``, what Prolific says now (status, places, places taken,
  submissions per status) - one call each, no retry, a short timeout; when Prolific cannot be
  reached, :attr:`LivePlaces.error` says why in one line;
- **spend so far** (studies that recruit on Prolific): participants whose approval the store
  recorded (an ``approved`` event of the sync) times the config's reward plus the fee, and the
  most that can still be added by the complete work not approved or rejected yet; beside the
  planned cost of the first places (:class:`~crowdpref.config.plan.ProlificCost`).

It only reads. A SQLite store that does not exist is not created (the study has not started);
an existing one is read in read transactions, which on SQLite (WAL) never wait for writers nor
hold them up, and no write lock is taken, so the portal's claims go on while it runs. (Opening a
store whose schema is older than this crowdpref upgrades it, as every command does.) No
Prolific id, username, password or token is in the result.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from crowdpref.config import StudyConfig
from crowdpref.store import (
    COMPLETE,
    ParticipantStatus,
    PlatformStudy,
    Store,
)

StudyKey = Literal["study1", "study2"]
KEYS: tuple[StudyKey, StudyKey] = ("study1", "study2")
PROLIFIC_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Checks:
    """The quality checks of one study as the store records them."""

    per_batch: int  # checks the config puts in every batch (0: none)
    graded: int  # participants with a verdict
    passed: int
    failed: int
    unanswered: int
    excluded_participants: int  # their counted work was taken out (failed checks, on_fail: exclude)
    excluded_answers: int
    too_fast: int | None  # participants whose median time per item is below too_fast_seconds; None: flag off
    too_fast_seconds: float


@dataclass(frozen=True)
class Places:
    """The store's record of a study's Prolific study (its Prolific id is left out)."""

    platform: str  # prolific
    state: str  # as recorded at the last recruit or sync: unpublished, active, paused...
    places: int | None


@dataclass(frozen=True)
class Pacing:
    """How the study's places open, as the last collection run or sync decided
    (:func:`crowdpref.recruitment.raise_places`): None fields are what it did not record."""

    pace: str  # e.g. "paced: 10 places per step, at least 10 s apart (capacity 1 arrival/s, ...)"
    open: int | None  # places open after that run
    needed: int | None  # places the work needed then
    cap: int | None  # the budget cap (max_places)
    next_step: str  # what happens next, in words
    at: float | None = None  # when (the store's clock)

    def describe(self) -> str:
        numbers = "/".join("?" if n is None else str(n) for n in (self.open, self.needed, self.cap))
        return f"{numbers} open/needed/cap; next: {self.next_step}"


@dataclass(frozen=True)
class LivePlaces:
    """What Prolific said about the study just now (``error``: why it could not be asked)."""

    status: str | None = None
    places: int | None = None
    places_taken: int | None = None  # submissions holding a place (not returned, timed out or rejected)
    submissions: dict[str, int] = field(default_factory=dict)  # Prolific status -> count (zeros left out)
    error: str | None = None


@dataclass(frozen=True)
class Spend:
    """Money on Prolific for one study, in major units of the workspace currency."""

    reward: int  # minor units per participant (the config's prolific.studyN.reward)
    fee_rate: float
    approved: int  # participants whose approval the store recorded
    awaiting: int  # complete, not withdrawn, neither approved nor rejected yet
    rejected: int
    planned_places: int | None  # the first places (None: the plan is not known yet)
    simulated: bool  # a simulation on the fake Prolific: no real money

    def _money(self, people: int) -> float:
        return round(people * self.reward / 100 * (1 + self.fee_rate), 2)

    @property
    def paid(self) -> float:
        """Approved participants x reward, plus the fee."""
        return self._money(self.approved)

    @property
    def at_most(self) -> float:
        """:attr:`paid` plus the complete work not decided yet, were it all approved."""
        return self._money(self.approved + self.awaiting)

    @property
    def planned(self) -> float | None:
        """The first places x reward, plus the fee."""
        return None if self.planned_places is None else self._money(self.planned_places)


@dataclass(frozen=True)
class Onboarding:
    """Who went through a study's onboarding (counts only)."""

    started: int  # people who began it (their entry link, before any work)
    in_progress: int  # ... still in it
    passed: int  # ... passed (or finished it, without a quiz): they claim work
    screened_out: int  # ... the quiz turned away: nothing allocated to them
    attempts: int  # quiz attempts in all

    def describe(self) -> str:
        return (f"{self.started} started: {self.passed} passed, {self.screened_out} screened out, "
                f"{self.in_progress} in progress ({self.attempts} quiz attempts)")


@dataclass(frozen=True)
class PartProgress:
    """One study (study 1 or study 2) of the config."""

    key: StudyKey
    unit: str  # "answers" | "ratings"
    item: str  # "question" | "pair"
    started: bool  # the store has its collection (its first claim or run happened)
    items: int | None  # questions / pairs (not started: the plan's, None when not known yet)
    copies: int  # R: answers per question, ratings per pair
    needed: int | None  # items x R
    submitted: int  # that count: at most R per item
    held: int  # in flight: held by participants who are not done
    unclaimed: int  # nobody holds them: the next claims take them
    items_done: int  # items with all R
    excluded: int = 0  # answers taken out of the count: failed checks ...
    reopened: int = 0  # ... unusable or lost (reopened) ...
    withdrawn: int = 0  # ... the participant withdrew
    participants: dict[str, int] = field(default_factory=dict)  # every ParticipantStatus -> count
    withdrawn_participants: int = 0
    checks: Checks | None = None
    platform: Places | None = None  # the store's record of its Prolific study
    pacing: Pacing | None = None  # how its places open (None: no decision recorded yet)
    live: LivePlaces | None = None  # what Prolific said now (None: not asked)
    spend: Spend | None = None  # None: the study does not recruit on Prolific
    onboarding: Onboarding | None = None  # None: the study has no onboarding

    @property
    def percent(self) -> float | None:
        """submitted / needed in percent (None when needed is not known; 100 when nothing is needed)."""
        if self.needed is None:
            return None
        return 100.0 if self.needed == 0 else round(100 * self.submitted / self.needed, 1)

    @property
    def complete(self) -> bool:
        return self.started and self.needed is not None and self.submitted >= self.needed


@dataclass(frozen=True)
class StudyProgress:
    """The progress of a study config's two studies."""

    study: str  # the config's name
    title: str
    recruitment: str  # the config's participants: prolific | invite | simulated
    parts: tuple[PartProgress, PartProgress]
    prolific_note: str | None = None  # why Prolific was not asked (when it could have been)

    @property
    def started(self) -> bool:
        return any(p.started for p in self.parts)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values, the derived numbers (percent, paid...) included."""
        data = asdict(self)
        data["started"] = self.started
        for part, row in zip(self.parts, data["parts"]):
            row["percent"] = part.percent
            row["complete"] = part.complete
            if part.spend is not None:
                row["spend"].update(paid=part.spend.paid, at_most=part.spend.at_most, planned=part.spend.planned)
        return data


# --- reading the store -----------------------------------------------------------------------------
def store_url(settings: Any) -> str:
    """The store the settings name, as every command opens it
    (:func:`crowdpref.store.engine.settings_url`): ``database_url``, else the stack's
    PostgreSQL in the public profile, else SQLite in the state folder."""
    from crowdpref.store.engine import settings_url

    return settings_url(settings)


def open_for_reading(settings: Any) -> Store | None:
    """The settings' study store, opened without a write lock; None when it is a SQLite file
    that does not exist yet (nothing ran: it is not created)."""
    url = store_url(settings)
    if url.startswith("sqlite") and "///" in url:
        path = url.split("///", 1)[1]
        if path != ":memory:" and not Path(path).exists():
            return None
    return Store(url)  # opening a current store takes no write lock (crowdpref.store.engine.upgrade)


def study_progress(config: StudyConfig, settings: Any, *, ask_prolific: bool = False,
                   prolific_timeout_s: float = PROLIFIC_TIMEOUT_S, store: Store | None = None,
                   transport: Any = None) -> StudyProgress:
    """The progress of both studies of ``config`` from the settings' study store (or ``store``).
    ``ask_prolific``: also ask Prolific for each published study's status, places and
    submissions (when the study recruits on Prolific and a token is set; else
    :attr:`StudyProgress.prolific_note` says why not). ``transport``: an httpx transport for
    the Prolific client (tests)."""
    own = store is None
    if own:
        store = open_for_reading(settings)
    try:
        parts = tuple(_part(config, store, key) for key in KEYS)
        records: dict[str, PlatformStudy] = {}
        for key in KEYS if store is not None else ():
            info = store.find_collection(config.name, key)  # type: ignore[union-attr]
            record = store.platform_study(info.id) if info is not None else None  # type: ignore[union-attr]
            if record is not None:
                records[key] = record
    finally:
        if own and store is not None:
            store.close()
    note = None
    if ask_prolific:  # after the store is closed: no read is held open while Prolific answers
        parts, note = _ask_prolific(config, settings, parts, records, prolific_timeout_s, transport)  # type: ignore[arg-type]
    return StudyProgress(config.name, str(config.title), config.participants, parts, note)  # type: ignore[arg-type]


def _planned(config: StudyConfig, key: StudyKey, store: Store | None) -> int | None:
    """The items a study that has not started will have: the config's expected questions (or
    study 1's questions in the store) for study 1, times the pairs per question for study 2."""
    questions = config.questions.expected_questions
    if store is not None:
        info = store.find_collection(config.name, "study1")
        if info is not None:
            questions = len(store.items(info.id))
    if questions is None:
        return None
    plan = config.plan(questions)
    return plan.n_questions if key == "study1" else plan.n_pairs


def _part(config: StudyConfig, store: Store | None, key: StudyKey) -> PartProgress:
    from crowdpref.checks import checks_report

    section = config.study1 if key == "study1" else config.study2
    copies = config.study1.responses_per_question if key == "study1" else config.study2.ratings_per_pair
    unit, item = ("answers", "question") if key == "study1" else ("ratings", "pair")
    info = store.find_collection(config.name, key) if store is not None else None
    statuses = {status.value: 0 for status in ParticipantStatus}
    if info is None:
        n = _planned(config, key, store)
        needed = None if n is None else n * copies
        return PartProgress(key, unit, item, False, n, copies, needed, 0, 0, needed or 0, 0, participants=statuses,
                            checks=_checks(section, []), spend=_spend(config, key, n, [], set(), set()),
                            onboarding=Onboarding(0, 0, 0, 0, 0) if section.onboarding is not None else None)
    assert store is not None
    items = store.items(info.id)
    counts = store.item_counts(info.id)
    participants = store.participants(info.id)
    events = store.events(info.id, kinds=["approved", "rejected"])
    copies = info.copies  # R as the store holds it (the config may have changed since)
    submitted = sum(min(counts.submitted[i], copies) for i in items)
    held = sum(counts.held[i] for i in items)
    needed = len(items) * copies
    statuses.update(Counter(p.status for p in participants))
    report = checks_report(participants, lambda _username: "")
    approved = {e["participant_id"] for e in events if e["kind"] == "approved"}
    rejected = {e["participant_id"] for e in events if e["kind"] == "rejected"} - approved
    return PartProgress(
        key, unit, item, True, len(items), copies, needed, submitted, held,
        unclaimed=max(0, needed - submitted - held),
        items_done=sum(counts.submitted[i] >= copies for i in items),
        excluded=sum(counts.excluded[i] for i in items),
        reopened=sum(counts.reopened[i] for i in items),
        withdrawn=sum(counts.withdrawn[i] for i in items),
        participants=statuses,
        withdrawn_participants=sum(p.withdrawn_at is not None for p in participants),
        checks=_checks(section, participants, report),
        platform=_places(store.platform_study(info.id)),
        pacing=_pacing(store, info.id),
        spend=_spend(config, key, len(items), participants, approved, rejected),
        onboarding=_onboarding(store, info.id) if section.onboarding is not None else None,
    )


def _onboarding(store: Store, cid: int) -> Onboarding:
    records = store.onboarding_records(cid)
    by = Counter(r.status for r in records)
    return Onboarding(len(records), by["in_progress"], by["passed"], by["screened_out"],
                      sum(r.attempts_used for r in records))


def _pacing(store: Store, cid: int) -> Pacing | None:
    """The last pacing decision the store keeps (:func:`crowdpref.recruitment.last_pacing`);
    None when there is none or it cannot be read."""
    from crowdpref.recruitment import last_pacing

    data = last_pacing(store, cid)
    if data is None:
        return None
    return Pacing(str(data.get("pace", "")), data.get("open"), data.get("needed"), data.get("cap"),
                  str(data.get("next", "")), data.get("at"))


def _places(record: PlatformStudy | None) -> Places | None:
    return None if record is None else Places(record.platform, record.state, record.places)


def _checks(section: Any, participants: list[Any], report: dict[str, Any] | None = None) -> Checks:
    from crowdpref.checks import is_check
    from crowdpref.work_quality import time_on_task

    per_batch = int(section.checks.count)
    threshold = float(section.too_fast_seconds)
    too_fast = None
    if threshold > 0:
        too_fast = int(time_on_task(participants, threshold, is_check)["too_fast"].sum()) if participants else 0
    report = report or {}
    return Checks(per_batch, report.get("participants_graded", 0), report.get("passed", 0), report.get("failed", 0),
                  report.get("unanswered", 0), report.get("excluded_participants", 0),
                  report.get("excluded_items", 0), too_fast, threshold)


def _spend(config: StudyConfig, key: StudyKey, n_items: int | None, participants: list[Any],
           approved: set[int], rejected: set[int]) -> Spend | None:
    from crowdpref.recruitment import recruits_on_prolific

    if not recruits_on_prolific(config):
        return None
    part = config.prolific.study1 if key == "study1" else config.prolific.study2
    section = config.study1 if key == "study1" else config.study2
    planned = None
    if n_items is not None:
        batches = section.batches(n_items).participants if n_items else 0
        planned = part.initial_places(batches)
    awaiting = sum(p.status == COMPLETE and p.withdrawn_at is None and p.id not in approved and p.id not in rejected
                   for p in participants)
    return Spend(part.reward, config.prolific.fee_rate, len(approved), awaiting, len(rejected), planned,
                 config.participants == "simulated")


# --- asking Prolific ----------------------------------------------------------------------------------
def _ask_prolific(config: StudyConfig, settings: Any, parts: tuple[PartProgress, ...],
                  records: dict[str, PlatformStudy], timeout_s: float, transport: Any) -> tuple[tuple[PartProgress, ...], str | None]:
    from dataclasses import replace

    from crowdpref.prolific import ProlificClient
    from crowdpref.recruitment import prolific_target, recruits_on_prolific

    if not recruits_on_prolific(config):
        return parts, None
    target = prolific_target(config, settings)
    if target is None or not target.token:
        return parts, "Prolific not asked: PROLIFIC_TOKEN is not set"
    if not records:
        return parts, "Prolific not asked: no study of this config is on Prolific yet"
    options: dict[str, Any] = {"timeout_s": timeout_s, "max_attempts": 1}
    if transport is not None:
        options["transport"] = transport
    with ProlificClient(target.api_url, target.token, **options) as client:
        return tuple(replace(p, live=_live(client, records[p.key])) if p.key in records else p
                     for p in parts), None


def _live(client: Any, platform: PlatformStudy) -> LivePlaces:
    """One study's status, places and submission counts from Prolific; on any failure a
    LivePlaces whose ``error`` says why, without the study's id or the token."""
    import httpx

    from crowdpref.prolific import ProlificError
    from crowdpref.recruitment import FREEING

    try:
        study = client.get_study(platform.external_id)
        counts = client.submission_counts(platform.external_id)
    except ProlificError as exc:
        status = getattr(exc, "status", None)
        kind = type(exc).__name__.removeprefix("Prolific")
        return LivePlaces(error=f"Prolific did not answer ({kind}{f', HTTP {status}' if status else ''})")
    except httpx.HTTPError as exc:
        return LivePlaces(error=f"Prolific could not be reached ({type(exc).__name__})")
    taken = study.places_taken
    if taken is None:  # GET /studies/{id}/ has no places_taken (only the list's StudyShort has it)
        taken = sum(n for status, n in counts.items() if status not in FREEING)
    return LivePlaces(study.status, study.total_available_places, taken, {k: v for k, v in counts.items() if v})


def describe_percent(part: PartProgress) -> str:
    """``submitted/needed (percent)``, e.g. ``36/48 (75.0%)``; ``?`` for what is not known."""
    needed = "?" if part.needed is None else str(part.needed)
    percent = part.percent
    return f"{part.submitted}/{needed}" + ("" if percent is None else f" ({percent:g}%)")


__all__ = ["Checks", "LivePlaces", "Pacing", "PartProgress", "Spend", "StudyProgress", "describe_percent",
           "open_for_reading", "store_url", "study_progress"]
