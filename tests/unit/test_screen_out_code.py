"""Prolific's screen-out code (issues 20 and 30): a study whose onboarding has a quiz is created on
Prolific with a second completion code - ``SCREENED_OUT``, actor ``researcher``, action
``FIXED_SCREEN_OUT_PAYMENT`` with the config's fixed reward and slots. No participant can enter
it: crowdpref gives it through the API (``COMPLETE``) to exactly the submissions its quiz
screened out, so only they are paid. The code is derived from the store's salt
(``Store.screen_out_code``); the request validates against Prolific's published document; the
fake Prolific refuses the code from a participant, pays a screen-out given through the API,
frees the place and pauses the study when the slots are used up. The sync pays every screen-out
the store recorded that is still working on Prolific, and lists for review (never counts) a
SCREENED OUT submission nobody here screened out."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from crowdpref.config import Batches, StudyConfig, parse_study
from crowdpref.prolific import ProlificClient, ProlificError
from crowdpref.recruitment import ensure_prolific_study, holding, screen_out_terms, study_payload
from crowdpref.simulation.prolific_server import ApiError, FakeProlific
from crowdpref.store import Store, default_url

PORTAL = "https://portal.example.org"


def _item(answer: int = 1) -> dict[str, Any]:
    return {"prompt": "Which answer gives a reason?", "options": ["Because it is kind.", "Yes."],
            "answer": answer, "explanation": "It says why."}


def _config(quiz: bool = True, participants: str = "prolific", screen_out_reward: int | None = 90) -> StudyConfig:
    onboarding: dict[str, Any] = {"introduction": "What the study is for; about 5 minutes.", "minutes": 5,
                                  "practice": [_item()]}
    if quiz:
        onboarding["quiz"] = {"items": [_item(), _item(2)], "pass_mark": 2, "attempts": 2}
    if screen_out_reward is not None:
        onboarding["screen_out_reward"] = screen_out_reward
    return parse_study({
        "name": "screen-test", "title": "Social reasoning", "participants": participants,
        "study1": {"responses_per_question": 2, "questions_per_participant": 3, "onboarding": onboarding},
        "study2": {"ratings_per_pair": 3, "pairs_per_participant": 6},
        "prolific": {"enabled": participants == "prolific",
                     "study1": {"reward": 500, "estimated_completion_minutes": 25},
                     "study2": {"reward": 300, "estimated_completion_minutes": 15}},
    })


# the recruitment tests' fixtures: isolated settings, a store, the fake Prolific and a client of it
from tests.unit.test_recruitment import client, fake, settings, store  # noqa: E402,F401


def _collection(config: StudyConfig, store: Store, key: str = "study1", participants: int = 4) -> SimpleNamespace:
    """What ensure_prolific_study reads: the store, the collection and the batch plan."""
    info = store.collection(config.name, key, [f"item-{i}" for i in range(6)], copies=2, per_participant=3,
                            seed=0, username_prefix="p")
    return SimpleNamespace(store=store, info=info,
                           spec=SimpleNamespace(key=key, batches=Batches(participants * 3, 3)))


# --- the code -----------------------------------------------------------------------------------------
def test_the_screen_out_code_is_stable_salted_and_never_the_completion_code(tmp_path: Path, store: Store) -> None:
    one = store.collection("a", "study1", ["x"], copies=1, per_participant=1, seed=0, username_prefix="p")
    two = store.collection("a", "study2", ["x"], copies=1, per_participant=1, seed=0, username_prefix="q")
    code = store.screen_out_code(one.id)
    assert code == store.screen_out_code(one.id) and code.startswith("S") and len(code) == 8 and code.isalnum()
    assert code != store.completion_code(one.id)[0] + code[1:]  # not the completion code with another prefix
    assert code[1:] != store.completion_code(one.id)[1:]
    assert code != store.screen_out_code(two.id)
    other = Store(default_url(tmp_path / "elsewhere"))  # another salt: another code
    try:
        info = other.collection("a", "study1", ["x"], copies=1, per_participant=1, seed=0, username_prefix="p")
        assert other.screen_out_code(info.id) != code
    finally:
        other.close()


# --- the payload ---------------------------------------------------------------------------------------
def test_a_quiz_adds_a_fixed_screen_out_payment_code(settings) -> None:
    body = study_payload(_config(), "study1", settings, "C1234567", places=4, screen_out_code="S7654321")
    assert body["completion_codes"][1] == {"code": "S7654321", "code_type": "SCREENED_OUT", "actor": "researcher",
                                           "actions": [{"action": "FIXED_SCREEN_OUT_PAYMENT",
                                                        "fixed_screen_out_reward": 90, "slots": 4}]}
    assert "actor" not in body["completion_codes"][0]  # the completion code stays the participant's
    assert body["completion_codes"][0]["code_type"] == "COMPLETED"
    # no quiz (nobody is screened out), or the other study: one code only
    no_quiz = study_payload(_config(quiz=False), "study1", settings, "C1", places=4, screen_out_code="S1")
    study2 = study_payload(_config(), "study2", settings, "C2", places=4, screen_out_code="S2")
    assert [c["code_type"] for c in no_quiz["completion_codes"]] == ["COMPLETED"]
    assert [c["code_type"] for c in study2["completion_codes"]] == ["COMPLETED"]


def test_a_simulated_study_without_a_reward_pays_the_onboardings_share_of_the_time() -> None:
    config = _config(participants="simulated", screen_out_reward=None)
    assert screen_out_terms(config, "study1", 7) == (500 * 5 // 25, 7)  # 5 of 25 minutes of 500
    assert screen_out_terms(_config(quiz=False), "study1", 7) is None


def test_the_request_validates_against_prolifics_published_schema(settings) -> None:
    from crowdpref.simulation.prolific_contract import ProlificContract

    contract = ProlificContract.load()
    body = study_payload(_config(), "study1", settings, "C1234567", places=4, screen_out_code="S7654321")
    headers = {"Content-Type": "application/json", "Authorization": "Token x"}

    def problems(payload: dict[str, Any]) -> list[str]:
        return [str(v) for v in contract.check_request("POST", "/api/v1/studies/", {}, headers,
                                                       json.dumps(payload).encode())]

    assert problems(body) == []
    # the schema is really checked: without slots (required), or with a code type Prolific does not know
    action = body["completion_codes"][1]["actions"][0]
    del action["slots"]
    assert problems(body)
    action["slots"] = 4
    body["completion_codes"][1]["code_type"] = "SCREEN_OUT"
    assert problems(body)


# --- on the fake Prolific --------------------------------------------------------------------------------
def _screened_out_by_quiz(store: Store, cid: int, arrival: dict[str, Any]) -> str:
    """Record in the store what the portal records when the quiz screens this arrival out."""
    person = store.key_hash(arrival["participant_id"])
    store.onboarding_start(cid, person, "prolific", arrival["session_id"])
    assert store.onboarding_attempt(cid, person, 0, False, 1).status == "screened_out"
    return person


def test_only_the_api_gives_the_screen_out_code_and_it_pays_and_frees_the_place(
        settings, store: Store, fake: FakeProlific, client: ProlificClient) -> None:
    config = _config()
    collection = _collection(config, store, participants=2)
    platform = ensure_prolific_study(collection, config, settings, client)
    study = fake.studies[platform.external_id]
    cid = collection.info.id
    code = store.screen_out_code(cid)
    assert [(c["code"], c["code_type"], c.get("actor", "participant")) for c in study["completion_codes"]] == [
        (store.completion_code(cid), "COMPLETED", "participant"), (code, "SCREENED_OUT", "researcher")]
    assert study["status"] == "ACTIVE" and study["total_available_places"] == 2
    first = fake.arrive(platform.external_id)
    second = fake.arrive(platform.external_id)
    # a participant who types the code in gets nothing: it is the researcher's
    with pytest.raises(ApiError, match="unknown completion code"):
        fake.complete(first["session_id"], code)
    assert fake.submissions[first["session_id"]]["status"] == "ACTIVE" and fake.screen_out_payments == []
    # given through the API: screened out and paid; repeated: ignored (nothing paid twice)
    assert client.complete_submission(first["session_id"], code).status == "SCREENED OUT"
    assert client.complete_submission(first["session_id"], code).status == "SCREENED OUT"
    assert fake.screen_out_payments == [(platform.external_id, first["session_id"], 90)]
    # the completion code is not the researcher's to give; a submission already done cannot be screened out
    with pytest.raises(ProlificError, match="400"):
        client.complete_submission(second["session_id"], store.completion_code(cid))
    assert study["status"] == "ACTIVE"  # 1 screen-out of 2 slots
    third = fake.arrive(platform.external_id)  # the screened-out person's place is free again
    fake.complete(second["session_id"], store.completion_code(cid))
    assert fake.submissions[second["session_id"]]["status"] == "AWAITING REVIEW"
    with pytest.raises(ProlificError, match="400"):
        client.complete_submission(second["session_id"], code)
    client.complete_submission(third["session_id"], code)
    assert study["status"] == "PAUSED"  # the slots are used up with a place unfilled: Prolific pauses
    assert len(fake.screen_out_payments) == 2
    # the sync's arithmetic: a screened-out submission holds no place
    subs = client.list_submissions(platform.external_id)
    assert [s.id for s in holding(subs)] == [second["session_id"]]


def test_the_fake_refuses_a_screen_out_reward_not_below_the_study_reward(settings, fake, client) -> None:
    body = study_payload(_config(), "study1", settings, "C1234567", places=4, screen_out_code="S7654321")
    body["completion_codes"][1]["actions"][0]["fixed_screen_out_reward"] = 500
    with pytest.raises(ProlificError, match="less than the study reward"):
        client.create_study(body)
    body["completion_codes"][1]["actions"][0]["fixed_screen_out_reward"] = 90
    body["completion_codes"][1]["code"] = "C1234567"
    with pytest.raises(ProlificError, match="unique within the study"):
        client.create_study(body)
    assert fake.studies == {}


def test_the_sync_pays_the_quizs_screen_outs_and_the_code_pays_nobody_else(settings, store: Store, fake: FakeProlific,
                                                                          client: ProlificClient, tmp_path: Path) -> None:
    from crowdpref.recruitment import sync_prolific

    config = _config()
    collection = _collection(config, store, participants=3)
    collection.progress = lambda: SimpleNamespace(complete=False, unclaimed=0)
    platform = ensure_prolific_study(collection, config, settings, client)
    cid = collection.info.id
    code = store.screen_out_code(cid)
    honest, paid_already, cheat = (fake.arrive(platform.external_id) for _ in range(3))
    person = _screened_out_by_quiz(store, cid, honest)  # the portal's payment never ran (or failed)
    _screened_out_by_quiz(store, cid, paid_already)
    client.complete_submission(paid_already["session_id"], code)  # the portal's payment landed
    # someone who never took the quiz learned the code: Prolific takes it from nobody but us
    with pytest.raises(ApiError):
        fake.complete(cheat["session_id"], code)
    report = sync_prolific(collection, config, client, private_dir=tmp_path)
    assert (report.screened_out, report.screened_out_now, report.screen_outs_unrecorded) == (2, 1, 0)
    assert fake.submissions[honest["session_id"]]["status"] == "SCREENED OUT"
    assert fake.submissions[cheat["session_id"]]["status"] == "ACTIVE" and report.active == 1
    assert sorted(p[1] for p in fake.screen_out_payments) == sorted([honest["session_id"], paid_already["session_id"]])
    kinds = [(e["kind"], json.loads(e["detail"])["person"]) for e in store.events(cid, kinds=[
        "screen_out_sent", "screen_out_paid"]) if json.loads(e["detail"])["via"] == "sync"]
    assert kinds == [("screen_out_sent", person), ("screen_out_paid", person)]  # recorded before and after
    before = len(fake.requests)
    again = sync_prolific(collection, config, client)  # nothing left to pay: nothing sent
    assert (again.screened_out, again.screened_out_now) == (2, 0)
    assert not [r for r in fake.requests[before:] if r[0] != "GET"]


def test_a_screen_out_nobody_here_recorded_is_listed_for_review_and_not_counted(
        settings, store: Store, fake: FakeProlific, client: ProlificClient, tmp_path: Path) -> None:
    """A study made before the code was the researcher's (or by hand, with the participant
    actor): a person who never took the quiz enters the code and Prolific screens them out."""
    from crowdpref.recruitment import sync_prolific

    config = _config()
    collection = _collection(config, store, participants=3)
    collection.progress = lambda: SimpleNamespace(complete=False, unclaimed=0)
    cid = collection.info.id
    payload = study_payload(config, "study1", settings, store.completion_code(cid), places=3,
                            screen_out_code=store.screen_out_code(cid))
    del payload["completion_codes"][1]["actor"]  # the participant's, as before
    study = client.publish_study(client.create_study(payload).id)
    store.save_platform_study(cid, "prolific", study.id, "active", places=3)
    honest, cheat = fake.arrive(study.id), fake.arrive(study.id)
    _screened_out_by_quiz(store, cid, honest)
    fake.complete(honest["session_id"], store.screen_out_code(cid))
    fake.complete(cheat["session_id"], store.screen_out_code(cid))  # never took the quiz
    report = sync_prolific(collection, config, client, private_dir=tmp_path)
    assert (report.screened_out, report.screen_outs_unrecorded) == (1, 1)
    assert report.review == [("(no screen-out recorded)", "SCREENED OUT on Prolific, but crowdpref's quiz never "
                              "screened this person out: not counted as screened out; check the submission on "
                              "Prolific")]
    private = json.loads((tmp_path / "prolific-review-study1.json").read_text())
    assert [e["submission_id"] for e in private] == [cheat["session_id"]]
    assert len(store.events(cid, kinds=["screen_out_unrecorded"])) == 1
    sync_prolific(collection, config, client)  # listed again, recorded once
    assert len(store.events(cid, kinds=["screen_out_unrecorded"])) == 1


def test_a_screen_out_reward_not_below_the_reward_is_refused_in_one_line_before_prolific_is_asked(settings) -> None:
    from crowdpref.errors import ConfigError

    config = _config()
    object.__setattr__(config.study1.onboarding, "screen_out_reward", 500)  # past the config's own check
    with pytest.raises(ConfigError) as err:
        study_payload(config, "study1", settings, "C1", places=4, screen_out_code="S1")
    message = str(err.value)
    assert "\n" not in message and message.startswith("study1.onboarding.screen_out_reward: 500 is not below")
