"""The whole participant lifecycle through the fake Prolific and the portal, on the real
embedded Argilla, the real store and Prefect's test harness: the study flow publishes each
study's Prolific study once, simulated participants take places on the fake Prolific, open the
portal link, are verified, claim, are sent into Argilla, and either finish (completion redirect
with the right code; approved by the sync), return the study (the signed webhook frees their
work at once, and the next arrival claims it) or time out. A study-1 completer is kept out of
study 2 by Prolific's blocklist AND, when they get the link anyway, by the portal. A webhook
that never arrives is caught by the sync, which also raises places for freed work."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
import yaml

from crowdpref.portal.app import create_app
from crowdpref.portal.service import Portal
from crowdpref.prolific import ProlificClient
from crowdpref.recruitment import ensure_prolific_study, internal_name, setup_webhooks, sync_prolific
from crowdpref.settings import load_settings
from crowdpref.simulation.arrivals import ProlificDoor, simulated_prolific_id
from crowdpref.simulation.prolific_server import FakeProlific
from crowdpref.store import open_store
from tests.browser.test_token_sign_in import _share_argilla_key as share_signing_key
from tests.conftest import free_port
from tests.portal_server import PortalThread

pytestmark = pytest.mark.integration


def _study(folder: Path, name: str, **overrides: object) -> str:
    data = {
        "name": name, "seed": 5, "participants": "simulated",
        "questions": {"categories": ["empathy", "ethics"], "per_category": 3},
        # too_fast_seconds 0: the simulated crowd submits a batch in one call (time on task means nothing)
        # pool_size 3 (new-study's template has 2): a crowd of about a dozen needs no pool of 10
        # warm accounts, each a user, a workspace and a dataset in Argilla that nobody claims
        "study1": {"responses_per_question": 4, "questions_per_participant": 3, "inactive_after_minutes": 30,
                   "too_fast_seconds": 0, "pool_size": 3},
        "study2": {"ratings_per_pair": 3, "pairs_per_participant": 12, "inactive_after_minutes": 30,
                   "too_fast_seconds": 0, "pool_size": 3},
        "screening": {"fallback": "profanity-check"},
        "crowd": {"dropout_rate": 0.2, "never_start_rate": 0.1, "low_effort_rate": 0.1, "offensive_rate": 0.0,
                  "arrive_via": "prolific"},
        "prolific": {"auto_approve": True},
    }
    for key, value in overrides.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value  # type: ignore[dict-item]
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.fixture()
def prolific_stack(study_env: Path, argilla_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The fake Prolific, and the portal over real HTTP serving the studies in ``tmp_path/studies``,
    subscribed to the fake's webhooks, opening paced launches' places as a deployed portal does."""
    studies = tmp_path / "studies"
    studies.mkdir()
    with FakeProlific(page_size=5, retry_delay_s=0.1) as fake:
        monkeypatch.setenv("CROWDPREF_FAKE_PROLIFIC_PORT", str(fake.port))
        port = free_port()
        monkeypatch.setenv("CROWDPREF_PORTAL_PORT", str(port))
        # no Caddy in front here: the portal and Argilla at their own addresses (these clients are no
        # browsers, so the stack's one origin is not needed)
        monkeypatch.setenv("CROWDPREF_PORTAL_URL", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("CROWDPREF_ARGILLA_PUBLIC_URL", os.environ["CROWDPREF_ARGILLA_URL"])
        monkeypatch.setenv("CROWDPREF_PORTAL_STUDIES", str(studies))
        settings = load_settings()
        share_signing_key(argilla_server, settings)
        store = open_store(settings)
        portal = Portal(settings, store)
        with PortalThread(create_app(portal, launch_pacer=True), port=settings.portal_port), \
                ProlificClient(fake.base_url, fake.token) as client:
            setup_webhooks(settings, store, client, "workspace", force=True)
            yield fake, client, studies, settings
        store.close()


def test_both_studies_through_the_fake_prolific_and_the_portal(prefect_harness, prolific_stack, argilla_server, unique):
    from flows.study import study as study_flow

    fake, client, studies, settings = prolific_stack
    name = f"l{unique}"
    study = _study(studies, name)
    result = study_flow(study, simulate=True, max_wait_s=5)
    assert result["status"] == "complete", result
    run_dir = settings.runs_dir / name

    # exactly R answers per question and R ratings per pair
    responses = pd.read_parquet(run_dir / "responses.parquet")
    assert responses.groupby("question_id").size().tolist() == [4] * 6
    ratings = pd.read_parquet(run_dir / "ratings.parquet")
    assert ratings.groupby("pair_id").size().unique().tolist() == [3]

    # one Prolific study per collection, published, with the portal's entry URL
    ours = [s for s in client.list_studies() if s.internal_name and s.internal_name.startswith(f"crowdpref:{name}:")]
    assert sorted(s.internal_name for s in ours) == [internal_name(name, "study1"), internal_name(name, "study2")]
    # (the list shows StudyShort: each study read in full for its URL and filters)
    by_key = {s.internal_name.rsplit(":", 1)[1]: client.get_study(s.id) for s in ours}
    assert by_key["study1"].external_study_url.startswith(f"{settings.portal_public_url}/s/{name}/study1?PROLIFIC_PID=")

    store = open_store(settings)
    s1, s2 = store.find_collection(name, "study1"), store.find_collection(name, "study2")
    released = [p for p in store.participants(s1.id) if p.status == "released"]
    assert any(p.release_reason == "RETURNED on Prolific" for p in released), [p.release_reason for p in released]
    assert store.events(s1.id, kinds=["reallocated"]), "the freed work was claimed by a later arrival"
    assert len(store.deliveries("prolific")) >= len(released)
    # everyone who finished got the right code, landed on Prolific's completion page, and was approved
    code1, code2 = store.completion_code(s1.id), store.completion_code(s2.id)
    completed1 = [p for p in store.participants(s1.id) if p.status == "complete"]
    assert fake.completion_visits.count(code1) == len(completed1) and code2 in fake.completion_visits
    # the code asks for review only (auto_approve is the sync's job): every approval so far is
    # one the sync made and recorded; whoever finished after the collection's last sync waits
    subs1 = client.list_submissions(by_key["study1"].id)
    approved_by_sync = store.events(s1.id, kinds=["approved"])
    assert sum(s.status == "APPROVED" for s in subs1) == len(approved_by_sync)
    assert sum(s.status in ("APPROVED", "AWAITING REVIEW") for s in subs1) >= len(completed1)
    from flows.sync_prolific import sync_prolific as sync_flow

    sync_flow(study)  # the backstop sync approves the rest of the verified work
    subs1 = client.list_submissions(by_key["study1"].id)
    assert sum(s.status == "APPROVED" for s in subs1) == len(completed1) == len(store.events(s1.id, kinds=["approved"]))
    assert {s.study_code for s in subs1 if s.status == "APPROVED"} == {code1}

    # study 1's completers are in the group study 2 blocklists ...
    group = store.get_meta(f"prolific-group:{name}")
    assert {"filter_id": "participant_group_blocklist", "selected_values": [group]} in by_key["study2"].filters
    members = set(fake.groups[group]["members"])
    assert len(members) == len(completed1)
    # ... so Prolific does not let one take study 2, and if they get the link anyway, the portal refuses
    completer = sorted(members)[0]
    import httpx

    assert httpx.post(f"{fake.app_url}/_fake/studies/{by_key['study2'].id}/arrive",
                      json={"participant_id": completer}).status_code == 403
    with fake.lock:  # Prolific's filter missed them (a stale group): they hold a real session
        fake.studies[by_key["study2"].id]["filters"] = []
    client.increase_places(by_key["study2"].id, by_key["study2"].total_available_places + 5)
    arrival = httpx.post(f"{fake.app_url}/_fake/studies/{by_key['study2'].id}/arrive",
                         json={"participant_id": completer}).json()
    entry = httpx.get(arrival["url"], follow_redirects=False)
    assert entry.status_code == 403 and "first part of this project" in entry.text
    assert store.participant_by_key(s2.id, completer) is None
    assert not set(store.key_hashes(s1.id)) & set(store.key_hashes(s2.id))  # nobody from study 1 rated
    store.close()


def test_a_lost_webhook_is_caught_by_the_sync_which_raises_places(prolific_stack, argilla_server, unique):
    from crowdpref.runfolder import write_parquet
    from crowdpref.studies import open_collection
    from tests.integration.test_study1_collection import _questions

    fake, client, studies, settings = prolific_stack
    name = f"s{unique}"
    study = _study(studies, name, study1={"responses_per_question": 2, "questions_per_participant": 3},
                   study2={"pairs_per_participant": 6}, prolific={"auto_approve": True, "study1": {"places": 2}})
    write_parquet(_questions(), settings.runs_dir / name / "questions.parquet")
    collection = open_collection(study, "study1")
    from crowdpref.config import load_study

    config = load_study(study)
    platform = ensure_prolific_study(collection, config, settings, client)
    assert ensure_prolific_study(collection, config, settings, client).external_id == platform.external_id
    assert platform.state == "active" and platform.places == 2
    assert len([s for s in client.list_studies() if s.internal_name == internal_name(name, "study1")]) == 1

    fake.drop_webhooks = True  # Prolific's webhook never arrives
    door = ProlificDoor(collection, config.seed, settings.portal_public_url, client, fake.app_url)
    try:
        first = door.arrive("sim-study1-0001")
        assert first is not None and len(first.participant.held) == 3
        assert door.leave("sim-study1-0001", "return")
        assert fake.wait_for_deliveries()
        assert collection.store.participant(collection.info.id, first.participant.username).status == "active"

        report = sync_prolific(collection, config, client)
        assert report.released_now == 1 and report.returned == 1
        after = collection.store.participant(collection.info.id, first.participant.username)
        assert after.status == "released" and after.release_reason == "RETURNED on Prolific (sync)"
        # 12 slots free again, 3 per person: 4 people needed; 2 places, none held -> 2 more places
        assert report.places_raised_to == 4 and client.get_study(platform.external_id).total_available_places == 4
        assert sync_prolific(collection, config, client).places_raised_to is None  # nothing more to do

        # the freed slots are takeable again: the next arrival gets a full batch and only their
        # 3 are held (which 3 of the 6 equally open questions is the salted tie-break's choice)
        second = door.arrive("sim-study1-0002")
        assert second is not None and len(second.participant.held) == 3
        progress = collection.progress()
        assert (progress.outstanding, progress.unclaimed) == (3, 9)
    finally:
        door.close()
    # the returned participant's Prolific id never reached the store in the clear
    pid = simulated_prolific_id(config.seed, "sim-study1-0001")
    store_bytes = b"".join(p.read_bytes() for p in settings.state_dir.glob("store.sqlite*"))
    assert pid.encode() not in store_bytes


def test_the_portal_verifies_prolific_visitors_before_allocating(prolific_stack, argilla_server, unique):
    """A SESSION_ID of someone else, the wrong study, an unknown session, a returned submission,
    a study not published yet: each refused with its status, and nothing is claimed."""
    import httpx

    from crowdpref.config import load_study
    from crowdpref.runfolder import write_parquet
    from crowdpref.studies import open_collection
    from tests.integration.test_study1_collection import _questions

    fake, client, studies, settings = prolific_stack
    name = f"v{unique}"
    study = _study(studies, name, study1={"responses_per_question": 2, "questions_per_participant": 3},
                   study2={"pairs_per_participant": 6})
    write_parquet(_questions(), settings.runs_dir / name / "questions.parquet")
    collection = open_collection(study, "study1")
    entry = f"{settings.portal_public_url}/s/{name}/study1"
    ids = "PROLIFIC_PID={}&STUDY_ID={}&SESSION_ID={}"
    not_yet = httpx.get(f"{entry}?{ids.format('a' * 24, 'b' * 24, 'c' * 24)}", follow_redirects=False)
    assert not_yet.status_code == 409 and "not open yet" in not_yet.text

    platform = ensure_prolific_study(collection, load_study(study), settings, client)
    other = client.publish_study(client.create_study({
        "name": "another", "description": "Another study of the same workspace.",
        "external_study_url": by_placeholders(entry), "prolific_id_option": "url_parameters",
        "estimated_completion_time": 10, "reward": 150, "total_available_places": 5,
        "completion_codes": [{"code": "X", "code_type": "COMPLETED", "actions": []}]}).id)
    alice, bob = fake.arrive(platform.external_id), fake.arrive(platform.external_id)
    elsewhere = fake.arrive(other.id, alice["participant_id"])
    cases = [
        (ids.format(bob["participant_id"], platform.external_id, alice["session_id"]), 403, "someone else"),
        (ids.format(alice["participant_id"], other.id, elsewhere["session_id"]), 403, "another Prolific study"),
        (ids.format(alice["participant_id"], platform.external_id, "0" * 24), 403, "does not know this session"),
    ]
    for query, status, words in cases:
        response = httpx.get(f"{entry}?{query}", follow_redirects=False)
        assert (response.status_code, words in response.text) == (status, True), (query, response.text)
        assert alice["participant_id"] not in response.text and bob["participant_id"] not in response.text
    fake.return_submission(bob["session_id"])
    returned = httpx.get(f"{entry}?{ids.format(bob['participant_id'], platform.external_id, bob['session_id'])}",
                         follow_redirects=False)
    assert returned.status_code == 409 and "returned" in returned.text
    assert collection.participants() == []  # nothing was allocated to anyone
    good = httpx.get(f"{entry}?{ids.format(alice['participant_id'], platform.external_id, alice['session_id'])}",
                     follow_redirects=False)
    assert good.status_code == 303 and len(collection.participants()) == 1


def by_placeholders(entry: str) -> str:
    return f"{entry}?PROLIFIC_PID={{{{%PROLIFIC_PID%}}}}&STUDY_ID={{{{%STUDY_ID%}}}}&SESSION_ID={{{{%SESSION_ID%}}}}"


def test_the_simulated_crowd_walks_onboarding_and_the_quiz_screens_out_whom_it_should(
        prefect_harness, prolific_stack, argilla_server, unique):
    """Study 1 with the demo's onboarding (practice, a 4-question quiz, 2 attempts) and a crowd
    where most writers never read instructions (careless_rate 0.7): every newcomer walks the portal's onboarding pages;
    whoever the quiz screens out is given the researcher's screen-out code through the API (by the
    portal after its reply, else by the sync: paid the fixed reward, no place held; no code is
    shown to anyone) and holds no work; the others claim, write and finish as before."""
    from flows.collect_responses import collect_responses
    from flows.generate_questions import generate_questions
    from flows.study import _advance

    fake, client, studies, settings = prolific_stack
    demo = yaml.safe_load((Path(__file__).resolve().parents[2] / "studies" / "demo.yaml").read_text())
    name = f"o{unique}"
    study = _study(studies, name, study1={"onboarding": demo["study1"]["onboarding"]},
                   crowd={"careless_rate": 0.7, "dropout_rate": 0.0, "never_start_rate": 0.0},
                   prolific={"study1": {"reward": 450}})
    # study 1 only, as the study flow runs it (what this test holds is study 1's onboarding; the
    # whole flow through the fake Prolific is test_both_studies_through_the_fake_prolific_and_the_portal)
    generate_questions(study)
    status = _advance(study, "study1", collect_responses, simulate=True, max_wait_s=5, max_visits=25, on_prolific=True)
    assert status == "complete", status

    store = open_store(settings)
    s1 = store.find_collection(name, "study1")
    records = store.onboarding_records(s1.id)
    screened = [r for r in records if r.status == "screened_out"]
    passed = [r for r in records if r.status == "passed"]
    assert screened and passed, [r.status for r in records]
    assert all(r.attempts_used == 2 and r.practice_answered == 3 for r in screened)
    # nothing allocated to a screened-out person; everyone who claimed passed first
    claimed = set(store.key_hashes(s1.id))
    assert not claimed & {r.key_hash for r in screened}
    assert claimed <= {r.key_hash for r in passed}
    # each screened-out person's submission got the screen-out code (paid, no place held), never the completion code
    assert len(fake.screen_out_payments) == len(screened)
    paid = [json.loads(e["detail"])["person"] for e in store.events(s1.id, kinds=["screen_out_paid"])]
    assert sorted(paid) == sorted(r.key_hash for r in screened)  # exactly the people the quiz screened out
    study1 = next(s for s in client.list_studies() if s.internal_name == internal_name(name, "study1"))
    subs = client.list_submissions(study1.id)
    assert sum(s.status == "SCREENED OUT" for s in subs) == len(screened)
    assert {s.study_code for s in subs if s.status == "SCREENED OUT"} == {store.screen_out_code(s1.id)}
    # participants.parquet: a row for each person screened out (nothing assigned), attempts and scores for all
    people = pd.read_parquet(settings.runs_dir / name / "participants.parquet")
    study1_rows = people[people["study"] == "study1"]
    assert (study1_rows["status"] == "screened_out").sum() == len(screened)
    assert (study1_rows.loc[study1_rows["status"] == "screened_out", "items_assigned"] == 0).all()
    assert (study1_rows["onboarding_attempts"] >= 1).all()
    # the work is all there: R answers per question
    responses = pd.read_parquet(settings.runs_dir / name / "responses.parquet")
    assert responses.groupby("question_id").size().tolist() == [4] * 6
    store.close()
