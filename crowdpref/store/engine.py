"""The study store: who holds which work, and every event - in SQL, in transactions.

Several processes change a study's state at once (the portal letting people in, scheduled
collection runs, the operator's ``crowdpref drop``), so the state lives here and every change is
one short transaction that touches only the rows it means to change. Nothing is rewritten
whole, so no update is lost.

- SQLite (WAL) in the state folder by default, created owner-only (0600): it holds account
  passwords. ``database_url`` points it at PostgreSQL for teams running workers and the portal
  on several machines (then the database must be readable by the study owner only).
- Writes to one collection are serialised: ``BEGIN IMMEDIATE`` on SQLite, a row lock on the
  collection (``SELECT ... FOR UPDATE``) on PostgreSQL. A claim is one short transaction (no
  Argilla call inside; ``benchmarks/claims.py`` prints the store's share of a claim), so
  serialising claims costs little and makes over-allocation impossible.
- The schema is versioned with Alembic (``crowdpref/migrations``); opening a store upgrades
  it under the same write lock, so a study that runs for days survives a crowdpref upgrade.
- No Argilla call ever happens inside a transaction: the store records intent first (an
  account ``creating``, a participant ``releasing``), the caller then changes Argilla, and a
  second transaction records the result. A process killed in between leaves a state the next
  run finishes (see :mod:`crowdpref.collection`).

External participant ids (Prolific ids, invite keys) are never stored: only a salted hash
(``key_hash``), which is all a lookup needs.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Connection, Engine, create_engine, event, func, insert, select, update
from sqlalchemy.exc import DatabaseError, IntegrityError
from sqlalchemy.pool import NullPool

from crowdpref import store_schema as t
from crowdpref.errors import CrowdprefError

Source = Literal["simulated", "prolific", "invite"]
CheckPlanner = Callable[[Sequence[str], Mapping[str, bool], str], Sequence[tuple[str, "bool | None"]]]
"""(items chosen, their display orders, the participant's key hash) -> the check items to add
to the batch, with the display order of each (None when it has none)."""
SOURCES: tuple[str, ...] = ("simulated", "prolific", "invite")

# account states
CREATING, READY, BOUND = "creating", "ready", "bound"
# participant statuses
ACTIVE, RELEASING, COMPLETE, RELEASED = "active", "releasing", "complete", "released"
# assignment statuses
HELD, SUBMITTED = "held", "submitted"  # (and RELEASED)
EXCLUDED = "excluded"  # submitted, then taken out of the count (the participant failed the checks)
REOPENED = "reopened"  # counted, then taken out of the count on its own (unusable or lost answer): collected again
WITHDRAWN = "withdrawn"  # the participant withdrew: their answer never counts again, nor is it published
IN_FLIGHT_OR_DONE = (HELD, SUBMITTED)
# check verdicts (participants.check_verdict; None: the collection has no checks)
PASSED, FAILED, UNANSWERED = "passed", "failed", "unanswered"

STORE_FILE = "store.sqlite"


class StoreError(CrowdprefError):
    """The study store is unreachable, corrupt, or holds something that contradicts a request."""


# --- results --------------------------------------------------------------------------------
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
    withdrawn_at: float | None = None  # when they withdrew (:meth:`Store.withdraw`)

    @property
    def items(self) -> list[str]:
        """Every item the participant holds or held (position order)."""
        return [a.item_id for a in self.assignments]

    @property
    def held(self) -> list[str]:
        return [a.item_id for a in self.assignments if a.status == HELD]

    @property
    def submitted(self) -> dict[str, float]:
        return {a.item_id: a.submitted_at or 0.0 for a in self.assignments if a.status == SUBMITTED}

    @property
    def answered_at(self) -> dict[str, float]:
        """When each item they submitted was submitted (counted or excluded later)."""
        return {a.item_id: a.submitted_at or 0.0 for a in self.assignments if a.status in (SUBMITTED, EXCLUDED)}

    @property
    def excluded(self) -> list[str]:
        """Items they submitted that were taken out of the count (failed checks)."""
        return [a.item_id for a in self.assignments if a.status == EXCLUDED]

    @property
    def reopened(self) -> list[str]:
        """Items whose answer was taken out of the count on its own (:meth:`Store.reopen`)."""
        return [a.item_id for a in self.assignments if a.status == REOPENED]

    @property
    def visible(self) -> list[str]:
        """Items whose records belong in the participant's dataset now (an excluded or reopened
        answer stays in Argilla: it no longer counts, it is not deleted). A withdrawn
        participant's records are deleted: none."""
        if self.withdrawn_at is not None:
            return []
        if self.status == RELEASED:
            return [a.item_id for a in self.assignments if a.status in (SUBMITTED, EXCLUDED, REOPENED)]
        return [a.item_id for a in self.assignments if a.status in (*IN_FLIGHT_OR_DONE, EXCLUDED, REOPENED)]

    @property
    def swapped(self) -> dict[str, bool | None]:
        return {a.item_id: a.swapped for a in self.assignments}


