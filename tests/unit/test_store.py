"""The study store (crowdpref/store/) on SQLite: the allocation invariants as hypothesis
properties over random sequences of claims, repeat claims, submissions, releases and drop
requests; counterbalanced display order and what it does to position bias; exclusion; keys kept
only as salted hashes; an owner-only file; no lost update between two processes; the Alembic
schema; and 50 claims at once from several processes (with threads inside each).

The operation driver, the invariant checks and the multi-process claim harness are shared with
tests/integration/test_store_postgres.py, which runs the same on PostgreSQL."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import queue
import sqlite3
import threading
import traceback
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from crowdpref.store import (
    ACTIVE,
    COMPLETE,
    HELD,
    RELEASED,
    RELEASING,
    SUBMITTED,
    Claimed,
    CollectionInfo,
    Full,
    Refused,
    Store,
    StoreError,
)

# --- shared: a model-checked run of random operations ----------------------------------------------


def _clock() -> Any:
    """A deterministic, strictly increasing clock (one tick per reading)."""
    ticks = itertools.count(1_000_000)
    return lambda: float(next(ticks))


def _new_collection(store: Store, n_items: int, copies: int, per_participant: int, *, seed: int = 0,
                    counterbalance: bool = False) -> CollectionInfo:
    """A fresh collection (unique study name), so examples can share one store/database."""
    study = f"study-{uuid.uuid4().hex[:12]}"
    items = [f"item-{i:03d}" for i in range(n_items)]
    return store.collection(study, "study1", items, copies=copies, per_participant=per_participant, seed=seed,
                            username_prefix=study, counterbalance=counterbalance)


def _missing(store: Store, info: CollectionInfo) -> dict[str, int]:
    """Copies still missing per item (R - held - submitted)."""
    counts = store.item_counts(info.id)
    return {item: info.copies - counts.held[item] - counts.submitted[item] for item in store.items(info.id)}


def _check_invariants(store: Store, info: CollectionInfo) -> None:
    """What must hold after every step, read back from the store."""
    counts = store.item_counts(info.id)
    items = store.items(info.id)
    for item in items:
        in_flight_or_done = counts.held[item] + counts.submitted[item]
        assert in_flight_or_done <= info.copies, f"{item}: {in_flight_or_done} copies > R = {info.copies}"
    assert store.check(info.id) == []
    participants = store.participants(info.id)
    by_status: dict[str, Counter[str]] = {HELD: Counter(), SUBMITTED: Counter(), RELEASED: Counter()}
    for p in participants:
        assert len(p.items) == len(set(p.items)), f"participant {p.id} holds an item twice: {p.items}"
        assert len(p.items) <= info.per_participant
        assert set(p.items) <= set(items)
        for a in p.assignments:
            by_status[a.status][a.item_id] += 1
        if p.status == RELEASED:
            assert p.held == [], "a released participant still holds items"
        if p.status == COMPLETE:
            assert p.held == []
    # the counts the store allocates by are exactly the participants' assignments
    assert +by_status[HELD] == +counts.held
    assert +by_status[SUBMITTED] == +counts.submitted
    assert +by_status[RELEASED] == +counts.released
    assert len({p.username for p in participants}) == len(participants)
    assert len({p.account_id for p in participants}) == len(participants)


def _check_new_claim(result: Any, before: dict[str, int], info: CollectionInfo) -> None:
    """A first claim: Full exactly when no item misses a copy; otherwise min(Q, open items)
    items, each with a copy missing, taken most-missing first."""
    open_items = {item: gap for item, gap in before.items() if gap > 0}
    if not open_items:
        assert isinstance(result, Full), f"every item has R copies, but the claim answered {result}"
        return
    assert isinstance(result, Claimed), f"items still miss copies ({open_items}), but the claim answered {result}"
    assert result.new
    chosen = result.participant.items
    assert len(chosen) == len(set(chosen))
    assert len(chosen) == min(info.per_participant, len(open_items))
    assert set(chosen) <= set(open_items)
    assert all(a.status == HELD for a in result.participant.assignments)
    unchosen = [gap for item, gap in open_items.items() if item not in chosen]
    if unchosen:
        assert min(open_items[item] for item in chosen) >= max(unchosen), (
            f"chose {chosen} (missing {[open_items[i] for i in chosen]}) over items missing {max(unchosen)}")


@dataclass
class _Person:
    key: str
    pid: int
    username: str
    items: list[str]
    status: str = ACTIVE
    drop_requested: bool = False
    submitted: set[str] = field(default_factory=set)
    released: set[str] = field(default_factory=set)


def _run_operations(store: Store, info: CollectionInfo, ops: list[tuple[Any, ...]]) -> None:
    """Apply ``ops`` to a fresh collection, checking each result against a model of the
    participants and the invariants after every step."""
    people: list[_Person] = []
    n_keys = itertools.count()
    t = itertools.count(1)
    pending_released: list[str] = []  # slots given back since the last new claim

    def pick(idx: int) -> _Person | None:
        return people[idx % len(people)] if people else None

    _check_invariants(store, info)
    for op in ops:
        kind = op[0]
        if kind == "claim_new":
            key = f"key-{next(n_keys)}-{uuid.uuid4().hex[:6]}"
            before = _missing(store, info)
            result = store.claim(info, key, "simulated")
            _check_new_claim(result, before, info)
            event(f"new claim: {result.status}")
            if isinstance(result, Claimed):
                p = result.participant
                people.append(_Person(key, p.id, p.username, p.items))
                # slots released earlier are taken by the next claim when they are the ones missing most
                top = max(before.values())
                takeable = [i for i in pending_released if before[i] == top]
                if takeable and sum(gap == top for gap in before.values()) <= info.per_participant:
                    assert set(takeable) <= set(p.items), f"released {takeable} not re-taken by {p.items}"
                    event("released slots re-taken")
                pending_released = [i for i in pending_released if i not in p.items]
        elif kind == "claim_again":
            person = pick(op[1])
            if person is None:
                continue
            result = store.claim(info, person.key, "simulated")
            if person.status in (RELEASING, RELEASED):
                assert result == Refused("released")
                event("released key refused")
            else:
                assert isinstance(result, Claimed), result
                assert not result.new
                assert result.participant.id == person.pid
                assert result.participant.items == person.items  # the same work, in the same order
                assert result.participant.username == person.username
        elif kind == "submit":
            person = pick(op[1])
            if person is None:
                continue
            state = store.participant(info.id, person.username)
            held = state.held
            subset = [item for n, item in enumerate(held) if op[2] >> n & 1]
            at = float(next(t))
            marked = store.record_progress(info.id, person.pid, {item: at for item in subset}, last_activity=at)
            if person.status != ACTIVE:  # a release has begun: nothing more counts
                assert marked == 0
                continue
            assert marked == len(subset)
            person.submitted |= set(subset)
            if set(held) == set(subset):
                person.status = COMPLETE
        elif kind == "release":
            person = pick(op[1])
            if person is None:
                continue
            began = store.begin_release(info.id, person.pid, "test")
            assert began == (person.status == ACTIVE)
            if began:
                person.status = RELEASING
                if op[2]:
                    _finish(store, info, person, pending_released)
        elif kind == "finish":
            person = pick(op[1])
            if person is None:
                continue
            if person.status == RELEASING:
                _finish(store, info, person, pending_released)
            else:
                assert store.finish_release(info.id, person.pid) == []
        elif kind == "drop":
            person = pick(op[1])
            if person is None:
                continue
            if person.status == ACTIVE:
                store.request_drop(info.id, person.username)
                person.drop_requested = True
            else:
                with pytest.raises(StoreError):
                    store.request_drop(info.id, person.username)
        else:  # pragma: no cover
            raise AssertionError(kind)

        _check_invariants(store, info)
        states = {p.id: p for p in store.participants(info.id)}
        assert set(states) == {person.pid for person in people}
        for person in people:
            state = states[person.pid]
            assert state.status == person.status, (person.username, state.status, person.status)
            assert state.drop_requested == person.drop_requested
            assert state.items == person.items
            assert set(state.submitted) == person.submitted
            assert {a.item_id for a in state.assignments if a.status == RELEASED} == person.released


def _finish(store: Store, info: CollectionInfo, person: _Person, pending_released: list[str]) -> None:
    held = set(store.participant(info.id, person.username).held)
    released = store.finish_release(info.id, person.pid)
    assert set(released) == held == set(person.items) - person.submitted
    person.status = RELEASED
    person.released = held
    pending_released.extend(released)


_INDEX = st.integers(0, 1000)
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("claim_new")),
        st.tuples(st.just("claim_new")),
        st.tuples(st.just("claim_again"), _INDEX),
        st.tuples(st.just("submit"), _INDEX, st.integers(0, 2**6 - 1)),
        st.tuples(st.just("release"), _INDEX, st.booleans()),
        st.tuples(st.just("finish"), _INDEX),
        st.tuples(st.just("drop"), _INDEX),
    ),
    min_size=5,
    max_size=25,
)
SHAPE = dict(n_items=st.integers(1, 8), copies=st.integers(1, 3), per_participant=st.integers(1, 4),
             seed=st.integers(0, 2**31 - 1))


def _counterbalance_property(store: Store, n_items: int, copies: int, per_participant: int, seed: int,
                             bias: Fraction, release: list[int]) -> None:
    """Fill a counterbalanced collection, check each item's display orders are balanced and
    that raters biased toward the displayed A move each pair's mean by at most bias/R; then
    release some participants, refill, and check again."""
    info = _new_collection(store, n_items, copies, per_participant, seed=seed, counterbalance=True)
    keys = itertools.count()

    def fill() -> None:
        for _ in range(n_items * copies + 1):  # each claim takes a slot: Full within N x R + 1 claims
            if isinstance(store.claim(info, f"cb-{next(keys)}", "simulated"), Full):
                return
        raise AssertionError(f"no Full after {n_items * copies + 1} claims of {n_items} x R {copies} slots")

    def check_balanced() -> None:
        swapped: dict[str, list[bool]] = {item: [] for item in store.items(info.id)}
        for p in store.participants(info.id):
            for a in p.assignments:
                if a.status in (HELD, SUBMITTED):
                    assert a.swapped is not None
                    swapped[a.item_id].append(a.swapped)
        for item, orders in swapped.items():
            assert len(orders) == copies, f"{item} has {len(orders)} raters after the fill, R = {copies}"
            n_swapped = sum(orders)
            assert abs(n_swapped - (len(orders) - n_swapped)) <= 1, f"{item}: orders {orders}"
            shift = _mean_shift(orders, bias)
            assert abs(shift) <= bias / copies, f"{item}: mean moved {shift} by a bias of {bias}"
            if copies % 2 == 0:
                assert shift == 0

    fill()
    check_balanced()
    for n in sorted(set(release)):
        participants = store.participants(info.id, statuses=[ACTIVE])
        if participants:
            pid = participants[n % len(participants)].id
            assert store.begin_release(info.id, pid, "test")
            store.finish_release(info.id, pid)
    fill()
    check_balanced()


K = 7  # a 1..K rating scale; the biased ratings stay inside it (truth in 2..K-1, bias <= 1)


def _mean_shift(orders: list[bool | None], bias: Fraction) -> Fraction:
    """Mean (un-swapped) rating minus the truth, over raters who rate the displayed A option
    ``truth + bias`` higher than they mean; ``None`` (no counterbalancing) is shown as is."""
    truth = Fraction(K + 1, 2) + Fraction(1, 3)  # any truth inside the scale
    ratings = []
    for swapped in orders:
        if swapped:
            shown = (K + 1 - truth) + bias  # the pair shown B/A: the rater's view of the displayed A
            ratings.append(K + 1 - shown)  # back onto the pair's own A/B scale
        else:
            ratings.append(truth + bias)
        assert 1 <= ratings[-1] <= K
    return sum(ratings, Fraction(0)) / len(ratings) - truth


# --- shared: many processes claiming at once ------------------------------------------------------------


def _claim_process(url: str, study: str, n_items: int, copies: int, per_participant: int, keys: list[str],
                   threads: int, open_barrier: Any, claim_barrier: Any, out: Any) -> None:
    """One process: open its own Store (all processes at once), take the collection, then claim
    ``keys`` from ``threads`` threads that start together with every other process's threads."""
    results: list[tuple[Any, ...]] = []
    lock = threading.Lock()
    try:
        open_barrier.wait(timeout=120)
        store = Store(url)
        info = store.collection(study, "study1", [f"item-{i:03d}" for i in range(n_items)], copies=copies,
                                per_participant=per_participant, seed=11, username_prefix="cc")

        def run(my_keys: list[str]) -> None:
            claim_barrier.wait(timeout=120)
            for key in my_keys:
                try:
                    result = store.claim(info, key, "simulated")
                except Exception as exc:  # noqa: BLE001 - reported to the test
                    row: tuple[Any, ...] = ("error", key, f"{type(exc).__name__}: {exc}")
                else:
                    if isinstance(result, Claimed):
                        row = ("claimed", key, result.participant.id, tuple(result.participant.items),
                               result.participant.username)
                    else:
                        row = (result.status, key)
                with lock:
                    results.append(row)

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(run, [keys[n::threads] for n in range(threads)]))
        store.close()
        out.put(("done", os.getpid(), results))
    except BaseException:  # noqa: BLE001 - reported to the test
        out.put(("crashed", os.getpid(), traceback.format_exc()))


