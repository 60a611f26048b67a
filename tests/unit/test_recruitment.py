"""Recruitment on Prolific (crowdpref.recruitment) against the fake Prolific over HTTP, with the
real client and a real SQLite study store; no Argilla. Collections are the real study-1
collection with a stand-in for the Argilla owner (a release reads answers and deletes records
there: here there are none), or, for study 2's Prolific study (which reads nothing but the
store), a stand-in carrying only the store, its collection and the batch plan.

Covered: the study payload (placeholders, codes, group actions, blocklist filter, filters),
ensure_prolific_study (once; adopts a study a killed run created; the completers' group created
once and kept before use), setup_webhooks (the secret kept where the portal reads it; the
fake's signed deliveries verify with it; a second call does nothing), the sync (the backstop
release, approvals in one bulk call, review with reasons, places raised, no Prolific id in
anything printable), the monitoring read, the auto key, and the config fields."""

from __future__ import annotations

import json
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from crowdpref.config import Batches, StudyConfig, parse_study
from crowdpref.errors import ConfigError
from crowdpref.ids import stable_id
from crowdpref.portal.links import PROLIFIC_PLACEHOLDERS, prolific_entry_url, webhook_url
from crowdpref.prolific import ProlificClient, ProlificUnavailable, verify_webhook
from crowdpref.recruitment import (
    GROUP_META,
    WEBHOOK_SECRET_META,
    WEBHOOK_SUBSCRIPTION_META,
    auto_key,
    ensure_prolific_study,
    internal_name,
    holding,
    prolific_state,
    setup_webhooks,
    study_payload,
    sync_prolific,
)
from crowdpref.runfolder import RunFolder
from crowdpref.simulation.prolific_server import FakeProlific
from crowdpref.store import Claimed, Store, default_url
from crowdpref.study1 import study1_collection
from tests.conftest import isolated_settings

PORTAL = "https://portal.example.org"
QUESTIONS = [
    ("How would you tell a close friend that their new partner makes you uneasy?", "communication-skills"),
    ("What would you do if a colleague kept taking credit for shared work?", "conflict-resolution"),
    ("How should you respond when a stranger's joke at a party offends someone nearby?", "social-norms"),
    ("How would you comfort a neighbour whose pet has just died?", "empathy"),
    ("What is a fair way to split chores with a flatmate who works night shifts?", "negotiation-strategies"),
    ("How can you tell whether a friend's 'I'm fine' really means they are fine?", "reading-social-cues"),
]


def _config(**prolific: Any) -> StudyConfig:
    """6 questions, R = 2, Q = 3: 12 study-1 slots, 4 participant batches."""
    return parse_study({
        "name": "recruit-test", "title": "Social reasoning", "description": "A study about everyday situations.",
        "participants": "prolific",
        "questions": {"categories": sorted({c for _, c in QUESTIONS})},
        "study1": {"responses_per_question": 2, "questions_per_participant": 3},
        "study2": {"ratings_per_pair": 3, "pairs_per_participant": 6},
        "prolific": {"enabled": True, "study1": {"reward": 500, "estimated_completion_minutes": 25},
                     "study2": {"reward": 300, "estimated_completion_minutes": 15},
                     "filters": {"approval_rate": 98, "min_completed": 100}, **prolific},
    })


class NoArgilla:
    """The Argilla owner a release talks to, with nothing in it (participants here answer in
    the store only): answers cannot be read (the release goes on), there is no dataset to clean."""

    def user_id(self, username: str) -> str:
        return f"id-{username}"

    def find_dataset(self, name: str, workspace: str | None = None) -> None:
        return None

    def answers(self, dataset: Any) -> list[Any]:
        raise AssertionError("no dataset exists, no answers to read")

    def delete_records(self, dataset: Any, ids: list[str]) -> None:
        raise AssertionError("no dataset exists, nothing to delete")


@pytest.fixture()
def settings(tmp_path: Path):
    return isolated_settings(tmp_path / "home", portal_url=PORTAL, prolific_workspace_id="ws-1")


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store(default_url(tmp_path))
    yield store
    store.close()


@pytest.fixture()
def fake() -> Iterator[FakeProlific]:
    with FakeProlific(page_size=2, retry_delay_s=0.05) as fake:
        yield fake


@pytest.fixture()
def client(fake: FakeProlific) -> Iterator[ProlificClient]:
    with ProlificClient(fake.base_url, fake.token, backoff_s=0.0, sleep=lambda _s: None) as client:
        yield client


def _questions() -> pd.DataFrame:
    return pd.DataFrame([{"question_id": stable_id("q_", text.casefold()), "question": text, "category": cat}
                         for text, cat in QUESTIONS])


def _study1(config: StudyConfig, store: Store, tmp_path: Path):
    return study1_collection(config, _questions(), NoArgilla(), tmp_path / "run", store)


def _study2(config: StudyConfig, store: Store) -> SimpleNamespace:
    """Study 2's Prolific study reads only the store, the key and the batch plan."""
    items = [f"pair-{i}" for i in range(6)]
    info = store.collection(config.name, "study2", items, copies=3, per_participant=6, seed=0,
                            username_prefix=str(config.study2.username_prefix))
    return SimpleNamespace(store=store, info=info, spec=SimpleNamespace(key="study2", batches=Batches(18, 6)))


