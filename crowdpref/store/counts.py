"""Per-item counts a claim reads in order: the ``item_counts`` table, kept in step with
``assignments``.

Every write that inserts an assignment or changes its status calls :func:`shift` in the same
transaction with the moves it made (item, old status or None, new status), so the row of each
item of the collection holds how many of its assignments are in each status, and ``taken``
(held + submitted: the copies that count towards R). Quality checks are assignments too, but
not items of the collection: they have no row, and their moves change nothing.

A claim then reads the open items (``taken < R``) from the index ``(collection_id, taken,
rank, item_id)``: the least-taken level first, each level from a point on the ``rank`` circle
the participant's key picks (:func:`rank`) - a few index range reads of Q rows, whatever the
size of the collection. A retired item (:data:`RETIRED_EVENT`) has no row, so no claim
reads it. :func:`recount` counts again from the assignment rows; :func:`drift`
compares the two and :func:`rebuild` repairs a collection's rows from the assignments.
"""

from __future__ import annotations

import functools
import hashlib
from collections import defaultdict
from collections.abc import Iterable, Sequence

from sqlalchemy import Connection, Update, bindparam, delete, func, insert, select, update

from crowdpref.store import schema as t
from crowdpref.store.statuses import IN_FLIGHT_OR_DONE, AssignmentStatus

STATUSES: tuple[str, ...] = tuple(str(status) for status in AssignmentStatus if status != AssignmentStatus.RETIRED)
"""The count columns: one per assignment status, named as the status (``retired`` has none: a
retired item has no count row)."""
RETIRED_EVENT = "item_retired"
"""The event that retires an item of a collection (:meth:`crowdpref.store.Store.retire_items`):
its count row is deleted, so no claim reads it again."""
RANK_SPACE = 2**31
"""Ranks (and a claim's starting point) lie in 0 .. RANK_SPACE - 1 (fits PostgreSQL's integer)."""


def rank(*parts: object) -> int:
    """A stable hash of ``parts`` in 0 .. 2**31 - 1 (sha256; the migration 0009 computes the same)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()
    return int(digest[:8], 16) >> 1


Move = tuple[str, "str | None", str]
"""(item id, status before or None for a new assignment, status after)."""


def shift(conn: Connection, cid: int, moves: Iterable[Move]) -> None:
    """Apply assignment moves to the counts of collection ``cid`` (one UPDATE per distinct
    change; an item without a row - a quality check - is left alone)."""
    moves = list(moves)
    groups: dict[tuple[tuple[str, int], ...], list[str]] = defaultdict(list)
    if len({item for item, _, _ in moves}) == len(moves):  # each item moves once (a claim, a release...)
        for item, before, after in moves:
            key = _change(before, after)
            if key:
                groups[key].append(item)
    else:  # an item moves more than once: add its moves up first
        deltas: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for item, before, after in moves:
            for column, n in _change(before, after):
                deltas[item][column] += n
        for item, delta in deltas.items():
            key = tuple(sorted((column, n) for column, n in delta.items() if n))
            if key:
                groups[key].append(item)
    for key, items in groups.items():
        conn.execute(_shift_statement(key), {"cid": cid, "items": items})


@functools.lru_cache(maxsize=64)
def _change(before: str | None, after: str) -> tuple[tuple[str, int], ...]:
    """What one assignment's move does to its item's counts: (column, +1/-1) pairs, sorted."""
    delta: dict[str, int] = defaultdict(int)
    if before == after:
        return ()
    if before is not None:
        delta[before] -= 1
        if before in IN_FLIGHT_OR_DONE:
            delta["taken"] -= 1
    delta[after] += 1
    if after in IN_FLIGHT_OR_DONE:
        delta["taken"] += 1
    return tuple(sorted((str(column), n) for column, n in delta.items() if n))


@functools.lru_cache(maxsize=256)
def _shift_statement(key: tuple[tuple[str, int], ...]) -> Update:
    """The UPDATE for one kind of change (the same few recur: a claim, a submit, a release),
    built once: the items are one expanding parameter, so SQLAlchemy neither rebuilds nor
    re-keys a 60-value IN on every claim."""
    c = t.item_counts.c
    return (update(t.item_counts).where(c.collection_id == bindparam("cid"),
                                        c.item_id.in_(bindparam("items", expanding=True)))
            .values({column: c[column] + n for column, n in key}))


def retired(conn: Connection, cid: int) -> set[str]:
    """The collection's retired items (an ``item_retired`` event each)."""
    e = t.events.c
    return set(conn.execute(select(e.item_id).where(e.collection_id == cid, e.kind == RETIRED_EVENT,
                                                    e.item_id.is_not(None))).scalars())


