"""A pilot the way the how-to (docs/how-to/pilot-invite-links.md) runs it, with a real browser
at phone size (headless Chromium, 390 x 844): ``crowdpref new-study NAME --participants invite``
writes the config (the real command; used as written) ->
study 1's collection over the real embedded Argilla, the study store the commands use ->
``crowdpref invite --key study1 -n 1`` prints the link (the real command) -> the invited person
opens it on a phone: the onboarding the config ships (introduction, every practice question,
the quiz passed) -> the welcome page -> *Start* -> the work frame: Argilla signed in inside it
(the session the portal minted, on the laptop stack's one origin: real Caddy over plain HTTP, as
``crowdpref up`` serves it) on their first item -> every item answered
and submitted in Argilla's UI -> the bar turns done,
its button wholly on screen, the bar passing axe-core (0 serious or critical) -> *Finish* ->
thanks and what happens next, no completion code.
Then the store holds every item as submitted.

Screenshots: test-output/pilot-phone-*.png (failure: pilot-phone-failure.png/.html)."""

from __future__ import annotations

import shutil
import subprocess
import sys

from crowdpref.argilla_client import ArgillaOwner
from crowdpref.config import load_study
from crowdpref.onboarding import onboarding_of
from crowdpref.portal import argilla_session
from crowdpref.portal.app import create_app
from crowdpref.portal.links import finish_url
from crowdpref.portal.service import Portal
from crowdpref.store import COMPLETE, open_store
from crowdpref.study1 import study1_collection
from tests.browser.conftest import BROWSER_MARKS, TIMEOUT_MS
from tests.browser.test_argilla_ui import _dump
from tests.browser.test_onboarding_walk import _axe
from tests.browser.test_portal_ui import (
    _answer_study1,
    _first_item,
    _wait_for_url,
    one_origin,
)
from tests.conftest import REPO, cli_environment, free_port, isolated_settings
from tests.integration.test_study1_collection import _questions
from tests.portal_server import PortalThread

pytestmark = BROWSER_MARKS

PHONE = {"width": 390, "height": 844}
ITEMS = 3  # new-study's batch