def _claim_at_once(url: str, *, n_items: int, copies: int, per_participant: int, processes: int = 5,
                   claims_per_process: int = 10, threads: int = 5) -> tuple[Store, CollectionInfo, list[tuple]]:
    """``processes`` x ``claims_per_process`` claims by distinct keys, all at once; returns a
    store, the collection and every claim's result."""
    # forkserver: one fresh process (no thread of this one) imports the store once; each claim
    # process is forked from it instead of importing everything again as a spawned one does
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    study = f"concurrent-{uuid.uuid4().hex[:8]}"
    open_barrier = ctx.Barrier(processes)
    claim_barrier = ctx.Barrier(processes * threads)
    out = ctx.Queue()
    workers = [
        ctx.Process(target=_claim_process, args=(
            url, study, n_items, copies, per_participant,
            [f"p{n}-k{k}" for k in range(claims_per_process)], threads, open_barrier, claim_barrier, out))
        for n in range(processes)
    ]
    for worker in workers:
        worker.start()
    reports = []
    try:
        for _ in workers:
            reports.append(out.get(timeout=240))
    except queue.Empty:
        pytest.fail(f"a claim process gave no answer within 240 s (got {len(reports)} of {len(workers)})")
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
                worker.join()
    crashed = [r for r in reports if r[0] == "crashed"]
    assert not crashed, "a claim process crashed:\n" + "\n".join(r[2] for r in crashed)
    assert all(worker.exitcode == 0 for worker in workers)
    results = [row for r in reports for row in r[2]]
    errors = [row for row in results if row[0] == "error"]
    assert not errors, f"claims failed: {errors[:5]}"
    assert len(results) == processes * claims_per_process
    store = Store(url)
    info = store.find_collection(study, "study1")
    assert info is not None
    return store, info, results


