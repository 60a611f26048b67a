"""The participant lifecycle: from a claim to complete or released, and after.

An active participant's submitted items are recorded as they come
(:meth:`LifecycleStore.record_progress`); quality checks are graded; a release is two-phase
(``releasing``, then ``released``), so a kill in between is finished by the next run. Once
finished, a participant's work can be excluded (failed checks), an item's answer reopened, or
the participant withdrawn (:meth:`LifecycleStore.withdraw`). An item can be retired for good
(:meth:`LifecycleStore.retire_items`: a study-2 pair holding a withdrawn writer's answer).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import bindparam, delete, func, insert, select, update

from crowdpref.store import counts
from crowdpref.store import schema as t
from crowdpref.store.engine import StoreBase, StoreError
from crowdpref.store.results import ParticipantState, RetiredRecords
from crowdpref.store.statuses import FINISHED, AssignmentStatus, ParticipantStatus

# whether a key hash claimed work in, or began the onboarding of, a collection (LifecycleStore.knows)
_KNOWS = select(
    select(t.participants.c.id).where(t.participants.c.collection_id == bindparam("cid"),
                                      t.participants.c.key_hash == bindparam("digest")).exists()
    | select(t.onboarding.c.key_hash).where(t.onboarding.c.collection_id == bindparam("cid"),
                                            t.onboarding.c.key_hash == bindparam("digest")).exists())

RECORD_DELETED_EVENT = "retired_record_deleted"
"""A retired assignment's record left the participant's Argilla dataset
(:meth:`LifecycleStore.retired_records_deleted`)."""


class LifecycleStore(StoreBase):
    """Participants: reading them, their progress, checks, exclusion, reopening, withdrawal,
    drop requests and releases."""

    def participants(self, cid: int, statuses: Sequence[str] | None = None) -> list[ParticipantState]:
        with self._read() as conn:
            return self._participants(conn, cid=cid, statuses=statuses)

    def participant(self, cid: int, username: str) -> ParticipantState:
        with self._read() as conn:
            pid = conn.execute(select(t.participants.c.id).join(t.accounts, t.accounts.c.id == t.participants.c.account_id)
                               .where(t.participants.c.collection_id == cid, t.accounts.c.username == username)).scalar()
            if pid is None:
                raise StoreError(f"no participant '{username}' in this collection of the study store")
            return self._participant(conn, pid)

    def participant_by_key(self, cid: int, key: str) -> ParticipantState | None:
        with self._read() as conn:
            pid = conn.execute(select(t.participants.c.id).where(
                t.participants.c.collection_id == cid, t.participants.c.key_hash == self.key_hash(key))).scalar()
            return None if pid is None else self._participant(conn, pid)

    def knows(self, cid: int, key: str) -> bool:
        """Whether the person with this external id claimed work in the collection or began its
        onboarding (one read of two indexed look-ups, a prebuilt statement; the portal asks it
        where a limit would otherwise refuse them)."""
        with self._read() as conn:
            return bool(conn.execute(_KNOWS, {"cid": cid, "digest": self.key_hash(key)}).scalar())

    def key_hashes(self, cid: int) -> set[str]:
        with self._read() as conn:
            return set(conn.execute(select(t.participants.c.key_hash).where(t.participants.c.collection_id == cid)).scalars())

    def preparing(self, cid: int) -> set[str]:
        """Key hashes of the collection's active participants whose work is not in Argilla yet:
        claimed in the store, their records not logged (the portal admits first and prepares
        their workspace after)."""
        p = t.participants.c
        with self._read() as conn:
            return set(conn.execute(select(p.key_hash).where(
                p.collection_id == cid, p.status == ParticipantStatus.ACTIVE, p.records_logged.is_(False))).scalars())

    def key_hash_of(self, cid: int) -> dict[str, str]:
        """username -> key hash of every participant (for cross-study exclusion checks)."""
        p, a = t.participants.c, t.accounts.c
        with self._read() as conn:
            return dict(conn.execute(select(a.username, p.key_hash).join(t.accounts, a.id == p.account_id)
                                     .where(p.collection_id == cid)).all())

    def records_logged(self, cid: int, pid: int) -> None:
        with self._write(cid) as conn:
            conn.execute(update(t.participants).where(t.participants.c.id == pid).values(records_logged=True))
            self._event(conn, cid, "records_logged", pid)

    def record_progress(self, cid: int, pid: int, submitted: Mapping[str, float], last_activity: float | None) -> int:
        """Mark held items as submitted (at the given times) and move the participant's last
        activity forward; touches nothing else (a concurrent drop request stays). Only for an
        active participant: once a release has begun, their unsubmitted records are on their
        way out of Argilla and nothing more counts. Returns how many items became submitted."""
        s, p = t.assignments.c, t.participants.c
        marked = 0
        moves: list[counts.Move] = []
        with self._write(cid) as conn:
            if conn.execute(select(p.status).where(p.id == pid)).scalar_one() != ParticipantStatus.ACTIVE:
                return 0  # being released (maybe by another run, whose delete may take these records)
            for item, at in submitted.items():
                result = conn.execute(update(t.assignments).where(
                    s.participant_id == pid, s.item_id == item, s.status == AssignmentStatus.HELD,
                ).values(status=AssignmentStatus.SUBMITTED, submitted_at=at))
                if result.rowcount:
                    marked += 1
                    moves.append((item, AssignmentStatus.HELD, AssignmentStatus.SUBMITTED))
                    self._event(conn, cid, "submitted", pid, item, at=at)
            counts.shift(conn, cid, moves)
            if last_activity is not None:
                conn.execute(update(t.participants).where(p.id == pid, p.last_activity_at < last_activity)
                             .values(last_activity_at=last_activity))
            held = conn.execute(select(func.count()).select_from(t.assignments)
                                .where(s.participant_id == pid, s.status == AssignmentStatus.HELD)).scalar_one()
            if held == 0:
                result = conn.execute(update(t.participants).where(p.id == pid, p.status == ParticipantStatus.ACTIVE)
                                      .values(status=ParticipantStatus.COMPLETE, completed_at=self.clock()))
                if result.rowcount:
                    self._event(conn, cid, "completed", pid)
        return marked

    def record_checks(self, cid: int, pid: int, results: Mapping[str, bool], verdict: str) -> None:
        """Record the graded quality checks of a participant (check item -> passed) and their
        verdict; an event per check graded for the first time, and one when the verdict changes."""
        p = t.participants.c
        with self._write(cid) as conn:
            row = conn.execute(select(p.check_verdict).where(p.id == pid)).one()
            graded = set(conn.execute(select(t.events.c.item_id).where(
                t.events.c.participant_id == pid, t.events.c.kind == "check_graded")).scalars())
            for item, passed in results.items():
                if item not in graded:
                    self._event(conn, cid, "check_graded", pid, item, passed=bool(passed))
            conn.execute(update(t.participants).where(p.id == pid).values(
                checks_answered=len(results), checks_passed=sum(map(bool, results.values())),
                check_verdict=verdict))
            if row.check_verdict != verdict:
                self._event(conn, cid, "check_verdict", pid, verdict=verdict,
                            answered=len(results), passed=sum(map(bool, results.values())))

    def exclude(self, cid: int, pid: int, items: Sequence[str], reason: str) -> list[str]:
        """Take a finished (complete or released) participant's submitted ``items`` out of the
        count: they become ``excluded`` and their slots return to the pool for the next claim.
        Once per participant; returns the items excluded now (empty when already done)."""
        p, s = t.participants.c, t.assignments.c
        now = self.clock()
        with self._write(cid) as conn:
            row = conn.execute(select(p.status, p.excluded_at, p.withdrawn_at).where(p.id == pid)).one()
            if row.excluded_at is not None or row.withdrawn_at is not None:
                return []
            if row.status not in FINISHED:
                raise StoreError(f"participant {pid} is {row.status}: only a finished participant's work can be "
                                 "excluded (release them first)")
            done = list(conn.execute(select(s.item_id).where(
                s.participant_id == pid, s.status == AssignmentStatus.SUBMITTED, s.item_id.in_(list(items)),
            ).order_by(s.position)).scalars())
            conn.execute(update(t.assignments).where(s.participant_id == pid, s.status == AssignmentStatus.SUBMITTED,
                                                     s.item_id.in_(done)).values(status=AssignmentStatus.EXCLUDED))
            counts.shift(conn, cid, [(item, AssignmentStatus.SUBMITTED, AssignmentStatus.EXCLUDED) for item in done])
            conn.execute(update(t.participants).where(p.id == pid).values(excluded_at=now))
            self._event(conn, cid, "excluded", pid, items=len(done), reason=reason)
            return done

    def reopen(self, cid: int, item_id: str, reason: str, usernames: Sequence[str] | None = None) -> list[str]:
        """Take the counted answers to ``item_id`` out of the count - all of them, or only
        those of ``usernames`` - in one transaction: each becomes ``reopened`` (the answer stays
        in Argilla and never counts again) with a ``reopened`` event naming ``reason``, and its
        slot returns to the pool, where the next claim takes it (never to someone who held the
        item before). Returns the usernames whose answer was reopened. Refuses, changing
        nothing, an item the collection does not have, a username without a counted answer to
        it, or an item without any."""
        p, a, s = t.participants.c, t.accounts.c, t.assignments.c
        with self._write(cid) as conn:
            known = conn.execute(select(t.items.c.item_id).where(
                t.items.c.collection_id == cid, t.items.c.item_id == item_id)).first()
            if known is not None and item_id in counts.retired(conn, cid):
                raise StoreError(f"item '{item_id}' was retired (a writer of its answers withdrew): it is no longer "
                                 "collected, there is nothing to reopen")
            if known is None:
                raise StoreError(f"item '{item_id}' is not an item of this collection: check the id (the export's "
                                 "message and validation.json name it)")
            rows = conn.execute(select(s.participant_id, s.status, a.username)
                                .join(t.participants, p.id == s.participant_id)
                                .join(t.accounts, a.id == p.account_id)
                                .where(s.collection_id == cid, s.item_id == item_id).order_by(s.participant_id)).all()
            counted = [r for r in rows if r.status == AssignmentStatus.SUBMITTED]
            if usernames is not None:
                wanted = set(usernames)
                unknown = wanted - {r.username for r in counted}
                if unknown:
                    states = {r.username: r.status for r in rows}
                    name = sorted(unknown)[0]
                    raise StoreError(
                        f"'{name}' has no counted answer to item '{item_id}' "
                        f"({'it is ' + states[name] if name in states else 'they never held it'}): counted "
                        f"answers are by {', '.join(r.username for r in counted) or 'nobody'}")
                counted = [r for r in counted if r.username in wanted]
            if not counted:
                raise StoreError(f"item '{item_id}' has no counted answer to reopen (its copies are "
                                 f"{', '.join(sorted(r.status for r in rows)) or 'unclaimed'}): nothing to do")
            now = self.clock()
            for row in counted:
                conn.execute(update(t.assignments).where(s.participant_id == row.participant_id, s.item_id == item_id,
                                                         s.status == AssignmentStatus.SUBMITTED)
                             .values(status=AssignmentStatus.REOPENED, released_at=now))
                counts.shift(conn, cid, [(item_id, AssignmentStatus.SUBMITTED, AssignmentStatus.REOPENED)])
                self._event(conn, cid, "reopened", row.participant_id, item_id, at=now, reason=reason)
            return [r.username for r in counted]

    def withdraw(self, cid: int, pid: int, reason: str) -> list[str] | None:
        """The participant withdrew: in one transaction every answer of theirs (counted,
        excluded or reopened, quality checks included) becomes ``withdrawn`` - it never counts
        again - the participant is marked withdrawn and a ``withdrawn`` event records
        ``reason`` (no ids). The slots of their counted answers return to the pool, where the
        next claim takes them. Only a finished (complete or released) participant: release an
        active one first. Returns the items whose counted answer was withdrawn; None when they
        had withdrawn already (nothing changes)."""
        p, s = t.participants.c, t.assignments.c
        now = self.clock()
        with self._write(cid) as conn:
            row = conn.execute(select(p.status, p.withdrawn_at).where(p.id == pid, p.collection_id == cid)).first()
            if row is None:
                raise StoreError(f"participant {pid} is not in collection {cid} of the study store")
            if row.withdrawn_at is not None:
                return None
            if row.status not in FINISHED:
                raise StoreError(f"participant {pid} is {row.status}: only a finished participant can be withdrawn "
                                 "(release them first)")
            counted = list(conn.execute(select(s.item_id).where(
                s.participant_id == pid, s.status == AssignmentStatus.SUBMITTED).order_by(s.position)).scalars())
            answered = (AssignmentStatus.SUBMITTED, AssignmentStatus.EXCLUDED, AssignmentStatus.REOPENED)
            moving = conn.execute(select(s.item_id, s.status).where(s.participant_id == pid,
                                                                    s.status.in_(answered))).all()
            conn.execute(update(t.assignments).where(s.participant_id == pid, s.status.in_(answered))
                         .values(status=AssignmentStatus.WITHDRAWN, released_at=now))
            counts.shift(conn, cid, [(r.item_id, r.status, AssignmentStatus.WITHDRAWN) for r in moving])
            conn.execute(update(t.participants).where(p.id == pid).values(withdrawn_at=now))
            items = set(conn.execute(select(t.items.c.item_id).where(t.items.c.collection_id == cid)).scalars())
            self._event(conn, cid, "withdrawn", pid, at=now, reason=reason,
                        items=sum(item in items for item in counted))
            return [item for item in counted if item in items]

    def retire_items(self, cid: int, items: Sequence[str], reason: str,
                     repeats: Mapping[str, str] | None = None) -> list[str]:
        """Take ``items`` out of the collection for good (a study-1 writer whose answer is in
        the pair withdrew), in one transaction: an ``item_retired`` event each (``reason``, no
        ids) and its count row deleted, so no claim hands it out again and the collection no
        longer waits for its R answers (:meth:`items` leaves it out). Every held copy becomes
        ``retired``, and so does a quality check of ``repeats`` (check item -> the item it
        repeats) that is held, or that is answered while its item was held (it can never be
        graded). A participant left holding nothing becomes complete (their activity counter
        moves, so the next monitoring pass reads them and grades their checks). Answers already
        submitted stay submitted: the participant did the work, their completion (and pay) is
        unchanged; they answer no item of the collection any more, so no export counts them.
        The records of retired assignments are to leave Argilla: :meth:`retired_records`.
        Returns the items retired now (unknown or already retired ones are skipped)."""
        p, s = t.participants.c, t.assignments.c
        repeats = dict(repeats or {})
        now = self.clock()
        with self._write(cid) as conn:
            live = set(counts.live_items(conn, cid))
            todo = [item for item in dict.fromkeys(items) if item in live]
            if not todo:
                return []
            checks = [c for c, item in repeats.items() if item in todo]
            rows = conn.execute(select(s.id, s.participant_id, s.item_id, s.status).where(
                s.collection_id == cid, s.item_id.in_(todo + checks),
                s.status.in_((AssignmentStatus.HELD, AssignmentStatus.SUBMITTED)))).all()
            held_items = {(r.participant_id, r.item_id) for r in rows
                          if r.status == AssignmentStatus.HELD and r.item_id in todo}
            retire = [r for r in rows if r.status == AssignmentStatus.HELD
                      or (r.item_id in repeats and (r.participant_id, repeats[r.item_id]) in held_items)]
            if retire:
                conn.execute(update(t.assignments).where(s.id.in_([r.id for r in retire]))
                             .values(status=AssignmentStatus.RETIRED, released_at=now))
            conn.execute(delete(t.item_counts).where(t.item_counts.c.collection_id == cid,
                                                     t.item_counts.c.item_id.in_(todo)))
            for item in todo:
                self._event(conn, cid, counts.RETIRED_EVENT, item_id=item, at=now, reason=reason)
            touched = sorted({r.participant_id for r in retire})
            for pid in touched:
                held = conn.execute(select(func.count()).select_from(t.assignments).where(
                    s.participant_id == pid, s.status == AssignmentStatus.HELD)).scalar_one()
                if held == 0:
                    result = conn.execute(update(t.participants)
                                          .where(p.id == pid, p.status == ParticipantStatus.ACTIVE)
                                          .values(status=ParticipantStatus.COMPLETE, completed_at=now,
                                                  activity_seq=p.activity_seq + 1))
                    if result.rowcount:
                        self._event(conn, cid, "completed", pid, at=now, retired=True)
            return todo

    def retired_items(self, cid: int) -> list[str]:
        """The collection's retired items (:meth:`retire_items`), sorted."""
        with self._read() as conn:
            return sorted(counts.retired(conn, cid))

    def retired_records(self, cid: int) -> list[RetiredRecords]:
        """Per participant, the records of their retired assignments not yet deleted from their
        Argilla dataset (no :data:`RECORD_DELETED_EVENT` for them): what the next pass deletes."""
        p, a, s, e = t.participants.c, t.accounts.c, t.assignments.c, t.events.c
        with self._read() as conn:
            rows = conn.execute(select(s.participant_id, s.item_id, a.username, a.dataset_id)
                                .join(t.participants, p.id == s.participant_id)
                                .join(t.accounts, a.id == p.account_id)
                                .where(s.collection_id == cid, s.status == AssignmentStatus.RETIRED)
                                .order_by(s.participant_id, s.position)).all()
            done = set(conn.execute(select(e.participant_id, e.item_id).where(
                e.collection_id == cid, e.kind == RECORD_DELETED_EVENT)).tuples())
        out: dict[int, RetiredRecords] = {}
        for r in rows:
            if (r.participant_id, r.item_id) in done:
                continue
            have = out.get(r.participant_id)
            out[r.participant_id] = RetiredRecords(r.participant_id, r.username, r.dataset_id,
                                                   (*(have.items if have else ()), r.item_id))
        return list(out.values())

    def retired_records_deleted(self, cid: int, pid: int, items: Sequence[str]) -> None:
        """The records of ``items`` (retired assignments of participant ``pid``) left Argilla."""
        with self._write(cid) as conn:
            for item in items:
                self._event(conn, cid, RECORD_DELETED_EVENT, pid, item)

    def withdrawn_usernames(self, cid: int) -> list[str]:
        """The account usernames of the collection's participants who withdrew (for leaving
        their rows out of exports and releases)."""
        p, a = t.participants.c, t.accounts.c
        with self._read() as conn:
            return list(conn.execute(select(a.username).join(t.participants, a.id == p.account_id)
                                     .where(p.collection_id == cid, p.withdrawn_at.is_not(None))
                                     .order_by(p.id)).scalars())

    def request_drop(self, cid: int, username: str) -> ParticipantState:
        participant = self.participant(cid, username)
        if participant.status not in (ParticipantStatus.ACTIVE,):
            raise StoreError(f"participant '{username}' is already {participant.status}: nothing to drop")
        with self._write(cid) as conn:
            conn.execute(update(t.participants).where(t.participants.c.id == participant.id).values(drop_requested=True))
            self._event(conn, cid, "drop_requested", participant.id)
        return participant

    # releases (two-phase) ----------------------------------------------------------------------------
    def begin_release(self, cid: int, pid: int, reason: str) -> bool:
        """Phase 1: mark the participant ``releasing`` (their held items still count as in
        flight, so nobody else can take them yet). False when they are no longer active."""
        p = t.participants.c
        with self._write(cid) as conn:
            result = conn.execute(update(t.participants).where(p.id == pid, p.status == ParticipantStatus.ACTIVE)
                                  .values(status=ParticipantStatus.RELEASING, release_reason=reason))
            if not result.rowcount:
                return False
            conn.execute(insert(t.releases).values(participant_id=pid, reason=reason, started_at=self.clock()))
            self._event(conn, cid, "release_started", pid, reason=reason)
            return True

    def finish_release(self, cid: int, pid: int) -> list[str]:
        """Phase 2 (after their unsubmitted records left Argilla): held items become released,
        which returns those slots to the pool for the next claim. Returns the items."""
        p, s, r = t.participants.c, t.assignments.c, t.releases.c
        now = self.clock()
        with self._write(cid) as conn:
            status = conn.execute(select(p.status).where(p.id == pid)).scalar_one()
            if status != ParticipantStatus.RELEASING:
                return []
            held = list(conn.execute(select(s.item_id).where(s.participant_id == pid,
                                                             s.status == AssignmentStatus.HELD)).scalars())
            conn.execute(update(t.assignments).where(s.participant_id == pid, s.status == AssignmentStatus.HELD)
                         .values(status=AssignmentStatus.RELEASED, released_at=now))
            counts.shift(conn, cid, [(item, AssignmentStatus.HELD, AssignmentStatus.RELEASED) for item in held])
            conn.execute(update(t.participants).where(p.id == pid)
                         .values(status=ParticipantStatus.RELEASED, released_at=now))
            conn.execute(update(t.releases).where(r.participant_id == pid, r.finished_at.is_(None))
                         .values(finished_at=now, items_released=len(held)))
            self._event(conn, cid, "released", pid, items=len(held))
            return held
