"""A real browser (headless Chromium) walks a participant's way through Caddy over HTTPS, as in
the public profile: Debian's caddy (services/caddy.py, ``tls internal``, free high ports) on
``https://localhost:<port>`` in front of the real portal and the real embedded Argilla, one host
name for both, and the fake Prolific.

Prolific-style link -> the portal's welcome page (its cookie ``Secure``, the ids gone from the
address bar) -> *Start* -> the work frame: the portal's bar (progress, Finish) over Argilla,
signed in on the same origin, on the participant's first item -> every item answered in Argilla's
UI inside the frame -> the bar turns to "Finish: get my code", its button inside the viewport at desktop
and at phone size (390 x 844) -> the completion code -> back to (fake) Prolific with it. Then Caddy's access log and its own log are read: they hold the paths walked
and none of the Prolific ids, the ``auth=`` sign-in, the cookie or the participant's password.

Chromium accepts Caddy's internal CA through Playwright's ``ignore_https_errors``.
Screenshots: test-output/caddy-walk-*.png and work-frame-{desktop,phone}-done.png (failure:
caddy-walk-failure.png/.html)."""

from __future__ import annotations

import shutil

import httpx
import pytest
import yaml

from crowdpref.argilla_client import ArgillaOwner
from crowdpref.config import load_study
from crowdpref.portal import argilla_session
from crowdpref.portal.app import cookie_name, create_app
from crowdpref.portal.links import finish_url, prolific_entry_url
from crowdpref.portal.service import Portal
from crowdpref.prolific import ProlificClient
from crowdpref.recruitment import ensure_prolific_study
from crowdpref.runfolder import write_text
from crowdpref.simulation.prolific_server import FakeProlific
from crowdpref.store import ACTIVE, COMPLETE, Store
from crowdpref.study1 import study1_collection
from services import caddy
from services.argilla.service import auth_secret
from services.process import ProcessManager
from tests.browser.conftest import BROWSER_MARKS, TIMEOUT_MS
from tests.browser.test_argilla_ui import _dump
from tests.browser.test_portal_ui import ITEMS, _answer_study1, _arrive, _wait_for_url
from tests.integration.test_caddy import _own_addresses
from tests.conftest import free_port, isolated_settings
from tests.integration.test_study1_collection import _questions
from tests.portal_server import PortalThread

pytestmark = [
    *BROWSER_MARKS,
    pytest.mark.skipif(shutil.which("caddy") is None,
                       reason="!!! CADDY BROWSER TEST SKIPPED: Debian's caddy is missing - run make setup !!!"),
]


