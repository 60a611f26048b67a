"""The work frame (the portal's bar over Argilla), the progress it shows, and the finish page
(the completion code once Argilla confirms every item is submitted)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

from crowdpref.collection import Collection
from crowdpref.errors import CrowdprefError
from crowdpref.portal import links
from crowdpref.portal.prepare import FAILING_RETRY_S, NotReady, ready
from crowdpref.portal.refusal import RETURN_WORDING, Refusal, log, one_line, unavailable
from crowdpref.portal.studies import Key
from crowdpref.recruitment import prolific_target, released_by_crowdpref
from crowdpref.store import ACTIVE, COMPLETE, ParticipantState

PROGRESS_READ_S = 10.0  # the work frame's bar without Argilla's webhooks: one Argilla read per person per 10 s


@dataclass(frozen=True)
class WorkFrame:
    """The portal's page around Argilla (:meth:`Portal.work`): the Argilla page its frame opens
    (``target``: the participant's first item, on the origin the portal and Argilla share, where
    the browser holds the session :meth:`Portal.sign_in` minted) and how far the participant is."""

    target: str
    submitted: int
    total: int


@dataclass(frozen=True)
class Progress:
    """How many of their items a participant has submitted, as the work frame shows it."""

    submitted: int
    total: int
    done: bool
    given_back: bool = False  # released (returned, timed out, dropped) or withdrawn: nothing more to do here


@dataclass(frozen=True)
class Finish:
    """The finish page: ``code`` when every item is submitted, else how many are left."""

    done: bool
    submitted: int
    total: int
    code: str | None = None
    completion_url: str | None = None
    argilla_url: str | None = None


class Work:
    """The :class:`~crowdpref.portal.service.Portal`'s work frame, progress and finish (its
    ``settings``, ``store``, ``_progress_reads``; the session's sign-in checks)."""

    def work(self, study: str, key: Key, cookie: str | None) -> WorkFrame:
        """The work frame: the portal's bar (progress, the way to the finish page) over Argilla.
        Its frame opens the participant's first item, signed in by the session :meth:`sign_in`
        minted into the browser on the origin the portal and Argilla share.
        :class:`AlreadyFinished` once they completed."""
        collection, participant = self._signing_in(study, key, cookie)
        if not ready(participant):  # not visible in Argilla yet: the page that waits for it
            self.preparer.prepare(collection, participant)
            raise NotReady("the participant's workspace is being prepared")
        target = self._first_item_url(participant)
        return WorkFrame(target, len(participant.submitted), len(participant.assignments))

    def progress(self, study: str, key: Key, cookie: str | None) -> Progress:
        """What the work frame's bar shows. From the store, which Argilla's response webhooks
        keep current; where this portal receives none (no webhook registered with the Argilla it
        uses), read from Argilla, at most once per :data:`PROGRESS_READ_S` per participant."""
        collection, participant = self.participant(study, key, cookie)
        if participant.status == ACTIVE and not collection.webhooks_active():
            with self._progress_lock:
                due = self._progress_reads.take(participant.username, time.monotonic())
            if due:
                try:
                    participant = collection.refresh(participant)
                except (CrowdprefError, httpx.TransportError) as exc:  # the bar keeps what the store knows
                    log.warning("Argilla read for the work frame failed: %s", one_line(exc))
        return Progress(len(participant.submitted), len(participant.assignments), participant.status == COMPLETE,
                        given_back=participant.status not in (ACTIVE, COMPLETE))

    def finish(self, study: str, key: Key, cookie: str | None) -> Finish:
        """Check with Argilla that every item is submitted; then the completion code."""
        collection, participant = self.participant(study, key, cookie)
        if participant.status not in (ACTIVE, COMPLETE):
            if released_by_crowdpref(participant) and participant.withdrawn_at is None:
                # our own release (inactivity, the operator's drop): nothing they did wrong
                raise Refusal(410, "Please return the study", "Your work in this study was given to someone else "
                              "(after a long time without activity, or by the researchers), so it cannot be completed "
                              "any more. This is not held against you and the study will not be rejected. "
                              + RETURN_WORDING)
            raise Refusal(410, "Place given back", "Your place in this study was given back, so it cannot be "
                          "completed. " + RETURN_WORDING)
        if participant.status == COMPLETE:  # the store knows already (Argilla's webhook): no Argilla read
            return self._finished(study, key, collection, participant)
        try:
            participant = collection.refresh(participant)
        except (CrowdprefError, httpx.TransportError) as exc:
            refusal = unavailable(f"Argilla read failed on the finish page: {one_line(exc)}",
                                  "We cannot check your answers right now: the annotation server is busy. Your "
                                  "answers are kept; this page tries again by itself.")
            refusal.retry_after = FAILING_RETRY_S  # Retry-After, and the page reloads itself
            raise refusal from exc
        total = len(participant.assignments)
        submitted = len(participant.submitted)
        if participant.status != COMPLETE:
            return Finish(False, submitted, total, argilla_url=self._first_item_url(participant))
        return self._finished(study, key, collection, participant)

    def _finished(self, study: str, key: Key, collection: Collection, participant: ParticipantState) -> Finish:
        """The page of a participant who completed: their completion code and the way back to
        Prolific (an invite study: no way back)."""
        total, submitted = len(participant.assignments), len(participant.submitted)
        config, _ = self.config(study, key)
        code: str | None = self.store.completion_code(collection.info.id)
        completion = None
        if config.participants == "invite":  # an invitation needs no code: thanks, and what happens next
            code = None
        else:
            target = prolific_target(config, self.settings)
            completion = links.completion_url(self.settings, code, target.app_url if target else None)
        if not any(e["participant_id"] == participant.id for e in
                   self.store.events(collection.info.id, kinds=["completion_shown"])):
            self.store.log_event(collection.info.id, "completion_shown", participant.id)
        return Finish(True, submitted, total, code=code, completion_url=completion)
