"""The platform side: participants' platform sessions, the recruitment platform's study of each
collection (Prolific), webhook deliveries (with the work a delivery leaves pending after its
reply), and store-wide secrets.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Collection
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from crowdpref.store import schema as t
from crowdpref.store.engine import StoreBase, StoreError
from crowdpref.store.results import CollectionInfo, ParticipantState, Participation, PlatformStudy, StatusDelivery
from crowdpref.store.statuses import ACTIVE, DeliveryState

PENDING, DONE = DeliveryState.PENDING, DeliveryState.DONE


class PlatformStore(StoreBase):
    """Platform sessions and studies, webhook deliveries, the event log's writers, secrets."""

    def record_session(self, cid: int, pid: int, session_id: str | None = None, *,
                       session_hash: str | None = None) -> None:
        """Remember (as a salted hash) the platform session a participant entered with: the
        Prolific submission id that webhooks name. ``session_hash``: the hash already made (the
        onboarding record keeps only that, and the claim after a passed quiz carries it over)."""
        value = session_hash if session_hash is not None else self.key_hash(str(session_id))
        with self._write(cid) as conn:
            conn.execute(update(t.participants).where(t.participants.c.id == pid).values(session_hash=value))

    def participations(self, *, session_id: str | None = None, key: str | None = None) -> list[Participation]:
        """Who a platform session (or a person's key) names, light: (collection, participant,
        status) per participation, without their assignments - what a webhook's reply needs."""
        with self._read() as conn:
            if session_id is not None:
                return self._participations(conn, session_hash=self.key_hash(session_id))
            return self._participations(conn, key_hash=self.key_hash(key or ""))

    @staticmethod
    def _participations(conn: Any, *, session_hash: str | None = None,
                        key_hash: str | None = None) -> list[Participation]:
        c = t.participants.c
        where = c.session_hash == session_hash if session_hash is not None else c.key_hash == key_hash
        rows = conn.execute(select(c.collection_id, c.id, c.status).where(where)).all()
        return [Participation(r.collection_id, r.id, str(r.status)) for r in rows]

    def find_by_key(self, key: str) -> list[tuple[CollectionInfo, ParticipantState]]:
        """Every participation of the person known by ``key`` (a Prolific id), any collection."""
        with self._read() as conn:
            rows = conn.execute(select(t.participants.c.id, t.participants.c.collection_id).where(
                t.participants.c.key_hash == self.key_hash(key))).all()
            return [(self._info(r.collection_id, conn), self._participant(conn, r.id)) for r in rows]

    def platform_study(self, cid: int) -> PlatformStudy | None:
        with self._read() as conn:
            row = conn.execute(select(t.platform_studies).where(t.platform_studies.c.collection_id == cid)).first()
        if row is None:
            return None
        return PlatformStudy(row.collection_id, row.platform, row.external_id, row.state, row.group_id, row.places)

    def platform_studies(self, platform: str) -> list[tuple[CollectionInfo, PlatformStudy]]:
        """Every collection published on ``platform`` (e.g. ``prolific``), with its platform study,
        oldest collection first."""
        ps = t.platform_studies.c
        with self._read() as conn:
            rows = conn.execute(select(t.platform_studies).where(ps.platform == platform)
                                .order_by(ps.collection_id)).all()
            return [(self._info(row.collection_id, conn),
                     PlatformStudy(row.collection_id, row.platform, row.external_id, row.state, row.group_id, row.places))
                    for row in rows]

    def save_platform_study(self, cid: int, platform: str, external_id: str, state: str,
                            group_id: str | None = None, places: int | None = None) -> PlatformStudy:
        """Record (or update) the platform study of a collection. A different external id for a
        collection that already has one is refused: one platform study per collection."""
        ps = t.platform_studies.c
        now = self.clock()
        with self._write(cid) as conn:
            row = conn.execute(select(t.platform_studies).where(ps.collection_id == cid)).first()
            if row is None:
                conn.execute(insert(t.platform_studies).values(
                    collection_id=cid, platform=platform, external_id=external_id, state=state, group_id=group_id,
                    places=places, created_at=now, updated_at=now))
                self._event(conn, cid, "platform_study", platform=platform, state=state)
            else:
                if row.external_id != external_id:
                    raise StoreError(f"collection {cid} is already published as {row.platform} study "
                                     f"{row.external_id}: refusing to record a second one ({external_id})")
                values: dict[str, Any] = dict(state=state, updated_at=now)
                if group_id is not None:
                    values["group_id"] = group_id
                if places is not None:
                    values["places"] = places
                conn.execute(update(t.platform_studies).where(ps.collection_id == cid).values(**values))
                if state != row.state or (places is not None and places != row.places):
                    self._event(conn, cid, "platform_study", platform=platform, state=state, places=places)
        return self.platform_study(cid)  # type: ignore[return-value]

    def record_status_delivery(self, event_id: str, source: str, kind: str, status: str, *,
                               session_id: str | None, key: str | None,
                               freeing: Collection[str], signed_hash: str | None = None) -> StatusDelivery | None:
        """Record a platform's status change in **one** transaction - what a webhook's reply
        waits for: find the participation it names (by its session, else the person's only
        active participation), then write the delivery (``pending`` with that participant when
        ``status`` is in ``freeing``: its work is done after the reply) and its
        ``platform_status`` event. None for a duplicate (the event id, or ``signed_hash`` - the
        hash of what the sender signed - is recorded already)."""
        found: Participation | None = None
        try:
            with self._write() as conn:  # no collection lock: a reply never waits for a claim
                if session_id:
                    found = next(iter(self._participations(conn, session_hash=self.key_hash(session_id))), None)
                if found is None and key is not None:
                    active = [p for p in self._participations(conn, key_hash=self.key_hash(key)) if p.status == ACTIVE]
                    found = active[0] if len(active) == 1 else None
                pending = found is not None and status in freeing
                outcome = "unknown participant" if found is None else \
                    f"{status}: queued" if pending else f"recorded {status}"
                self._insert_delivery(conn, event_id, source, kind, outcome,
                                      (found.collection_id, found.participant_id, status) if pending else None,
                                      signed_hash=signed_hash)
                if found is not None:
                    self._event(conn, found.collection_id, "platform_status", found.participant_id, status=status)
        except IntegrityError:
            return None
        return StatusDelivery(found, outcome, pending)

    def record_delivery(self, event_id: str, source: str, kind: str, outcome: str, *,
                        signed_hash: str | None = None) -> bool:
        """Remember a webhook event that asks for nothing more (ignored, or handled at once);
        False when it was already recorded (a duplicate delivery recorded meanwhile: the same
        event id, or the same ``signed_hash``)."""
        try:
            with self._write() as conn:  # no collection lock: a reply never waits for a claim
                self._insert_delivery(conn, event_id, source, kind, outcome, signed_hash=signed_hash)
            return True
        except IntegrityError:
            return False

    def _insert_delivery(self, conn: Any, event_id: str, source: str, kind: str, outcome: str,
                         pending: tuple[int, int, str] | None = None, *, signed_hash: str | None = None) -> None:
        """The delivery's row (its event id and its ``signed_hash``, when given, de-duplicate: a
        second insert of either raises IntegrityError).
        ``pending``: (collection id, participant id, platform status) - the work the event asks
        for is still to do (:meth:`pending_delivery`, :meth:`finish_delivery`)."""
        values: dict[str, Any] = dict(event_id=event_id[:100], source=source, kind=kind[:60],
                                      received_at=self.clock(), outcome=outcome[:200], state=DONE,
                                      signed_hash=signed_hash)
        if pending is not None:
            cid, pid, status = pending
            values.update(state=PENDING, collection_id=cid, participant_id=pid, platform_status=status[:30])
        conn.execute(insert(t.webhook_deliveries).values(**values))

    def pending_deliveries(self, source: str = "prolific") -> list[str]:
        """The event ids of deliveries replied to whose work is not done yet (oldest first)."""
        w = t.webhook_deliveries.c
        with self._read() as conn:
            return list(conn.execute(select(w.event_id).where(w.source == source, w.state == PENDING)
                                     .order_by(w.received_at)).scalars())

    def pending_delivery(self, event_id: str) -> tuple[CollectionInfo, ParticipantState, str] | None:
        """The work of a pending delivery: the participant (as they are now) and the platform
        status; None when it is done (or unknown)."""
        w = t.webhook_deliveries.c
        with self._read() as conn:
            row = conn.execute(select(w.state, w.collection_id, w.participant_id, w.platform_status).where(
                w.event_id == event_id[:100])).first()
            if row is None or row.state != PENDING:
                return None
            return self._info(row.collection_id, conn), self._participant(conn, row.participant_id), row.platform_status

    def finish_delivery(self, event_id: str, outcome: str) -> bool:
        """A pending delivery's work is done: ``done`` with its outcome. False when it was done already."""
        w = t.webhook_deliveries.c
        with self._write() as conn:
            return bool(conn.execute(update(t.webhook_deliveries).where(
                w.event_id == event_id[:100], w.state == PENDING).values(state=DONE, outcome=outcome[:200])).rowcount)

    def deliveries(self, source: str | None = None) -> list[dict[str, Any]]:
        w = t.webhook_deliveries.c
        query = select(t.webhook_deliveries).order_by(w.received_at)
        if source is not None:
            query = query.where(w.source == source)
        with self._read() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]

    def log_event(self, cid: int, kind: str, pid: int | None = None, **detail: Any) -> None:
        """Append one event to the collection's log (portal entries, platform decisions...)."""
        with self._write() as conn:
            self._event(conn, cid, kind, pid, **detail)

    def secret(self, name: str) -> str:
        """A store-wide random secret (created on first use, kept in the owner-only store): the
        portal's signing key, invite-link key..."""
        value = self.get_meta(name)
        if value is not None:
            return value
        try:
            with self._write() as conn:
                conn.execute(insert(t.meta).values(name=name, value=secrets.token_urlsafe(32)))
        except IntegrityError:  # a concurrent first use stored it: read theirs
            pass
        return self.get_meta(name)  # type: ignore[return-value]

    def get_meta(self, name: str) -> str | None:
        with self._read() as conn:
            return conn.execute(select(t.meta.c.value).where(t.meta.c.name == name)).scalar()

    def set_meta(self, name: str, value: str) -> None:
        with self._write() as conn:
            if conn.execute(update(t.meta).where(t.meta.c.name == name).values(value=value)).rowcount == 0:
                conn.execute(insert(t.meta).values(name=name, value=value))

    def completion_code(self, cid: int) -> str:
        """The collection's completion code: derived from the store's salt, so it is stable,
        differs per study and collection, and cannot be guessed from the study's name."""
        info = self._info(cid)
        digest = hashlib.sha256(f"{self._salt}\x1fcompletion\x1f{info.study}\x1f{info.key}".encode()).hexdigest()
        return "C" + digest[:7].upper()

    def screen_out_code(self, cid: int) -> str:
        """The collection's screen-out completion code (Prolific's FIXED_SCREEN_OUT_PAYMENT, for
        people the onboarding quiz turns away): derived like :meth:`completion_code` from the
        store's salt, with its own purpose and the prefix "S", so it never equals the completion
        code and nothing new is stored."""
        info = self._info(cid)
        digest = hashlib.sha256(f"{self._salt}\x1fscreen-out\x1f{info.study}\x1f{info.key}".encode()).hexdigest()
        return "S" + digest[:7].upper()
