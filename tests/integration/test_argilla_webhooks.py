"""Monitoring that scales with activity, on the REAL embedded Argilla: the portal (served over
real HTTP, so Argilla's rq worker can reach it) registers Argilla's response webhook; a
participant's submission reaches the study store through it without any polling pass; a
forged delivery is refused and changes nothing; a monitoring pass over idle participants reads
nobody from Argilla (every HTTP call of the owner client is counted by a small subclass of the
real :class:`ArgillaOwner`), the backstop reads a participant not read for ``backstop_s``, and
a participant due for release is read once before being released (a late answer whose webhook
was lost still counts)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from crowdpref.argilla_client import AnnotatorSession, ArgillaOwner
from crowdpref.config import parse_study
from crowdpref.portal import argilla_hooks
from crowdpref.portal.app import create_app
from crowdpref.portal.service import Portal
from crowdpref.store import COMPLETE, RELEASED, Claimed, Store
from crowdpref.study1 import study1_collection
from tests.conftest import free_port, isolated_settings
from tests.integration.test_study1_collection import _questions
from tests.portal_server import PortalThread

pytestmark = pytest.mark.integration


class Clock:
    """Real time plus an offset the test moves forward (Argilla's own timestamps are real)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


class RecordingOwner(ArgillaOwner):
    """The real owner client, remembering every HTTP call it makes (SDK calls included)."""

    def __init__(self, *args, **kwargs):
        self.calls: list[str] = []
        super().__init__(*args, **kwargs)

    def _after_response(self, response: httpx.Response) -> None:
        self.calls.append(f"{response.request.method} {response.request.url.path}")
        super()._after_response(response)

    def take(self) -> list[str]:
        calls, self.calls = self.calls, []
        return calls


@pytest.fixture()
def stack(argilla_server, tmp_path: Path, unique: str):
    """A study-1 collection (R=2, Q=3, no warm pool), its store, and a portal on a real port
    that registered Argilla's webhook (deleted again at the end)."""
    def make(inactive_minutes: float = 60, backstop_minutes: float = 10, checks: dict | None = None):
        name = f"w{unique}"
        config = parse_study({
            "name": name, "seed": 5, "participants": "invite",
            "study1": {"responses_per_question": 2, "questions_per_participant": 3, "pool_size": 0,
                       "inactive_after_minutes": inactive_minutes, "backstop_minutes": backstop_minutes,
                       **({"checks": checks} if checks else {})},
            "study2": {"pairs_per_participant": 6},
        }, source="test")
        clock = Clock()
        store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}", clock=clock)
        owner = RecordingOwner(argilla_server.api_url, argilla_server.owner_api_key)
        collection = study1_collection(config, _questions(), owner, tmp_path / "run", store)
        port = free_port()  # no Caddy here: Argilla delivers to the portal's own address
        settings = isolated_settings(tmp_path / "home", argilla_url=argilla_server.api_url,
                                     argilla_api_key=argilla_server.owner_api_key, portal_studies=tmp_path,
                                     portal_port=port, portal_url=f"http://127.0.0.1:{port}")
        portal = Portal(settings, store, open_collection=lambda path, key: collection)
        server = PortalThread(create_app(portal), port=settings.portal_port).__enter__()
        webhook_id = portal.register_argilla_webhook(owner)
        made.append((server, webhook_id))
        return collection, store, owner, clock, portal, server

    made: list = []
    yield make
    for server, webhook_id in made:
        server.__exit__(None, None, None)
        ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key).delete_webhook(webhook_id)


def _claim(collection, key: str) -> Claimed:
    claimed = collection.claim(key, "invite")
    assert isinstance(claimed, Claimed)
    return claimed


def _submit(api_url: str, claimed: Claimed, dataset_name: str, n: int, password: str) -> list[str]:
    """The participant submits ``n`` answers as the web UI does; returns their item ids."""
    session = AnnotatorSession(api_url, claimed.participant.username, password)
    try:
        dataset = next(d for d in session.datasets() if d["name"] == dataset_name)
        pending = session.pending_records(dataset["id"])[:n]
        session.submit([(r["id"], {"response": "I would ask them how they feel, then listen.", "quality": 4})
                        for r in pending])
        return [r["external_id"] for r in pending]
    finally:
        session.close()


def _wait_for(predicate, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout_s:g} s: {what}")


def test_the_portal_registers_one_webhook_and_keeps_its_secret_in_the_store(stack, argilla_server):
    collection, store, owner, _, portal, server = stack()
    hooks = [w for w in owner.webhooks() if w["url"] == f"{server.url}/hooks/argilla"]
    assert len(hooks) == 1 and set(hooks[0]["events"]) == set(argilla_hooks.EVENTS)
    assert store.get_meta(argilla_hooks.SECRET_META) == hooks[0]["secret"]
    assert portal.register_argilla_webhook(owner) == hooks[0]["id"]  # again: found, not duplicated
    assert len([w for w in owner.webhooks() if w["url"] == f"{server.url}/hooks/argilla"]) == 1
    assert collection.webhooks_active()


