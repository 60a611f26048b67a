"""The portal's side of a study's onboarding (before any work is claimed; the cookie holds the
key hash, never the raw id): the steps introduction -> practice -> quiz, the claim of who
passed, and the screen-out of who did not (its payment queued after the page's reply)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from crowdpref.collection import Collection
from crowdpref.config import StudyConfig
from crowdpref.errors import CrowdprefError
from crowdpref.onboarding import Graded, OnboardingConfig, grade, onboarding_of, passes
from crowdpref.portal.refusal import Refusal, log
from crowdpref.portal.studies import Key
from crowdpref.recruitment import prolific_target, recruits_on_prolific
from crowdpref.store import Claimed
from crowdpref.store.engine import StoreError
from crowdpref.store.onboarding import PASSED, SCREENED_OUT
from crowdpref.store.results import OnboardingState


@dataclass(frozen=True)
class Onboarder:
    """A person in a study's onboarding, as the portal's cookie names them: their key hash
    (never the raw id), where they came from, and where they stand."""

    collection: Collection
    config: StudyConfig
    onboarding: OnboardingConfig
    key_hash: str
    source: str
    state: OnboardingState
    # the Prolific submission they entered with (SESSION_ID, verified at the entry; from the signed
    # cookie): where a screen-out is paid. None: not on Prolific, or an older cookie (the sync pays)
    session_id: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"Onboarder(source={self.source!r}, status={self.state.status!r}, step={self.state.step!r})"


@dataclass(frozen=True)
class PracticeAnswer:
    index: int
    choice: int | None
    correct: bool


@dataclass(frozen=True)
class QuizResult:
    graded: Graded
    passed: bool
    state: OnboardingState


class InOnboarding(CrowdprefError):
    """The cookie names a person still in onboarding (no work claimed): their onboarding page."""


class Onboarded(CrowdprefError):
    """The cookie names a participant who claimed already: the welcome page is theirs."""



class Onboarding:
    """The :class:`~crowdpref.portal.service.Portal`'s onboarding (its ``store``, ``settings``,
    ``cookies``, ``screen_outs``; the entry's cookie and claim)."""

    def onboarder(self, study: str, key: Key, cookie: str | None) -> Onboarder:
        """The person in onboarding the cookie names. :class:`Onboarded` when the cookie is a
        participant's (they claimed already: the welcome page is theirs)."""
        collection = self.collection(study, key)
        data = self._cookie(collection, cookie, "where you were is kept")
        if "u" in data:
            raise Onboarded("the cookie names a participant who claimed their work")
        config, _ = self.config(study, key)
        onboarding = onboarding_of(config, key)
        if onboarding is None:  # switched off meanwhile: the entry link claims as before
            raise Refusal(409, "Please start from your study link",
                          "Please open the study from its link again to get your work.")
        person, source = str(data["h"]), str(data.get("src", ""))
        state = self.store.onboarding_state(collection.info.id, person)
        if state is None:
            state = self.store.onboarding_start(collection.info.id, person, source)
        session = data.get("s")
        if not (isinstance(session, str) and state.session_hash == self.store.key_hash(session)):
            session = None  # only the session the entry verified (and the store recorded, hashed)
        return Onboarder(collection, config, onboarding, person, source, state, session)

    def onboarding_next(self, study: str, key: Key, cookie: str | None) -> Onboarder:
        """The person goes on from the step they are at (introduction -> practice -> quiz; the
        last step without a quiz passes them)."""
        ob = self.onboarder(study, key, cookie)
        state = ob.state
        if state.status != "in_progress":
            return ob
        after = {"introduction": ["practice", "quiz", "done"], "practice": ["quiz", "done"]}.get(state.step, [])
        if state.step == "practice" and state.practice_answered < len(ob.onboarding.practice):
            return ob  # practice first (each question once)
        has = {"practice": bool(ob.onboarding.practice), "quiz": ob.onboarding.quiz is not None, "done": True}
        following = next((step for step in after if has[step]), None)
        if following is None:
            return ob
        state = self.store.onboarding_step(ob.collection.info.id, ob.key_hash, following)
        return replace(ob, state=state)

    def onboarding_practice(self, study: str, key: Key, cookie: str | None, index: int,
                            choice: int | None) -> tuple[Onboarder, PracticeAnswer]:
        """One practice answer, graded at once and recorded (never counted towards the study)."""
        ob = self.onboarder(study, key, cookie)
        items = ob.onboarding.practice
        if not 0 <= index < len(items):
            raise Refusal(400, "Question not found", "This practice question does not exist. Please go back and "
                          "answer the question shown.")
        correct = choice == items[index].answer
        state = ob.state
        if state.status == "in_progress":
            state = self.store.onboarding_practice(ob.collection.info.id, ob.key_hash, index, correct)
        return replace(ob, state=state), PracticeAnswer(index, choice, correct)

    def onboarding_quiz(self, study: str, key: Key, cookie: str | None,
                        answers: list[int | None]) -> tuple[Onboarder, QuizResult | None]:
        """Grade one quiz attempt and record it (one transaction: two tabs cannot use more
        attempts than the study allows). None: no attempt counted (they already passed, were
        screened out, or have no quiz); the Onboarder's state says where they are."""
        ob = self.onboarder(study, key, cookie)
        quiz = ob.onboarding.quiz
        if quiz is None or ob.state.status != "in_progress" or ob.state.step != "quiz":
            return ob, None
        graded = grade(quiz.items, answers[: len(quiz.items)])
        passed = passes(quiz, graded)
        try:
            state = self.store.onboarding_attempt(ob.collection.info.id, ob.key_hash, graded.score, passed,
                                                  quiz.attempts)
        except StoreError:  # used up, or passed, in another tab meanwhile
            state = self.store.onboarding_state(ob.collection.info.id, ob.key_hash) or ob.state
            return replace(ob, state=state), None
        return replace(ob, state=state), QuizResult(graded, passed, state)

    def onboarding_claim(self, study: str, key: Key, ob: Onboarder) -> str:
        """Someone who passed claims their work by their key hash (as at the entry); returns
        the participant's cookie. Refused (nothing claimed) unless they passed."""
        if ob.state.status != PASSED:
            raise Refusal(403, "Onboarding not finished", "Please finish the introduction and the quiz first.")
        collection = ob.collection
        with self._person_locks[int(ob.key_hash[:8], 16) % len(self._person_locks)]:
            result = self._claim(collection, "", ob.source, key_hash=ob.key_hash)
        participant = self._claimed(result)
        if isinstance(result, Claimed) and result.new:
            if ob.state.session_hash and participant.session_hash != ob.state.session_hash:
                # the Prolific session they entered with: webhooks name it (resource_id)
                self.store.record_session(collection.info.id, participant.id, session_hash=ob.state.session_hash)
            self.store.log_event(collection.info.id, "entered", participant.id, source=ob.source, new=True,
                                 onboarding=True)
        self.preparer.prepare(collection, participant)  # their workspace, off the request
        return self.cookies.dumps({"c": collection.info.id, "u": participant.username})

    def screened_out(self, study: str, key: Key, ob: Onboarder) -> tuple[str | None, bool]:
        """The screened-out page's way back to Prolific (None with an invitation) and whether
        crowdpref pays the screen-out itself. No code is ever shown: on a Prolific study crowdpref
        recruits on, their submission gets the researcher-actor screen-out code through the API
        (:func:`~crowdpref.recruitment.pay_screen_out`) after this reply, on :attr:`screen_outs`;
        a failure is logged and the Prolific sync pays it instead (it gives the code to every
        submission the store recorded as screened out, the backstop for an older cookie too).
        Without API access (an unverified pilot) nothing is paid automatically."""
        if ob.state.status != SCREENED_OUT or ob.config.participants == "invite":
            return None, False
        target = prolific_target(ob.config, self.settings)
        automatic = target is not None and recruits_on_prolific(ob.config)
        if automatic and ob.session_id:
            job = f"{ob.collection.info.id}:{ob.key_hash}"
            with self._lock:
                self._screen_out_jobs[job] = (ob.config, ob.collection.info.id, ob.key_hash, ob.session_id)
            self.screen_outs.submit(job)
        return (target.app_url if target else self.settings.prolific_app_url).rstrip("/") + "/", automatic

    def pay_screen_out(self, job: str) -> bool:
        """Run one screen-out payment :meth:`screened_out` queued (once per person: not again when
        the store records it paid). Never raises: a failure is logged (no ids) and left to the
        sync. True when it was paid now."""
        from crowdpref.recruitment import SCREEN_OUT_PAID, pay_screen_out, people_with

        with self._lock:
            queued = self._screen_out_jobs.pop(job, None)
        if queued is None:
            return False
        config, cid, person, session = queued
        try:
            if person in people_with(self.store, cid, SCREEN_OUT_PAID):
                return False
            client = self.prolific(config)
            if client is None:
                return False
            pay_screen_out(self.store, cid, client, session, person, via="portal")
            return True
        except Exception as exc:  # noqa: BLE001 - the sync pays it; the person's page is already shown
            log.warning("screen-out payment not made now (%s): the Prolific sync makes it", type(exc).__name__)
            return False
