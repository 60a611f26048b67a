"""A real browser (headless Chromium) signs in to Argilla WITHOUT a password, as in the public
profile where the portal and Argilla share one origin (here a tiny same-origin front,
tests/same_origin.py, routes /s/ to the portal and the rest to the real embedded Argilla, as
Caddy does): Prolific-style link -> welcome -> *Start* -> the portal's page stores the Argilla
session it minted (crowdpref/portal/argilla_session.py) -> the work frame, whose Argilla frame
opens on the annotation page showing one of the participant's own records. No ``POST /api/v1/token`` (no bcrypt), no ``/sign-in``,
and the token in no URL.

This guards the one internal of Argilla's frontend the path relies on - where it keeps its
session (``auth._token.local`` / ``auth._token_expiration.local`` in localStorage): with any
other key name the browser lands on Argilla's sign-in page, which the test also shows, so an
Argilla upgrade that moves the session fails here. Screenshots: test-output/token-sign-in-*.png."""

from __future__ import annotations

import re
import shutil

from crowdpref.portal import argilla_session
from crowdpref.portal.app import create_app
from crowdpref.portal.service import Portal
from crowdpref.prolific import ProlificClient
from crowdpref.recruitment import ensure_prolific_study
from crowdpref.simulation.prolific_server import FakeProlific
from crowdpref.store import ACTIVE
from tests.browser.conftest import BROWSER_MARKS
from tests.browser.test_argilla_ui import _dump
from tests.browser.test_portal_ui import _arrive, _setup, _shown_item, _wait_for_url
from tests.conftest import free_port
from tests.portal_server import PortalThread
from tests.same_origin import SameOrigin

pytestmark = BROWSER_MARKS


def _share_argilla_key(argilla_server, settings) -> None:
    """The portal's state folder gets the session Argilla's token key (``crowdpref up`` makes one
    folder hold both)."""
    settings.secrets_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(argilla_server.settings.secrets_dir / argilla_session.SECRET_FILE,
                 settings.secrets_dir / argilla_session.SECRET_FILE)


def test_start_hands_a_minted_argilla_session_on_the_same_origin(argilla_server, browser_page, output_dir, tmp_path,
                                                                 unique):
    from playwright.sync_api import expect

    page, name, key = browser_page, f"t{unique}", "study1"
    port = free_port()
    front_url = f"http://127.0.0.1:{port}"
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))

    def shot(what: str) -> None:
        page.screenshot(path=str(output_dir / f"token-sign-in-{what}.png"), full_page=True)

    with FakeProlific() as fake:
        config, settings, store, collection = _setup(tmp_path, argilla_server, fake, name, key)
        settings = settings.model_copy(update={"portal_url": front_url, "argilla_public_url": front_url})
        _share_argilla_key(argilla_server, settings)
        portal = Portal(settings, store, open_collection=lambda path, k: collection)
        argilla_session.check_one_origin(settings)  # the one way in: the portal and Argilla on one origin
        front = SameOrigin(create_app(portal), argilla_server.api_url)
        with PortalThread(front, port=port), ProlificClient(fake.base_url, fake.token) as client:
            platform = ensure_prolific_study(collection, config, settings, client)
            arrival = _arrive(fake, platform.external_id)
            assert arrival["url"].startswith(f"{front_url}/s/{name}/{key}?")
            try:
                page.goto(arrival["url"])
                _wait_for_url(page, f"{front_url}/s/{name}/{key}/welcome")
                page.get_by_role("button", name="Start").click()
                [participant] = collection.participants()
                assert participant.status == ACTIVE and participant.dataset_id
                _wait_for_url(page, f"{front_url}/s/{name}/{key}/work")  # the portal's bar over Argilla
                work = page.frame(name="argilla")
                work.wait_for_url(f"{front_url}/dataset/{participant.dataset_id}/annotation-mode")
                _shown_item(work, collection, participant)  # one of THEIR records, on screen
                expect(work.get_by_role("button", name=re.compile(r"\bSubmit\b"))).to_be_visible()
                shot("annotation")
                stored = page.evaluate(f"localStorage.getItem({argilla_session.TOKEN_KEY!r})")
            except Exception:
                _dump(page, output_dir, "token-sign-in-failure")
                raise
            assert stored.startswith("Bearer ")
            token = stored.removeprefix("Bearer ")

            # Argilla's frontend keeps the session under these keys and no other: the same token
            # under another name is no session - the browser is sent to sign in
            other = page.context.browser.new_context()
            try:
                wrong = other.new_page()
                wrong.goto(f"{front_url}/favicon.ico")
                wrong.evaluate("([k, v]) => localStorage.setItem(k, v)", [argilla_session.TOKEN_KEY + "-moved", stored])
                wrong.goto(f"{front_url}/dataset/{participant.dataset_id}/annotation-mode")
                wrong.wait_for_url(re.compile(r"/sign-in"))
            finally:
                other.close()

    seen = [path for _, path in front.seen]
    assert ("POST", "/api/v1/token") not in front.seen  # no password login: no bcrypt
    assert not any(path.startswith("/sign-in") for path in seen)
    assert not any(token in url for url in urls + seen)  # the token rode in no URL
    assert not any("auth=" in url for url in urls + seen)
