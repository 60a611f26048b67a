"""A study-1 writer who withdraws while study 2 runs (crowdpref/store/lifecycle.py
``Store.retire_items``, crowdpref/withdrawals.py): the pairs holding their answers are retired in
one transaction - no claim hands them out again, held copies leave the raters' datasets (what is
left to delete is kept in the store until done), answered copies stay with their raters (who
finish and are paid) but count for nothing, and every pair that stays still ends with R ratings.
The real Argilla: tests/integration/test_withdrawals.py."""

from __future__ import annotations

import pytest

from crowdpref.store import COMPLETE, HELD, RETIRED, SUBMITTED, Claimed, CollectionInfo, Full, Store, StoreError
from tests.unit.test_reopen import store  # noqa: F401 - the same store, on a ticking clock

PAIRS = [f"pr_{i}" for i in range(6)]


def _study2(store: Store) -> CollectionInfo:
    """6 pairs x R=2, Q=3: four raters fill it."""
    return store.collection("s", "study2", PAIRS, copies=2, per_participant=3, seed=1, username_prefix="s-s2",
                            counterbalance=True)


def _claim(store: Store, info: CollectionInfo, key: str, checks: bool = False) -> Claimed:
    planner = (lambda items, orders, kh: [(f"check-r-{items[0]}", None)]) if checks else None
    claimed = store.claim(info, key, "prolific", checks=planner)
    assert isinstance(claimed, Claimed)
    return claimed


def _submit(store: Store, info: CollectionInfo, claimed: Claimed, items: list[str] | None = None) -> None:
    items = claimed.participant.items if items is None else items
    store.record_progress(info.id, claimed.participant.id, {i: 1_000.0 for i in items}, None)


def test_a_retired_pair_is_never_claimed_again_and_the_others_still_reach_r(store: Store) -> None:
    info = _study2(store)
    first = _claim(store, info, "a" * 24)
    _submit(store, info, first)
    gone = first.participant.items[0]  # answered once: its second copy will never be handed out
    assert store.retire_items(info.id, [gone, "not-an-item"], "a writer withdrew") == [gone]
    assert store.retire_items(info.id, [gone], "again") == []  # once
    assert gone not in store.items(info.id) and store.retired_items(info.id) == [gone]
    claimed_after = []
    for key in "bcdefg":
        result = store.claim(info, key * 24, "prolific")
        if isinstance(result, Full):
            break
        claimed_after += result.participant.items
        _submit(store, info, result)
    assert gone not in claimed_after
    counts = store.item_counts(info.id)
    assert {item: counts.submitted[item] for item in store.items(info.id)} == {p: 2 for p in PAIRS if p != gone}
    assert store.check(info.id) == [] and store.recount(info.id) == []  # the counts agree without its row
    # the rating given before stays the rater's: submitted, not counted for any item
    assert store.participant(info.id, first.participant.username).submitted.keys() == set(first.participant.items)
    with pytest.raises(StoreError, match="retired"):
        store.reopen(info.id, gone, "lost")


def test_held_copies_retire_and_a_rater_left_holding_nothing_is_complete(store: Store) -> None:
    info = _study2(store)
    rater = _claim(store, info, "a" * 24, checks=True)
    items = rater.participant.items[:3]
    _submit(store, info, rater, items[:2] + [f"check-r-{items[0]}"])  # all but one pair, and their repeat check
    assert store.participant(info.id, rater.participant.username).status != COMPLETE
    store.retire_items(info.id, [items[2]], "a writer withdrew", repeats={f"check-r-{p}": p for p in PAIRS})
    state = store.participant(info.id, rater.participant.username)
    assert state.status == COMPLETE and state.held == []  # their remaining work is done: they are paid as complete
    assert {a.item_id: a.status for a in state.assignments} == {
        items[0]: SUBMITTED, items[1]: SUBMITTED, items[2]: RETIRED, f"check-r-{items[0]}": SUBMITTED}
    assert items[2] not in state.visible
    assert store.events(info.id, kinds=["completed"])[-1]["participant_id"] == state.id
    # the held record must leave their dataset: the store says so until it is done
    todo = store.retired_records(info.id)
    assert [(r.username, r.items) for r in todo] == [(state.username, (items[2],))]
    store.retired_records_deleted(info.id, state.id, list(todo[0].items))
    assert store.retired_records(info.id) == []


def test_a_repeat_check_of_a_retired_pair_retires_with_it(store: Store) -> None:
    info = _study2(store)
    rater = _claim(store, info, "a" * 24, checks=True)
    pair = rater.participant.items[0]
    check = f"check-r-{pair}"
    _submit(store, info, rater, [check])  # the repeat answered, the pair itself still held: never gradable
    store.retire_items(info.id, [pair], "a writer withdrew", repeats={check: pair})
    state = store.participant(info.id, rater.participant.username)
    assert {a.item_id: a.status for a in state.assignments if a.item_id in (pair, check)} == {
        pair: RETIRED, check: RETIRED}
    assert state.held == rater.participant.items[1:3] and state.status != COMPLETE
    assert store.retired_records(info.id)[0].items == (pair, check)
    assert all(a.status == HELD for a in state.assignments if a.item_id in state.held)