@dataclass(frozen=True)
class Claimed:
    """A claim that holds work. ``new`` is False when the participant had claimed before (the
    same work comes back). The password is for handing to that participant only."""

    participant: ParticipantState
    new: bool
    password: str = field(repr=False)

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
    password: str = field(repr=False)


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


# --- the store --------------------------------------------------------------------------------
def default_url(state_dir: Path) -> str:
    return f"sqlite:///{state_dir / STORE_FILE}"


class Store:
    """Open (and create or upgrade) the store at ``url``."""

    def __init__(self, url: str, clock: Callable[[], float] = time.time):
        self.url = url
        self.clock = clock
        self.dialect = url.split(":", 1)[0].split("+", 1)[0]
        self.engine = _engine(url)
        try:
            upgrade(self.engine)
            self._salt = self._key_salt()
        except DatabaseError as exc:  # OperationalError, or a damaged file ('not a database')
            self.engine.dispose()
            raise StoreError(_cannot_open(url, exc)) from None

    # transactions ---------------------------------------------------------------------------
    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """A read-only transaction: one consistent snapshot (SQLite WAL: a deferred BEGIN, which
        never waits for writers; writes take the lock up front, see :func:`_engine`)."""
        with self.engine.connect() as conn:
            conn.execution_options(crowdpref_read_only=True)
            yield conn

    @contextmanager
    def _write(self, collection_id: int | None = None) -> Iterator[Connection]:
        """One write transaction; with ``collection_id``, serialised with every other write to
        that collection (SQLite: the database write lock; PostgreSQL: the collection's row)."""
        with self.engine.begin() as conn:
            if collection_id is not None and self.dialect == "postgresql":
                conn.execute(select(t.collections.c.id).where(t.collections.c.id == collection_id).with_for_update())
            yield conn

    def _event(self, conn: Connection, cid: int, kind: str, participant_id: int | None = None,
               item_id: str | None = None, at: float | None = None, **detail: Any) -> None:
        conn.execute(insert(t.events).values(
            collection_id=cid, at=self.clock() if at is None else at, kind=kind, participant_id=participant_id,
            item_id=item_id, detail=json.dumps(detail, sort_keys=True) if detail else None,
        ))

    def _key_salt(self) -> str:
        for attempt in range(2):
            try:
                with self._write() as conn:
                    row = conn.execute(select(t.meta.c.value).where(t.meta.c.name == "key_salt")).first()
                    if row is not None:
                        return row[0]
                    salt = secrets.token_hex(16)
                    conn.execute(insert(t.meta).values(name="key_salt", value=salt))
                    return salt
            except IntegrityError:
                if attempt:  # PostgreSQL: a concurrent first open stored its salt: the second pass reads it
                    raise
        raise AssertionError("unreachable")

    def key_hash(self, key: str) -> str:
        """The salted hash that stands for an external participant id everywhere in the store."""
        return hashlib.sha256(f"{self._salt}\x1f{key}".encode()).hexdigest()

    # collections ------------------------------------------------------------------------------
    def collection(self, study: str, key: str, items: Sequence[str], *, copies: int, per_participant: int,
                   seed: int, username_prefix: str, counterbalance: bool = False) -> CollectionInfo:
        """The collection for (study, key), created with its items on first use. Later calls
        add items that are new and keep R/Q/prefix in step with the config; items are never
        removed (work on them may exist)."""
        c = t.collections.c
        values = dict(copies=copies, per_participant=per_participant, seed=seed, counterbalance=counterbalance,
                      username_prefix=username_prefix)
        for attempt in range(2):
            try:
                with self._write() as conn:
                    row = conn.execute(select(t.collections).where(c.study == study, c.key == key)).first()
                    if row is None:
                        cid = conn.execute(insert(t.collections).values(study=study, key=key, created_at=self.clock(),
                                                                        **values)).inserted_primary_key[0]
                        self._event(conn, cid, "collection_created", items=len(items), copies=copies,
                                    per_participant=per_participant)
                    else:
                        cid = row.id
                        changed = {k: v for k, v in values.items() if getattr(row, k) != v}
                        if changed:
                            conn.execute(update(t.collections).where(c.id == cid).values(**changed))
                            self._event(conn, cid, "settings_changed", **{k: str(v) for k, v in changed.items()})
                    known = set(conn.execute(select(t.items.c.item_id).where(t.items.c.collection_id == cid)).scalars())
                    new = [i for i in dict.fromkeys(items) if i not in known]
                    if new:
                        start = len(known)
                        conn.execute(insert(t.items), [
                            {"collection_id": cid, "item_id": item, "ordinal": start + n} for n, item in enumerate(new)
                        ])
                    return CollectionInfo(cid, study, key, username_prefix=username_prefix, **{
                        k: v for k, v in values.items() if k != "username_prefix"})
            except IntegrityError:
                if attempt:  # a concurrent first use created it: the second pass finds it
                    raise
        raise AssertionError("unreachable")

    def find_collection(self, study: str, key: str) -> CollectionInfo | None:
        c = t.collections.c
        with self._read() as conn:
            row = conn.execute(select(t.collections).where(c.study == study, c.key == key)).first()
        if row is None:
            return None
        return CollectionInfo(row.id, row.study, row.key, row.copies, row.per_participant, row.seed,
                              bool(row.counterbalance), row.username_prefix)

    def items(self, cid: int) -> list[str]:
        with self._read() as conn:
            return list(conn.execute(select(t.items.c.item_id).where(t.items.c.collection_id == cid)
                                     .order_by(t.items.c.ordinal)).scalars())

    # accounts (the warm pool) -------------------------------------------------------------------
    def _new_account(self, conn: Connection, info: CollectionInfo, state: str) -> Account:
        n = conn.execute(select(func.count()).select_from(t.accounts)
                         .where(t.accounts.c.collection_id == info.id)).scalar_one()
        username = f"{info.username_prefix}-{n + 1:04d}"
        password = secrets.token_urlsafe(20)
        account_id = conn.execute(insert(t.accounts).values(
            collection_id=info.id, username=username, state=state, created_at=self.clock(),
        )).inserted_primary_key[0]
        conn.execute(insert(t.credentials).values(account_id=account_id, password=password))
        self._event(conn, info.id, "account_created", username=username)
        return Account(account_id, username, state, password)

    def plan_pool(self, info: CollectionInfo, size: int) -> int:
        """Make sure ``size`` unbound accounts exist (ready or being created); returns how many
        account rows were added. The caller then provisions the ``creating`` ones."""
        with self._write(info.id) as conn:
            unbound = conn.execute(select(func.count()).select_from(t.accounts).where(
                t.accounts.c.collection_id == info.id, t.accounts.c.state.in_((CREATING, READY)),
                ~t.accounts.c.id.in_(select(t.participants.c.account_id)),
            )).scalar_one()
            for _ in range(max(0, size - unbound)):
                self._new_account(conn, info, CREATING)
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
            rows = conn.execute(select(a.id, a.username, a.state, a.lease_until, a.lease_owner,
                                       t.credentials.c.password)
                                .join(t.credentials, t.credentials.c.account_id == a.id)
                                .where(a.collection_id == info.id, a.state == CREATING,
                                       ~a.id.in_(select(t.participants.c.account_id)))
                                .order_by(a.id)).all()
            free = [r for r in rows if r.lease_until is None or r.lease_until < now
                    or _owner_gone(r.lease_owner)][:limit]
            if free:
                conn.execute(update(t.accounts).where(a.id.in_([r.id for r in free]))
                             .values(lease_until=now + lease_s, lease_owner=me))
        return [Account(r.id, r.username, r.state, r.password) for r in free]

    def drop_lease(self, info: CollectionInfo, account_id: int) -> None:
        """Give a lease back (provisioning failed with an error, not a kill): the next refill
        retries the account at once."""
        with self._write(info.id) as conn:
            conn.execute(update(t.accounts).where(t.accounts.c.id == account_id, t.accounts.c.state == CREATING)
                         .values(lease_until=None, lease_owner=None))

    def account_ready(self, info: CollectionInfo, account_id: int, dataset_id: str | None = None) -> None:
        """Argilla holds the account (user, workspace, empty dataset): it joins the pool, or,
        when a participant was bound to it while it was created, becomes theirs."""
        a = t.accounts.c
        with self._write(info.id) as conn:
            bound = conn.execute(select(t.participants.c.id).where(t.participants.c.account_id == account_id)).first()
            conn.execute(update(t.accounts).where(a.id == account_id, a.state == CREATING)
                         .values(state=BOUND if bound else READY, ready_at=self.clock(), lease_until=None,
                                 lease_owner=None))
            if dataset_id is not None:
                conn.execute(update(t.accounts).where(a.id == account_id).values(dataset_id=dataset_id))
            self._event(conn, info.id, "account_ready", participant_id=bound[0] if bound else None)

    def accounts(self, cid: int) -> list[Account]:
        a = t.accounts.c
        with self._read() as conn:
            rows = conn.execute(select(a.id, a.username, a.state, t.credentials.c.password)
                                .join(t.credentials, t.credentials.c.account_id == a.id)
                                .where(a.collection_id == cid).order_by(a.id)).all()
        return [Account(r.id, r.username, r.state, r.password) for r in rows]

    def password(self, account_id: int) -> str:
        with self._read() as conn:
            value = conn.execute(select(t.credentials.c.password)
                                 .where(t.credentials.c.account_id == account_id)).scalar_one_or_none()
        if value is None:
            raise StoreError(f"the study store has no credentials for account {account_id}: the store is damaged")
        return value

    def expire_password(self, cid: int, pid: int, account_id: int, password: str) -> None:
        """The participant's account got ``password`` in Argilla (their old one no longer signs
        in): keep it, and record a ``credentials_expired`` event (see :meth:`credentials_to_expire`)."""
        with self._write(cid) as conn:
            conn.execute(update(t.credentials).where(t.credentials.c.account_id == account_id).values(password=password))
            self._event(conn, cid, "credentials_expired", pid)

    def credentials_to_expire(self, cid: int) -> list[ParticipantState]:
        """Participants who finished - completed, released or withdrawn - whose credentials
        have not expired yet (no ``credentials_expired`` event)."""
        p, e = t.participants.c, t.events.c
        done = select(e.participant_id).where(e.collection_id == cid, e.kind == "credentials_expired",
                                              e.participant_id.is_not(None))
        with self._read() as conn:
            pids = list(conn.execute(select(p.id).where(
                p.collection_id == cid, (p.status.in_((COMPLETE, RELEASED))) | p.withdrawn_at.is_not(None),
                ~p.id.in_(done)).order_by(p.id)).scalars())
            return self._participants(conn, pids) if pids else []

    # counts ------------------------------------------------------------------------------------------
    def item_counts(self, cid: int, conn: Connection | None = None) -> ItemCounts:
        s = t.assignments.c
        query = (select(s.item_id, s.status, func.count()).where(s.collection_id == cid)
                 .group_by(s.item_id, s.status))
        if conn is None:
            with self._read() as own:
                rows = own.execute(query).all()
        else:
            rows = conn.execute(query).all()
        counts: dict[str, Counter[str]] = {HELD: Counter(), SUBMITTED: Counter(), RELEASED: Counter(),
                                           EXCLUDED: Counter(), REOPENED: Counter(), WITHDRAWN: Counter()}
        for item, status, n in rows:
            counts[status][item] = n
        return ItemCounts(counts[SUBMITTED], counts[HELD], counts[RELEASED], counts[EXCLUDED], counts[REOPENED],
                          counts[WITHDRAWN])

    # claims -----------------------------------------------------------------------------------------
    def claim(self, info: CollectionInfo, key: str, source: str, *,
              exclude_collection: CollectionInfo | None = None,
              checks: CheckPlanner | None = None) -> ClaimResult:
        """Give the participant known by ``key`` their Q items, in one transaction.

        The items with the most copies still missing come first (ties broken by a seeded hash
        of the participant and the item, so simultaneous arrivals spread out); never more than
        R copies of an item in flight or done; never an item twice to one person. A second
        claim by the same key returns the same work. Binds a ready pool account when there is
        one, else creates an account row the caller provisions now (a cold claim).
        ``exclude_collection``: people who took part there are refused (study 1 -> study 2).
        ``checks``: the quality checks to add to the batch, given the items chosen, their
        display orders and the participant's key hash (held like items, so the participant
        finishes only when they are answered too, and a release deletes them; they are not
        items of the collection and never count towards R)."""
        if source not in SOURCES:
            raise StoreError(f"unknown participant source '{source}': use one of {', '.join(SOURCES)}")
        key_hash = self.key_hash(key)
        now = self.clock()
        p, a, s = t.participants.c, t.accounts.c, t.assignments.c
        with self._write(info.id) as conn:
            info = self._info(info.id, conn)  # R, Q... as the store holds them now (the config may have changed)
            existing = conn.execute(select(p.id, p.status, p.withdrawn_at).where(
                p.collection_id == info.id, p.key_hash == key_hash)).first()
            if existing is not None:
                if existing.status in (RELEASING, RELEASED) or existing.withdrawn_at is not None:
                    return Refused("released")
                state = self._participant(conn, existing.id)
                return Claimed(state, new=False, password=self._password(conn, state.account_id))
            if exclude_collection is not None and conn.execute(select(p.id).where(
                    p.collection_id == exclude_collection.id, p.key_hash == key_hash)).first() is not None:
                self._event(conn, info.id, "refused", reason="excluded")
                return Refused("excluded")
            counts = self.item_counts(info.id, conn)
            all_items = conn.execute(select(t.items.c.item_id).where(t.items.c.collection_id == info.id)).scalars()
            missing = {}
            for item in all_items:
                gap = info.copies - counts.submitted[item] - counts.held[item]
                if gap > 0:
                    missing[item] = gap
            if not missing:
                self._event(conn, info.id, "full")
                return Full()
            chosen = sorted(missing, key=lambda item: (-missing[item], _tiebreak(info.seed, key_hash, item)))
            chosen = chosen[: info.per_participant]
            account_row = conn.execute(select(a.id, a.username).where(
                a.collection_id == info.id, a.state == READY,
                ~a.id.in_(select(p.account_id))).order_by(a.id).limit(1)).first()
            if account_row is not None:
                conn.execute(update(t.accounts).where(a.id == account_row.id).values(state=BOUND))
                account_id = account_row.id
            else:
                account_id = self._new_account(conn, info, CREATING).id
            pid = conn.execute(insert(t.participants).values(
                collection_id=info.id, key_hash=key_hash, source=source, account_id=account_id, status=ACTIVE,
                claimed_at=now, last_activity_at=now, records_logged=False, drop_requested=False,
            )).inserted_primary_key[0]
            orders = self._display_orders(conn, info, chosen, key_hash) if info.counterbalance else {}
            extra = list(checks(chosen, orders, key_hash)) if checks is not None else []
            conn.execute(insert(t.assignments), [
                {"collection_id": info.id, "participant_id": pid, "item_id": item, "position": n, "status": HELD,
                 "swapped": swapped, "assigned_at": now}
                for n, (item, swapped) in enumerate([(item, orders.get(item)) for item in chosen] + extra)
            ])
            self._event(conn, info.id, "claimed", pid, at=now, items=len(chosen), source=source,
                        warm=account_row is not None)
            for item in chosen:
                if counts.released[item] or counts.excluded[item] or counts.reopened[item] or counts.withdrawn[item]:
                    self._event(conn, info.id, "reallocated", pid, item, at=now)
            state = self._participant(conn, pid)
            return Claimed(state, new=True, password=self._password(conn, account_id))

    def _display_orders(self, conn: Connection, info: CollectionInfo, items: Sequence[str],
                        key_hash: str) -> dict[str, bool]:
        """Counterbalanced A/B order per rating: each item gets the order fewer of its current
        (held or submitted) raters saw; a tie is a seeded coin. So the R raters of a pair see
        it ceil(R/2) one way and floor(R/2) the other - as balanced as R allows."""
        s = t.assignments.c
        rows = conn.execute(select(s.item_id, s.swapped, func.count()).where(
            s.collection_id == info.id, s.item_id.in_(list(items)), s.status.in_(IN_FLIGHT_OR_DONE),
        ).group_by(s.item_id, s.swapped)).all()
        seen: dict[str, Counter[bool]] = {}
        for item, swapped, n in rows:
            seen.setdefault(item, Counter())[bool(swapped)] += n
        orders = {}
        for item in items:
            c = seen.get(item, Counter())
            if c[True] != c[False]:
                orders[item] = c[True] < c[False]
            else:
                orders[item] = int(_tiebreak(info.seed, "order", item, key_hash)[:8], 16) % 2 == 1
        return orders

    def _password(self, conn: Connection, account_id: int) -> str:
        return conn.execute(select(t.credentials.c.password).where(t.credentials.c.account_id == account_id)).scalar_one()

    # participants ----------------------------------------------------------------------------------
    def _participant(self, conn: Connection, pid: int) -> ParticipantState:
        return self._participants(conn, [pid])[0]

    def _participants(self, conn: Connection, pids: Sequence[int] | None = None, cid: int | None = None,
                      statuses: Sequence[str] | None = None) -> list[ParticipantState]:
        p, a, s = t.participants.c, t.accounts.c, t.assignments.c
        query = select(p.id, p.source, p.status, p.claimed_at, p.last_activity_at, p.records_logged,
                       p.drop_requested, p.released_at, p.release_reason, p.account_id, p.session_hash,
                       p.checks_answered, p.checks_passed, p.check_verdict, p.excluded_at, p.withdrawn_at, a.username,
                       a.state.label("account_state"), a.dataset_id).join(t.accounts, a.id == p.account_id).order_by(p.id)
        if pids is not None:
            query = query.where(p.id.in_(list(pids)))
        if cid is not None:
            query = query.where(p.collection_id == cid)
        if statuses is not None:
            query = query.where(p.status.in_(list(statuses)))
        rows = conn.execute(query).all()
        if not rows:
            return []
        by_pid: dict[int, list[Assignment]] = {r.id: [] for r in rows}
        aquery = select(s.participant_id, s.item_id, s.position, s.status, s.swapped, s.submitted_at).order_by(
            s.participant_id, s.position)
        if pids is not None or cid is None:
            aquery = aquery.where(s.participant_id.in_(list(by_pid)))
        else:
            aquery = aquery.where(s.collection_id == cid)
        for r in conn.execute(aquery):
            if r.participant_id in by_pid:
                by_pid[r.participant_id].append(Assignment(r.item_id, r.position, r.status,
                                                           None if r.swapped is None else bool(r.swapped),
                                                           r.submitted_at))
        return [ParticipantState(
            id=r.id, username=r.username, account_id=r.account_id, account_state=r.account_state, source=r.source,
            status=r.status, claimed_at=r.claimed_at, last_activity_at=r.last_activity_at,
            records_logged=bool(r.records_logged), drop_requested=bool(r.drop_requested),
            assignments=tuple(by_pid[r.id]), released_at=r.released_at, release_reason=r.release_reason,
            dataset_id=r.dataset_id, session_hash=r.session_hash, checks_answered=r.checks_answered or 0,
            checks_passed=r.checks_passed or 0, check_verdict=r.check_verdict, excluded_at=r.excluded_at,
            withdrawn_at=r.withdrawn_at,
        ) for r in rows]

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

    def key_hashes(self, cid: int) -> set[str]:
        with self._read() as conn:
            return set(conn.execute(select(t.participants.c.key_hash).where(t.participants.c.collection_id == cid)).scalars())

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
        with self._write(cid) as conn:
            if conn.execute(select(p.status).where(p.id == pid)).scalar_one() != ACTIVE:
                return 0  # being released (maybe by another run, whose delete may take these records)
            for item, at in submitted.items():
                result = conn.execute(update(t.assignments).where(
                    s.participant_id == pid, s.item_id == item, s.status == HELD).values(status=SUBMITTED, submitted_at=at))
                if result.rowcount:
                    marked += 1
                    self._event(conn, cid, "submitted", pid, item, at=at)
            if last_activity is not None:
                conn.execute(update(t.participants).where(p.id == pid, p.last_activity_at < last_activity)
                             .values(last_activity_at=last_activity))
            held = conn.execute(select(func.count()).select_from(t.assignments)
                                .where(s.participant_id == pid, s.status == HELD)).scalar_one()
            if held == 0:
                result = conn.execute(update(t.participants).where(p.id == pid, p.status == ACTIVE)
                                      .values(status=COMPLETE, completed_at=self.clock()))
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
            if row.status not in (COMPLETE, RELEASED):
                raise StoreError(f"participant {pid} is {row.status}: only a finished participant's work can be "
                                 "excluded (release them first)")
            done = list(conn.execute(select(s.item_id).where(
                s.participant_id == pid, s.status == SUBMITTED, s.item_id.in_(list(items))).order_by(s.position)).scalars())
            conn.execute(update(t.assignments).where(s.participant_id == pid, s.status == SUBMITTED,
                                                     s.item_id.in_(done)).values(status=EXCLUDED))
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
            if known is None:
                raise StoreError(f"item '{item_id}' is not an item of this collection: check the id (the export's "
                                 "message and validation.json name it)")
            rows = conn.execute(select(s.participant_id, s.status, a.username)
                                .join(t.participants, p.id == s.participant_id)
                                .join(t.accounts, a.id == p.account_id)
                                .where(s.collection_id == cid, s.item_id == item_id).order_by(s.participant_id)).all()
            counted = [r for r in rows if r.status == SUBMITTED]
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
                                                         s.status == SUBMITTED).values(status=REOPENED, released_at=now))
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
            if row.status not in (COMPLETE, RELEASED):
                raise StoreError(f"participant {pid} is {row.status}: only a finished participant can be withdrawn "
                                 "(release them first)")
            counted = list(conn.execute(select(s.item_id).where(
                s.participant_id == pid, s.status == SUBMITTED).order_by(s.position)).scalars())
            conn.execute(update(t.assignments).where(s.participant_id == pid,
                                                     s.status.in_((SUBMITTED, EXCLUDED, REOPENED)))
                         .values(status=WITHDRAWN, released_at=now))
            conn.execute(update(t.participants).where(p.id == pid).values(withdrawn_at=now))
            items = set(conn.execute(select(t.items.c.item_id).where(t.items.c.collection_id == cid)).scalars())
            self._event(conn, cid, "withdrawn", pid, at=now, reason=reason,
                        items=sum(item in items for item in counted))
            return [item for item in counted if item in items]

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
        if participant.status not in (ACTIVE,):
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
            result = conn.execute(update(t.participants).where(p.id == pid, p.status == ACTIVE)
                                  .values(status=RELEASING, release_reason=reason))
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
            if status != RELEASING:
                return []
            held = list(conn.execute(select(s.item_id).where(s.participant_id == pid, s.status == HELD)).scalars())
            conn.execute(update(t.assignments).where(s.participant_id == pid, s.status == HELD)
                         .values(status=RELEASED, released_at=now))
            conn.execute(update(t.participants).where(p.id == pid).values(status=RELEASED, released_at=now))
            conn.execute(update(t.releases).where(r.participant_id == pid, r.finished_at.is_(None))
                         .values(finished_at=now, items_released=len(held)))
            self._event(conn, cid, "released", pid, items=len(held))
            return held

    # the platform side: sessions, platform studies, webhook deliveries, secrets ---------------------
    def record_session(self, cid: int, pid: int, session_id: str) -> None:
        """Remember (as a salted hash) the platform session a participant entered with: the
        Prolific submission id that webhooks name."""
        with self._write(cid) as conn:
            conn.execute(update(t.participants).where(t.participants.c.id == pid)
                         .values(session_hash=self.key_hash(session_id)))

    def find_by_session(self, session_id: str) -> tuple[CollectionInfo, ParticipantState] | None:
        """The participant who entered with this platform session, in any collection."""
        with self._read() as conn:
            row = conn.execute(select(t.participants.c.id, t.participants.c.collection_id).where(
                t.participants.c.session_hash == self.key_hash(session_id))).first()
            if row is None:
                return None
            return self._info(row.collection_id, conn), self._participant(conn, row.id)

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

    def delivery_seen(self, event_id: str) -> bool:
        with self._read() as conn:
            return conn.execute(select(t.webhook_deliveries.c.event_id).where(
                t.webhook_deliveries.c.event_id == event_id)).first() is not None

    def record_delivery(self, event_id: str, source: str, kind: str, outcome: str) -> bool:
        """Remember a handled webhook event; False when it was already recorded (a duplicate
        delivery handled meanwhile)."""
        try:
            with self._write() as conn:
                conn.execute(insert(t.webhook_deliveries).values(
                    event_id=event_id[:100], source=source, kind=kind[:60], received_at=self.clock(),
                    outcome=outcome[:200]))
            return True
        except IntegrityError:
            return False

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

    # reading the log ---------------------------------------------------------------------------------
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
        participants = self.participants(cid)
        counts = self.item_counts(cid)
        with self._read() as conn:
            reclaimed = conn.execute(select(func.count()).select_from(t.events).where(
                t.events.c.collection_id == cid, t.events.c.kind == "reallocated")).scalar_one()
        return {
            "participants": len(participants),
            "completed": sum(p.status == COMPLETE for p in participants),
            "dropped_out": sum(p.status == RELEASED for p in participants),
            "released_items": sum(counts.released.values()),
            "reclaimed_items": reclaimed,
        }

    def check(self, cid: int) -> list[str]:
        """Invariant violations (empty when consistent): no item over R copies in flight or
        done, no participant holding an item twice (the schema forbids it too)."""
        info = self._info(cid)
        counts = self.item_counts(cid)
        problems = []
        for item in self.items(cid):
            n = counts.submitted[item] + counts.held[item]
            if n > info.copies:
                problems.append(f"item {item} has {n} copies in flight or done (R = {info.copies})")
        return problems

    def _info(self, cid: int, conn: Connection | None = None) -> CollectionInfo:
        if conn is None:
            with self._read() as own:
                return self._info(cid, own)
        row = conn.execute(select(t.collections).where(t.collections.c.id == cid)).one()
        return CollectionInfo(row.id, row.study, row.key, row.copies, row.per_participant, row.seed,
                              bool(row.counterbalance), row.username_prefix)

    def close(self) -> None:
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"Store({_redacted(self.url)})"

    # monitoring that scales with activity (Argilla's webhooks, a backstop) ------------------------
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
        from sqlalchemy import case

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
        from sqlalchemy import and_, or_

        p, a = t.participants.c, t.accounts.c
        query = (select(p.id).join(t.accounts, a.id == p.account_id).where(p.collection_id == cid, or_(
            p.status == RELEASING,
            and_(p.status == ACTIVE, or_(
                ~p.records_logged, a.state == CREATING, p.drop_requested, p.activity_seq > p.read_seq,
                p.read_at.is_(None), p.read_at <= now - backstop_s, p.last_activity_at < now - inactive_after_s)),
            and_(p.status == COMPLETE, p.activity_seq > p.read_seq, p.withdrawn_at.is_(None)),
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
                p.collection_id == cid, p.status.in_((COMPLETE, RELEASED)), p.check_verdict == FAILED,
                p.excluded_at.is_(None), p.withdrawn_at.is_(None))).scalars())
            return self._participants(conn, pids=pids) if pids else []


