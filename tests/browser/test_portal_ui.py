"""A real browser (headless Chromium) goes the way a Prolific participant does: from a
Prolific-style link (handed out by the fake Prolific) to the portal's welcome page, Start ->
into Argilla already logged in, answers every item through the UI (study 1: text + 1-5 rating;
study 2, separately: the 8-point scale), opens the portal's finish page, gets the completion
code and follows it back to (fake) Prolific's completion URL with the right code. The store and
the Argilla read-back hold exactly those answers.

Screenshots: test-output/portal-study1-*.png and portal-study2-*.png (welcome, argilla,
answered, done, prolific); on failure portal-<study>-failure.png/.html."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import yaml

from crowdpref.argilla_client import ArgillaOwner
from crowdpref.config import load_study
from crowdpref.pairing import make_pairs
from crowdpref.portal.app import create_app
from crowdpref.portal.links import finish_url
from crowdpref.portal.service import Portal
from crowdpref.prolific import ProlificClient
from crowdpref.recruitment import ensure_prolific_study
from crowdpref.store import COMPLETE, Store
from crowdpref.study1 import study1_collection
from crowdpref.study2 import study2_collection
from tests.browser.conftest import BROWSER_MARKS
from tests.browser.test_argilla_ui import _dump
from tests.conftest import free_port, isolated_settings
from tests.fakes.prolific_server import FakeProlific
from tests.integration.test_study1_collection import _questions
from tests.integration.test_study2_collection import _study1_export
from tests.portal_server import PortalThread

pytestmark = BROWSER_MARKS

TEXT = "I would talk to them calmly, because shouting only makes it worse."


def _setup(tmp_path: Path, argilla_server, fake: FakeProlific, name: str, key: str):
    studies = tmp_path / "studies"
    studies.mkdir(parents=True, exist_ok=True)
    (studies / f"{name}.yaml").write_text(yaml.safe_dump({
        "name": name, "seed": 9, "participants": "simulated",
        "study1": {"responses_per_question": 2, "questions_per_participant": 2},
        "study2": {"ratings_per_pair": 2, "pairs_per_participant": 2},
        "crowd": {"arrive_via": "prolific"},
    }))
    config = load_study(studies / f"{name}.yaml")
    settings = isolated_settings(tmp_path / "home", argilla_url=argilla_server.api_url,
                                 argilla_api_key=argilla_server.owner_api_key, portal_studies=studies,
                                 portal_port=free_port(), fake_prolific_port=fake.port)
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
    if key == "study1":
        collection = study1_collection(config, _questions().head(2), owner, tmp_path / "run", store,
                                       finish_url(settings, name, key))
    else:
        questions, responses, _ = _study1_export(n_questions=1, per_question=3)
        pairs = make_pairs(responses, config.study2.pairs, config.seed).pairs
        collection = study2_collection(config, pairs, responses, questions, owner, tmp_path / "run", store,
                                       finish_url(settings, name, key))
    return settings, store, collection


@pytest.mark.parametrize("key", ["study1", "study2"])
def test_from_a_prolific_link_through_argilla_to_the_completion_url(key, argilla_server, browser_page, output_dir,
                                                                     tmp_path, unique):
    from playwright.sync_api import expect

    name = f"b{unique}"
    shot = lambda what: browser_page.screenshot(path=str(output_dir / f"portal-{key}-{what}.png"), full_page=True)  # noqa: E731
    with FakeProlific() as fake:
        settings, store, collection = _setup(tmp_path, argilla_server, fake, name, key)
        portal = Portal(settings, store, open_collection=lambda path, k: collection)
        with PortalThread(create_app(portal), port=settings.portal_port), \
                ProlificClient(fake.base_url, fake.token) as client:
            platform = ensure_prolific_study(collection, load_study(settings.portal_studies / f"{name}.yaml"),
                                             settings, client)
            arrival = fake.arrive(platform.external_id)
            page = browser_page
            try:
                # Prolific's link -> the portal's welcome page (the ids leave the address bar)
                page.goto(arrival["url"])
                page.wait_for_url(re.compile(r"/welcome$"))
                assert arrival["participant_id"] not in page.url
                expect(page.get_by_role("heading", name="What to expect")).to_be_visible()
                shot("welcome")
                # Start -> Argilla, logged in, on the home page listing their one dataset
                page.get_by_role("button", name="Start").click()
                page.wait_for_url(lambda url: url.startswith(argilla_server.api_url) and "/sign-in" not in url)
                participant = collection.participants()[0]
                dataset = participant.dataset_id
                expect(page.get_by_text(collection.dataset_name).first).to_be_visible()
                shot("argilla")
                # answer every item through the UI
                page.goto(f"{argilla_server.api_url}/dataset/{dataset}/annotation-mode")
                submit = page.get_by_role("button", name=re.compile(r"\bSubmit\b"))
                for n in range(len(participant.assignments)):
                    expect(submit).to_be_visible()
                    if key == "study1":
                        box = page.locator("[aria-label='Question: response'] [contenteditable='true']")
                        box.click()
                        box.press_sequentially(TEXT, delay=5)
                        page.locator("[aria-label='Question: quality']").get_by_text("4", exact=True).click()
                    else:
                        page.locator("[aria-label='Question: preference']").get_by_text("2", exact=True).click()
                    expect(submit).to_be_enabled()
                    submit.click()
                    counter = page.locator(".status-counter", has_text="submitted").locator(".status-counter__counter")
                    expect(counter).to_have_text(str(n + 1))
                shot("answered")
                # the finish page (linked from the guidelines): the code, and back to Prolific
                page.goto(finish_url(settings, name, key))
                code = store.completion_code(collection.info.id)
                expect(page.get_by_text(code)).to_be_visible()
                shot("done")
                page.get_by_role("link", name="Back to Prolific").click()
                page.wait_for_url(f"{fake.app_url}/submissions/complete?cc={code}")
                expect(page.get_by_text(f"completion code {code} received")).to_be_visible()
                shot("prolific")
            except Exception:
                _dump(page, output_dir, f"portal-{key}-failure")
                raise
        assert fake.completion_visits == [code]

    # the store and Argilla hold those answers
    participant = store.participant(collection.info.id, participant.username)
    assert participant.status == COMPLETE and not participant.held
    values = [a.values for _, a in collection.collected_answers()]
    assert len(values) == len(participant.assignments)
    if key == "study1":
        assert all(v == {"response": TEXT, "quality": 4} for v in values), values
    else:
        assert all(v == {"preference": 2} for v in values), values
    # the one hop that carried the credentials left no trace in the embedded Argilla's log
    log = (argilla_server.settings.logs_dir / "argilla-server.log").read_text(errors="replace")
    assert "sign-in?auth=" not in log and participant.username not in log
    assert httpx.get(f"{argilla_server.api_url}/api/v1/status").status_code == 200