def _check_exactly_covered(store: Store, info: CollectionInfo, results: list[tuple], n_claims: int) -> None:
    """Every claim got Q items, every item has exactly R copies in flight, nobody twice."""
    claimed = [row for row in results if row[0] == "claimed"]
    assert len(claimed) == n_claims, Counter(row[0] for row in results)
    assert len({row[2] for row in claimed}) == n_claims  # distinct participants
    assert len({row[4] for row in claimed}) == n_claims  # distinct accounts
    assert all(len(row[3]) == info.per_participant == len(set(row[3])) for row in claimed)
    counts = store.item_counts(info.id)
    assert {item: counts.held[item] for item in store.items(info.id)} == {
        item: info.copies for item in store.items(info.id)}
    assert Counter(item for row in claimed for item in row[3]) == +counts.held
    assert len(store.participants(info.id)) == n_claims
    _check_invariants(store, info)
    assert len(store.events(info.id, ["claimed"])) == n_claims


def _check_over_subscribed(store: Store, info: CollectionInfo, results: list[tuple], slots: int) -> None:
    """More claims than slots: the slots are filled exactly once each, the rest are Full."""
    claimed = [row for row in results if row[0] == "claimed"]
    full = [row for row in results if row[0] == "full"]
    assert len(claimed) + len(full) == len(results)
    assert sum(len(row[3]) for row in claimed) == slots
    counts = store.item_counts(info.id)
    assert all(counts.held[item] == info.copies for item in store.items(info.id))
    assert sum(counts.held.values()) == slots
    assert len(store.participants(info.id)) == len(claimed)
    _check_invariants(store, info)
    assert isinstance(store.claim(info, "one-more", "simulated"), Full)


