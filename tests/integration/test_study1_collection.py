"""Study 1 end to end on the real embedded Argilla: 6 questions, R=2, Q=3 -> 4 participants;
provisioning is idempotent and self-repairing; the simulated crowd answers with one drop-out;
the drop-out is released and re-allocated; the export has exactly R answers per question."""

from __future__ import annotations

import json
import stat

import httpx
import pandas as pd
import pytest

from crowdpref.argilla_client import ArgillaOwner
from crowdpref.config import parse_study
from crowdpref.crowd import SimulatedCrowd
from crowdpref.errors import CrowdprefError
from crowdpref.ids import stable_id
from crowdpref.study1 import export_responses, study1_collection

pytestmark = pytest.mark.integration

QUESTIONS = [
    ("How would you tell a close friend that their new partner makes you uneasy?", "communication-skills"),
    ("What would you do if a colleague kept taking credit for shared work?", "conflict-resolution"),
    ("How should you respond when a stranger's joke at a party offends someone nearby?", "social-norms"),
    ("How would you comfort a neighbour whose pet has just died?", "empathy"),
    ("What is a fair way to split chores with a flatmate who works night shifts?", "negotiation-strategies"),
    ("How can you tell whether a friend's 'I'm fine' really means they are fine?", "reading-social-cues"),
]


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _config(name: str):
    return parse_study(
        {
            "name": name,
            "seed": 11,
            "study1": {"responses_per_question": 2, "questions_per_participant": 3, "inactive_after_minutes": 30},
            "study2": {"pairs_per_participant": 6},
            "crowd": {"dropout_rate": 0, "low_effort_rate": 0, "offensive_rate": 0},
        },
        source="test",
    )


def _questions() -> pd.DataFrame:
    return pd.DataFrame(
        [{"question_id": stable_id("q_", text.casefold()), "question": text, "category": cat} for text, cat in QUESTIONS]
    )


def _server_counts(api_url: str, api_key: str, prefix: str) -> dict[str, int]:
    headers = {"X-Argilla-Api-Key": api_key}
    users = [u for u in httpx.get(f"{api_url}/api/v1/users", headers=headers).json()["items"] if u["username"].startswith(prefix)]
    workspaces = [w for w in httpx.get(f"{api_url}/api/v1/me/workspaces", headers=headers).json()["items"] if w["name"].startswith(prefix)]
    datasets = [d for d in httpx.get(f"{api_url}/api/v1/me/datasets", headers=headers).json()["items"]
                if d["workspace_id"] in {w["id"] for w in workspaces}]
    records = sum(
        httpx.get(f"{api_url}/api/v1/datasets/{d['id']}/progress", headers=headers).json()["total"] for d in datasets
    )
    return {"users": len(users), "workspaces": len(workspaces), "datasets": len(datasets), "records": records}


