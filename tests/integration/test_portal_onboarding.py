"""Onboarding before the claim on the real embedded Argilla and a real study store (issue 20),
through the portal's HTTP interface: a pass leads to a claim whose records are in the
participant's Argilla dataset; a fail on the last attempt screens the person out and leaves the
pool untouched (no participant, no account taken from the pool, nothing logged to Argilla);
someone who comes back resumes at their step."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from crowdpref.argilla_client import AnnotatorSession
from crowdpref.portal.app import create_app
from tests.integration.test_portal import _portal, _sign_in
from tests.unit.test_portal_onboarding import ONBOARDING

pytestmark = pytest.mark.integration


def _with_onboarding(tmp_path: Path, argilla_server, name: str, **onboarding):
    portal, collection, client = _portal(tmp_path, argilla_server, name, "invite")
    path = tmp_path / "studies" / f"{name}.yaml"
    data = yaml.safe_load(path.read_text())
    data["study1"]["onboarding"] = {**ONBOARDING, **onboarding}
    path.write_text(yaml.safe_dump(data))
    return portal, collection, client


def _through_practice(client: TestClient, base: str) -> None:
    client.post(f"{base}/onboarding/next")
    client.post(f"{base}/onboarding/practice", data={"index": "0", "choice": "2"})
    client.post(f"{base}/onboarding/practice", data={"index": "1", "choice": "1"})
    assert "Question 1 of 2" in client.post(f"{base}/onboarding/next").text


def _pool(collection) -> tuple[int, list[str]]:
    """(participants, the state of every account) of the collection."""
    store = collection.store
    return len(store.participants(collection.info.id)), sorted(a.state for a in store.accounts(collection.info.id))


def test_a_pass_leads_to_a_claim_with_records_in_argilla(argilla_server, tmp_path, unique):
    name = f"o{unique}"
    portal, collection, client = _with_onboarding(tmp_path, argilla_server, name)
    path = portal.invite_link(name, "study1", "inv-pass").split(portal.settings.portal_public_url, 1)[1]
    base = f"/s/{name}/study1"
    assert client.post(path, follow_redirects=False).headers["location"] == f"{base}/onboarding"
    assert _pool(collection)[0] == 0
    _through_practice(client, base)
    passed = client.post(f"{base}/onboarding/quiz", data={"q0": "1", "q1": "2"}, follow_redirects=False)
    assert passed.status_code == 303 and passed.headers["location"] == f"{base}/welcome"
    assert "3 items" in client.get(f"{base}/welcome").text
    username, token = _sign_in(client, client.post(f"{base}/start", follow_redirects=False))
    participant = collection.store.participant(collection.info.id, username)
    assert participant.source == "invite" and len(participant.assignments) == 3
    assert collection.store.participant_by_key(collection.info.id, "invite:inv-pass").id == participant.id
    session = AnnotatorSession(argilla_server.api_url, username, None, token=token)
    try:
        dataset = next(d for d in session.datasets() if d["name"] == collection.dataset_name)
        assert len(session.pending_records(dataset["id"])) >= 3  # their items (and any checks) are in Argilla
    finally:
        session.close()
    state = collection.store.onboarding_state(collection.info.id, collection.store.key_hash("invite:inv-pass"))
    assert state.status == "passed" and state.attempts_used == 1 and state.best_score == 2


def test_a_fail_screens_out_and_leaves_the_pool_untouched(argilla_server, tmp_path, unique):
    name = f"f{unique}"
    portal, collection, client = _with_onboarding(tmp_path, argilla_server, name)
    collection.refill_pool()  # the pool of ready accounts, as a launched study has it
    before = _pool(collection)
    path = portal.invite_link(name, "study1", "inv-fail").split(portal.settings.portal_public_url, 1)[1]
    base = f"/s/{name}/study1"
    client.post(path)
    _through_practice(client, base)
    assert "1 more attempt" in client.post(f"{base}/onboarding/quiz", data={"q0": "2", "q1": "1"}).text
    out = client.post(f"{base}/onboarding/quiz", data={"q0": "2", "q1": "2"})
    assert "Thank you" in out.text and "cannot be taken again" in out.text
    assert _pool(collection) == before and before[0] == 0  # no participant, no account taken
    assert collection.store.events(collection.info.id, kinds=["claimed"]) == []
    # coming back: the same page, never the quiz again, never a claim
    again = TestClient(create_app(portal), base_url="http://portal.test").post(path)
    assert "cannot be taken again" in again.text and "Question 1 of 2" not in again.text
    assert _pool(collection) == before


def test_a_returning_participant_resumes_where_they_were(argilla_server, tmp_path, unique):
    name = f"r{unique}"
    portal, collection, client = _with_onboarding(tmp_path, argilla_server, name)
    path = portal.invite_link(name, "study1", "inv-back").split(portal.settings.portal_public_url, 1)[1]
    base = f"/s/{name}/study1"
    client.post(path)
    _through_practice(client, base)
    assert "1 more attempt" in client.post(f"{base}/onboarding/quiz", data={"q0": "2", "q1": "1"}).text
    elsewhere = TestClient(create_app(portal), base_url="http://portal.test")  # another browser, the same link
    resumed = elsewhere.post(path)
    assert "Question 1 of 2" in resumed.text and "attempt <strong>2 of 2</strong>" in resumed.text
    passed = elsewhere.post(f"{base}/onboarding/quiz", data={"q0": "1", "q1": "2"}, follow_redirects=False)
    assert passed.headers["location"] == f"{base}/welcome"
    assert _pool(collection)[0] == 1
    # the first browser (its onboarding cookie) goes on to the same work, not a second claim
    assert client.get(f"{base}/onboarding", follow_redirects=False).headers["location"] == f"{base}/welcome"
    assert "3 items" in client.get(f"{base}/welcome").text and _pool(collection)[0] == 1
