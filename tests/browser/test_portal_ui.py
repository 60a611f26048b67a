"""A real browser (headless Chromium) goes the way a Prolific participant does, once for study 1
and once, separately, for study 2, against the real embedded Argilla, a real study store, the
portal served over real HTTP and the fake Prolific (the study created and published on it
through our Prolific client, exactly as ``crowdpref recruit`` does):

1. the Prolific-style link the fake hands out (``POST /_fake/studies/<id>/arrive``) -> the
   portal checks the submission with (fake) Prolific -> its welcome page, the ids gone from the
   address bar;
2. *Start* -> a page that stores the Argilla session the portal minted -> the work frame: the
   portal's bar (progress, Finish) over Argilla in a frame, which opens their first item
   directly, signed in: no password, no ``/sign-in``, no login. The browser reaches both through
   real Caddy on the laptop stack's one plain-HTTP origin (services/caddy.py, as ``crowdpref up``
   serves them);
3. every item answered and submitted through Argilla's UI (study 1: a typed answer + a 1-5
   rating; study 2: a point on the 8-point scale, the answers shown as A and B in the order the
   store recorded for this rater); after the first one they come back through the same link
   (the same work), the finish page says "Not finished yet" and its *Back to my items* button
   signs them in again;
4. the bar turns to done with Finish on screen; the finish link in the guidelines inside Argilla
   opens a tab of its own (never the finish page inside the frame); the bar's Finish -> the
   portal's finish page with the
   completion code -> *Back to Prolific* -> the fake's ``/submissions/complete?cc=<code>``; the
   finish page, opened again, also forwards there by itself (its 5-second refresh).

Then a second participant (plain HTTP through the same portal, answers over Argilla's API)
completes the collection, and the store, the Argilla read-back and the real export
(responses.parquet / ratings.parquet) hold exactly what the browser typed and picked.

Screenshots: test-output/portal-study1-*.png and portal-study2-*.png (welcome, argilla,
item-1, not-finished, item-2, answered, guidelines, done, prolific); on failure
portal-<study>-failure.png/.html."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pandas as pd
import pytest
import yaml

from crowdpref.argilla_client import AnnotatorSession, ArgillaOwner
from crowdpref.collection import Collection
from crowdpref.config import load_study
from crowdpref.pairing import make_pairs
from crowdpref.portal import argilla_session, pages
from crowdpref.portal.app import create_app
from crowdpref.portal.links import finish_url, prolific_entry_url
from crowdpref.portal.service import Portal
from crowdpref.prolific import ProlificClient
from crowdpref.pseudonyms import Pseudonyms
from crowdpref.recruitment import ensure_prolific_study
from crowdpref.simulation.prolific_server import FakeProlific
from crowdpref.store import ACTIVE, COMPLETE, Store
from crowdpref.study1 import export_responses, study1_collection
from crowdpref.study2 import export_ratings, study2_collection
from services import caddy
from services.process import ProcessManager
from tests.browser.conftest import BROWSER_MARKS, TIMEOUT_MS
from tests.browser.test_argilla_ui import _dump
from tests.conftest import free_port, isolated_settings
from tests.integration.test_study1_collection import _questions
from tests.integration.test_study2_collection import _study1_export
from tests.portal_server import PortalThread

pytestmark = BROWSER_MARKS

TEXT = "I would talk to them calmly, because shouting only makes it worse."
QUALITY = 4
PREFERENCE = 7  # on the 8-point scale (1 = strongly A ... 8 = strongly B)
OTHER = {"study1": {"response": "I would ask what they need first, because it shows respect.", "quality": 2},
         "study2": {"preference": 3}}
ITEMS = 2  # every participant gets 2 items; 2 participants complete each collection


def _setup(tmp_path: Path, argilla_server, fake: FakeProlific, name: str, key: str):
    """Settings, store and the real collection of a small ``participants: simulated`` study:
    study 1 = 2 questions x R=2, Q=2; study 2 = 2 pairs x 2 ratings, 2 pairs each."""
    studies = tmp_path / "studies"
    studies.mkdir(parents=True, exist_ok=True)
    (studies / f"{name}.yaml").write_text(yaml.safe_dump({
        "name": name, "seed": 9, "participants": "simulated",
        "study1": {"responses_per_question": 2, "questions_per_participant": ITEMS, "pool_size": 1},
        "study2": {"ratings_per_pair": 2, "pairs_per_participant": ITEMS, "pool_size": 1},
        "crowd": {"arrive_via": "prolific"},
    }))
    config = load_study(studies / f"{name}.yaml")
    # the portal's state folder holds the session Argilla's token key, as after `crowdpref up`
    settings = isolated_settings(tmp_path / "home", argilla_url=argilla_server.api_url,
                                 argilla_api_key=argilla_server.owner_api_key, portal_studies=studies,
                                 portal_port=free_port(), fake_prolific_port=fake.port)
    settings.secrets_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(argilla_server.settings.secrets_dir / argilla_session.SECRET_FILE,
                 settings.secrets_dir / argilla_session.SECRET_FILE)
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
    if key == "study1":
        collection = study1_collection(config, _questions().head(2), owner, tmp_path / "run", store,
                                       finish_url(settings, name, key))
    else:
        questions, responses, _ = _study1_export(n_questions=2, per_question=2)  # one pair per question
        pairs = make_pairs(responses, config.study2.pairs, config.seed).pairs
        assert len(pairs) == 2
        collection = study2_collection(config, pairs, responses, questions, owner, tmp_path / "run", store,
                                       finish_url(settings, name, key))
    return config, settings, store, collection


@contextmanager
def one_origin(settings) -> Iterator[str]:
    """Real Caddy on the laptop stack's one plain-HTTP origin (``settings.site_url``), in front of
    the portal on ``portal_port`` and Argilla, as ``crowdpref up`` starts it; stopped after."""
    manager = ProcessManager(settings.state_dir)
    caddy.start(settings, manager)
    try:
        yield settings.site_url
    finally:
        manager.stop(caddy.NAME)


def _first_item(site: str, participant):
    """Whether a frame's address is the participant's first item on the one origin (Argilla's
    frontend may add its own query, say the page, once it has loaded)."""
    item = f"{site}/dataset/{participant.dataset_id}/annotation-mode"
    return lambda url: url.split("?", 1)[0] == item


def _arrive(fake: FakeProlific, study_id: str) -> dict:
    """A participant takes a place on (fake) Prolific: the link Prolific sends them to."""
    reply = httpx.post(f"{fake.app_url}/_fake/studies/{study_id}/arrive", json={}, timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.json()


def _second_participant(fake: FakeProlific, study_id: str, argilla_url: str, collection: Collection, key: str,
                        code: str) -> str:
    """Another participant completes their work without a browser (the portal over HTTP,
    answers over Argilla's API): the collection is then complete and can be exported."""
    arrival = _arrive(fake, study_id)
    with httpx.Client(timeout=60) as http:
        entry = http.get(arrival["url"])
        assert entry.status_code == 303, entry.text
        base = arrival["url"].split("?", 1)[0]
        start = http.post(f"{base}/start")
        assert start.status_code == 200, start.text
        token, then = pages.read_argilla_session(start.text)  # what the page stores for Argilla
        work = http.get(httpx.URL(base).join(then))  # the work frame
        assert work.status_code == 200 and pages.frame_target(work.text), work.text
        username = argilla_session.username_of(token)
        session = AnnotatorSession(argilla_url, username, None, token=token)
        try:
            dataset = next(d for d in session.datasets() if d["name"] == collection.dataset_name)
            pending = session.pending_records(dataset["id"])
            assert len(pending) == ITEMS
            assert session.submit([(r["id"], OTHER[key]) for r in pending]) == ITEMS
        finally:
            session.close()
        done = http.get(f"{base}/done")
        assert done.status_code == 200 and code in done.text, done.text
    return username


def _field(page, title: str):
    """The text of the record field titled ``title`` on Argilla's annotation page."""
    title_area = page.locator(".text_field_component__title-content", has_text=re.compile(rf"^\s*{title}\s*$"))
    return page.locator(".text_field_component").filter(has=title_area).locator(".content-area")


def _shown_item(page, collection: Collection, participant) -> str:
    """The item Argilla shows now, found by its question among the participant's items; in
    study 2 its answers must appear as A and B in the order the store recorded for this rater."""
    from playwright.sync_api import expect

    spec = collection.spec
    if spec.key == "study1":
        questions = {spec._by_id.loc[item, "question"]: item for item in participant.items}
    else:
        questions = {spec._question[spec._pairs.loc[item, "question_id"]]: item for item in participant.items}
    question = _field(page, "Question")
    expect(question).to_have_text(re.compile("|".join(re.escape(q) for q in questions)))
    item = questions[question.inner_text().strip()]
    if spec.key == "study2":
        shown_a, shown_b = spec.display(item, participant.swapped[item])
        expect(_field(page, "Answer A")).to_have_text(spec._text[shown_a])
        expect(_field(page, "Answer B")).to_have_text(spec._text[shown_b])
    return item


def _answer_study1(work, collection: Collection, participant, count: int) -> list[str]:
    """Answer and submit ``count`` study-1 items in Argilla's UI (``work``: a page or the work
    frame), each checked as submitted; returns the items shown, in order."""
    from playwright.sync_api import expect

    submit = work.get_by_role("button", name=re.compile(r"\bSubmit\b"))
    submitted = work.locator(".status-counter", has_text="submitted").locator(".status-counter__counter")
    shown = []
    for n in range(1, count + 1):
        shown.append(_shown_item(work, collection, participant))
        box = work.locator("[aria-label='Question: response'] [contenteditable='true']")
        box.click()
        box.press_sequentially(TEXT, delay=5)
        work.locator("[aria-label='Question: quality']").get_by_text(str(QUALITY), exact=True).click()
        expect(submit).to_be_enabled()
        submit.click()
        expect(submitted).to_have_text(str(n))
    return shown


def _wait_for_url(page, url: str, timeout_ms: int = TIMEOUT_MS) -> None:
    page.wait_for_url(lambda current: current == url, timeout=timeout_ms)


@pytest.mark.parametrize("key", ["study1", "study2"])
def test_from_a_prolific_link_through_argilla_to_the_completion_url(key, argilla_server, browser_page, output_dir,
                                                                     tmp_path, unique):
    from playwright.sync_api import expect

    name = f"b{unique}"
    page = browser_page
    requested: list[str] = []  # every request of the page and its frame: no password sign-in among them
    page.on("request", lambda request: requested.append(request.url))
    failed: dict[str, str | None] = {}  # the Google Fonts Argilla's CSS imports: refused by Caddy's CSP
    page.on("requestfailed", lambda request: failed.setdefault(request.url, request.failure))

    def shot(what: str) -> None:
        page.screenshot(path=str(output_dir / f"portal-{key}-{what}.png"), full_page=True)

    with FakeProlific() as fake:
        config, settings, store, collection = _setup(tmp_path, argilla_server, fake, name, key)
        portal = Portal(settings, store, open_collection=lambda path, k: collection)
        with PortalThread(create_app(portal), port=settings.portal_port), one_origin(settings) as site, \
                ProlificClient(fake.base_url, fake.token) as client:
            # the Prolific study, created and published on the fake through our client, recorded
            platform = ensure_prolific_study(collection, config, settings, client)
            code = store.completion_code(collection.info.id)
            on_fake = fake.studies[platform.external_id]
            assert on_fake["status"] == "ACTIVE"
            assert on_fake["external_study_url"] == prolific_entry_url(settings, name, key)
            assert [c["code"] for c in on_fake["completion_codes"]] == [code]
            assert store.platform_study(collection.info.id).external_id == platform.external_id
            arrival = _arrive(fake, platform.external_id)
            assert arrival["url"].startswith(f"{site}/s/{name}/{key}?PROLIFIC_PID={arrival['participant_id']}")
            done_url = finish_url(settings, name, key)
            prolific_done = f"{fake.app_url}/submissions/complete?cc={code}"  # where (fake) Prolific takes codes
            try:
                # Prolific's link -> the portal's welcome page (the ids leave the address bar)
                page.goto(arrival["url"])
                _wait_for_url(page, f"{site}/s/{name}/{key}/welcome")
                expect(page.get_by_role("heading", name="What to expect")).to_be_visible()
                expect(page.get_by_text(f"You will get {ITEMS} items")).to_be_visible()
                shot("welcome")

                # Start -> the page that stores the minted session -> the work frame (the portal's bar
                # over Argilla), whose frame opens their first item on the same origin
                page.get_by_role("button", name="Start").click()
                _wait_for_url(page, f"{site}/s/{name}/{key}/work")
                [participant] = collection.participants()
                assert participant.status == ACTIVE and len(participant.assignments) == ITEMS
                work = page.frame(name="argilla")
                work.wait_for_url(_first_item(site, participant))
                expect(page.locator("#progress")).to_have_text(f"0 of {ITEMS} items submitted")
                shot("argilla")

                # every item answered and submitted through the UI, inside the frame
                submit = work.get_by_role("button", name=re.compile(r"\bSubmit\b"))
                submitted = work.locator(".status-counter", has_text="submitted").locator(".status-counter__counter")
                shown: list[str] = []
                for n in range(1, ITEMS + 1):
                    shown.append(_shown_item(work, collection, participant))
                    expect(submit).to_be_disabled()  # the required answers are still missing
                    if key == "study1":
                        box = work.locator("[aria-label='Question: response'] [contenteditable='true']")
                        box.click()
                        box.press_sequentially(TEXT, delay=5)
                        expect(box).to_have_text(TEXT)
                        rating = work.locator("[aria-label='Question: quality']")
                        rating.get_by_text(str(QUALITY), exact=True).click()
                        expect(rating.get_by_role("checkbox", name=str(QUALITY))).to_be_checked()
                    else:
                        scale = work.locator("[aria-label='Question: preference']")
                        expect(scale.get_by_role("checkbox")).to_have_count(8)
                        scale.get_by_text(str(PREFERENCE), exact=True).click()
                        expect(scale.get_by_role("checkbox", name=str(PREFERENCE))).to_be_checked()
                    shot(f"item-{n}")
                    expect(submit).to_be_enabled()
                    submit.click()
                    expect(submitted).to_have_text(str(n))
                    if n == 1:
                        # half-way they come back through the same Prolific link: the same work
                        page.goto(arrival["url"])
                        _wait_for_url(page, f"{site}/s/{name}/{key}/welcome")
                        expect(page.get_by_text(f"You will get {ITEMS} items")).to_be_visible()
                        assert [p.username for p in collection.participants()] == [participant.username]
                        # the finish page says what is left, links their items and signs them in again
                        page.goto(done_url)
                        expect(page.get_by_role("heading", name="Not finished yet")).to_be_visible()
                        expect(page.get_by_text(f"1 of {ITEMS}")).to_be_visible()
                        expect(page.get_by_role("link", name="Open my items in Argilla")).to_have_attribute(
                            "href", f"{site}/dataset/{participant.dataset_id}/annotation-mode")
                        shot("not-finished")
                        page.get_by_role("button", name="Back to my items").click()
                        _wait_for_url(page, f"{site}/s/{name}/{key}/work")
                        work = page.frame(name="argilla")
                        work.wait_for_url(_first_item(site, participant))
                        submit = work.get_by_role("button", name=re.compile(r"\bSubmit\b"))
                        submitted = work.locator(".status-counter", has_text="submitted").locator(
                            ".status-counter__counter")
                assert not [u for u in requested if "/sign-in" in u or "auth=" in u or "/api/v1/token" in u]
                # Argilla's CSS asks for Google Fonts: the browser refuses them itself (no address sent)
                google = {u: why for u, why in failed.items() if urlsplit(u).hostname == "fonts.googleapis.com"}
                assert google and set(google.values()) == {"csp"}, google  # Chromium: blocked by CSP
                # nothing pending any more (Argilla words it either way, depending on what it loaded first)
                expect(work.get_by_text(re.compile(r"task is completed|no pending records"))).to_be_visible()
                assert sorted(shown) == sorted(participant.items)  # each of their items, once
                # the bar says so (its next poll), and its Finish is on screen
                expect(page.locator("#bar")).to_have_class("bar done", timeout=60_000)
                expect(page.locator("#finish")).to_be_in_viewport(ratio=1.0)
                shot("answered")

                # the finish link in the guidelines (shown inside Argilla) opens a tab of its own
                guidelines = work.get_by_role("button", name="Expand Panel").filter(has_text="Guidelines")
                guidelines.filter(visible=True).click()  # the collapsed panel under the record
                finish = work.get_by_role("link", name="this page to finish").filter(visible=True)
                expect(finish).to_be_visible()
                shot("guidelines")
                expect(finish).to_have_attribute("href", done_url)
                expect(finish).to_have_attribute("target", "_blank")  # never the finish page inside the frame
                # the bar's Finish -> the code
                page.locator("#finish").click()
                _wait_for_url(page, done_url)
                expect(page.get_by_role("heading", name="Finished")).to_be_visible()
                expect(page.locator(".code")).to_have_text(code)
                back = page.get_by_role("link", name="Back to Prolific")
                expect(back).to_have_attribute("href", prolific_done)
                expect(page.locator("meta[http-equiv='refresh']")).to_have_attribute("content",
                                                                                     f"5;url={prolific_done}")
                shot("done")
                try:  # the page forwards by itself after 5 s; a very slow machine may get there first
                    back.click(timeout=3_000)
                except Exception:  # noqa: BLE001 - then the refresh took the browser there
                    pass
                _wait_for_url(page, prolific_done)
                expect(page.get_by_text(f"completion code {code} received")).to_be_visible()
                shot("prolific")

                # opened again, the finish page forwards to Prolific by itself
                began = time.monotonic()
                page.goto(done_url)
                _wait_for_url(page, prolific_done, timeout_ms=30_000)
                assert time.monotonic() - began >= 4
            except Exception:
                _dump(page, output_dir, f"portal-{key}-failure")
                raise
            # the button and the refresh each brought the right code (nothing else reached Prolific)
            assert len(fake.completion_visits) >= 2 and set(fake.completion_visits) == {code}

            # a second participant completes the rest, without a browser
            other = _second_participant(fake, platform.external_id, argilla_server.api_url, collection, key, code)

    # the store: the browser's participant is complete, every assignment submitted, session kept
    cid = collection.info.id
    participant = store.participant(cid, participant.username)
    assert participant.status == COMPLETE and not participant.held
    assert sorted(participant.submitted) == sorted(participant.items) and len(participant.items) == ITEMS
    assert participant.source == "simulated"
    assert participant.session_hash == store.key_hash(arrival["session_id"])
    assert [p.status for p in collection.participants()] == [COMPLETE, COMPLETE]
    assert collection.progress().outstanding == 0

    # Argilla's read-back: exactly what the browser typed and picked, by that participant
    answers = {}
    for p, answer in collection.collected_answers():
        answers.setdefault(p.username, []).append(answer.values)
    expected = {"response": TEXT, "quality": QUALITY} if key == "study1" else {"preference": PREFERENCE}
    assert answers == {participant.username: [expected] * ITEMS, other: [OTHER[key]] * ITEMS}

    # the export (the whole collection is complete): the browser's answers are in it
    run = tmp_path / "run"
    browser_key = Pseudonyms(run / "private").participant_key(participant.username)
    if key == "study1":
        frame, report = export_responses(collection, run)
        saved = pd.read_parquet(run / "responses.parquet")
        mine = saved[saved["participant_key"] == browser_key]
        assert sorted(mine["question_id"]) == sorted(participant.items)
        assert list(mine["text"]) == [TEXT] * ITEMS and list(mine["quality"]) == [QUALITY] * ITEMS
    else:
        frame, report = export_ratings(collection, run)
        saved = pd.read_parquet(run / "ratings.parquet")
        mine = saved[saved["rater_key"] == browser_key]
        assert sorted(mine["pair_id"]) == sorted(participant.items)
        assert list(mine["rating"]) == [PREFERENCE] * ITEMS
    assert report["valid"] and len(saved) == len(frame) == 2 * ITEMS

    # the one hop that carried the credentials left no trace in the embedded Argilla's log
    log = (argilla_server.settings.logs_dir / "argilla-server.log").read_text(errors="replace")
    assert "sign-in?auth=" not in log and participant.username not in log
    assert httpx.get(f"{argilla_server.api_url}/api/v1/status").status_code == 200