# --- SQLite -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """One SQLite store for the property tests; every example makes its own collection."""
    return Store(f"sqlite:///{tmp_path_factory.mktemp('store') / 'store.sqlite'}", clock=_clock())


def _url(tmp_path: Path, name: str = "store.sqlite") -> str:
    return f"sqlite:///{tmp_path / name}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPERATIONS, **SHAPE)
def test_allocation_invariants_hold_after_every_operation(shared_store: Store, ops: list[tuple[Any, ...]],
                                                          n_items: int, copies: int, per_participant: int,
                                                          seed: int) -> None:
    info = _new_collection(shared_store, n_items, copies, per_participant, seed=seed)
    _run_operations(shared_store, info, ops)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n_items=st.integers(1, 6), copies=st.integers(1, 5), per_participant=st.integers(1, 6),
       seed=st.integers(0, 2**31 - 1), bias=st.sampled_from([Fraction(1), Fraction(1, 2), Fraction(3, 4)]),
       release=st.lists(st.integers(0, 100), max_size=4))
def test_counterbalanced_order_keeps_position_bias_within_bias_over_r(
        shared_store: Store, n_items: int, copies: int, per_participant: int, seed: int, bias: Fraction,
        release: list[int]) -> None:
    _counterbalance_property(shared_store, n_items, copies, per_participant, seed, bias, release)


