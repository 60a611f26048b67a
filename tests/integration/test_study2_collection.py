"""Study 2 on the real embedded Argilla, from a small study-1 export: pairs -> simulated raters
arrive and claim -> each rating's A/B order counterbalanced within its pair, recorded and
shown as recorded -> one drop-out released, its pairs claimed by the next arrival -> export
with exactly R ratings per pair; a study-1 participant arriving at study 2 is refused; bad
ratings are rejected, never clamped; a counted rating discarded later sends its pair back to the
pool at export and is rated again."""

from __future__ import annotations

import pandas as pd
import pytest

from crowdpref.argilla_client import ArgillaOwner, SubmittedAnswer
from crowdpref.config import parse_study
from crowdpref.errors import CrowdprefError
from crowdpref.pairing import make_pairs
from crowdpref.pseudonyms import Pseudonyms
from crowdpref.reopen import ItemsReopened
from crowdpref.runfolder import RunFolder
from crowdpref.simulation.crowd import SimulatedCrowd
from crowdpref.store import Assignment, Claimed, ParticipantState, Refused, Store
from crowdpref.study1 import study1_collection
from crowdpref.study2 import Study2Spec, export_ratings, ratings_frame, study1_complete, study2_collection
from tests.answer_edits import change_as_author
from tests.integration.test_study1_collection import Clock, _server_counts

pytestmark = pytest.mark.integration


def _study1_export(n_questions: int = 3, per_question: int = 4) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    questions = pd.DataFrame({
        "question_id": [f"q_{i:02d}" for i in range(n_questions)],
        "question": [f"How would you handle awkward situation number {i}?" for i in range(n_questions)],
        "category": ["empathy"] * n_questions,
    })
    responses = pd.DataFrame([
        {"response_id": f"r_{q}_{j}", "question_id": q, "category": "empathy", "participant_key": f"p_{j}",
         "text": f"Answer {j} to {q}: I would talk to them, because it helps.", "quality": 4}
        for q in questions["question_id"] for j in range(per_question)
    ])
    hidden = {rid: (int(rid[-1]) + 1) / 5 for rid in responses["response_id"]}  # answer j has quality (j+1)/5
    return questions, responses, hidden


def _config(name: str):
    return parse_study({
        "name": name, "seed": 4, "participants": "simulated",
        "study1": {"responses_per_question": 4, "questions_per_participant": 3},
        "study2": {"ratings_per_pair": 3, "pairs_per_participant": 9, "inactive_after_minutes": 30, "pool_size": 3},
        "crowd": {"random_clicker_rate": 0, "rater_noise": 0.5, "never_start_rate": 0, "arrivals_per_visit": 6},
    }, source="test")


