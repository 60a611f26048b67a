"""Study 1 end to end on the real embedded Argilla and the study store: 6 questions, R=2, Q=3.
Nobody holds work before they arrive; a warm pool serves claims; a participant arriving two
hours after launch finds their records; a quiet participant is released (counted from their
claim and activity) and the next arrival's claim takes the slots; the export has exactly R
answers per question."""

from __future__ import annotations

import stat
import time

import httpx
import pandas as pd
import pytest

from crowdpref.argilla_client import ArgillaOwner
from crowdpref.config import parse_study
from crowdpref.errors import CrowdprefError
from crowdpref.ids import stable_id
from crowdpref.simulation.crowd import SimulatedCrowd, check_may_play
from crowdpref.store import Claimed, Full, Store
from crowdpref.study1 import export_responses, study1_collection
from crowdpref.tls import shared_context

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
            "participants": "simulated",
            "study1": {"responses_per_question": 2, "questions_per_participant": 3, "inactive_after_minutes": 30,
                       "pool_size": 2},
            "study2": {"pairs_per_participant": 6},
            "crowd": {"dropout_rate": 0, "low_effort_rate": 0, "offensive_rate": 0, "never_start_rate": 0},
        },
        source="test",
    )


def _questions() -> pd.DataFrame:
    return pd.DataFrame(
        [{"question_id": stable_id("q_", text.casefold()), "question": text, "category": cat} for text, cat in QUESTIONS]
    )


def _server_counts(api_url: str, api_key: str, prefix: str) -> dict[str, int]:
    with httpx.Client(base_url=api_url, headers={"X-Argilla-Api-Key": api_key}, timeout=30,
                      verify=shared_context()) as http:  # one client: a new one per call costs a TLS context
        users = [u for u in http.get("/api/v1/users").json()["items"] if u["username"].startswith(prefix)]
        workspaces = [w for w in http.get("/api/v1/me/workspaces").json()["items"] if w["name"].startswith(prefix)]
        datasets = [d for d in http.get("/api/v1/me/datasets").json()["items"]
                    if d["workspace_id"] in {w["id"] for w in workspaces}]
        records = sum(http.get(f"/api/v1/datasets/{d['id']}/progress").json()["total"] for d in datasets)
    return {"users": len(users), "workspaces": len(workspaces), "datasets": len(datasets), "records": records}


def _store(tmp_path, clock) -> Store:
    return Store(f"sqlite:///{tmp_path / 'store.sqlite'}", clock=clock)