def _ours(client: ProlificClient, config: StudyConfig, key: str) -> list[Any]:
    return [s for s in client.list_studies() if s.internal_name == internal_name(config.name, key)]


# --- the payload -----------------------------------------------------------------------------------------
def test_study1_payload_names_the_portal_with_placeholders_and_adds_completers_to_the_group(settings) -> None:
    config = _config()
    body = study_payload(config, "study1", settings, "C1234567", places=4, completers_group="grp-1")
    assert body["name"] == "Social reasoning - part 1: writing answers"
    assert body["internal_name"] == "crowdpref:recruit-test:study1"
    assert body["external_study_url"] == f"{PORTAL}/s/recruit-test/study1?{PROLIFIC_PLACEHOLDERS}"
    assert body["external_study_url"] == prolific_entry_url(settings, "recruit-test", "study1")
    for placeholder in ("{{%PROLIFIC_PID%}}", "{{%STUDY_ID%}}", "{{%SESSION_ID%}}"):
        assert placeholder in body["external_study_url"]
    assert body["prolific_id_option"] == "url_parameters"
    assert body["completion_codes"] == [{"code": "C1234567", "code_type": "COMPLETED", "actions": [
        {"action": "MANUALLY_REVIEW"}, {"action": "ADD_TO_PARTICIPANT_GROUP", "participant_group": "grp-1"}]}]
    assert (body["total_available_places"], body["reward"], body["estimated_completion_time"]) == (4, 500, 25)
    assert body["filters"] == [{"filter_id": "approval_rate", "selected_range": {"lower": 98, "upper": 100}},
                               {"filter_id": "approval_numbers", "selected_range": {"lower": 100}}]
    assert body["submissions_config"] == {"max_submissions_per_participant": 1}
    assert "A study about everyday situations." in body["description"]


def test_study2_payload_blocklists_study1_completers_and_never_approves_on_the_code(settings) -> None:
    config = _config(auto_approve=True)
    body = study_payload(config, "study2", settings, "C7654321", places=3, completers_group="grp-1",
                         blocklist_group="grp-1")
    assert body["name"] == "Social reasoning - part 2: comparing answers"
    assert body["internal_name"] == "crowdpref:recruit-test:study2"
    assert body["external_study_url"].startswith(f"{PORTAL}/s/recruit-test/study2?")
    # study 2's completers join no group; even with auto_approve the code only asks for review
    # (the sync approves verified work through the API)
    assert body["completion_codes"][0]["actions"] == [{"action": "MANUALLY_REVIEW"}]
    assert "AUTOMATICALLY_APPROVE" not in json.dumps(body)
    study1_auto = study_payload(config, "study1", settings, "C1", places=1, completers_group="grp-1")
    assert study1_auto["completion_codes"][0]["actions"] == [
        {"action": "MANUALLY_REVIEW"}, {"action": "ADD_TO_PARTICIPANT_GROUP", "participant_group": "grp-1"}]
    assert {"filter_id": "participant_group_blocklist", "selected_values": ["grp-1"]} in body["filters"]
    assert (body["reward"], body["estimated_completion_time"]) == (300, 15)
    without = study_payload(config, "study2", settings, "C7654321", places=3)
    assert all(f["filter_id"] != "participant_group_blocklist" for f in without["filters"])
    # study 1 never blocklists, whatever it is given
    study1 = study_payload(config, "study1", settings, "C1", places=1, blocklist_group="grp-1")
    assert all(f["filter_id"] != "participant_group_blocklist" for f in study1["filters"])


def test_the_fake_prolific_accepts_the_payload(settings, client) -> None:
    study = client.create_study(study_payload(_config(), "study1", settings, "C1234567", places=4,
                                              completers_group="grp-1"))
    assert study.status == "UNPUBLISHED" and study.total_available_places == 4
    assert study.internal_name == "crowdpref:recruit-test:study1"


# --- the Prolific study, once ------------------------------------------------------------------------------
def test_ensure_prolific_study_creates_and_publishes_once(settings, store, fake, client, tmp_path) -> None:
    config = _config()
    collection = _study1(config, store, tmp_path)
    first = ensure_prolific_study(collection, config, settings, client)
    before = len(fake.requests)
    second = ensure_prolific_study(collection, config, settings, client)
    assert fake.requests[before:] == []  # the store's record answers: Prolific is not asked again
    assert second.external_id == first.external_id
    assert [s.id for s in _ours(client, config, "study1")] == [first.external_id]
    assert len(fake.studies) == 1
    assert first.state == "active" and fake.studies[first.external_id]["status"] == "ACTIVE"
    assert first.places == 4 == collection.spec.batches.participants  # one place per batch by default
    study = fake.studies[first.external_id]
    assert study["completion_codes"][0]["code"] == store.completion_code(collection.info.id)
    kinds = [e["kind"] for e in store.events(collection.info.id)]
    assert kinds.count("platform_study_created") == 1 and kinds.count("platform_study_published") == 1
    creates = [r for r in fake.requests if r == ("POST", "/api/v1/studies/")]
    transitions = [r for r in fake.requests if r[1].endswith("/transition/")]
    assert len(creates) == 1 and len(transitions) == 1