def test_without_counterbalancing_every_pair_carries_the_full_bias(shared_store: Store) -> None:
    info = _new_collection(shared_store, 4, 3, 4, counterbalance=False)
    for n in range(3):
        assert isinstance(shared_store.claim(info, f"same-order-{n}", "simulated"), Claimed)
    orders: dict[str, list[bool | None]] = {}
    for p in shared_store.participants(info.id):
        for item, swapped in p.swapped.items():
            assert swapped is None  # not counterbalanced: everyone sees the pair as stored
            orders.setdefault(item, []).append(swapped)
    assert len(orders) == 4
    for item_orders in orders.values():
        assert _mean_shift(item_orders, Fraction(1)) == Fraction(1)


def test_counterbalanced_orders_after_r_claims_and_a_release(shared_store: Store) -> None:
    """R claims that each cover every item: each pair ceil(R/2) one way, floor(R/2) the other;
    still so after a release and the re-claim of the released slots."""
    for copies in (2, 3, 4, 5):
        info = _new_collection(shared_store, 6, copies, 6, seed=copies, counterbalance=True)
        for n in range(copies):
            claimed = shared_store.claim(info, f"rater-{n}", "simulated")
            assert isinstance(claimed, Claimed) and len(claimed.participant.items) == 6

        def balance() -> dict[str, Counter[bool]]:
            seen: dict[str, Counter[bool]] = {}
            for p in shared_store.participants(info.id):
                for a in p.assignments:
                    if a.status in (HELD, SUBMITTED):
                        seen.setdefault(a.item_id, Counter())[bool(a.swapped)] += 1
            return seen

        for counter in balance().values():
            assert sum(counter.values()) == copies and abs(counter[True] - counter[False]) <= 1
        leaver = shared_store.participants(info.id)[0]
        assert shared_store.begin_release(info.id, leaver.id, "dropped out")
        assert sorted(shared_store.finish_release(info.id, leaver.id)) == sorted(leaver.items)
        again = shared_store.claim(info, "replacement", "simulated")
        assert isinstance(again, Claimed) and sorted(again.participant.items) == sorted(leaver.items)
        for counter in balance().values():
            assert sum(counter.values()) == copies and abs(counter[True] - counter[False]) <= 1


def test_released_slots_go_to_the_next_claim_and_the_released_key_is_refused(tmp_path: Path) -> None:
    store = Store(_url(tmp_path), clock=_clock())
    info = _new_collection(store, 4, 2, 2)
    claims = [store.claim(info, f"k{n}", "prolific") for n in range(4)]
    assert all(isinstance(c, Claimed) for c in claims)
    assert isinstance(store.claim(info, "late", "prolific"), Full)
    leaver = claims[1].participant
    store.record_progress(info.id, leaver.id, {leaver.items[0]: 5.0}, last_activity=5.0)
    assert store.begin_release(info.id, leaver.id, "timed out")
    assert store.claim(info, "k1", "prolific") == Refused("released")  # also while releasing
    assert isinstance(store.claim(info, "late", "prolific"), Full)  # still in flight until phase 2
    assert store.finish_release(info.id, leaver.id) == [leaver.items[1]]  # the submitted one stays
    assert store.claim(info, "k1", "prolific") == Refused("released")
    nxt = store.claim(info, "late", "prolific")
    assert isinstance(nxt, Claimed) and nxt.participant.items == [leaver.items[1]]
    assert [e["item_id"] for e in store.events(info.id, ["reallocated"])] == [leaver.items[1]]
    assert isinstance(store.claim(info, "later", "prolific"), Full)
    assert store.summary(info.id)["reclaimed_items"] == 1


