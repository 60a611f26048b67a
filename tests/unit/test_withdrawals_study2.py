"""A study-1 writer who withdraws while study 2 runs (crowdpref/store/lifecycle.py
``Store.retire_items``, crowdpref/withdrawals.py): the pairs holding their answers are retired in
one transaction - no claim hands them out again, held copies leave the raters' datasets (what is
left to delete is kept in the store until done), answered copies stay with their raters (who
finish and are paid) but count for nothing, and every pair that stays still ends with R ratings.
The real Argilla: tests/integration/test_withdrawals.py."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from crowdpref.pairing import make_pairs
from crowdpref.pseudonyms import Pseudonyms
from crowdpref.runfolder import write_parquet
from crowdpref.store import COMPLETE, HELD, RETIRED, SUBMITTED, Claimed, CollectionInfo, Full, Store, StoreError
from crowdpref.withdrawals import withdraw, withdrawn_in, writer_pairs
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


# --- the run folder: pairs found from the store, exports rewritten -------------------------------------
def _run_folder(store: Store, run: Path) -> tuple[list[Claimed], pd.DataFrame]:
    """Study 1 in the store (3 writers answer q0 and q1) and its exports: responses, pairs (3
    per question), participants, one rating per pair; study 2's collection holds the pairs."""
    ids = Pseudonyms(run / "private")
    s1 = store.collection("s", "study1", ["q0", "q1"], copies=3, per_participant=2, seed=1, username_prefix="s-s1")
    writers = []
    for key in "abc":
        claimed = _claim(store, s1, key * 24)
        _submit(store, s1, claimed)
        writers.append(claimed)
    responses = pd.DataFrame([{"response_id": ids.response_id(q, w.participant.username), "question_id": q,
                               "category": "c", "text": f"answer of {w.participant.username} to {q}",
                               "participant_key": ids.participant_key(w.participant.username)}
                              for w in writers for q in ("q0", "q1")])
    pairs = make_pairs(responses, "all", seed=1).pairs
    ratings = pd.DataFrame({"rating_id": [f"rt{i}" for i in range(len(pairs))], "pair_id": pairs["pair_id"],
                            "response_a_id": pairs["response_a_id"], "response_b_id": pairs["response_b_id"],
                            "rater_key": "p_rater", "rating": 1})
    write_parquet(responses, run / "responses.parquet")
    write_parquet(pairs, run / "pairs.parquet")
    write_parquet(ratings, run / "ratings.parquet")
    write_parquet(responses[["participant_key"]], run / "study1" / "participants.parquet")
    write_parquet(responses, run / "release" / "data" / "responses.parquet")  # the release: rebuilt by publishing
    store.collection("s", "study2", list(pairs["pair_id"]), copies=2, per_participant=2, seed=1,
                     username_prefix="s-s2", counterbalance=True)
    return writers, pairs


def test_writer_pairs_are_the_pairs_holding_one_of_their_answers() -> None:
    pairs = pd.DataFrame({"pair_id": ["p1", "p2", "p3"], "first_response_id": ["r1", "r2", "r1"],
                          "second_response_id": ["r2", "r3", "r3"]})
    assert writer_pairs(pairs, ["r1"]) == ["p1", "p3"] and writer_pairs(pairs, ["r3"]) == ["p2", "p3"]
    assert writer_pairs(pairs, []) == [] and writer_pairs(pairs.iloc[:0], ["r1"]) == []


