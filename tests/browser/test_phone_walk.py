"""A real browser (headless Chromium) at phone size (390 x 844, touch) walks a study-1 participant
through the work frame on one origin, as Caddy serves it (tests/same_origin.py routes /s/ to the
real portal and the rest to the real embedded Argilla; the fake Prolific): every control of each item - the answer box, the rating, Submit - lies inside the
screen once the answer is typed (issue 34 item 4), and the bar's progress follows each submit
promptly (the lag from Argilla's "submitted" counter to the bar's count is measured and kept in
test-output/phone-walk.json).

Screenshots: test-output/phone-walk-item-<n>.png (the answer typed, before Submit);
on failure phone-walk-failure.png/.html."""

from __future__ import annotations

import json
import re
import time

from crowdpref.portal import argilla_session
from crowdpref.portal.app import create_app
from crowdpref.portal.service import Portal
from crowdpref.prolific import ProlificClient
from crowdpref.recruitment import ensure_prolific_study
from crowdpref.simulation.prolific_server import FakeProlific
from tests.browser.conftest import BROWSER_MARKS, TIMEOUT_MS
from tests.browser.test_argilla_ui import _dump
from tests.browser.test_portal_ui import (
    ITEMS,
    QUALITY,
    TEXT,
    _arrive,
    _setup,
    _shown_item,
    _wait_for_url,
)
from tests.browser.test_token_sign_in import _share_argilla_key
from tests.conftest import free_port
from tests.portal_server import PortalThread
from tests.same_origin import SameOrigin

pytestmark = BROWSER_MARKS

PHONE = {"width": 390, "height": 844}
LONG = (TEXT + " I would ask them what they need from me first, and I would not interrupt them. Then I would say "
        "how I see it, calmly and without blame, and suggest one small next step we could both agree on today.")
BAR_LAG_S = 4.0  # the bar's count follows Argilla's within this (it polls every 2 s)


def _inside(page, locator, what: str) -> dict:
    """``locator``'s box, asserted wholly inside the phone's screen (page coordinates, frames included)."""
    box = locator.bounding_box()
    assert box is not None, what
    assert box["y"] >= 0 and box["y"] + box["height"] <= PHONE["height"], (what, box)
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], (what, box)
    return box


def test_on_a_phone_every_control_of_an_item_is_on_screen_and_the_bar_follows(argilla_server, browser, output_dir,
                                                                             tmp_path, unique):
    from playwright.sync_api import expect

    name, key = f"ph{unique}", "study1"
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    lags: list[float] = []
    with FakeProlific() as fake:
        config, settings, store, collection = _setup(tmp_path, argilla_server, fake, name, key)
        port = free_port()
        front_url = f"http://127.0.0.1:{port}"  # one origin for both, as Caddy makes it
        settings = settings.model_copy(update={"portal_url": front_url, "argilla_public_url": front_url,
                                               "portal_port": port})
        _share_argilla_key(argilla_server, settings)
        portal = Portal(settings, store, open_collection=lambda path, k: collection)
        argilla_session.check_one_origin(settings)  # the one way in: the portal and Argilla on one origin
        front = SameOrigin(create_app(portal), argilla_server.api_url)
        with PortalThread(front, port=port), ProlificClient(fake.base_url, fake.token) as client:
            webhook_id = portal.register_argilla_webhook(collection.owner)  # as the running portal does
            platform = ensure_prolific_study(collection, config, settings, client)
            arrival = _arrive(fake, platform.external_id)
            try:
                page.goto(arrival["url"])
                _wait_for_url(page, f"{front_url}/s/{name}/{key}/welcome")
                page.get_by_role("button", name="Start").click()
                _wait_for_url(page, f"{front_url}/s/{name}/{key}/work")
                [participant] = collection.participants()
                work = page.frame(name="argilla")
                work.wait_for_url(f"{front_url}/dataset/{participant.dataset_id}/annotation-mode")
                submit = work.get_by_role("button", name=re.compile(r"\bSubmit\b"))
                submitted = work.locator(".status-counter", has_text="submitted").locator(".status-counter__counter")
                progress = page.locator("#progress")
                for n in range(1, ITEMS + 1):
                    _shown_item(work, collection, participant)
                    box = work.locator("[aria-label='Question: response'] [contenteditable='true']")
                    box.click()
                    box.press_sequentially(LONG if n == 1 else TEXT, delay=1)  # a real answer: several lines
                    rating = work.locator("[aria-label='Question: quality']")
                    rating.get_by_text(str(QUALITY), exact=True).click()
                    expect(submit).to_be_enabled()
                    page.screenshot(path=str(output_dir / f"phone-walk-item-{n}.png"))
                    _inside(page, box, "the answer box")
                    _inside(page, rating.get_by_text(str(QUALITY), exact=True), "the rating")
                    _inside(page, submit, "Submit")
                    _inside(page, page.locator("#finish"), "the bar's button")
                    submit.tap()
                    expect(submitted).to_have_text(str(n))
                    seen = time.monotonic()
                    expect(progress).to_have_text(re.compile(rf"^(?:{n} of {ITEMS} items submitted|All {ITEMS} "
                                                             "items submitted.*)$"), timeout=30_000)
                    lags.append(round(time.monotonic() - seen, 2))
                expect(page.locator("#bar")).to_have_class("bar done", timeout=30_000)
                _inside(page, page.locator("#finish"), "the bar's button, done")
                # Argilla's own end-of-task line: its "icon" is an emoji (U+1F389), drawn from the
                # device's emoji font - not from the Google Fonts Argilla imports (docs/explanation/portal.md)
                ended = work.get_by_text(re.compile(r"task is completed|no pending records"))
                expect(ended).to_be_visible()
                assert ended.inner_text().strip().startswith("\U0001f389"), ended.inner_text()
                page.screenshot(path=str(output_dir / "phone-walk-done.png"))
            except Exception:
                _dump(page, output_dir, "phone-walk-failure")
                raise
            finally:
                collection.owner.delete_webhook(webhook_id)
    (output_dir / "phone-walk.json").write_text(json.dumps({"bar_lag_s": lags}) + "\n")
    assert max(lags) <= BAR_LAG_S, lags
