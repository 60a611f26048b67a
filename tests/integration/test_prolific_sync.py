"""The recruit and sync-prolific flows and the monitoring task against the fake Prolific, on the
real embedded Argilla, the real store and Prefect's test harness: recruit publishes study 1's
Prolific study once (a rerun finds it; the link artifact points at the fake); people take
places and claim; one returns the study and the webhook never comes; the sync flow releases
their work, lists the finished one for review (the submission id only in the run folder's
private part) and raises places; the collection's monitoring artifacts show the Prolific state,
and say so - without failing - when Prolific cannot be read. No artifact carries a Prolific id."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import yaml
from prefect import flow

from crowdpref.runfolder import write_parquet
from crowdpref.settings import load_settings
from crowdpref.simulation.prolific_server import FakeProlific
from crowdpref.store import Claimed, open_store
from tests.integration.test_study1_collection import _questions
from tasks.collection import monitor_collection

pytestmark = pytest.mark.integration


@flow(name="monitor-for-test")
def _monitor(study: str) -> int:
    return monitor_collection(study, "study1").submitted


def _write_study(folder: Path, name: str, prolific: dict | None = None) -> str:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "seed": 3, "participants": "simulated",
        "study1": {"responses_per_question": 2, "questions_per_participant": 3, "inactive_after_minutes": 600,
                   "pool_size": 2},
        "study2": {"pairs_per_participant": 6},
        "crowd": {"arrive_via": "prolific"},
        # every needed place at once: these tests hold what the sync raises and caps; the paced
        # launch's steps have their own tests (tests/unit/test_launch_pacing.py)
        "prolific": prolific or {"study1": {"places": 2, "launch": {"mode": "all"}}},
    }))
    return str(path)


def _artifacts(name: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async def read() -> list:
        async with get_client() as client:
            return await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_=f"{name}-")))

    return sorted(asyncio.run(read()), key=lambda a: a.created)


def _latest(artifacts: list, key: str):
    return [a for a in artifacts if a.key == key][-1]


def test_recruit_sync_and_monitor_through_the_fake_prolific(prefect_harness, study_env, tmp_path, unique,
                                                            monkeypatch):
    from flows.recruit import recruit
    from flows.sync_prolific import sync_prolific
    from crowdpref.studies import open_collection

    name = f"r{unique}"
    study = _write_study(tmp_path, name)
    write_parquet(_questions(), study_env / "studies" / name / "questions.parquet")
    with FakeProlific(page_size=2) as fake:
        monkeypatch.setenv("CROWDPREF_FAKE_PROLIFIC_PORT", str(fake.port))
        settings = load_settings()
        assert sync_prolific(study) == {}  # nothing recruited yet: nothing to reconcile

        summary = recruit(study)  # key auto: study 1 (its answers are not in yet)
        assert (summary["key"], summary["state"], summary["places"]) == ("study1", "active", 2)
        assert recruit(study, "study1")["prolific_study"] == summary["prolific_study"]
        assert list(fake.studies) == [summary["prolific_study"]]
        study_id = summary["prolific_study"]

        # two people take places and claim (what the portal does on arrival)
        collection = open_collection(study, "study1")
        collection.refill_pool()
        people = []
        for _ in range(2):
            arrival = fake.arrive(study_id)
            claimed = collection.claim(arrival["participant_id"], "simulated")
            assert isinstance(claimed, Claimed)
            people.append((arrival, claimed))
        (gone, gone_claim), (done, done_claim) = people
        # one submits everything and finishes on Prolific (awaiting review); one returns the study,
        # and Prolific's webhook never reaches us (none is subscribed here)
        store = collection.store
        store.record_progress(collection.info.id, done_claim.participant.id,
                              {item: time.time() for item in done_claim.participant.held}, time.time())
        fake.complete(done["session_id"], store.completion_code(collection.info.id))
        fake.return_submission(gone["session_id"])

        rows = sync_prolific(study)
        row = rows["study1"]
        assert (row["returned"], row["released now"], row["awaiting review"], row["to review"]) == (1, 1, 1, 1)
        # 9 slots wait (3 released, 3 submitted of 12), 3 per person: 3 people; 2 places, 1 held -> 4
        assert row["places raised to"] == 4 and fake.studies[study_id]["total_available_places"] == 4
        store = open_store(settings)
        info = store.find_collection(name, "study1")
        released = store.participant(info.id, gone_claim.participant.username)
        assert released.status == "released" and released.release_reason == "RETURNED on Prolific (sync)"
        private = settings.runs_dir / name / "private" / "prolific-review-study1.json"
        assert [e["submission_id"] for e in json.loads(private.read_text())] == [done["session_id"]]

        # the collection's monitoring shows the Prolific state ...
        _monitor(study)
        artifacts = _artifacts(name)
        participants = _latest(artifacts, f"{name}-study1-participants")
        assert ("Prolific: 4 places, 0 active, 1 returned, 0 timed out, 1 awaiting review, 0 approved"
                in participants.description), participants.description
        assert "Prolific: 4 places" in _latest(artifacts, f"{name}-study1-progress").description
        # ... and says so, without failing, when Prolific cannot be read
        fake.add_faults(403)
        _monitor(study)
        participants = _latest(_artifacts(name), f"{name}-study1-participants")
        assert "Prolific: not read (ProlificAuthError" in participants.description, participants.description

        artifacts = _artifacts(name)
        link = _latest(artifacts, f"{name}-study1-prolific-study")
        assert link.data.endswith(f"]({fake.app_url})") and "FAKE" in link.data
        table = json.loads(_latest(artifacts, f"{name}-study1-prolific").data)
        assert table[0]["released now"] == 1
        assert any(done_claim.participant.username in str(r.get("to review")) for r in table[1:])
        text = json.dumps([a.model_dump(mode="json") for a in artifacts])
        ids = {s["participant_id"] for s in fake.submissions.values()} | set(fake.submissions)
        assert ids and not [i for i in ids if i in text]
        store.close()


def test_the_sync_flow_alone_approves_verified_work_once_and_stops_at_the_budget_cap(
        prefect_harness, study_env, tmp_path, unique, monkeypatch):
    """auto_approve: the completion code approves nobody - the honest completer's submission
    stays AWAITING REVIEW until the sync-prolific flow runs, then it is APPROVED; the one who
    reported the code without claiming any work never is. The bulk approval's reply is lost
    (Prolific acted): neither the client, nor the task's retry policy, nor the next sync sends
    it again. Places rise only to prolific.study1.max_places, and the artifact says so."""
    from flows.recruit import recruit
    from flows.sync_prolific import sync_prolific
    from crowdpref.prolific import ProlificClient
    from crowdpref.studies import open_collection

    name = f"v{unique}"
    study = _write_study(tmp_path, name, {"auto_approve": True, "study1": {"places": 2, "max_places": 3, "launch": {"mode": "all"}}})
    write_parquet(_questions(), study_env / "studies" / name / "questions.parquet")
    bulk = ("POST", "/api/v1/submissions/bulk-approve/")
    with FakeProlific(page_size=2) as fake:
        monkeypatch.setenv("CROWDPREF_FAKE_PROLIFIC_PORT", str(fake.port))
        study_id = recruit(study, "study1")["prolific_study"]
        collection = open_collection(study, "study1")
        collection.refill_pool()
        honest = fake.arrive(study_id)
        claimed = collection.claim(honest["participant_id"], "simulated")
        assert isinstance(claimed, Claimed)
        store = collection.store
        start = claimed.participant.claimed_at
        store.record_progress(collection.info.id, claimed.participant.id,
                              {item: start + 60 * (i + 1) for i, item in enumerate(claimed.participant.held)},
                              start + 200)
        stranger = fake.arrive(study_id)  # learned the code; never came to the portal
        code = store.completion_code(collection.info.id)
        fake.complete(honest["session_id"], code)
        fake.complete(stranger["session_id"], code)
        time.sleep(0.5)
        # the code asked for review only: nothing is approved until the sync runs
        assert [fake.submissions[a["session_id"]]["status"] for a in (honest, stranger)] == ["AWAITING REVIEW"] * 2

        real_bulk = ProlificClient.bulk_approve

        def lost_reply(self, submission_ids):  # Prolific approves, the reply never arrives
            fake.add_faults(disconnect="after")
            return real_bulk(self, submission_ids)

        monkeypatch.setattr(ProlificClient, "bulk_approve", lost_reply)
        row = sync_prolific(study)["study1"]
        assert fake.requests.count(bulk) == 1  # sent once: no client retry, no task retry
        assert fake.submissions[honest["session_id"]]["status"] == "APPROVED"
        assert fake.submissions[stranger["session_id"]]["status"] == "AWAITING REVIEW"
        assert row["approvals unconfirmed"] == 1 and row["approved now"] == 0
        # 9 slots wait, 3 per person: 3 people; 2 places, both held -> 5 wanted; the cap is 3
        assert (row["places raised to"], row["places capped at"], row["places short"]) == (3, 3, 2)
        assert fake.studies[study_id]["total_available_places"] == 3

        monkeypatch.setattr(ProlificClient, "bulk_approve", real_bulk)
        row = sync_prolific(study)["study1"]  # reads the approval back: counted, nothing sent again
        assert fake.requests.count(bulk) == 1 and row["approved"] == 1 and row["approvals unconfirmed"] == 0
        assert not [p for m, p in fake.requests if m == "POST" and p.endswith("/transition/") and "submissions" in p]
        assert fake.submissions[stranger["session_id"]]["status"] == "AWAITING REVIEW"
        assert fake.studies[study_id]["total_available_places"] == 3

        table = _latest(_artifacts(name), f"{name}-study1-prolific")
        assert ("places are at the budget cap 3 (prolific.study1.max_places): 2 more would be needed; raise the "
                "cap or let the pool wait") in table.description, table.description
        _monitor(study)  # the collection's own artifacts say it too
        participants = _latest(_artifacts(name), f"{name}-study1-participants")
        assert "budget cap 3 (prolific.study1.max_places)" in participants.description, participants.description
