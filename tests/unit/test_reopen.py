"""Reopening an item (crowdpref/store/lifecycle.py ``Store.reopen``, crowdpref/reopen.py): a counted
answer stops counting in one transaction, an event says why, the slot returns to the pool and
the next arrival's claim takes it - never someone who held the item; refusals change nothing.
And the exports' test of what cannot be used: an answer gone from Argilla, a whitespace-only
text, a rating off the scale."""

from __future__ import annotations

import itertools
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from crowdpref.argilla_client import SubmittedAnswer
from crowdpref.errors import ConfigError
from crowdpref.reopen import LOST, ItemsReopened, reopen_item, reopen_unusable, unusable_answers
from crowdpref.store import HELD, REOPENED, SUBMITTED, Claimed, CollectionInfo, Full, Store, StoreError
from crowdpref.study1 import answer_problem
from crowdpref.study2 import rating_problem


def _clock() -> Any:
    ticks = itertools.count(1_000_000)
    return lambda: float(next(ticks))


@pytest.fixture()
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path / 'store.sqlite'}", clock=_clock())
    yield s
    s.close()


def _collection(store: Store, items: int = 3, copies: int = 2, per_participant: int = 3) -> CollectionInfo:
    return store.collection("s", "study1", [f"q{i}" for i in range(items)], copies=copies,
                            per_participant=per_participant, seed=1, username_prefix="s-s1")


def _claim_and_submit(store: Store, info: CollectionInfo, key: str) -> Claimed:
    claimed = store.claim(info, key, "simulated")
    assert isinstance(claimed, Claimed)
    store.record_progress(info.id, claimed.participant.id, {i: 1_000.0 for i in claimed.participant.items}, None)
    return claimed


def _full(store: Store) -> tuple[CollectionInfo, list[Claimed]]:
    """3 questions x R=2, Q=3: two participants answer everything; the collection is full."""
    info = _collection(store)
    done = [_claim_and_submit(store, info, key) for key in ("a", "b")]
    assert isinstance(store.claim(info, "c", "simulated"), Full)
    return info, done


def test_reopen_takes_one_answer_out_of_the_count_and_the_next_claim_takes_the_slot(store: Store) -> None:
    info, (first, second) = _full(store)
    user = first.participant.username

    assert store.reopen(info.id, "q1", "whitespace-only answer", usernames=[user]) == [user]

    counts = store.item_counts(info.id)
    assert counts.submitted["q1"] == 1 and counts.reopened["q1"] == 1  # the other answer still counts
    state = store.participant(info.id, user)
    assert state.reopened == ["q1"] and "q1" not in state.submitted
    assert state.status == "complete"  # they did their part; only the answer stopped counting
    assert "q1" in state.visible  # the record stays in their dataset (validation compares it)
    event = [e for e in store.events(info.id) if e["kind"] == "reopened"]
    assert [(e["participant_id"], e["item_id"]) for e in event] == [(first.participant.id, "q1")]
    assert "whitespace-only answer" in event[0]["detail"]

    # the slot is back in the pool: the next arrival gets exactly that question, and the store
    # records it as reallocated
    newcomer = store.claim(info, "c", "simulated")
    assert isinstance(newcomer, Claimed) and newcomer.participant.items == ["q1"]
    assert any(e["kind"] == "reallocated" and e["item_id"] == "q1" for e in store.events(info.id))
    assert isinstance(store.claim(info, "d", "simulated"), Full)  # only that one slot was freed
    store.record_progress(info.id, newcomer.participant.id, {"q1": 2_000.0}, None)
    assert store.item_counts(info.id).submitted["q1"] == 2 and store.check(info.id) == []


def test_a_late_answer_to_a_reopened_item_never_counts_again(store: Store) -> None:
    info, (first, _) = _full(store)
    store.reopen(info.id, "q0", "lost", usernames=[first.participant.username])
    store.record_progress(info.id, first.participant.id, {"q0": 3_000.0}, None)  # the monitor reads it again
    assert store.item_counts(info.id).submitted["q0"] == 1


def test_reopen_without_usernames_takes_every_counted_answer_and_leaves_held_copies(store: Store) -> None:
    info = _collection(store, items=1, copies=3, per_participant=1)
    a = _claim_and_submit(store, info, "a")
    b = _claim_and_submit(store, info, "b")
    held = store.claim(info, "c", "simulated")  # holds the third copy, not answered yet
    assert isinstance(held, Claimed)

    assert sorted(store.reopen(info.id, "q0", "operator")) == sorted([a.participant.username, b.participant.username])
    assert store.participant(info.id, held.participant.username).assignments[0].status == HELD
    assert [x.status for x in store.participant(info.id, a.participant.username).assignments] == [REOPENED]


