"""Monitoring that scales with activity, without Argilla: which participants a pass must read
(:meth:`Store.due_for_reading` - one query), how reported activity and reads interleave, the
failed-and-not-excluded query, the ``backstop_minutes`` setting, and the portal's Argilla
webhook endpoint (signature checked before anything is touched). The same on the real Argilla,
with the webhooks delivered by its worker: tests/integration/test_argilla_webhooks.py."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from standardwebhooks.webhooks import Webhook

from crowdpref.config import parse_study
from crowdpref.errors import CrowdprefError
from crowdpref.portal import argilla_hooks
from crowdpref.portal.app import create_app
from crowdpref.portal.service import Portal
from crowdpref.store import FAILED, Claimed, Store
from tests.conftest import isolated_settings

BACKSTOP, INACTIVE = 600.0, 3600.0
SECRET = "whsec_" + "c2VjcmV0LWZvci10ZXN0cy1vbmx5LTMyLWJ5dGVzIQ=="


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _collection(tmp_path: Path, n: int = 3) -> tuple[Store, Clock, int, list[Claimed]]:
    """n participants who claimed, whose records are visible and who were just read."""
    clock = Clock()
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}", clock=clock)
    info = store.collection("s", "study1", [f"q{i}" for i in range(12)], copies=1, per_participant=3, seed=1,
                            username_prefix="s-s1")
    claims = []
    for i in range(n):
        claimed = store.claim(info, f"key-{i}", "invite")
        assert isinstance(claimed, Claimed)
        store.account_ready(info, claimed.participant.account_id, dataset_id=f"dataset-{i}")
        store.records_logged(info.id, claimed.participant.id)
        claims.append(claimed)
    return store, clock, info.id, claims


def _due(store: Store, cid: int, clock: Clock) -> list[int]:
    return store.due_for_reading(cid, clock(), BACKSTOP, INACTIVE)


def _read_all(store: Store, cid: int, clock: Clock) -> None:
    for pid in _due(store, cid, clock):
        store.mark_read(cid, pid, store.activity_seq(pid), clock())


def test_never_read_participants_are_due_then_an_idle_collection_needs_no_read(tmp_path):
    store, clock, cid, claims = _collection(tmp_path)
    assert _due(store, cid, clock) == [c.participant.id for c in claims]
    _read_all(store, cid, clock)
    clock.now += BACKSTOP - 1
    assert _due(store, cid, clock) == []


def test_reported_activity_makes_exactly_that_participant_due(tmp_path):
    store, clock, cid, claims = _collection(tmp_path)
    _read_all(store, cid, clock)
    named = store.note_activity("dataset-1")
    assert [p.id for _, p in named] == [claims[1].participant.id]
    assert _due(store, cid, clock) == [claims[1].participant.id]
    assert store.note_activity("no-such-dataset") == []
    # a dataset id the store never kept: the account's username (the webhook's workspace) names them
    assert [p.id for _, p in store.note_activity(None, claims[2].participant.username)] == [claims[2].participant.id]


def test_activity_reported_during_a_read_stays_unread(tmp_path):
    store, clock, cid, claims = _collection(tmp_path, 1)
    pid = claims[0].participant.id
    _read_all(store, cid, clock)
    store.note_activity("dataset-0")
    seq = store.activity_seq(pid)  # a read begins ...
    store.note_activity("dataset-0")  # ... a webhook arrives meanwhile ...
    store.mark_read(cid, pid, seq, clock())  # ... the read ends
    assert _due(store, cid, clock) == [pid]
    store.mark_read(cid, pid, store.activity_seq(pid), clock())
    assert _due(store, cid, clock) == []
    store.mark_read(cid, pid, 0, clock())  # an older read finishing late never un-reads activity
    store.note_activity("dataset-0")
    store.mark_read(cid, pid, store.activity_seq(pid) - 1, clock())
    assert _due(store, cid, clock) == [pid]


def test_the_backstop_inactivity_drops_releases_and_completions_are_due(tmp_path):
    store, clock, cid, claims = _collection(tmp_path, 4)
    a, b, c, d = (claim.participant for claim in claims)
    _read_all(store, cid, clock)
    clock.now += BACKSTOP / 2
    store.mark_read(cid, a.id, store.activity_seq(a.id), clock())  # a read later than the others
    clock.now += BACKSTOP / 2
    assert _due(store, cid, clock) == [b.id, c.id, d.id]  # not read for BACKSTOP
    _read_all(store, cid, clock)
    assert _due(store, cid, clock) == []

    store.request_drop(cid, b.username)
    assert store.begin_release(cid, c.id, "test")
    store.record_progress(cid, d.id, {item: clock() for item in d.items}, clock())  # complete (a webhook)
    store.note_activity("dataset-3")
    assert _due(store, cid, clock) == [b.id, c.id, d.id]
    store.mark_read(cid, d.id, store.activity_seq(d.id), clock())
    assert _due(store, cid, clock) == [b.id, c.id]  # complete and read: never again

    # inactivity is decided from the store: quiet for INACTIVE -> due (to be read, then released)
    clock.now = a.last_activity_at + INACTIVE + 1
    store.mark_read(cid, a.id, store.activity_seq(a.id), clock())  # read just now: the backstop is not why
    assert a.id in _due(store, cid, clock)


def test_failed_and_not_excluded_is_one_query_over_finished_participants(tmp_path):
    store, clock, cid, claims = _collection(tmp_path, 3)
    a, b, c = (claim.participant for claim in claims)
    for p in (a, b):
        store.record_progress(cid, p.id, {item: clock() for item in p.items}, clock())
        store.record_checks(cid, p.id, {}, FAILED)
    store.record_checks(cid, c.id, {}, FAILED)  # still active: not finished, not a candidate
    assert [p.id for p in store.failed_not_excluded(cid)] == [a.id, b.id]
    store.exclude(cid, a.id, a.items, "test")
    assert [p.id for p in store.failed_not_excluded(cid)] == [b.id]


def test_backstop_minutes_is_validated_in_one_line():
    base = {"name": "x", "participants": "invite"}
    config = parse_study({**base, "study1": {"backstop_minutes": 5}, "study2": {"backstop_minutes": 15}}, source="x.yaml")
    assert config.study1.backstop_minutes == 5 and config.study2.backstop_minutes == 15
    assert parse_study(base, source="x.yaml").study1.backstop_minutes == 30
    for bad in (0, -1, "soon"):
        with pytest.raises(CrowdprefError) as caught:
            parse_study({**base, "study2": {"backstop_minutes": bad}}, source="x.yaml")
        message = str(caught.value)
        assert "\n" not in message and "x.yaml" in message and "study2.backstop_minutes" in message


# --- the portal's endpoint --------------------------------------------------------------------
def _signed(secret: str, payload: dict, msg_id: str = "msg_1") -> tuple[bytes, dict[str, str]]:
    body = json.dumps(payload)
    now = datetime.now(timezone.utc)
    return body.encode(), {"webhook-id": msg_id, "webhook-timestamp": str(int(now.timestamp())),
                           "webhook-signature": Webhook(secret).sign(msg_id, now, body)}


def _event(username: str, dataset_id: str, item: str, status: str = "submitted", who: str | None = None,
           kind: str = "response.created", at: str = "2026-11-25T10:00:00.000000") -> dict:
    return {"type": kind, "version": 1, "timestamp": "2026-11-25T10:00:00.000000Z", "data": {
        "status": status, "values": {"response": {"value": "a private answer"}},
        "updated_at": at, "user": {"username": who or username},
        "record": {"external_id": item, "dataset": {"id": dataset_id, "workspace": {"name": username}}}}}


@pytest.fixture()
def endpoint(tmp_path):
    store, clock, cid, claims = _collection(tmp_path, 2)
    _read_all(store, cid, clock)
    settings = isolated_settings(tmp_path / "home", portal_studies=tmp_path)
    client = TestClient(create_app(Portal(settings, store, clock=clock)), base_url="http://portal.test")
    return store, cid, claims, client


def test_the_endpoint_refuses_deliveries_until_a_webhook_is_registered(endpoint):
    store, cid, claims, client = endpoint
    p = claims[0].participant
    body, headers = _signed(SECRET, _event(p.username, "dataset-0", p.items[0]))
    assert client.post("/hooks/argilla", content=body, headers=headers).status_code == 503
    assert store.activity_seq(p.id) == 0


def test_a_bad_signature_gets_401_and_changes_nothing(endpoint, caplog):
    store, cid, claims, client = endpoint
    store.set_meta(argilla_hooks.SECRET_META, SECRET)
    p = claims[0].participant
    body, headers = _signed("whsec_" + "b3RoZXIta2V5LW5vdC1yZWdpc3RlcmVkLXdpdGgtYXJnaWxsYQ==",
                            _event(p.username, "dataset-0", p.items[0]))
    before = store.participant(cid, p.username)
    for bad in (headers, {k: v for k, v in headers.items() if k != "webhook-signature"},
                {**headers, "webhook-timestamp": str(int(datetime.now(timezone.utc).timestamp()) - 3600)}):
        reply = client.post("/hooks/argilla", content=body, headers=bad)
        assert reply.status_code == 401
    assert store.activity_seq(p.id) == 0 and store.participant(cid, p.username) == before
    assert "a private answer" not in caplog.text and SECRET not in caplog.text and p.username not in caplog.text


def test_a_signed_event_records_activity_and_counts_only_the_participants_own_submission(endpoint):
    store, cid, claims, client = endpoint
    store.set_meta(argilla_hooks.SECRET_META, SECRET)
    p, other = claims[0].participant, claims[1].participant

    def post(payload: dict, msg: str) -> dict:
        body, headers = _signed(SECRET, payload, msg)
        reply = client.post("/hooks/argilla", content=body, headers=headers)
        assert reply.status_code == 200, reply.text
        return reply.json()

    assert post(_event(p.username, "dataset-0", p.items[0], who="owner"), "m1")["counted"] == 0  # not theirs
    # a draft saved after their claim (the clock: 2027-01-15) is activity, as a read would record
    assert post(_event(p.username, "dataset-0", p.items[1], status="draft", at="2027-02-01T00:00:00"), "m2")["counted"] == 0
    assert post(_event(p.username, "dataset-0", other.items[0]), "m3")["counted"] == 0  # not an item they hold
    assert store.participant(cid, p.username).submitted == {}
    assert store.activity_seq(p.id) == 3 and store.activity_seq(other.id) == 0
    assert store.participant(cid, p.username).last_activity_at == datetime(2027, 2, 1, tzinfo=timezone.utc).timestamp()
    assert post(_event(p.username, "dataset-0", p.items[0]), "m4")["counted"] == 1
    assert list(store.participant(cid, p.username).submitted) == [p.items[0]]
    assert post(_event("someone-else", "dataset-99", "q1"), "m5") == {"outcome": "not a participant's dataset"}
    assert post({"type": "dataset.created", "data": {}}, "m6") == {"outcome": "ignored"}
    deleted = post(_event(p.username, "dataset-0", p.items[2], kind="response.deleted"), "m7")
    assert deleted["counted"] == 0 and store.activity_seq(p.id) == 5


def test_parse_keeps_only_what_monitoring_needs():
    event = argilla_hooks.parse(_event("u-1", "d-1", "q1"))
    assert event is not None and (event.kind, event.dataset_id, event.workspace, event.username,
                                  event.record_external_id, event.status) == (
        "response.created", "d-1", "u-1", "u-1", "q1", "submitted")
    assert event.updated_at == datetime(2026, 11, 25, 10, tzinfo=timezone.utc).timestamp()
    assert "private" not in repr(event) and "u-1" not in repr(event)
    assert argilla_hooks.parse({"type": "record.completed", "data": {}}) is None
    assert argilla_hooks.parse(["not", "an", "object"]) is None


def test_standing_down_turns_polling_on_first_even_when_argilla_is_down(tmp_path, caplog):
    """The portal stopping with Argilla already gone (``crowdpref down`` stops Argilla after the
    portal, but a crash may not): the store stops relying on webhooks all the same, and the
    portal's stop never raises."""
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    settings = isolated_settings(tmp_path / "home", argilla_url="http://127.0.0.1:9",
                                 argilla_api_key="crowdpref.apikey." + "k" * 32)
    store.set_meta(argilla_hooks.SECRET_META, SECRET)
    store.set_meta(argilla_hooks.ID_META, "hook-1")
    store.set_meta(argilla_hooks.SERVER_META, "http://127.0.0.1:9")
    assert argilla_hooks.registered_for(store, "http://127.0.0.1:9")

    with caplog.at_level("WARNING", logger="crowdpref.portal"):
        Portal(settings, store).stand_down_argilla_webhook()  # port 9: refused
    assert not argilla_hooks.registered_for(store, "http://127.0.0.1:9")  # monitoring polls
    assert "Argilla webhook not disabled" in caplog.text and "k" * 32 not in caplog.text
    assert store.get_meta(argilla_hooks.SECRET_META) == SECRET  # the next start re-enables it