def test_a_study_created_by_a_killed_run_is_adopted_not_duplicated(settings, store, fake, client, tmp_path) -> None:
    config = _config()
    collection = _study1(config, store, tmp_path)
    # a run created the study on Prolific and was killed before recording it in the store
    orphan = client.create_study(study_payload(config, "study1", settings, store.completion_code(collection.info.id),
                                               places=4))
    assert store.platform_study(collection.info.id) is None
    platform = ensure_prolific_study(collection, config, settings, client)
    assert platform.external_id == orphan.id and platform.state == "active"
    assert [s.id for s in _ours(client, config, "study1")] == [orphan.id]
    assert [e["kind"] for e in store.events(collection.info.id, kinds=["platform_study_adopted"])] == \
        ["platform_study_adopted"]
    assert ensure_prolific_study(collection, config, settings, client).external_id == orphan.id


def test_a_kill_after_create_before_record_is_repaired_by_the_rerun(settings, store, fake, client, tmp_path,
                                                                    monkeypatch) -> None:
    config = _config()
    collection = _study1(config, store, tmp_path)

    def killed(*_args: Any, **_kwargs: Any) -> None:
        raise KeyboardInterrupt("killed between create and record")

    with monkeypatch.context() as patch:
        patch.setattr(store, "save_platform_study", killed)
        with pytest.raises(KeyboardInterrupt):
            ensure_prolific_study(collection, config, settings, client)
    assert len(fake.studies) == 1 and store.platform_study(collection.info.id) is None
    platform = ensure_prolific_study(collection, config, settings, client)
    assert len(fake.studies) == 1 and platform.external_id in fake.studies and platform.state == "active"
    assert len(fake.groups) == 1  # the completers' group was kept before the kill and reused


def test_publishing_does_not_repeat_the_transition_of_an_active_study(settings, store, fake, client, tmp_path) -> None:
    config = _config()
    collection = _study1(config, store, tmp_path)
    draft = ensure_prolific_study(collection, config, settings, client, publish=False)
    assert draft.state == "unpublished" and fake.studies[draft.external_id]["status"] == "UNPUBLISHED"
    client.publish_study(draft.external_id)  # someone published it on Prolific meanwhile
    published = ensure_prolific_study(collection, config, settings, client)
    assert published.state == "active"
    assert len([r for r in fake.requests if r[1].endswith("/transition/")]) == 1  # only ours above


def test_configured_places_override_the_batches(settings, store, fake, client, tmp_path) -> None:
    config = _config(study1={"places": 7})
    platform = ensure_prolific_study(_study1(config, store, tmp_path), config, settings, client)
    assert platform.places == 7 and fake.studies[platform.external_id]["total_available_places"] == 7


def test_the_completers_group_is_created_once_and_study2_blocklists_it(settings, store, fake, client, tmp_path) -> None:
    config = _config()
    s1 = ensure_prolific_study(_study1(config, store, tmp_path), config, settings, client)
    s2 = ensure_prolific_study(_study2(config, store), config, settings, client)
    assert len(fake.groups) == 1
    group = store.get_meta(GROUP_META.format(study=config.name))
    assert group in fake.groups and s1.group_id == group == s2.group_id
    actions = fake.studies[s1.external_id]["completion_codes"][0]["actions"]
    assert {"action": "ADD_TO_PARTICIPANT_GROUP", "participant_group": group} in actions
    assert {"filter_id": "participant_group_blocklist", "selected_values": [group]} in \
        fake.studies[s2.external_id]["filters"]
    assert s2.places == 3  # 18 ratings, 6 per person
    # Prolific keeps a study-1 completer out of study 2
    arrival = fake.arrive(s1.external_id)
    fake.complete(arrival["session_id"], store.completion_code(store.find_collection(config.name, "study1").id))
    with pytest.raises(Exception, match="blocklisted"):
        fake.arrive(s2.external_id, arrival["participant_id"])


def test_study2_first_creates_the_group_study1_then_uses(settings, store, fake, client, tmp_path) -> None:
    config = _config()
    s2 = ensure_prolific_study(_study2(config, store), config, settings, client)
    s1 = ensure_prolific_study(_study1(config, store, tmp_path), config, settings, client)
    assert len(fake.groups) == 1 and s1.group_id == s2.group_id == next(iter(fake.groups))


def test_the_group_is_kept_before_a_failed_create_so_the_rerun_makes_no_second_one(settings, store, fake, client,
                                                                                   tmp_path) -> None:
    config = _config()
    collection = _study1(config, store, tmp_path)
    real_create = client.create_study

    def lost(payload: Any) -> Any:  # Prolific answers 503 to the create: nothing made
        raise ProlificUnavailable("Prolific POST /studies/: 503", 503)

    client.create_study = lost  # type: ignore[method-assign]
    with pytest.raises(ProlificUnavailable):
        ensure_prolific_study(collection, config, settings, client)
    assert len(fake.groups) == 1 and store.get_meta(GROUP_META.format(study=config.name)) in fake.groups
    client.create_study = real_create  # type: ignore[method-assign]
    ensure_prolific_study(collection, config, settings, client)
    assert len(fake.groups) == 1 and len(fake.studies) == 1