@pytest.fixture()
def https_page(browser) -> object:
    """A Chromium page, in a context of its own, that accepts Caddy's internal CA (and nothing else changed)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, ignore_https_errors=True)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    return page


def test_a_participant_walks_from_the_prolific_link_to_the_code_through_caddy(argilla_server, https_page, output_dir,
                                                                              tmp_path, unique):
    from playwright.sync_api import expect

    name, key, page = f"c{unique}", "study1", https_page

    def shot(what: str) -> None:
        page.screenshot(path=str(output_dir / f"caddy-walk-{what}.png"), full_page=True)

    studies = tmp_path / "studies"
    studies.mkdir()
    (studies / f"{name}.yaml").write_text(yaml.safe_dump({
        "name": name, "seed": 9, "participants": "simulated",
        "study1": {"responses_per_question": 2, "questions_per_participant": ITEMS, "pool_size": 1},
        "study2": {"ratings_per_pair": 2, "pairs_per_participant": ITEMS, "pool_size": 1},
        "crowd": {"arrive_via": "prolific"},
    }))
    config = load_study(studies / f"{name}.yaml")
    https = free_port()
    with FakeProlific() as fake:
        settings = isolated_settings(
            tmp_path / "home", public_url=f"https://localhost:{https}", public_tls="internal", https_port=https,
            http_port=free_port(), argilla_url=argilla_server.api_url, argilla_api_key=argilla_server.owner_api_key,
            portal_studies=studies, fake_prolific_port=fake.port)
        public = settings.public_url or ""
        # one state folder in the public profile: the portal signs Argilla sessions with Argilla's key
        write_text(auth_secret(argilla_server.settings), settings.secrets_dir / "argilla-auth-secret", private=True)
        store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
        owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
        collection = study1_collection(config, _questions().head(2), owner, tmp_path / "run", store,
                                       finish_url(settings, name, key))
        portal = Portal(settings, store, open_collection=lambda path, k: collection)
        manager = ProcessManager(settings.state_dir)
        try:
            with PortalThread(create_app(portal), port=settings.portal_port), \
                    ProlificClient(fake.base_url, fake.token) as client:
                caddy.start(settings, manager)
                platform = ensure_prolific_study(collection, config, settings, client)
                assert fake.studies[platform.external_id]["external_study_url"] == prolific_entry_url(settings, name, key)
                code = store.completion_code(collection.info.id)
                arrival = _arrive(fake, platform.external_id)
                assert arrival["url"].startswith(f"{public}/s/{name}/{key}?PROLIFIC_PID=")  # through Caddy
                prolific_done = f"{fake.app_url}/submissions/complete?cc={code}"
                try:
                    # the Prolific-style link -> the welcome page over HTTPS; the portal's cookie is Secure
                    page.goto(arrival["url"])
                    _wait_for_url(page, f"{public}/s/{name}/{key}/welcome")
                    expect(page.get_by_text(f"You will get {ITEMS} items")).to_be_visible()
                    [cookie] = [c for c in page.context.cookies() if c["name"] == cookie_name(name, key)]
                    assert cookie["secure"] and cookie["httpOnly"] and cookie["domain"] == "localhost"
                    shot("welcome")

                    # Start -> the work frame: the portal's bar over Argilla (same origin, signed in),
                    # whose frame opens the participant's first item
                    page.get_by_role("button", name="Start").click()
                    _wait_for_url(page, f"{public}/s/{name}/{key}/work")
                    [participant] = collection.participants()
                    assert participant.status == ACTIVE and len(participant.assignments) == ITEMS
                    password = owner.passwords(participant.username)  # what a password sign-in would carry
                    work = page.frame(name="argilla")
                    work.wait_for_url(f"{public}/dataset/{participant.dataset_id}/annotation-mode")
                    bar, finish = page.locator("#bar"), page.locator("#finish")
                    expect(page.locator("#progress")).to_have_text(f"0 of {ITEMS} items submitted")
                    shown = _answer_study1(work, collection, participant, ITEMS)
                    assert sorted(shown) == sorted(participant.items)

                    # after the last submit the bar says so, and Finish is on screen without scrolling or
                    # opening anything: at desktop size and at phone size
                    expect(bar).to_have_class("bar done", timeout=60_000)  # its next poll (the portal reads Argilla)
                    expect(page.locator("#progress")).to_have_text(f"All {ITEMS} items submitted.")
                    expect(finish).to_have_text("Finish: get my code")
                    for size, (width, height) in (("desktop", (1400, 1000)), ("phone", (390, 844))):
                        page.set_viewport_size({"width": width, "height": height})
                        expect(finish).to_be_in_viewport(ratio=1.0)
                        box = finish.bounding_box()
                        assert box and box["y"] >= 0 and box["y"] + box["height"] <= height, (size, box)
                        page.screenshot(path=str(output_dir / f"work-frame-{size}-done.png"))
                    shot("answered")

                    # Finish -> the completion code -> (fake) Prolific
                    finish.click()
                    _wait_for_url(page, f"{public}/s/{name}/{key}/done")
                    expect(page.get_by_role("heading", name="Finished")).to_be_visible()
                    expect(page.locator(".code")).to_have_text(code)
                    shot("done")
                    # the Argilla session this browser holds (one origin: the portal's page can read it)
                    session = page.evaluate(f"localStorage.getItem('{argilla_session.TOKEN_KEY}')")
                    assert session and session.startswith("Bearer ")
                    back = page.get_by_role("link", name="Back to Prolific")
                    expect(back).to_have_attribute("href", prolific_done)
                    try:  # the page forwards by itself after 5 s; a slow machine may get there first
                        back.click(timeout=3_000)
                    except Exception:  # noqa: BLE001
                        pass
                    _wait_for_url(page, prolific_done)
                    expect(page.get_by_text(f"completion code {code} received")).to_be_visible()
                except Exception:
                    _dump(page, output_dir, "caddy-walk-failure")
                    raise
                # the pages came through Caddy: it answered with HSTS
                assert httpx.get(f"{public}/healthz", verify=False, timeout=10).headers[
                    "strict-transport-security"].startswith("max-age=")
                _after_finish_the_session_and_api_key_reach_nothing(public, settings, session, owner, collection,
                                                                    participant, argilla_server)
        finally:
            manager.stop(caddy.NAME)

    participant = store.participant(collection.info.id, participant.username)
    assert participant.status == COMPLETE and sorted(participant.submitted) == sorted(participant.items)

    # Caddy's logs: the paths walked, and nothing that identifies or signs in the participant
    access = caddy.access_log_path(settings).read_text()
    own = (settings.logs_dir / "caddy.log").read_text()
    for path in (f'"uri":"/s/{name}/{key}"', f'"uri":"/s/{name}/{key}/welcome"', f'"uri":"/s/{name}/{key}/start"',
                 f'"uri":"/s/{name}/{key}/work"', f'"uri":"/s/{name}/{key}/progress"',
                 f'"uri":"/s/{name}/{key}/done"', f'"uri":"/dataset/{participant.dataset_id}/annotation-mode"'):
        assert path in access, path
    never = {"PROLIFIC_PID": arrival["participant_id"], "SESSION_ID": arrival["session_id"],
             "STUDY_ID": platform.external_id, "password": password, "cookie": cookie["value"]}
    for log_name, text in (("caddy-access.log", access), ("caddy.log", own)):
        for what, value in never.items():
            assert value not in text, (log_name, what)
        for marker in ("PROLIFIC_PID", "SESSION_ID", "STUDY_ID", "auth=", "invite="):
            assert marker not in text, (log_name, marker)


def _after_finish_the_session_and_api_key_reach_nothing(public, settings, session, owner, collection, participant,
                                                        argilla_server) -> None:
    """What an attacker holding the finished participant's browser could try, from outside this
    host (another address, through Caddy): the Argilla session from the browser's storage and the
    permanent API key ``/api/v1/me`` shows get 401/403 for the dataset, its records, a search, a
    new answer, and a change of an answer (edit, back to draft, delete); the answers are unchanged."""
    addresses = _own_addresses()
    if not addresses:
        pytest.skip("this machine has no non-loopback address to connect from")
    dataset = collection._dataset_of(participant)
    record_ids = owner.record_ids(dataset)
    record_id = record_ids[participant.items[0]]
    with httpx.Client(base_url=argilla_server.api_url, headers={"X-Argilla-Api-Key": argilla_server.owner_api_key},
                      timeout=30) as local:
        [response] = local.get(f"/api/v1/records/{record_id}").json()["responses"]
    before = sorted((a.record_external_id, a.status, str(a.values)) for a in owner.answers(dataset))
    remote = httpx.HTTPTransport(local_address=addresses[0], verify=False)
    with httpx.Client(transport=remote, base_url=public, timeout=30) as outside:
        me = outside.get("/api/v1/me", headers={"Authorization": session})
        assert me.status_code == 200  # who they are is still theirs to read; what they did is not
        api_key = me.json()["api_key"]
        for headers in ({"Authorization": session}, {"X-Argilla-Api-Key": api_key}):
            seen = {
                "dataset": outside.get(f"/api/v1/datasets/{dataset.id}", headers=headers).status_code,
                "search": outside.post(f"/api/v1/me/datasets/{dataset.id}/records/search", json={},
                                       headers=headers).status_code,
                "record": outside.get(f"/api/v1/records/{record_id}", headers=headers).status_code,
                "new answer": outside.post(f"/api/v1/records/{record_id}/responses", headers=headers,
                                           json={"values": {"quality": {"value": 1}}, "status": "draft"}).status_code,
                "bulk": outside.post("/api/v1/me/responses/bulk", headers=headers, json={"items": [
                    {"record_id": record_id, "status": "draft", "values": {"quality": {"value": 1}}}]}),
                "edit": outside.put(f"/api/v1/responses/{response['id']}", headers=headers, json={
                    "values": {"response": {"value": "changed after payment"}, "quality": {"value": 1}},
                    "status": "submitted"}).status_code,
                "to draft": outside.put(f"/api/v1/responses/{response['id']}", headers=headers, json={
                    "values": response["values"], "status": "draft"}).status_code,
                "delete": outside.delete(f"/api/v1/responses/{response['id']}", headers=headers).status_code,
            }
            bulk = seen.pop("bulk")  # Argilla answers a bulk call 200, with an error for each item it refused
            assert set(seen.values()) <= {401, 403}, (list(headers), seen)
            assert bulk.status_code in (401, 403) or all(item["error"] for item in bulk.json()["items"]), bulk.text
    assert sorted((a.record_external_id, a.status, str(a.values)) for a in owner.answers(dataset)) == before
    assert {status for _, status, _ in before} == {"submitted"}
