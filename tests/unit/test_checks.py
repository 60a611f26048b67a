"""Quality checks (crowdpref.checks): what each check asks, how it is graded, the verdict rule;
the simulated crowd passes by reading (never by being told) and its careless members fail; the
store holds checks as assignments, records verdicts and excludes work so its slots return to
the pool."""

from __future__ import annotations

import random
from collections import Counter

import pandas as pd
import pytest

from crowdpref import checks
from crowdpref.config import parse_study
from crowdpref.simulation.crowd import SimulatedCrowd, perceived_quality, read_instruction
from crowdpref.store import COMPLETE, EXCLUDED, SUBMITTED, Claimed, Store, StoreError
from crowdpref.study1 import Study1Spec
from crowdpref.study2 import Study2Spec


# --- study 1: instructed-response items -----------------------------------------------------------
def test_instructed_items_are_per_participant_distinct_and_deterministic():
    a = checks.instructed_ids(7, "hash-a", 3)
    assert a == checks.instructed_ids(7, "hash-a", 3) and len(set(a)) == 3
    assert all(checks.is_check(i) and checks.check_kind(i) == checks.INSTRUCTED for i in a)
    assert len({checks.instruction(i, 1, 5).word for i in a}) == 3  # three different words
    assert a != checks.instructed_ids(7, "hash-b", 3) and a != checks.instructed_ids(8, "hash-a", 3)
    words = Counter(checks.instruction(i, 1, 5).word for n in range(400)
                    for i in checks.instructed_ids(1, f"h{n}", 1))
    assert len(words) == len(checks.INSTRUCTED_WORDS)  # every word gets used: no shared answer
    ratings = Counter(checks.instruction(i, 1, 5).rating for n in range(400) for i in checks.instructed_ids(1, f"h{n}", 1))
    assert set(ratings) == {1, 2, 4}  # never the middle or the top of the scale, where habit lands


def test_instructed_grading():
    item = checks.instructed_ids(3, "k", 1)[0]
    asked = checks.instruction(item, 1, 5)
    assert checks.grade_instructed(item, asked.word, asked.rating, 1, 5)
    assert checks.grade_instructed(item, f'  "{asked.word.upper()}".', asked.rating, 1, 5)
    assert checks.grade_instructed(item, f"ok: {asked.word}", asked.rating, 1, 5)
    assert not checks.grade_instructed(item, asked.word, asked.rating % 5 + 1, 1, 5)  # wrong rating
    assert not checks.grade_instructed(item, "I would talk to them kindly.", asked.rating, 1, 5)
    assert not checks.grade_instructed(item, None, asked.rating, 1, 5)
    essay = f"I would talk to them about the {asked.word} and explain why it matters to me."
    assert not checks.grade_instructed(item, essay, asked.rating, 1, 5)  # an answer, not the instruction


def test_the_crowd_reads_the_instruction_and_careless_writers_do_not():
    config = parse_study({"name": "c", "participants": "simulated",
                          "study1": {"checks": {"count": 2}, "responses_per_question": 2, "questions_per_participant": 1},
                          "study2": {"pairs_per_participant": 1},
                          "questions": {"categories": ["empathy"]}}, source="test")
    questions = pd.DataFrame({"question_id": ["q_1"], "question": ["How would you comfort a friend?"],
                              "category": ["empathy"]})
    spec = Study1Spec(config, questions)
    items = spec.check_items(["q_1"], {}, "somebody")
    assert len(items) == 2 and all(swapped is None for _, swapped in items)
    record = spec.record(items[0][0])
    text = record.fields["question"]
    word, rating = read_instruction(text)
    assert (word, rating) == (checks.instruction(items[0][0], 1, 5).word, checks.instruction(items[0][0], 1, 5).rating)
    assert not record.metadata  # Argilla gets the question only (issue 34: no metadata nothing reads back)
    assert read_instruction("How would you comfort a friend?") == (None, None)
    crowd = SimulatedCrowd(config.crowd.model_copy(update={"careless_rate": 0.3}), seed=1)
    careless = [u for u in (f"u{n}" for n in range(200)) if crowd.is_careless(u)]
    assert 40 <= len(careless) <= 80
    assert SimulatedCrowd(config.crowd, seed=1, careless={"x"}).is_careless("x")
    assert not SimulatedCrowd(config.crowd, seed=1, careless={"x"}).is_careless("y")