# --- engine, migrations --------------------------------------------------------------------------
def _cannot_open(url: str, exc: BaseException) -> str:
    """One line for a store that exists but cannot be used. Never advice that loses data: the
    store is the study's ledger (who holds and answered what, account passwords)."""
    where = _redacted(url)
    if url.startswith("sqlite"):
        return (f"the study store {where.split('///', 1)[-1]} cannot be opened ({_first_line(exc)}): it is damaged or "
                "not readable - restore it from your backup (or fix its permissions), or point database_url "
                "(CROWDPREF_DATABASE_URL) at another store; do not delete it: it holds the study's state")
    return (f"the study store at {where} cannot be opened ({_first_line(exc)}): check that the database server "
            "runs and database_url (CROWDPREF_DATABASE_URL) is right")


def _engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1] if "///" in url else ""
        if path and path != ":memory:":
            file = Path(path)
            try:
                file.parent.mkdir(parents=True, exist_ok=True)
                if not file.exists():  # owner-only from the first byte: it holds passwords
                    os.close(os.open(file, os.O_CREAT | os.O_WRONLY, 0o600))
            except OSError as exc:
                raise StoreError(_cannot_open(url, exc)) from None
        engine = create_engine(url, poolclass=NullPool, connect_args={"timeout": 60, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=60000")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            if conn.get_execution_options().get("crowdpref_read_only"):
                conn.exec_driver_sql("BEGIN")  # a snapshot for reads: readers never queue behind writers
            else:
                conn.exec_driver_sql("BEGIN IMMEDIATE")  # writes take the lock up front: no upgrade deadlocks

        return engine
    try:
        return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=20)
    except Exception as exc:  # noqa: BLE001 - a bad URL or a missing driver: one line
        raise StoreError(f"database_url {_redacted(url)} cannot be used ({_first_line(exc)}): for PostgreSQL "
                         "install crowdpref[postgres] and use postgresql+psycopg://USER@HOST:PORT/DB") from None


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest migration, under the write lock (concurrent openers wait;
    the first migrates, the others find it done)."""
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    head = ScriptDirectory.from_config(config).get_current_head()
    with engine.connect() as conn:
        if MigrationContext.configure(conn).get_current_revision() == head:
            return
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7236019)")
        if MigrationContext.configure(conn).get_current_revision() == head:
            return
        config.attributes["connection"] = conn
        command.upgrade(config, "head")


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


def _tiebreak(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()


def _redacted(url: str) -> str:
    """The URL without its password (for messages)."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}" if ":" in creds else url


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [exc.__class__.__name__])[0][:200]


def open_store(settings: Any, clock: Callable[[], float] = time.time) -> Store:
    """The store the settings name (``database_url``), else SQLite in the state folder."""
    url = getattr(settings, "database_url", None)
    if url is not None and hasattr(url, "get_secret_value"):
        url = url.get_secret_value()
    return Store(url or default_url(settings.state_dir), clock=clock)