def test_a_submission_reaches_the_store_through_the_webhook_without_a_polling_pass(stack, argilla_server):
    collection, store, owner, _, _, _ = stack()
    claimed = _claim(collection, "inv-1")
    owner.take()
    items = _submit(argilla_server.api_url, claimed, collection.dataset_name, 1,
                    collection.owner.passwords(claimed.participant.username))
    username = claimed.participant.username
    _wait_for(lambda: list(store.participant(collection.info.id, username).submitted) == items,
              "the submitted answer in the store")
    assert owner.take() == []  # nobody read Argilla: no monitor, no refresh, no finish page
    events = store.events(collection.info.id, kinds=["submitted"])
    assert [e["item_id"] for e in events] == items
    # the rest, then complete - still without a read
    rest = _submit(argilla_server.api_url, claimed, collection.dataset_name, 3,
                    collection.owner.passwords(claimed.participant.username))
    _wait_for(lambda: store.participant(collection.info.id, username).status == COMPLETE,
              "the participant complete in the store")
    assert sorted(store.participant(collection.info.id, username).submitted) == sorted(items + rest)
    assert owner.take() == []


def test_a_forged_delivery_gets_401_and_changes_nothing(stack, argilla_server):
    collection, store, owner, _, _, server = stack()
    claimed = _claim(collection, "inv-1")
    participant = claimed.participant
    item = participant.items[0]
    payload = {"type": "response.created", "version": 1, "timestamp": "2026-11-25T10:00:00.000000Z", "data": {
        "status": "submitted", "values": {"response": {"value": "x"}}, "updated_at": datetime.now(timezone.utc).isoformat(),
        "user": {"username": participant.username},
        "record": {"external_id": item, "dataset": {"id": participant.dataset_id,
                                                     "workspace": {"name": participant.username}}}}}
    body = json.dumps(payload)
    msg_id, now = "msg_test", datetime.now(timezone.utc)
    headers = {"webhook-id": msg_id, "webhook-timestamp": str(int(now.timestamp())), "content-type": "application/json"}
    before = (store.activity_seq(participant.id), store.participant(collection.info.id, participant.username))

    wrong = Webhook("whsec_" + "QUJD" * 8).sign(msg_id, now, body)
    for bad in ({**headers, "webhook-signature": wrong}, headers):  # wrong key; no signature at all
        reply = httpx.post(f"{server.url}/hooks/argilla", content=body, headers=bad)
        assert reply.status_code == 401, reply.text
        assert participant.username not in reply.text and "QUJD" not in reply.text
    tampered = Webhook(store.get_meta(argilla_hooks.SECRET_META)).sign(msg_id, now, body)
    reply = httpx.post(f"{server.url}/hooks/argilla", content=body.replace(item, participant.items[1]),
                       headers={**headers, "webhook-signature": tampered})
    assert reply.status_code == 401
    assert (store.activity_seq(participant.id), store.participant(collection.info.id, participant.username)) == before

    # the same delivery signed with the registered secret is taken (so the 401s were the signature)
    good = Webhook(store.get_meta(argilla_hooks.SECRET_META)).sign(msg_id, now, body)
    reply = httpx.post(f"{server.url}/hooks/argilla", content=body, headers={**headers, "webhook-signature": good})
    assert reply.status_code == 200 and reply.json()["counted"] == 1
    assert store.activity_seq(participant.id) == before[0] + 1
    assert list(store.participant(collection.info.id, participant.username).submitted) == [item]


def test_an_idle_pass_reads_nobody_and_the_backstop_reads_after_backstop_s(stack, argilla_server):
    collection, store, owner, clock, _, _ = stack(inactive_minutes=60, backstop_minutes=10)
    claims = [_claim(collection, f"inv-{n}") for n in range(3)]
    first = collection.monitor()  # never read since their claim: each read once
    assert first.webhooks and first.read_now == 3
    owner.take()

    idle = collection.monitor()
    assert idle.webhooks and idle.read_now == 0 and idle.released_now == []
    assert owner.take() == []  # not one HTTP call to Argilla

    # one of them works: the webhook names them, the next pass reads them alone
    _submit(argilla_server.api_url, claims[1], collection.dataset_name, 1,
                    collection.owner.passwords(claims[1].participant.username))
    username = claims[1].participant.username
    _wait_for(lambda: store.participant(collection.info.id, username).submitted, "the answer via the webhook")
    active = collection.monitor()
    assert active.read_now == 1
    assert sum(call.endswith("/records") for call in owner.take()) == 1  # one dataset read
    assert collection.monitor().read_now == 0

    clock.offset += 10 * 60 + 1  # the backstop: everyone not read for 10 min is read, nobody released
    backstop = collection.monitor()
    assert backstop.read_now == 3 and backstop.released_now == []
    assert sum(call.endswith("/records") for call in owner.take()) == 3
    assert collection.monitor().read_now == 0


