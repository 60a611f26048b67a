"""A real browser (Debian's headless Chromium, driven by Playwright) signs in to the embedded
Argilla web UI as an ANNOTATOR, answers one record (free text + 1-5 rating) and submits it;
the OWNER then reads exactly that answer back through the API, attributed to the annotator.

Screenshots land in test-output/: ``argilla-ui-record.png`` (signed in, record shown) and
``argilla-ui-submitted.png`` (after submit). On failure the page's screenshot and HTML are kept
as ``argilla-ui-failure.png`` / ``argilla-ui-failure.html``."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import argilla as rg

from tests.browser.conftest import BROWSER_MARKS
from tests.integration.test_argilla_roundtrip import _study1_settings

pytestmark = BROWSER_MARKS

ANSWER_TEXT = "I would sit with them and listen before offering any advice."
ANSWER_RATING = 4


def _dump(page, output_dir: Path, name: str) -> None:
    try:
        page.screenshot(path=str(output_dir / f"{name}.png"), full_page=True)
        (output_dir / f"{name}.html").write_text(page.content())
    except Exception:  # noqa: BLE001 - best effort while already failing
        pass


def test_annotator_answers_in_browser_owner_reads_back(argilla_server, browser_page, output_dir, unique):
    from playwright.sync_api import expect

    owner = rg.Argilla(api_url=argilla_server.api_url, api_key=argilla_server.owner_api_key, timeout=60)
    workspace = rg.Workspace(name=f"ws-ui-{unique}", client=owner).create()
    password = secrets.token_urlsafe(16)
    annotator = rg.User(username=f"ui-{unique}", password=password, role="annotator", client=owner).create()
    workspace.add_user(annotator)
    dataset = rg.Dataset(
        name=f"ui-study-{unique}", workspace=workspace, settings=_study1_settings(min_submitted=1), client=owner
    ).create()
    question = "A friend just lost their job. How would you comfort them?"
    dataset.records.log([rg.Record(id="ui-q-1", fields={"question": question}, metadata={"category": "empathy"})])

    page = browser_page
    try:
        # --- sign in as the annotator ---------------------------------------------------------
        page.goto(f"{argilla_server.api_url}/sign-in")
        page.get_by_label("Username").fill(annotator.username)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(lambda url: "/sign-in" not in url)

        # --- open the dataset's annotation page: the pending record is shown ------------------
        page.goto(f"{argilla_server.api_url}/dataset/{dataset.id}/annotation-mode")
        expect(page.get_by_text(question)).to_be_visible()
        submit = page.get_by_role("button", name=re.compile(r"\bSubmit\b"))
        expect(submit).to_be_disabled()  # required answers still missing
        page.screenshot(path=str(output_dir / "argilla-ui-record.png"), full_page=True)

        # --- answer: free text (a contenteditable) and the 1-5 rating -------------------------
        text_box = page.locator("[aria-label='Question: response'] [contenteditable='true']")
        text_box.click()
        text_box.press_sequentially(ANSWER_TEXT, delay=10)
        expect(text_box).to_have_text(ANSWER_TEXT)
        rating = page.locator("[aria-label='Question: quality']")
        rating.get_by_text(str(ANSWER_RATING), exact=True).click()
        expect(rating.get_by_role("checkbox", name=str(ANSWER_RATING))).to_be_checked()

        # --- submit: the record leaves the pending queue, the submitted counter shows 1 -------
        expect(submit).to_be_enabled()
        submit.click()
        expect(page.get_by_text(question)).to_be_hidden()
        submitted_counter = page.locator(".status-counter", has_text="submitted").locator(".status-counter__counter")
        expect(submitted_counter).to_have_text("1")
        page.screenshot(path=str(output_dir / "argilla-ui-submitted.png"), full_page=True)
    except Exception:
        _dump(page, output_dir, "argilla-ui-failure")
        raise

    # --- the owner reads exactly that answer back through the API, by the annotator --------------
    answers: dict[str, tuple[object, object, object]] = {}
    for record in dataset.records(with_responses=True):
        assert record.id == "ui-q-1"
        for response in record.responses:
            answers[response.question_name] = (response.value, response.user_id, response.status)
    assert answers == {
        "response": (ANSWER_TEXT, annotator.id, "submitted"),
        "quality": (ANSWER_RATING, annotator.id, "submitted"),
    }
