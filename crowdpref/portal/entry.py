"""Who arrives at the portal and who comes back: the entry link verified (an invitation's
signature, or the Prolific ids checked with Prolific, :meth:`Entry.visitor`), their work claimed
(:meth:`Entry.enter`; onboarding first where the study has it) and the portal's signed cookie
that recognises them afterwards (:meth:`Entry.participant`)."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from itsdangerous import BadSignature, SignatureExpired

from crowdpref.collection import Collection
from crowdpref.config import StudyConfig
from crowdpref.errors import CrowdprefError
from crowdpref.onboarding import onboarding_of
from crowdpref.portal import links
from crowdpref.portal.onboarding import InOnboarding
from crowdpref.portal.prepare import Preparation
from crowdpref.portal.refusal import RETURN_WORDING, Refusal, log, one_line, unavailable
from crowdpref.portal.studies import Key
from crowdpref.store import COMPLETE, Claimed, Full, ParticipantState, Refused
from crowdpref.store.onboarding import PASSED
from crowdpref.store.results import OnboardingState

if TYPE_CHECKING:
    from crowdpref.portal.work import Finish

PROLIFIC_ID = re.compile(r"^[0-9a-fA-F]{24}$")
# Prolific statuses under which the person may (still) work or see their code
WORKING = ("RESERVED", "ACTIVE")
FINISHED = ("AWAITING REVIEW", "APPROVED")
COOKIE_MAX_AGE_S = 24 * 3600  # the portal's signed cookie: then "please start from your study link"


@dataclass(frozen=True)
class Visitor:
    """Who arrives, as the portal verified them. ``key`` is the claim key (a Prolific id or an
    invite key): secret, never logged."""

    key: str
    source: str  # prolific | invite | simulated
    session_id: str | None = None
    prolific_study_id: str | None = None

    def __repr__(self) -> str:
        return f"Visitor(source={self.source!r})"


@dataclass(frozen=True)
class Entered:
    study: str
    key: Key
    participant: ParticipantState | None  # None while they are in onboarding (nothing claimed yet)
    cookie: str  # signed: collection id + username; in onboarding: collection id + key hash + source
    finished: Finish | None = None  # they are done already: show this, no cookie, no sign-in
    onboarding: OnboardingState | None = None  # set: they go through onboarding first, nothing claimed
    preparing: Preparation | None = None  # their workspace in Argilla, prepared after the claim (prepare.py)


class Entry:
    """The :class:`~crowdpref.portal.service.Portal`'s arrivals and returning visitors (its
    ``store``, ``cookies``, ``invites``, ``_person_locks``, ``_prolific_studies``; the studies, limits, work and
    finish of the other parts)."""

    def visitor(self, study: str, key: Key, params: Mapping[str, str], client: str | None = None) -> Visitor:
        """Check the entry parameters (and, with Prolific, the submission they name). Nothing is
        allocated here. ``client``: the visitor's address (entries Prolific does not confirm
        count against it, see :meth:`throttle`; Prolific is asked within the portal's budget of
        calls, :meth:`submission`). A refusal made before any Prolific call counts against no
        limit."""
        config, _ = self.config(study, key)
        if config.participants == "invite":
            return Visitor(self._invitation(study, key, params, config), "invite")
        pid, study_id, session_id = prolific_ids(params)
        source = "simulated" if config.participants == "simulated" else "prolific"
        client_api = self.prolific(config)
        if client_api is None:  # an unverified pilot (prolific.verify: false): the ids are all we check
            if config.participants == "prolific" and config.prolific.verify:  # (the config refuses this)
                raise unavailable(f"study '{study}' cannot verify arrivals: Prolific is not enabled",
                                   "This study cannot be opened right now. Please contact the researchers.")
            if study not in self._unverified_logged:
                self._unverified_logged.add(study)
                log.warning("study '%s' is an UNVERIFIED pilot (prolific.verify: false): arrivals are not checked "
                            "with Prolific, anyone who forms a link gets work", study)
            return Visitor(pid, source, session_id, study_id)
        external_id = self._prolific_study_id(self.collection(study, key).info.id, study)
        if external_id is None:
            raise Refusal(409, "Not open yet", "This study is not open yet. " + RETURN_WORDING)
        if external_id != study_id:  # no Prolific call: counted against nothing
            raise Refusal(403, "Wrong study", "This link belongs to another Prolific study. " + RETURN_WORDING)
        from crowdpref.prolific import ProlificError, ProlificNotFound

        try:
            submission = self.submission(client_api, study_id, session_id, pid, client)
        except ProlificNotFound:
            raise Refusal(403, "Submission not found",
                          "Prolific does not know this session. Please open the study from Prolific again.") from None
        except ProlificError as exc:
            raise unavailable(f"Prolific unreachable: {one_line(exc)}", "We cannot reach Prolific right now. "
                               "Please wait a minute and open the link again.") from None
        if submission.status not in WORKING + FINISHED:
            raise Refusal(409, "Submission closed",
                          f"Prolific says your submission is {submission.status.lower()}, so it cannot continue.")
        return Visitor(pid, source, session_id, study_id)

    def _prolific_study_id(self, cid: int, study: str) -> str | None:
        """The Prolific study of collection ``cid`` (None: not published yet), read from the
        store until it has one, then kept (the store never changes it: one per collection). Kept
        by study name too: a deleted study's collection id can come back (SQLite reuses the
        highest id; the pre-flight's rehearsals are deleted)."""
        known = self._prolific_studies.get((study, cid))
        if known is None:
            platform = self.store.platform_study(cid)
            if platform is None:
                return None
            known = self._prolific_studies[(study, cid)] = platform.external_id
        return known

    def _invitation(self, study: str, key: Key, params: Mapping[str, str], config: StudyConfig) -> str:
        """The claim key of a valid invitation link (``invite:<id>``), or a Refusal (410 expired,
        403 not ours): its signature is all that is checked, nothing is counted."""
        token = params.get("invite", "")
        try:
            invite = self.invites.loads(token, max_age=config.invites.lifetime_days * 86400)
        except SignatureExpired:
            raise Refusal(410, "Link expired", "This invitation link has expired. Please ask the researchers "
                          "for a new one.") from None
        except BadSignature:
            raise Refusal(403, "Link not valid",
                          "This invitation link is not valid. Please use the exact link you were sent.") from None
        if not isinstance(invite, dict) or invite.get("study") != study or invite.get("key") != key:
            raise Refusal(403, "Link not valid", "This invitation link belongs to another study.")
        if self.store.invite_revoked(str(invite["id"])):  # `crowdpref revoke-invite`
            raise Refusal(403, "Link withdrawn", "This invitation link was withdrawn by the researchers. Please "
                          "ask them for a new one.")
        return f"invite:{invite['id']}"

    def invitation(self, study: str, key: Key, params: Mapping[str, str]) -> tuple[str, bool] | None:
        """For a ``participants: invite`` study, what an invitation link's GET shows: (the
        study's title, whether its person completed already - then "you are done"). The link is
        checked - signature, age, revocation - and NOTHING is claimed, so a mail or chat
        previewer that fetches it takes no place; the person's press of the page's button (a
        POST, :meth:`enter`) claims. None for any other study (its GET is the entry), and for
        a study the portal does not know (the entry, after its limits, says so)."""
        try:
            config, _ = self.config(study, key)
        except Refusal as refusal:
            if refusal.status == 404:  # no such study: the entry refuses it after its limits
                return None
            raise
        if config.participants != "invite":
            return None
        claim_key = self._invitation(study, key, params, config)
        info = self.store.find_collection(study, key)  # read only: nothing is opened for a previewer
        known = None if info is None else self.store.participant_by_key(info.id, claim_key)
        return config.title or config.name, known is not None and known.status == COMPLETE

    def recognised(self, study: str, key: Key, params: Mapping[str, str], cookie: str | None = None) -> bool:
        """Whether this entry's person is known already: their browser holds the portal's valid
        cookie for this study, or the store holds them (a claim, or an onboarding begun) under
        the id the entry names (its form checked, an invitation's signature too). No limit
        shared with strangers applies to them. Asked only where a limit would refuse them
        (one store read); an entry that names nobody valid is not known."""
        try:
            config, _ = self.config(study, key)
            claim_key = (self._invitation(study, key, params, config) if config.participants == "invite"
                         else prolific_ids(params)[0])
            collection = self.collection(study, key)
        except Refusal:
            return False
        if cookie:
            try:
                data = self.cookies.loads(cookie, max_age=COOKIE_MAX_AGE_S)
            except BadSignature:
                data = None
            if isinstance(data, dict) and data.get("c") == collection.info.id:
                return True
        return self.store.knows(collection.info.id, claim_key)

    def enter(self, study: str, key: Key, params: Mapping[str, str], client: str | None = None,
              cookie: str | None = None) -> Entered:
        """Throttle, verify the visitor, claim their work (the same work when they come back)
        in the store - durable, no call to Argilla - and start making it visible in their
        Argilla dataset off the request (``preparing``, :mod:`crowdpref.portal.prepare`). ``client``: the visitor's address (the
        app passes it; None: not limited per address); ``cookie``: the portal's cookie their
        browser sent (:meth:`recognised`). A participant who already completed gets
        ``finished`` (the "you are done" page), never a sign-in."""
        is_known = functools.cache(lambda: self.recognised(study, key, params, cookie))  # asked at most once
        self.throttle(study, key, params, client, known=is_known)
        visitor = self.visitor(study, key, params, client)
        collection = self.collection(study, key)
        person = self.store.key_hash(visitor.key)
        known = self.store.participant_by_key(collection.info.id, visitor.key)
        if known is not None and known.status == COMPLETE:  # an old link: "you are done", no sign-in
            return Entered(study, key, known, "", self._finished(study, key, collection, known))
        config, _ = self.config(study, key)
        onboarding = onboarding_of(config, key)
        if known is None and onboarding is not None:
            self._refuse_excluded(collection, visitor.key)  # before they spend time on onboarding
            state = self.store.onboarding_state(collection.info.id, person)
            if state is None or state.status != PASSED:  # onboarding first: nothing is claimed
                if state is None:
                    state = self.store.onboarding_start(collection.info.id, person, visitor.source, visitor.session_id)
                data = {"c": collection.info.id, "h": person, "src": visitor.source}
                if visitor.session_id:  # their own submission id: where a screen-out is paid (signed)
                    data["s"] = visitor.session_id
                cookie = self.cookies.dumps(data)
                return Entered(study, key, None, cookie, onboarding=state)
        with self._person_locks[int(person[:8], 16) % len(self._person_locks)]:  # two tabs: one claim
            result = self._claim(collection, visitor.key, visitor.source)
        participant = self._claimed(result)
        if participant.status == COMPLETE:  # finished between the look-up and the claim
            return Entered(study, key, participant, "", self._finished(study, key, collection, participant))
        if visitor.session_id and participant.session_hash != self.store.key_hash(visitor.session_id):
            self.store.record_session(collection.info.id, participant.id, visitor.session_id)
        self.store.log_event(collection.info.id, "entered", participant.id, source=visitor.source,
                             new=isinstance(result, Claimed) and result.new)
        cookie = self.cookies.dumps({"c": collection.info.id, "u": participant.username})
        return Entered(study, key, participant, cookie, preparing=self.preparer.prepare(collection, participant))

    def _claim(self, collection: Collection, key: str, source: str, key_hash: str | None = None) -> Any:
        try:
            return collection.claim(key, source, refill=True, key_hash=key_hash, visible=False)
        except Refusal:
            raise
        except (CrowdprefError, httpx.TransportError) as exc:  # the store (Argilla is not asked here)
            raise unavailable(f"claim failed: {one_line(exc)}", "Something went wrong while preparing your "
                               "work. Please wait a minute and open the link again.") from exc

    def _refuse_excluded(self, collection: Collection, key: str) -> None:
        """Study 2 refuses who took part in study 1: said before onboarding, not after it."""
        if collection.spec.exclude_from is None:
            return
        other = self.store.find_collection(collection.spec.study_name, collection.spec.exclude_from)
        if other is not None and self.store.participant_by_key(other.id, key) is not None:
            raise Refusal(403, "Not eligible", "You took part in the first part of this project, so you cannot "
                          "take part in this one. " + RETURN_WORDING)

    def _claimed(self, result: Any) -> ParticipantState:
        """The participant a claim gave work to, or the Refusal that says why not."""
        if isinstance(result, Full):
            raise Refusal(409, "Study full", "Sorry: all the work in this study is taken right now. " + RETURN_WORDING)
        if isinstance(result, Refused):
            if result.reason == "excluded":
                raise Refusal(403, "Not eligible", "You took part in the first part of this project, so you cannot "
                              "take part in this one. " + RETURN_WORDING)
            raise Refusal(410, "Place given back", "Your place in this study was given back (the study was returned, "
                          "timed out, or inactive for too long), so it cannot continue. " + RETURN_WORDING)
        assert isinstance(result, Claimed)
        return result.participant

    # returning visitors (the signed cookie) --------------------------------------------------------
    def _cookie(self, collection: Collection, cookie: str | None, kept: str) -> dict[str, Any]:
        """The portal's signed cookie for ``collection``, or 401 (not ours, expired - a
        SignatureExpired is a BadSignature after COOKIE_MAX_AGE_S -, or another study's)."""
        try:
            data = self.cookies.loads(cookie or "", max_age=COOKIE_MAX_AGE_S)
        except BadSignature:
            raise Refusal(401, "Please start from your study link",
                          "We do not recognise this browser. Please open the study from Prolific (or your "
                          f"invitation) again: {kept}.") from None
        if not isinstance(data, dict) or data.get("c") != collection.info.id:
            raise Refusal(401, "Please start from your study link",
                          "This browser belongs to another study. Please open the study from its link again.")
        return data

    def participant(self, study: str, key: Key, cookie: str | None) -> tuple[Collection, ParticipantState]:
        collection = self.collection(study, key)
        data = self._cookie(collection, cookie, "your work is kept")
        if "u" not in data:  # still in onboarding: nothing claimed yet
            raise InOnboarding("the cookie names a person in onboarding")
        return collection, self.store.participant(collection.info.id, str(data["u"]))

    def welcome(self, study: str, key: Key, cookie: str | None) -> tuple[StudyConfig, ParticipantState]:
        _, participant = self.participant(study, key, cookie)
        config, _ = self.config(study, key)
        return config, participant

    def invite_link(self, study: str, key: Key, invite_id: str) -> str:
        """A signed invitation link for one participant (``participants: invite`` studies): it
        opens a page whose button claims (:meth:`invitation`); ``crowdpref invite`` records
        ``invite_id`` so that the link can be revoked alone."""
        token = self.invites.dumps({"study": study, "key": key, "id": invite_id})
        return f"{links.entry_url(self.settings, study, key)}?invite={token}"


def prolific_ids(params: Mapping[str, str]) -> tuple[str, str, str]:
    """PROLIFIC_PID, STUDY_ID and SESSION_ID from the entry, checked for form (lower case)."""
    names = ("PROLIFIC_PID", "STUDY_ID", "SESSION_ID")
    values = [params.get(name, "") for name in names]
    missing = [name for name, value in zip(names, values) if not value]
    if missing:
        raise Refusal(400, "Link incomplete",
                      f"The link is missing {', '.join(missing)}. Please open the study from Prolific again.")
    bad = [name for name, value in zip(names, values) if not PROLIFIC_ID.fullmatch(value)]
    if bad:
        raise Refusal(400, "Link not valid",
                      f"The link's {', '.join(bad)} is not a Prolific id. Please open the study from Prolific again.")
    pid, study_id, session_id = (value.lower() for value in values)
    return pid, study_id, session_id
