"""Withdrawals on the real embedded Argilla, the real CLI, the portal's signed webhook and the
publish-dataset flow with the fake Hub.

- During collection: two participants answer both questions (R = 2, Q = 2); one of them asks to
  withdraw and the operator runs ``crowdpref withdraw PROLIFIC_ID --study`` (the real CLI): their
  answers stop counting, their records leave Argilla, the next arrival's claim takes exactly
  their slots, and the collection run exports every question with its R answers - none by the
  withdrawn participant.
- A RETURNED webhook (signed as Prolific signs it) for a participant who had completed withdraws
  them the same way.
- After publication: a release is built and pushed to the fake Hub; a writer withdraws; the next
  publish-dataset run aggregates again without their rows, rebuilds the release and its push
  leaves none of their rows on the Hub, and squashes the history: no earlier revision holds
  them; the card counts the withdrawal.
- Mid-study-2: a study-1 writer withdraws while raters hold and have rated pairs with their
  answers: those pairs are retired (no claim gets one again), the unsubmitted ones leave the
  raters' datasets at the next monitoring pass, the ratings already given are not exported (so
  never aggregated) while their raters finish and are approved, and every other pair ends with R
  ratings."""

from __future__ import annotations

import io
import json
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from fastapi.testclient import TestClient

from crowdpref.argilla_client import ArgillaOwner
from crowdpref.config import load_study
from crowdpref.portal.app import create_app
from crowdpref.portal.service import WEBHOOK_SECRET, Portal
from crowdpref.pseudonyms import Pseudonyms
from crowdpref.runfolder import write_parquet
from crowdpref.store import COMPLETE, WITHDRAWN, Claimed, Full, Store
from crowdpref.study1 import study1_collection
from tests.conftest import REPO, cli_environment, isolated_settings
from tests.fakes.hub_server import GITATTRIBUTES, FakeHubServer
from tests.integration.test_portal import _signed
from tests.integration.test_reopen import _answer
from tests.integration.test_study1_collection import _questions
from tests.unit.test_publish import write_study_run

pytestmark = pytest.mark.integration

CROWDPREF = str(REPO / ".venv" / "bin" / "crowdpref")
PID_A, PID_B, PID_C = "5f1e2d3c4b5a69788796a5b4", "60aa11bb22cc33dd44ee55ff", "61bb22cc33dd44ee55ff6677"


def _hub_frame(files: dict[str, bytes], name: str) -> pd.DataFrame:
    return pd.read_parquet(io.BytesIO(files[f"data/{name}/train-00000-of-00001.parquet"]))


def _write_study(folder: Path, name: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "seed": 3, "participants": "prolific", "prolific": {"enabled": False, "verify": False},
        "study1": {"responses_per_question": 2, "questions_per_participant": 2, "inactive_after_minutes": 600,
                   "pool_size": 1},
        "study2": {"pairs_per_participant": 1},
    }))
    return path


def _full_collection(argilla_server, home: Path, study: Path):
    """Two Prolific participants answered both questions: the collection is complete."""
    config = load_study(study)
    run = home / "studies" / config.name
    questions = _questions().head(2)
    write_parquet(questions, run / "questions.parquet")
    owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
    store = Store(f"sqlite:///{home / 'store.sqlite'}")  # where the CLI finds it (CROWDPREF_HOME)
    collection = study1_collection(config, questions, owner, run, store)
    a, b = collection.claim(PID_A, "prolific"), collection.claim(PID_B, "prolific")
    assert isinstance(a, Claimed) and isinstance(b, Claimed)
    assert isinstance(collection.claim(PID_C, "prolific"), Full)
    q0, q1 = questions["question_id"]
    _answer(argilla_server.api_url, a, collection.dataset_name, {q0: "I would sit with them.", q1: "Laugh first."},
            collection.owner.passwords(a.participant.username))
    _answer(argilla_server.api_url, b, collection.dataset_name, {q0: "Ask how they feel.", q1: "Be honest, kindly."},
            collection.owner.passwords(b.participant.username))
    assert collection.monitor().complete
    return collection, run, a, b, (q0, q1)


