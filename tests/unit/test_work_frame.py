"""The work frame (``/s/<study>/<key>/work``): *Start* leads to the portal's bar (progress and a
Finish button, always on screen) over Argilla in a frame. On one origin (the public profile) the
frame opens the participant's first item with the session *Start* minted; on the laptop stack's
two origins it opens the password sign-in, which never reaches an address bar, a Location header
or a log. The bar's progress comes from the store when Argilla's webhooks keep it current, and
from Argilla at most once per ``PROGRESS_READ_S`` per participant when they do not."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from urllib.parse import parse_qs

from fastapi.testclient import TestClient

from crowdpref.collection import Collection
from crowdpref.portal import argilla_hooks, argilla_session, pages
from crowdpref.portal.app import create_app
from crowdpref.portal.service import PROGRESS_READ_S, Portal
from tests.unit.test_portal_entry import _write, rig  # noqa: F401 - the fixture

FRONT = "http://study.test"


def _client(rig, settings, name: str, clock=None):  # noqa: F811
    kwargs = {"clock": clock} if clock else {}
    settings.secrets_dir.mkdir(parents=True, exist_ok=True)  # Argilla's token key, as `crowdpref up` leaves it
    (settings.secrets_dir / argilla_session.SECRET_FILE).write_text("s" * 64)
    portal = Portal(settings, rig.store, open_collection=rig.portal._open_collection, **kwargs)
    _write(rig.studies, name, participants="invite")
    client = TestClient(create_app(portal), base_url=settings.portal_public_url)
    link = portal.invite_link(name, "study1", "inv-1").split(settings.portal_public_url, 1)[1]
    assert client.post(link, follow_redirects=False).status_code == 303
    return portal, client


def _participant(rig, portal, name):  # noqa: F811
    collection = portal.collection(name, "study1")
    [participant] = rig.store.participants(collection.info.id)
    return collection, participant


def test_with_an_argilla_crowdpref_did_not_start_the_frame_signs_in_with_the_password(rig, caplog):  # noqa: F811
    caplog.set_level(logging.DEBUG)
    settings = rig.settings.model_copy(update={"argilla_handover": False})  # no hand-over page there
    portal, client = _client(rig, settings, "apart")
    start = client.post("/s/apart/study1/start", follow_redirects=False)
    assert start.status_code == 303
    assert start.headers["location"] == "/s/apart/study1/work"  # no password in it
    work = client.get("/s/apart/study1/work")
    assert work.status_code == 200
    assert work.headers["cache-control"] == "no-store" and work.headers["referrer-policy"] == "no-referrer"
    collection, participant = _participant(rig, portal, "apart")
    src = pages.frame_target(work.text)
    assert src.startswith(f"{settings.argilla_participant_url}/sign-in?auth=")
    password = collection.owner.passwords(participant.username)
    assert password not in caplog.text and "auth=" not in caplog.text
    # the bar: how far they are, and the way to the finish page, on screen from the first item on
    assert "0 of 3 items submitted" in work.text
    assert ('<a class="button" id="finish" href="/s/apart/study1/done" target="_top">Check my progress</a>'
            in work.text)  # before the end, the button says what it does then
    assert '"/s/apart/study1/progress"' in work.text  # what its script asks


def test_on_two_origins_the_frame_hands_argilla_a_minted_session_in_the_fragment(rig, caplog):  # noqa: F811
    caplog.set_level(logging.DEBUG)
    assert rig.settings.embedded_argilla and rig.settings.argilla_serves_handover  # our launcher's Argilla
    portal, client = _client(rig, rig.settings, "handed")
    start = client.post("/s/handed/study1/start", follow_redirects=False)
    assert start.status_code == 303 and start.headers["location"] == "/s/handed/study1/work"
    work = client.get("/s/handed/study1/work")
    collection, participant = _participant(rig, portal, "handed")
    src = pages.frame_target(work.text)
    base = f"{rig.settings.argilla_participant_url}{argilla_session.HANDOVER_PATH}#"
    assert src.startswith(base)  # the session in the fragment: no server, proxy or log receives it
    token = argilla_session.handover_token(src)
    assert argilla_session.username_of(token) == participant.username
    fragment = parse_qs(src.split("#", 1)[1])
    assert fragment["to"] == [f"/dataset/{participant.dataset_id}/annotation-mode"]  # their first item
    assert int(fragment["e"][0]) > time.time() * 1000
    assert "auth=" not in work.text and collection.owner.passwords(participant.username) not in work.text
    assert token not in caplog.text


def test_the_hand_over_page_argilla_serves_is_the_one_the_portal_links(tmp_path):
    """services/argilla/launch.py runs in Argilla's venv: its path and storage keys, read from the
    file, are the portal's."""
    launcher = (Path(__file__).resolve().parents[2] / "services" / "argilla" / "launch.py").read_text()
    assert f'HANDOVER_PATH = "{argilla_session.HANDOVER_PATH}"' in launcher
    assert (f'TOKEN_KEY, EXPIRATION_KEY = "{argilla_session.TOKEN_KEY}", "{argilla_session.EXPIRATION_KEY}"'
            in launcher)


