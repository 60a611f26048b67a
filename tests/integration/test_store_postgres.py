"""The study store on PostgreSQL (``postgres_url``: a fresh database per test on the session's
throwaway server; skipped with the reason where none can run): the same allocation and
counterbalancing properties as tests/unit/test_store.py (fewer examples), the Alembic schema,
and 50 claims at once from five processes (threads inside each), which on PostgreSQL are
serialised by the collection's row lock (SELECT ... FOR UPDATE), not a database-wide lock.
Every process opens the fresh database at the same moment, so the first-open race (migrations,
the key salt, the collection's creation) is part of it."""

from __future__ import annotations

import json
import threading
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crowdpref.store import Claimed, Refused, Store
from tests.unit.test_store import (
    OPERATIONS,
    SHAPE,
    _check_exactly_covered,
    _check_over_subscribed,
    _claim_at_once,
    _clock,
    _counterbalance_property,
    _new_collection,
    _run_operations,
)

pytestmark = pytest.mark.integration

# one database per test (function-scoped fixture); every example makes its own collection in it
_PROPERTY = settings(max_examples=20, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture()
def pg_store(postgres_url: str) -> Any:
    store = Store(postgres_url, clock=_clock())
    try:
        yield store
    finally:
        store.close()


@_PROPERTY
@given(ops=OPERATIONS, **SHAPE)
def test_allocation_invariants_hold_after_every_operation(pg_store: Store, ops: list[tuple[Any, ...]],
                                                          n_items: int, copies: int, per_participant: int,
                                                          seed: int) -> None:
    info = _new_collection(pg_store, n_items, copies, per_participant, seed=seed)
    _run_operations(pg_store, info, ops)


@_PROPERTY
@given(n_items=st.integers(1, 6), copies=st.integers(1, 5), per_participant=st.integers(1, 6),
       seed=st.integers(0, 2**31 - 1), bias=st.sampled_from([Fraction(1), Fraction(1, 2)]),
       release=st.lists(st.integers(0, 100), max_size=3))
def test_counterbalanced_order_keeps_position_bias_within_bias_over_r(
        pg_store: Store, n_items: int, copies: int, per_participant: int, seed: int, bias: Fraction,
        release: list[int]) -> None:
    _counterbalance_property(pg_store, n_items, copies, per_participant, seed, bias, release)


def test_exclusion_and_salted_keys(pg_store: Store, postgres_url: str) -> None:
    study1 = _new_collection(pg_store, 2, 1, 1)
    study2 = _new_collection(pg_store, 2, 1, 1)
    assert isinstance(pg_store.claim(study1, "PROLIFIC-A", "prolific"), Claimed)
    assert pg_store.claim(study2, "PROLIFIC-A", "prolific", exclude_collection=study1) == Refused("excluded")
    assert isinstance(pg_store.claim(study2, "PROLIFIC-B", "prolific", exclude_collection=study1), Claimed)
    with pg_store.engine.connect() as conn:
        hashes = set(conn.exec_driver_sql("SELECT key_hash FROM participants").scalars())
        dumped = " ".join(str(row) for table in ("participants", "events", "meta", "accounts")
                          for row in conn.exec_driver_sql(f"SELECT * FROM {table}"))
    assert hashes == {pg_store.key_hash("PROLIFIC-A"), pg_store.key_hash("PROLIFIC-B")}
    assert "PROLIFIC-A" not in dumped and "PROLIFIC-B" not in dumped
    assert Store(postgres_url).key_hash("PROLIFIC-A") == pg_store.key_hash("PROLIFIC-A")  # salt kept


def test_processes_opening_a_new_store_at_once_agree_on_one_key_salt(postgres_url: str) -> None:
    """Two openers that both find no key salt and both insert one (forced: each waits for the
    other before its INSERT): one salt wins, both use it, neither fails."""
    from sqlalchemy import Engine, event

    Store(postgres_url).close()  # migrated
    with Store(postgres_url).engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM meta WHERE name = 'key_salt'")  # as fresh as before the first open
    both_read = threading.Barrier(2, timeout=10)

    def before_insert(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("INSERT INTO meta") and threading.current_thread().name.startswith("opener"):
            try:
                both_read.wait()
            except threading.BrokenBarrierError:
                pass

    stores: list[Store] = []
    errors: list[str] = []

    def open_store() -> None:
        try:
            stores.append(Store(postgres_url))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")

    event.listen(Engine, "before_cursor_execute", before_insert)
    try:
        openers = [threading.Thread(target=open_store, name=f"opener-{n}") for n in range(2)]
        for opener in openers:
            opener.start()
        for opener in openers:
            opener.join(timeout=60)
    finally:
        event.remove(Engine, "before_cursor_execute", before_insert)
    assert not both_read.broken, "the two openers did not both try to insert a salt"
    assert errors == []
    assert len(stores) == 2 and stores[0].key_hash("k") == stores[1].key_hash("k") == Store(postgres_url).key_hash("k")


def test_the_migrated_schema_equals_the_metadata(pg_store: Store) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from crowdpref.store.schema import metadata

    with pg_store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diffs = compare_metadata(context, metadata)
    assert diffs == []


def test_fifty_claims_from_five_processes_exactly_cover_the_slots(postgres_url: str) -> None:
    # 50 items x R 3 = 150 slots = 50 claims x Q 3
    store, info, results = _claim_at_once(postgres_url, n_items=50, copies=3, per_participant=3)
    try:
        _check_exactly_covered(store, info, results, 50)
    finally:
        store.close()


def test_more_claims_than_slots_at_once_over_assign_nothing(postgres_url: str) -> None:
    # 7 items x R 3 = 21 slots: five claims of Q 4 and one of the last slot; 44 claims are Full
    store, info, results = _claim_at_once(postgres_url, n_items=7, copies=3, per_participant=4)
    try:
        _check_over_subscribed(store, info, results, 21)
        assert sum(row[0] == "claimed" for row in results) == 6
    finally:
        store.close()


def test_a_delivery_is_de_duplicated_on_its_event_id_and_on_its_signed_content(pg_store: Store) -> None:
    signed = "a" * 64
    assert pg_store.record_delivery("e1", "prolific", "study.status.change", "ignored", signed_hash=signed)
    assert not pg_store.record_delivery("e1", "prolific", "study.status.change", "ignored", signed_hash="b" * 64)
    assert not pg_store.record_delivery("e2", "prolific", "study.status.change", "ignored", signed_hash=signed)
    # deliveries recorded without a hash (before migration 0011) never collide with each other
    assert pg_store.record_delivery("e3", "prolific", "study.status.change", "ignored")
    assert pg_store.record_delivery("e4", "prolific", "study.status.change", "ignored")
    assert [d["event_id"] for d in pg_store.deliveries("prolific")] == ["e1", "e3", "e4"]


def test_a_meta_value_of_any_length_is_kept(pg_store: Store) -> None:
    """The paced launch keeps its last decision in ``meta`` (about 330 characters): PostgreSQL
    refused it under the old VARCHAR(200), and the public profile's demo failed at its first publish."""
    long = json.dumps({"pace": "paced: 10 places per step, at least 10 s apart " * 10, "open": 10})
    pg_store.set_meta("prolific-pacing:1", long)
    assert pg_store.get_meta("prolific-pacing:1") == long
