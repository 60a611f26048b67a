"""Collecting work from people on Argilla: one mechanism for both studies.

Study 1 collects R written answers per question, study 2 R ratings per answer pair; both hand
each participant Q distinct items in their own workspace and dataset (the method's way: exact
allocation needs per-participant datasets, Argilla has no per-user quota). What differs between
the studies - dataset settings, the record for an item, how an answer becomes a row - is a
:class:`CollectionSpec`; everything else lives here, on top of the study store
(:mod:`crowdpref.store`, who holds what and every event):

- **a warm account pool**: K accounts (annotator user, workspace, dataset with the study's
  settings, no records) kept ready, so an arriving participant waits for one bulk call;
- **claims**: nobody holds work before they arrive. :meth:`Collection.claim` takes the items
  with the most copies missing (one store transaction), binds a ready account (or creates one
  on the spot when the pool is empty), and logs the participant's records in one bulk call;
- **monitoring**: reads answers back, marks participants complete, releases those inactive
  (counted from their claim and their last activity - a saved draft counts - never from
  provisioning) or dropped by the operator: their unsubmitted records leave their dataset (a
  late answer cannot count twice) and the slots return to the pool for the next claim. It
  scales with activity, not with participants: when the portal receives Argilla's webhooks
  (:mod:`crowdpref.portal.argilla_hooks`), a pass reads from Argilla only the participants
  with reported activity not read yet, those not read for the backstop (``backstop_s``), and
  those about to be released (read once first, so a late answer is not lost); an idle
  participant costs nothing. Without webhooks every pass reads every active participant;
- **repair**: every step records its intent in the store before it touches Argilla and its
  result after, and every Argilla step is idempotent. So a process killed anywhere leaves a
  state the next :meth:`Collection.monitor` (or a repeated claim) completes, never refuses;
- **export** of the collected answers and a validation report.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import argilla as rg

from crowdpref.argilla_client import ArgillaOwner, DatasetRef, SubmittedAnswer
from crowdpref.checks import FAILED, PASSED, is_check, verdict
from crowdpref.config import Batches
from crowdpref.errors import CrowdprefError
from crowdpref.pacing import wait_for_quiet
from crowdpref.store import (
    ACTIVE,
    COMPLETE,
    CREATING,
    EXCLUDED,
    RELEASED,
    RELEASING,
    RETIRED,
    Account,
    Claimed,
    ClaimResult,
    CollectionInfo,
    ParticipantState,
    Store,
)

BACKSTOP_S = 1800.0  # a spec without ``backstop_s``: read a participant at least every 30 min
log = logging.getLogger("crowdpref.collection")

FINISH_NOTE = """

### When you are done
When you have submitted every item, open **[this page to finish]({url})**: it checks that
everything is submitted and gives you your completion code.
"""


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
    # backstop_s: float (optional; default BACKSTOP_S) - with webhooks, a participant not read
    # from Argilla for this long is read anyway
    pool_size: int  # K warm accounts
    counterbalance: bool  # study 2: display order chosen per rating
    exclude_from: str | None  # participants of this collection key are refused (study 1 -> 2)
    batches: Batches  # how the items split into participant batches (remainder included)

    def item_ids(self) -> list[str]: ...

    def dataset_settings(self) -> rg.Settings: ...

    checks_needed: int  # checks a participant must pass (0 when the batch has none)
    on_fail: str  # "keep" | "exclude": what a failed verdict does to their work

    def record(self, item_id: str, swapped: bool | None = None) -> rg.Record:
        """The Argilla record of an item or of a quality check (:mod:`crowdpref.checks`)."""
        ...

    def check_items(self, items: Sequence[str], orders: Mapping[str, bool], key_hash: str) -> list[tuple[str, bool | None]]:
        """The quality checks to add to a batch of ``items`` (with their display orders)."""
        ...

    def grade_check(self, item_id: str, values: Mapping[str, Any],
                    answers: Mapping[str, tuple[Mapping[str, Any], bool | None]]) -> bool | None:
        """Whether a check's submitted ``values`` pass; None when it cannot be graded yet (a
        repeated pair whose first rating is not in). ``answers``: the participant's submitted
        answers by item (values, display order)."""
        ...


# --- progress ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ParticipantProgress:
    username: str
    source: str
    status: str
    assigned: int  # study items (the checks not included)
    submitted: int  # study items submitted and counted
    released: int
    check_verdict: str | None = None  # passed | failed | unanswered; None: no checks
    excluded: int = 0  # submitted items taken out of the count (failed checks, on_fail: exclude)


@dataclass(frozen=True)
class Progress:
    needed: int
    submitted: int
    outstanding: int  # held by active participants
    unclaimed: int  # slots nobody holds: the next claims take them
    pool_ready: int  # warm accounts waiting for a participant
    participants: list[ParticipantProgress]
    complete: bool
    released_now: list[str] = field(default_factory=list)
    accounts_ready_now: int = 0
    read_now: int = 0  # participants this pass read from Argilla
    webhooks: bool = False  # the pass relied on Argilla's webhooks (else it read everyone active)

    @property
    def share(self) -> float:
        return self.submitted / self.needed if self.needed else 1.0


REFILL_QUIET_S = 5.0
"""A refill that yields to arrivals provisions its next account only once nobody has claimed
for this long (see :meth:`Collection.refill_pool`)."""
REFILL_PATIENCE_S = 60.0
"""... or once the portal's background refill has waited this long for such a pause."""


