"""The per-item counts claims read (crowdpref/store/counts.py) on PostgreSQL (``postgres_url``: a
fresh database per test on the session's throwaway server; skipped with the reason where none
can run): random operation sequences keep the counts equal to a recount, a claim takes the
order its docstring states, and the migration 0009 builds the counts of an existing store -
also after the migrating process was killed in the middle of it (PostgreSQL rolls the
transaction back; the next open migrates)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from sqlalchemy import create_engine, text

from crowdpref.store import Store
from tests.unit.test_store_counts import (
    COUNT_OPERATIONS,
    COUNT_SHAPE,
    _clock,
    as_of_0008,
    kill_mid_migration,
    migrated_counts,
    populated_store,
    run_count_operations,
)

pytestmark = pytest.mark.integration

_PROPERTY = settings(max_examples=15, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture()
def pg_store(postgres_url: str) -> Any:
    store = Store(postgres_url, clock=_clock())
    try:
        yield store
    finally:
        store.close()


@_PROPERTY
@given(ops=COUNT_OPERATIONS, **COUNT_SHAPE)
def test_the_counts_equal_a_recount_after_every_operation(pg_store: Store, ops: list[tuple[Any, ...]],
                                                          n_items: int, copies: int, per_participant: int,
                                                          seed: int) -> None:
    run_count_operations(pg_store, n_items, copies, per_participant, seed, ops)


def test_the_migration_builds_the_counts_also_after_a_kill(postgres_url: str) -> None:
    expected, cids = populated_store(postgres_url)
    as_of_0008(postgres_url)
    kill_mid_migration(postgres_url)
    engine = create_engine(postgres_url)
    try:
        with engine.connect() as conn:  # rolled back: still 0008, no half-built table
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0008"
            assert conn.execute(text("SELECT to_regclass('item_counts')")).scalar() is None
    finally:
        engine.dispose()
    assert migrated_counts(postgres_url, cids) == expected