@pytest.mark.parametrize("case", ["unknown item", "no counted answer", "not their answer", "never held"])
def test_a_refused_reopen_changes_nothing(store: Store, case: str) -> None:
    info = _collection(store)
    first = _claim_and_submit(store, info, "a")
    other = store.claim(info, "b", "simulated")  # holds the three questions, answered none
    assert isinstance(other, Claimed)
    if case == "no counted answer":
        store.reopen(info.id, "q2", "first reopen")
    before = (store.item_counts(info.id), len(store.events(info.id)))
    item, users = {
        "unknown item": ("q9", None),
        "no counted answer": ("q2", None),  # its only counted answer is already reopened
        "not their answer": ("q0", [other.participant.username]),  # held, not submitted
        "never held": ("q0", ["s-s1-0099"]),
    }[case]
    with pytest.raises(StoreError) as caught:
        store.reopen(info.id, item, "again", usernames=users)
    assert "\n" not in str(caught.value) and item in str(caught.value)
    if case == "not their answer":
        assert "it is held" in str(caught.value) and first.participant.username in str(caught.value)
    assert (store.item_counts(info.id), len(store.events(info.id))) == before


def test_reopen_item_finds_the_collection_of_the_item_and_refuses_checks_and_strangers(store: Store) -> None:
    info, (first, _) = _full(store)
    pairs = store.collection("s", "study2", ["pr_1"], copies=1, per_participant=1, seed=1, username_prefix="s-s2")
    rater = _claim_and_submit(store, pairs, "r")
    assert reopen_item(store, "s", "pr_1", "operator") == ("study2", [rater.participant.username])
    assert reopen_item(store, "s", "q0", "operator", [first.participant.username]) == (
        "study1", [first.participant.username])
    with pytest.raises(ConfigError, match="not a question or pair of study 's'"):
        reopen_item(store, "s", "q_nope", "operator")
    with pytest.raises(ConfigError, match="quality check"):
        reopen_item(store, "s", "check-i-0123456789abcdef", "operator")


def _answer(item: str, **values: Any) -> SubmittedAnswer:
    return SubmittedAnswer(item, "uid", "submitted", values, datetime(2026, 1, 1, tzinfo=timezone.utc))


def test_unusable_answers_are_the_lost_and_the_empty_ones_only(store: Store) -> None:
    info, (first, second) = _full(store)
    participants = store.participants(info.id)
    p1, p2 = participants
    submitted = [
        (p1, _answer("q0", response="A real answer.", quality=4)),
        (p1, _answer("q1", response=" \n\t ", quality=4)),  # whitespace only
        # p1's q2: discarded in Argilla - not among the submitted answers
        (p2, _answer("q0", response="Fine.", quality=3)),
        (p2, _answer("q1", response="Also fine.", quality=2)),
        (p2, _answer("q2", response="Good.", quality=5)),
    ]
    found = unusable_answers(participants, submitted, answer_problem)
    assert {(u.item_id, u.username, u.reason) for u in found} == {
        ("q1", p1.username, "whitespace-only answer"), ("q2", p1.username, LOST)}

    with pytest.raises(ItemsReopened) as caught:
        reopen_unusable(store, info.id, participants, submitted, answer_problem, "study 1", "collect-responses")
    message = str(caught.value)
    assert "\n" not in message and "2 counted answers" in message and "collect-responses" in message
    assert sorted(caught.value.items) == ["q1", "q2"]
    counts = store.item_counts(info.id)
    assert (counts.reopened["q1"], counts.reopened["q2"], counts.submitted["q0"]) == (1, 1, 2)
    # nothing left to reopen: a second export pass stays quiet
    reopen_unusable(store, info.id, store.participants(info.id), submitted[:1] + submitted[2:], answer_problem,
                    "study 1", "x")


def test_what_the_studies_count_as_unusable() -> None:
    assert answer_problem({"response": "   ", "quality": 3}) == "whitespace-only answer"
    assert answer_problem({"quality": 3}) == "no answer text"
    assert answer_problem({"response": "ok", "quality": None}) == "no quality rating"
    assert answer_problem({"response": " ok ", "quality": 1}) is None
    eight = rating_problem(8)
    assert eight({"preference": 1}) is None and eight({"preference": 8}) is None
    assert eight({"preference": 9}) == "rating 9 is outside 1..8"
    assert eight({"preference": True}) is not None and eight({}) is not None
