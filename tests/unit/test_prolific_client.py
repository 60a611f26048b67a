"""crowdpref.prolific against the fake Prolific (crowdpref/simulation/prolific_server.py) over real HTTP.

Every client call; pagination (page size 2, five items: three pages; next links absolute,
root-relative, relative or on another host); the retry rules (what is repeated, after what
pause, and what never is: creations after a 5xx or a lost reply, a bulk approval); typed errors
whose messages never show the token; webhook signatures (good, bad, tampered, stale, future,
missing or malformed headers); and the fake itself: its validation, its participant simulation
and its signed, retried, duplicated or dropped webhook deliveries, checked with our verifier.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from crowdpref.errors import CrowdprefError
from crowdpref.prolific import (
    MAX_WAIT_S,
    ProlificAmbiguous,
    ProlificAuthError,
    ProlificClient,
    ProlificError,
    ProlificNotFound,
    ProlificRequestError,
    ProlificUnavailable,
    Study,
    Submission,
    WebhookRejected,
    retry_decision,
    sign_webhook,
    verify_webhook,
)
from crowdpref.simulation.prolific_server import ApiError, FakeProlific
from tasks.retries import is_transient

REPO = Path(__file__).resolve().parents[2]
URL = ("http://portal.test/s/x/study1?PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}"
       "&SESSION_ID={{%SESSION_ID%}}")
CODE = "C0DE1234"
HEX24 = re.compile(r"^[0-9a-f]{24}$")
LONG_MESSAGE = "Your answers were submitted in far less time than reading the items takes, so we cannot " \
               "accept them; sorry."
assert len(LONG_MESSAGE) >= 100


# --- fixtures ---------------------------------------------------------------------------------------------
@pytest.fixture()
def fake():
    with FakeProlific(page_size=2, retry_delay_s=0.02) as server:
        yield server


@pytest.fixture()
def sleeps() -> list[float]:
    return []


@pytest.fixture()
def client(fake, sleeps):
    with ProlificClient(fake.base_url, fake.token, backoff_s=0.01, sleep=sleeps.append) as c:
        yield c


def _payload(n: int = 0, places: int = 3, codes: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": f"Compare answers {n}", "internal_name": f"crowdpref:x:study{n}", "description": "d",
            "external_study_url": URL, "prolific_id_option": "url_parameters",
            "completion_codes": codes or [{"code": CODE, "code_type": "COMPLETED",
                                           "actions": [{"action": "MANUALLY_REVIEW"}]}],
            "total_available_places": places, "estimated_completion_time": 30, "reward": 450,
            "submissions_config": {"max_submissions_per_participant": 1}, **extra}


def _active_study(client: ProlificClient, n: int = 0, places: int = 5, **kw: Any) -> Study:
    return client.publish_study(client.create_study(_payload(n, places, **kw)).id)


def _api_requests(fake: FakeProlific, since: int) -> list[tuple[str, str]]:
    return fake.requests[since:]


def _breaches(fake: FakeProlific) -> list[str]:
    """The contract breaches the fake saw since the last look (taken: the test meant them)."""
    return [str(v) for v in fake.take_violations()]


# --- studies ----------------------------------------------------------------------------------------------
def test_create_get_and_list_studies_across_pages(fake, client):
    created = [client.create_study(_payload(n)) for n in range(5)]
    first = created[0]
    assert isinstance(first, Study) and HEX24.match(first.id)
    assert (first.name, first.internal_name, first.status, first.total_available_places) == (
        "Compare answers 0", "crowdpref:x:study0", "UNPUBLISHED", 3)
    assert first.external_study_url == URL and first.completion_codes[0]["code"] == CODE
    assert first.filters == [] and first.raw["reward"] == 450
    assert first.places_taken is None  # the whole study (Study) has no places_taken: the lists' StudyShort has
    assert first.raw["submissions_config"] == {"max_submissions_per_participant": 1}
    assert client.get_study(first.id) == first

    before = len(fake.requests)
    listed = client.list_studies()
    assert [s.id for s in listed] == [s.id for s in created]
    assert _api_requests(fake, before) == [("GET", "/api/v1/studies/")] * 3  # pages of 2, 2, 1
    assert listed[0].places_taken == 0 and listed[0].internal_name == "crowdpref:x:study0"
    assert "completion_codes" not in listed[0].raw  # a list shows StudyShort's fields only


def test_study_from_json_ignores_unknown_fields_and_is_frozen():
    study = Study.from_json({"id": "abc", "name": "n", "status": "ACTIVE", "total_available_places": "4",
                             "brand_new_field": {"x": 1}})
    assert (study.total_available_places, study.internal_name, study.places_taken) == (4, None, None)
    assert study.raw["brand_new_field"] == {"x": 1}
    with pytest.raises(AttributeError):
        study.status = "PAUSED"  # type: ignore[misc]
    sub = Submission.from_json({"id": "s", "participant_id": "p" * 24, "study_id": "st", "status": "ACTIVE",
                                "is_complete": False})
    assert (sub.started_at, sub.completed_at, sub.study_code) == (None, None, None)
    assert "p" * 24 not in repr(sub)  # participant ids stay out of logs
    # GET /submissions/{id}/ (SubmissionDetail) names them participant and entered_code
    detail = Submission.from_json({"id": "s", "participant": "p" * 24, "study_id": "st", "status": "APPROVED",
                                   "entered_code": "C0DE"})
    assert (detail.participant_id, detail.study_id, detail.study_code) == ("p" * 24, "st", "C0DE")
    # a list's SubmissionShort has no study id: the caller's
    short = Submission.from_json({"id": "s", "participant_id": "p", "status": "ACTIVE", "study_code": None}, "st")
    assert (short.participant_id, short.study_id) == ("p", "st")


def test_transitions(fake, client):
    study = client.create_study(_payload())
    with pytest.raises(ProlificRequestError, match=r"400.*cannot PAUSE a study that is UNPUBLISHED"):
        client.transition_study(study.id, "PAUSE")
    assert client.publish_study(study.id).status == "ACTIVE"
    assert client.transition_study(study.id, "PAUSE").status == "PAUSED"
    assert client.transition_study(study.id, "START").status == "ACTIVE"
    with pytest.raises(ProlificRequestError) as err:
        client.transition_study(study.id, "START")  # START is PAUSED -> ACTIVE only
    assert err.value.status == 400 and "POST /studies/" in str(err.value)
    assert client.transition_study(study.id, "STOP").status == "COMPLETED"
    assert client.get_study(study.id).status == "COMPLETED"
    with pytest.raises(ProlificRequestError, match="400"):
        client.transition_study(study.id, "PUBLISH")


def test_places_only_go_up_and_other_fields_freeze_once_published(fake, client):
    draft = client.create_study(_payload(places=3))
    assert client.increase_places(draft.id, 4).total_available_places == 4
    study = client.publish_study(draft.id)
    assert client.increase_places(study.id, 6).total_available_places == 6
    before = len(fake.requests)
    with pytest.raises(ValueError, match="only increase.*6.*5"):
        client.increase_places(study.id, 5)
    assert _api_requests(fake, before) == [("GET", f"/api/v1/studies/{study.id}/")]  # read, never sent
    before = len(fake.requests)
    assert client.increase_places(study.id, 6).total_available_places == 6  # unchanged: nothing to send
    assert [m for m, _ in _api_requests(fake, before)] == ["GET"]
    # the fake enforces the rules itself too
    raw = httpx.Client(base_url=fake.base_url, headers={"Authorization": f"Token {fake.token}"})
    assert raw.patch(f"studies/{study.id}/", json={"total_available_places": 2}).status_code == 400
    reply = raw.patch(f"studies/{study.id}/", json={"reward": 1})
    assert reply.status_code == 400 and "internal_name" in reply.json()["error"]["detail"]
    assert raw.patch(f"studies/{study.id}/", json={"internal_name": "renamed"}).json()["internal_name"] == "renamed"
    assert raw.patch(f"studies/{'0' * 24}/", json={"internal_name": "x"}).status_code == 404


@pytest.mark.parametrize("change, detail", [
    ({"name": ""}, "name"),
    ({"external_study_url": "http://portal.test/?PROLIFIC_PID={{%PROLIFIC_PID%}}"}, "STUDY_ID"),
    ({"total_available_places": 0}, "total_available_places"),
    ({"total_available_places": "many"}, "total_available_places"),
    ({"completion_codes": []}, "completion_codes"),
    ({"completion_codes": ["C0DE"]}, "completion_codes"),
])
def test_fake_validates_new_studies_and_the_client_reports_it(fake, client, change, detail):
    before = len(fake.requests)
    with pytest.raises(ProlificRequestError) as err:
        client.create_study({**_payload(), **change})
    assert err.value.status == 400 and detail in str(err.value) and "POST /studies/" in str(err.value)
    assert len(fake.requests) - before == 1  # a 400 is never repeated
    assert "\n" not in str(err.value)
    assert fake.studies == {}
    # a body against the document's schema (places as words, a code as a bare string) is a
    # contract breach, caught by the contract layer; the others are the fake's own checks
    breaches = _breaches(fake)
    if change in ({"total_available_places": "many"}, {"completion_codes": ["C0DE"]}):
        assert len(breaches) == 1 and breaches[0].startswith("POST /api/v1/studies/ request: ")
        assert detail in breaches[0]
    else:
        assert breaches == []


# --- submissions ------------------------------------------------------------------------------------------
def test_submissions_listed_across_pages_read_and_counted(fake, client):
    study = _active_study(client)
    arrivals = [fake.arrive(study.id) for _ in range(5)]
    before = len(fake.requests)
    subs = client.list_submissions(study.id)
    assert len(_api_requests(fake, before)) == 3
    assert [s.id for s in subs] == [a["session_id"] for a in arrivals]
    one = client.get_submission(arrivals[0]["session_id"])
    assert (one.id, one.participant_id, one.study_id, one.status) == (
        arrivals[0]["session_id"], arrivals[0]["participant_id"], study.id, "ACTIVE")
    assert one.started_at and one.completed_at is None and one.study_code is None
    fake.complete(arrivals[0]["session_id"], CODE)
    done = client.get_submission(arrivals[0]["session_id"])
    assert (done.status, done.study_code) == ("AWAITING REVIEW", CODE) and done.completed_at
    fake.return_submission(arrivals[1]["session_id"])
    fake.time_out(arrivals[2]["session_id"])
    counts = client.submission_counts(study.id)
    assert {k: v for k, v in counts.items() if v} == {"AWAITING REVIEW": 1, "RETURNED": 1, "TIMED-OUT": 1, "ACTIVE": 2}
    assert "TOTAL" not in counts and counts["APPROVED"] == 0  # every status; the reply's TOTAL is no status
    # returned and timed-out places are free again (places_taken: the lists' StudyShort)
    assert [s.places_taken for s in client.list_studies() if s.id == study.id] == [3]
    listed = client.list_submissions(study.id)[0]
    assert (listed.participant_id, listed.study_id, listed.study_code) == (
        arrivals[0]["participant_id"], study.id, CODE)
    # the other documented listing, filtered by study and paginated too
    other = _active_study(client, 1)
    fake.arrive(other.id)
    raw = httpx.Client(base_url=fake.base_url, headers={"Authorization": f"Token {fake.token}"})
    page = raw.get("submissions/", params={"study": study.id}).json()
    ids = [s["id"] for s in page["results"]]
    while page["_links"]["next"]["href"]:
        page = raw.get(page["_links"]["next"]["href"]).json()
        ids += [s["id"] for s in page["results"]]
    assert ids == [a["session_id"] for a in arrivals]
    # its study parameter is required: without it, a breach of the contract and a 400
    assert raw.get("submissions/").status_code == 400
    assert _breaches(fake) == ["GET /api/v1/submissions/ request: Missing required query parameter: study"]
    with pytest.raises(ProlificNotFound, match="GET /submissions/"):
        client.get_submission("0" * 24)


def test_review_approve_reject_bulk_and_request_return(fake, client):
    study = _active_study(client)
    a, b, c, d = (fake.arrive(study.id)["session_id"] for _ in range(4))
    for sid in (a, b, c):
        fake.complete(sid, CODE)
    assert client.approve_submission(a).status == "APPROVED"
    before = len(fake.requests)
    assert client.approve_submission(a).status == "APPROVED"  # refused (400) by the fake, read back: done
    assert [m for m, _ in _api_requests(fake, before)] == ["POST", "GET"]
    with pytest.raises(ProlificRequestError, match="400"):
        client.approve_submission(d)  # still ACTIVE (read back: not approved, so the refusal stands)
    before = len(fake.requests)
    with pytest.raises(ValueError, match="100 characters"):
        client.reject_submission(b, "too short", "LOW_EFFORT")
    with pytest.raises(ValueError, match="category"):
        client.reject_submission(b, LONG_MESSAGE, "")
    assert len(fake.requests) == before  # refused locally, nothing sent
    assert client.reject_submission(b, LONG_MESSAGE, "LOW_EFFORT").status == "REJECTED"
    assert client.reject_submission(b, LONG_MESSAGE, "LOW_EFFORT").status == "REJECTED"  # idempotent
    raw = httpx.Client(base_url=fake.base_url, headers={"Authorization": f"Token {fake.token}"})
    assert raw.post(f"submissions/{c}/transition/", json={"action": "REJECT", "message": "short",
                                                           "rejection_category": "LOW_EFFORT"}).status_code == 400
    no_category = {"action": "REJECT", "message": LONG_MESSAGE}
    assert raw.post(f"submissions/{c}/transition/", json=no_category).status_code == 400
    assert _breaches(fake) == []  # refused by the fake's rules, not the document's schema
    unknown = raw.post(f"submissions/{c}/transition/", json={"action": "REJECT", "message": LONG_MESSAGE,
                                                             "rejection_category": "LAZY"})
    assert unknown.status_code == 400 and "LAZY" in unknown.json()["error"]["detail"]
    assert [b.split(": ", 1)[0] for b in _breaches(fake)] == [f"POST /api/v1/submissions/{c}/transition/ request"]
    reply = client.bulk_approve([c, d])  # only the AWAITING REVIEW one is approved
    assert isinstance(reply, str) and reply  # the document's reply: a message
    assert (client.get_submission(c).status, client.get_submission(d).status) == ("APPROVED", "ACTIVE")
    returned = client.request_return(d, ["Did not finish the screening"])
    assert returned["participant"] == fake.submissions[d]["participant_id"] and returned["return_requested"]
    assert fake.submissions[d]["return_requested"]  # a timestamp
    assert client.get_submission(d).raw["return_requested"] == returned["return_requested"]
    # the rejected place is free again
    assert [s.places_taken for s in client.list_studies() if s.id == study.id] == [3]


# --- participant groups -----------------------------------------------------------------------------------
def test_participant_groups(fake, client):
    group = client.create_participant_group("completed part 1", "ws-1")
    assert HEX24.match(group) and fake.groups[group]["members"] == []
    other = client.create_participant_group("elsewhere", "ws-2")
    client.create_participant_group("no workspace")  # name is all the document requires
    groups = client.list_participant_groups("ws-1")
    assert [(g["id"], g["name"]) for g in groups] == [(group, "completed part 1")]
    assert [g["id"] for g in client.list_participant_groups(workspace_id="ws-2")] == [other]
    before = len(fake.requests)
    with pytest.raises(ValueError, match="workspace_id"):
        client.list_participant_groups()  # Prolific lists groups only under a workspace or project filter
    assert len(fake.requests) == before


# --- pagination links ------------------------------------------------------------------------------------
@pytest.mark.parametrize("style", ["absolute", "other-host", "root-relative", "relative", "query"])
def test_next_links_of_every_form_are_followed_on_our_host(style):
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        page = int(request.url.params.get("page", "1"))
        href = {"absolute": f"https://api.test/api/v1/studies/?page={page + 1}",
                "other-host": f"http://internal-proxy:8000/api/v1/studies/?page={page + 1}",
                "root-relative": f"/api/v1/studies/?page={page + 1}",
                "relative": f"studies/?page={page + 1}",
                "query": f"?page={page + 1}"}[style]
        results = [{"id": f"s{page}{i}", "name": "n", "status": "ACTIVE"} for i in range(2 if page < 3 else 1)]
        return httpx.Response(200, json={"results": results, "_links": {"next": {"href": href if page < 3 else None}}})

    with ProlificClient("https://api.test/api/v1/", "tok", transport=httpx.MockTransport(handler)) as client:
        assert [s.id for s in client.list_studies()] == ["s10", "s11", "s20", "s21", "s30"]
    assert seen == ["https://api.test/api/v1/studies/", "https://api.test/api/v1/studies/?page=2",
                    "https://api.test/api/v1/studies/?page=3"]


def test_a_next_link_that_loops_is_an_error_not_a_hang():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        assert len(calls) < 10, "the client keeps following a link it has already followed"
        return httpx.Response(200, json={"results": [{"id": "x"}], "_links": {"next": {"href": "studies/?page=2"}}})

    with ProlificClient("https://api.test/api/v1/", "tok", transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(ProlificError, match="repeats"):
            client.list_studies()
    assert len(calls) == 2


# --- retries ----------------------------------------------------------------------------------------------
def test_503_twice_then_success(fake, client, sleeps):
    study = client.create_study(_payload())
    before = len(fake.requests)
    fake.add_faults(503, count=2)
    assert client.get_study(study.id).id == study.id
    assert len(_api_requests(fake, before)) == 3 and len(sleeps) == 2
    assert 0.01 <= sleeps[0] <= 0.015 and 0.02 <= sleeps[1] <= 0.03  # exponential, with up to 50 % jitter


def test_429_retry_after_is_honoured(fake, client, sleeps):
    study = client.create_study(_payload())
    fake.add_faults(429, retry_after=7)
    assert client.get_study(study.id).id == study.id
    assert sleeps == [7.0]
    fake.add_faults(429, retry_after=3600)  # never more than MAX_WAIT_S at once
    client.get_study(study.id)
    assert sleeps[-1] == MAX_WAIT_S
    fake.add_faults(429, retry_after="Wed, 21 Oct 2015 07:28:00 GMT")  # a date: our own backoff
    client.get_study(study.id)
    assert sleeps[-1] < 1


def test_500_until_attempts_run_out(fake, client, sleeps):
    before = len(fake.requests)
    fake.add_faults(500, count=10)
    with pytest.raises(ProlificUnavailable) as err:
        client.list_studies()
    assert err.value.transient and err.value.status == 500
    assert len(_api_requests(fake, before)) == client.max_attempts == 5 and len(sleeps) == 4
    assert "GET /studies/" in str(err.value) and "5 attempts" in str(err.value)
    assert sleeps == sorted(sleeps)  # backing off


def test_4xx_is_never_retried(fake, client, sleeps):
    before = len(fake.requests)
    with pytest.raises(ProlificNotFound):
        client.get_study("0" * 24)
    with pytest.raises(ProlificRequestError):
        client.create_study({"name": "no url"})
    assert len(_api_requests(fake, before)) == 2 and sleeps == []
    assert len(_breaches(fake)) == 1  # the body lacks what the document requires


def test_creations_are_not_repeated_after_a_5xx_or_a_lost_reply(fake, client, sleeps):
    before = len(fake.requests)
    fake.add_faults(503)
    with pytest.raises(ProlificAmbiguous) as err:
        client.create_study(_payload())
    assert len(_api_requests(fake, before)) == 1 and "look it up" in str(err.value)
    assert not err.value.transient and not is_transient(err.value)  # no retry policy repeats it
    assert fake.studies == {}
    fake.add_faults(disconnect="after")  # created, but the reply is lost
    with pytest.raises(ProlificAmbiguous, match="look it up"):
        client.create_study(_payload(1))
    assert [s.internal_name for s in client.list_studies()] == ["crowdpref:x:study1"]  # once: reconcile by name
    for create in (lambda: client.create_participant_group("g"), lambda: client.create_webhook_secret("ws"),
                   lambda: client.subscribe_webhook("ws", "submission.status.change", "http://x/hook")):
        before = len(fake.requests)
        fake.add_faults(502)
        with pytest.raises(ProlificAmbiguous) as err:
            create()
        assert len(_api_requests(fake, before)) == 1 and not is_transient(err.value)
    assert fake.groups == {} and fake.secrets == {} and fake.subscriptions == {}
    assert sleeps == []


def test_creations_are_repeated_when_certainly_not_processed(fake, client, sleeps):
    fake.add_faults(429, retry_after=1)
    study = client.create_study(_payload())
    assert list(fake.studies) == [study.id] and sleeps == [1.0]
    calls = []

    def refuse_once(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) == 1:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(201, json={"id": "g1", "name": "g"})

    with ProlificClient("https://api.test/api/v1/", "tok", transport=httpx.MockTransport(refuse_once),
                        sleep=sleeps.append) as mocked:
        assert mocked.create_participant_group("g") == "g1"
    assert len(calls) == 2
    calls.clear()

    def read_timeout(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        raise httpx.ReadTimeout("slow", request=request)

    with ProlificClient("https://api.test/api/v1/", "tok", transport=httpx.MockTransport(read_timeout),
                        sleep=sleeps.append) as mocked:
        with pytest.raises(ProlificUnavailable, match="ReadTimeout"):
            mocked.create_study(_payload())
        assert len(calls) == 1
        with pytest.raises(ProlificUnavailable, match="ReadTimeout.*5 attempts"):
            mocked.get_study("s")  # a read is repeated
        assert len(calls) == 6


def test_reads_survive_a_dropped_connection(fake, client):
    study = client.create_study(_payload())
    fake.add_faults(disconnect="before")
    assert client.get_study(study.id).id == study.id
    fake.add_faults(disconnect="after")
    assert [s.id for s in client.list_studies()] == [study.id]


def test_a_transition_whose_reply_was_lost_is_not_reported_as_a_conflict(fake, client):
    study = client.create_study(_payload())
    fake.add_faults(disconnect="after")  # PUBLISH done, reply lost; the repeat is refused (400)
    assert client.publish_study(study.id).status == "ACTIVE"
    fake.add_faults(500)  # a 5xx that was not processed: the repeat simply works
    assert client.transition_study(study.id, "PAUSE").status == "PAUSED"
    with pytest.raises(ProlificRequestError, match="400"):  # a genuine refusal still is one
        client.transition_study(study.id, "PAUSE")


def test_a_bulk_approval_is_never_retried(fake, client, sleeps):
    study = _active_study(client)
    sid = fake.arrive(study.id)["session_id"]
    fake.complete(sid, CODE)
    # a 5xx, or a connection cut before any reply (from here, it may have been processed):
    # ambiguous, never transient; a 429 was certainly refused: transient, but not repeated here
    for fault, ambiguous in (({"status": 503}, True), ({"status": 429, "retry_after": 0}, False),
                             ({"disconnect": "before"}, True)):
        before = len(fake.requests)
        fake.add_faults(**fault)
        with pytest.raises(ProlificUnavailable) as err:
            client.bulk_approve([sid])
        assert len(_api_requests(fake, before)) == 1
        assert isinstance(err.value, ProlificAmbiguous) is ambiguous
        assert err.value.transient is (not ambiguous) and is_transient(err.value) is (not ambiguous)
        if ambiguous:
            assert "check on Prolific before paying" in str(err.value)
    assert fake.submissions[sid]["status"] == "AWAITING REVIEW" and sleeps == []
    client.bulk_approve([sid])
    assert fake.submissions[sid]["status"] == "APPROVED"


@pytest.mark.parametrize("call", ["create_study", "create_participant_group", "bulk_approve"])
def test_an_ambiguous_create_or_money_call_is_not_repeated_and_not_transient(fake, client, sleeps, call):
    """Prolific acted, then the reply was lost: one request, and an error no retry policy repeats."""
    study = _active_study(client)
    sid = fake.arrive(study.id)["session_id"]
    fake.complete(sid, CODE)
    action = {"create_study": lambda: client.create_study(_payload(7)),
              "create_participant_group": lambda: client.create_participant_group("g", "ws-1"),
              "bulk_approve": lambda: client.bulk_approve([sid])}[call]
    before = len(fake.requests)
    fake.add_faults(disconnect="after")
    with pytest.raises(ProlificAmbiguous) as err:
        action()
    assert len(_api_requests(fake, before)) == 1 and sleeps == []  # sent once, never repeated
    assert err.value.transient is False and is_transient(err.value) is False
    assert isinstance(err.value, ProlificUnavailable) and "reconcile" in str(err.value)
    done = {"create_study": lambda: len(fake.studies) == 2, "create_participant_group": lambda: len(fake.groups) == 1,
            "bulk_approve": lambda: fake.submissions[sid]["status"] == "APPROVED"}[call]
    assert done()  # it had been done: a repeat would have done it twice


def test_an_ambiguous_group_create_is_reconciled_by_name(fake, client):
    fake.add_faults(disconnect="after")
    with pytest.raises(ProlificAmbiguous):
        client.create_participant_group("crowdpref: completed part 1", "ws-1")
    found = [g for g in client.list_participant_groups("ws-1") if g["name"] == "crowdpref: completed part 1"]
    assert [g["id"] for g in found] == list(fake.groups)


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_a_review_whose_reply_was_lost_is_read_back(fake, client, sleeps, action):
    study = _active_study(client)
    sid = fake.arrive(study.id)["session_id"]
    fake.complete(sid, CODE)
    target = {"approve": "APPROVED", "reject": "REJECTED"}[action]
    review = {"approve": lambda s: client.approve_submission(s),
              "reject": lambda s: client.reject_submission(s, LONG_MESSAGE, "LOW_EFFORT")}[action]
    before = len(fake.requests)
    fake.add_faults(disconnect="after")  # done, reply lost; the repeat is refused (400): read back
    result = review(sid)
    assert isinstance(result, Submission) and (result.id, result.status) == (sid, target)
    assert [m for m, _ in _api_requests(fake, before)] == ["POST", "POST", "GET"] and len(sleeps) == 1
    # another reviewer got there first (no lost reply): the same read-back
    other = fake.arrive(study.id)["session_id"]
    fake.complete(other, CODE)
    with fake.lock:
        fake._set_status(fake.submissions[other], target)
    assert review(other).status == target
    # a submission in another state: the refusal stands
    third = fake.arrive(study.id)["session_id"]
    fake.complete(third, CODE)
    with fake.lock:
        fake._set_status(fake.submissions[third], "REJECTED" if action == "approve" else "APPROVED")
    with pytest.raises(ProlificRequestError, match="400"):
        review(third)


def test_the_webhook_secret_is_read_from_value_only():
    def handler(request: httpx.Request) -> httpx.Response:
        field = request.url.params.get("field", "value")
        return httpx.Response(201, json={"id": "s1", field: "the-secret", "workspace_id": "ws"})

    with ProlificClient("https://api.test/api/v1/", "tok", transport=httpx.MockTransport(handler)) as client:
        assert client.create_webhook_secret("ws") == "the-secret"

    def old_name(request: httpx.Request) -> httpx.Response:  # what the client and the fake used to say
        return httpx.Response(201, json={"id": "s1", "secret": "the-secret", "workspace_id": "ws"})

    with ProlificClient("https://api.test/api/v1/", "tok", transport=httpx.MockTransport(old_name)) as client:
        with pytest.raises(ProlificError, match="no 'value'"):
            client.create_webhook_secret("ws")


def test_subscribe_accepts_the_documented_list_reply_too():
    """The document declares a SubscriptionList reply; the prose, one subscription: both work."""
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        other = {"id": "old", "event_type": "study.status.change", "target_url": "http://x/h", "workspace_id": "ws"}
        ours = {"id": "sub9", **body, "is_enabled": False}
        return httpx.Response(201, json={"results": [other, ours]}, headers={"X-Hook-Secret": "hs"})

    with ProlificClient("https://api.test/api/v1/", "tok", transport=httpx.MockTransport(handler)) as client:
        assert client.subscribe_webhook("ws", "submission.status.change", "http://x/h") == ("sub9", "hs")


# --- the contract layer ------------------------------------------------------------------------------------
def test_the_contract_reports_breaches_on_both_sides_and_stop_raises(monkeypatch):
    fake = FakeProlific(page_size=2).start()
    try:
        with ProlificClient(fake.base_url, fake.token, max_attempts=1) as client:
            with pytest.raises(ProlificRequestError, match="400"):  # refused as Prolific would, not acted on
                client._request("POST", "participant-groups/", "create", json={"title": "no name"})
            assert fake.groups == {}
            # a reply of the fake's against the document: the old field name of a webhook secret
            real_api = fake.api

            def old_secret(method: str, path: str, query: dict, body: Any) -> tuple[int, Any]:
                status, payload = real_api(method, path, query, body)
                if path.startswith("hooks/secrets"):
                    payload = {"id": payload["id"], "secret": payload["value"], "workspace_id": "ws"}
                return status, payload

            monkeypatch.setattr(fake, "api", old_secret)
            with pytest.raises(ProlificError):
                client.create_webhook_secret("ws")
    finally:
        with pytest.raises(AssertionError) as err:
            fake.stop()
    message = str(err.value)
    assert "2 breach(es)" in message
    assert "POST /api/v1/participant-groups/ request: " in message and "'name' is a required property" in message
    assert "POST /api/v1/hooks/secrets/ response 201: " in message and "'secret' was unexpected" in message
    assert [v.side for v in fake.contract_violations] == ["request", "response"]
    assert fake.take_violations() == []  # reported once


def test_the_contract_quirks_and_what_is_not_checked(fake, client):
    from crowdpref.simulation.prolific_contract import ProlificContract, _adjust

    contract = ProlificContract.load()
    assert contract is ProlificContract.load()  # built once per process
    # quirk 1: an integer range bound (Prolific's docs show them) passes; the raw document's oneOf refuses it
    ranged = {"filter_id": "approval_rate", "selected_range": {"lower": 95, "upper": 100}}
    study = client.create_study(_payload(filters=[ranged]))
    assert study.filters == [ranged] and _breaches(fake) == []
    raw = contract.spec  # adjusted; the schema of the raw file keeps its oneOf
    import yaml

    from crowdpref.simulation.prolific_contract import SPEC
    original = yaml.safe_load(SPEC.read_text())
    assert "oneOf" in original["components"]["schemas"]["RangeFilterSelectedRangeLower"]
    assert "anyOf" in raw["components"]["schemas"]["RangeFilterSelectedRangeLower"]
    assert _adjust(original)["components"]["schemas"]["RangeFilterSelectedRangeLower"] == \
        raw["components"]["schemas"]["RangeFilterSelectedRangeLower"]
    # quirk 2: both reply shapes of POST /hooks/subscriptions/
    exchange = ("POST", "/api/v1/hooks/subscriptions/", {}, {"Authorization": "Token t"}, b"{}")
    detail = {"id": "s", "event_type": "e", "target_url": "u", "workspace_id": "w", "is_enabled": False}
    assert contract.check_response(*exchange, 201, {"X-Hook-Secret": "h"}, detail) == []
    assert contract.check_response(*exchange, 201, {}, {"results": [detail]}) == []
    assert contract.check_response(*exchange, 201, {}, {k: v for k, v in detail.items() if k != "id"})
    # test control is not Prolific's API: not checked, never a breach
    arrival = httpx.post(f"{fake.app_url}/_fake/studies/{client.publish_study(study.id).id}/arrive").json()
    httpx.post(f"{fake.app_url}/_fake/submissions/{arrival['session_id']}/complete", json={"code": CODE})
    httpx.get(f"{fake.app_url}/submissions/complete", params={"cc": CODE})
    httpx.get(f"{fake.app_url}/health")
    assert _breaches(fake) == []
    # an undeclared status is a breach (a fake's crash answers 500)
    assert [str(v) for v in contract.check_response("POST", "/api/v1/studies/x/transition/", {}, {}, b"{}", 409, {},
                                                   {"error": {"detail": "x"}})] == [
        "POST /api/v1/studies/x/transition/ response 409: Unknown response http status: 409"]


def _fake_process(**pipes: Any) -> tuple[subprocess.Popen, int]:
    """``python -m crowdpref.simulation.prolific_server`` on a free port (token ``proc-token``), as the demo runs it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "crowdpref.simulation.prolific_server", "--host", "127.0.0.1",
                             "--port", str(port), "--token", "proc-token"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, text=True, **pipes)
    return proc, port


