"""Prolific's webhooks are answered at once (issue 19, section 6): the portal verifies a delivery,
records it in the store with the work it asks for (``pending``) and replies; the release runs
after the reply. A portal that dies after replying leaves the work pending in the store, and the
next start finishes it - once. A delivery delivered twice is handled once.

Real store, real study-1 collection and the real portal served over HTTP (uvicorn); Argilla is a
stand-in at its API boundary whose record deletion - the last Argilla call of a release - waits
until the test opens a gate, so the order of the reply and the release is observed, not timed."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient

from crowdpref.account_passwords import AccountPasswords
from crowdpref.config import load_study
from crowdpref.portal.app import create_app
from crowdpref.portal.links import finish_url
from crowdpref.portal.service import WEBHOOK_SECRET, Portal
from crowdpref.store import ACTIVE, RELEASED, RELEASING, Store
from crowdpref.study1 import study1_collection
from tests.conftest import free_port, isolated_settings
from tests.integration.test_study1_collection import _questions
from tests.portal_server import PortalThread

SECRET = "whsec-after-reply"
PIDS = ("5f1e2d3c4b5a69788796a5b4", "60aa11bb22cc33dd44ee55ff", "70bb11bb22cc33dd44ee55aa")
SESSIONS = ("6123456789abcdef01234567", "7123456789abcdef01234567", "8123456789abcdef01234567")
WAIT_S = 30.0  # how long a step may take before the test gives up (a hang, never a timing assertion)


class GatedArgilla:
    """Argilla's owner side, remembered instead of done; ``delete_records`` (what a release
    does in Argilla) waits until ``gate`` is set and reports when it began."""

    api_url = "http://argilla.invalid"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.delete_began = threading.Event()
        self.deleted: list[tuple[str, tuple[str, ...]]] = []
        self.passwords = AccountPasswords.ephemeral()  # the real derivation, a key of this test
        self.created: list[str] = []  # the accounts ensure_annotator made
        self.revoked: dict[str, int] = {}  # username -> revoke_access calls

    def ensure_workspace(self, name: str) -> Any:
        return SimpleNamespace(name=name)

    def ensure_annotator(self, username: str, workspace: Any) -> None:
        self.created.append(username)

    def ensure_dataset(self, name: str, workspace: Any, settings: Any) -> Any:
        return SimpleNamespace(id=f"ds-{workspace.name}", name=name)

    def log_records(self, dataset: Any, records: list[Any]) -> None:
        pass

    def revoke_access(self, username: str, dataset_id: str | None = None) -> int:
        self.revoked[username] = self.revoked.get(username, 0) + 1
        return int(self.revoked[username] == 1)

    def find_dataset(self, name: str, workspace: str) -> Any:
        return SimpleNamespace(id=f"ds-{workspace}", name=name, workspace=workspace)

    def user_id(self, username: str) -> str:
        return f"id-{username}"

    def answers(self, dataset: Any) -> list[Any]:
        return []

    def delete_records(self, dataset: Any, ids: list[str]) -> None:
        self.delete_began.set()
        if not self.gate.wait(WAIT_S):
            raise AssertionError("the test never opened the gate")
        self.deleted.append((dataset.workspace, tuple(sorted(ids))))


@pytest.fixture()
def rig(tmp_path: Path) -> Any:
    studies = tmp_path / "studies"
    studies.mkdir()
    (studies / "hooks.yaml").write_text(yaml.safe_dump({
        "name": "hooks", "seed": 3, "participants": "prolific", "prolific": {"enabled": True},
        "study1": {"responses_per_question": 2, "questions_per_participant": 3, "pool_size": 0},
        "study2": {"pairs_per_participant": 6}}))
    settings = isolated_settings(tmp_path / "home", portal_studies=studies)
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    owner = GatedArgilla()
    config = load_study(studies / "hooks.yaml")
    collection = study1_collection(config, _questions().head(6), owner, tmp_path / "run", store,
                                   finish_url(settings, "hooks", "study1"))
    collection.spec.dataset_settings = lambda: SimpleNamespace(guidelines="")  # type: ignore[method-assign]
    collection.spec.record = lambda item, swapped=None: item  # type: ignore[method-assign]
    participants = []
    for pid, session in zip(PIDS, SESSIONS):  # what the portal's entry leaves: a claim, its session (hashed)
        claimed = collection.claim(pid, "prolific")
        store.record_session(collection.info.id, claimed.participant.id, session)
        participants.append(claimed.participant)
    store.set_meta(WEBHOOK_SECRET, SECRET)

    def portal(**kwargs: Any) -> Portal:
        return Portal(settings, store, open_collection=lambda path, key: collection, **kwargs)

    yield SimpleNamespace(store=store, owner=owner, collection=collection, participants=participants,
                          cid=collection.info.id, portal=portal)
    owner.gate.set()
    store.close()


def _delivery(n: int, event_id: str, status: str = "RETURNED") -> tuple[bytes, dict[str, str]]:
    """A signed status change for participant ``n`` (Prolific's signature, computed here)."""
    body = json.dumps({"event_type": "submission.status.change", "resource_id": SESSIONS[n],
                       "participant_id": PIDS[n], "status": status}).encode()
    timestamp = str(int(time.time()))
    mac = hmac.new(SECRET.encode(), timestamp.encode() + body, hashlib.sha256).digest()
    return body, {"X-Prolific-Request-Signature": base64.b64encode(mac).decode(),
                  "X-Prolific-Request-Timestamp": timestamp, "X-Event-ID": event_id,
                  "Content-Type": "application/json"}


def _status(rig: Any, n: int) -> str:
    return rig.store.participant(rig.cid, rig.participants[n].username).status


def _deliveries(rig: Any) -> dict[str, dict[str, Any]]:
    return {d["event_id"]: d for d in rig.store.deliveries("prolific")}


def _events(rig: Any, kind: str, n: int) -> int:
    return sum(e["participant_id"] == rig.participants[n].id for e in rig.store.events(rig.cid, kinds=[kind]))


def test_the_reply_comes_before_the_release_which_then_completes(rig, caplog):
    caplog.set_level(logging.INFO)
    portal = rig.portal()
    with PortalThread(create_app(portal), port=free_port()) as server:
        body, headers = _delivery(0, "evt-1")
        # the release is held inside Argilla's delete: a portal that released before replying
        # would not answer until the gate opens (and this post would time out)
        reply = httpx.post(f"{server.url}/hooks/prolific", content=body, headers=headers, timeout=WAIT_S)
        assert reply.status_code == 200 and reply.json() == {"outcome": "RETURNED: queued"}
        assert rig.owner.delete_began.wait(WAIT_S)  # the release runs after the reply...
        assert rig.owner.deleted == [] and _status(rig, 0) == RELEASING  # ...and is not done yet
        assert _deliveries(rig)["evt-1"]["state"] == "pending"
        rig.owner.gate.set()
        assert portal.after_reply.wait(WAIT_S)
    held = rig.participants[0]
    assert rig.owner.deleted == [(held.username, tuple(sorted(held.held)))]
    after = rig.store.participant(rig.cid, held.username)
    assert after.status == RELEASED and after.held == []
    delivery = _deliveries(rig)["evt-1"]
    assert (delivery["state"], delivery["outcome"]) == ("done", "RETURNED: work released")
    assert [_status(rig, 1), _status(rig, 2)] == [ACTIVE, ACTIVE]
    stored = json.dumps(rig.store.deliveries(), default=str) + json.dumps(rig.store.events(rig.cid), default=str)
    for secret in (*PIDS, *SESSIONS, SECRET):  # no Prolific id nor the secret in the store or the log
        assert secret not in stored and secret not in caplog.text


def test_work_a_dead_portal_replied_to_is_finished_once_when_it_starts_again(rig):
    rig.owner.gate.set()
    dead = rig.portal(after_reply_workers=0)  # replies, records, and dies before any release runs
    client = TestClient(create_app(dead), base_url="http://portal.test")
    for n, event_id in ((0, "evt-a"), (1, "evt-b")):
        body, headers = _delivery(n, event_id, "TIMED-OUT" if n else "RETURNED")
        reply = client.post("/hooks/prolific", content=body, headers=headers)
        assert reply.status_code == 200 and reply.json()["outcome"].endswith(": queued")
    # participant 1's release had begun in Argilla when the process died: left releasing
    assert rig.store.begin_release(rig.cid, rig.participants[1].id, "TIMED-OUT on Prolific")
    assert [_status(rig, 0), _status(rig, 1)] == [ACTIVE, RELEASING] and rig.owner.deleted == []
    assert {e: d["state"] for e, d in _deliveries(rig).items()} == {"evt-a": "pending", "evt-b": "pending"}
    assert rig.store.pending_deliveries() == ["evt-a", "evt-b"]

    restarted = rig.portal()
    with TestClient(create_app(restarted), base_url="http://portal.test"):  # its start-up runs what is pending
        assert restarted.after_reply.wait(WAIT_S)
    assert [_status(rig, 0), _status(rig, 1), _status(rig, 2)] == [RELEASED, RELEASED, ACTIVE]
    assert sorted(w for w, _ in rig.owner.deleted) == sorted(p.username for p in rig.participants[:2])
    assert {e: (d["state"], d["outcome"]) for e, d in _deliveries(rig).items()} == {
        "evt-a": ("done", "RETURNED: work released"), "evt-b": ("done", "TIMED-OUT: work released")}
    assert [_events(rig, "released", n) for n in (0, 1)] == [1, 1]

    again = rig.portal()  # a later start finds nothing pending: nothing runs twice
    with TestClient(create_app(again), base_url="http://portal.test"):
        assert again.after_reply.wait(WAIT_S)
    assert len(rig.owner.deleted) == 2 and [_events(rig, "released", n) for n in (0, 1)] == [1, 1]
    assert rig.store.pending_deliveries() == []


def test_a_delivery_delivered_twice_is_handled_once(rig):
    portal = rig.portal()
    replies: list[dict[str, Any]] = []
    with PortalThread(create_app(portal), port=free_port()) as server:
        def deliver() -> None:  # the same event, freshly signed each time (a sender's retries)
            body, headers = _delivery(2, "evt-dup")
            replies.append(httpx.post(f"{server.url}/hooks/prolific", content=body, headers=headers,
                                      timeout=WAIT_S).json())

        senders = [threading.Thread(target=deliver) for _ in range(6)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
        assert sorted(replies, key=str) == [{"duplicate": True}] * 5 + [{"outcome": "RETURNED: queued"}]
        rig.owner.gate.set()
        assert portal.after_reply.wait(WAIT_S)
        deliver()  # once more after the release: still a duplicate
        assert replies[-1] == {"duplicate": True}
        assert portal.after_reply.wait(WAIT_S)
    assert len(rig.owner.deleted) == 1 and _status(rig, 2) == RELEASED
    assert list(_deliveries(rig)) == ["evt-dup"] and _deliveries(rig)["evt-dup"]["outcome"] == "RETURNED: work released"
    assert _events(rig, "released", 2) == 1 and _events(rig, "platform_status", 2) == 1
    assert portal.run_delivery("evt-dup") is None  # done: running it again does nothing
    assert len(rig.owner.deleted) == 1


def test_work_after_the_reply_waits_for_a_pause_in_the_deliveries():
    """While deliveries keep arriving the releases wait (they would share the portal's CPU with
    the replies); they start once none came for ``quiet_s``, or after ``patience_s``."""
    import time as _time

    from crowdpref.portal.after_reply import AfterReply

    started: dict[str, float] = {}
    after = AfterReply(lambda event: started.setdefault(event, _time.monotonic()), workers=2,
                       quiet_s=0.3, patience_s=5.0)
    for n in range(6):  # a delivery every 0.1 s for 0.5 s
        after.submit(f"e{n}")
        _time.sleep(0.1)
    last = _time.monotonic()
    assert after.wait(10)
    assert len(started) == 6
    assert min(started.values()) >= last - 0.1 + 0.3 - 0.05  # none began before the pause
    impatient = AfterReply(lambda event: started.setdefault(event, _time.monotonic()), workers=1,
                           quiet_s=10.0, patience_s=0.2)
    begin = _time.monotonic()
    impatient.submit("late")
    assert impatient.wait(5) and started["late"] - begin < 2.0  # patience runs out: it starts anyway
    after.stop()
    impatient.stop()
