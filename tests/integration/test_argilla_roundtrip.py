"""The embedded Argilla does what the study method needs, through the real HTTP API:
owner sets up workspace/user/dataset, logs records by id (idempotently), an annotator answers
through the annotator API (what the web UI calls), the owner reads the answers back, and an
annotator outside the workspace is refused."""

from __future__ import annotations

import secrets

import argilla as rg
import httpx
import pytest

pytestmark = pytest.mark.integration


def annotator_session(api_url: str, username: str, password: str) -> httpx.Client:
    """Log in like the web UI does (token from username/password)."""
    token = httpx.post(f"{api_url}/api/v1/token", data={"username": username, "password": password}, timeout=10)
    token.raise_for_status()
    return httpx.Client(
        base_url=api_url,
        headers={"Authorization": f"Bearer {token.json()['access_token']}"},
        timeout=30,
    )


PENDING = {"filters": {"and": [{"type": "terms", "scope": {"entity": "response", "property": "status"}, "values": ["pending"]}]}}


@pytest.fixture(scope="module")
def owner(argilla_server) -> rg.Argilla:
    return rg.Argilla(api_url=argilla_server.api_url, api_key=argilla_server.owner_api_key, timeout=60)


def _study1_settings(min_submitted: int) -> rg.Settings:
    return rg.Settings(
        fields=[rg.TextField(name="question", title="Question")],
        questions=[
            rg.TextQuestion(name="response", title="Your answer", required=True),
            rg.RatingQuestion(name="quality", title="Question quality", values=[1, 2, 3, 4, 5], required=True),
        ],
        metadata=[rg.TermsMetadataProperty(name="category")],
        guidelines="Answer respectfully and explain your reasoning.",
        distribution=rg.TaskDistribution(min_submitted=min_submitted),
    )


def test_owner_and_annotator_round_trip(argilla_server, owner, unique):
    workspace = rg.Workspace(name=f"ws-{unique}", client=owner).create()
    password = secrets.token_urlsafe(20)
    annotator = rg.User(username=f"ann-{unique}", password=password, role="annotator", client=owner).create()
    workspace.add_user(annotator)
    dataset = rg.Dataset(
        name=f"study1-{unique}", workspace=workspace, settings=_study1_settings(min_submitted=1), client=owner
    ).create()

    records = [
        rg.Record(id=f"q-{i}", fields={"question": f"How would you comfort friend number {i}?"},
                  metadata={"category": "empathy"})
        for i in range(5)
    ]
    dataset.records.log(records)
    dataset.records.log(records)  # same ids again: an update, not new records
    assert len(list(dataset.records)) == 5

    session = annotator_session(argilla_server.api_url, annotator.username, password)
    found = session.post(f"/api/v1/me/datasets/{dataset.id}/records/search", json=PENDING, params={"limit": 50})
    assert found.status_code == 200, found.text
    pending = found.json()
    assert pending["total"] == 5
    first, second = (item["record"] for item in pending["items"][:2])

    items = [
        {"record_id": first["id"], "status": "submitted",
         "values": {"response": {"value": "I would listen first."}, "quality": {"value": 4}}},
        {"record_id": second["id"], "status": "submitted",
         "values": {"response": {"value": "Ask what they need."}, "quality": {"value": 5}}},
    ]
    bulk = session.post("/api/v1/me/responses/bulk", json={"items": items})
    assert bulk.status_code == 200, bulk.text
    assert all(item["error"] is None for item in bulk.json()["items"])

    after = session.post(f"/api/v1/me/datasets/{dataset.id}/records/search", json=PENDING).json()
    assert after["total"] == 3

    # the owner reads the answers back, with who gave them
    answered = {}
    for record in dataset.records(with_responses=True):
        for response in record.responses:
            answered.setdefault(record.id, {})[response.question_name] = (response.value, response.user_id)
    by_text = {values["response"][0]: values for values in answered.values()}
    assert set(by_text) == {"I would listen first.", "Ask what they need."}
    assert by_text["I would listen first."]["quality"][0] == 4
    assert {values["response"][1] for values in answered.values()} == {annotator.id}
    progress = httpx.get(
        f"{argilla_server.api_url}/api/v1/datasets/{dataset.id}/progress",
        headers={"X-Argilla-Api-Key": argilla_server.owner_api_key},
    ).json()
    assert progress["completed"] == 2 and progress["pending"] == 3


def test_annotator_outside_workspace_is_refused(argilla_server, owner, unique):
    workspace = rg.Workspace(name=f"ws-{unique}", client=owner).create()
    dataset = rg.Dataset(
        name=f"private-{unique}", workspace=workspace, settings=_study1_settings(min_submitted=1), client=owner
    ).create()
    dataset.records.log([rg.Record(id="only", fields={"question": "Is it ever kind to lie?"})])
    record_id = next(iter(dataset.records)).id  # external id
    server_record = httpx.get(
        f"{argilla_server.api_url}/api/v1/datasets/{dataset.id}/records",
        headers={"X-Argilla-Api-Key": argilla_server.owner_api_key},
    ).json()["items"][0]
    assert server_record["external_id"] == record_id

    password = secrets.token_urlsafe(20)
    outsider = rg.User(username=f"out-{unique}", password=password, role="annotator", client=owner).create()
    session = annotator_session(argilla_server.api_url, outsider.username, password)

    assert session.post(f"/api/v1/me/datasets/{dataset.id}/records/search", json=PENDING).status_code == 403
    assert session.get(f"/api/v1/records/{server_record['id']}").status_code == 403
    answer = session.post(
        f"/api/v1/records/{server_record['id']}/responses",
        json={"status": "submitted", "values": {"response": {"value": "x"}, "quality": {"value": 3}}},
    )
    assert answer.status_code == 403
