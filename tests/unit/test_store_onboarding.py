"""The store's onboarding records (crowdpref.store.onboarding): begun before any claim and known by
a key hash only; a returning person resumes; practice never counts twice; quiz attempts are
counted in one transaction and refused once used up; a failed last attempt screens out; the
time spent sums the gaps between steps; migration 0010 upgrades a store at 0009 in place."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, text

from crowdpref.store import OnboardingState, Store, StoreError


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _store(tmp_path: Path) -> tuple[Store, _Clock, int]:
    clock = _Clock()
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}", clock=clock)
    info = store.collection("onb", "study1", ["q1", "q2", "q3"], copies=1, per_participant=1, seed=0,
                            username_prefix="onb-s1")
    return store, clock, info.id


def test_onboarding_begins_once_and_a_returning_person_resumes(tmp_path: Path) -> None:
    store, clock, cid = _store(tmp_path)
    h = store.key_hash("PROLIFIC-PID-123")
    assert store.onboarding_state(cid, h) is None
    first = store.onboarding_start(cid, h, "prolific", session_id="SESSION-9")
    assert (first.status, first.step, first.attempts_used) == ("in_progress", "introduction", 0)
    assert first.session_hash == store.key_hash("SESSION-9")
    clock.now += 60
    store.onboarding_step(cid, h, "practice")
    store.onboarding_practice(cid, h, 0, True)
    clock.now += 5000  # they leave and come back much later
    again = store.onboarding_start(cid, h, "prolific")  # idempotent: same row, same place
    assert (again.step, again.practice_answered, again.started_at) == ("practice", 1, first.started_at)
    reopened = Store(store.url)  # another process reads the same state back
    assert reopened.onboarding_state(cid, h) == again
    assert [r.key_hash for r in store.onboarding_records(cid)] == [h]
    # the raw key and session never reach the store
    with store.engine.connect() as conn:
        dumped = " ".join(str(v) for row in conn.execute(text("SELECT * FROM onboarding")) for v in row)
    assert "PROLIFIC-PID-123" not in dumped and "SESSION-9" not in dumped


def test_practice_is_counted_once_per_item(tmp_path: Path) -> None:
    store, _, cid = _store(tmp_path)
    h = store.key_hash("k")
    store.onboarding_start(cid, h, "invite")
    store.onboarding_practice(cid, h, 0, False)
    store.onboarding_practice(cid, h, 0, True)  # the same item again: the first answer stands
    state = store.onboarding_practice(cid, h, 2, True)
    assert (state.practice_answered, state.practice_correct) == (2, 1)
    with pytest.raises(StoreError):
        store.onboarding_practice(cid, h, -1, True)


def test_attempts_are_refused_once_used_up_and_a_failed_last_attempt_screens_out(tmp_path: Path) -> None:
    store, _, cid = _store(tmp_path)
    h = store.key_hash("k")
    store.onboarding_start(cid, h, "prolific")
    one = store.onboarding_attempt(cid, h, score=1, passed=False, attempts_allowed=2)
    assert (one.status, one.step, one.attempts_used, one.last_score, one.best_score) == ("in_progress", "quiz", 1, 1, 1)
    two = store.onboarding_attempt(cid, h, score=0, passed=False, attempts_allowed=2)
    assert (two.status, two.step, two.attempts_used, two.last_score, two.best_score) == ("screened_out", "done", 2, 0, 1)
    assert two.finished_at is not None
    with pytest.raises(StoreError, match="used all 2 quiz attempts") as info:
        store.onboarding_attempt(cid, h, score=4, passed=True, attempts_allowed=2)
    assert "\n" not in str(info.value)
    assert store.onboarding_state(cid, h) == two  # the refused attempt changed nothing
    # a late page changes nothing either
    assert store.onboarding_step(cid, h, "quiz").status == "screened_out"
    kinds = [e["kind"] for e in store.events(cid) if e["kind"].startswith("onboarding")]
    assert kinds == ["onboarding_started", "onboarding_attempt_failed", "onboarding_screened_out"]


def test_attempts_count_against_the_allowance_given_at_each_attempt(tmp_path: Path) -> None:
    """The allowance comes from the config at each attempt: someone with 2 attempts used is
    refused when the study now allows 2 (lowered from 3), though not screened out yet."""
    store, _, cid = _store(tmp_path)
    h = store.key_hash("k")
    store.onboarding_start(cid, h, "invite")
    store.onboarding_attempt(cid, h, score=0, passed=False, attempts_allowed=3)
    store.onboarding_attempt(cid, h, score=0, passed=False, attempts_allowed=3)
    with pytest.raises(StoreError, match="used all 2 quiz attempts"):
        store.onboarding_attempt(cid, h, score=4, passed=True, attempts_allowed=2)
    assert store.onboarding_state(cid, h).attempts_used == 2  # type: ignore[union-attr]


def test_a_pass_ends_the_quiz(tmp_path: Path) -> None:
    store, _, cid = _store(tmp_path)
    h = store.key_hash("k")
    store.onboarding_start(cid, h, "invite")
    store.onboarding_attempt(cid, h, score=1, passed=False, attempts_allowed=3)
    passed = store.onboarding_attempt(cid, h, score=4, passed=True, attempts_allowed=3)
    assert (passed.status, passed.step, passed.attempts_used, passed.best_score) == ("passed", "done", 2, 4)
    with pytest.raises(StoreError, match="already passed"):
        store.onboarding_attempt(cid, h, score=4, passed=True, attempts_allowed=3)
    with pytest.raises(StoreError, match="not begun"):
        store.onboarding_attempt(cid, store.key_hash("stranger"), score=4, passed=True, attempts_allowed=3)


def test_done_without_a_quiz_passes(tmp_path: Path) -> None:
    store, _, cid = _store(tmp_path)
    h = store.key_hash("k")
    store.onboarding_start(cid, h, "invite")
    assert store.onboarding_step(cid, h, "done").status == "passed"
    with pytest.raises(StoreError, match="unknown onboarding step"):
        store.onboarding_step(cid, h, "lunch")


def test_time_spent_sums_the_gaps_between_steps_capping_long_ones(tmp_path: Path) -> None:
    store, clock, cid = _store(tmp_path)
    h = store.key_hash("k")
    store.onboarding_start(cid, h, "invite")
    clock.now += 90
    store.onboarding_step(cid, h, "practice")
    clock.now += 30
    store.onboarding_practice(cid, h, 0, True)
    clock.now += 5 * 3600  # a long break counts as 30 minutes
    state = store.onboarding_step(cid, h, "quiz")
    assert state.seconds_spent == pytest.approx(90 + 30 + 1800)


def test_attempts_from_two_stores_at_once_never_exceed_the_allowance(tmp_path: Path) -> None:
    """Two processes (two tabs) submit the quiz at the same moment: the write lock serialises
    them, so only the allowed attempts are recorded."""
    from concurrent.futures import ThreadPoolExecutor

    store, _, cid = _store(tmp_path)
    h = store.key_hash("k")
    store.onboarding_start(cid, h, "invite")
    others = [Store(store.url) for _ in range(4)]

    def attempt(s: Store) -> str:
        try:
            return s.onboarding_attempt(cid, h, score=0, passed=False, attempts_allowed=2).status
        except StoreError:
            return "refused"

    with ThreadPoolExecutor(4) as pool:
        outcomes = sorted(pool.map(attempt, others))
    assert outcomes == ["in_progress", "refused", "refused", "screened_out"]
    assert store.onboarding_state(cid, h).attempts_used == 2  # type: ignore[union-attr]


def test_migration_0010_upgrades_a_store_at_0009_in_place(tmp_path: Path) -> None:
    import crowdpref.store

    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    config = Config()
    config.set_main_option("script_location", str(Path(crowdpref.store.__file__).parent / "migrations"))
    engine = create_engine(url)
    with engine.begin() as conn:  # a store written by crowdpref at 0009, with a study in it
        config.attributes["connection"] = conn
        command.upgrade(config, "0009")
        conn.execute(text("INSERT INTO collections (study, key, copies, per_participant, seed, counterbalance, "
                          "username_prefix, created_at) VALUES ('old', 'study1', 1, 1, 0, 0, 'old-s1', 0)"))
        conn.execute(text("INSERT INTO meta (name, value) VALUES ('key_salt', 'old-salt')"))
        tables = {row[0] for row in conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'"))}
    engine.dispose()
    assert "onboarding" not in tables
    store = Store(url)
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0014"
    info = store.find_collection("old", "study1")
    assert info is not None
    state = store.onboarding_start(info.id, store.key_hash("someone"), "invite")
    assert isinstance(state, OnboardingState) and state.status == "in_progress"
    # and back down: the table goes, the rest stays
    with store.engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0009")
        tables = {row[0] for row in conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'"))}
    assert "onboarding" not in tables and "collections" in tables
