"""Collections and the claim: who gets which work.

A collection is one study's (study 1 or study 2) items with R (copies of each item) and Q (items
per participant). A claim hands a participant their Q items in one short transaction: the
items with the most copies still missing first, never more than R copies of an item in flight
or done, never an item twice to one person. It reads the per-item counts in that order from an
index (:mod:`crowdpref.store.counts`), so its cost does not grow with the number of items.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, get_args

from sqlalchemy import Connection, Row, bindparam, delete, exists, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from crowdpref.contracts import SOURCES
from crowdpref.store import counts
from crowdpref.store import schema as t
from crowdpref.store.engine import StoreBase, StoreError
from crowdpref.store.results import (Account, Assignment, Claimed, ClaimResult, CollectionInfo, Full,
                                     ParticipantState, Refused)
from crowdpref.store.statuses import IN_FLIGHT_OR_DONE, AccountState, AssignmentStatus, ParticipantStatus

Source = Literal["simulated", "prolific", "invite"]
"""A participant's source, as a type: :data:`crowdpref.contracts.SOURCES` (the one definition)."""
assert get_args(Source) == SOURCES, "Source must list crowdpref.contracts.SOURCES, in order"
CheckPlanner = Callable[[Sequence[str], Mapping[str, bool], str], Sequence[tuple[str, "bool | None"]]]
"""(items chosen, their display orders, the participant's key hash) -> the check items to add
to the batch, with the display order of each (None when it has none)."""


