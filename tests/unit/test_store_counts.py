"""The per-item counts a claim reads (``item_counts``, crowdpref/store/counts.py): kept equal to a
recount of the assignment rows by every write that changes an assignment (claims with quality
checks, submissions and completion, two-phase releases - which returns, time-outs and drops
go through -, exclusion, reopening, withdrawal, items added later), checked after every step
of random operation sequences; the claim's order (least-taken level first, then the rank
circle from the participant's own starting point) against a reference model; the repair
(``Store.recount``); and the migration 0009, which builds the counts of an existing store from
its rows, also after a process was killed in the middle of it.

The operation driver is shared with tests/integration/test_store_postgres.py (PostgreSQL)."""

from __future__ import annotations

import itertools
import os
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, text

from crowdpref.store import Claimed, CollectionInfo, Full, Store, StoreError, counts
from crowdpref.store import schema as t

REPO = Path(__file__).resolve().parents[2]


def _clock() -> Any:
    ticks = itertools.count(1_000_000)
    return lambda: float(next(ticks))


def _in_step(store: Store, cid: int) -> None:
    """The stored counts equal a recount from the assignment rows, and every item has its row."""
    with store.engine.connect() as conn:
        problems = counts.drift(conn, cid)
        have = counts.stored(conn, cid)
        redone = counts.recount(conn, cid)
    assert problems == [], problems
    assert set(have) == set(store.items(cid))
    for item, row in have.items():
        assert {k: v for k, v in row.items() if k not in ("taken", "rank")} == redone.get(item, {})
        assert row.get("taken", 0) == redone.get(item, {}).get("held", 0) + redone.get(item, {}).get("submitted", 0)


def _checks(chosen: Any, orders: Any, key_hash: str) -> list[tuple[str, bool | None]]:
    return [(f"check-{key_hash[:6]}", None)]  # a quality check: an assignment, not an item


def run_count_operations(store: Store, n_items: int, copies: int, per_participant: int, seed: int,
                         ops: list[tuple[Any, ...]]) -> None:
    """Drive ``ops`` on a fresh collection; after every step the counts equal a recount."""
    study = f"counts-{uuid.uuid4().hex[:12]}"
    items = [f"item-{i:03d}" for i in range(n_items)]
    info = store.collection(study, "study2", items, copies=copies, per_participant=per_participant, seed=seed,
                            username_prefix=study, counterbalance=True)
    keys: list[str] = []
    at = itertools.count(1)
    _in_step(store, info.id)
    for op in ops:
        kind = op[0]
        people = store.participants(info.id)
        person = people[op[1] % len(people)] if people and len(op) > 1 and isinstance(op[1], int) else None
        # exclusion and withdrawal act on finished participants who have not withdrawn
        finished = [p for p in people if p.status in ("complete", "released") and p.withdrawn_at is None]
        if kind == "claim":
            keys.append(f"k{len(keys)}-{uuid.uuid4().hex[:6]}")
            result = store.claim(info, keys[-1], "simulated", checks=_checks if op[1] else None)
            event(f"claim: {result.status}")
        elif kind == "claim_again" and keys:
            store.claim(info, keys[op[1] % len(keys)], "simulated")  # the same work again, or refused: no change
        elif kind == "submit" and person is not None:
            held = person.held
            chosen = [item for n, item in enumerate(held) if op[2] >> n & 1]
            store.record_progress(info.id, person.id, {item: float(next(at)) for item in chosen}, None)
        elif kind == "release" and person is not None:
            if store.begin_release(info.id, person.id, "returned") and op[2]:
                store.finish_release(info.id, person.id)
        elif kind == "finish" and person is not None:
            store.finish_release(info.id, person.id)
        elif kind == "exclude" and finished:
            person = finished[op[1] % len(finished)]
            event(f"excluded {len(store.exclude(info.id, person.id, list(person.submitted), 'failed checks'))}")
        elif kind == "reopen":
            answered = sorted({a.item_id for p in people for a in p.assignments
                               if a.status == "submitted" and a.item_id in items})
            if answered:
                item = answered[op[1] % len(answered)]
                holders = sorted(p.username for p in people if p.submitted.get(item) is not None
                                 and any(a.item_id == item and a.status == "submitted" for a in p.assignments))
                store.reopen(info.id, item, "unusable", None if op[2] else holders[:1])
                event("reopened")
        elif kind == "withdraw" and finished:
            person = finished[op[1] % len(finished)]
            withdrawn = store.withdraw(info.id, person.id, "withdrew")
            event(f"withdrawn, {'some' if withdrawn else 'no'} counted answers")
        elif kind == "withdraw" and person is not None and person.status == "active":
            with pytest.raises(StoreError):
                store.withdraw(info.id, person.id, "withdrew")
        elif kind == "add_items":
            items += [f"late-{uuid.uuid4().hex[:6]}" for _ in range(op[1])]
            info = store.collection(study, "study2", items, copies=copies, per_participant=per_participant,
                                    seed=seed, username_prefix=study, counterbalance=True)
        _in_step(store, info.id)
        assert store.check(info.id) == []


