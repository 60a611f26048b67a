"""Study 2 on the real embedded Argilla, from a small study-1 export: pairs -> provisioning ->
simulated ratings with one drop-out -> release and re-allocation -> export with exactly R
ratings per pair; nobody from study 1 rated; a rerun creates no duplicates; bad ratings are
rejected, never clamped."""

from __future__ import annotations

import pandas as pd
import pytest

from crowdpref.argilla_client import ArgillaOwner, SubmittedAnswer
from crowdpref.collection import Participant
from crowdpref.config import parse_study
from crowdpref.crowd import SimulatedCrowd
from crowdpref.errors import CrowdprefError
from crowdpref.pairing import make_pairs
from crowdpref.pseudonyms import Pseudonyms
from crowdpref.runfolder import RunFolder
from crowdpref.study2 import Study2Spec, export_ratings, ratings_frame, study1_complete, study2_collection
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
        "name": name, "seed": 4,
        "study1": {"responses_per_question": 4, "questions_per_participant": 3},
        "study2": {"ratings_per_pair": 3, "pairs_per_participant": 9, "inactive_after_minutes": 30},
        "crowd": {"random_clicker_rate": 0, "rater_noise": 0.5},
    }, source="test")


def test_study2_end_to_end_with_dropout(argilla_server, tmp_path, unique):
    config = _config(f"s{unique}")
    questions, responses, hidden = _study1_export()
    pairs = make_pairs(responses, config.study2.pairs, config.seed).pairs
    assert len(pairs) == 18
    owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
    clock = Clock()
    collection = study2_collection(config, pairs, responses, questions, owner, tmp_path, clock=clock)
    ledger = collection.ledger()
    assert [len(p.items) for p in ledger.participants] == [9] * 6  # 18 pairs x 3 ratings / 9
    collection.provision(ledger)
    collection.provision(collection.ledger())
    prefix = config.study2.username_prefix
    counts = _server_counts(argilla_server.api_url, argilla_server.owner_api_key, prefix)
    assert counts == {"users": 6, "workspaces": 6, "datasets": 6, "records": 54}

    # what a rater sees: the question, answer A and answer B in the recorded order
    first = collection.ledger().participants[0]
    dataset = owner.find_dataset(collection.dataset_name, first.username)
    shown = next(iter(dataset.records))
    pair = pairs.set_index("pair_id").loc[shown.id]
    text = responses.set_index("response_id")["text"]
    assert shown.fields["response_a"] == text[pair["response_a_id"]]
    assert shown.fields["response_b"] == text[pair["response_b_id"]]
    assert [q.name for q in dataset.settings.questions] == ["preference"]
    assert list(dataset.settings.questions[0].values) == list(range(1, 9))

    quitter = ledger.participants[3].username
    crowd = SimulatedCrowd(config.crowd, config.seed, dropouts={quitter})
    roster = collection.roster
    usernames = [p.username for p in ledger.participants]
    crowd.play_study2(argilla_server.api_url, roster.passwords(usernames), collection.dataset_name, pairs,
                      hidden, 8, assigned={u: 9 for u in usernames})
    clock.now += 31 * 60
    progress = collection.monitor(collection.ledger())
    assert progress.released_now == [quitter] and len(progress.created_now) >= 1
    newcomers = progress.created_now
    crowd.play_study2(argilla_server.api_url, roster.passwords(newcomers), collection.dataset_name, pairs, hidden, 8)
    progress = collection.monitor(collection.ledger())
    assert progress.complete and progress.submitted == 54

    study1_usernames = [f"{config.study1.username_prefix}-{i:04d}" for i in range(1, 5)]
    frame, report = export_ratings(collection, tmp_path, study1_usernames)
    assert report["valid"], report["anomalies"]
    assert report["study1_participants_who_rated"] == 0
    ratings = pd.read_parquet(tmp_path / "ratings.parquet")
    assert ratings.groupby("pair_id").size().tolist() == [3] * 18
    assert not ratings.duplicated(["pair_id", "rater_key"]).any()
    assert ratings["rating"].between(1, 8).all() and ratings["rating_id"].is_unique
    # ratings follow the hidden quality once un-swapped: the second answer (higher j) is better
    fixed = ratings["rating"].where(~ratings["swapped"], 9 - ratings["rating"])
    assert fixed.mean() > 5.0
    # a rerun of provisioning creates nothing new
    collection.provision(collection.ledger())
    after = _server_counts(argilla_server.api_url, argilla_server.owner_api_key, prefix)
    assert after["users"] == 6 + len(newcomers) and after["datasets"] == after["users"]


def test_ratings_outside_the_scale_are_rejected_not_clamped(tmp_path):
    config = _config("bad")
    questions, responses, _ = _study1_export(1, 2)
    pairs = make_pairs(responses, "all", 1).pairs
    spec = Study2Spec(config.model_copy(update={"study2": config.study2.model_copy(update={"pairs_per_participant": 1})}),
                      pairs, responses, questions)
    participant = Participant("rater", [pairs["pair_id"][0]], submitted={pairs["pair_id"][0]: 1.8e9})
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
