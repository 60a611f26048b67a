"""How simulated participants reach their work - a "door" the :class:`~crowdpref.simulation.crowd.SimulatedCrowd`
walks through:

- :class:`DirectDoor`: the crowd claims straight from the collection (what the portal calls);
  people who leave simply go quiet and the inactivity window releases their work. Used by the
  tests of the collection mechanism.
- :class:`ProlificDoor`: the way people arrive for real. The FAKE Prolific hands out a
  PROLIFIC_PID and SESSION_ID for the study's Prolific study; the participant opens the portal
  link, is verified, claims, presses Start and is sent to the work frame; the session the portal
  minted for them (or, for an Argilla crowdpref did not start, their credentials in the frame's
  sign-in page) is all the crowd learns of them; drop-outs return the study on Prolific
  and never-starters time out there (Prolific's webhook tells the portal, which frees the work
  at once); finishers open the portal's finish page and follow the completion redirect with
  their code. Used by the demo.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import httpx

from crowdpref.collection import Collection
from crowdpref.errors import CrowdprefError
from crowdpref.portal import argilla_session, pages
from crowdpref.store import Claimed, ParticipantState
from crowdpref.tls import shared_context

ENTRY_TRIES, ENTRY_PAUSE_S = 3, 2.0
"""A simulated person opens the study link again after a 503 (the portal asks them to), this
many times in all, pausing ``ENTRY_PAUSE_S`` x the attempt in between."""

PLACE_WAIT_S, PLACE_POLL_S = 6.0, 0.5
"""A simulated person who finds a paced launch full tries again every ``PLACE_POLL_S`` for up to
``PLACE_WAIT_S`` while the pace has places still to open (Prolific's crowd keeps coming)."""

CODE_IN_PAGE = re.compile(r"submissions/complete\?cc=([A-Za-z0-9]+)")


@dataclass(frozen=True)
class Arrival:
    """Who got in, and what their browser holds to reach Argilla: the Argilla session the portal
    minted (through the portal), or the account's password (the direct door, which skips the
    portal)."""

    participant: ParticipantState
    password: str | None = field(repr=False)
    token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class ScreenedOut:
    """A newcomer the onboarding quiz turned away: nothing was allocated to them; on Prolific
    the portal gives their submission the screen-out code (a fixed payment)."""


Onboard = Callable[[str], Any]
"""key -> what that simulated person does in onboarding
(:class:`~crowdpref.simulation.crowd.OnboardingRun`: practice answers, quiz attempts)."""
ONBOARDING_STEPS = 50
"""Pages a simulated person walks in onboarding at most (a loop would be a portal bug)."""
PREPARED_WITHIN_S = 300.0
"""How long a simulated person waits on the portal's "being prepared" page at most."""
FORM = re.compile(r'<form method="(get|post)" action="([^"]+)"')


class Door(Protocol):
    def arrive(self, key: str) -> Arrival | ScreenedOut | None:
        """A new participant comes in; None when there is no work for them (full / refused);
        :class:`ScreenedOut` when the onboarding quiz turned them away (the next one may pass)."""

    def known(self) -> int:
        """How many participants have arrived so far (the next newcomer gets number known + 1)."""

    def come_back(self, key: str) -> Arrival | None:
        """A participant who arrived before opens their link again; None when they may not."""

    def leave(self, key: str, how: Literal["return", "time-out"]) -> bool:
        """They stop for good: return the study, or let it time out. True when that reached a
        platform (their work is being freed now), False when they just go quiet."""

    def finish(self, key: str) -> str | None:
        """They say they are done; returns the completion code they got (None: no code step)."""

    def close(self) -> None: ...


class DirectDoor:
    """Claims straight from the collection; leaving is going quiet (no platform)."""

    def __init__(self, collection: Collection):
        self.collection = collection

    def arrive(self, key: str) -> Arrival | None:
        return self.come_back(key)

    def known(self) -> int:
        return len(self.collection.participants())

    def come_back(self, key: str) -> Arrival | None:
        result = self.collection.claim(key, "simulated")
        if not isinstance(result, Claimed):
            return None
        return Arrival(result.participant, self.collection.owner.passwords(result.participant.username))

    def leave(self, key: str, how: Literal["return", "time-out"]) -> bool:
        return False  # they go quiet: the inactivity window releases their work

    def finish(self, key: str) -> str | None:
        return None

    def close(self) -> None:
        return None


def simulated_prolific_id(seed: int, key: str) -> str:
    """A stable, Prolific-shaped id (24 hex digits) for a simulated participant."""
    return hashlib.sha256(f"{seed}\x1fprolific\x1f{key}".encode()).hexdigest()[:24]


class ProlificDoor:
    """Through the fake Prolific and the portal, as a person's browser would go."""

    def __init__(self, collection: Collection, seed: int, portal_url: str, prolific: Any, fake_app_url: str,
                 timeout_s: float = 60.0, onboard: Onboard | None = None, verify: Any = True):
        self.collection = collection
        # what the participants' browsers trust (httpx's verify: the public profile's CA)
        self.verify = shared_context() if verify is True else verify
        self.seed = seed
        self.portal_url = portal_url.rstrip("/")
        self.prolific = prolific  # a ProlificClient for the fake's API (reading submissions)
        self.fake = httpx.Client(base_url=fake_app_url.rstrip("/"), timeout=timeout_s, verify=shared_context())
        self.timeout_s = timeout_s
        self._browsers: dict[str, httpx.Client] = {}  # one cookie jar per participant, this visit
        self.sleep = time.sleep
        self._sessions: dict[str, Any] | None = None
        self.onboard = onboard  # what each person does in the portal's onboarding (the crowd sets it)
        platform = collection.store.platform_study(collection.info.id)
        if platform is None:
            raise CrowdprefError(f"{collection.dataset_name} has no Prolific study yet: run the recruit flow first")
        self.study_id = platform.external_id

    def _submissions(self) -> dict[str, Any]:
        if self._sessions is None:
            self._sessions = {s.participant_id: s for s in self.prolific.list_submissions(self.study_id)}
        return self._sessions

    def _browser(self, key: str) -> httpx.Client:
        if key not in self._browsers:
            self._browsers[key] = httpx.Client(timeout=self.timeout_s, follow_redirects=False, verify=self.verify)
        return self._browsers[key]

    def arrive(self, key: str) -> Arrival | ScreenedOut | None:
        pid = simulated_prolific_id(self.seed, key)
        waited = 0.0
        while True:
            reply = self.fake.post(f"/_fake/studies/{self.study_id}/arrive", json={"participant_id": pid})
            # a paced launch full for now: Prolific's crowd keeps coming, and the portal's pacer
            # opens the next step as the last one's people reach their work
            if reply.status_code == 409 and "no places" in reply.text and waited < PLACE_WAIT_S and self._paced_more():
                self.sleep(PLACE_POLL_S)
                waited += PLACE_POLL_S
                continue
            break
        if reply.status_code in (403, 409):  # no places / blocklisted: Prolific would not show the study
            return None
        reply.raise_for_status()
        self._sessions = None
        arrival = self._enter(key, reply.json()["url"])
        if isinstance(arrival, ScreenedOut):
            return arrival
        if arrival is None:  # the portal said full / not eligible: they return the study, as it asks
            self.fake.post(f"/_fake/submissions/{reply.json()['session_id']}/return").raise_for_status()
        return arrival

    def _paced_more(self) -> bool:
        """Whether the launch pace's last decision (:func:`crowdpref.recruitment.last_pacing`) has
        places still to open."""
        from crowdpref.recruitment import last_pacing

        last = last_pacing(self.collection.store, self.collection.info.id) or {}
        try:
            return int(last.get("target", 0)) > int(last.get("open", 0))
        except (ValueError, TypeError):
            return False

    def known(self) -> int:
        """Everyone who took a place on the study so far (also those the portal turned away)."""
        return len(self._submissions())

    def come_back(self, key: str) -> Arrival | None:
        submission = self._submissions().get(simulated_prolific_id(self.seed, key))
        if submission is None or submission.status not in ("ACTIVE", "RESERVED"):
            return None
        url = (f"{self.portal_url}/s/{self.collection.spec.study_name}/{self.collection.spec.key}"
               f"?PROLIFIC_PID={submission.participant_id}&STUDY_ID={self.study_id}&SESSION_ID={submission.id}")
        arrival = self._enter(key, url)
        return arrival if isinstance(arrival, Arrival) else None

    def _enter(self, key: str, url: str) -> Arrival | ScreenedOut | None:
        browser = self._browser(key)
        entry = self._open(browser, url)
        if entry.status_code != 303:
            if entry.status_code in (403, 409, 410):  # full, excluded, given back: the portal said no
                return None
            raise CrowdprefError(f"the portal answered {entry.status_code} to a simulated arrival: see its log")
        location = _absolute(url, entry.headers["location"])
        if urlsplit(location).path.endswith("/onboarding"):
            walked = self._onboarding(key, browser, location)
            if isinstance(walked, ScreenedOut):
                return walked
            location = walked
        welcome = browser.get(location)
        if welcome.status_code != 200:
            raise CrowdprefError(f"the portal's welcome page answered {welcome.status_code}")
        action = _absolute(url, re.search(r'<form method="post" action="([^"]+)"', welcome.text).group(1))
        start = self._until_prepared(browser, action, browser.post(action))
        session = pages.read_argilla_session(start.text) if start.status_code == 200 else None
        if session is None:
            raise CrowdprefError(f"the portal's start answered {start.status_code} without an Argilla session")
        # a minted Argilla session (the portal and Argilla share an origin), then the work frame
        token, work_path = session
        work = browser.get(_absolute(url, work_path))
        if work.status_code != 200 or pages.frame_target(work.text) is None:
            raise CrowdprefError(f"the portal's work frame answered {work.status_code} with no Argilla page")
        participant = self.collection.store.participant(self.collection.info.id, argilla_session.username_of(token))
        return Arrival(participant, None, token)

    @staticmethod
    def _until_prepared(browser: httpx.Client, url: str, start: httpx.Response) -> httpx.Response:
        """*Start*'s answer once the work is ready: while the portal answers with the page that
        says it is being prepared (admission first, :mod:`crowdpref.portal.prepare`), reload it
        as its meta refresh says, as a browser does (at most :data:`PREPARED_WITHIN_S`)."""
        deadline = time.monotonic() + PREPARED_WITHIN_S
        while (refresh := pages.preparing_refresh(start.text)) is not None:
            if time.monotonic() > deadline:
                raise CrowdprefError(f"the portal did not prepare a simulated participant's work within "
                                     f"{PREPARED_WITHIN_S:.0f} s: see its log")
            time.sleep(refresh[0])
            start = browser.get(_absolute(url, refresh[1]))
        return start

    def _onboarding(self, key: str, browser: httpx.Client, url: str) -> str | ScreenedOut:
        """Walk the portal's onboarding as a person does, page by page, answering what
        :attr:`onboard` says this person answers: the introduction's Continue, each practice
        question, the quiz (again after a failed attempt while attempts are left). Returns the
        welcome page's URL once they passed (the portal claimed their work), or
        :class:`ScreenedOut` once the quiz screened them out."""
        if self.onboard is None:
            raise CrowdprefError("the portal asks for onboarding but the simulated crowd was given no way through it")
        run = self.onboard(key)
        attempts = 0
        for _ in range(ONBOARDING_STEPS):
            page = browser.get(url)
            if page.status_code == 303:
                return _absolute(url, page.headers["location"])  # passed: on to the welcome page
            if page.status_code != 200:
                raise CrowdprefError(f"the portal's onboarding page answered {page.status_code}")
            if "/onboarding/" not in page.text:  # the screened-out page
                return self._screened_out(key, browser, page.text)
            method, action = FORM.search(page.text).groups()
            target = _absolute(url, action.replace("&amp;", "&"))
            if action.endswith("/onboarding/practice"):
                index = int(re.search(r'name="index" value="(\d+)"', page.text).group(1))
                browser.post(target, data={"index": str(index), "choice": str(run.practice[index])})
            elif action.endswith("/onboarding/quiz"):
                answers = run.attempts[min(attempts, len(run.attempts) - 1)]
                attempts += 1
                reply = browser.post(target, data={f"q{i}": str(a) for i, a in enumerate(answers)})
                if reply.status_code == 303:
                    return _absolute(url, reply.headers["location"])
                if "Try again" not in reply.text:
                    return self._screened_out(key, browser, reply.text)
            elif method == "post":
                browser.post(target)
        raise CrowdprefError(f"a simulated person walked {ONBOARDING_STEPS} onboarding pages without an end")

    def _screened_out(self, key: str, browser: httpx.Client, page: str) -> ScreenedOut:
        """The screened-out page: there is no code to enter (the portal gives Prolific the
        researcher's screen-out code itself, after its reply; the Prolific sync is the backstop)."""
        self._sessions = None  # the portal changes their submission's status soon
        return ScreenedOut()

    def _open(self, browser: httpx.Client, url: str) -> httpx.Response:
        """Open the study link as a person does: a 503 ("please wait and open the link again")
        is tried again after a pause, up to :data:`ENTRY_TRIES` times (pauses shortened)."""
        for attempt in range(1, ENTRY_TRIES + 1):
            entry = browser.get(url)
            if entry.status_code != 503 or attempt == ENTRY_TRIES:
                return entry
            self.sleep(ENTRY_PAUSE_S * attempt)
        raise AssertionError("unreachable")

    def leave(self, key: str, how: Literal["return", "time-out"]) -> bool:
        submission = self._submissions().get(simulated_prolific_id(self.seed, key))
        if submission is None or submission.status not in ("ACTIVE", "RESERVED"):
            return False  # already returned, timed out or finished
        self.fake.post(f"/_fake/submissions/{submission.id}/{how}").raise_for_status()
        self._sessions = None
        return True

    def finish(self, key: str) -> str | None:
        """Open the portal's finish page, follow the way back to Prolific with the code."""
        browser = self._browser(key)
        done = browser.get(f"{self.portal_url}/s/{self.collection.spec.study_name}/{self.collection.spec.key}/done")
        match = CODE_IN_PAGE.search(done.text) if done.status_code == 200 else None
        if match is None:
            return None
        code = match.group(1)
        href = re.search(r'href="([^"]*submissions/complete\?cc=[^"]+)"', done.text)
        if href is not None:
            browser.get(href.group(1).replace("&amp;", "&"))  # Prolific's completion page
        submission = self._submissions().get(simulated_prolific_id(self.seed, key))
        if submission is not None:  # what Prolific does when the participant lands there signed in
            self.fake.post(f"/_fake/submissions/{submission.id}/complete", json={"code": code}).raise_for_status()
            self._sessions = None
        return code

    def close(self) -> None:
        for browser in self._browsers.values():
            browser.close()
        self._browsers.clear()
        self.fake.close()


def _absolute(base: str, location: str) -> str:
    if location.startswith("http"):
        return location
    parts = urlsplit(base)
    return f"{parts.scheme}://{parts.netloc}{location}"


def open_door(config: Any, settings: Any, collection: Collection, onboard: Onboard | None = None) -> Door:
    """The door the study's config asks for (``crowd.arrive_via``). ``onboard``: what each
    simulated person does in the portal's onboarding (:meth:`SimulatedCrowd.onboarding_walker`)."""
    if config.crowd.arrive_via == "direct":
        return DirectDoor(collection)
    from crowdpref.prolific import ProlificClient
    from crowdpref.recruitment import prolific_target

    target = prolific_target(config, settings)
    if target is None or not target.fake:
        raise CrowdprefError(f"study '{config.name}': the simulated crowd arrives only through the fake Prolific "
                             "(participants: simulated)")
    client = ProlificClient(target.api_url, target.token, timeout_s=30.0)
    return ProlificDoor(collection, config.seed, settings.portal_public_url, client, target.app_url,
                        onboard=onboard)