# --- webhooks ------------------------------------------------------------------------------------------------
class _Receiver:
    """A stand-in for the portal's /hooks/prolific: keeps every delivery, answers 200."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.received.append(({k: v for k, v in self.headers.items()}, body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_setup_webhooks_keeps_the_secret_where_the_portal_reads_it_and_deliveries_verify(tmp_path, store, fake,
                                                                                        client) -> None:
    from crowdpref.portal.service import WEBHOOK_SECRET

    receiver = _Receiver()
    try:
        settings = isolated_settings(tmp_path / "home", portal_url=receiver.url)
        subscription = setup_webhooks(settings, store, client, "ws-1")
        assert WEBHOOK_SECRET == WEBHOOK_SECRET_META
        secret = store.get_meta(WEBHOOK_SECRET)
        assert secret == fake.secrets["ws-1"]
        assert store.get_meta(WEBHOOK_SUBSCRIPTION_META) == subscription
        sub = fake.subscriptions[subscription]
        assert sub["is_enabled"] and sub["event_type"] == "submission.status.change"
        assert sub["target_url"] == webhook_url(settings) == f"{receiver.url}/hooks/prolific"

        # a second call without force does nothing
        assert setup_webhooks(settings, store, client, "ws-1") == subscription
        assert len(fake.subscriptions) == 1 and store.get_meta(WEBHOOK_SECRET) == secret == fake.secrets["ws-1"]

        # a status change on Prolific arrives signed with the kept secret
        study = client.publish_study(client.create_study({
            "name": "x", "description": "x", "prolific_id_option": "url_parameters", "estimated_completion_time": 5,
            "reward": 100, "external_study_url": f"{receiver.url}/?{PROLIFIC_PLACEHOLDERS}",
            "total_available_places": 2,
            "completion_codes": [{"code": "C1", "code_type": "COMPLETED", "actions": [{"action": "MANUALLY_REVIEW"}]}]}).id)
        arrival = fake.arrive(study.id)
        fake.return_submission(arrival["session_id"])
        assert fake.wait_for_deliveries()
        assert receiver.received
        for headers, body in receiver.received:
            assert verify_webhook(store.get_meta(WEBHOOK_SECRET), headers, body, now=time.time())
        assert json.loads(receiver.received[-1][1])["status"] == "RETURNED"

        # force: a new secret (it replaces the old one on Prolific) and a new subscription
        again = setup_webhooks(settings, store, client, "ws-1", force=True)
        assert again != subscription and store.get_meta(WEBHOOK_SECRET) == fake.secrets["ws-1"] != secret
        assert store.get_meta(WEBHOOK_SUBSCRIPTION_META) == again
    finally:
        receiver.close()


def test_setup_webhooks_needs_a_workspace(settings, store, client) -> None:
    with pytest.raises(ConfigError, match="prolific_workspace_id is not set") as exc:
        setup_webhooks(settings, store, client, None)
    assert "\n" not in str(exc.value)
    assert store.get_meta(WEBHOOK_SECRET_META) is None


# --- the sync ---------------------------------------------------------------------------------------------------
def _arrive_and_claim(fake: FakeProlific, collection: Any, study_id: str) -> tuple[dict[str, Any], Claimed]:
    arrival = fake.arrive(study_id)
    claimed = collection.store.claim(collection.info, arrival["participant_id"], "prolific")
    assert isinstance(claimed, Claimed)
    return arrival, claimed


def _submit(collection: Any, claimed: Claimed, n: int | None = None, seconds_each: float = 60.0) -> None:
    """Submit the participant's first ``n`` held items, one every ``seconds_each`` after their claim."""
    held = claimed.participant.held[: n if n is not None else None]
    start = claimed.participant.claimed_at
    times = {item: start + seconds_each * (i + 1) for i, item in enumerate(held)}
    collection.store.record_progress(collection.info.id, claimed.participant.id, times, max(times.values()))


def test_sync_releases_returned_work_the_webhook_missed_and_raises_places(settings, store, fake, client,
                                                                        tmp_path) -> None:
    config = _config(study1={"places": 2})
    collection = _study1(config, store, tmp_path)
    platform = ensure_prolific_study(collection, config, settings, client)
    assert platform.places == 2
    arrival, claimed = _arrive_and_claim(fake, collection, platform.external_id)
    assert len(claimed.participant.held) == 3
    fake.return_submission(arrival["session_id"])  # no webhook subscription: nothing reaches us

    report = sync_prolific(collection, config, client)
    assert (report.returned, report.released_now, report.active) == (1, 1, 0)
    after = store.participant(collection.info.id, claimed.participant.username)
    assert after.status == "released" and after.release_reason == "RETURNED on Prolific (sync)"
    assert [e["participant_id"] for e in store.events(collection.info.id, kinds=["released_by_sync"])] == [after.id]
    # 12 slots unclaimed, 3 per person: 4 people; 2 places, none held (the return gave its back) -> 4
    assert report.places_raised_to == 4 == report.places
    assert fake.studies[platform.external_id]["total_available_places"] == 4
    assert store.platform_study(collection.info.id).places == 4
    again = sync_prolific(collection, config, client)
    assert again.places_raised_to is None and again.released_now == 0 and again.places == 4