def test_a_participant_of_the_excluded_collection_is_refused(tmp_path: Path) -> None:
    store = Store(_url(tmp_path))
    study1 = _new_collection(store, 3, 2, 1)
    study2 = _new_collection(store, 3, 2, 1)
    assert isinstance(store.claim(study1, "PROLIFIC-A", "prolific"), Claimed)
    assert store.claim(study2, "PROLIFIC-A", "prolific", exclude_collection=study1) == Refused("excluded")
    assert store.participants(study2.id) == []
    other = store.claim(study2, "PROLIFIC-B", "prolific", exclude_collection=study1)
    assert isinstance(other, Claimed) and other.new
    # without the exclusion the same key is simply a new participant there
    assert isinstance(store.claim(study2, "PROLIFIC-A", "prolific"), Claimed)


def test_keys_are_stored_only_as_salted_hashes(tmp_path: Path) -> None:
    raw_key = "5f3c9a1b2d7e4f60a1b2c3d4"  # a Prolific-style participant id
    url = _url(tmp_path)
    store = Store(url)
    info = _new_collection(store, 3, 1, 1)
    claimed = store.claim(info, raw_key, "prolific")
    assert isinstance(claimed, Claimed)
    # look at every byte the store wrote (the database and any WAL / shared-memory file beside it)
    with store.engine.connect() as conn:  # hold a connection so the WAL is still there too
        conn.exec_driver_sql("SELECT 1")
        files = sorted(tmp_path.glob("store.sqlite*"))
        data = b"".join(f.read_bytes() for f in files)
    assert data and len(files) >= 1
    for needle in (raw_key.encode(), raw_key.encode("utf-16-le"), raw_key.upper().encode()):
        assert needle not in data
    key_hash = store.key_hash(raw_key)
    assert key_hash.encode() in data  # what is stored instead
    assert store.participant_by_key(info.id, raw_key).id == claimed.participant.id
    other = Store(_url(tmp_path, "other.sqlite"))
    assert other._salt != store._salt
    assert other.key_hash(raw_key) != key_hash
    assert Store(url).key_hash(raw_key) == key_hash  # the salt is kept with the store


def test_the_store_file_is_created_owner_only(tmp_path: Path) -> None:
    old = os.umask(0)  # a permissive umask: the mode must come from the store, not the umask
    try:
        url = _url(tmp_path / "state")
        store = Store(url)
        _new_collection(store, 1, 1, 1)
        file = tmp_path / "state" / "store.sqlite"
        assert file.stat().st_mode & 0o777 == 0o600
        with store.engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
            extras = sorted(tmp_path.glob("state/store.sqlite-*"))  # the WAL and shared-memory files
            assert extras
            for extra in extras:
                assert extra.stat().st_mode & 0o777 == 0o600, extra
    finally:
        os.umask(old)


def test_a_drop_request_during_record_progress_is_not_lost(tmp_path: Path) -> None:
    url = _url(tmp_path)
    collector = Store(url, clock=lambda: 1.0)  # e.g. a scheduled collection run
    operator = Store(url, clock=lambda: 2.0)  # e.g. `crowdpref drop` in another process
    info = _new_collection(collector, 2, 1, 2)
    claimed = collector.claim(info, "someone", "invite")
    assert isinstance(claimed, Claimed)
    first, second = claimed.participant.items
    state = collector.participant(info.id, claimed.participant.username)  # the collector reads ...
    assert not state.drop_requested
    operator.request_drop(info.id, state.username)  # ... the operator drops them meanwhile ...
    collector.record_progress(info.id, state.id, {first: 10.0}, last_activity=10.0)  # ... then it writes
    after = operator.participant(info.id, state.username)
    assert after.drop_requested
    assert after.submitted == {first: 10.0}
    assert after.last_activity_at == 10.0
    # and the other way round: progress first, then the drop; both stay
    collector.record_progress(info.id, state.id, {}, last_activity=11.0)
    assert operator.participant(info.id, state.username).drop_requested
    assert operator.participant(info.id, state.username).last_activity_at == 11.0
    assert [e["kind"] for e in collector.events(info.id, ["drop_requested", "submitted"])] == [
        "drop_requested", "submitted"]
    assert second in after.held


