"""Onboarding before the claim (:mod:`crowdpref.onboarding`): who began it, where they are, what
they practised, their quiz attempts and scores, and whether they passed or were screened out.

One row per person and collection, known by the salted hash of their key (:meth:`key_hash`;
never the raw Prolific id or invite key), written before they hold any work. Every change is one
short transaction serialised with the collection's other writes, so two tabs submitting the quiz
at once cannot use more attempts than the study allows. The time spent is the sum of the gaps
between a person's steps, each gap counted up to :data:`MAX_GAP_S` (someone who leaves for a day
and comes back has not worked for a day).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, insert, select, update
from sqlalchemy.exc import IntegrityError

from crowdpref.store import schema as t
from crowdpref.store.engine import StoreBase, StoreError
from crowdpref.store.results import OnboardingState

__all__ = ["IN_PROGRESS", "MAX_GAP_S", "PASSED", "SCREENED_OUT", "STEPS", "OnboardingStore"]

IN_PROGRESS, PASSED, SCREENED_OUT = "in_progress", "passed", "screened_out"
STEPS = ("introduction", "practice", "quiz", "done")
"""The steps of onboarding, in order; ``done`` once a person passed or was screened out."""
MAX_GAP_S = 30 * 60.0
"""The most one gap between two steps adds to the time spent."""


class OnboardingStore(StoreBase):
    """Onboarding records: start, step, practice answers, quiz attempts, and reading them."""

    def onboarding_start(self, cid: int, key_hash: str, source: str, session_id: str | None = None) -> OnboardingState:
        """The person's onboarding, begun now if it was not (idempotent: someone who comes back
        resumes where they were). ``session_id`` (their platform session) is kept as a salted
        hash only."""
        state = self.onboarding_state(cid, key_hash)
        if state is not None:
            return state
        now = self.clock()
        try:
            with self._write(cid) as conn:
                if self._onboarding_row(conn, cid, key_hash) is None:
                    conn.execute(insert(t.onboarding).values(
                        collection_id=cid, key_hash=key_hash, source=source, status=IN_PROGRESS, step=STEPS[0],
                        practice_done="", practice_answered=0, practice_correct=0, attempts_used=0,
                        started_at=now, seen_at=now, seconds_spent=0.0,
                        session_hash=self.key_hash(session_id) if session_id else None))
                    self._event(conn, cid, "onboarding_started", source=source)
        except IntegrityError:  # PostgreSQL: a second tab began it at the same moment
            pass
        state = self.onboarding_state(cid, key_hash)
        assert state is not None
        return state

    def onboarding_state(self, cid: int, key_hash: str) -> OnboardingState | None:
        """Where the person stands in the collection's onboarding; None: not begun."""
        with self._read() as conn:
            row = self._onboarding_row(conn, cid, key_hash)
        return None if row is None else _state(row)

    def onboarding_step(self, cid: int, key_hash: str, step: str) -> OnboardingState:
        """The person moved to ``step`` (introduction, practice or quiz; ``done`` finishes an
        onboarding that has no quiz: they pass). Someone who already passed or was screened out
        stays where they are (a page reloaded late changes nothing)."""
        if step not in STEPS:
            raise StoreError(f"unknown onboarding step {step!r}: use one of {', '.join(STEPS)}")
        with self._write(cid) as conn:
            row = self._onboarding_row_or_fail(conn, cid, key_hash)
            if row.status != IN_PROGRESS:
                return _state(row)
            values: dict[str, Any] = {"step": step, **self._spent(row)}
            if step == "done":
                values.update(status=PASSED, finished_at=self.clock())
                self._event(conn, cid, "onboarding_passed", quiz=False)
            self._update(conn, cid, key_hash, values)
            return _state(self._onboarding_row_or_fail(conn, cid, key_hash))

    def onboarding_practice(self, cid: int, key_hash: str, index: int, correct: bool) -> OnboardingState:
        """The person answered practice item ``index`` (0-based); ``correct`` whether they got it
        right. Practice never counts: an item answered again is not counted twice (the first
        answer stands)."""
        if index < 0:
            raise StoreError(f"practice item index {index} is negative: items count from 0")
        with self._write(cid) as conn:
            row = self._onboarding_row_or_fail(conn, cid, key_hash)
            done = _indexes(row.practice_done)
            values: dict[str, Any] = self._spent(row)
            if index not in done and row.status == IN_PROGRESS:
                values.update(practice_done=",".join(map(str, sorted(done | {index}))),
                              practice_answered=row.practice_answered + 1,
                              practice_correct=row.practice_correct + int(bool(correct)))
            self._update(conn, cid, key_hash, values)
            return _state(self._onboarding_row_or_fail(conn, cid, key_hash))

    def onboarding_attempt(self, cid: int, key_hash: str, score: int, passed: bool,
                           attempts_allowed: int) -> OnboardingState:
        """Record one quiz attempt (its ``score`` and whether it ``passed``), in one transaction.
        Refused (:class:`StoreError`, one line) when the person has no onboarding, already passed
        or was screened out, or used all ``attempts_allowed``. A failed last attempt screens
        them out."""
        with self._write(cid) as conn:
            row = self._onboarding_row_or_fail(conn, cid, key_hash)
            if row.status == PASSED:
                raise StoreError("this participant already passed the quiz: no attempt is needed")
            if row.status == SCREENED_OUT or row.attempts_used >= attempts_allowed:
                raise StoreError(f"this participant has used all {attempts_allowed} quiz attempt"
                                 f"{'s' * (attempts_allowed != 1)}: the quiz cannot be taken again")
            used = row.attempts_used + 1
            best = score if row.best_score is None else max(row.best_score, score)
            values: dict[str, Any] = {"attempts_used": used, "last_score": score, "best_score": best,
                                      "step": "quiz", **self._spent(row)}
            if passed:
                values.update(status=PASSED, step="done", finished_at=self.clock())
            elif used >= attempts_allowed:
                values.update(status=SCREENED_OUT, step="done", finished_at=self.clock())
            self._update(conn, cid, key_hash, values)
            kind = {PASSED: "onboarding_passed", SCREENED_OUT: "onboarding_screened_out"}.get(
                values.get("status", ""), "onboarding_attempt_failed")
            self._event(conn, cid, kind, attempt=used, score=score)
            return _state(self._onboarding_row_or_fail(conn, cid, key_hash))

    def onboarding_records(self, cid: int) -> list[OnboardingState]:
        """Everyone who began the collection's onboarding, in the order they began (for the
        artifacts, the card and participants.parquet; key hashes, never keys)."""
        o = t.onboarding.c
        with self._read() as conn:
            rows = conn.execute(select(t.onboarding).where(o.collection_id == cid)
                                .order_by(o.started_at, o.key_hash)).all()
        return [_state(row) for row in rows]

    # helpers -----------------------------------------------------------------------------------
    def _onboarding_row(self, conn: Connection, cid: int, key_hash: str) -> Any:
        o = t.onboarding.c
        return conn.execute(select(t.onboarding).where(o.collection_id == cid, o.key_hash == key_hash)).first()

    def _onboarding_row_or_fail(self, conn: Connection, cid: int, key_hash: str) -> Any:
        row = self._onboarding_row(conn, cid, key_hash)
        if row is None:
            raise StoreError("this participant has not begun the onboarding: open the study link first")
        return row

    def _spent(self, row: Any) -> dict[str, float]:
        now = self.clock()
        return {"seen_at": max(now, row.seen_at),
                "seconds_spent": row.seconds_spent + min(MAX_GAP_S, max(0.0, now - row.seen_at))}

    def _update(self, conn: Connection, cid: int, key_hash: str, values: dict[str, Any]) -> None:
        o = t.onboarding.c
        conn.execute(update(t.onboarding).where(o.collection_id == cid, o.key_hash == key_hash).values(**values))


def _indexes(text: str) -> set[int]:
    return {int(part) for part in text.split(",") if part}


def _state(row: Any) -> OnboardingState:
    return OnboardingState(
        key_hash=row.key_hash, source=row.source, status=row.status, step=row.step,
        practice_answered=row.practice_answered, practice_correct=row.practice_correct,
        attempts_used=row.attempts_used, last_score=row.last_score, best_score=row.best_score,
        started_at=row.started_at, finished_at=row.finished_at, seconds_spent=row.seconds_spent,
        session_hash=row.session_hash)