# --- study 2: gold and repeated pairs ---------------------------------------------------------------
def test_gold_pairs_are_judged_right_by_careful_readers_and_by_chance_by_clickers():
    for gold in checks.GOLD_PAIRS:
        assert perceived_quality(gold.good) - perceived_quality(gold.bad) >= 0.5, gold.bad_kind
    config = parse_study({"name": "g", "participants": "simulated",
                          "crowd": {"rater_noise": 1.0, "position_bias": 0.3, "random_clicker_rate": 0}},
                         source="test")
    careful = SimulatedCrowd(config.crowd, seed=2)
    clicker = SimulatedCrowd(config.crowd.model_copy(update={"random_clicker_rate": 1.0}), seed=2)
    ids = [i for n in range(300) for i in checks.gold_ids(5, f"r{n}", 1)]
    passes = {"careful": 0, "clicker": 0}
    for n, item in enumerate(ids):
        gold = checks.GOLD_PAIRS[checks.gold_index(item)]
        a, b = (gold.good, gold.bad) if checks.gold_good_is_a(item) else (gold.bad, gold.good)
        for name, crowd in (("careful", careful), ("clicker", clicker)):
            rating = crowd.rating(f"rater{n}", "pair", perceived_quality(a), perceived_quality(b), 8, view=item)
            passes[name] += checks.grade_gold(item, rating, 8)
    assert passes["careful"] >= 0.97 * len(ids)
    assert 0.4 * len(ids) <= passes["clicker"] <= 0.6 * len(ids)
    assert {checks.gold_good_is_a(i) for i in ids} == {True, False}  # the good answer is not always A
    assert len({checks.gold_index(i) for i in ids}) == len(checks.GOLD_PAIRS)


def test_gold_grading_and_repeat_grading():
    good_a = next(i for n in range(50) for i in checks.gold_ids(1, f"x{n}", 1) if checks.gold_good_is_a(i))
    good_b = next(i for n in range(50) for i in checks.gold_ids(1, f"x{n}", 1) if not checks.gold_good_is_a(i))
    assert checks.grade_gold(good_a, 4, 8) and not checks.grade_gold(good_a, 5, 8)
    assert checks.grade_gold(good_b, 5, 8) and not checks.grade_gold(good_b, 1, 8)
    assert not checks.grade_gold(good_a, None, 8)
    # first seen unswapped and rated 2 (A = first); again swapped: the same view is 7 (B = first)
    assert checks.grade_repeat(2, False, 7, True, 8, tolerance=0)
    assert checks.grade_repeat(2, False, 5, True, 8, tolerance=2)  # 2 vs 4: within 2
    assert not checks.grade_repeat(2, False, 2, True, 8, tolerance=2)  # 2 vs 7: flipped preference
    assert checks.grade_repeat(1, False, 1, True, 8, tolerance=7)  # 1 vs 8: the widest tolerance
    assert not checks.grade_repeat(1, True, None, False, 8, tolerance=7)


def test_careful_raters_are_consistent_on_a_repeat_and_clickers_often_not():
    config = parse_study({"name": "r", "participants": "simulated", "crowd": {"rater_noise": 1.0}}, source="test")
    careful = SimulatedCrowd(config.crowd.model_copy(update={"random_clicker_rate": 0}), seed=4)
    clicker = SimulatedCrowd(config.crowd.model_copy(update={"random_clicker_rate": 1.0}), seed=4)
    rng = random.Random(0)
    consistent = Counter()
    for n in range(400):
        qa, qb = rng.random(), rng.random()
        for name, crowd in (("careful", careful), ("clicker", clicker)):
            first = crowd.rating(f"u{n}", "same-pair", qa, qb, 8, view="pr_1")  # A = first answer
            again = crowd.rating(f"u{n}", "same-pair", qb, qa, 8, view="check-r-pr_1", flipped=True)  # swapped
            consistent[name] += checks.grade_repeat(first, False, again, True, 8, tolerance=2)
    assert consistent["careful"] >= 0.95 * 400
    assert consistent["clicker"] <= 0.65 * 400


