"""The work frame (``/s/<study>/<key>/work``): *Start* leads to the portal's bar (progress and a
Finish button, always on screen) over Argilla in a frame. On the origin the portal and Argilla
share (Caddy's, on the laptop stack as in the public profile) the frame opens the participant's
first item with the session *Start* minted; addresses on two origins are refused. The bar's progress comes from the store when Argilla's webhooks keep it current, and
from Argilla at most once per ``PROGRESS_READ_S`` per participant when they do not."""

from __future__ import annotations

import logging

import pytest
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


def test_on_the_laptop_stack_the_frame_opens_the_first_item_on_the_shared_origin(rig, caplog):  # noqa: F811
    """The laptop stack's defaults: the portal and Argilla on Caddy's one plain-HTTP origin, so
    *Start* hands the browser the minted session and the frame opens the first item itself."""
    caplog.set_level(logging.DEBUG)
    settings = rig.settings
    assert settings.portal_public_url == settings.argilla_participant_url == f"http://127.0.0.1:{settings.site_port}"
    portal, client = _client(rig, settings, "laptop")
    start = client.post("/s/laptop/study1/start", follow_redirects=False)
    assert start.status_code == 200 and start.headers["cache-control"] == "no-store"
    token, then = pages.read_argilla_session(start.text)
    assert then == "/s/laptop/study1/work"
    work = client.get(then)
    assert work.status_code == 200
    assert work.headers["cache-control"] == "no-store" and work.headers["referrer-policy"] == "no-referrer"
    collection, participant = _participant(rig, portal, "laptop")
    assert argilla_session.username_of(token) == participant.username
    first_item = f"{settings.site_url}/dataset/{participant.dataset_id}/annotation-mode"
    assert pages.frame_target(work.text) == first_item  # no sign-in page, no session in the address
    password = collection.owner.passwords(participant.username)
    assert password not in work.text and "auth=" not in work.text
    assert token not in caplog.text and password not in caplog.text
    # the bar: how far they are, and the way to the finish page, on screen from the first item on
    assert "0 of 3 items submitted" in work.text
    assert ('<a class="button" id="finish" href="/s/laptop/study1/done" target="_top">Check my progress</a>'
            in work.text)  # before the end, the button says what it does then
    assert '"/s/laptop/study1/progress"' in work.text  # what its script asks


def test_a_portal_on_another_origin_than_argilla_does_not_start(rig):  # noqa: F811
    """An Argilla address for participants off the portal's origin (an Argilla crowdpref did
    not start, say): one line naming both settings and the fix, before anything opens."""
    from crowdpref.errors import ConfigError
    from crowdpref.portal.app import build_app

    apart = rig.settings.model_copy(update={"argilla_public_url": "http://argilla.test:6900"})
    with pytest.raises(ConfigError) as refused:
        build_app(apart)
    message = str(refused.value)
    assert "\n" not in message and "CROWDPREF_ARGILLA_PUBLIC_URL" in message and "CROWDPREF_PORTAL_URL" in message
    assert "http://argilla.test:6900" in message and "proxy route" in message
    argilla_session.check_one_origin(rig.settings)  # the stack's own origin: nothing to say
    behind = rig.settings.model_copy(update={"portal_url": "https://study.example.org/"})  # a proxy of one's own
    assert behind.argilla_participant_url == "https://study.example.org"  # Argilla on the portal's origin
    argilla_session.check_one_origin(behind)


def test_validate_says_in_one_line_when_participants_could_not_be_signed_in(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from crowdpref.cli import app

    study = tmp_path / "pilot.yaml"
    study.write_text("name: pilot\nparticipants: invite\n")
    monkeypatch.setenv("CROWDPREF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CROWDPREF_PORTAL_URL", raising=False)
    monkeypatch.setenv("CROWDPREF_ARGILLA_PUBLIC_URL", "https://argilla.example.org")
    refused = CliRunner().invoke(app, ["validate", str(study)], env={"COLUMNS": "250"})
    assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1, refused.output
    assert "must share an origin with the portal" in refused.output
    monkeypatch.delenv("CROWDPREF_ARGILLA_PUBLIC_URL")
    assert CliRunner().invoke(app, ["validate", str(study)], env={"COLUMNS": "250"}).exit_code == 0


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
    """What the simulated crowd and benchmarks/portal.py take from the Start
    page: the token its script stores and the work frame it goes to."""
    token, expires = argilla_session.mint_token("k" * 32, "portal-bench-s1-0007")
    page = pages.argilla_session(token, expires, "/s/x/study1/work", argilla_session.TOKEN_KEY,
                                 argilla_session.EXPIRATION_KEY)
    assert pages.read_argilla_session(page) == (token, "/s/x/study1/work")
    assert argilla_session.username_of(token) == "portal-bench-s1-0007"
    assert pages.read_argilla_session(pages.message("Full", "no")) is None
    work = pages.work_frame("T", "https://a/dataset/d&x/annotation-mode", 0, 2, False, "/d", "/p", invited=False)
    assert pages.frame_target(work) == "https://a/dataset/d&x/annotation-mode"


def test_the_bar_of_someone_whose_place_was_given_back_stops_asking(rig):  # noqa: F811
    portal, client = _client(rig, rig.settings, "gone")
    client.post("/s/gone/study1/start", follow_redirects=False)
    collection, participant = _participant(rig, portal, "gone")
    collection.release(participant, reason="RETURNED on Prolific")
    assert client.get("/s/gone/study1/progress").json()["given_back"] is True
    assert "p.given_back" in pages.work_frame("T", "https://a/x", 0, 3, False, "/d", "/p", invited=False)