def test_a_participant_due_for_release_is_read_first_so_a_late_answer_counts(stack, argilla_server):
    collection, store, owner, clock, _, _ = stack(inactive_minutes=30, backstop_minutes=120)
    quiet, late = _claim(collection, "inv-1"), _claim(collection, "inv-2")
    assert collection.monitor().read_now == 2
    # the webhook is lost (Argilla no longer sends it); the store still expects webhooks
    owner.delete_webhook(store.get_meta(argilla_hooks.ID_META))
    answered = _submit(argilla_server.api_url, late, collection.dataset_name, 1,
                    collection.owner.passwords(late.participant.username))
    time.sleep(2)
    assert store.participant(collection.info.id, late.participant.username).submitted == {}  # nobody told the store
    assert collection.monitor().read_now == 0  # idle by the store: not read

    clock.offset += 30 * 60 + 60  # both quiet for longer than inactive_after: read once, then released
    progress = collection.monitor()
    assert sorted(progress.released_now) == sorted([quiet.participant.username, late.participant.username])
    assert progress.read_now == 2
    after = store.participant(collection.info.id, late.participant.username)
    assert after.status == RELEASED and list(after.submitted) == answered  # the late answer counted
    assert len([a for a in after.assignments if a.status == RELEASED]) == 2


def test_a_participant_the_webhook_completed_has_their_checks_graded_by_the_next_pass(stack, argilla_server):
    collection, store, owner, _, _, _ = stack(checks={"count": 1, "on_fail": "exclude"})
    claimed = _claim(collection, "inv-1")
    assert collection.monitor().read_now == 1
    username = claimed.participant.username
    # they answer everything - the instructed-response item too, like any question (so they fail it)
    _submit(argilla_server.api_url, claimed, collection.dataset_name, 4,
                    collection.owner.passwords(claimed.participant.username))
    _wait_for(lambda: store.participant(collection.info.id, username).status == COMPLETE, "complete via the webhook")
    assert store.participant(collection.info.id, username).check_verdict == "unanswered"  # as last read
    progress = collection.monitor()  # reads them once: grades the check, excludes their work
    assert progress.read_now == 1
    after = store.participant(collection.info.id, username)
    assert after.check_verdict == "failed" and after.excluded_at is not None and len(after.excluded) == 3
    assert progress.unclaimed == 12  # their three slots are free again
    assert collection.monitor().read_now == 0  # graded once, never read again


def test_a_stopped_portal_disables_its_webhook_and_monitoring_polls_again(argilla_server, tmp_path):
    """The real portal process (``python -m crowdpref.portal``, as ``crowdpref up`` starts it):
    it registers the webhook when it starts; SIGTERM (what ``crowdpref down`` sends) makes it
    disable the webhook in Argilla and tell the store, so monitoring reads every participant
    again instead of waiting for deliveries nobody receives; the next start enables the same
    webhook again (never a second one)."""
    import os
    import signal
    import subprocess
    import sys

    from crowdpref.store import open_store

    settings = isolated_settings(tmp_path / "home", argilla_url=argilla_server.api_url,
                                 argilla_api_key=argilla_server.owner_api_key, portal_studies=tmp_path)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1", **settings.as_environment()}
    url = argilla_hooks.hook_url(settings)
    owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
    store = open_store(settings)

    def mine() -> list[dict]:
        return [w for w in owner.webhooks() if str(w["url"]).rstrip("/") == url]

    def start_until_registered() -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, "-m", "crowdpref.portal"], env=env, cwd=tmp_path,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while not (argilla_hooks.registered_for(store, argilla_server.api_url) and [w for w in mine() if w["enabled"]]):
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()[0]
            time.sleep(0.2)
        return process

    def stop(process: subprocess.Popen) -> str:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=30)[0]
        assert process.returncode == -signal.SIGTERM, output  # uvicorn ends by re-raising it
        return output

    first = start_until_registered()
    try:
        [hook] = mine()
        output = stop(first)
        assert "Argilla webhook disabled" in output
        [after] = mine()
        assert after["id"] == hook["id"] and after["enabled"] is False  # kept, not delivering
        assert not argilla_hooks.registered_for(store, argilla_server.api_url)  # monitoring polls

        second = start_until_registered()  # the same webhook, enabled again
        stop(second)
        assert [(w["id"], w["enabled"]) for w in mine()] == [(hook["id"], False)]
    finally:
        for process in [p for p in (first, locals().get("second")) if p is not None and p.poll() is None]:
            process.kill()
        for w in mine():
            owner.delete_webhook(str(w["id"]))
        owner.close()
        store.close()
