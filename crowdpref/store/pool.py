"""The warm pool: Argilla annotator accounts made ahead of the participants who will use them.

An account is ``creating`` (a row; a provisioner builds it in Argilla under a lease), then
``ready`` (the warm pool), then ``bound`` to a participant at their claim. No password is kept:
each is derived when needed (:mod:`crowdpref.account_passwords`).
"""

from __future__ import annotations

import os
import socket

from sqlalchemy import func, select, update

from crowdpref.store import schema as t
from crowdpref.store.engine import StoreBase
from crowdpref.store.results import Account, CollectionInfo, ParticipantState
from crowdpref.store.statuses import ACTIVE, FINISHED, AccountState


class PoolStore(StoreBase):
    """The warm pool of accounts, and the end of their access (:meth:`access_revoked`)."""

    def plan_pool(self, info: CollectionInfo, size: int) -> int:
        """Make sure ``size`` unbound accounts exist (ready or being created); returns how many
        account rows were added. The caller then provisions the ``creating`` ones."""
        with self._write(info.id) as conn:
            unbound = conn.execute(select(func.count()).select_from(t.accounts).where(
                t.accounts.c.collection_id == info.id,
                t.accounts.c.state.in_((AccountState.CREATING, AccountState.READY)),
                ~t.accounts.c.id.in_(select(t.participants.c.account_id)),
            )).scalar_one()
            for _ in range(max(0, size - unbound)):
                self._new_account(conn, info, AccountState.CREATING)
            return max(0, size - unbound)

    def lease_unbound_creating(self, info: CollectionInfo, lease_s: float = 120.0, limit: int = 1) -> list[Account]:
        """Up to ``limit`` unbound accounts still being created whose lease is free, leased to
        the caller (who provisions them in Argilla). A lease is free when it ran out, or when
        the process holding it is gone (same host: its pid no longer runs) - so a rerun after a
        kill takes over at once, while two live processes never build the same account."""
        now = self.clock()
        a = t.accounts.c
        me = _process_id()
        with self._write(info.id) as conn:
            rows = conn.execute(select(a.id, a.username, a.state, a.lease_until, a.lease_owner)
                                .where(a.collection_id == info.id, a.state == AccountState.CREATING,
                                       ~a.id.in_(select(t.participants.c.account_id)))
                                .order_by(a.id)).all()
            free = [r for r in rows if r.lease_until is None or r.lease_until < now
                    or _owner_gone(r.lease_owner)][:limit]
            if free:
                conn.execute(update(t.accounts).where(a.id.in_([r.id for r in free]))
                             .values(lease_until=now + lease_s, lease_owner=me))
        return [Account(r.id, r.username, r.state) for r in free]

    def drop_lease(self, info: CollectionInfo, account_id: int) -> None:
        """Give a lease back (provisioning failed with an error, not a kill): the next refill
        retries the account at once."""
        with self._write(info.id) as conn:
            conn.execute(update(t.accounts)
                         .where(t.accounts.c.id == account_id, t.accounts.c.state == AccountState.CREATING)
                         .values(lease_until=None, lease_owner=None))

    def account_ready(self, info: CollectionInfo, account_id: int, dataset_id: str | None = None) -> None:
        """Argilla holds the account (user, workspace, empty dataset): it joins the pool, or,
        when a participant was bound to it while it was created, becomes theirs."""
        a = t.accounts.c
        with self._write(info.id) as conn:
            bound = conn.execute(select(t.participants.c.id).where(t.participants.c.account_id == account_id)).first()
            conn.execute(update(t.accounts).where(a.id == account_id, a.state == AccountState.CREATING)
                         .values(state=AccountState.BOUND if bound else AccountState.READY, ready_at=self.clock(),
                                 lease_until=None, lease_owner=None))
            if dataset_id is not None:
                conn.execute(update(t.accounts).where(a.id == account_id).values(dataset_id=dataset_id))
            self._event(conn, info.id, "account_ready", participant_id=bound[0] if bound else None)

    def accounts(self, cid: int) -> list[Account]:
        a = t.accounts.c
        with self._read() as conn:
            rows = conn.execute(select(a.id, a.username, a.state)
                                .where(a.collection_id == cid).order_by(a.id)).all()
        return [Account(r.id, r.username, r.state) for r in rows]

    def access_revoked(self, cid: int, pid: int) -> None:
        """The participant's Argilla account lost its workspace (their session and API key
        reach none of their records any more): record an ``access_revoked`` event (see
        :meth:`access_to_revoke`)."""
        with self._write(cid) as conn:
            self._event(conn, cid, "access_revoked", pid)

    def access_to_revoke(self, cid: int) -> list[ParticipantState]:
        """Participants who finished - completed, released or withdrawn - whose Argilla access
        has not been revoked yet (no ``access_revoked`` event)."""
        p, e = t.participants.c, t.events.c
        done = select(e.participant_id).where(e.collection_id == cid, e.kind == "access_revoked",
                                              e.participant_id.is_not(None))
        with self._read() as conn:
            pids = list(conn.execute(select(p.id).where(
                p.collection_id == cid, p.status.in_(FINISHED) | p.withdrawn_at.is_not(None),
                ~p.id.in_(done)).order_by(p.id)).scalars())
            return self._participants(conn, pids) if pids else []

    def holds_work(self, username: str) -> bool:
        """Whether the account ``username`` belongs to a participant who is still working: bound
        to an active participant who has not withdrawn (in any collection). What the portal's
        guard of answer changes asks (:mod:`crowdpref.portal.answer_guard`)."""
        p, a = t.participants.c, t.accounts.c
        with self._read() as conn:
            found = conn.execute(select(p.id).join(t.accounts, a.id == p.account_id).where(
                a.username == username, p.status == ACTIVE, p.withdrawn_at.is_(None)).limit(1)).first()
        return found is not None


def _process_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _owner_gone(owner: str | None) -> bool:
    """True when ``owner`` (host:pid) is a process on this host that no longer runs."""
    if not owner or ":" not in owner:
        return False
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another machine's process: only its lease running out frees the account
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