def test_sync_releases_timed_out_and_rejected_too_but_never_twice(settings, store, fake, client, tmp_path) -> None:
    config = _config()
    collection = _study1(config, store, tmp_path)
    platform = ensure_prolific_study(collection, config, settings, client)
    timed, timed_claim = _arrive_and_claim(fake, collection, platform.external_id)
    rejected, rejected_claim = _arrive_and_claim(fake, collection, platform.external_id)
    fake.time_out(timed["session_id"])
    fake.complete(rejected["session_id"], store.completion_code(collection.info.id))
    client.reject_submission(rejected["session_id"], "x" * 100, "LOW_EFFORT")
    report = sync_prolific(collection, config, client)
    assert (report.timed_out, report.rejected, report.released_now) == (1, 1, 2)
    reasons = {store.participant(collection.info.id, c.participant.username).release_reason
               for c in (timed_claim, rejected_claim)}
    assert reasons == {"TIMED-OUT on Prolific (sync)", "REJECTED on Prolific (sync)"}
    assert sync_prolific(collection, config, client).released_now == 0


def _review_scene(settings, store, fake, client, tmp_path, **prolific: Any):
    """Three people on study 1: one finished everything, one submitted one item of three, one
    got a completion code without ever claiming through the portal."""
    config = _config(**prolific)
    collection = _study1(config, store, tmp_path)
    platform = ensure_prolific_study(collection, config, settings, client)
    code = store.completion_code(collection.info.id)
    done, done_claim = _arrive_and_claim(fake, collection, platform.external_id)
    _submit(collection, done_claim)
    part, part_claim = _arrive_and_claim(fake, collection, platform.external_id)
    _submit(collection, part_claim, 1)
    stranger = fake.arrive(platform.external_id)
    for arrival in (done, part, stranger):
        fake.complete(arrival["session_id"], code)
    return config, collection, platform, (done, done_claim), (part, part_claim), stranger


def test_sync_approves_complete_work_in_one_bulk_call_and_lists_the_rest(settings, store, fake, client,
                                                                          tmp_path) -> None:
    config, collection, platform, (done, done_claim), (part, part_claim), stranger = _review_scene(
        settings, store, fake, client, tmp_path)
    assert fake.submissions[done["session_id"]]["status"] == "AWAITING REVIEW"  # MANUALLY_REVIEW on the code
    report = sync_prolific(collection, config, client, auto_approve=True, private_dir=tmp_path / "private")
    assert (report.approved_now, report.approved, report.awaiting_review) == (1, 1, 2)
    assert fake.submissions[done["session_id"]]["status"] == "APPROVED"
    assert fake.submissions[part["session_id"]]["status"] == "AWAITING REVIEW"
    assert [r for r in fake.requests if r == ("POST", "/api/v1/submissions/bulk-approve/")] == \
        [("POST", "/api/v1/submissions/bulk-approve/")]
    assert sorted(report.review) == sorted([
        (part_claim.participant.username,  # unfinished, still active: a person decides, no rejection proposed
         "not finished (active, 1 of 3 items submitted): a person decides (no rejection proposed)"),
        ("(unknown)", "no work claimed through the portal (the code without any work) (proposed rejection: NO_DATA; "
                      "rule: the study's instruction: the work is done in the study's web tool (none was claimed "
                      "there))")])
    events = store.events(collection.info.id, kinds=["approved", "review"])
    assert [(e["kind"], e["participant_id"]) for e in events] == [
        ("review", part_claim.participant.id), ("approved", done_claim.participant.id)]
    # the submission ids for review are in the private file only
    private = tmp_path / "private" / "prolific-review-study1.json"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    listed = json.loads(private.read_text())
    assert {e["submission_id"] for e in listed} == {part["session_id"], stranger["session_id"]}
    # a second sync approves nothing again, logs no second review of the same person
    again = sync_prolific(collection, config, client, auto_approve=True, private_dir=tmp_path / "private")
    assert again.approved_now == 0 and again.approved == 1
    assert len(store.events(collection.info.id, kinds=["review"])) == 1
    assert len([r for r in fake.requests if r[1] == "/api/v1/submissions/bulk-approve/"]) == 1


def test_without_auto_approve_complete_work_is_listed_for_review(settings, store, fake, client, tmp_path) -> None:
    config, collection, platform, (done, done_claim), (part, part_claim), stranger = _review_scene(
        settings, store, fake, client, tmp_path)
    report = sync_prolific(collection, config, client, private_dir=tmp_path / "private")  # config: auto_approve off
    assert report.approved_now == 0 and report.awaiting_review == 3
    assert (done_claim.participant.username, "complete: approve") in report.review
    assert fake.submissions[done["session_id"]]["status"] == "AWAITING REVIEW"
    assert not any(r[1].endswith("bulk-approve/") or r[1].endswith("/transition/") and "submissions" in r[1]
                   for r in fake.requests)
    assert not store.events(collection.info.id, kinds=["approved"])
    # once reviewed and approved on Prolific, the private list empties (no stale ids stay behind)
    client.bulk_approve([done["session_id"], part["session_id"], stranger["session_id"]])
    sync_prolific(collection, config, client, private_dir=tmp_path / "private")
    assert json.loads((tmp_path / "private" / "prolific-review-study1.json").read_text()) == []