def test_study2_end_to_end_with_dropout(argilla_server, tmp_path, unique):
    config = _config(f"s{unique}")
    questions, responses, hidden = _study1_export()
    pairs = make_pairs(responses, config.study2.pairs, config.seed).pairs
    assert len(pairs) == 18
    owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
    clock = Clock()
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}", clock=clock)
    collection = study2_collection(config, pairs, responses, questions, owner, tmp_path, store)
    collection.refill_pool()

    # a study-1 participant (same key) arriving at study 2 is refused, and nothing is allocated
    study1 = study1_collection(config, questions, owner, tmp_path, store)
    study1.refill_pool(0)
    assert isinstance(study1.claim("writer-1", "simulated"), Claimed)
    assert collection.claim("writer-1", "simulated") == Refused("excluded")
    assert collection.progress().outstanding == 0

    # six raters arrive (18 pairs x 3 ratings / 9); one goes quiet part-way
    crowd = SimulatedCrowd(config.crowd, config.seed, dropouts={"sim-study2-0004"})
    report = crowd.play_study2(collection, argilla_server.api_url, hidden, 8)
    assert report.arrived == 6 and report.full is False and len(report.dropouts) == 1
    participants = collection.participants()
    assert [len(p.items) for p in participants] == [9] * 6

    # counterbalanced: each pair's 3 raters see it 2 one way and 1 the other, and the record each
    # rater sees shows the answers in the order the store recorded for that rating
    orders = pd.DataFrame([(a.item_id, a.swapped) for p in participants for a in p.assignments],
                          columns=["pair_id", "swapped"])
    per_pair = orders.groupby("pair_id")["swapped"].agg(["sum", "size"])
    assert (per_pair["size"] == 3).all() and per_pair["sum"].isin([1, 2]).all()
    text = responses.set_index("response_id")["text"]
    by_pair = pairs.set_index("pair_id")
    for participant in participants[:2]:
        dataset = owner.find_dataset(collection.dataset_name, participant.username)
        for record in dataset.records:
            pair = by_pair.loc[record.id]
            a, b = ((pair["second_response_id"], pair["first_response_id"]) if participant.swapped[record.id]
                    else (pair["first_response_id"], pair["second_response_id"]))
            assert (record.fields["response_a"], record.fields["response_b"]) == (text[a], text[b])
    dataset = owner.find_dataset(collection.dataset_name, participants[0].username)
    assert [q.name for q in dataset.settings.questions] == ["preference"]
    assert list(dataset.settings.questions[0].values) == list(range(1, 9))

    clock.now += 31 * 60
    progress = collection.monitor()
    quitter = next(p.username for p in participants if p.username in report.dropouts)
    assert progress.released_now == [quitter] and progress.unclaimed > 0
    report = crowd.play_study2(collection, argilla_server.api_url, hidden, 8)
    assert report.arrived == 1  # the next arrival takes the released pairs
    progress = collection.monitor()
    assert progress.complete and progress.submitted == 54

    # a counted rating is discarded in Argilla afterwards: the export reopens that pair instead
    # of exporting a rating that is no longer submitted (nothing is written), and the next
    # arrival rates it again
    rater = collection.participants()[0]
    pair_id = next(item for item in rater.items if item in rater.submitted)
    record_id = owner.record_ids(owner.find_dataset(collection.dataset_name, rater.username))[pair_id]
    change_as_author(argilla_server.api_url, argilla_server.owner_api_key, record_id, rater.username,
                     owner.passwords(rater.username), {"preference": 4})  # their account left its workspace
    with pytest.raises(ItemsReopened) as reopened:
        export_ratings(collection, tmp_path)
    assert reopened.value.items == [pair_id] and "discarded" in str(reopened.value)
    assert not (tmp_path / "ratings.parquet").exists()
    assert collection.progress().unclaimed == 1
    report = crowd.play_study2(collection, argilla_server.api_url, hidden, 8)
    assert report.arrived == 1
    progress = collection.monitor()
    assert progress.complete and progress.submitted == 54

    frame, report = export_ratings(collection, tmp_path)
    assert report["valid"], report["anomalies"]
    assert report["study1_participants_who_rated"] == 0
    ratings = pd.read_parquet(tmp_path / "ratings.parquet")
    assert ratings.groupby("pair_id").size().tolist() == [3] * 18
    assert ratings.groupby("pair_id")["swapped"].sum().isin([1, 2]).all()  # still balanced after the release
    assert not ratings.duplicated(["pair_id", "rater_key"]).any()
    assert ratings["rating"].between(1, 8).all() and ratings["rating_id"].is_unique
    # the displayed A/B ids agree with swapped on every row
    assert (ratings["response_a_id"] == ratings["pair_id"].map(by_pair["second_response_id"])).eq(ratings["swapped"]).all()
    # ratings follow the hidden quality once un-swapped: the second answer (higher j) is better
    fixed = ratings["rating"].where(~ratings["swapped"], 9 - ratings["rating"])
    assert fixed.mean() > 5.0
    # a rerun of the pool refill creates nothing new (monitoring left the pool alone while the
    # crowd kept claiming - the store's clock stands still here -, so the first refill tops it up)
    prefix = config.study2.username_prefix
    collection.refill_pool()
    before = _server_counts(argilla_server.api_url, argilla_server.owner_api_key, prefix)
    collection.refill_pool()
    assert _server_counts(argilla_server.api_url, argilla_server.owner_api_key, prefix) == before


def test_ratings_outside_the_scale_are_rejected_not_clamped(tmp_path):
    config = _config("bad")
    questions, responses, _ = _study1_export(1, 2)
    pairs = make_pairs(responses, "all", 1).pairs
    spec = Study2Spec(config.model_copy(update={"study2": config.study2.model_copy(update={"pairs_per_participant": 1})}),
                      pairs, responses, questions)
    participant = ParticipantState(
        id=1, username="rater", account_id=1, account_state="bound", source="simulated", status="complete",
        claimed_at=1.8e9, last_activity_at=1.8e9, records_logged=True, drop_requested=False,
        assignments=(Assignment(pairs["pair_id"][0], 0, "submitted", False, 1.8e9),))
    answer = SubmittedAnswer(pairs["pair_id"][0], "u", "submitted", {"preference": 9}, None)
    ids = Pseudonyms(tmp_path)
    frame, rejected = ratings_frame(spec, [(participant, answer)], ids)
    key = ids.participant_key("rater")
    assert frame.empty and rejected == [f"rating 9 of {key} on {pairs['pair_id'][0]} is outside 1..8"]


def test_study1_missing_or_invalid_is_a_clear_error(tmp_path):
    run = RunFolder(tmp_path)
    with pytest.raises(CrowdprefError, match="responses.parquet: not found: run collect-responses until study 1 is complete"):
        study1_complete(run)
    (tmp_path / "study1").mkdir()
    _, responses, _ = _study1_export(1, 2)
    responses.to_parquet(run.responses)
    (tmp_path / "study1" / "validation.json").write_text('{"valid": false}')
    with pytest.raises(CrowdprefError, match="did not validate"):
        study1_complete(run)
