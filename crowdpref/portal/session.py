"""Signing a participant in to Argilla: *Start* hands the browser an Argilla session minted by
the portal (:class:`TokenSignIn`), on the origin the portal and Argilla share (every stack
``crowdpref up`` starts: :func:`~crowdpref.portal.argilla_session.check_one_origin`)."""

from __future__ import annotations

from dataclasses import dataclass

from crowdpref.collection import Collection
from crowdpref.errors import CrowdprefError
from crowdpref.portal import argilla_session
from crowdpref.portal.prepare import Preparation
from crowdpref.portal.refusal import RETURN_WORDING, Refusal, unavailable
from crowdpref.portal.studies import Key
from crowdpref.store import ACTIVE, COMPLETE, ParticipantState


def first_item_path(dataset_id: str) -> str:
    """Argilla's page of a dataset's first pending record (annotation mode), on Argilla's origin."""
    return f"/dataset/{dataset_id}/annotation-mode"


def work_path(study: str, key: str) -> str:
    """The work frame's address on the portal (the portal's bar over Argilla)."""
    return f"/s/{study}/{key}/work"


@dataclass(frozen=True)
class TokenSignIn:
    """A minted Argilla session for the browser: ``token`` (secret: never logged, never in a
    URL), its expiry ``expires`` (Unix seconds) and the Argilla page to open with it."""

    token: str
    expires: int
    target: str

    def __repr__(self) -> str:
        return f"TokenSignIn(expires={self.expires}, target={self.target!r})"


class AlreadyFinished(CrowdprefError):
    """A participant who completed asks to be signed in again: their credentials have expired;
    the finish page (their code) is where they belong."""


class Sessions:
    """The :class:`~crowdpref.portal.service.Portal`'s sign-in (its ``settings``, ``clock`` and
    Argilla's signing key; the entry's :meth:`~Entry.participant`)."""

    def _signing_in(self, study: str, key: Key, cookie: str | None) -> tuple[Collection, ParticipantState]:
        collection, participant = self.participant(study, key, cookie)
        if participant.status == COMPLETE:
            raise AlreadyFinished("the participant completed: no more sign-ins")
        if participant.status not in (ACTIVE, COMPLETE):
            raise Refusal(410, "Place given back", "Your place in this study was given back, so it cannot continue. "
                          + RETURN_WORDING)
        return collection, participant

    def sign_in(self, study: str, key: Key, cookie: str | None) -> TokenSignIn:
        """Where *Start* sends the participant: a :class:`TokenSignIn` (an Argilla session token
        minted with Argilla's signing key - no bcrypt, no password in any URL) that a portal page
        stores for Argilla on their shared origin, then opens the work frame.
        :class:`AlreadyFinished` once they completed."""
        collection, participant = self._signing_in(study, key, cookie)
        token, expires = self._mint(collection, participant)
        return TokenSignIn(token, expires, work_path(study, key))

    def preparation(self, study: str, key: Key, cookie: str | None) -> Preparation:
        """Where the participant's workspace in Argilla stands (*Start* and the waiting page ask
        before they sign in): ready, or the job preparing it - started again here when an
        earlier one failed (after its back-off, :mod:`crowdpref.portal.prepare`). Refused as
        :meth:`sign_in` is (:class:`AlreadyFinished`, a place given back)."""
        collection, participant = self._signing_in(study, key, cookie)
        return self.preparer.prepare(collection, participant)

    def _mint(self, collection: Collection, participant: ParticipantState) -> tuple[str, int]:
        """An Argilla session for the participant, signed with Argilla's key (read once). It
        lasts no longer than the study's maximum time (its inactivity window, which is the
        Prolific study's ``maximum_allowed_time``), at most a day: Argilla checks only a session's
        signature and expiry, so a session that outlived the place would still open the work."""
        try:
            secret = self.signing_key()
        except CrowdprefError as exc:
            raise unavailable(str(exc), "We cannot open your work right now. Please wait a minute and try "
                               "again.") from None
        lifetime_s = min(argilla_session.TOKEN_LIFETIME_S, max(60, int(collection.spec.inactive_after_s)))
        return argilla_session.mint_token(secret, participant.username, now=self.clock(), lifetime_s=lifetime_s)

    def signing_key(self) -> str:
        """Argilla's token-signing key, read from the secrets folder once (what the sessions the
        portal mints and the sessions :mod:`crowdpref.portal.answer_guard` verifies are signed
        with); :class:`CrowdprefError` while it cannot be read."""
        if self._argilla_secret is None:
            self._argilla_secret = argilla_session.load_secret(self.settings.secrets_dir)
        return self._argilla_secret

    def _first_item_url(self, participant: ParticipantState) -> str:
        """Argilla's page of the participant's first pending item (their dataset's annotation
        mode, :func:`first_item_path`), or Argilla's home when no dataset is known yet."""
        base = self.settings.argilla_participant_url
        return f"{base}{first_item_path(participant.dataset_id)}" if participant.dataset_id else f"{base}/"