class ClaimsStore(StoreBase):
    """Collections, their items, and claims."""

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
                        counts.add_items(conn, cid, new)
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

    PER_COLLECTION_META = ("prolific-places-capped",)
    """Meta entries named ``<prefix>:<collection id>`` (crowdpref.recruitment.CAP_META); a study's
    own entries are named ``<prefix>:<study name>`` (its config path, Prolific group, filters)."""

    def delete_study(self, study: str) -> dict[str, int]:
        """Remove every row of the study ``study`` (both collections) in ONE transaction: its
        collections, items, item counts, accounts, participants, assignments, releases, events,
        onboarding, Prolific study records, pending webhook deliveries acting on it, invitation
        links and its meta entries. For throw-away studies (the pre-flight's dress rehearsal);
        nothing in Argilla or on disk is touched. Returns the rows removed per table (all 0 for
        a study the store does not know)."""
        c, p = t.collections.c, t.participants.c
        removed: dict[str, int] = {}
        with self._write() as conn:
            cids = list(conn.execute(select(c.id).where(c.study == study)).scalars())
            by_collection = [
                (t.releases, t.releases.c.participant_id.in_(select(p.id).where(p.collection_id.in_(cids)))),
                (t.assignments, t.assignments.c.collection_id.in_(cids)),
                (t.onboarding, t.onboarding.c.collection_id.in_(cids)),
                (t.item_counts, t.item_counts.c.collection_id.in_(cids)),
                (t.events, t.events.c.collection_id.in_(cids)),
                (t.platform_studies, t.platform_studies.c.collection_id.in_(cids)),
                (t.webhook_deliveries, t.webhook_deliveries.c.collection_id.in_(cids)),
                (t.participants, p.collection_id.in_(cids)),
                (t.accounts, t.accounts.c.collection_id.in_(cids)),
                (t.items, t.items.c.collection_id.in_(cids)),
                (t.collections, c.id.in_(cids)),
                (t.invites, t.invites.c.study == study),
                (t.meta, or_(t.meta.c.name.like(f"%:{_like_literal(study)}", escape="\\"),
                             t.meta.c.name.in_([f"{prefix}:{cid}" for prefix in self.PER_COLLECTION_META
                                                for cid in cids]))),
            ]
            for table, where in by_collection:
                removed[table.name] = int(conn.execute(delete(table).where(where)).rowcount or 0)
        return removed

    def items(self, cid: int) -> list[str]:
        """The collection's items in order, without retired ones (:meth:`retire_items`): the
        items that must end with R answers."""
        with self._read() as conn:
            return counts.live_items(conn, cid)

    def claim(self, info: CollectionInfo, key: str, source: str, *,
              exclude_collection: CollectionInfo | None = None,
              checks: CheckPlanner | None = None, key_hash: str | None = None) -> ClaimResult:
        """Give the participant known by ``key`` their Q items, in one transaction.

        The items with the most copies still missing come first (ties broken by each item's
        rank, read round the rank circle from a point a seeded hash of the participant picks,
        so simultaneous arrivals spread out); never more than R copies of an item in flight or
        done; never an item twice to one person. The claim reads the per-item counts in that
        order from an index (:mod:`crowdpref.store.counts`): its cost does not grow with the
        number of items. A second
        claim by the same key returns the same work. Binds a ready pool account when there is
        one, else creates an account row the caller provisions now (a cold claim).
        ``exclude_collection``: people who took part there are refused (study 1 -> study 2).
        ``checks``: the quality checks to add to the batch, given the items chosen, their
        display orders and the participant's key hash (held like items, so the participant
        finishes only when they are answered too, and a release deletes them; they are not
        items of the collection and never count towards R). ``key_hash``: the person's key hash
        (:meth:`key_hash`) when the caller knows only that (the portal after onboarding, whose
        cookie holds the hash, never the raw id); ``key`` may then be ""."""
        if source not in SOURCES:
            raise StoreError(f"unknown participant source '{source}': use one of {', '.join(SOURCES)}")
        key_hash = key_hash or self.key_hash(key)
        now = self.clock()
        p = t.participants.c
        with self._write(info.id) as conn:
            info = self._info(info.id, conn)  # R, Q... as the store holds them now (the config may have changed)
            existing = conn.execute(_FIND_PARTICIPANT, {"cid": info.id, "key_hash": key_hash}).first()
            if existing is not None:
                if (existing.status in (ParticipantStatus.RELEASING, ParticipantStatus.RELEASED)
                        or existing.withdrawn_at is not None):
                    return Refused("released")
                state = self._participant(conn, existing.id)
                return Claimed(state, new=False)
            if exclude_collection is not None and conn.execute(select(p.id).where(
                    p.collection_id == exclude_collection.id, p.key_hash == key_hash)).first() is not None:
                self._event(conn, info.id, "refused", reason="excluded")
                return Refused("excluded")
            open_rows = _open_items(conn, info, key_hash)
            if not open_rows:
                self._event(conn, info.id, "full")
                return Full()
            chosen = [row.item_id for row in open_rows]
            account_row = conn.execute(_READY_ACCOUNT, {"cid": info.id}).first()
            if account_row is not None:
                conn.execute(_BIND_ACCOUNT, {"aid": account_row.id})
                account = Account(account_row.id, account_row.username, AccountState.BOUND)
                dataset_id = account_row.dataset_id
            else:
                account, dataset_id = self._new_account(conn, info, AccountState.CREATING), None
            account_id = account.id
            pid = conn.execute(_INSERT_PARTICIPANT, dict(
                collection_id=info.id, key_hash=key_hash, source=source, account_id=account_id,
                status=ParticipantStatus.ACTIVE, claimed_at=now, last_activity_at=now, records_logged=False,
                drop_requested=False,
            )).inserted_primary_key[0]
            orders = self._display_orders(conn, info, chosen, key_hash) if info.counterbalance else {}
            extra = list(checks(chosen, orders, key_hash)) if checks is not None else []
            batch = [(item, orders.get(item)) for item in chosen] + [(item, swapped) for item, swapped in extra]
            held = str(AssignmentStatus.HELD)
            conn.exec_driver_sql(_insert_assignments_sql(conn.dialect.paramstyle), [
                (info.id, pid, item, n, held, swapped, now) for n, (item, swapped) in enumerate(batch)])
            counts.shift(conn, info.id, [(item, None, AssignmentStatus.HELD) for item in chosen])
            self._event(conn, info.id, "claimed", pid, at=now, items=len(chosen), source=source,
                        warm=account_row is not None)
            # items given back before (released, excluded, reopened or withdrawn copies)
            reallocated = [item for item, *given_back in open_rows if any(given_back)]
            if reallocated:  # one statement for them all (a busy study re-takes up to Q released slots)
                conn.execute(insert(t.events), [
                    {"collection_id": info.id, "at": now, "kind": "reallocated", "participant_id": pid,
                     "item_id": item, "detail": None} for item in reallocated])
            # the new participant as written (no read back: a claim is on every arrival's path)
            state = ParticipantState(
                id=pid, username=account.username, account_id=account_id, account_state=account.state,
                source=source, status=ParticipantStatus.ACTIVE, claimed_at=now, last_activity_at=now,
                records_logged=False, drop_requested=False, dataset_id=dataset_id,
                assignments=tuple(Assignment(item, n, AssignmentStatus.HELD,
                                             None if swapped is None else bool(swapped), None)
                                  for n, (item, swapped) in enumerate(batch)))
            return Claimed(state, new=True)

    def last_claim_at(self, cid: int) -> float | None:
        """When the collection's latest participant claimed (None: nobody yet)."""
        p = t.participants.c
        with self._read() as conn:
            return conn.execute(select(func.max(p.claimed_at)).where(p.collection_id == cid)).scalar()

    def _display_orders(self, conn: Connection, info: CollectionInfo, items: Sequence[str],
                        key_hash: str) -> dict[str, bool]:
        """Counterbalanced A/B order per rating: each item gets the order fewer of its current
        (held or submitted) raters saw; a tie is a seeded coin. So the R raters of a pair see
        it ceil(R/2) one way and floor(R/2) the other - as balanced as R allows."""
        seen: dict[str, list[int]] = {}  # item -> [raters who saw it as is, raters who saw it swapped]
        for item, swapped, n in conn.execute(_SEEN_ORDERS, {"cid": info.id, "items": list(items)}):
            seen.setdefault(item, [0, 0])[bool(swapped)] += n
        orders = {}
        for item in items:
            as_is, swapped = seen.get(item, _UNSEEN)
            if as_is != swapped:
                orders[item] = swapped < as_is
            else:
                orders[item] = int(_tiebreak(info.seed, "order", item, key_hash)[:8], 16) % 2 == 1
        return orders

    def check(self, cid: int) -> list[str]:
        """Invariant violations (empty when consistent): no item over R copies in flight or
        done, no participant holding an item twice (the schema forbids it too), and the
        per-item counts claims read (``item_counts``) equal a recount of the assignment rows."""
        info = self._info(cid)
        have = self.item_counts(cid)
        problems = []
        for item in self.items(cid):
            n = have.submitted[item] + have.held[item]
            if n > info.copies:
                problems.append(f"item {item} has {n} copies in flight or done (R = {info.copies})")
        with self._read() as conn:
            problems += counts.drift(conn, cid)
        return problems

    def recount(self, cid: int) -> list[str]:
        """Rebuild the collection's per-item counts from its assignment rows (a repair: every
        write keeps them in step); returns the differences it found before (empty: none)."""
        with self._write(cid) as conn:
            problems = counts.drift(conn, cid)
            if problems:
                counts.rebuild(conn, cid)
                self._event(conn, cid, "counts_rebuilt", differences=len(problems))
            return problems