def live_items(conn: Connection, cid: int) -> list[str]:
    """The collection's items in order, without the retired ones."""
    gone = retired(conn, cid)
    return [item for item in conn.execute(select(t.items.c.item_id).where(t.items.c.collection_id == cid)
                                          .order_by(t.items.c.ordinal)).scalars() if item not in gone]


def add_items(conn: Connection, cid: int, items: Sequence[str]) -> None:
    """Rows for items new to the collection, counted from any assignments they already have."""
    if not items:
        return
    # a few items: count just those; many (a new collection, a rebuild): one pass over the collection
    counted = recount(conn, cid, items if len(items) <= 500 else None, only_items=False)
    # in rank order: a claim takes a run of neighbouring ranks, so the rows it updates share pages
    rows = sorted((_row(cid, item, counted.get(item, {})) for item in items), key=lambda row: row["rank"])
    conn.execute(insert(t.item_counts), rows)


def recount(conn: Connection, cid: int, items: Sequence[str] | None = None, *,
            only_items: bool = True) -> dict[str, dict[str, int]]:
    """item -> {status: n} counted from the assignment rows (items of the collection only,
    unless ``only_items`` is False; every item when ``items`` is None)."""
    s = t.assignments.c
    query = select(s.item_id, s.status, func.count()).where(s.collection_id == cid).group_by(s.item_id, s.status)
    if items is not None:
        query = query.where(s.item_id.in_(list(items)))
    if only_items:
        query = query.where(s.item_id.in_(select(t.items.c.item_id).where(t.items.c.collection_id == cid)))
    counted: dict[str, dict[str, int]] = defaultdict(dict)
    for item, status, n in conn.execute(query):
        counted[item][str(status)] = n
    return counted


def stored(conn: Connection, cid: int) -> dict[str, dict[str, int]]:
    """item -> {column: n} (the counts, ``taken`` and ``rank``) as the ``item_counts`` rows hold
    them (zeros left out)."""
    c = t.item_counts.c
    rows = conn.execute(select(t.item_counts).where(c.collection_id == cid)).all()
    return {row.item_id: {column: getattr(row, column) for column in (*STATUSES, "taken", "rank") if getattr(row, column)}
            for row in rows}


def drift(conn: Connection, cid: int) -> list[str]:
    """Where the counts differ from a recount of the assignment rows (empty when in step)."""
    have = stored(conn, cid)
    items = live_items(conn, cid)  # a retired item has no count row
    counted = recount(conn, cid)
    problems = []
    for item in items:
        want = {k: v for k, v in _row(cid, item, counted.get(item, {})).items()
                if k in (*STATUSES, "taken", "rank") and v}
        if item not in have:
            problems.append(f"item {item} has no count row")
        elif have[item] != want:
            problems.append(f"item {item} counts {have[item]} but its assignments are {want}")
    problems += [f"count row for {item}, which is not an item of the collection" for item in sorted(set(have) - set(items))]
    return problems


def rebuild(conn: Connection, cid: int) -> None:
    """Replace the collection's count rows by a recount from its items and assignments."""
    conn.execute(delete(t.item_counts).where(t.item_counts.c.collection_id == cid))
    add_items(conn, cid, live_items(conn, cid))


def _row(cid: int, item: str, counts: dict[str, int]) -> dict[str, object]:
    row: dict[str, object] = {"collection_id": cid, "item_id": item, "rank": rank(item)}
    row.update({status: counts.get(status, 0) for status in STATUSES})
    row["taken"] = sum(counts.get(status, 0) for status in IN_FLIGHT_OR_DONE)
    return row
