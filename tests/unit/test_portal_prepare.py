"""Admission first (issue 34 item 2), on the unit rig (a real store, Argilla's owner side stood in
for): an entry answers at once while Argilla hangs, *Start* answers with the page that waits
(a meta refresh) instead of hanging, the work frame sends an unprepared participant there, a
failing Argilla gets a page that retries by itself (a 200: no 5xx for a busy Argilla) and is tried
again only after each back-off, and the
participant gets in once Argilla answers. Also the page details of issue 34 item 4 that need no
browser: the quiz's "not right" list rendered, an invitee's time estimate."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from crowdpref.argilla_client import ArgillaError
from crowdpref.portal import app as portal_app
from crowdpref.portal import argilla_session, pages
from crowdpref.portal.app import create_app
from crowdpref.portal.service import Portal
from tests.unit.test_portal_entry import _write, rig  # noqa: F401 - the fixture

pytestmark = pytest.mark.usefixtures("rig")


def _invited(rig: Any, name: str, **extra: Any) -> tuple[TestClient, str]:  # noqa: F811
    _write(rig.studies, name, participants="invite", **extra)
    rig.settings.secrets_dir.mkdir(parents=True, exist_ok=True)  # Argilla's token key, as `crowdpref up` leaves it
    (rig.settings.secrets_dir / argilla_session.SECRET_FILE).write_text("s" * 64)
    client = TestClient(create_app(rig.portal), base_url="http://portal.test")
    return client, rig.portal.invite_link(name, "study1", "inv-1").split(rig.settings.portal_public_url, 1)[1]


def test_an_entry_is_admitted_at_once_while_argilla_hangs_and_start_shows_the_waiting_page(
        rig, monkeypatch):  # noqa: F811
    monkeypatch.setattr(portal_app, "START_WAIT_S", 0.3)
    argilla_answers = threading.Event()
    logged = rig.owner.log_records

    def hanging(dataset: Any, records: list[Any]) -> None:  # a stalled Argilla: the bulk write waits
        assert argilla_answers.wait(30)
        logged(dataset, records)

    monkeypatch.setattr(rig.owner, "log_records", hanging)
    client, link = _invited(rig, "hang")
    try:
        began = time.monotonic()
        entry = client.post(link, follow_redirects=False)
        assert entry.status_code == 303 and entry.headers["location"] == "/s/hang/study1/welcome"
        assert time.monotonic() - began < 10.0  # not the 30 s the hanging write holds (room for a loaded CI)
        collection = rig.portal.collection("hang", "study1")
        [claimed] = rig.store.participants(collection.info.id)  # the claim is in the store already
        assert not claimed.records_logged and rig.owner.logged == 0
        assert client.get("/s/hang/study1/welcome").status_code == 200
        start = client.post("/s/hang/study1/start", follow_redirects=False)
        assert start.status_code == 200 and "Your work is being prepared" in start.text
        assert '<meta http-equiv="refresh" content="2;url=/s/hang/study1/start">' in start.text
        assert client.get("/s/hang/study1/work", follow_redirects=False).headers["location"] == "/s/hang/study1/start"
    finally:
        argilla_answers.set()
    assert rig.portal.preparer.wait_idle(10)
    again = client.get("/s/hang/study1/start", follow_redirects=False)  # the waiting page's reload
    assert again.status_code == 200 and pages.read_argilla_session(again.text)[1] == "/s/hang/study1/work"
    assert rig.owner.logged == 3 and len(rig.store.participants(collection.info.id)) == 1


def test_a_failing_argilla_gets_a_page_that_retries_and_is_tried_again_after_the_back_off(
        rig, monkeypatch):  # noqa: F811
    monkeypatch.setattr(portal_app, "START_WAIT_S", 2.0)
    failures = [ArgillaError("Argilla answered 503", transient=True)] * 2
    logged = rig.owner.log_records

    def failing(dataset: Any, records: list[Any]) -> None:
        if failures:
            raise failures.pop()
        logged(dataset, records)

    monkeypatch.setattr(rig.owner, "log_records", failing)
    now = [1000.0]
    rig.portal.preparer.clock = lambda: now[0]
    client, link = _invited(rig, "fails")
    assert client.post(link, follow_redirects=False).status_code == 303  # admitted: the claim is made
    assert rig.portal.preparer.wait_idle(10)
    start = client.post("/s/fails/study1/start", follow_redirects=False)  # inside the back-off: not tried
    assert start.status_code == 200  # no 5xx for a busy Argilla: their place is kept
    assert "busy" in start.text and "Your place and your work are kept" in start.text
    assert '<meta http-equiv="refresh" content="10;url=/s/fails/study1/start">' in start.text
    assert len(failures) == 1  # one try so far
    now[0] += 5  # past the first back-off (2 s): tried again, fails again
    assert "busy" in client.get("/s/fails/study1/start", follow_redirects=False).text
    assert not failures
    now[0] += 2  # within the second back-off (4 s): not tried
    assert "busy" in client.get("/s/fails/study1/start", follow_redirects=False).text
    assert rig.owner.logged == 0
    now[0] += 5  # Argilla answers now: the next reload gets them in
    ok = client.get("/s/fails/study1/start", follow_redirects=False)
    assert ok.status_code == 200 and pages.read_argilla_session(ok.text)[1] == "/s/fails/study1/work"
    assert rig.owner.logged == 3


def test_in_a_burst_the_entry_does_not_wait_for_a_workspace_at_all(rig, monkeypatch):  # noqa: F811
    """With preparations queued behind the workers (more arrivals than writers to Argilla), an
    entry answers at once instead of waiting ENTRY_WAIT_S for a preparation that cannot be done by then."""
    monkeypatch.setattr(portal_app, "ENTRY_WAIT_S", 0.2)
    waited: list[float] = []  # the entries that waited for their workspace (not timed: a loaded CI varies)
    real_wait = portal_app.wait_ready

    async def wait_ready(preparation: Any, timeout_s: float) -> bool:
        waited.append(timeout_s)
        return await real_wait(preparation, timeout_s)

    monkeypatch.setattr(portal_app, "wait_ready", wait_ready)
    argilla_answers = threading.Event()
    logged = rig.owner.log_records
    monkeypatch.setattr(rig.owner, "log_records", lambda d, r: (argilla_answers.wait(30), logged(d, r)))
    portal = Portal(rig.settings, rig.store, open_collection=rig.portal._open_collection, prepare_workers=1)
    _write(rig.studies, "burst", participants="invite")
    client = TestClient(create_app(portal), base_url="http://portal.test")
    links = [portal.invite_link("burst", "study1", f"inv-{n}").split(rig.settings.portal_public_url, 1)[1]
             for n in range(2)]
    try:
        for link in links:
            assert client.post(link, follow_redirects=False).status_code == 303
        # one preparation in flight, none queued: the first entry waited for it; the second, queued
        # behind it, did not wait at all
        assert waited == [0.2]
    finally:
        argilla_answers.set()
    assert portal.preparer.wait_idle(10) and rig.owner.logged == 6


def test_the_finish_page_waits_on_a_stalled_argilla_at_most_finish_wait_s(rig, monkeypatch):  # noqa: F811
    monkeypatch.setattr(portal_app, "FINISH_WAIT_S", 0.5)
    client, link = _invited(rig, "fin")
    assert client.post(link, follow_redirects=False).status_code == 303
    collection = rig.portal.collection("fin", "study1")
    argilla_answers = threading.Event()
    monkeypatch.setattr(collection, "refresh", lambda p: (argilla_answers.wait(30), p)[1])  # a stalled read
    try:
        began = time.monotonic()
        busy = client.get("/s/fin/study1/done")
        assert time.monotonic() - began < 10.0  # not the 30 s the stalled read holds
        assert busy.status_code == 503 and busy.headers["Retry-After"] == busy.headers["Refresh"] == "10"
        assert "tries again by itself" in busy.text
    finally:
        argilla_answers.set()


def test_the_quiz_failed_list_renders_the_prompts_markdown():
    page = pages.quiz_failed("T", 1, 3, 2, ["*My friend* says **no**"], 1, "/r")
    assert "<em>My friend</em> says <strong>no</strong>" in page and "*My friend*" not in page


def test_an_invitee_sees_the_time_estimate(rig):  # noqa: F811
    client, link = _invited(rig, "est", prolific={"study1": {"estimated_completion_minutes": 17}})
    assert client.post(link, follow_redirects=False).status_code == 303
    welcome = client.get("/s/est/study1/welcome")
    assert "about <strong>17 minutes</strong>" in welcome.text