def test_on_one_origin_the_frame_opens_the_first_item_with_the_minted_session(rig):  # noqa: F811
    settings = rig.settings.model_copy(update={"portal_url": FRONT, "argilla_public_url": FRONT})
    portal, client = _client(rig, settings, "same")
    start = client.post("/s/same/study1/start", follow_redirects=False)
    assert start.status_code == 200
    assert 'location.replace("/s/same/study1/work")' in start.text  # the session, then the frame
    work = client.get("/s/same/study1/work")
    collection, participant = _participant(rig, portal, "same")
    assert pages.frame_target(work.text) == f"{FRONT}/dataset/{participant.dataset_id}/annotation-mode"
    assert "auth=" not in work.text and collection.owner.passwords(participant.username) not in work.text


def test_the_bar_turns_to_finish_once_every_item_is_submitted(rig):  # noqa: F811
    portal, client = _client(rig, rig.settings, "bar")
    client.post("/s/bar/study1/start", follow_redirects=False)
    collection, participant = _participant(rig, portal, "bar")
    assert client.get("/s/bar/study1/progress").json() == {"submitted": 0, "total": 3, "done": False,
                                                           "given_back": False}
    first, *rest = participant.held
    rig.store.record_progress(collection.info.id, participant.id, {first: 1.0}, None)
    assert client.get("/s/bar/study1/work").text.count("1 of 3 items submitted") == 1
    rig.store.record_progress(collection.info.id, participant.id, {item: 1.0 for item in rest}, None)
    progress = client.get("/s/bar/study1/progress")
    assert progress.json() == {"submitted": 3, "total": 3, "done": True, "given_back": False}
    assert progress.headers["cache-control"] == "no-store"
    # the frame of someone who completed is their finish page
    done = client.get("/s/bar/study1/work", follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/s/bar/study1/done"
    # without another cookie, nobody's progress
    assert TestClient(client.app, base_url=rig.settings.portal_public_url).get(
        "/s/bar/study1/progress").status_code in (400, 401, 403, 410)


def test_the_bar_words_a_finished_participant_by_how_they_came():
    invited = pages.work_frame("T", "https://a/x", 3, 3, True, "/d", "/p", invited=True)
    prolific = pages.work_frame("T", "https://a/x", 3, 3, True, "/d", "/p", invited=False)
    assert 'class="bar done"' in invited and "All 3 items submitted" in invited
    assert ">Finish: tell us I am done</a>" in invited and ">Finish: get my code</a>" in prolific
    working = pages.work_frame("T", "https://a/x", 1, 3, False, "/d", "/p", invited=False)
    assert ">Check my progress</a>" in working and "get my code" not in working.split("<script>")[0]
    assert "setTimeout(poll" in working and "addEventListener('click',nudge" in working  # a click: asked soon


def test_without_argillas_webhooks_the_bar_reads_argilla_once_per_interval(rig, monkeypatch):  # noqa: F811
    now = [1000.0]
    monkeypatch.setattr("crowdpref.portal.work.time.monotonic", lambda: now[0])
    reads: list[str] = []
    refresh = Collection.refresh
    monkeypatch.setattr(Collection, "refresh", lambda self, p: (reads.append(p.username), refresh(self, p))[1])
    portal, client = _client(rig, rig.settings, "poll")
    client.post("/s/poll/study1/start", follow_redirects=False)
    for _ in range(3):
        assert client.get("/s/poll/study1/progress").status_code == 200
    assert len(reads) == 1
    now[0] += PROGRESS_READ_S
    client.get("/s/poll/study1/progress")
    assert len(reads) == 2
    # once Argilla's webhooks reach this portal, the store alone answers
    collection, _ = _participant(rig, portal, "poll")
    rig.store.set_meta(argilla_hooks.SECRET_META, "whsec")
    rig.store.set_meta(argilla_hooks.SERVER_META, collection.owner.api_url)
    now[0] += 10 * PROGRESS_READ_S
    client.get("/s/poll/study1/progress")
    assert len(reads) == 2


def test_a_browser_reads_the_session_and_the_next_address_from_the_start_page():
    """What the simulated crowd and benchmarks/portal.py take from the public profile's Start
    page: the token its script stores and the work frame it goes to."""
    token, expires = argilla_session.mint_token("k" * 32, "portal-bench-s1-0007")
    page = pages.argilla_session(token, expires, "/s/x/study1/work", argilla_session.TOKEN_KEY,
                                 argilla_session.EXPIRATION_KEY)
    assert pages.session_handover(page) == (token, "/s/x/study1/work")
    assert argilla_session.username_of(token) == "portal-bench-s1-0007"
    assert pages.session_handover(pages.message("Full", "no")) is None
    work = pages.work_frame("T", "https://a/sign-in?auth=x&y=1", 0, 2, False, "/d", "/p", invited=False)
    assert pages.frame_target(work) == "https://a/sign-in?auth=x&y=1"


def test_the_bar_of_someone_whose_place_was_given_back_stops_asking(rig):  # noqa: F811
    portal, client = _client(rig, rig.settings, "gone")
    client.post("/s/gone/study1/start", follow_redirects=False)
    collection, participant = _participant(rig, portal, "gone")
    collection.release(participant, reason="RETURNED on Prolific")
    assert client.get("/s/gone/study1/progress").json()["given_back"] is True
    assert "p.given_back" in pages.work_frame("T", "https://a/x", 0, 3, False, "/d", "/p", invited=False)