def test_study1_claim_time_allocation_release_and_reclaim(argilla_server, tmp_path, unique):
    config = _config(f"t{unique}")
    prefix = config.study1.username_prefix
    owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
    clock = Clock()
    store = _store(tmp_path, clock)
    collection = study1_collection(config, _questions(), owner, tmp_path, store)

    # launch: the pool holds K=2 ready accounts with empty datasets; nobody holds work
    assert collection.refill_pool() == 2
    assert _server_counts(argilla_server.api_url, argilla_server.owner_api_key, prefix) == {
        "users": 2, "workspaces": 2, "datasets": 2, "records": 0}
    assert collection.monitor().released_now == []
    clock.now += 2 * 3600  # two hours: pool accounts are never "inactive" - nobody claimed them
    progress = collection.monitor()
    assert progress.released_now == [] and progress.unclaimed == 12 and progress.pool_ready == 2

    # the first participant arrives two hours after launch: their records are there at once
    first = collection.claim("person-1", "simulated")
    assert isinstance(first, Claimed) and first.new and len(first.participant.items) == 3
    assert first.participant.username == f"{prefix}-0001"  # a warm account
    from crowdpref.argilla_client import AnnotatorSession
    session = AnnotatorSession(argilla_server.api_url, first.participant.username, owner.passwords(first.participant.username))
    dataset = next(d for d in session.datasets() if d["name"] == collection.dataset_name)
    assert sorted(r["external_id"] for r in session.pending_records(dataset["id"])) == sorted(first.participant.items)
    session.close()
    again = collection.claim("person-1", "simulated")  # idempotent: same account, same work
    assert not again.new and again.participant.items == first.participant.items

    # three more arrive: 4 x 3 = 12 slots = 6 questions x R=2; the 5th finds the study full
    others = [collection.claim(f"person-{n}", "simulated") for n in (2, 3, 4)]
    assert all(isinstance(c, Claimed) for c in others)
    assert isinstance(collection.claim("person-5", "simulated"), Full)
    assert store.check(collection.info.id) == []
    held = [item for c in [first, *others] for item in c.participant.items]
    assert sorted(set(held)) == sorted(collection.spec.item_ids()) and len(held) == 12
    assert all(len(set(c.participant.items)) == 3 for c in [first, *others])

    # the owner trying the UI in participant 1's workspace does not count as their answer
    record_id = owner.record_ids(owner.find_dataset(collection.dataset_name, first.participant.username))[
        first.participant.items[0]]
    tried = httpx.post(f"{argilla_server.api_url}/api/v1/records/{record_id}/responses",
                       headers={"X-Argilla-Api-Key": argilla_server.owner_api_key},
                       json={"status": "submitted", "values": {"response": {"value": "owner test"}, "quality": {"value": 3}}})
    assert tried.status_code == 201, tried.text
    collection.monitor()
    assert store.participant(collection.info.id, first.participant.username).submitted == {}

    # the four answer through the annotator API; person-2 answers one, saves a draft, goes quiet
    quitter = others[0].participant.username
    for claimed in [first, *others]:
        s = AnnotatorSession(argilla_server.api_url, claimed.participant.username, owner.passwords(claimed.participant.username))
        ds = next(d for d in s.datasets() if d["name"] == collection.dataset_name)
        pending = s.pending_records(ds["id"])
        if claimed.participant.username == quitter:
            s.submit([(pending[0]["id"], {"response": "A first answer with some reasoning.", "quality": 4})])
            s.submit([(pending[1]["id"], {"response": "A draft I never send", "quality": 2})], status="draft")
        else:
            s.submit([(r["id"], {"response": f"My considered answer to {r['external_id']}.", "quality": 4})
                      for r in pending])
        s.close()

    clock.now += 10 * 60  # ten minutes after the claims: nobody is inactive
    progress = collection.monitor()
    assert not progress.complete and progress.released_now == [] and progress.submitted == 10
    # the draft counted as activity: the quitter's last activity is the server's draft time
    quiet = store.participant(collection.info.id, quitter)
    assert quiet.last_activity_at >= quiet.claimed_at

    clock.now += 31 * 60  # quiet for over 30 minutes since the claim
    progress = collection.monitor()
    assert progress.released_now == [quitter]
    released = store.participant(collection.info.id, quitter)
    assert released.status == "released" and len(released.held) == 0
    released_items = [a.item_id for a in released.assignments if a.status == "released"]
    assert len(released_items) == 2 and progress.unclaimed == 2
    # their unanswered records (the draft included) left their dataset: late answers cannot count
    left = owner.record_ids(owner.find_dataset(collection.dataset_name, quitter))
    assert sorted(left) == sorted(released.submitted)
    assert collection.claim("person-2", "simulated").status == "refused"  # their place was given back

    # the next arrival's claim takes exactly the released slots
    newcomer = collection.claim("person-6", "simulated")
    assert isinstance(newcomer, Claimed) and sorted(newcomer.participant.items) == sorted(released_items)
    kinds = [e["kind"] for e in store.events(collection.info.id)]
    assert kinds.count("reallocated") == 2 and kinds.count("released") == 1 and kinds.count("claimed") == 5
    s = AnnotatorSession(argilla_server.api_url, newcomer.participant.username, owner.passwords(newcomer.participant.username))
    ds = next(d for d in s.datasets() if d["name"] == collection.dataset_name)
    s.submit([(r["id"], {"response": "The newcomer's careful answer.", "quality": 5}) for r in s.pending_records(ds["id"])])
    s.close()
    progress = collection.monitor()
    assert progress.complete and progress.submitted == 12

    frame, validation = export_responses(collection, tmp_path)
    assert validation["valid"], validation["anomalies"]
    assert validation["items_with_exactly_r_answers"] == 6 and validation["released_participants"] == 1
    assert validation["workspaces_matching_allocation"] == 5
    responses = pd.read_parquet(tmp_path / "responses.parquet")
    assert responses.groupby("question_id").size().tolist() == [2] * 6
    assert responses["response_id"].is_unique and set(responses["source"]) == {"simulated"}
    assert responses.groupby("question_id")["participant_key"].nunique().tolist() == [2] * 6
    # no secrets or usernames in what a stage exports; the store file is owner-only
    exported = (tmp_path / "responses.parquet").read_bytes() + (tmp_path / "study1" / "validation.json").read_bytes()
    for account in store.accounts(collection.info.id):
        assert owner.passwords(account.username).encode() not in exported and account.username.encode() not in exported
    assert argilla_server.owner_api_key.encode() not in exported
    assert stat.S_IMODE((tmp_path / "store.sqlite").stat().st_mode) == 0o600
    assert b"person-1" not in (tmp_path / "store.sqlite").read_bytes()  # only salted hashes of keys