def test_a_participant_who_withdraws_during_collection_stops_counting_and_is_replaced(
        argilla_server, study_env, tmp_path, unique):
    from flows.collect_responses import collect_responses

    home = study_env
    study = _write_study(tmp_path, f"wd{unique}")
    collection, run, a, b, (q0, q1) = _full_collection(argilla_server, home, study)
    store, cid = collection.store, collection.info.id

    env = cli_environment(home)
    env.update(CROWDPREF_ARGILLA_URL=argilla_server.api_url, CROWDPREF_ARGILLA_API_KEY=argilla_server.owner_api_key)
    done = subprocess.run([CROWDPREF, "withdraw", PID_A, "--study", str(study)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr + done.stdout
    assert done.stdout.strip().splitlines() == [
        f"{a.participant.username} (study1): withdrawn; 2 counted answers no longer count (the slots are back in "
        "the pool) and the next aggregation and release leave their rows out"]
    assert PID_A not in done.stdout + done.stderr
    gone = store.participant(cid, a.participant.username)
    assert gone.withdrawn_at is not None and {x.status for x in gone.assignments} == {WITHDRAWN}
    assert collection.owner.record_ids(collection._dataset_of(gone)) == {}  # their records left Argilla
    assert collection.progress().unclaimed == 2 and not collection.progress().complete
    again = subprocess.run([CROWDPREF, "withdraw", PID_A, "--study", str(study)], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=180)
    assert again.returncode == 0 and "already withdrawn; nothing changed" in again.stdout
    assert len(store.events(cid, kinds=["withdrawn"])) == 1

    # the next arrival takes exactly the freed slots; the next run exports R answers per question
    c = collection.claim(PID_C, "prolific")
    assert isinstance(c, Claimed) and sorted(c.participant.items) == sorted([q0, q1])
    _answer(argilla_server.api_url, c, collection.dataset_name, {q0: "Listen before advising.", q1: "Smile at it."},
            collection.owner.passwords(c.participant.username))
    assert collect_responses(str(study)) == "complete"
    report = json.loads((run / "study1" / "validation.json").read_text())
    assert report["valid"], report["anomalies"]
    assert report["workspaces_matching_allocation"] == 3
    responses = pd.read_parquet(run / "responses.parquet")
    assert responses.groupby("question_id").size().to_dict() == {q0: 2, q1: 2}
    withdrawn_key = Pseudonyms(run / "private").participant_key(a.participant.username)
    assert withdrawn_key not in set(responses["participant_key"])
    assert not {"I would sit with them.", "Laugh first."} & set(responses["text"])
    store.close()


def test_an_active_participant_who_withdraws_is_released_first(argilla_server, study_env, tmp_path, unique):
    home = study_env
    study = _write_study(tmp_path, f"wa{unique}")
    config = load_study(study)
    run = home / "studies" / config.name
    questions = _questions().head(2)
    write_parquet(questions, run / "questions.parquet")
    owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
    store = Store(f"sqlite:///{home / 'store.sqlite'}")
    collection = study1_collection(config, questions, owner, run, store)
    q0, q1 = questions["question_id"]
    a = collection.claim(PID_A, "prolific")
    assert isinstance(a, Claimed)
    _answer(argilla_server.api_url, a, collection.dataset_name, {q0: "Half done, then I stop."},
            collection.owner.passwords(a.participant.username))
    collection.monitor()
    assert store.participant(collection.info.id, a.participant.username).status == "active"

    env = cli_environment(home)
    env.update(CROWDPREF_ARGILLA_URL=argilla_server.api_url, CROWDPREF_ARGILLA_API_KEY=argilla_server.owner_api_key)
    done = subprocess.run([CROWDPREF, "withdraw", PID_A, "--study", str(study), "--reason", "wrote to us"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr + done.stdout
    assert done.stdout.strip().splitlines() == [
        f"{a.participant.username} (study1): withdrawn; their unanswered work was released first; 1 counted answer "
        "no longer counts (the slots are back in the pool) and the next aggregation and release leave their rows out"]
    gone = store.participant(collection.info.id, a.participant.username)
    assert gone.status == "released" and gone.withdrawn_at is not None
    assert {x.item_id: x.status for x in gone.assignments} == {q0: WITHDRAWN, q1: "released"}
    assert collection.owner.record_ids(collection._dataset_of(gone)) == {}
    kinds = [e["kind"] for e in store.events(collection.info.id) if e["participant_id"] == gone.id]
    assert kinds.index("release_started") < kinds.index("released") < kinds.index("withdrawn"), kinds
    progress = collection.progress()
    assert (progress.submitted, progress.outstanding, progress.unclaimed) == (0, 0, 4)
    store.close()


def test_a_returned_webhook_for_a_participant_who_completed_withdraws_them(argilla_server, tmp_path, unique):
    home = tmp_path / "home"
    study = _write_study(tmp_path, f"wh{unique}")
    collection, run, a, b, _ = _full_collection(argilla_server, home, study)
    store, cid = collection.store, collection.info.id
    session = "6123456789abcdef01234567"
    store.record_session(cid, a.participant.id, session)  # what the portal's entry keeps (hashed)
    settings = isolated_settings(home, argilla_url=argilla_server.api_url,
                                 argilla_api_key=argilla_server.owner_api_key, portal_studies=tmp_path)
    portal = Portal(settings, store, open_collection=lambda path, key: collection)
    client = TestClient(create_app(portal), base_url="http://portal.test")
    secret = "whsec-" + unique
    store.set_meta(WEBHOOK_SECRET, secret)
    body = json.dumps({"event_type": "submission.status.change", "resource_id": session,
                       "participant_id": PID_A, "status": "RETURNED"}).encode()
    now = int(time.time())
    reply = client.post("/hooks/prolific", content=body, headers=_signed(secret, body, now, "evt-1"))
    assert reply.status_code == 200 and reply.json()["outcome"] == "RETURNED: queued"
    assert portal.after_reply.wait(60)  # the withdrawal runs after the reply
    assert {d["event_id"]: d["outcome"] for d in store.deliveries("prolific")} == {"evt-1": "RETURNED: withdrawn"}
    gone = store.participant(cid, a.participant.username)
    assert gone.status == COMPLETE and gone.withdrawn_at is not None
    assert {x.status for x in gone.assignments} == {WITHDRAWN}
    assert collection.owner.record_ids(collection._dataset_of(gone)) == {}
    assert collection.progress().unclaimed == 2
    [event] = store.events(cid, kinds=["withdrawn"])
    assert json.loads(event["detail"])["reason"] == "RETURNED on Prolific after completion (webhook)"
    assert PID_A not in json.dumps(store.events(cid), default=str)
    # a second delivery of the same status (a new event id, signed a second later: not a replay of
    # the first's signed content, which is a duplicate before any work) changes nothing
    again = client.post("/hooks/prolific", content=body, headers=_signed(secret, body, now + 1, "evt-2"))
    assert again.json()["outcome"] == "RETURNED: queued" and portal.after_reply.wait(60)
    assert {d["event_id"]: d["outcome"] for d in store.deliveries("prolific")}["evt-2"] == "RETURNED: already withdrawn"
    assert len(store.events(cid, kinds=["withdrawn"])) == 1
    # the other participant's work still counts
    assert sorted(store.participant(cid, b.participant.username).submitted) == sorted(b.participant.items)
    store.close()


def test_a_withdrawal_after_publication_leaves_the_release_and_the_hub(crowdpref_home, tmp_path, monkeypatch):
    from flows.publish_dataset import publish_dataset

    study = REPO / "studies" / "demo.yaml"
    config = load_study(study)
    planted = write_study_run(crowdpref_home / "studies" / config.name, config)
    run = planted.run
    store = Store(f"sqlite:///{crowdpref_home / 'store.sqlite'}")
    info = store.collection(config.name, "study1", ["x"], copies=3, per_participant=1, seed=1,
                            username_prefix=config.study1.username_prefix)
    # the planted run's first writer (<prefix>-0001; every pair left without them is one of the
    # other two writers' answers, so the preregistered filters keep ratings to aggregate)
    writer = store.claim(info, PID_A, "prolific")
    assert isinstance(writer, Claimed)
    store.record_progress(info.id, writer.participant.id, {"x": 1.0}, None)
    writer_key = planted.participant_keys[0]
    assert Pseudonyms(run.private_dir).participant_key(writer.participant.username) == writer_key
    repo_id = "crowdpref-tester/demo-rlhf"
    with FakeHubServer() as hub:
        monkeypatch.setenv("CROWDPREF_HF_TOKEN", hub.write_token)
        monkeypatch.setenv("CROWDPREF_HF_REPO_ID", repo_id)
        monkeypatch.setenv("CROWDPREF_HF_ENDPOINT", hub.url)
        assert publish_dataset(study=str(study)).pushed
        repo = hub.dataset(repo_id)
        earlier = hub.revisions(repo_id)
        assert len(earlier) == 2 and hub.file_at(repo_id, earlier[-1], "data/responses/train-00000-of-00001.parquet")
        responses = pd.read_parquet(run.responses)
        theirs = set(responses.loc[responses["participant_key"] == writer_key, "response_id"])
        texts = set(responses.loc[responses["participant_key"] == writer_key, "text"])
        hub_responses = _hub_frame(repo.files, "responses")
        assert theirs <= set(hub_responses["response_id"])  # published
        pairs = pd.read_parquet(run.pairs)
        their_pairs = set(pairs.loc[pairs["first_response_id"].isin(theirs)
                                    | pairs["second_response_id"].isin(theirs), "pair_id"])
        assert their_pairs

        done = subprocess.run([CROWDPREF, "withdraw", PID_A, "--study", str(study)],
                              env=cli_environment(crowdpref_home), cwd=tmp_path, capture_output=True, text=True,
                              timeout=180)
        assert done.returncode == 0, done.stderr + done.stdout
        assert PID_A not in done.stdout + done.stderr and len(done.stdout.strip().splitlines()) == 1

        result = publish_dataset(study=str(study))
        assert result.pushed and result.squashed
        assert json.loads(run.file("aggregation.json").read_text())["withdrawn_participants"] == 1
        folder = result.folder
        local = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        assert repo.files == {**local, ".gitattributes": GITATTRIBUTES}
        # the run folder's exports were rewritten at the withdrawal (the release folder is rebuilt)
        assert writer_key not in set(pd.read_parquet(run.responses)["participant_key"])
        assert not set(pd.read_parquet(run.pairs)["pair_id"]) & their_pairs
        # the push squashed the history: one revision, this release; the earlier ones are gone
        assert hub.revisions(repo_id) not in ([], earlier) and len(hub.revisions(repo_id)) == 1
        assert all(hub.file_at(repo_id, old, "data/responses/train-00000-of-00001.parquet") is None
                   for old in earlier)
        from huggingface_hub import HfApi

        assert len(HfApi(endpoint=hub.url, token=hub.write_token).list_repo_commits(repo_id, repo_type="dataset")) == 1
        for path, data in repo.files.items():
            if not path.endswith(".parquet"):
                continue
            frame = pd.read_parquet(io.BytesIO(data))
            for column in ("response_id", "chosen_response_id", "rejected_response_id", "response_a_id",
                           "response_b_id"):
                if column in frame.columns:
                    assert not set(frame[column]) & theirs, (path, column)
            if "pair_id" in frame.columns:
                assert not set(frame["pair_id"]) & their_pairs, path
            for column in ("text", "chosen", "rejected"):
                if column in frame.columns:
                    assert not set(frame[column]) & texts, (path, column)
        every = "responses_raw" if "data/responses_raw/train-00000-of-00001.parquet" in repo.files else "responses"
        assert len(_hub_frame(repo.files, every)) == len(responses) - 2
        card = repo.files["README.md"].decode()
        assert "1 participant withdrew; their answers and ratings are not in this release" in card
        assert PID_A not in card and writer_key not in card
    store.close()


def test_a_withdrawal_on_postgresql_returns_the_slots_once(postgres_url: str) -> None:
    from tests.unit.test_withdrawals import _full

    store = Store(postgres_url)
    try:
        info, (a, _) = _full(store)
        assert sorted(store.withdraw(info.id, a.participant.id, "asked by message")) == ["q0", "q1", "q2"]
        assert store.withdraw(info.id, a.participant.id, "again") is None
        nxt = store.claim(info, "c" * 24, "prolific")
        assert isinstance(nxt, Claimed) and sorted(nxt.participant.items) == ["q0", "q1", "q2"]
        assert store.withdrawn_usernames(info.id) == [a.participant.username]
        assert len(store.events(info.id, kinds=["withdrawn"])) == 1 and store.check(info.id) == []
    finally:
        store.close()


def _rate(api_url: str, claimed: Claimed, dataset_name: str, pairs: list[str], password: str) -> None:
    """The rater submits a rating for each of ``pairs`` in their Argilla dataset."""
    from crowdpref.argilla_client import AnnotatorSession

    session = AnnotatorSession(api_url, claimed.participant.username, password)
    try:
        dataset = next(d for d in session.datasets() if d["name"] == dataset_name)
        records = {r["external_id"]: r["id"] for r in session.pending_records(dataset["id"])}
        session.submit([(records[pair], {"preference": 2}) for pair in pairs])
    finally:
        session.close()


def test_a_writer_who_withdraws_mid_study_2_takes_their_pairs_out_and_the_raters_are_still_paid(
        argilla_server, tmp_path, unique):
    from crowdpref.config import parse_study
    from crowdpref.pairing import make_pairs
    from crowdpref.recruitment import review_decision
    from crowdpref.store import RETIRED
    from crowdpref.study2 import export_ratings, study2_collection
    from crowdpref.withdrawals import withdraw, withdrawn_in, writer_pairs

    config = parse_study({
        "name": f"w2{unique}", "seed": 5, "participants": "simulated",
        "study1": {"responses_per_question": 3, "questions_per_participant": 2},
        "study2": {"ratings_per_pair": 2, "pairs_per_participant": 2, "inactive_after_minutes": 600,
                   "pool_size": 1, "too_fast_seconds": 0},
    }, source="test")
    run = tmp_path / config.name
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    # study 1, finished: three writers answered both questions (the store; no Argilla needed)
    s1 = store.collection(config.name, "study1", ["q0", "q1"], copies=3, per_participant=2, seed=5,
                          username_prefix=config.study1.username_prefix)
    writers = []
    for key in (PID_A, PID_B, PID_C):
        claimed = store.claim(s1, key, "prolific")
        assert isinstance(claimed, Claimed)
        store.record_progress(s1.id, claimed.participant.id, {"q0": 1.0, "q1": 2.0}, None)
        writers.append(claimed.participant)
    ids = Pseudonyms(run / "private")
    questions = pd.DataFrame({"question_id": ["q0", "q1"], "category": ["empathy"] * 2,
                              "question": ["How do you comfort a friend?", "When is it kind to laugh?"]})
    responses = pd.DataFrame([{"response_id": ids.response_id(q, w.username), "question_id": q, "category": "empathy",
                               "participant_key": ids.participant_key(w.username),
                               "text": f"{w.username} answers {q}: listen first, then help."}
                              for w in writers for q in ("q0", "q1")])
    pairs = make_pairs(responses, "all", config.seed).pairs
    for name, frame in (("questions", questions), ("responses", responses), ("pairs", pairs)):
        write_parquet(frame, run / f"{name}.parquet")
    writer = writers[0]
    theirs = {ids.response_id(q, writer.username) for q in ("q0", "q1")}
    texts = set(responses.loc[responses["response_id"].isin(theirs), "text"])
    their_pairs = set(writer_pairs(pairs, theirs))
    staying = set(pairs["pair_id"]) - their_pairs
    assert (len(their_pairs), len(staying)) == (4, 2)

    owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
    collection = study2_collection(config, pairs, responses, questions, owner, run, store)
    name = collection.dataset_name
    # three raters hold the six pairs, one copy each; the first holding one of the writer's pairs
    # rates everything, the others rate only pairs without the writer's answers
    raters = [collection.claim(f"rater-{i}", "simulated") for i in range(3)]
    assert all(isinstance(r, Claimed) for r in raters)
    holding = [r for r in raters if set(r.participant.items) & their_pairs]
    assert len(holding) >= 2
    rated_theirs, holds_theirs = holding[0], holding[1]
    for rater in raters:
        mine = rater.participant.items
        _rate(argilla_server.api_url, rater, name, mine if rater is rated_theirs else
              [p for p in mine if p not in their_pairs], collection.owner.passwords(rater.participant.username))
    collection.monitor()
    given = sorted(set(rated_theirs.participant.items) & their_pairs)  # ratings already given to their pairs
    held = sorted(set(holds_theirs.participant.items) & their_pairs)  # unsubmitted pairs holding their answers
    assert store.participant(collection.info.id, holds_theirs.participant.username).status == "active"

    # the writer withdraws (the store alone, as a webhook without the study config does): their
    # pairs are retired at once; the next monitoring pass deletes the raters' unsubmitted records
    done = withdraw(store, store.participant(s1.id, writer.username), "asked by message", s1, run_folder=run)
    assert done.now
    cid = collection.info.id
    assert set(store.retired_items(cid)) == their_pairs and set(store.items(cid)) == staying
    state = store.participant(cid, holds_theirs.participant.username)
    assert {a.item_id for a in state.assignments if a.status == RETIRED} == set(held)
    assert set(owner.record_ids(collection._dataset_of(state))) >= set(held)  # Argilla not called yet
    collection.monitor()
    assert not set(owner.record_ids(collection._dataset_of(state))) & set(held)  # gone from their dataset
    assert store.retired_records(cid) == []
    assert set(given) <= set(owner.record_ids(collection._dataset_of(rated_theirs.participant)))  # rated: kept

    # new arrivals never get a retired pair; every pair that stays ends with R ratings
    for i in range(3, 10):
        arrival = collection.claim(f"rater-{i}", "simulated")
        if not isinstance(arrival, Claimed):
            break
        assert not set(arrival.participant.items) & their_pairs
        _rate(argilla_server.api_url, arrival, name, arrival.participant.items,
              collection.owner.passwords(arrival.participant.username))
        collection.monitor()
    progress = collection.monitor()
    assert progress.complete and progress.submitted == 2 * len(staying) and progress.outstanding == 0
    frame, report = export_ratings(collection, run)
    assert report["valid"], report["anomalies"]
    assert frame.groupby("pair_id").size().to_dict() == {p: 2 for p in staying}
    assert not set(frame["pair_id"]) & their_pairs  # the ratings already given are not exported ...
    rating_of_theirs = pd.DataFrame({"pair_id": given, "rater_key": "p_someone", "response_a_id": sorted(theirs)[0]})
    assert withdrawn_in(store, config.name, run / "private").leave_out(rating_of_theirs).empty  # ... nor aggregated
    # the raters who rated or held the writer's pairs finished and are approved (verified pay)
    for rater in (rated_theirs, holds_theirs):
        now = store.participant(cid, rater.participant.username)
        assert now.status == "complete"
        assert review_decision(now, config, "study2", auto_approve=True).action == "approve", rater.participant.username
    # the run folder's exports hold nothing of the writer
    for path in run.rglob("*.parquet"):
        text = pd.read_parquet(path).astype(str).to_csv()
        assert not any(t in text for t in texts) and not any(p in text for p in their_pairs), path
    store.close()


def test_retiring_a_pair_on_postgresql_takes_it_out_of_every_claim(postgres_url: str) -> None:
    from tests.unit.test_withdrawals_study2 import PAIRS, _claim, _study2, _submit

    store = Store(postgres_url)
    try:
        info = _study2(store)
        first = _claim(store, info, "a" * 24)
        _submit(store, info, first, first.participant.items[:2])
        held = first.participant.items[2]
        assert store.retire_items(info.id, [held], "a writer withdrew") == [held]
        state = store.participant(info.id, first.participant.username)
        assert state.status == COMPLETE and store.retired_records(info.id)[0].items == (held,)
        store.retired_records_deleted(info.id, state.id, [held])
        assert store.retired_records(info.id) == []
        taken = []
        for key in "bcdefg":
            result = store.claim(info, key * 24, "prolific")
            if not isinstance(result, Claimed):
                break
            taken += result.participant.items
        assert held not in taken and sorted(set(taken) | set(first.participant.items[:2])) == sorted(
            p for p in PAIRS if p != held)
        assert store.check(info.id) == [] and store.recount(info.id) == []
    finally:
        store.close()
