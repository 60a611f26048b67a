"""The portal's onboarding before the claim (issue 20), through its pages, over a real SQLite
store and the real study-1 collection (Argilla and Prolific stand-ins, see
``test_portal_entry``): the introduction with worked examples, practice with immediate
feedback that never counts, the quiz graded through the form, attempts used up in the store,
a person who comes back resuming at their step, someone screened out getting no work (no
participant row, no account bound) and, on Prolific, no code: the portal gives their own
submission the researcher's screen-out code through the API after the reply; and the finish page
of an invited participant, which shows no completion code."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml
from fastapi.testclient import TestClient

from crowdpref.portal import service
from crowdpref.portal.app import cookie_name, create_app
from crowdpref.store import COMPLETE
from tests.unit.test_portal_entry import _allocated, _prolific_entry, _write, rig  # noqa: F401 - the fixture

PRACTICE = [
    {"prompt": "Which answer **explains** the feeling?", "options": ["She is sad.", "She is sad because her friend left."],
     "answer": 2, "explanation": "A good answer says why, not only what."},
    {"prompt": "How long should an answer be?", "options": ["A few full sentences", "One word", "A page"],
     "answer": 1, "explanation": "A few sentences are enough to give the reasons."},
]
QUIZ = {"items": [
    {"prompt": "Quiz one?", "options": ["right one", "wrong one"], "answer": 1, "explanation": "e1"},
    {"prompt": "Quiz two?", "options": ["wrong two", "right two"], "answer": 2, "explanation": "e2"},
], "pass_mark": 2, "attempts": 2}
ONBOARDING = {
    "introduction": "# What this study is for\nWe study how people explain feelings. About **5 minutes**.",
    "minutes": 5,
    "examples": [{"question": "Why might Ana be quiet at dinner?", "strong": "She may be tired after a long shift.",
                  "strong_why": "It gives a reason.", "weak": "Dunno.", "weak_why": "It says nothing."}],
    "practice": PRACTICE,
    "quiz": QUIZ,
}


def _study(rig: Any, name: str, participants: str = "invite", **onboarding: Any) -> Path:
    path = _write(rig.studies, name, participants=participants)
    data = yaml.safe_load(path.read_text())
    data["study1"]["onboarding"] = {**ONBOARDING, **onboarding}
    path.write_text(yaml.safe_dump(data))
    return path


def _invited(rig: Any, name: str, who: str = "inv-1") -> tuple[TestClient, str]:
    client = TestClient(create_app(rig.portal), base_url="http://portal.test")
    link = rig.portal.invite_link(name, "study1", who).split(rig.settings.portal_public_url, 1)[1]
    return client, link


def _state(rig: Any, name: str, key: str) -> Any:
    cid = rig.portal.collection(name, "study1").info.id
    return rig.store.onboarding_state(cid, rig.store.key_hash(key))


def test_practice_feedback_quiz_grading_and_a_pass_that_claims(rig):
    name = "onb-pass"
    _study(rig, name)
    client, link = _invited(rig, name)
    cid = rig.portal.collection(name, "study1").info.id
    entry = client.post(link, follow_redirects=False)
    assert entry.status_code == 303 and entry.headers["location"] == f"/s/{name}/study1/onboarding"
    assert _allocated(rig.store, cid) == (0, 0)  # onboarding first: nothing is claimed
    intro = client.get(f"/s/{name}/study1/onboarding")
    assert intro.status_code == 200 and "What this study is for" in intro.text and "Why might Ana" in intro.text
    assert "2 practice questions" in intro.text and "You have <strong>2 attempts</strong>" in intro.text
    # the welcome page is not theirs yet: it sends them back to onboarding
    assert client.get(f"/s/{name}/study1/welcome", follow_redirects=False).headers["location"].endswith("/onboarding")
    practice = client.post(f"/s/{name}/study1/onboarding/next")
    assert "Practice question 1 of 2" in practice.text and 'type="radio" name="choice"' in practice.text
    wrong = client.post(f"/s/{name}/study1/onboarding/practice", data={"index": "0", "choice": "1"})
    assert "Not quite" in wrong.text and "A good answer says why" in wrong.text
    assert "She is sad because her friend left." in wrong.text
    again = client.post(f"/s/{name}/study1/onboarding/practice", data={"index": "0", "choice": "2"})
    assert "Right!" in again.text
    state = _state(rig, name, "invite:inv-1")
    assert (state.practice_answered, state.practice_correct) == (1, 0)  # the first answer stands, once
    assert "Practice question 2 of 2" in client.get(f"/s/{name}/study1/onboarding").text
    assert client.post(f"/s/{name}/study1/onboarding/next").text.count("Practice question 2 of 2") == 1  # not skipped
    last = client.post(f"/s/{name}/study1/onboarding/practice", data={"index": "1", "choice": "1"})
    assert "Right!" in last.text and "Go to the quiz" in last.text
    quiz = client.post(f"/s/{name}/study1/onboarding/next")
    assert "Question 1 of 2" in quiz.text and "Question 2 of 2" in quiz.text and "attempt <strong>1 of 2</strong>" in quiz.text
    failed = client.post(f"/s/{name}/study1/onboarding/quiz", data={"q0": "1", "q1": "1"})
    assert "1 of 2</strong> right" in failed.text and "Quiz two?" in failed.text and "Quiz one?" not in failed.text
    assert "1 more attempt" in failed.text and "Try again" in failed.text
    assert _allocated(rig.store, cid) == (0, 0)
    retry = client.get(f"/s/{name}/study1/onboarding")
    assert "attempt <strong>2 of 2</strong>" in retry.text
    passed = client.post(f"/s/{name}/study1/onboarding/quiz", data={"q0": "1", "q1": "2"}, follow_redirects=False)
    assert passed.status_code == 303 and passed.headers["location"] == f"/s/{name}/study1/welcome"
    assert _allocated(rig.store, cid)[0] == 1  # the pass claimed their work, by their key hash
    assert rig.store.participant_by_key(cid, "invite:inv-1") is not None
    state = _state(rig, name, "invite:inv-1")
    assert (state.status, state.attempts_used, state.last_score, state.best_score) == ("passed", 2, 2, 2)
    welcome = client.get(f"/s/{name}/study1/welcome")
    assert welcome.status_code == 200 and "Start" in welcome.text
    assert "more than 60 minutes" in welcome.text and "Prolific ID" not in welcome.text
    # the entry link again: straight on as today, no second claim
    back = client.post(link, follow_redirects=False)
    assert back.headers["location"] == f"/s/{name}/study1/welcome" and _allocated(rig.store, cid)[0] == 1


def test_a_returning_person_resumes_at_their_step_in_another_browser(rig):
    name = "onb-resume"
    _study(rig, name)
    client, link = _invited(rig, name, "inv-r")
    client.post(link)
    client.post(f"/s/{name}/study1/onboarding/next")
    client.post(f"/s/{name}/study1/onboarding/practice", data={"index": "0", "choice": "2"})
    other = TestClient(create_app(rig.portal), base_url="http://portal.test")  # the link again, elsewhere
    resumed = other.post(link)
    assert resumed.status_code == 200 and "Practice question 2 of 2" in resumed.text
    state = _state(rig, name, "invite:inv-r")
    assert (state.step, state.practice_answered, state.practice_correct) == ("practice", 1, 1)


def _fail_the_quiz(client: TestClient, name: str) -> Any:
    client.post(f"/s/{name}/study1/onboarding/next")
    for i in range(2):
        client.post(f"/s/{name}/study1/onboarding/practice", data={"index": str(i), "choice": "1"})
    client.post(f"/s/{name}/study1/onboarding/next")
    client.post(f"/s/{name}/study1/onboarding/quiz", data={"q0": "2", "q1": "1"})
    return client.post(f"/s/{name}/study1/onboarding/quiz", data={"q0": "2"})


def _screen_out_events(rig: Any, cid: int) -> list[tuple[str, str, str]]:
    return [(e["kind"], json.loads(e["detail"])["person"], json.loads(e["detail"])["via"])
            for e in rig.store.events(cid, kinds=["screen_out_sent", "screen_out_paid"])]


def test_the_last_failed_attempt_screens_out_pays_through_the_api_shows_no_code_and_allocates_nothing(rig):
    name = "onb-out"
    _study(rig, name, participants="prolific", screen_out_reward=50)
    client, entry_url, ids = _prolific_entry(rig, name)
    cid = rig.portal.collection(name, "study1").info.id
    entry = client.get(entry_url, follow_redirects=False)
    assert entry.status_code == 303 and entry.headers["location"] == f"/s/{name}/study1/onboarding"
    cookie = entry.cookies.get(cookie_name(name, "study1")) or client.cookies.get(cookie_name(name, "study1"))
    payload = rig.portal.cookies.loads(cookie.strip('"'))
    assert ids["PROLIFIC_PID"] not in cookie and ids["PROLIFIC_PID"] not in json.dumps(payload)  # the hash only
    # (signed) their own submission id, verified at the entry: where the screen-out is paid
    assert payload == {"c": cid, "h": rig.store.key_hash(ids["PROLIFIC_PID"]), "src": "prolific",
                       "s": ids["SESSION_ID"]}
    out = _fail_the_quiz(client, name)
    code = rig.store.screen_out_code(cid)
    assert out.status_code == 200 and "Thank you" in out.text and "screened out" in out.text
    assert "fixed screen-out payment" in out.text and "Back to Prolific" in out.text
    assert code not in out.text and "cc=" not in out.text  # no code anyone could pass on
    assert rig.store.completion_code(cid) not in out.text and ids["PROLIFIC_PID"] not in out.text
    # after the reply: exactly their submission gets the researcher's screen-out code, recorded before and after
    assert rig.portal.screen_outs.wait(10)
    assert rig.prolific.completed == [(ids["SESSION_ID"], code)]
    person = rig.store.key_hash(ids["PROLIFIC_PID"])
    assert _screen_out_events(rig, cid) == [("screen_out_sent", person, "portal"), ("screen_out_paid", person, "portal")]
    state = _state(rig, name, ids["PROLIFIC_PID"])
    assert (state.status, state.attempts_used) == ("screened_out", 2)
    # no retake: another attempt counts nothing; the entry link and the cookie lead to this page
    assert "screened out" in client.post(f"/s/{name}/study1/onboarding/quiz", data={"q0": "1", "q1": "2"}).text
    assert _state(rig, name, ids["PROLIFIC_PID"]).attempts_used == 2
    assert "screened out" in client.get(entry_url).text
    assert "screened out" in client.get(f"/s/{name}/study1/welcome").text
    assert rig.portal.screen_outs.wait(10)
    assert len(rig.prolific.completed) == 1  # paid once, however often the page is shown
    # nothing allocated: no participant row, no account bound, nothing sent to Argilla
    assert _allocated(rig.store, cid) == (0, 0) and rig.owner.logged == 0
    ob = rig.portal.onboarder(name, "study1", client.cookies.get(cookie_name(name, "study1")))
    try:
        rig.portal.onboarding_claim(name, "study1", ob)
        raise AssertionError("a screened-out person claimed work")
    except service.Refusal as refusal:
        assert refusal.status == 403
    assert _allocated(rig.store, cid) == (0, 0)


def test_a_screen_out_payment_that_fails_leaves_the_page_alone_and_is_left_to_the_sync(rig, caplog):
    from crowdpref.prolific import ProlificUnavailable

    name = "onb-out-fail"
    _study(rig, name, participants="prolific", screen_out_reward=50)
    client, entry_url, ids = _prolific_entry(rig, name)
    cid = rig.portal.collection(name, "study1").info.id
    client.get(entry_url)
    rig.prolific.fail_with = ProlificUnavailable("Prolific POST /submissions/x/transition/: 503", 503, transient=True)
    out = _fail_the_quiz(client, name)
    assert out.status_code == 200 and "fixed screen-out payment" in out.text
    assert rig.portal.screen_outs.wait(10)
    assert rig.prolific.completed == [] and [k for k, _, _ in _screen_out_events(rig, cid)] == ["screen_out_sent"]
    assert "the Prolific sync makes it" in caplog.text and ids["SESSION_ID"] not in caplog.text


def test_an_invited_person_screened_out_is_thanked_without_a_code(rig):
    name = "onb-inv-out"
    _study(rig, name, quiz={**QUIZ, "attempts": 1})
    client, link = _invited(rig, name, "inv-o")
    cid = rig.portal.collection(name, "study1").info.id
    client.post(link)
    client.post(f"/s/{name}/study1/onboarding/next")
    for i in range(2):
        client.post(f"/s/{name}/study1/onboarding/practice", data={"index": str(i), "choice": "1"})
    client.post(f"/s/{name}/study1/onboarding/next")
    out = client.post(f"/s/{name}/study1/onboarding/quiz", data={"q0": "2", "q1": "1"})
    assert "Thank you" in out.text and "cannot be taken again" in out.text
    assert rig.store.screen_out_code(cid) not in out.text and "Prolific" not in out.text
    assert _allocated(rig.store, cid) == (0, 0)


def test_an_invited_participant_finishes_without_a_completion_code(rig):
    name = "inv-finish"
    _write(rig.studies, name, participants="invite")
    client, link = _invited(rig, name, "inv-f")
    assert client.post(link, follow_redirects=False).headers["location"] == f"/s/{name}/study1/welcome"
    collection = rig.portal.collection(name, "study1")
    participant = rig.store.participants(collection.info.id)[0]
    rig.store.record_progress(collection.info.id, participant.id, {i: time.time() for i in participant.held}, None)
    assert rig.store.participant(collection.info.id, participant.username).status == COMPLETE
    collection.refresh = lambda p: rig.store.participant(collection.info.id, p.username)  # type: ignore[method-assign]
    done = client.get(f"/s/{name}/study1/done")
    code = rig.store.completion_code(collection.info.id)
    assert done.status_code == 200 and "Every item is submitted" in done.text
    assert code not in done.text and "completion code" not in done.text.replace("do not need a completion code", "")
    assert "What happens next" in done.text
    again = TestClient(create_app(rig.portal), base_url="http://portal.test").post(link)
    assert "You are done" in again.text and code not in again.text and "What happens next" in again.text


def test_study_1_participants_are_refused_at_study_2_before_its_onboarding(rig, tmp_path):
    from types import SimpleNamespace

    from crowdpref.config import load_study
    from crowdpref.portal.links import finish_url
    from crowdpref.portal.service import Portal
    from crowdpref.study1 import study1_collection
    from tests.integration.test_study1_collection import _questions

    name = "onb-excl"
    path = _write(rig.studies, name, participants="invite")
    data = yaml.safe_load(path.read_text())
    data["study2"]["onboarding"] = {k: v for k, v in ONBOARDING.items() if k != "examples"}
    path.write_text(yaml.safe_dump(data))
    opened: dict[str, Any] = {}

    def open_collection(p: Path, key: str) -> Any:  # study 2 stands in as a collection that excludes study 1's people
        if key not in opened:
            collection = study1_collection(load_study(p), _questions().head(6), rig.owner, tmp_path / f"run-{key}",
                                           rig.store, finish_url(rig.settings, name, key))
            collection.spec.dataset_settings = lambda: SimpleNamespace(guidelines="")  # type: ignore[method-assign]
            collection.spec.record = lambda item, swapped=None: item  # type: ignore[method-assign]
            if key == "study2":
                collection.spec.key, collection.spec.exclude_from = "study2", "study1"
                collection.spec.username_prefix = "s2"
            opened[key] = collection
        return opened[key]

    portal = Portal(rig.settings, rig.store, open_collection=open_collection)
    token = portal.invites.dumps
    portal.enter(name, "study1", {"invite": token({"study": name, "key": "study1", "id": "both"})})
    s2 = portal.collection(name, "study2").info.id
    try:
        portal.enter(name, "study2", {"invite": token({"study": name, "key": "study2", "id": "both"})})
        raise AssertionError("a study-1 participant began study 2's onboarding")
    except service.Refusal as refusal:
        assert refusal.status == 403 and "first part" in str(refusal)
    assert rig.store.onboarding_records(s2) == []  # refused before onboarding: nothing recorded
    fresh = portal.enter(name, "study2", {"invite": token({"study": name, "key": "study2", "id": "new"})})
    assert fresh.onboarding is not None and fresh.participant is None
    assert len(rig.store.onboarding_records(s2)) == 1 and _allocated(rig.store, s2) == (0, 0)


def test_a_prolific_participant_who_passes_is_found_by_their_session_at_once(rig):
    """The claim after the quiz carries the Prolific session over from the onboarding record, so
    a webhook naming the submission (its resource_id) finds the participant before they open
    the entry link again."""
    name = "onb-session"
    _study(rig, name, participants="prolific", screen_out_reward=50)
    client, entry_url, ids = _prolific_entry(rig, name)
    client.get(entry_url)
    client.post(f"/s/{name}/study1/onboarding/next")
    for i in range(2):
        client.post(f"/s/{name}/study1/onboarding/practice", data={"index": str(i), "choice": "1"})
    client.post(f"/s/{name}/study1/onboarding/next")
    passed = client.post(f"/s/{name}/study1/onboarding/quiz", data={"q0": "1", "q1": "2"}, follow_redirects=False)
    assert passed.status_code == 303 and passed.headers["location"].endswith("/welcome")
    [found] = rig.store.participations(session_id=ids["SESSION_ID"])  # by the hash of the session
    claimed = rig.store.participant(found.collection_id, rig.store.participants(found.collection_id)[0].username)
    assert found.participant_id == claimed.id and claimed.session_hash == rig.store.key_hash(ids["SESSION_ID"])