def test_simulated_crowd_arrives_claims_and_refuses_real_studies(argilla_server, tmp_path, unique):
    config = _config(f"c{unique}")
    owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
    clock = Clock()
    store = _store(tmp_path, clock)
    collection = study1_collection(config, _questions(), owner, tmp_path, store)
    collection.refill_pool()
    crowd = SimulatedCrowd(config.crowd.model_copy(update={"arrivals_per_visit": 3}), config.seed,
                           dropouts={"sim-study1-0002"})
    truth = tmp_path / "private" / "truth.parquet"
    report = crowd.play_study1(collection, argilla_server.api_url, _questions(), truth)
    assert report.arrived == 3 and report.participants_played == 3 and len(report.dropouts) == 1
    report = crowd.play_study1(collection, argilla_server.api_url, _questions(), truth)
    assert report.arrived == 1 and report.full  # the 4th takes the last 3 slots; the 5th finds it full
    clock.now += 31 * 60
    progress = collection.monitor()
    assert len(progress.released_now) == 1
    report = crowd.play_study1(collection, argilla_server.api_url, _questions(), truth)
    assert report.arrived == 1  # someone new takes the drop-out's slots
    assert collection.monitor().complete
    assert {p.source for p in collection.participants()} == {"simulated"}

    # the guard: a study that takes real people, or a store holding real people, is refused
    real = config.model_copy(update={"participants": "prolific"})
    with pytest.raises(CrowdprefError, match="takes real participants"):
        check_may_play(real, collection)
    check_may_play(real, collection, force=True)  # explicitly forced: allowed
    other = study1_collection(_config(f"m{unique}"), _questions(), owner, tmp_path, store)
    other.refill_pool(0)
    other.claim("PROLIFIC-PID-abc", "prolific")
    with pytest.raises(CrowdprefError, match="1 participants from prolific"):
        check_may_play(_config(f"m{unique}"), other)


def test_existing_username_with_another_password_is_refused(argilla_server, tmp_path, unique):
    config = _config(f"u{unique}")
    owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
    collection = study1_collection(config, _questions(), owner, tmp_path, _store(tmp_path, Clock()))
    first = f"{config.study1.username_prefix}-0001"
    workspace = owner.ensure_workspace(first)
    ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key).ensure_annotator(first, workspace)  # another key
    with pytest.raises(CrowdprefError, match=f"'{first}'.*already exists with another password"):
        collection.refill_pool()


def test_unreachable_argilla_and_wrong_key_are_one_line(argilla_server):
    from crowdpref.argilla_client import check_server

    with pytest.raises(CrowdprefError, match="unreachable at http://127.0.0.1:9.*crowdpref up"):
        check_server("http://127.0.0.1:9", "whatever")
    with pytest.raises(CrowdprefError, match="rejected the API key") as err:
        check_server(argilla_server.api_url, "wrong-key-123456")
    assert "wrong-key" not in str(err.value) and "\n" not in str(err.value)


def test_a_claim_can_refill_the_pool_in_the_background(argilla_server, tmp_path, unique):
    config = _config(f"b{unique}")
    owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
    clock = Clock()
    store = _store(tmp_path, clock)
    collection = study1_collection(config, _questions(), owner, tmp_path, store)
    collection.refill_pool()  # K = 2
    claimed = collection.claim("person-1", "simulated", refill=True)
    assert isinstance(claimed, Claimed) and claimed.participant.username == f"{config.study1.username_prefix}-0001"
    time.sleep(1.0)  # half the pool is still ready: no refill yet
    assert [a.state for a in store.accounts(collection.info.id)] == ["bound", "ready"]
    assert isinstance(collection.claim("person-2", "simulated", refill=True), Claimed)
    # below half, but someone claimed a moment ago (the store's clock stands still): the refill
    # yields to arrivals - provisioning costs Argilla as much as several arrivals
    time.sleep(2.0)
    assert [a.state for a in store.accounts(collection.info.id)] == ["bound", "bound"]  # not even planned
    assert collection.monitor().accounts_ready_now == 0  # monitoring does not provision during arrivals either
    clock.now += collection.refill_quiet_s  # a pause in the arrivals
    for _ in range(200):  # the background refill makes the new accounts ready
        if [a.state for a in store.accounts(collection.info.id)].count("ready") == 2:
            break
        time.sleep(0.1)
    states = [a.state for a in store.accounts(collection.info.id)]
    assert states == ["bound", "bound", "ready", "ready"], states