_I = st.integers(0, 1000)
COUNT_OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("claim"), st.booleans()),
    st.tuples(st.just("claim"), st.booleans()),
    st.tuples(st.just("claim_again"), _I),
    st.tuples(st.just("submit"), _I, st.integers(0, 2**6 - 1)),
    st.tuples(st.just("submit"), _I, st.just(2**6 - 1)),
    st.tuples(st.just("release"), _I, st.booleans()),
    st.tuples(st.just("finish"), _I),
    st.tuples(st.just("exclude"), _I),
    st.tuples(st.just("reopen"), _I, st.booleans()),
    st.tuples(st.just("withdraw"), _I),
    st.tuples(st.just("add_items"), st.integers(1, 3)),
), min_size=5, max_size=30)
COUNT_SHAPE = dict(n_items=st.integers(1, 8), copies=st.integers(1, 3), per_participant=st.integers(1, 4),
                   seed=st.integers(0, 2**31 - 1))


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('counts') / 'store.sqlite'}", clock=_clock())
    yield store
    store.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(ops=COUNT_OPERATIONS, **COUNT_SHAPE)
def test_the_counts_equal_a_recount_after_every_operation(shared_store: Store, ops: list[tuple[Any, ...]],
                                                          n_items: int, copies: int, per_participant: int,
                                                          seed: int) -> None:
    run_count_operations(shared_store, n_items, copies, per_participant, seed, ops)


def test_every_kind_of_write_moves_the_counts(tmp_path: Path) -> None:
    """One deterministic walk through every path, with the counts each leaves."""
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}", clock=_clock())
    info = store.collection("walk", "study1", ["a", "b"], copies=2, per_participant=2, seed=1, username_prefix="w")

    def row(item: str) -> dict[str, int]:
        with store.engine.connect() as conn:
            return {k: v for k, v in counts.stored(conn, info.id)[item].items() if k != "rank"}

    first = store.claim(info, "one", "invite", checks=_checks)
    second = store.claim(info, "two", "invite")
    assert isinstance(first, Claimed) and isinstance(second, Claimed)
    assert row("a") == row("b") == {"held": 2, "taken": 2}  # the quality check has no row and changes none
    store.record_progress(info.id, first.participant.id, {"a": 1.0, "b": 1.0, first.participant.items[-1]: 1.0}, None)
    assert row("a") == {"held": 1, "submitted": 1, "taken": 2}
    assert store.begin_release(info.id, second.participant.id, "timed out")
    assert row("a") == {"held": 1, "submitted": 1, "taken": 2}  # releasing: still in flight
    store.finish_release(info.id, second.participant.id)
    assert row("a") == {"released": 1, "submitted": 1, "taken": 1}
    assert store.exclude(info.id, first.participant.id, ["a"], "failed checks") == ["a"]
    assert row("a") == {"released": 1, "excluded": 1}
    assert row("b") == {"released": 1, "submitted": 1, "taken": 1}
    assert store.reopen(info.id, "b", "lost answer") == ["w-0001"]
    assert row("b") == {"released": 1, "reopened": 1}
    assert store.withdraw(info.id, first.participant.id, "asked") == []
    assert row("a") == {"released": 1, "withdrawn": 1} and row("b") == {"released": 1, "withdrawn": 1}
    third = store.claim(info, "three", "invite")
    assert isinstance(third, Claimed) and sorted(third.participant.items) == ["a", "b"]
    assert row("a") == {"released": 1, "withdrawn": 1, "held": 1, "taken": 1}
    _in_step(store, info.id)


def _reference(store: Store, info: CollectionInfo, key: str) -> list[str]:
    """The claim's order as the docstring states it, computed from a recount: least taken first,
    then each item's rank read round the circle from the participant's starting point."""
    with store.engine.connect() as conn:
        counted = counts.recount(conn, info.id)
    start = counts.rank(info.seed, store.key_hash(key))
    taken = {item: counted.get(item, {}).get("held", 0) + counted.get(item, {}).get("submitted", 0)
             for item in store.items(info.id)}
    open_items = [item for item, n in taken.items() if n < info.copies]
    order = sorted(open_items, key=lambda item: (taken[item], (counts.rank(item) - start) % counts.RANK_SPACE, item))
    return order[: info.per_participant]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n_items=st.integers(1, 40), copies=st.integers(1, 3), per_participant=st.integers(1, 12),
       seed=st.integers(0, 2**31 - 1), releases=st.lists(st.integers(0, 100), max_size=4),
       claims=st.integers(1, 12))