def test_the_migrated_schema_equals_the_metadata(tmp_path: Path) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from crowdpref.store.schema import metadata

    store = Store(_url(tmp_path))
    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
        diffs = compare_metadata(context, metadata)
    assert diffs == []


def test_reopening_a_store_does_not_run_the_migrations_again(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from alembic import command

    calls: list[str] = []
    real_upgrade = command.upgrade

    def counting_upgrade(config: Any, revision: str, **kwargs: Any) -> None:
        calls.append(revision)
        real_upgrade(config, revision, **kwargs)

    monkeypatch.setattr(command, "upgrade", counting_upgrade)
    url = _url(tmp_path)
    store = Store(url)
    assert calls == ["head"]
    info = _new_collection(store, 2, 1, 1)
    assert isinstance(store.claim(info, "k", "invite"), Claimed)
    again = Store(url)
    assert calls == ["head"]  # nothing to migrate: the store is at head
    assert again.find_collection(info.study, info.key) == info
    assert again.key_hash("k") == store.key_hash("k")


@pytest.mark.parametrize("damage", ["garbage", "overwritten", "truncated"])
def test_a_corrupt_store_file_gives_a_one_line_store_error(tmp_path: Path, damage: str) -> None:
    file = tmp_path / "store.sqlite"
    url = _url(tmp_path)
    if damage == "garbage":
        file.write_bytes(b"this is not a database, just some bytes\x00\xff" * 100)
    else:
        store = Store(url)
        _new_collection(store, 5, 1, 1)
        store.close()
        if damage == "overwritten":
            file.write_bytes(os.urandom(file.stat().st_size))
        else:  # the SQLite header survives, the pages after it are garbage
            data = file.read_bytes()
            file.write_bytes(data[:100] + b"\xab" * (len(data) - 100))
    with pytest.raises(StoreError) as caught:
        Store(url)
    message = str(caught.value)
    assert "\n" not in message
    assert str(file) in message
    assert "restore it from your backup" in message and "database_url" in message  # the fix
    assert "delete" not in message.replace("do not delete", "")  # never advice that loses the study's state
    assert caught.value.__cause__ is None and caught.value.__suppress_context__  # no sqlite traceback


def test_a_store_locked_by_another_process_is_opened_once_free_and_never_called_damaged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite may answer "database is locked" at once (not after its busy timeout) while another
    process opens or checkpoints the store: the open tries again; a lock that stays is named as
    such, never as a damaged store to restore from backup."""
    from sqlalchemy.exc import OperationalError

    from crowdpref.store import engine

    url = _url(tmp_path)
    Store(url).close()
    real, refusals = engine.upgrade, [2]

    def locked_twice(db: Any) -> None:
        if refusals[0]:
            refusals[0] -= 1
            raise OperationalError("PRAGMA journal_mode=WAL", {}, sqlite3.OperationalError("database is locked"))
        real(db)

    monkeypatch.setattr(engine, "upgrade", locked_twice)
    Store(url).close()  # opened on the third try
    assert refusals == [0]
    refusals[0] = 10**6
    monkeypatch.setattr(engine, "LOCKED_OPEN_S", 0.2)
    with pytest.raises(StoreError) as caught:
        Store(url)
    message = str(caught.value)
    assert "is locked by another process" in message and "\n" not in message
    assert "damaged" not in message and "restore" not in message


def test_fifty_claims_from_five_processes_exactly_cover_the_slots(tmp_path: Path) -> None:
    # 50 items x R 3 = 150 slots = 50 claims x Q 3
    store, info, results = _claim_at_once(_url(tmp_path), n_items=50, copies=3, per_participant=3)
    _check_exactly_covered(store, info, results, 50)


def test_more_claims_than_slots_at_once_over_assign_nothing(tmp_path: Path) -> None:
    # 7 items x R 3 = 21 slots: five claims of Q 4 and one of the last slot; 44 claims are Full
    store, info, results = _claim_at_once(_url(tmp_path), n_items=7, copies=3, per_participant=4)
    _check_over_subscribed(store, info, results, 21)
    assert sum(row[0] == "claimed" for row in results) == 6
