"""Quality checks that count, on the real embedded Argilla and the study store: participants
who fail them are handled as configured (``on_fail: exclude``), their slots are answered by
someone else, and the export counts R answers per item from people who passed. The simulated
crowd is never told a check's answer: careful participants read the instruction (study 1) or
the answers (study 2), careless ones do not."""

from __future__ import annotations

import pandas as pd
import pytest

from crowdpref import checks
from crowdpref.argilla_client import AnnotatorSession, ArgillaOwner
from crowdpref.config import parse_study
from crowdpref.pairing import make_pairs
from crowdpref.simulation.crowd import SimulatedCrowd
from crowdpref.store import COMPLETE, EXCLUDED, Claimed, Store
from crowdpref.study1 import export_responses, study1_collection
from crowdpref.study2 import export_ratings, study2_collection
from tests.integration.test_study1_collection import Clock, _questions
from tests.integration.test_study2_collection import _study1_export

pytestmark = pytest.mark.integration


def _study1_config(name: str, on_fail: str):
    return parse_study({
        "name": name, "seed": 3, "participants": "simulated",
        "study1": {"responses_per_question": 2, "questions_per_participant": 3, "inactive_after_minutes": 30,
                   "pool_size": 2, "checks": {"count": 1, "on_fail": on_fail}},
        "study2": {"pairs_per_participant": 6},
        "crowd": {"dropout_rate": 0, "low_effort_rate": 0, "offensive_rate": 0, "never_start_rate": 0,
                  "arrivals_per_visit": 3},
    }, source="test")


def test_a_writer_who_fails_the_check_is_excluded_and_their_questions_are_answered_again(
        argilla_server, tmp_path, unique):
    config = _study1_config(f"k{unique}", "exclude")
    prefix = config.study1.username_prefix
    owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}", clock=Clock())
    collection = study1_collection(config, _questions(), owner, tmp_path, store)
    collection.refill_pool()
    careless = f"{prefix}-0002"  # never reads instructions: answers the check like any question
    crowd = SimulatedCrowd(config.crowd, config.seed, careless={careless})
    truth = tmp_path / "private" / "truth.parquet"

    # 12 slots (6 questions x R=2, Q=3): three writers take 9 and finish; the careless one fails
    report = crowd.play_study1(collection, argilla_server.api_url, _questions(), truth)
    assert report.arrived == 3 and report.kinds.get("followed_instruction") == 2
    collection.monitor()  # reads the answers back (what the portal's finish page and every collection run do)
    info = collection.info
    failed = store.participant(info.id, careless)
    assert failed.status == COMPLETE and failed.check_verdict == "failed" and failed.excluded_at is not None
    assert len(failed.excluded) == 3 and not [i for i in failed.submitted if not checks.is_check(i)]
    passed = [p for p in store.participants(info.id) if p.username != careless]
    assert [p.check_verdict for p in passed] == ["passed", "passed"]
    progress = collection.progress()
    assert progress.unclaimed == 6 and not progress.complete  # 3 never claimed + 3 excluded

    # the next arrivals take the free slots: one the never-claimed three, one the excluded three
    report = crowd.play_study1(collection, argilla_server.api_url, _questions(), truth)
    assert report.arrived == 2 and report.full
    assert collection.monitor().complete
    kinds = [e["kind"] for e in store.events(info.id)]
    assert kinds.count("excluded") == 1 and kinds.count("reallocated") >= 3  # the excluded slots, re-claimed
    assert kinds.count("check_graded") == 5  # one check per finished writer

    frame, report_ = export_responses(collection, tmp_path)
    assert report_["valid"], report_["anomalies"]
    assert frame.groupby("question_id").size().tolist() == [2] * 6  # R counted answers per question
    assert not frame["question_id"].map(checks.is_check).any()
    assert report_["checks"]["failed"] == 1 and report_["checks"]["excluded_participants"] == 1
    assert report_["checks"]["excluded_items"] == 3 and report_["checks"]["passed"] == 4
    # the excluded writer's answers stay in their Argilla dataset (the raw record), never in the export
    excluded_key = report_["checks"]["failed_participant_keys"][0]
    assert excluded_key not in set(frame["participant_key"])
    kept_apart = pd.read_parquet(tmp_path / "responses_excluded.parquet")  # for the raw release
    assert set(kept_apart["participant_key"]) == {excluded_key} and len(kept_apart) == 3
    people = pd.read_parquet(tmp_path / "participants.parquet").set_index("participant_key")
    assert people.loc[excluded_key, "status"] == "excluded" and people.loc[excluded_key, "checks_verdict"] == "failed"
    assert (people["checks_verdict"] == "passed").sum() == 4
    # (read by the owner: the writer's own access ended when they finished)
    kept = owner.answers(owner.find_dataset(collection.dataset_name, careless))
    assert len(failed.assignments) == len([a for a in kept if a.status == "submitted"]) > 0