def test_the_config_decides_when_the_caller_does_not(settings, store, fake, client, tmp_path) -> None:
    config, collection, platform, (done, _), (part, _), _ = _review_scene(settings, store, fake, client, tmp_path)
    config.prolific.auto_approve = True  # (the study's code still asks for manual review)
    report = sync_prolific(collection, config, client)
    assert report.approved_now == 1 and fake.submissions[done["session_id"]]["status"] == "APPROVED"
    assert fake.submissions[part["session_id"]]["status"] == "AWAITING REVIEW"


def test_with_auto_approve_the_code_alone_approves_nobody(settings, store, fake, client, tmp_path) -> None:
    """The completion code asks for review even with auto_approve (anyone who learns it can
    report it): everyone waits on Prolific until the sync approves the verified one."""
    config, collection, platform, (done, _), (part, _), stranger = _review_scene(settings, store, fake, client,
                                                                                tmp_path, auto_approve=True)
    assert [fake.submissions[a["session_id"]]["status"] for a in (done, part, stranger)] == ["AWAITING REVIEW"] * 3
    report = sync_prolific(collection, config, client)
    assert report.approved == 1 and report.approved_now == 1 and report.awaiting_review == 2
    assert [fake.submissions[a["session_id"]]["status"] for a in (done, part, stranger)] == \
        ["APPROVED", "AWAITING REVIEW", "AWAITING REVIEW"]


def test_the_sync_report_never_carries_a_prolific_id(settings, store, fake, client, tmp_path) -> None:
    config, collection, platform, (done, _), (part, _), stranger = _review_scene(settings, store, fake, client,
                                                                                tmp_path)
    gone, _ = _arrive_and_claim(fake, collection, platform.external_id)
    fake.return_submission(gone["session_id"])
    fake.arrive(platform.external_id)  # one still working
    report = sync_prolific(collection, config, client, auto_approve=True, private_dir=tmp_path / "private")
    assert report.review and report.released_now == 1 and report.approved_now == 1 and report.active == 1
    printable = json.dumps([asdict(report), report.row(), repr(report), str(report)], default=str)
    ids = {s["participant_id"] for s in fake.submissions.values()} | set(fake.submissions)
    assert len(ids) == 2 * len(fake.submissions)
    assert not [i for i in ids if i in printable]
    # nor the store's event log
    log = json.dumps(store.events(collection.info.id), default=str)
    assert not [i for i in ids if i in log]


def test_holding_places() -> None:
    """Which submissions hold a place (the pace counts them as taken): not those that gave it back."""
    subs = [SimpleNamespace(status=s) for s in ("ACTIVE", "RESERVED", "AWAITING REVIEW", "APPROVED", "RETURNED",
                                                "TIMED-OUT", "REJECTED", "SCREENED OUT")]
    assert [s.status for s in holding(subs)] == ["ACTIVE", "RESERVED", "AWAITING REVIEW", "APPROVED"]


def test_no_places_are_raised_on_a_finished_study(settings, store, fake, client, tmp_path) -> None:
    config = _config(study1={"places": 1})
    collection = _study1(config, store, tmp_path)
    platform = ensure_prolific_study(collection, config, settings, client)
    client.transition_study(platform.external_id, "STOP")
    report = sync_prolific(collection, config, client)
    assert report.places_raised_to is None and fake.studies[platform.external_id]["total_available_places"] == 1


def test_sync_without_a_prolific_study_reads_nothing(settings, store, fake, client, tmp_path) -> None:
    config = _config()
    report = sync_prolific(_study1(config, store, tmp_path), config, client)
    assert report.places == 0 and report.review == [] and fake.requests == []


# --- what the monitoring shows -------------------------------------------------------------------------------------
def test_prolific_state_is_one_read_of_the_counts(settings, store, fake, client, tmp_path) -> None:
    config = _config()
    collection = _study1(config, store, tmp_path)
    assert prolific_state(config, settings, store, collection.info.id, client=client) is None  # no Prolific study
    assert fake.requests == []
    platform = ensure_prolific_study(collection, config, settings, client)
    a, b, c = (fake.arrive(platform.external_id) for _ in range(3))
    fake.return_submission(a["session_id"])
    fake.complete(b["session_id"], store.completion_code(collection.info.id))
    before = len(fake.requests)
    state = prolific_state(config, settings, store, collection.info.id, client=client)
    assert len(fake.requests) == before + 1
    assert (state.places, state.active, state.returned, state.awaiting_review, state.approved, state.error) == \
        (4, 1, 1, 1, 0, None)
    assert state.describe() == ("Prolific: 4 places, 1 active, 1 returned, 0 timed out, 1 awaiting review, "
                                "0 approved")