# The claim's statements, built once: a claim is on every arrival's path, and building a
# statement (and its cache key) costs more than SQLite takes to run it.
_p, _a, _c = t.participants.c, t.accounts.c, t.item_counts.c
_FIND_PARTICIPANT = select(_p.id, _p.status, _p.withdrawn_at).where(
    _p.collection_id == bindparam("cid"), _p.key_hash == bindparam("key_hash"))
_READY_ACCOUNT = (select(_a.id, _a.username, _a.dataset_id)
                  .where(_a.collection_id == bindparam("cid"), _a.state == AccountState.READY,
                         ~exists().where(_p.account_id == _a.id))
                  .order_by(_a.id).limit(1))
_BIND_ACCOUNT = update(t.accounts).where(_a.id == bindparam("aid")).values(state=AccountState.BOUND)
_INSERT_PARTICIPANT = insert(t.participants)
_UNSEEN = (0, 0)
_ASSIGNMENT_COLUMNS = ("collection_id", "participant_id", "item_id", "position", "status", "swapped", "assigned_at")
_NEXT_LEVEL = (select(_c.taken).where(_c.collection_id == bindparam("cid"), _c.taken > bindparam("above"),
                                      _c.taken < bindparam("copies"))
               .order_by(_c.taken).limit(1))