def test_study2_checks_show_a_repeat_in_the_opposite_order():
    config = parse_study({"name": "s", "participants": "simulated", "study1": {"responses_per_question": 3},
                          "study2": {"pairs_per_participant": 2,
                                     "checks": {"gold_pairs": 2, "repeated_pairs": 1}}}, source="test")
    questions = pd.DataFrame({"question_id": ["q_1"], "question": ["Q?"], "category": ["empathy"]})
    responses = pd.DataFrame({"response_id": ["r_a", "r_b", "r_c"], "question_id": ["q_1"] * 3,
                              "text": ["answer a", "answer b", "answer c"]})
    pairs = pd.DataFrame({"pair_id": ["pr_1", "pr_2", "pr_3"], "question_id": ["q_1"] * 3, "category": ["empathy"] * 3,
                          "first_response_id": ["r_a", "r_a", "r_b"], "second_response_id": ["r_b", "r_c", "r_c"],
                          "response_a_id": ["r_a", "r_a", "r_b"], "response_b_id": ["r_b", "r_c", "r_c"],
                          "swapped": [False] * 3})
    spec = Study2Spec(config, pairs, responses, questions)
    items = spec.check_items(["pr_1", "pr_3"], {"pr_1": True, "pr_3": False}, "rater")
    gold = [i for i, _ in items if checks.check_kind(i) == checks.GOLD]
    repeat = [(i, s) for i, s in items if checks.check_kind(i) == checks.REPEAT]
    assert len(gold) == 2 and len({checks.gold_index(i) for i in gold}) == 2 and len(repeat) == 1
    (item, swapped), = repeat
    original = checks.repeated_pair(item)
    assert original in ("pr_1", "pr_3") and swapped is not {"pr_1": True, "pr_3": False}[original]
    shown = spec.record(item, swapped)
    first = spec.record(original, not swapped)
    assert shown.fields["response_a"] == first.fields["response_b"]
    assert shown.fields["response_b"] == first.fields["response_a"]
    assert not shown.metadata  # no metadata at all: nothing Argilla holds says "check"
    g = spec.record(gold[0])
    assert not g.metadata and set(g.fields) == set(first.fields)  # a gold pair looks like any pair
    # grading: the repeat needs the first rating; until it is in, it is not graded
    assert spec.grade_check(item, {"preference": 3}, {item: ({"preference": 3}, swapped)}) is None
    answers = {original: ({"preference": 2}, not swapped), item: ({"preference": 7}, swapped)}
    assert spec.grade_check(item, {"preference": 7}, answers) is True
    answers[item] = ({"preference": 2}, swapped)
    assert spec.grade_check(item, {"preference": 2}, answers) is False


# --- the verdict ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("total,results,needed,expected", [
    (0, {}, 0, None),
    (2, {}, 2, "unanswered"),
    (2, {"a": True}, 2, "unanswered"),
    (2, {"a": True, "b": True}, 2, "passed"),
    (2, {"a": False}, 2, "failed"),  # can no longer reach 2
    (3, {"a": False}, 2, "unanswered"),
    (3, {"a": False, "b": False}, 2, "failed"),
    (3, {"a": True, "b": True}, 2, "passed"),
    (1, {"a": False}, 0, "passed"),
])
def test_verdict(total, results, needed, expected):
    assert checks.verdict(total, results, needed) == expected


# --- the store: checks held like items, verdicts, exclusion --------------------------------------------
def _planner(items, orders, key_hash):
    return [(f"check-i-{key_hash[:6]}", None)]