def test_a_prolific_failure_is_reported_not_raised(settings, store, fake, client, tmp_path) -> None:
    config = _config()
    collection = _study1(config, store, tmp_path)
    ensure_prolific_study(collection, config, settings, client)
    fake.add_faults(503, count=10)
    state = prolific_state(config, settings, store, collection.info.id, client=client)
    assert state is not None and state.places == 4 and "ProlificUnavailable" in state.error
    assert state.describe().startswith("Prolific: not read (ProlificUnavailable: ")
    fake.faults.clear()
    # no token: the client cannot even be made
    state = prolific_state(config, settings, store, collection.info.id)
    assert state is not None and "PROLIFIC_TOKEN is not set" in state.error


def test_a_study_without_prolific_shows_nothing(settings, store, tmp_path) -> None:
    config = parse_study({"name": "invited", "participants": "invite"})
    assert prolific_state(config, settings, store, 1) is None


# --- recruit: which key ------------------------------------------------------------------------------------------
def test_auto_key_follows_the_collections(tmp_path) -> None:
    run = RunFolder.for_study(tmp_path, "s")
    run.path.mkdir(parents=True)
    assert auto_key(run) == "study1"
    run.responses.write_text("")
    with pytest.raises(ConfigError, match="run the collect-ratings flow"):
        auto_key(run)
    run.pairs.write_text("")
    assert auto_key(run) == "study2"


# --- config ----------------------------------------------------------------------------------------------------------
def test_prolific_config_fields() -> None:
    config = _config()
    assert config.prolific.auto_approve is False and config.prolific.study1.places is None
    assert _config(auto_approve=True, study2={"places": 9}).prolific.study2.places == 9
    with pytest.raises(ConfigError, match=r"prolific\.study1\.places: must be >= 1") as exc:
        _config(study1={"places": 0})
    assert "\n" not in str(exc.value)
    with pytest.raises(ConfigError, match=r"prolific\.auto_approve: must be true or false"):
        _config(auto_approve="yes")
    with pytest.raises(ConfigError, match=r"prolific\.workspace_id: unknown field"):
        _config(workspace_id="ws-1")  # a setting (prolific_workspace_id), not study config
    row = dict(_config(study1={"places": 5}).summary_rows())["Prolific"]
    assert "5 places" in row and "a place per batch" in row and "listed for review" in row
    assert "approved by the sync" in dict(_config(auto_approve=True).summary_rows())["Prolific"]


# --- the CLI -------------------------------------------------------------------------------------------------------
@pytest.fixture()
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeProlific) -> Path:
    from tests.conftest import CONNECTION_ENV

    for name in CONNECTION_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CROWDPREF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CROWDPREF_FAKE_PROLIFIC_PORT", str(fake.port))
    monkeypatch.setenv("CROWDPREF_PORTAL_URL", PORTAL)
    monkeypatch.setenv("CROWDPREF_PROLIFIC_WORKSPACE_ID", "ws-cli")
    return tmp_path


def _study_file(folder: Path, **data: Any) -> str:
    import yaml

    path = folder / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_cli_prolific_webhooks_subscribes_once(cli_env: Path, fake: FakeProlific) -> None:
    from typer.testing import CliRunner

    from crowdpref.cli import app

    study = _study_file(cli_env, name="hooks", participants="simulated", crowd={"arrive_via": "prolific"})
    first = CliRunner().invoke(app, ["prolific-webhooks", "--study", study])
    assert first.exit_code == 0, first.output
    [subscription] = fake.subscriptions
    assert subscription in first.output and f"{PORTAL}/hooks/prolific" in first.output
    assert fake.subscriptions[subscription]["is_enabled"] and "ws-cli" in fake.secrets
    again = CliRunner().invoke(app, ["prolific-webhooks", "--study", study])
    assert again.exit_code == 0 and "already subscribed" in again.output and subscription in again.output
    assert len(fake.subscriptions) == 1
    forced = CliRunner().invoke(app, ["prolific-webhooks", "--study", study, "--force"])
    assert forced.exit_code == 0 and len(fake.subscriptions) == 2


def test_cli_prolific_webhooks_errors_are_one_line(cli_env: Path) -> None:
    from typer.testing import CliRunner

    from crowdpref.cli import app

    real = _study_file(cli_env, name="real", participants="prolific", prolific={"enabled": True})
    result = CliRunner().invoke(app, ["prolific-webhooks", "--study", real])
    assert result.exit_code != 0 and "PROLIFIC_TOKEN is not set" in result.output
    invited = _study_file(cli_env, name="invited", participants="invite")
    result = CliRunner().invoke(app, ["prolific-webhooks", "--study", invited])
    assert result.exit_code != 0 and "does not recruit on Prolific" in result.output
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1