def test_a_claim_takes_the_least_taken_items_round_the_rank_circle(
        shared_store: Store, n_items: int, copies: int, per_participant: int, seed: int, releases: list[int],
        claims: int) -> None:
    info = shared_store.collection(f"order-{uuid.uuid4().hex[:10]}", "study1", [f"i{n}" for n in range(n_items)],
                                   copies=copies, per_participant=per_participant, seed=seed, username_prefix="o")
    for n in range(claims):
        if releases and n == releases[0] % claims:
            active = shared_store.participants(info.id, statuses=["active"])
            if active:
                assert shared_store.begin_release(info.id, active[0].id, "returned")
                shared_store.finish_release(info.id, active[0].id)
            releases = releases[1:]
        key = f"order-key-{n}"
        expected = _reference(shared_store, info, key)
        result = shared_store.claim(info, key, "simulated")
        if not expected:
            assert isinstance(result, Full)
        else:
            assert isinstance(result, Claimed) and result.participant.items == expected


def test_different_people_start_at_different_points_and_the_same_person_at_the_same(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    Store(url).set_meta("key_salt", "a-fixed-salt")  # the starting points derive from the salted keys
    store = Store(url)
    items = [f"pair-{n:03d}" for n in range(300)]
    first_picks = {}
    for key in [f"person-{n}" for n in range(20)]:  # each on a fresh collection: the same state for all
        info = store.collection(f"spread-{key}", "study2", items, copies=3, per_participant=10, seed=5,
                                username_prefix=key)
        first_picks[key] = tuple(store.claim(info, key, "simulated").participant.items)  # type: ignore[union-attr]
    assert len(set(first_picks.values())) >= 18  # not one fixed order handed to everyone
    for picks in first_picks.values():  # a rank does not follow the id: a batch is not a run of neighbouring ids
        numbers = sorted(int(item.split("-")[1]) for item in picks)
        assert numbers[-1] - numbers[0] > 100, picks
    again = store.collection("spread-again", "study2", items, copies=3, per_participant=10, seed=5,
                             username_prefix="again")
    assert tuple(store.claim(again, "person-0", "simulated").participant.items) == first_picks["person-0"]  # type: ignore[union-attr]


def test_drifted_counts_are_reported_by_check_and_rebuilt_by_recount(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    info = store.collection("drift", "study1", ["a", "b", "c"], copies=1, per_participant=1, seed=0,
                            username_prefix="d")
    claimed = store.claim(info, "k", "invite")
    assert isinstance(claimed, Claimed)
    item = claimed.participant.items[0]
    with store.engine.begin() as conn:  # damage: the counts say nobody holds the item
        conn.execute(t.item_counts.update().where(t.item_counts.c.item_id == item).values(held=0, taken=0))
    problems = store.check(info.id)
    assert len(problems) == 1 and item in problems[0] and "\n" not in problems[0]
    assert store.recount(info.id) == problems
    assert store.check(info.id) == [] and store.recount(info.id) == []
    _in_step(store, info.id)
    assert [e["kind"] for e in store.events(info.id, ["counts_rebuilt"])] == ["counts_rebuilt"]
    store.claim(info, "k2", "invite")
    store.claim(info, "k3", "invite")
    assert isinstance(store.claim(info, "k4", "invite"), Full)  # the held item was not handed out twice


# --- the migration 0009 ---------------------------------------------------------------------------------


def populated_store(url: str) -> tuple[dict[int, dict[str, dict[str, int]]], list[int]]:
    """A store with every kind of assignment in two collections; returns its counts per collection."""
    store = Store(url, clock=_clock())
    cids = []
    for name in ("one", "two"):
        info = store.collection(name, "study2", [f"{name}-{n}" for n in range(30)], copies=2, per_participant=6,
                                seed=3, username_prefix=name, counterbalance=True)
        cids.append(info.id)
        people = [store.claim(info, f"{name}-{n}", "simulated", checks=_checks) for n in range(8)]
        ps = [p.participant for p in people if isinstance(p, Claimed)]
        for p in ps[:5]:
            store.record_progress(info.id, p.id, {item: 1.0 for item in p.items}, None)
        store.begin_release(info.id, ps[5].id, "returned")
        store.finish_release(info.id, ps[5].id)
        store.exclude(info.id, ps[0].id, list(ps[0].items), "failed checks")
        store.reopen(info.id, ps[1].items[0], "unusable")
        store.withdraw(info.id, ps[2].id, "asked")
        store.claim(info, f"{name}-late", "simulated")
    with store.engine.connect() as conn:
        expected = {cid: counts.stored(conn, cid) for cid in cids}
        for cid in cids:
            assert counts.drift(conn, cid) == []
    store.close()
    return expected, cids


def as_of_0008(url: str) -> None:
    """What crowdpref at revision 0008 left: the same rows, no counts table."""
    store = Store(url)
    with store.engine.begin() as conn:
        conn.execute(text("DROP TABLE item_counts"))
        conn.execute(text("UPDATE alembic_version SET version_num = '0008'"))
    store.close()


def migrated_counts(url: str, cids: list[int]) -> dict[int, dict[str, dict[str, int]]]:
    store = Store(url)
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0014"
        result = {cid: counts.stored(conn, cid) for cid in cids}
        for cid in cids:
            assert counts.drift(conn, cid) == []
    store.close()
    return result


KILL_AT_COUNTS = """
import os, signal, sys
from sqlalchemy import event
from sqlalchemy.engine import Engine

@event.listens_for(Engine, "after_cursor_execute")
def _die(conn, cursor, statement, *args):
    if statement.lstrip().upper().startswith("INSERT INTO ITEM_COUNTS"):
        os.kill(os.getpid(), signal.SIGKILL)  # killed in the middle of the migration

from crowdpref.store import Store
Store(sys.argv[1])
"""


def kill_mid_migration(url: str) -> None:
    child = subprocess.run([sys.executable, "-c", KILL_AT_COUNTS, url], cwd=REPO, capture_output=True, text=True,
                           timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stderr[-2000:])


def test_the_migration_builds_the_counts_of_an_existing_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    expected, cids = populated_store(url)
    assert any(row.get("withdrawn") for row in expected[cids[0]].values())  # every status is in there
    assert any(row.get("reopened") for row in expected[cids[0]].values())
    as_of_0008(url)
    assert migrated_counts(url, cids) == expected


def test_a_store_killed_mid_migration_is_migrated_by_the_next_open(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    expected, cids = populated_store(url)
    as_of_0008(url)
    kill_mid_migration(url)
    with sqlite3.connect(tmp_path / "store.sqlite") as raw:  # rolled back: still 0008, no half-built table
        assert raw.execute("SELECT version_num FROM alembic_version").fetchone() == ("0008",)
        assert raw.execute("SELECT name FROM sqlite_master WHERE name = 'item_counts'").fetchall() == []
    assert migrated_counts(url, cids) == expected


def test_a_half_built_counts_table_left_at_0008_is_built_anew(tmp_path: Path) -> None:
    """A run that did not roll back its DDL (a table with some rows, the version still 0008)."""
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    expected, cids = populated_store(url)
    as_of_0008(url)
    engine = create_engine(url)  # the raw database, without migrating it
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE item_counts (collection_id INTEGER, item_id VARCHAR(100), rank INTEGER)"))
        conn.execute(text("INSERT INTO item_counts VALUES (1, 'one-0', 5)"))
    engine.dispose()
    assert migrated_counts(url, cids) == expected


def _claim_work(tmp_path: Path, n_items: int) -> int:
    """SQLite virtual-machine steps (in units of 100) one claim of 20 items runs, mid-study."""
    from sqlalchemy import event as sa_event

    store = Store(f"sqlite:///{tmp_path / f'work-{n_items}.sqlite'}")
    info = store.collection("work", "study2", [f"pair-{n:05d}" for n in range(n_items)], copies=3, per_participant=20,
                            seed=2, username_prefix="work", counterbalance=True)
    for n in range(5):
        store.claim(info, f"before-{n}", "simulated")
    steps = [0]
    store.engine.dispose()  # the store keeps its connections open: the measured claim opens a new one

    @sa_event.listens_for(store.engine, "connect")
    def _count(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.set_progress_handler(lambda: steps.__setitem__(0, steps[0] + 1) or 0, 100)

    assert isinstance(store.claim(info, "measured", "simulated"), Claimed)
    store.close()
    return steps[0]


def test_a_claims_work_does_not_grow_with_the_number_of_items(tmp_path: Path) -> None:
    """Counted in database steps, not time: 20 times the items, about the same work (a claim
    that read every item did 8 times as much in a trial)."""
    small, large = _claim_work(tmp_path, 500), _claim_work(tmp_path, 10_000)
    assert small > 0
    assert large < 1.5 * small, (small, large)
