"""Invitation links as ``crowdpref invite`` issued them (``participants: invite`` studies): one
row per link - the id its signature covers, the study and key, an optional label saying whom it
went to, when it was issued and when it was revoked - so that one link can be revoked alone
(``crowdpref revoke-invite``) while every other keeps working. The link itself (its signed token)
is never stored: the id alone cannot open anything."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import insert, select, update

from crowdpref.store import schema as t
from crowdpref.store.engine import StoreBase


@dataclass(frozen=True)
class Invite:
    id: str
    study: str
    key: str
    label: str | None
    issued_at: float
    revoked_at: float | None


class InvitesStore(StoreBase):
    """The record of issued invitation links, and their revocation."""

    def record_invites(self, study: str, key: str, ids: list[tuple[str, str | None]]) -> None:
        """Record links issued now: (id, label) each, in one transaction."""
        now = self.clock()
        with self._write() as conn:
            if ids:
                conn.execute(insert(t.invites), [{"id": i, "study": study, "key": key, "label": label,
                                                   "issued_at": now, "revoked_at": None} for i, label in ids])

    def invites(self, study: str, key: str | None = None) -> list[Invite]:
        """The links issued for ``study`` (one key, or both), oldest first."""
        c = t.invites.c
        query = select(t.invites).where(c.study == study)
        if key is not None:
            query = query.where(c.key == key)
        with self._read() as conn:
            rows = conn.execute(query.order_by(c.issued_at, c.id)).all()
        return [Invite(r.id, r.study, r.key, r.label, r.issued_at, r.revoked_at) for r in rows]

    def revoke_invites(self, study: str, ids: list[str]) -> int:
        """Revoke these links of ``study`` (those not revoked yet); how many were."""
        c = t.invites.c
        with self._write() as conn:
            return conn.execute(update(t.invites).where(c.study == study, c.id.in_(ids), c.revoked_at.is_(None))
                                .values(revoked_at=self.clock())).rowcount or 0

    def invite_revoked(self, invite_id: str) -> bool:
        """Whether the link with this id was revoked (a link with no record - issued before links
        were recorded - is not)."""
        c = t.invites.c
        with self._read() as conn:
            return conn.execute(select(c.revoked_at).where(c.id == invite_id)).scalar() is not None