# --- the collection --------------------------------------------------------------------------
class Collection:
    """One study's collection on one Argilla server, backed by the study store."""

    def __init__(self, spec: CollectionSpec, owner: ArgillaOwner, folder: Path, store: Store,
                 finish_url: str | None = None):
        self.spec = spec
        self.owner = owner
        self.folder = folder
        self.store = store
        self.finish_url = finish_url  # the portal's "I am done" page, linked from the guidelines
        self._info: CollectionInfo | None = None
        self._refill_lock = threading.Lock()  # one account provisioned at a time in this process
        self._background_refill = threading.Lock()  # held while a background refill runs
        self.refill_quiet_s = REFILL_QUIET_S

    @property
    def clock(self) -> Any:
        return self.store.clock

    @property
    def info(self) -> CollectionInfo:
        """The store's collection for this study (created with its items on first use)."""
        if self._info is None:
            self._info = self.store.collection(
                self.spec.study_name, self.spec.key, self.spec.item_ids(), copies=self.spec.copies,
                per_participant=self.spec.per_participant, seed=self.spec.seed,
                username_prefix=self.spec.username_prefix, counterbalance=self.spec.counterbalance,
            )
        return self._info

    @property
    def dataset_name(self) -> str:
        return f"{self.spec.study_name}-{self.spec.key}"

    # the warm pool ----------------------------------------------------------------------------
    def refill_pool(self, size: int | None = None, *, patience_s: float | None = None) -> int:
        """Top the pool up to ``size`` (default: the config's K) ready accounts, and finish any
        account a killed process left half-created. Returns how many became ready.

        ``patience_s``: yield to arrivals. Provisioning an account (a bcrypt hash, a workspace,
        a dataset) costs Argilla as much CPU as several arrivals, so during a launch burst it
        would slow every participant down; before each account, wait until nobody has claimed
        for :attr:`refill_quiet_s`, at most ``patience_s`` (then go on: a steady stream must not
        starve the pool). 0: stop this pass instead of waiting (monitoring refills again on its
        next pass). None: do not yield (an explicit refill before a study opens)."""
        if patience_s is not None and not self._yield_to_arrivals(patience_s):
            return 0  # people are arriving: not even planned (a planned account is one Argilla lacks)
        with self._refill_lock:
            self.store.plan_pool(self.info, self.spec.pool_size if size is None else size)
        made = 0
        while patience_s is None or self._yield_to_arrivals(patience_s):
            with self._refill_lock:
                leased = self.store.lease_unbound_creating(self.info)  # one at a time
                if not leased:
                    break
                try:
                    dataset = self._provision_account(leased[0])
                except Exception:
                    self.store.drop_lease(self.info, leased[0].id)
                    raise
                self.store.account_ready(self.info, leased[0].id, str(dataset.id))
                made += 1
        return made

    def _yield_to_arrivals(self, patience_s: float) -> bool:
        """Wait (at most ``patience_s``) until nobody has claimed in this collection for
        :attr:`refill_quiet_s` - read from the store, so a flow's monitoring sees the portal's
        arrivals. True: provision the next account now; False: arrivals now and no patience."""
        def idle() -> float:
            last = self.store.last_claim_at(self.info.id)
            return math.inf if last is None else self.clock() - last

        return wait_for_quiet(idle, self.refill_quiet_s, patience_s) or patience_s > 0

    def refill_in_background(self) -> threading.Thread | None:
        """Refill the pool in a daemon thread (after a claim took a warm account), yielding to
        arrivals (:meth:`refill_pool`, ``patience_s`` = :data:`REFILL_PATIENCE_S`); None when a
        background refill of this collection is already running in this process. A process
        that exits mid-refill leaves accounts the next refill finishes (their lease holder is
        gone)."""
        if not self._background_refill.acquire(blocking=False):
            return None

        def run() -> None:
            try:
                self.refill_pool(patience_s=REFILL_PATIENCE_S)
            finally:
                self._background_refill.release()

        thread = threading.Thread(target=run, name=f"refill-{self.spec.key}", daemon=True)
        thread.start()
        return thread

    def _provision_account(self, account: Account) -> rg.Dataset:
        """User, workspace and empty dataset for one account; idempotent and self-repairing."""
        workspace = self.owner.ensure_workspace(account.username)
        self.owner.ensure_annotator(account.username, workspace)
        settings = self.spec.dataset_settings()
        if self.finish_url:
            settings.guidelines = settings.guidelines + FINISH_NOTE.format(url=self.finish_url)
        return self.owner.ensure_dataset(self.dataset_name, workspace, settings)

    # claims -------------------------------------------------------------------------------------
    def claim(self, key: str, source: str, refill: bool = False, *, key_hash: str | None = None,
              visible: bool = True) -> ClaimResult:
        """Give the participant known by ``key`` (a Prolific id, an invite key, a simulated
        name) their work, and make it visible in their dataset. Idempotent: the same key gets
        the same account and items back (and a half-finished earlier claim is completed).
        ``refill``: when the claim left the pool below half its target, top it up in the
        background (a long-running process such as the portal; collection runs refill anyway).
        ``key_hash``: the person known by their key hash only (``key`` may be ""), see
        :meth:`Store.claim`. ``visible=False``: the claim in the store only; the caller makes it
        visible (:meth:`make_visible`) later - the portal, off the request, so that an arrival
        never waits on Argilla (:mod:`crowdpref.portal.prepare`)."""
        exclude = None
        if self.spec.exclude_from is not None:
            exclude = self.store.find_collection(self.spec.study_name, self.spec.exclude_from)
        result = self.store.claim(self.info, key, source, exclude_collection=exclude,
                                  checks=self.spec.check_items, key_hash=key_hash)
        if isinstance(result, Claimed):
            if visible:
                self.make_visible(result.participant)
            if refill and result.new and self._pool_low():
                self.refill_in_background()
        return result

    def _pool_low(self) -> bool:
        """Below half the target K ready accounts: time to refill. (Refilling after every claim
        would provision accounts - bcrypt, workspace, dataset - on the same Argilla exactly while
        a burst of arrivals needs it; half a pool still serves the next K/2 arrivals warm.)"""
        ready = sum(a.state == "ready" for a in self.store.accounts(self.info.id))
        return ready < max(1, self.spec.pool_size // 2)

    def make_visible(self, participant: ParticipantState) -> None:
        """Finish a claim in Argilla: the account exists (cold claims create it now) and the
        participant's dataset holds their records (one bulk upsert by id: repeating it changes
        nothing)."""
        if participant.status not in (ACTIVE,) or participant.records_logged and participant.account_state != CREATING:
            return
        if participant.account_state == CREATING:
            account = Account(participant.account_id, participant.username, CREATING)
            dataset = self._provision_account(account)
            self.store.account_ready(self.info, account.id, str(dataset.id))
        else:
            dataset = self._dataset_of(participant)
        if not participant.records_logged:
            records = [self.spec.record(a.item_id, a.swapped) for a in participant.assignments
                       if a.status not in (RELEASED, RETIRED)]
            self.owner.log_records(dataset, records)
            self.store.records_logged(self.info.id, participant.id)

    # monitoring -----------------------------------------------------------------------------------
    def monitor(self) -> Progress:
        """Repair what a killed process left, read answers back, complete or release
        participants, refill the pool. Never waits for people: returns the progress.

        With Argilla's webhooks reaching the portal (:meth:`webhooks_active`), only the
        participants :meth:`~crowdpref.store.Store.due_for_reading` names are read: reported
        activity, the backstop, a release due (inactivity is decided from the store's last
        activity; the participant is read once before being released), a drop requested, a
        release or a claim a killed run left, a participant a webhook completed (to grade their
        checks). Without webhooks, every active participant too."""
        cid = self.info.id
        released_now = []
        self._retire_withdrawn_writers()
        if self.spec.on_fail == "exclude":  # an exclusion a killed run decided but did not write
            for finished in self.store.failed_not_excluded(cid):
                self._exclude_if_failed(finished)
        webhooks = self.webhooks_active()
        # without webhooks the backstop is every pass: every active participant is read (and a
        # participant a webhook completed - the portal may receive them still - is graded)
        due = self.store.due_for_reading(cid, self.clock(), self.backstop_s if webhooks else 0.0,
                                         self.spec.inactive_after_s)
        todo = self.store.participants_by_id(cid, due)
        reads = 0
        for participant in todo:
            if participant.status == RELEASING:  # a release a killed run began: finish it
                self.finish_release(participant)
                released_now.append(participant.username)
                continue
            if participant.status == COMPLETE:  # completed by a webhook: this read grades their checks
                self._read_progress(participant)
                reads += 1
                continue
            if not participant.records_logged or participant.account_state == CREATING:
                self.make_visible(participant)
            self._read_progress(participant)
            reads += 1
            participant = self.store.participant(cid, participant.username)
            if participant.status != ACTIVE:
                continue
            now = self.clock()
            if participant.drop_requested:
                reason = "dropped by the operator"
            elif now - participant.last_activity_at > self.spec.inactive_after_s:
                reason = f"no activity for {self.spec.inactive_after_s / 60:g} min"
            else:
                continue
            if self.store.begin_release(cid, participant.id, reason):
                self.finish_release(self.store.participant(cid, participant.username))
                released_now.append(participant.username)
        self.revoke_finished_access()  # completed (maybe by a webhook), released, withdrawn
        ready_now = self.refill_pool(patience_s=0)  # not while participants arrive: the next pass
        return replace(self.progress(released_now, ready_now), read_now=reads, webhooks=webhooks)

    def _retire_withdrawn_writers(self) -> None:
        """Study 2: retire the pairs holding answers of study-1 writers who withdrew and delete
        their records from the raters' datasets - what a withdrawal could not do at once (no run
        folder, Argilla down); see :func:`crowdpref.withdrawals.retire_writers`."""
        if self.spec.key != "study2":
            return
        from crowdpref.withdrawals import clear_retired, retire_writers

        retire_writers(self.store, self.spec.study_name, Path(self.folder).parent)
        problem = clear_retired(self.store, self.owner, self.spec.study_name)
        if problem:
            log.warning("records of retired pairs not deleted from Argilla yet (%s): the next pass retries", problem)

    @property
    def backstop_s(self) -> float:
        return float(getattr(self.spec, "backstop_s", BACKSTOP_S))

    def webhooks_active(self) -> bool:
        """Whether the portal receives Argilla's response webhooks from this collection's
        Argilla (registered by the portal when it starts; the secret is in the store)."""
        from crowdpref.portal.argilla_hooks import registered_for

        api_url = getattr(self.owner, "api_url", None)
        return isinstance(api_url, str) and registered_for(self.store, api_url)

    def refresh(self, participant: ParticipantState) -> ParticipantState:
        """Read the participant's answers from Argilla now (what the portal's finish page does):
        record what they submitted, mark them complete when everything is. Returns their state."""
        if participant.status == ACTIVE:
            if not participant.records_logged or participant.account_state == CREATING:
                self.make_visible(participant)
            self._read_progress(participant)
            now = self.store.participant(self.info.id, participant.username)
            if now.status == COMPLETE:  # done: their Argilla session and API key reach nothing more
                self._revoke_quietly(now)
        return self.store.participant(self.info.id, participant.username)

    # access that ends ----------------------------------------------------------------------------
    def revoke_access(self, participant: ParticipantState) -> None:
        """End the participant's access to Argilla: their account leaves its workspace (one
        owner call, no bcrypt; :meth:`ArgillaOwner.revoke_access`), so the session the portal
        minted and the account's permanent API key reach none of their records; then the store
        records an ``access_revoked`` event. For a participant who completed, was released or
        withdrew; called again it changes nothing. Raises
        :class:`~crowdpref.argilla_client.ArgillaError` when Argilla refuses (the store is
        unchanged, and :meth:`revoke_finished_access` tries again)."""
        self.owner.revoke_access(participant.username, participant.dataset_id)
        self.store.access_revoked(self.info.id, participant.id)

    def revoke_finished_access(self) -> int:
        """:meth:`revoke_access` for every participant who finished (completed, released,
        withdrawn) and may still reach Argilla; a failure is logged and retried next pass.
        Returns how many lost their access now."""
        done = 0
        for participant in self.store.access_to_revoke(self.info.id):
            done += self._revoke_quietly(participant)
        return done

    def _revoke_quietly(self, participant: ParticipantState) -> bool:
        try:
            self.revoke_access(participant)
            return True
        except Exception as exc:  # noqa: BLE001 - never fails a release or a pass: the next pass retries
            log.warning("Argilla access of %s not revoked yet (%s): the next monitoring pass retries",
                        participant.username, exc.__class__.__name__)
            return False

    def release(self, participant: ParticipantState, reason: str) -> bool:
        """Give an active participant's unsubmitted work back to the pool now (they returned the
        study, timed out, were rejected): their submitted answers are read first and stay. False
        when they were not active. If Argilla fails half-way, the release stays recorded as
        begun and the next :meth:`monitor` finishes it."""
        if participant.status != ACTIVE:
            return False
        try:
            self._read_progress(participant)
        except CrowdprefError:  # Argilla unreachable: release anyway - answers not read yet leave with
            pass  # their records, and those slots are collected again (nothing counts twice)
        if not self.store.begin_release(self.info.id, participant.id, reason):
            return False
        self.finish_release(self.store.participant(self.info.id, participant.username))
        return True

    def _read_progress(self, participant: ParticipantState) -> None:
        """Record the participant's submitted answers and their latest activity (any response
        they saved - a draft counts)."""
        seq = self.store.activity_seq(participant.id)  # activity reported from here on stays unread
        started = self.clock()
        own = self._own_answers(participant)
        held = set(participant.held)
        submitted = {}
        for answer in own:
            if answer.status == "submitted" and answer.record_external_id in held:
                submitted[answer.record_external_id] = (answer.updated_at.timestamp() if answer.updated_at
                                                        else self.clock())
        times = [a.updated_at.timestamp() for a in own if a.updated_at is not None]
        self.store.record_progress(self.info.id, participant.id, submitted, max(times) if times else None)
        self.store.mark_read(self.info.id, participant.id, seq, started)
        self._grade_checks(participant, own)

    def _grade_checks(self, participant: ParticipantState, own: Sequence[SubmittedAnswer]) -> None:
        """Grade the participant's answered quality checks, record the verdict when it changed,
        and exclude their work when they failed, finished and the config says ``exclude``. A
        check retired with its pair (a writer withdrew) counts neither way: the rule asks for
        at most as many passed checks as remain, and a batch whose checks were all retired
        passes."""
        batch = [a for a in participant.assignments if is_check(a.item_id) and a.status != RELEASED]
        checks = [a for a in batch if a.status != RETIRED]
        if not checks:
            if batch and participant.check_verdict != PASSED:  # every check retired: nothing to hold against them
                self.store.record_checks(self.info.id, participant.id, {}, PASSED)
            return
        done = {a.record_external_id: a for a in own if a.status == "submitted"}
        answers = {item: (a.values, participant.swapped.get(item)) for item, a in done.items()}
        results: dict[str, bool] = {}
        for check in checks:
            if check.item_id in done:
                passed = self.spec.grade_check(check.item_id, done[check.item_id].values, answers)
                if passed is not None:
                    results[check.item_id] = passed
        outcome = verdict(len(checks), results, min(self.spec.checks_needed, len(checks)))
        if (outcome, len(results), sum(results.values())) != (
                participant.check_verdict, participant.checks_answered, participant.checks_passed):
            self.store.record_checks(self.info.id, participant.id, results, outcome or "")
        if outcome == FAILED and self.spec.on_fail == "exclude":  # (no store read on other passes)
            self._exclude_if_failed(self.store.participant(self.info.id, participant.username))

    def _exclude_if_failed(self, participant: ParticipantState) -> None:
        """``on_fail: exclude``: a finished participant (complete, or released) who failed the
        checks has their counted items taken out of the count; those slots go back to the pool.
        Their answers stay in Argilla (and in the raw export); they never count."""
        if (self.spec.on_fail == "exclude" and participant.check_verdict == FAILED
                and participant.status in (COMPLETE, RELEASED) and participant.excluded_at is None):
            self.store.exclude(self.info.id, participant.id,
                               [item for item in participant.submitted if not is_check(item)],
                               "failed the quality checks")

    def finish_release(self, participant: ParticipantState) -> None:
        """Finish a release that began (the participant is ``releasing``: :meth:`release`, or a
        process that died mid-release): remove their unsubmitted records from their dataset,
        then return the slots to the pool. An answer arriving between the last read and the delete goes with its
        record and its slot is collected again, so nothing counts twice."""
        to_delete = list(participant.held)  # their unanswered checks too
        dataset = self.owner.find_dataset(self.dataset_name, workspace=participant.username)
        if dataset is not None:
            self.owner.delete_records(dataset, to_delete)
        self.store.finish_release(self.info.id, participant.id)
        self._exclude_if_failed(self.store.participant(self.info.id, participant.username))
        self._revoke_quietly(participant)  # released: their session reaches nothing more

    def progress(self, released_now: Sequence[str] = (), accounts_ready_now: int = 0) -> Progress:
        info = self.info
        counts = self.store.item_counts(info.id)
        items = self.store.items(info.id)
        submitted = sum(min(counts.submitted[i], info.copies) for i in items)
        held = sum(counts.held[i] for i in items)
        participants = self.store.participants(info.id)
        accounts = self.store.accounts(info.id)
        return Progress(
            needed=len(items) * info.copies,
            submitted=submitted,
            outstanding=held,
            unclaimed=len(items) * info.copies - submitted - held,
            pool_ready=sum(a.state == "ready" for a in accounts),
            participants=[
                ParticipantProgress(p.username, p.source, p.status,
                                    sum(not is_check(a.item_id) for a in p.assignments),
                                    sum(not is_check(item) for item in p.submitted),
                                    sum(a.status == RELEASED and not is_check(a.item_id) for a in p.assignments),
                                    p.check_verdict, sum(a.status == EXCLUDED for a in p.assignments))
                for p in participants
            ],
            complete=all(counts.submitted[i] >= info.copies for i in items),
            released_now=list(released_now),
            accounts_ready_now=accounts_ready_now,
        )

    def next_release_in(self) -> float | None:
        """Seconds until the earliest active participant with work outstanding counts as
        inactive (0 if one already does); None when nobody is waiting to be released."""
        now = self.clock()
        due = [p.last_activity_at + self.spec.inactive_after_s - now
               for p in self.store.participants(self.info.id, statuses=[ACTIVE]) if p.held]
        return max(0.0, min(due)) if due else None

    def request_drop(self, username: str) -> None:
        """Mark the participant dropped (one row updated in the store: a collection run in
        flight cannot overwrite it); the next monitoring pass releases their work."""
        self.store.request_drop(self.info.id, username)

    # Argilla reads ---------------------------------------------------------------------------------
    def _dataset_of(self, participant: ParticipantState) -> rg.Dataset | DatasetRef:
        """The participant's dataset: by the id the store kept at provisioning (no lookup), else
        looked up by workspace and name."""
        username = participant.username
        if participant.dataset_id is not None:
            return DatasetRef(participant.dataset_id, f"{username}/{self.dataset_name}")
        dataset = self.owner.find_dataset(self.dataset_name, workspace=username)
        if dataset is None:
            raise CrowdprefError(
                f"dataset '{username}/{self.dataset_name}' is missing in Argilla although the study store "
                "says it exists: run the collection again to re-create it (crowdpref run collect-...)"
            )
        return dataset

    def _own_answers(self, participant: ParticipantState) -> list[SubmittedAnswer]:
        """The participant's own responses, any status (someone else answering in their
        workspace, e.g. the owner trying the UI, never counts)."""
        user_id = self.owner.user_id(participant.username)
        return [a for a in self.owner.answers(self._dataset_of(participant)) if a.user_id == user_id]

    # export ------------------------------------------------------------------------------------------
    def participants(self) -> list[ParticipantState]:
        return self.store.participants(self.info.id)

    def submitted_answers(self) -> list[tuple[ParticipantState, SubmittedAnswer]]:
        """Every participant's own submitted answers (quality checks and excluded answers
        included), one read per participant."""
        return [(p, answer) for p in self.participants()
                for answer in self._own_answers(p) if answer.status == "submitted"]

    def collected_answers(
        self, submitted: Sequence[tuple[ParticipantState, SubmittedAnswer]] | None = None
    ) -> list[tuple[ParticipantState, SubmittedAnswer]]:
        """The answers that count - those the store recorded as submitted (never a quality
        check, never an excluded answer, never one to a retired item) - from ``submitted``
        (default: read now)."""
        submitted = self.submitted_answers() if submitted is None else submitted
        retired = set(self.store.retired_items(self.info.id))
        return [(p, answer) for p, answer in submitted
                if answer.record_external_id in p.submitted and not is_check(answer.record_external_id)
                and answer.record_external_id not in retired]

    def validation_report(self, answers: Sequence[tuple[ParticipantState, SubmittedAnswer]]) -> dict[str, Any]:
        """Every item has its R answers; every workspace holds exactly its allocation; anomalies."""
        info = self.info
        items = self.store.items(info.id)
        anomalies = list(self.store.check(info.id))
        per_item = Counter(answer.record_external_id for _, answer in answers)
        short = {item: per_item[item] for item in items if per_item[item] != info.copies}
        anomalies += [f"item {item} has {n} answers instead of {info.copies}" for item, n in short.items()]
        seen: Counter[tuple[str, str]] = Counter((p.username, a.record_external_id) for p, a in answers)
        anomalies += [f"{user} answered {item} {n} times" for (user, item), n in seen.items() if n > 1]
        participants = self.participants()
        workspaces_ok = 0
        for participant in participants:
            held = set(self.owner.record_ids(self._dataset_of(participant)))
            expected = set(participant.visible)
            if held == expected:
                workspaces_ok += 1
            else:
                anomalies.append(
                    f"workspace {participant.username} holds {sorted(held ^ expected)[:3]} beyond/below its allocation"
                )
        sources = Counter(p.source for p in participants)
        return {
            "items": len(items),
            "answers": len(answers),
            "answers_per_item": info.copies,
            "items_with_exactly_r_answers": len(items) - len(short),
            "participants": len(participants),
            "participants_by_source": dict(sources),
            "completed_participants": sum(p.status == COMPLETE for p in participants),
            "released_participants": sum(p.status == RELEASED for p in participants),
            "workspaces_matching_allocation": workspaces_ok,
            "anomalies": anomalies,
            "valid": not anomalies,
        }