"""The least-taken level above ``above`` with copies still missing."""
_AT_LEVEL = select(_c.item_id, _c.released, _c.excluded, _c.reopened, _c.withdrawn).where(
    _c.collection_id == bindparam("cid"), _c.taken == bindparam("level"))
_AT_LEVEL_FROM = _AT_LEVEL.where(_c.rank >= bindparam("start")).order_by(_c.rank, _c.item_id).limit(bindparam("need"))
_AT_LEVEL_BEFORE = _AT_LEVEL.where(_c.rank < bindparam("start")).order_by(_c.rank, _c.item_id).limit(bindparam("need"))
"""A level's items from the participant's point on the rank circle, then from its start (wrapping round)."""


@functools.lru_cache(maxsize=4)
def _insert_assignments_sql(paramstyle: str) -> str:
    """A claim's assignments as the driver's own executemany (60 rows: SQLAlchemy's per-row
    parameter processing cost more than SQLite's inserts), in the driver's paramstyle (SQLite's
    ``qmark``, psycopg's ``%s``)."""
    mark = "?" if paramstyle == "qmark" else "%s"
    return (f"INSERT INTO assignments ({', '.join(_ASSIGNMENT_COLUMNS)}) "
            f"VALUES ({', '.join([mark] * len(_ASSIGNMENT_COLUMNS))})")


_SEEN_ORDERS = (select(t.assignments.c.item_id, t.assignments.c.swapped, func.count())
                .where(t.assignments.c.collection_id == bindparam("cid"),
                       t.assignments.c.item_id.in_(bindparam("items", expanding=True)),
                       t.assignments.c.status.in_(IN_FLIGHT_OR_DONE))
                .group_by(t.assignments.c.item_id, t.assignments.c.swapped))
"""How often each of a claim's items was shown each way (built once: it runs on every claim)."""


def _open_items(conn: Connection, info: CollectionInfo, key_hash: str) -> list[Row[Any]]:
    """The participant's Q items (with their counts before the claim), read from the index of
    ``item_counts``: the least-taken level (most copies missing) first; within a level, the
    items in ``rank`` order from the participant's own starting point on the rank circle
    (a seeded hash of the collection's seed and their key), wrapping round - so simultaneous
    arrivals start at different points and spread out. Only levels below R; a few index
    range reads of at most Q rows each, however many items the collection has."""
    start = counts.rank(info.seed, key_hash)
    chosen: list[Row[Any]] = []
    level = -1
    while len(chosen) < info.per_participant:
        level = conn.execute(_NEXT_LEVEL, {"cid": info.id, "above": level, "copies": info.copies}).scalar()
        if level is None:
            break
        for part in (_AT_LEVEL_FROM, _AT_LEVEL_BEFORE):
            need = info.per_participant - len(chosen)
            if need:
                chosen += conn.execute(part, {"cid": info.id, "level": level, "start": start, "need": need}).all()
    return chosen


def _tiebreak(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()


def _like_literal(text: str) -> str:
    """``text`` for a LIKE pattern, its wildcards taken literally (escape character: backslash)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