def _crowdpref(env: dict[str, str], *args: str) -> str:
    run = subprocess.run([sys.executable, "-m", "crowdpref.cli", *args], env=env, cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def test_a_pilot_from_new_study_through_an_invite_link_on_a_phone(argilla_server, browser, output_dir, tmp_path,
                                                                  unique):
    from playwright.sync_api import expect

    name = f"pilot{unique}"
    home, studies = tmp_path / "home", tmp_path / "studies"
    studies.mkdir()
    port = free_port()
    env = cli_environment(home)
    env.update(CROWDPREF_PORTAL_STUDIES=str(studies), CROWDPREF_PORTAL_PORT=str(port),
               CROWDPREF_ARGILLA_URL=argilla_server.api_url, CROWDPREF_ARGILLA_API_KEY=argilla_server.owner_api_key)

    # the state folder holds that Argilla's token-signing key, as the server how-to has the operator
    # put it for an Argilla crowdpref did not start (new-study's validation checks it)
    (home / "secrets").mkdir(parents=True, exist_ok=True)
    shutil.copy2(argilla_server.settings.secrets_dir / argilla_session.SECRET_FILE,
                 home / "secrets" / argilla_session.SECRET_FILE)

    # 1. the config, as the how-to writes it
    wrote = _crowdpref(env, "new-study", name, "--participants", "invite")
    path = studies / f"{name}.yaml"
    assert f"wrote {path}" in wrote
    config = load_study(path)  # as the command wrote it
    assert config.study1.questions_per_participant == ITEMS
    onboarding = onboarding_of(config, "study1")
    assert config.participants == "invite" and onboarding is not None and onboarding.quiz is not None
    assert config.study1.inactive_after_minutes >= 10  # made for real people

    # 2. study 1's collection on the real Argilla, in the store the commands use; the same
    # one-origin port as the commands'
    settings = isolated_settings(home, argilla_url=argilla_server.api_url, argilla_api_key=argilla_server.owner_api_key,
                                 portal_studies=studies, portal_port=port, site_port=int(env["CROWDPREF_SITE_PORT"]))
    store = open_store(settings)
    owner = ArgillaOwner(argilla_server.api_url, argilla_server.owner_api_key)
    collection = study1_collection(config, _questions().head(6), owner, tmp_path / "run", store,
                                   finish_url(settings, name, "study1"))
    portal = Portal(settings, store, open_collection=lambda p, k: collection)
    with PortalThread(create_app(portal), port=port), one_origin(settings) as site:
        # 3. the link, from the real command
        [link] = _crowdpref(env, "invite", str(path), "--key", "study1", "-n", "1").split()
        assert link.startswith(f"{site}/s/{name}/study1?invite=")
        page = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True).new_page()
        page.set_default_timeout(TIMEOUT_MS)

        def shot(what: str) -> None:
            page.screenshot(path=str(output_dir / f"pilot-phone-{what}.png"))

        try:
            # 4. onboarding on a phone: the introduction, every practice question, the quiz
            page.goto(link)  # the invitation's page claims nothing; its button does
            shot("invitation")
            page.get_by_role("button", name="Accept the invitation").click()
            expect(page.get_by_role("heading", name="Worked examples")).to_be_visible()
            shot("introduction")
            page.get_by_role("button", name="Continue").click()
            for i, item in enumerate(onboarding.practice):
                page.get_by_label(item.options[item.answer - 1], exact=True).check()
                page.get_by_role("button", name="Check my answer").click()
                expect(page.get_by_text("Right!")).to_be_visible()
                page.get_by_role("button", name="Go to the quiz" if i + 1 == len(onboarding.practice)
                                 else "Next practice question").click()
            for i, item in enumerate(onboarding.quiz.items):
                page.locator(f"input[name=q{i}][value='{item.answer}']").check()
            page.get_by_role("button", name="Submit my answers").click()

            # 5. passed: the welcome page (their work claimed), then Start -> the work frame
            expect(page.get_by_text(f"You will get {ITEMS} items")).to_be_visible()
            shot("welcome")
            page.get_by_role("button", name="Start").click()
            _wait_for_url(page, f"{site}/s/{name}/study1/work")
            [participant] = collection.participants()
            work = page.frame(name="argilla")  # signed in through Argilla's hand-over page: their first item
            work.wait_for_url(_first_item(site, participant))
            expect(page.locator("#progress")).to_have_text(f"0 of {ITEMS} items submitted")
            expect(page.locator("#finish")).to_be_in_viewport(ratio=1.0)
            shot("work")

            # 6. every item answered in Argilla's UI, inside the frame, on a phone
            assert sorted(_answer_study1(work, collection, participant, ITEMS)) == sorted(participant.items)

            # 7. the bar says they are done, Finish on screen; Finish -> thanks, no code
            expect(page.locator("#bar")).to_have_class("bar done", timeout=60_000)
            finish = page.locator("#finish")
            expect(finish).to_have_text("Finish: tell us I am done")  # an invitation: no code to get
            expect(finish).to_be_in_viewport(ratio=1.0)
            shot("done-bar")
            # the portal's own part of the page (the bar; Argilla's frame is Argilla's) passes axe-core
            page.add_script_tag(path=str(_axe()))
            found = page.evaluate("async () => (await axe.run({exclude: [['#argilla']]}, {resultTypes: ['violations'], "
                                  "iframes: false})).violations.filter(v => ['serious', 'critical'].includes(v.impact))"
                                  ".map(v => v.id)")
            assert found == [], found
            finish.click()
            _wait_for_url(page, f"{site}/s/{name}/study1/done")
            expect(page.get_by_role("heading", name="Finished")).to_be_visible()
            expect(page.get_by_text("What happens next")).to_be_visible()
            expect(page.locator(".code")).to_have_count(0)
            shot("finished")
        except Exception:
            _dump(page, output_dir, "pilot-phone-failure")
            raise
        finally:
            page.context.close()
    participant = store.participant(collection.info.id, participant.username)
    assert participant.status == COMPLETE and sorted(participant.submitted) == sorted(participant.items)
    store.close()
