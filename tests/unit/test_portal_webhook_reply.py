"""The reply to a Prolific webhook (``Portal.prolific_webhook``) does as little as it can before
answering: the webhook secret is read from the store once per ``SECRET_READ_S`` (and again at
once when a signature fails with the secret held, so a secret replaced by ``crowdpref
prolific-webhooks --force`` is honoured from its first delivery); the participant is found
without reading their work, in the transaction that writes the delivery and its
``platform_status`` event: one store transaction per reply."""

from __future__ import annotations

import json
import time


from crowdpref.portal.service import WEBHOOK_SECRET
from crowdpref.prolific import EVENT_ID, SIGNATURE, TIMESTAMP, sign_webhook
from crowdpref.store import ParticipantState
from tests.unit.test_portal_entry import _claimed, rig  # noqa: F401 - the fixture


def _delivery(secret: str, body: dict, event_id: str) -> tuple[dict[str, str], bytes]:
    raw = json.dumps(body).encode()
    stamp = str(int(time.time()))
    return {SIGNATURE: sign_webhook(secret, stamp, raw), TIMESTAMP: stamp, EVENT_ID: event_id}, raw


def test_the_secret_is_read_once_and_again_when_it_was_replaced(rig, monkeypatch):  # noqa: F811
    rig.store.set_meta(WEBHOOK_SECRET, "first-secret")
    reads: list[str] = []
    get_meta = rig.store.get_meta
    monkeypatch.setattr(rig.store, "get_meta", lambda name: (reads.append(name), get_meta(name))[1])
    ignored = {"event_type": "study.status.change", "status": "ACTIVE"}
    for n in range(10):
        assert rig.portal.prolific_webhook(*_delivery("first-secret", ignored, f"e{n}"))[0] == 200
    assert reads.count(WEBHOOK_SECRET) == 1
    rig.store.set_meta(WEBHOOK_SECRET, "second-secret")  # `crowdpref prolific-webhooks --force`
    assert rig.portal.prolific_webhook(*_delivery("second-secret", ignored, "e-new"))[0] == 200
    status, reply = rig.portal.prolific_webhook(*_delivery("first-secret", ignored, "e-old"))
    assert status == 401 and reply == {"error": "bad signature"}


def test_a_return_is_queued_with_its_event_in_one_write_without_reading_the_work(rig, monkeypatch):  # noqa: F811
    collection, _, _, ids, participant = _claimed(rig, "hook")
    rig.store.set_meta(WEBHOOK_SECRET, "s")
    rig.portal.after_reply.submit = lambda event_id: True  # the release after the reply: not this test's
    built: list[int] = []
    monkeypatch.setattr(ParticipantState, "__init__", _counting(ParticipantState.__init__, built))
    body = {"event_type": "submission.status.change", "resource_id": ids["SESSION_ID"], "status": "RETURNED"}
    assert rig.portal.prolific_webhook(*_delivery("s", body, "ev-1")) == (200, {"outcome": "RETURNED: queued"})
    assert built == []  # nobody's work was read to answer
    [delivery] = [d for d in rig.store.deliveries("prolific") if d["event_id"] == "ev-1"]
    assert delivery["state"] == "pending"
    [event] = rig.store.events(collection.info.id, kinds=["platform_status"])
    assert event["participant_id"] == participant.id and "RETURNED" in json.dumps(event)
    # the same event again: a duplicate, and no second event
    assert rig.portal.prolific_webhook(*_delivery("s", body, "ev-1")) == (200, {"duplicate": True})
    assert len(rig.store.events(collection.info.id, kinds=["platform_status"])) == 1
    # with the secret held, a reply is one store transaction (found, recorded, logged)
    transactions: list[str] = []
    read, write = rig.store._read, rig.store._write
    monkeypatch.setattr(rig.store, "_read", lambda *a, **k: (transactions.append("read"), read(*a, **k))[1])
    monkeypatch.setattr(rig.store, "_write", lambda *a, **k: (transactions.append("write"), write(*a, **k))[1])
    review = dict(body, status="AWAITING REVIEW")
    assert rig.portal.prolific_webhook(*_delivery("s", review, "ev-2")) == (200, {"outcome": "recorded AWAITING REVIEW"})
    assert transactions == ["write"]
    assert len(rig.store.events(collection.info.id, kinds=["platform_status"])) == 2


def _counting(init, built):
    def counted(self, *args, **kwargs):
        built.append(1)
        init(self, *args, **kwargs)
    return counted


def test_a_replay_under_a_new_event_id_and_a_delivery_without_one(rig, caplog):  # noqa: F811
    """The event id is not signed: the same signed body re-sent with a new ``X-Event-ID`` inside
    the 5-minute window is a duplicate. A delivery without the header is handled, keyed by its
    signed content, with one warning. A body signed in Prolific's documented ``json.dumps`` form
    but sent compact gets in."""
    collection, _, _, ids, _ = _claimed(rig, "replay")
    rig.store.set_meta(WEBHOOK_SECRET, "s")
    rig.portal.after_reply.submit = lambda event_id: True

    def statuses() -> list[str]:
        return [json.loads(e["detail"])["status"] for e in rig.store.events(collection.info.id, kinds=["platform_status"])]

    review = {"event_type": "submission.status.change", "resource_id": ids["SESSION_ID"], "status": "AWAITING REVIEW"}
    headers, raw = _delivery("s", review, "ev-1")
    assert rig.portal.prolific_webhook(headers, raw) == (200, {"outcome": "recorded AWAITING REVIEW"})
    assert rig.portal.prolific_webhook({**headers, EVENT_ID: "ev-forged"}, raw) == (200, {"duplicate": True})
    assert statuses() == ["AWAITING REVIEW"]

    returned = dict(review, status="RETURNED")
    headers, raw = _delivery("s", returned, "unused")
    del headers[EVENT_ID]
    with caplog.at_level("WARNING", logger="crowdpref.portal.service"):
        assert rig.portal.prolific_webhook(headers, raw) == (200, {"outcome": "RETURNED: queued"})
    assert [r.message for r in caplog.records if "X-Event-ID" in r.message] == [
        "Prolific webhook without an X-Event-ID: de-duplicated on a hash of its timestamp and body"]
    assert rig.portal.prolific_webhook(headers, raw) == (200, {"duplicate": True})  # Prolific's retry, no id
    assert statuses() == ["AWAITING REVIEW", "RETURNED"]

    # signed as Prolific's Python example does (json.dumps of the body), sent compact
    approved = dict(review, status="APPROVED")
    compact = json.dumps(approved, separators=(",", ":")).encode()
    stamp = str(int(time.time()))
    documented = {SIGNATURE: sign_webhook("s", stamp, json.dumps(approved).encode()), TIMESTAMP: stamp,
                  EVENT_ID: "ev-3"}
    assert rig.portal.prolific_webhook(documented, compact) == (200, {"outcome": "recorded APPROVED"})
    assert statuses() == ["AWAITING REVIEW", "RETURNED", "APPROVED"]
