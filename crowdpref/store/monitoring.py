"""Reading the event log, and monitoring that scales with activity.

Argilla's webhooks count activity on the participant it concerns (one short write, no Argilla
call); a monitoring pass then reads from Argilla only the participants that activity, a
release, a drop request or the backstop names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, case, func, or_, select, update

from crowdpref.store import schema as t
from crowdpref.store.engine import StoreBase
from crowdpref.store.results import CollectionInfo, ParticipantState
from crowdpref.store.statuses import FINISHED, AccountState, CheckVerdict, ParticipantStatus


class MonitoringStore(StoreBase):
    """The event log and its summary; reported activity, and whom a monitoring pass reads."""

    def events(self, cid: int, kinds: Sequence[str] | None = None) -> list[dict[str, Any]]:
        e = t.events.c
        query = select(t.events).where(e.collection_id == cid).order_by(e.id)
        if kinds is not None:
            query = query.where(e.kind.in_(list(kinds)))
        with self._read() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]

    def summary(self, cid: int) -> dict[str, int]:
        """Counts for reports and the dataset card (no usernames): participants, those released
        (drop-outs), slots released, and released slots re-claimed by later participants."""
        with self._read() as conn:
            participants = self._participants(conn, cid=cid)
        counts = self.item_counts(cid)
        with self._read() as conn:
            reclaimed = conn.execute(select(func.count()).select_from(t.events).where(
                t.events.c.collection_id == cid, t.events.c.kind == "reallocated")).scalar_one()
        return {
            "participants": len(participants),
            "completed": sum(p.status == ParticipantStatus.COMPLETE for p in participants),
            "dropped_out": sum(p.status == ParticipantStatus.RELEASED for p in participants),
            "released_items": sum(counts.released.values()),
            "reclaimed_items": reclaimed,
        }

    def note_activity(self, dataset_id: str | None, username: str | None = None
                      ) -> list[tuple[CollectionInfo, ParticipantState]]:
        """Argilla reported activity (a response created, updated or deleted) in the dataset
        ``dataset_id`` (else: of the account ``username``): count it on the participant bound
        to that account, so the next monitoring pass reads them. One short write, no Argilla
        call. Returns the participants it named (none: not a dataset of this store)."""
        p, a = t.participants.c, t.accounts.c
        conditions = ([a.dataset_id == dataset_id] if dataset_id else []) + ([a.username == username] if username else [])
        with self._write() as conn:
            rows: list[Any] = []
            for condition in conditions:  # by dataset id; by username when no dataset id was kept
                rows = conn.execute(select(p.id, p.collection_id).join(t.accounts, a.id == p.account_id)
                                    .where(condition)).all()
                if rows:
                    break
            if not rows:
                return []
            conn.execute(update(t.participants).where(p.id.in_([r.id for r in rows]))
                         .values(activity_seq=p.activity_seq + 1))
            return [(self._info(r.collection_id, conn), self._participant(conn, r.id)) for r in rows]

    def activity_seq(self, pid: int) -> int:
        """How much activity Argilla reported for the participant so far (a counter)."""
        with self._read() as conn:
            return conn.execute(select(t.participants.c.activity_seq)
                                .where(t.participants.c.id == pid)).scalar_one()

    def mark_read(self, cid: int, pid: int, seq: int, at: float) -> None:
        """A read from Argilla that began at ``at``, when the reported activity stood at ``seq``,
        is recorded: activity reported after that (a webhook during the read) stays unread."""
        p = t.participants.c
        with self._write(cid) as conn:
            conn.execute(update(t.participants).where(p.id == pid).values(
                read_seq=case((p.read_seq < seq, seq), else_=p.read_seq), read_at=at))

    def due_for_reading(self, cid: int, now: float, backstop_s: float, inactive_after_s: float) -> list[int]:
        """Ids of the participants a monitoring pass must look at, in one query: releasing ones
        (a killed release to finish); active ones whose records are not visible yet, whose drop
        was requested, with reported activity not read yet, not read for ``backstop_s`` (or
        never), or quiet for ``inactive_after_s`` (read once before they are released); complete
        ones with reported activity not read yet (that read grades their checks). Everyone else
        - idle, read recently - costs nothing."""
        p, a = t.participants.c, t.accounts.c
        query = (select(p.id).join(t.accounts, a.id == p.account_id).where(p.collection_id == cid, or_(
            p.status == ParticipantStatus.RELEASING,
            and_(p.status == ParticipantStatus.ACTIVE, or_(
                ~p.records_logged, a.state == AccountState.CREATING, p.drop_requested, p.activity_seq > p.read_seq,
                p.read_at.is_(None), p.read_at <= now - backstop_s, p.last_activity_at < now - inactive_after_s)),
            and_(p.status == ParticipantStatus.COMPLETE, p.activity_seq > p.read_seq, p.withdrawn_at.is_(None)),
        )).order_by(p.id))
        with self._read() as conn:
            return list(conn.execute(query).scalars())

    def participants_by_id(self, cid: int, pids: Sequence[int]) -> list[ParticipantState]:
        if not pids:
            return []
        with self._read() as conn:
            return self._participants(conn, pids=list(pids), cid=cid)

    def failed_not_excluded(self, cid: int) -> list[ParticipantState]:
        """Finished (complete or released) participants who failed the checks and whose work is
        not excluded yet - what a killed run decided but did not write. One query."""
        p = t.participants.c
        with self._read() as conn:
            pids = list(conn.execute(select(p.id).where(
                p.collection_id == cid, p.status.in_(FINISHED), p.check_verdict == CheckVerdict.FAILED,
                p.excluded_at.is_(None), p.withdrawn_at.is_(None))).scalars())
            return self._participants(conn, pids=pids) if pids else []
