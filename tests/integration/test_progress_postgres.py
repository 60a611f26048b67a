"""A study's progress (crowdpref/progress.py) on a PostgreSQL study store (``postgres_url``: a
fresh database on the session's throwaway server; skipped with the reason where none can run):
the same driven store and hand counts as tests/unit/test_progress.py, and reading while another
connection holds the collection's row lock, as a claim in progress does."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from crowdpref.config import parse_study
from crowdpref.progress import study_progress
from crowdpref.store import Store
from tests.conftest import isolated_settings
from tests.unit.test_progress import _clock, check_driven, drive, study_data

pytestmark = pytest.mark.integration


def test_progress_on_postgresql(postgres_url: str, tmp_path: Path) -> None:
    config = parse_study(study_data())
    store = Store(postgres_url, clock=_clock())
    try:
        drive(store, config)
    finally:
        store.close()
    settings = isolated_settings(tmp_path / "home", database_url=postgres_url)
    check_driven(study_progress(config, settings))
    assert not (tmp_path / "home" / "store.sqlite").exists()  # the settings' store, not a SQLite one


def test_progress_reads_while_a_claim_holds_the_collections_lock(postgres_url: str, tmp_path: Path) -> None:
    config = parse_study(study_data())
    store = Store(postgres_url, clock=_clock())
    try:
        drive(store, config)
    finally:
        store.close()
    settings = isolated_settings(tmp_path / "home", database_url=postgres_url)
    engine = create_engine(postgres_url)
    done: dict[str, Any] = {}
    try:
        with engine.begin() as conn:  # what Store._write(cid) takes for a claim
            conn.execute(text("SELECT id FROM collections FOR UPDATE"))
            conn.execute(text("UPDATE participants SET status = 'complete' WHERE status = 'active'"))
            thread = threading.Thread(target=lambda: done.update(result=study_progress(config, settings)),
                                      daemon=True)
            thread.start()
            thread.join(timeout=60)
            assert not thread.is_alive(), "progress waited for the collection's lock"
    finally:
        engine.dispose()
    assert done["result"].parts[0].participants["active"] == 1  # the uncommitted change is not seen