def test_on_fail_keep_flags_the_writer_and_keeps_their_answers(argilla_server, tmp_path, unique):
    config = _study1_config(f"f{unique}", "keep")
    owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}", clock=Clock())
    collection = study1_collection(config, _questions(), owner, tmp_path, store)
    careless = f"{config.study1.username_prefix}-0001"
    crowd = SimulatedCrowd(config.crowd.model_copy(update={"arrivals_per_visit": 4}), config.seed,
                           careless={careless})
    crowd.play_study1(collection, argilla_server.api_url, _questions(), tmp_path / "private" / "truth.parquet")
    assert collection.monitor().complete  # four writers are enough: nobody's work was excluded
    flagged = store.participant(collection.info.id, careless)
    assert flagged.check_verdict == "failed" and flagged.excluded_at is None and len(flagged.submitted) == 4
    frame, report = export_responses(collection, tmp_path)
    assert report["checks"]["failed"] == 1 and report["checks"]["excluded_participants"] == 0
    assert frame.groupby("question_id").size().tolist() == [2] * 6


def test_gold_and_repeated_pairs_catch_a_rater_who_always_picks_a(argilla_server, tmp_path, unique):
    config = parse_study({
        "name": f"g{unique}", "seed": 4, "participants": "simulated",
        "study1": {"responses_per_question": 4, "questions_per_participant": 3},
        "study2": {"ratings_per_pair": 3, "pairs_per_participant": 9, "inactive_after_minutes": 30, "pool_size": 0,
                   "checks": {"gold_pairs": 1, "repeated_pairs": 1, "on_fail": "exclude"}},
        "crowd": {"random_clicker_rate": 0, "rater_noise": 0.5, "never_start_rate": 0, "dropout_rate": 0,
                  "arrivals_per_visit": 1},
    }, source="test")
    questions, responses, hidden = _study1_export()
    pairs = make_pairs(responses, config.study2.pairs, config.seed).pairs  # 18 pairs x 3 = 54 ratings, 6 raters
    owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}", clock=Clock())
    collection = study2_collection(config, pairs, responses, questions, owner, tmp_path, store)

    # a rater who clicks "strong preference for A" on everything, whatever they are shown
    lazy = collection.claim("always-a", "simulated")
    assert isinstance(lazy, Claimed)
    held = lazy.participant.items
    gold = [i for i in held if checks.is_check(i) and checks.check_kind(i) == checks.GOLD]
    repeat = [i for i in held if checks.is_check(i) and checks.check_kind(i) == checks.REPEAT]
    assert len(held) == 11 and len(gold) == 1 and len(repeat) == 1
    first = checks.repeated_pair(repeat[0])
    assert first in held and lazy.participant.swapped[repeat[0]] is (not lazy.participant.swapped[first])
    session = AnnotatorSession(argilla_server.api_url, lazy.participant.username, owner.passwords(lazy.participant.username))
    try:
        dataset = next(d for d in session.datasets() if d["name"] == collection.dataset_name)
        pending = session.pending_records(dataset["id"])
        assert len(pending) == 11
        session.submit([(r["id"], {"preference": 1}) for r in pending])
    finally:
        session.close()
    state = collection.refresh(lazy.participant)
    assert state.status == COMPLETE and state.checks_answered == 2
    assert state.checks_passed == int(checks.gold_good_is_a(gold[0]))  # the repeat is never consistent
    assert state.check_verdict == "failed" and state.excluded_at is not None
    assert all(a.status == EXCLUDED for a in state.assignments if not checks.is_check(a.item_id))

    # careful raters arrive one by one until every pair has its 3 counted ratings; they pass
    crowd = SimulatedCrowd(config.crowd, config.seed)
    for _ in range(10):
        crowd.play_study2(collection, argilla_server.api_url, hidden, 8)
        if collection.monitor().complete:
            break
    assert collection.progress().complete
    others = [p for p in store.participants(collection.info.id) if p.username != state.username]
    assert len(others) == 6 and {p.check_verdict for p in others} == {"passed"}
    frame, report = export_ratings(collection, tmp_path)
    assert report["valid"], report["anomalies"]
    assert frame.groupby("pair_id").size().tolist() == [3] * 18
    assert not frame["pair_id"].map(checks.is_check).any()
    assert report["checks"]["excluded_participants"] == 1 and report["checks"]["excluded_items"] == 9
    lazy_key = report["checks"]["failed_participant_keys"]
    assert len(lazy_key) == 1 and lazy_key[0] not in set(frame["rater_key"])
    kept_apart = pd.read_parquet(tmp_path / "ratings_excluded.parquet")
    assert set(kept_apart["rater_key"]) == set(lazy_key) and len(kept_apart) == 9
    assert pd.Series(frame["rater_key"]).nunique() == 6
