"""The Prolific client against the fake Prolific (tests/fakes/prolific_server.py) over HTTP:
every call, pagination, the retry rules (what is retried, what never is), typed errors that
never show the token, and webhook signatures (good, bad, tampered, stale, future, missing) -
including the fake's own signed, at-least-once deliveries."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from crowdpref.errors import ConfigError
from crowdpref.prolific import (
    ProlificAuthError,
    ProlificClient,
    ProlificNotFound,
    ProlificRequestError,
    ProlificUnavailable,
    WebhookRejected,
    retry_decision,
    sign_webhook,
    verify_webhook,
)
from tests.fakes.prolific_server import FakeProlific

URL = "http://portal.test/s/x/study1?PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}"
CODE = {"code": "C0DE1234", "code_type": "COMPLETED", "actions": [{"action": "MANUALLY_REVIEW"}]}


@pytest.fixture()
def fake():
    with FakeProlific(page_size=2, retry_delay_s=0.05) as server:
        yield server


@pytest.fixture()
def client(fake):
    with ProlificClient(fake.base_url, fake.token, backoff_s=0.001) as c:
        yield c


def _study(client: ProlificClient, n: int = 0, places: int = 3):
    return client.create_study({"name": f"study {n}", "internal_name": f"crowdpref:x:{n}", "external_study_url": URL,
                                "total_available_places": places, "completion_codes": [CODE], "reward": 450,
                                "estimated_completion_time": 30})


def test_studies_lifecycle_and_pagination(fake, client):
    studies = [_study(client, n) for n in range(5)]
    assert [s.internal_name for s in client.list_studies()] == [f"crowdpref:x:{n}" for n in range(5)]  # 3 pages
    study = client.publish_study(studies[0].id)
    assert study.status == "ACTIVE"
    assert client.pause_study(study.id).status == "PAUSED" and client.start_study(study.id).status == "ACTIVE"
    assert client.increase_places(study.id, 5).total_available_places == 5
    with pytest.raises(ValueError, match="only increase"):
        client.increase_places(study.id, 4)
    with pytest.raises(ProlificRequestError, match="409"):
        client.publish_study(study.id)  # already active
    with pytest.raises(ProlificRequestError, match="400.*placeholder|400.*lacks"):
        client.create_study({"name": "bad", "external_study_url": "http://x/", "total_available_places": 1,
                             "completion_codes": [CODE]})


def test_submissions_read_review_and_groups(fake, client):
    study = client.publish_study(_study(client, places=5).id)
    arrivals = [fake.arrive(study.id) for _ in range(5)]
    subs = client.list_submissions(study.id)  # 3 pages of 2
    assert sorted(s.id for s in subs) == sorted(a["session_id"] for a in arrivals)
    one = client.get_submission(arrivals[0]["session_id"])
    assert (one.participant_id, one.study_id, one.status) == (arrivals[0]["participant_id"], study.id, "ACTIVE")
    assert arrivals[0]["participant_id"] not in repr(one)
    fake.complete(arrivals[0]["session_id"], "C0DE1234")
    fake.complete(arrivals[1]["session_id"], "C0DE1234")
    client.bulk_approve([arrivals[0]["session_id"]])
    assert client.approve_submission(arrivals[0]["session_id"]).status == "APPROVED"  # idempotent
    with pytest.raises(ValueError, match="100 characters"):
        client.reject_submission(arrivals[1]["session_id"], "too short", "LOW_EFFORT")
    assert client.reject_submission(arrivals[1]["session_id"], "x" * 100, "LOW_EFFORT").status == "REJECTED"
    fake.return_submission(arrivals[2]["session_id"])
    assert client.submission_counts(study.id) == {"APPROVED": 1, "REJECTED": 1, "RETURNED": 1, "ACTIVE": 2}
    group = client.create_participant_group("completers")
    client.add_to_participant_group(group, ["a" * 24, "b" * 24, "c" * 24])
    client.remove_from_participant_group(group, ["b" * 24])
    assert client.participant_group_members(group) == ["a" * 24, "c" * 24]
    with pytest.raises(ProlificNotFound):
        client.get_submission("0" * 24)


def test_retries_only_where_a_repeat_cannot_harm(fake, client):
    study = _study(client)
    fake.faults += [503, 503]
    assert client.get_study(study.id).id == study.id  # two 503s, then success
    fake.faults += [429]
    assert client.get_study(study.id).id == study.id  # 429 with Retry-After
    before = len(fake.requests)
    fake.faults += [500] * 10
    with pytest.raises(ProlificUnavailable) as err:
        client.get_study(study.id)
    assert err.value.transient and len(fake.requests) - before == client.max_attempts
    fake.faults.clear()
    before = len(fake.requests)
    with pytest.raises(ProlificRequestError):  # a 400 is never retried
        client.create_study({"name": "bad"})
    assert len(fake.requests) - before == 1
    before = len(fake.requests)
    fake.faults += [503]
    with pytest.raises(ProlificUnavailable):  # a creation after a 5xx is reconciled, not repeated
        _study(client, 9)
    assert len(fake.requests) - before == 1 and len(client.list_studies()) == 1
    bonus = client.create_bonus(study.id, "a,1.00")
    before = len(fake.requests)
    fake.faults += [503]
    with pytest.raises(ProlificUnavailable):  # paying is never retried
        client.pay_bonus(bonus)
    assert len(fake.requests) - before == 1
    assert fake.bonuses[bonus]["paid"] == 0
    client.pay_bonus(bonus)
    assert fake.bonuses[bonus]["paid"] == 1


def test_retry_classification():
    request = httpx.Request("GET", "http://x")
    for status, read, create, never in ((429, True, True, False), (500, True, False, False), (503, True, False, False),
                                        (400, False, False, False), (404, False, False, False)):
        response = httpx.Response(status, request=request)
        assert (retry_decision("read", response), retry_decision("create", response),
                retry_decision("never", response)) == (read, create, never), status
    assert retry_decision("create", httpx.ConnectError("refused")) is True
    assert retry_decision("create", httpx.ReadTimeout("slow")) is False
    assert retry_decision("idempotent", httpx.ReadTimeout("slow")) is True
    assert retry_decision("never", httpx.ConnectError("refused")) is False


def test_errors_never_show_the_token(fake):
    token = "secret-token-do-not-print-123"
    with ProlificClient(fake.base_url, token, backoff_s=0.001) as bad:
        with pytest.raises(ProlificAuthError) as err:
            bad.list_studies()
        assert token not in str(err.value) and "PROLIFIC_TOKEN" in str(err.value)
        assert token not in repr(bad)
    with ProlificClient("http://127.0.0.1:9/api/v1/", token, max_attempts=2, backoff_s=0.001) as down:
        with pytest.raises(ProlificUnavailable) as err:
            down.list_studies()
        assert token not in str(err.value) and err.value.transient

    class Settings:
        prolific_token = None
        prolific_api_url = "http://x"

    with pytest.raises(ConfigError, match="PROLIFIC_TOKEN"):
        ProlificClient.from_settings(Settings())


def test_signature_verification():
    secret, body, now = "whsec", b'{"status": "RETURNED"}', 1_800_000_000.0
    ts = str(int(now))
    headers = {"X-Prolific-Request-Signature": sign_webhook(secret, ts, body), "X-Prolific-Request-Timestamp": ts,
               "X-Event-ID": "evt-1"}
    assert verify_webhook(secret, headers, body, now=now) == "evt-1"
    assert verify_webhook(secret, {k.lower(): v for k, v in headers.items()}, body, now=now) == "evt-1"
    cases = [
        ("bad signature", dict(headers, **{"X-Prolific-Request-Signature": sign_webhook("other", ts, body)}), body, now, 401),
        ("tampered body", headers, body.replace(b"RETURNED", b"APPROVED"), now, 401),
        ("stale", headers, body, now + 301, 401),
        ("future", headers, body, now - 301, 401),
        ("missing id", {k: v for k, v in headers.items() if k != "X-Event-ID"}, body, now, 400),
        ("bad timestamp", dict(headers, **{"X-Prolific-Request-Timestamp": "soon"}), body, now, 400),
    ]
    for name, h, b, at, status in cases:
        with pytest.raises(WebhookRejected) as err:
            verify_webhook(secret, h, b, now=at)
        assert err.value.status == status, name


class _Receiver:
    """A tiny webhook target that answers 500 to the first ``fail_first`` deliveries."""

    def __init__(self, fail_first: int = 0):
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.fail_first = fail_first
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                status = 500 if len(receiver.received) <= receiver.fail_first else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_the_fakes_webhooks_verify_are_retried_duplicated_or_dropped(fake, client):
    receiver = _Receiver(fail_first=1)
    secret = client.create_webhook_secret("ws")
    sub_id, hook_secret = client.subscribe_webhook("ws", "submission.status.change", receiver.url)
    assert "submission.status.change" in client.webhook_event_types()
    study = client.publish_study(_study(client, places=5).id)
    first = fake.arrive(study.id)
    assert fake.wait_for_deliveries() and receiver.received == []  # not confirmed yet: nothing sent
    client.confirm_webhook(sub_id, hook_secret)
    fake.return_submission(first["session_id"])
    assert fake.wait_for_deliveries()
    assert len(receiver.received) == 2  # a 500, then the retry with the same event id
    ids = {verify_webhook(secret, h, b, now=time.time()) for h, b in receiver.received}
    assert len(ids) == 1 and json.loads(receiver.received[-1][1])["status"] == "RETURNED"
    fake.duplicate_deliveries = True
    second = fake.arrive(study.id)
    fake.time_out(second["session_id"])
    assert fake.wait_for_deliveries()
    dupes = [verify_webhook(secret, h, b, now=time.time()) for h, b in receiver.received[2:]]
    assert len(dupes) == 2 and len(set(dupes)) == 1  # the TIMED-OUT event twice, with one event id
    fake.duplicate_deliveries, fake.drop_webhooks = False, True
    third = fake.arrive(study.id)
    before = len(receiver.received)
    fake.return_submission(third["session_id"])
    assert fake.wait_for_deliveries() and len(receiver.received) == before