def test_cli_invite_prints_signed_links_for_invite_studies_only(cli_env: Path) -> None:
    from typer.testing import CliRunner

    from crowdpref.cli import app
    from crowdpref.portal.service import Portal
    from crowdpref.settings import load_settings
    from crowdpref.store import open_store

    (cli_env / "studies").mkdir()  # the portal's studies folder (portal_studies): it serves the study from there
    study = _study_file(cli_env / "studies", name="invited", participants="invite")
    result = CliRunner().invoke(app, ["invite", study, "--key", "study2", "-n", "3"])
    assert result.exit_code == 0, result.output
    links = result.output.split()
    assert len(links) == 3 == len(set(links))
    assert all(link.startswith(f"{PORTAL}/s/invited/study2?invite=") for link in links)
    store = open_store(load_settings())
    try:
        portal = Portal(load_settings(), store)
        tokens = [portal.invites.loads(link.split("invite=", 1)[1]) for link in links]
    finally:
        store.close()
    assert {(t["study"], t["key"]) for t in tokens} == {("invited", "study2")} and len({t["id"] for t in tokens}) == 3

    other = _study_file(cli_env, name="crowd", participants="simulated")
    refused = CliRunner().invoke(app, ["invite", other, "-n", "2"])
    assert refused.exit_code != 0 and "invitation links are for participants: invite" in refused.output
    assert len([line for line in refused.output.splitlines() if line.strip()]) == 1
    bad_key = CliRunner().invoke(app, ["invite", study, "--key", "study3"])
    assert bad_key.exit_code != 0 and "--key must be study1 or study2" in bad_key.output


# --- decisions from the quality checks and time on task -----------------------------------------------
def _finished_scene(settings, store, fake, client, tmp_path, seconds_each: float = 60.0, **prolific: Any):
    config = _config(**prolific)
    collection = _study1(config, store, tmp_path)
    platform = ensure_prolific_study(collection, config, settings, client)
    code = store.completion_code(collection.info.id)
    arrival, claimed = _arrive_and_claim(fake, collection, platform.external_id)
    _submit(collection, claimed, seconds_each=seconds_each)
    fake.complete(arrival["session_id"], code)
    return config, collection, arrival, claimed


def test_failed_checks_are_listed_with_a_proposed_rejection_and_never_approved(settings, store, fake, client,
                                                                               tmp_path) -> None:
    config, collection, arrival, claimed = _finished_scene(settings, store, fake, client, tmp_path)
    store.record_checks(collection.info.id, claimed.participant.id, {"check-i-x": False}, "failed")
    report = sync_prolific(collection, config, client, auto_approve=True, private_dir=tmp_path / "private")
    assert report.approved_now == 0 and report.rejected_now == 0
    assert report.review == [(claimed.participant.username, "failed the quality checks (proposed rejection: "
                              "FAILED_CHECK; rule: study1.checks: pass all attention checks, as the instructions say)")]
    assert fake.submissions[arrival["session_id"]]["status"] == "AWAITING REVIEW"  # nothing rejected by itself
    listed = json.loads((tmp_path / "private" / "prolific-review-study1.json").read_text())
    assert listed[0]["proposed_category"] == "FAILED_CHECK" and len(listed[0]["proposed_message"]) >= 100
    assert listed[0]["rule"].startswith("study1.checks:")
    assert "exactly which word to write" in listed[0]["proposed_message"]  # study 1's kind of check
    event = store.events(collection.info.id, kinds=["review"])[0]
    assert json.loads(event["detail"])["proposed_category"] == "FAILED_CHECK"


def test_auto_reject_rejects_failed_checks_on_prolific_with_the_message(settings, store, fake, client,
                                                                        tmp_path) -> None:
    config, collection, arrival, claimed = _finished_scene(settings, store, fake, client, tmp_path,
                                                           auto_reject=True)
    store.record_checks(collection.info.id, claimed.participant.id, {"check-i-x": False}, "failed")
    report = sync_prolific(collection, config, client, auto_approve=True)
    assert report.rejected_now == 1 and report.approved_now == 0 and report.review == []
    assert fake.submissions[arrival["session_id"]]["status"] == "REJECTED"  # the fake wants >= 100 chars + category
    assert [json.loads(e["detail"])["category"] for e in store.events(collection.info.id, kinds=["rejected"])] == \
        ["FAILED_CHECK"]
    assert sync_prolific(collection, config, client, auto_approve=True).rejected_now == 0  # once


def test_too_fast_work_is_held_for_review_even_with_auto_reject(settings, store, fake, client, tmp_path) -> None:
    config, collection, arrival, claimed = _finished_scene(settings, store, fake, client, tmp_path,
                                                           seconds_each=2.0, auto_reject=True)
    report = sync_prolific(collection, config, client, auto_approve=True, private_dir=tmp_path / "private")
    assert report.approved_now == 0 and report.rejected_now == 0
    assert report.review == [(claimed.participant.username,
                              "too fast (2 s per item, below 20 s) (proposed rejection: TOO_QUICKLY; rule: "
                              "study1.too_fast_seconds: at least 20 s per item (median))")]
    assert fake.submissions[arrival["session_id"]]["status"] == "AWAITING REVIEW"


def test_complete_passed_and_unhurried_work_is_approved(settings, store, fake, client, tmp_path) -> None:
    config, collection, arrival, claimed = _finished_scene(settings, store, fake, client, tmp_path)
    store.record_checks(collection.info.id, claimed.participant.id, {"check-i-x": True}, "passed")
    report = sync_prolific(collection, config, client, auto_approve=True)
    assert report.approved_now == 1 and fake.submissions[arrival["session_id"]]["status"] == "APPROVED"