def test_the_store_holds_checks_records_verdicts_and_excludes_work(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    info = store.collection("s", "study1", ["q1", "q2", "q3"], copies=1, per_participant=2, seed=1,
                            username_prefix="s-s1", counterbalance=False)
    first = store.claim(info, "person-1", "simulated", checks=_planner)
    assert isinstance(first, Claimed)
    p = first.participant
    items = [i for i in p.items if not checks.is_check(i)]
    check = next(i for i in p.items if checks.is_check(i))
    assert len(items) == 2 and p.held == items + [check]
    store.record_progress(info.id, p.id, {i: 1.0 for i in items}, 1.0)
    assert store.participant(info.id, p.username).status != COMPLETE  # the check is still held
    store.record_progress(info.id, p.id, {check: 2.0}, 2.0)
    assert store.participant(info.id, p.username).status == COMPLETE
    with pytest.raises(StoreError, match="only a finished participant"):
        other = store.claim(info, "person-2", "simulated", checks=_planner)
        store.exclude(info.id, other.participant.id, ["q3"], "test")  # type: ignore[union-attr]
    store.record_checks(info.id, p.id, {check: False}, "failed")
    store.record_checks(info.id, p.id, {check: False}, "failed")  # same again: no new events
    assert store.exclude(info.id, p.id, items, "failed the quality checks") == items
    assert store.exclude(info.id, p.id, items, "again") == []  # once
    state = store.participant(info.id, p.username)
    assert state.check_verdict == "failed" and state.checks_answered == 1 and state.checks_passed == 0
    assert state.excluded == items and list(state.submitted) == [check]
    assert {a.item_id: a.status for a in state.assignments} == {**{i: EXCLUDED for i in items}, check: SUBMITTED}
    assert set(state.visible) == set(items) | {check}  # their records stay in Argilla
    counts = store.item_counts(info.id)
    assert sum(counts.submitted[i] for i in items) == 0 and sum(counts.excluded[i] for i in items) == 2
    kinds = [e["kind"] for e in store.events(info.id)]
    assert kinds.count("check_graded") == 1 and kinds.count("check_verdict") == 1 and kinds.count("excluded") == 1
    # the excluded slots go back to the pool: the next claim takes them, as reallocated slots
    third = store.claim(info, "person-3", "simulated")
    assert isinstance(third, Claimed) and set(third.participant.items) == set(items)
    assert sorted(e["item_id"] for e in store.events(info.id, ["reallocated"])) == sorted(items)
    assert store.check(info.id) == []


def test_gold_outcomes_key_each_rater_as_the_ratings_do(tmp_path):
    """The gold anchor joins graded gold pairs to ratings.parquet by ``rater_key``: the run's
    salted pseudonym of the username. (It once called a function that did not exist: the demo's
    aggregation failed and no test saw it.)"""
    from crowdpref.pseudonyms import Pseudonyms
    from crowdpref.study2 import gold_outcomes

    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    private = tmp_path / "run" / "private"
    assert gold_outcomes(store, "s", private).empty  # no study-2 collection yet
    info = store.collection("s", "study2", ["p1", "p2", "p3"], copies=1, per_participant=2, seed=1,
                            username_prefix="s-s2", counterbalance=False)
    gold, instructed = f"{checks.CHECK_PREFIX}g-one", f"{checks.CHECK_PREFIX}i-one"
    first = store.claim(info, "person-1", "simulated")
    second = store.claim(info, "person-2", "simulated")
    assert isinstance(first, Claimed) and isinstance(second, Claimed)
    store.record_checks(info.id, first.participant.id, {gold: True, instructed: False}, "passed")
    store.record_checks(info.id, second.participant.id, {gold: False}, "failed")
    frame = gold_outcomes(store, "s", private)
    key = Pseudonyms(private).participant_key  # what ratings.parquet's rater_key holds
    assert sorted(frame.itertuples(index=False, name=None)) == sorted(
        [(key(first.participant.username), True), (key(second.participant.username), False)])  # gold only
    store.close()