def test_study1_collection_with_dropout_and_reallocation(argilla_server, tmp_path, unique, monkeypatch):
    config = _config(f"t{unique}")
    prefix = config.study1.username_prefix
    owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
    clock = Clock()
    collection = study1_collection(config, _questions(), owner, tmp_path, clock=clock)

    ledger = collection.ledger()
    assert [len(p.items) for p in ledger.participants] == [3, 3, 3, 3]
    assert ledger.check() == []

    # provisioning crashes half-way (second participant: account made, records not logged) ...
    real_log = owner.log_records
    calls = {"n": 0}

    def crash_on_second(dataset, records):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("simulated crash while logging records")
        real_log(dataset, records)

    monkeypatch.setattr(owner, "log_records", crash_on_second)
    with pytest.raises(RuntimeError):
        collection.provision(ledger)
    monkeypatch.setattr(owner, "log_records", real_log)
    # ... and a rerun (from the saved ledger) completes it
    ledger = collection.ledger()
    assert [p.status for p in ledger.participants] == ["provisioned", "allocated", "allocated", "allocated"]
    collection.provision(ledger)
    counts = _server_counts(argilla_server.api_url, argilla_server.owner_api_key, prefix)
    assert counts == {"users": 4, "workspaces": 4, "datasets": 4, "records": 12}
    collection.provision(collection.ledger())  # nothing left to do
    for participant in ledger.participants:  # force a full second pass over every participant
        participant.status = "allocated"
    collection.provision(ledger)
    assert _server_counts(argilla_server.api_url, argilla_server.owner_api_key, prefix) == counts

    roster_file = tmp_path / "private" / "study1-roster.json"
    assert stat.S_IMODE(roster_file.stat().st_mode) == 0o600
    passwords = {u: e["password"] for u, e in json.loads(roster_file.read_text()).items()}
    assert len(passwords) == 4 and all(len(p) >= 26 for p in passwords.values())

    # the owner trying the UI in participant 1's workspace does not count as their answer
    first = ledger.participants[0]
    record_id = owner.record_ids(owner.find_dataset(collection.dataset_name, first.username))[first.items[0]]
    tried = httpx.post(f"{argilla_server.api_url}/api/v1/records/{record_id}/responses",
                       headers={"X-Argilla-Api-Key": argilla_server.owner_api_key},
                       json={"status": "submitted", "values": {"response": {"value": "owner test"}, "quality": {"value": 3}}})
    assert tried.status_code == 201, tried.text
    collection.monitor(collection.ledger())
    assert collection.ledger().participant(first.username).submitted == {}

    # the crowd answers; participant 2 drops out after at most 2 of their 3 questions
    dropout = ledger.participants[1].username
    crowd = SimulatedCrowd(config.crowd, config.seed, dropouts={dropout})
    truth = tmp_path / "private" / "truth.parquet"
    report = crowd.play_study1(argilla_server.api_url, passwords, collection.dataset_name, _questions(), truth)
    assert report.participants_played == 4 and report.dropouts == [dropout]

    clock.now += 10 * 60  # ten minutes: nobody is inactive yet
    progress = collection.monitor(collection.ledger())
    assert not progress.complete and progress.released_now == []
    submitted_by_dropout = len(collection.ledger().participant(dropout).submitted)
    assert submitted_by_dropout < 3
    assert progress.submitted == 9 + submitted_by_dropout

    clock.now += 31 * 60  # the drop-out has been quiet for over 30 minutes
    progress = collection.monitor(collection.ledger())
    assert progress.released_now == [dropout]
    ledger = collection.ledger()
    released = ledger.participant(dropout)
    assert released.status == "released" and len(released.released_items) == 3 - submitted_by_dropout
    newcomers = progress.created_now
    assert len(newcomers) == 1 and newcomers[0] == f"{prefix}-0005"
    assert sorted(ledger.participant(newcomers[0]).items) == sorted(released.released_items)
    assert ledger.check() == []
    # the released participant's unanswered records left their dataset: late answers cannot count
    left = owner.record_ids(owner.find_dataset(collection.dataset_name, dropout))
    assert sorted(left) == sorted(released.submitted)

    # the newcomer answers; the collection completes with exactly R answers per question
    passwords = {u: e["password"] for u, e in json.loads(roster_file.read_text()).items()}
    crowd.play_study1(argilla_server.api_url, {newcomers[0]: passwords[newcomers[0]]},
                      collection.dataset_name, _questions(), truth)
    progress = collection.monitor(collection.ledger())
    assert progress.complete and progress.submitted == 12

    frame, validation = export_responses(collection, tmp_path)
    assert validation["valid"], validation["anomalies"]
    assert validation["items_with_exactly_r_answers"] == 6 and validation["released_participants"] == 1
    assert validation["workspaces_matching_allocation"] == 5
    responses = pd.read_parquet(tmp_path / "responses.parquet")
    assert list(responses.columns) == ["response_id", "question_id", "category", "participant_key", "text",
                                       "quality", "submitted_at"]
    assert responses.groupby("question_id").size().tolist() == [2] * 6
    assert responses["response_id"].is_unique
    assert responses.groupby("question_id")["participant_key"].nunique().tolist() == [2] * 6
    assert responses["quality"].between(1, 5).all() and (responses["text"].str.len() > 10).all()
    # no secrets or usernames in what a stage exports
    exported = (tmp_path / "responses.parquet").read_bytes() + (tmp_path / "study1" / "validation.json").read_bytes()
    for username, password in passwords.items():
        assert password.encode() not in exported and username.encode() not in exported
    assert argilla_server.owner_api_key.encode() not in exported
    # the truth file holds each simulated answer's hidden quality
    assert len(pd.read_parquet(truth)) == 12


def test_existing_username_with_another_password_is_refused(argilla_server, tmp_path, unique):
    config = _config(f"u{unique}")
    owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
    collection = study1_collection(config, _questions(), owner, tmp_path)
    first = collection.ledger().participants[0].username
    workspace = owner.ensure_workspace(first)
    owner.ensure_annotator(first, "someone-elses-password-123", workspace)
    with pytest.raises(CrowdprefError, match=f"'{first}'.*already exists with another password"):
        collection.provision(collection.ledger())


def test_unreachable_argilla_and_wrong_key_are_one_line(argilla_server):
    from crowdpref.argilla_client import check_server

    with pytest.raises(CrowdprefError, match="unreachable at http://127.0.0.1:9.*crowdpref up"):
        check_server("http://127.0.0.1:9", "whatever")
    with pytest.raises(CrowdprefError, match="rejected the API key") as err:
        check_server(argilla_server.api_url, "wrong-key-123456")
    assert "wrong-key" not in str(err.value) and "\n" not in str(err.value)