def test_a_writer_withdrawing_during_study_2_retires_their_pairs_and_rewrites_the_run_folder(
        store: Store, tmp_path: Path) -> None:
    run = tmp_path / "s"
    writers, pairs = _run_folder(store, run)
    s1, s2 = store.find_collection("s", "study1"), store.find_collection("s", "study2")
    gone = writers[0].participant
    ids = Pseudonyms(run / "private")
    theirs = {ids.response_id(q, gone.username) for q in ("q0", "q1")}
    their_pairs = set(writer_pairs(pairs, theirs))
    assert len(their_pairs) == 4  # each of their 2 answers is in 2 of the 3 pairs of its question

    result = withdraw(store, gone, "asked by message", s1, run_folder=run)
    assert result.now and result.retired == 4
    assert "; 4 study-2 pairs holding their answers retired (no longer handed out)" in result.message
    assert set(store.retired_items(s2.id)) == their_pairs
    assert set(store.items(s2.id)) == set(pairs["pair_id"]) - their_pairs
    key = ids.participant_key(gone.username)
    for path in run.rglob("*.parquet"):
        text = pd.read_parquet(path).astype(str).to_csv()
        if "release" in path.parts:  # left to the next release build
            assert key in text
            continue
        assert key not in text and not any(r in text for r in theirs) and not any(p in text for p in their_pairs), path
    assert len(pd.read_parquet(run / "pairs.parquet")) == len(pairs) - 4
    assert len(pd.read_parquet(run / "ratings.parquet")) == len(pairs) - 4
    # the leave-out still knows their answers and pairs, though no file names them any more
    found = withdrawn_in(store, "s", run / "private")
    assert found.responses == theirs and found.pairs == their_pairs
    assert withdraw(store, store.participant(s1.id, gone.username), "again", s1, run_folder=run).now is False
    assert store.retired_items(s2.id) == sorted(their_pairs)  # once


# --- quality checks of a retired pair never fail the rater ---------------------------------------------
class _NoArgilla:
    api_url = None


def test_a_retired_repeat_check_counts_neither_way_and_the_rater_still_passes(store: Store, tmp_path: Path) -> None:
    from datetime import datetime, timezone

    from crowdpref import checks
    from crowdpref.argilla_client import SubmittedAnswer
    from crowdpref.collection import Collection
    from crowdpref.config import parse_study
    from crowdpref.store import PASSED
    from crowdpref.study2 import Study2Spec

    config = parse_study({"name": "s", "participants": "simulated", "study1": {"responses_per_question": 3},
                          "study2": {"pairs_per_participant": 2, "ratings_per_pair": 1,
                                     "checks": {"gold_pairs": 1, "repeated_pairs": 1}}}, source="test")
    questions = pd.DataFrame({"question_id": ["q_1"], "question": ["Q?"], "category": ["empathy"]})
    responses = pd.DataFrame({"response_id": ["r_a", "r_b", "r_c"], "question_id": ["q_1"] * 3,
                              "text": ["answer a", "answer b", "answer c"]})
    pairs = make_pairs(responses.assign(category="empathy"), "all", seed=1).pairs
    collection = Collection(Study2Spec(config, pairs, responses, questions), _NoArgilla(), tmp_path / "study2",
                            store)  # type: ignore[arg-type]
    claimed = store.claim(collection.info, "a" * 24, "simulated", checks=collection.spec.check_items)
    assert isinstance(claimed, Claimed)
    rater = claimed.participant
    [repeat] = [i for i in rater.items if checks.is_check(i) and checks.check_kind(i) == checks.REPEAT]
    [gold] = [i for i in rater.items if checks.is_check(i) and checks.check_kind(i) == checks.GOLD]
    pair = checks.repeated_pair(repeat)
    other = next(i for i in rater.items if not checks.is_check(i) and i != pair)
    good = 1 if checks.gold_good_is_a(gold) else config.study2.scale_points
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    _submit(store, collection.info, claimed, [other, gold])  # the pair and its repeat still held
    store.retire_items(collection.info.id, [pair], "a writer withdrew", repeats={repeat: pair})
    rater = store.participant(collection.info.id, rater.username)
    assert rater.status == COMPLETE
    own = [SubmittedAnswer(item, "u", "submitted", {"preference": value}, at) for item, value in
           ((other, 3), (gold, good))]
    collection._grade_checks(rater, own)  # the gold check passed; the retired repeat is not asked for
    assert store.participant(collection.info.id, rater.username).check_verdict == PASSED