def test_the_demo_fake_prints_breaches_and_goes_on():
    proc, port = _fake_process(stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("fake prolific on ")
        auth = {"Authorization": "Token proc-token"}
        reply = httpx.post(f"http://127.0.0.1:{port}/api/v1/participant-groups/", headers=auth, json={})
        assert reply.status_code == 400
        assert httpx.get(f"http://127.0.0.1:{port}/api/v1/studies/", headers=auth).status_code == 200  # goes on
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert proc.stderr is not None
        assert "contract violation: POST /api/v1/participant-groups/ request: " in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_breach_fails_the_test_during_which_it_happened(fake):
    from tests.conftest import check_fake_prolifics

    check_fake_prolifics()  # nothing yet
    httpx.post(f"{fake.base_url}participant-groups/", headers={"Authorization": f"Token {fake.token}"}, json={})
    with pytest.raises(AssertionError, match=r"participant-groups/ request"):
        check_fake_prolifics()  # what the conftest hook runs after each test's body
    check_fake_prolifics()  # reported once


def test_the_conftest_hook_fails_a_test_whose_fake_saw_a_breach(tmp_path):
    """tests/conftest.py's hook, in a pytest of its own: a breach nobody took fails the test's call
    phase (FAILED, not a teardown ERROR), whichever fixture made the fake."""
    (tmp_path / "test_inner.py").write_text(
        "import httpx, pytest\n"
        "from crowdpref.simulation.prolific_server import FakeProlific\n"
        "@pytest.fixture(scope='module')\n"
        "def fake():\n"
        "    fake = FakeProlific().start()\n"
        "    yield fake\n"
        "    fake.stop(check=False)\n"
        "def test_sends_a_bad_body(fake):\n"
        "    httpx.post(f'{fake.base_url}participant-groups/', json={},\n"
        "               headers={'Authorization': f'Token {fake.token}'})\n"
        "def test_clean(fake):\n"
        "    httpx.get(f'{fake.base_url}studies/', headers={'Authorization': f'Token {fake.token}'})\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path), str(tmp_path / "test_inner.py")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "1 failed, 1 passed" in run.stdout, run.stdout[-2000:]
    assert "FAILED test_inner.py::test_sends_a_bad_body" in run.stdout
    assert "participant-groups/ request: " in run.stdout and "ERROR" not in run.stdout


def test_transport_errors_when_nobody_listens(sleeps):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with ProlificClient(f"http://127.0.0.1:{port}/api/v1/", "tok", max_attempts=3, backoff_s=0.01,
                        sleep=sleeps.append) as down:
        with pytest.raises(ProlificUnavailable, match="ConnectError.*3 attempts") as err:
            down.create_study(_payload())  # never reached: safe to repeat even a creation
    assert err.value.transient and len(sleeps) == 2


@pytest.mark.parametrize("kind, outcome, expected", [
    ("read", 429, True), ("read", 500, True), ("read", 503, True), ("read", 400, False), ("read", 401, False),
    ("read", 404, False), ("read", 409, False), ("idempotent", 502, True), ("idempotent", 422, False),
    ("create", 429, True), ("create", 500, False), ("create", 503, False), ("create", 400, False),
    ("never", 429, False), ("never", 503, False),
    ("read", httpx.ConnectError("refused"), True), ("read", httpx.ReadTimeout("slow"), True),
    ("read", httpx.RemoteProtocolError("cut"), True), ("idempotent", httpx.ReadError("reset"), True),
    ("create", httpx.ConnectError("refused"), True), ("create", httpx.ConnectTimeout("slow"), True),
    ("create", httpx.ReadTimeout("slow"), False), ("create", httpx.ReadError("reset"), False),
    ("create", httpx.WriteError("broken pipe"), False), ("create", httpx.RemoteProtocolError("cut"), False),
    ("never", httpx.ConnectError("refused"), False), ("read", ValueError("a bug"), False),
])
def test_retry_decision(kind, outcome, expected):
    if isinstance(outcome, int):
        outcome = httpx.Response(outcome, request=httpx.Request("GET", "http://x"))
    assert retry_decision(kind, outcome) is expected


# --- errors and the token -----------------------------------------------------------------------------------
TOKEN = "s3cr3t-prolific-token-never-print-me"


def test_the_token_never_shows(fake, sleeps, caplog):
    caplog.set_level(logging.DEBUG)
    errors: list[CrowdprefError] = []
    with ProlificClient(fake.base_url, TOKEN, backoff_s=0.01, sleep=sleeps.append) as wrong:
        assert TOKEN not in repr(wrong) and TOKEN not in str(wrong)
        with pytest.raises(ProlificAuthError) as err:
            wrong.list_studies()
        assert err.value.status == 401 and "check PROLIFIC_TOKEN" in str(err.value)
        assert "GET /studies/" in str(err.value)
        errors.append(err.value)
    with ProlificClient(fake.base_url, fake.token, backoff_s=0.01, sleep=sleeps.append) as right:
        for call, expected in ((lambda: right.get_study("0" * 24), ProlificNotFound),
                               (lambda: right.create_study({"name": "x"}), ProlificRequestError)):
            with pytest.raises(expected) as err:
                call()
            errors.append(err.value)
        assert len(_breaches(fake)) == 1  # the incomplete study body
        fake.add_faults(503, count=10)
        with pytest.raises(ProlificUnavailable) as err:
            right.list_studies()
        errors.append(err.value)
        fake.faults.clear()

    def echo(request: httpx.Request) -> httpx.Response:  # a careless server repeats what it got
        auth = request.headers["Authorization"]
        status = int(request.url.params.get("status", "400"))
        if status == 200:
            return httpx.Response(200, text=f"<html>proxy login for {auth}</html>")
        return httpx.Response(status, json={"error": {"detail": f"bad request with {auth}"}})

    with ProlificClient("https://api.test/api/v1/", TOKEN, transport=httpx.MockTransport(echo), max_attempts=2,
                        sleep=sleeps.append) as mocked:
        for status, expected in ((400, ProlificRequestError), (403, ProlificAuthError), (422, ProlificRequestError),
                                 (200, ProlificError), (502, ProlificUnavailable)):
            with pytest.raises(expected) as err:
                mocked._request("GET", f"studies/?status={status}")
            errors.append(err.value)
        assert "[token]" in str(errors[4])  # the 400's excerpt of the body, redacted
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with ProlificClient(f"http://127.0.0.1:{port}/api/v1/", TOKEN, max_attempts=2, sleep=sleeps.append) as down:
        with pytest.raises(ProlificUnavailable) as err:
            down.get_study("x")
        errors.append(err.value)
    assert len(errors) == 10
    for exc in errors:
        assert isinstance(exc, ProlificError) and isinstance(exc, CrowdprefError)
        assert TOKEN not in str(exc) and TOKEN not in repr(exc) and TOKEN not in str(exc.args)
        assert "\n" not in str(exc)
        assert exc.__cause__ is None
    assert [e.transient for e in errors] == [False, False, False, True, False, False, False, False, True, True]
    assert TOKEN not in caplog.text and "retrying" in caplog.text


def test_the_token_is_sent_as_documented():
    headers: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        headers.append(request.headers["Authorization"])
        return httpx.Response(200, json={"results": [], "_links": {"next": {"href": None}}})

    with ProlificClient("https://api.test/api/v1/", "abc123", transport=httpx.MockTransport(handler)) as client:
        assert client.list_studies() == []
    assert headers == ["Token abc123"]


# --- webhook subscription calls ----------------------------------------------------------------------------
def test_webhook_calls(fake, client):
    secret = client.create_webhook_secret("ws-1")
    assert secret and fake.secrets["ws-1"] == secret
    newer = client.create_webhook_secret("ws-1")
    assert newer != secret and fake.secrets["ws-1"] == newer  # one active secret per workspace
    sub_id, hook_secret = client.subscribe_webhook("ws-1", "submission.status.change", "http://portal.test/hook")
    assert HEX24.match(sub_id) and hook_secret == fake.subscriptions[sub_id]["hook_secret"]
    assert fake.subscriptions[sub_id]["is_enabled"] is False
    with pytest.raises(ProlificRequestError, match="400"):
        client.confirm_webhook(sub_id, "not-the-secret")
    assert client.confirm_webhook(sub_id, hook_secret)["is_enabled"] is True


def test_subscribe_reads_the_hook_secret_from_the_body_when_no_header():
    def handler(request: httpx.Request) -> httpx.Response:
        body = {"id": "sub1"} | ({"X-Hook-Secret": "from-body"} if request.url.params.get("x") != "none" else {})
        return httpx.Response(201, json=body)

    with ProlificClient("https://api.test/api/v1/", "tok", transport=httpx.MockTransport(handler)) as client:
        assert client.subscribe_webhook("ws", "submission.status.change", "http://x/h") == ("sub1", "from-body")

    def no_secret(request: httpx.Request) -> httpx.Response:
        return httpx.Response(201, json={"id": "sub1"})

    with ProlificClient("https://api.test/api/v1/", "tok", transport=httpx.MockTransport(no_secret)) as client:
        with pytest.raises(ProlificError, match="X-Hook-Secret"):
            client.subscribe_webhook("ws", "submission.status.change", "http://x/h")


# --- webhook signatures -------------------------------------------------------------------------------------
SECRET, NOW = "whsec_test", 1_700_000_000.0
BODY = b'{"a":1}'


def _signed(ts: str = "1700000000", body: bytes = BODY, event: str = "evt-1") -> dict[str, str]:
    return {"X-Prolific-Request-Signature": sign_webhook(SECRET, ts, body), "X-Prolific-Request-Timestamp": ts,
            "X-Event-ID": event}


def test_sign_webhook_known_answer():
    # printf '1700000000{"a":1}' | openssl dgst -sha256 -hmac whsec_test -binary | base64
    assert sign_webhook(SECRET, "1700000000", BODY) == "BNopxFwKLBadjbZiNGAWnittPuG4VB2NF5bKWtdBpr0="


def test_verify_good_signatures():
    assert verify_webhook(SECRET, _signed(), BODY, now=NOW).event_id == "evt-1"
    lower = {k.lower(): v for k, v in _signed().items()}
    assert verify_webhook(SECRET, lower, BODY, now=NOW).event_id == "evt-1"  # header names are case-insensitive
    assert verify_webhook(SECRET, _signed(), BODY, now=NOW + 300).event_id == "evt-1"  # at the tolerance's edge
    assert verify_webhook(SECRET, _signed(), BODY, now=NOW + 1000, tolerance_s=1000).event_id == "evt-1"
    assert verify_webhook(SECRET, httpx.Headers(_signed()), BODY, now=NOW).event_id == "evt-1"


def test_a_signature_over_the_documented_json_dumps_form_is_accepted():
    # Prolific's "Verifying" page signs timestamp + json.dumps(body): Python's separators, ASCII
    # escapes. A sender that signs that form while sending compact UTF-8 bytes still gets in.
    raw = '{"event_type":"submission.status.change","status":"RETURNED","note":"café"}'.encode()
    dumped = json.dumps(json.loads(raw)).encode()
    assert dumped != raw
    headers = _signed(body=dumped)
    verified = verify_webhook(SECRET, headers, raw, now=NOW)
    assert verified.event_id == "evt-1"
    assert verify_webhook(SECRET, headers, dumped, now=NOW).signed_hash == verified.signed_hash  # same content
    # ... but only that form: another re-serialisation (sorted keys, compact) is not what was signed
    with pytest.raises(WebhookRejected):
        verify_webhook(SECRET, _signed(body=json.dumps(json.loads(raw), sort_keys=True).encode()), raw, now=NOW)
    with pytest.raises(WebhookRejected):  # a tampered value under the documented form
        verify_webhook(SECRET, headers, raw.replace(b"RETURNED", b"APPROVED"), now=NOW)


def test_the_signed_content_keys_a_replay_under_a_new_event_id():
    first = verify_webhook(SECRET, _signed(event="evt-1"), BODY, now=NOW)
    replay = verify_webhook(SECRET, _signed(event="evt-2"), BODY, now=NOW)
    assert first.event_id != replay.event_id and first.signed_hash == replay.signed_hash
    later = verify_webhook(SECRET, _signed("1700000060", event="evt-1"), BODY, now=NOW)  # a retry re-signed later
    assert later.signed_hash != first.signed_hash and later.event_id == first.event_id


@pytest.mark.parametrize("headers", [{k: v for k, v in _signed().items() if k != "X-Event-ID"}, _signed(event="")],
                         ids=["missing", "empty"])
def test_a_delivery_without_an_event_id_is_keyed_by_its_signed_content(headers):
    verified = verify_webhook(SECRET, headers, BODY, now=NOW)
    assert verified.id_missing and verified.event_id == f"sha256:{verified.signed_hash}"
    assert verified.event_id == verify_webhook(SECRET, headers, BODY, now=NOW).event_id  # stable
    assert verify_webhook(SECRET, _signed(), BODY, now=NOW).id_missing is False


@pytest.mark.parametrize("name, headers, body, now, status", [
    ("bad signature", _signed() | {"X-Prolific-Request-Signature": sign_webhook("other", "1700000000", BODY)},
     BODY, NOW, 401),
    ("garbage signature", _signed() | {"X-Prolific-Request-Signature": "not base64 at all"}, BODY, NOW, 401),
    ("tampered body", _signed(), b'{"a":2}', NOW, 401),
    ("timestamp swapped", _signed() | {"X-Prolific-Request-Timestamp": "1700000001"}, BODY, NOW, 401),
    ("stale", _signed(), BODY, NOW + 301, 401),
    ("future", _signed(), BODY, NOW - 301, 401),
    ("missing signature", {k: v for k, v in _signed().items() if "Signature" not in k}, BODY, NOW, 400),
    ("missing timestamp", {k: v for k, v in _signed().items() if "Timestamp" not in k}, BODY, NOW, 400),
    ("no headers", {}, BODY, NOW, 400),
    ("words", _signed("soon"), BODY, NOW, 400),
    ("nan", _signed("nan"), BODY, NOW, 400),
    ("inf", _signed("inf"), BODY, NOW, 400),
    ("exponent", _signed("1.7e9"), BODY, NOW, 400),
    ("negative", _signed("-1700000000"), BODY, NOW, 400),
])
def test_verify_rejects(name, headers, body, now, status):
    with pytest.raises(WebhookRejected) as err:
        verify_webhook(SECRET, headers, body, now=now)
    assert err.value.status == status and isinstance(err.value, CrowdprefError)
    assert SECRET not in str(err.value)


def test_verify_uses_a_constant_time_compare(monkeypatch):
    import crowdpref.prolific as module

    calls = []
    real = hmac.compare_digest
    monkeypatch.setattr(module.hmac, "compare_digest", lambda a, b: calls.append(1) or real(a, b))
    verify_webhook(SECRET, _signed(), BODY, now=NOW)
    assert calls == [1, 1]  # the raw body and its json.dumps form, each compared in constant time
    calls.clear()
    verify_webhook(SECRET, _signed(body=b'{"a": 1}'), b'{"a": 1}', now=NOW)
    assert calls == [1]  # a body already in the documented form is compared once


# --- the fake's webhook deliveries, checked with our verifier ----------------------------------------------
class Receiver:
    """A tiny webhook target; answers 500 to the first ``fail_first`` deliveries."""

    def __init__(self, fail_first: int = 0):
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.fail_first = fail_first
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver.lock:
                    receiver.received.append((dict(self.headers), body))
                    status = 500 if len(receiver.received) <= receiver.fail_first else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/webhooks/prolific"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def events(self, secret: str) -> list[tuple[str, dict[str, Any]]]:
        """(event id, body) of every delivery, each verified as the portal does."""
        return [(verify_webhook(secret, h, b, now=time.time()).event_id, json.loads(b)) for h, b in self.received]


@pytest.fixture()
def receiver():
    r = Receiver()
    yield r
    r.close()


def _subscribe(client: ProlificClient, url: str, confirm: bool = True) -> tuple[str, str]:
    secret = client.create_webhook_secret("ws")
    sub_id, hook_secret = client.subscribe_webhook("ws", "submission.status.change", url)
    if confirm:
        client.confirm_webhook(sub_id, hook_secret)
    return secret, sub_id


def test_deliveries_are_signed_and_carry_the_documented_body(fake, client, receiver):
    secret, _ = _subscribe(client, receiver.url)
    study = _active_study(client)
    arrival = fake.arrive(study.id)
    fake.complete(arrival["session_id"], CODE)
    client.approve_submission(arrival["session_id"])
    assert fake.wait_for_deliveries(5)
    events = receiver.events(secret)
    assert [e["status"] for _, e in events] == ["AWAITING REVIEW", "APPROVED"]
    assert events[0][1] == {"event_type": "submission.status.change", "resource_id": arrival["session_id"],
                            "participant_id": arrival["participant_id"], "study_id": study.id,
                            "status": "AWAITING REVIEW"}
    assert len({event_id for event_id, _ in events}) == 2  # one id per event
    headers, body = receiver.received[0]
    assert re.fullmatch(r"\d+", headers["X-Prolific-Request-Timestamp"])
    with pytest.raises(WebhookRejected):
        verify_webhook("another secret", headers, body, now=time.time())
    assert [(status, attempt, code) for _, status, attempt, code in fake.deliveries] == [
        ("AWAITING REVIEW", 1, 200), ("APPROVED", 1, 200)]


def test_deliveries_are_retried_with_the_same_event_id(fake, client):
    failing = Receiver(fail_first=2)
    try:
        secret, _ = _subscribe(client, failing.url)
        study = _active_study(client)
        fake.return_submission(fake.arrive(study.id)["session_id"])
        assert fake.wait_for_deliveries(5)
        ids = [event_id for event_id, _ in failing.events(secret)]
        assert len(ids) == 3 and len(set(ids)) == 1
        assert [(attempt, code) for _, _, attempt, code in fake.deliveries] == [(1, 500), (2, 500), (3, 200)]
    finally:
        failing.close()


def test_an_unreachable_target_gets_twelve_attempts(fake, client):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    fake.retry_delay_s = 0.001
    _subscribe(client, f"http://127.0.0.1:{port}/hook")
    study = _active_study(client)
    fake.time_out(fake.arrive(study.id)["session_id"])
    assert fake.wait_for_deliveries(10)
    assert [(attempt, code) for _, _, attempt, code in fake.deliveries] == [(n, None) for n in range(1, 13)]


def test_unconfirmed_subscriptions_get_nothing(fake, client, receiver):
    _subscribe(client, receiver.url, confirm=False)
    study = _active_study(client)
    fake.return_submission(fake.arrive(study.id)["session_id"])
    assert fake.wait_for_deliveries(5) and receiver.received == [] and fake.deliveries == []


def test_duplicate_mode_delivers_every_event_twice_with_one_id(fake, client, receiver):
    secret, _ = _subscribe(client, receiver.url)
    study = _active_study(client)
    fake.configure(duplicate_deliveries=True)
    first, second = fake.arrive(study.id), fake.arrive(study.id)
    fake.return_submission(first["session_id"])
    fake.time_out(second["session_id"])
    assert fake.wait_for_deliveries(5)
    events = receiver.events(secret)
    assert [e["status"] for _, e in events] == ["RETURNED", "RETURNED", "TIMED-OUT", "TIMED-OUT"]
    assert events[0][0] == events[1][0] and events[2][0] == events[3][0] and events[0][0] != events[2][0]


def test_drop_mode_delivers_nothing(fake, client, receiver):
    _subscribe(client, receiver.url)
    study = _active_study(client)
    assert httpx.post(f"{fake.app_url}/_fake/config", json={"drop_webhooks": True}).json() == {
        "duplicate_deliveries": False, "drop_webhooks": True}
    sid = fake.arrive(study.id)["session_id"]
    fake.complete(sid, CODE)
    client.approve_submission(sid)
    assert fake.wait_for_deliveries(5)
    time.sleep(0.1)
    assert receiver.received == [] and fake.deliveries == []
    assert client.get_submission(sid).status == "APPROVED"  # polling still sees it


def test_deliveries_use_the_current_workspace_secret(fake, client, receiver):
    _subscribe(client, receiver.url)
    newer = client.create_webhook_secret("ws")
    study = _active_study(client)
    fake.return_submission(fake.arrive(study.id)["session_id"])
    assert fake.wait_for_deliveries(5)
    assert [e["status"] for _, e in receiver.events(newer)] == ["RETURNED"]


# --- the fake's participant simulation and control endpoints -----------------------------------------------
def test_fake_auth_health_and_errors(fake):
    assert httpx.get(f"{fake.app_url}/health").status_code == 200
    for headers in ({}, {"Authorization": "Token wrong"}, {"Authorization": f"Bearer {fake.token}"}):
        reply = httpx.get(f"{fake.base_url}studies/", headers=headers)
        # GET /studies/ declares its refusals as a bare ErrorDetail (status, error_code, title, detail)
        assert reply.status_code == 401 and reply.json()["detail"] == "Invalid token."
        assert reply.json()["status"] == 401 and reply.json()["title"]
        reply = httpx.get(f"{fake.base_url}hooks/event-types/", headers=headers)
        assert reply.status_code == 401 and reply.json()["error"]["detail"] == "Invalid token."  # {"error": ...}
    assert _breaches(fake) == []  # refusals in the documented shapes
    auth = {"Authorization": f"Token {fake.token}"}
    assert httpx.get(f"{fake.base_url}nothing-here/", headers=auth).status_code == 404
    assert [b.split(": ", 1)[1] for b in _breaches(fake)] == [
        f"Path not found for https://api.prolific.com/api/v1/nothing-here/"]  # an unknown route is a breach
    reply = httpx.post(f"{fake.base_url}studies/", headers=auth, content=b"not json")
    assert reply.status_code == 400 and reply.json()["detail"]
    assert httpx.post(f"{fake.base_url}studies/", headers=auth, json=[1, 2]).status_code == 400
    assert len(_breaches(fake)) == 2 and fake.studies == {}


def test_arrivals_fill_places_and_the_url(fake, client):
    study = client.create_study(_payload(places=2))
    with pytest.raises(ApiError, match="not active"):
        fake.arrive(study.id)
    client.publish_study(study.id)
    arrival = httpx.post(f"{fake.app_url}/_fake/studies/{study.id}/arrive").json()
    assert HEX24.match(arrival["participant_id"]) and HEX24.match(arrival["session_id"])
    assert arrival["study_id"] == study.id
    assert arrival["url"] == (f"http://portal.test/s/x/study1?PROLIFIC_PID={arrival['participant_id']}"
                              f"&STUDY_ID={study.id}&SESSION_ID={arrival['session_id']}")
    named = fake.arrive(study.id, "c" * 24)
    assert named["participant_id"] == "c" * 24
    reply = httpx.post(f"{fake.app_url}/_fake/studies/{study.id}/arrive")
    assert reply.status_code == 409 and reply.json() == {"error": {"detail": "no places"}}
    assert httpx.post(f"{fake.app_url}/_fake/submissions/{named['session_id']}/return").json()["status"] == "RETURNED"
    with pytest.raises(ApiError, match="already"):
        fake.arrive(study.id, "c" * 24)  # one submission per participant per study
    assert fake.arrive(study.id)["participant_id"] != "c" * 24  # the returned place is free again
    client.transition_study(study.id, "PAUSE")
    assert httpx.post(f"{fake.app_url}/_fake/studies/{study.id}/arrive").status_code == 409
    assert httpx.post(f"{fake.app_url}/_fake/studies/{'0' * 24}/arrive").status_code == 404


def test_completion_codes_actions_and_blocklist(fake, client):
    group = client.create_participant_group("completed part 1")
    codes = [{"code": CODE, "code_type": "COMPLETED",
              "actions": [{"action": "ADD_TO_PARTICIPANT_GROUP", "participant_group": group},
                          {"action": "AUTOMATICALLY_APPROVE"}]}]
    first = _active_study(client, 1, codes=codes)
    arrival = fake.arrive(first.id)
    reply = httpx.post(f"{fake.app_url}/_fake/submissions/{arrival['session_id']}/complete", json={"code": "WRONG"})
    assert reply.status_code == 400
    reply = httpx.post(f"{fake.app_url}/_fake/submissions/{arrival['session_id']}/complete", json={"code": CODE})
    assert reply.status_code == 200 and reply.json()["status"] == "APPROVED"  # automatically approved
    assert fake.groups[group]["members"] == [arrival["participant_id"]]
    second = _active_study(client, 2, filters=[{"filter_id": "participant_group_blocklist",
                                                "selected_values": [group]}])
    reply = httpx.post(f"{fake.app_url}/_fake/studies/{second.id}/arrive",
                       json={"participant_id": arrival["participant_id"]})
    assert reply.status_code == 403 and reply.json()["error"]["detail"] == "blocklisted"
    assert fake.arrive(second.id)["participant_id"] != arrival["participant_id"]
    page = httpx.get(f"{fake.app_url}/submissions/complete", params={"cc": CODE})
    assert page.status_code == 200 and f"Prolific (fake): completion code {CODE} received" in page.text
    assert httpx.get(f"{fake.app_url}/submissions/complete", params={"cc": "<b>x</b>"}).text.count("<b>") == 0
    assert fake.completion_visits == [CODE, "<b>x</b>"]
    late = fake.arrive(second.id)
    fake.time_out(late["session_id"])
    with pytest.raises(ApiError, match="TIMED-OUT"):
        fake.complete(late["session_id"], CODE)


def test_fault_control_endpoint(fake, client, sleeps):
    assert httpx.post(f"{fake.app_url}/_fake/faults", json={"status": 429, "count": 2, "retry_after": 2}).json() == {
        "faults": 2}
    client.list_studies()
    assert sleeps == [2.0, 2.0]
    assert httpx.post(f"{fake.app_url}/_fake/faults", json={"status": 200}).status_code == 400
    assert httpx.post(f"{fake.app_url}/_fake/nothing").status_code == 404


def test_fake_runs_as_a_process():
    proc, port = _fake_process()
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"fake prolific on http://127.0.0.1:{port}/api/v1/"
        assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
        with ProlificClient(f"http://127.0.0.1:{port}/api/v1/", "proc-token") as client:
            assert client.list_studies() == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_fake_signs_independently_of_our_code():
    source = (REPO / "crowdpref" / "simulation" / "prolific_server.py").read_text()
    imports = [line for line in source.splitlines() if "import" in line and "crowdpref" in line]
    assert all("crowdpref.simulation.prolific_contract import" in line for line in imports), imports
    # and its HMAC is the documented one: recompute a delivery here by hand
    secret, ts, body = "s", "1700000000", b'{"status":"RETURNED"}'
    by_hand = base64.b64encode(hmac.new(secret.encode(), ts.encode() + body, hashlib.sha256).digest()).decode()
    assert verify_webhook(secret, {"X-Prolific-Request-Signature": by_hand, "X-Prolific-Request-Timestamp": ts,
                                   "X-Event-ID": "e"}, body, now=1_700_000_000).event_id == "e"
