"""The portal's webhooks. Prolific's (:class:`ProlificWebhooks`): verified, de-duplicated and
recorded in one store transaction at once; the work a freeing status asks for runs after the
reply (on the :class:`~crowdpref.portal.after_reply.AfterReply` pool). Argilla's
(:class:`ArgillaWebhooks`): registered when the portal starts, stood down when it stops, each
response event recorded as activity (store writes only)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import Any

from crowdpref.errors import CrowdprefError, first_line
from crowdpref.portal import argilla_hooks
from crowdpref.portal.refusal import Refusal, log
from crowdpref.recruitment import FREEING, WEBHOOK_SECRET_META as WEBHOOK_SECRET
from crowdpref.store import ACTIVE, COMPLETE, RELEASING, ParticipantState

SECRET_READ_S = 30.0  # Prolific's webhook secret, read from the store at most this often (and on a mismatch)


class ProlificWebhooks:
    """The :class:`~crowdpref.portal.service.Portal`'s Prolific webhooks (its ``store``,
    ``after_reply`` and the secret it last read)."""

    def prolific_webhook(self, headers: Mapping[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        """Verify, de-duplicate and record one Prolific webhook; returns (HTTP status, reply) at
        once. De-duplicated on its ``X-Event-ID`` and on the hash of what it signed
        (:func:`~crowdpref.prolific.verify_webhook`): a retry, or a replay of the same signed
        body under a new id, is answered ``duplicate`` and changes nothing. A status that frees
        the participant's place (RETURNED, TIMED-OUT, REJECTED) is recorded as ``pending`` with
        the participant, in the same row that de-duplicates the
        delivery, and their work is released after the reply (:meth:`run_delivery`, on
        :attr:`after_reply`); a portal that dies first runs it when it starts again
        (:meth:`resume_deliveries`). One store transaction (:meth:`Store.record_status_delivery`:
        the participant found, the delivery and its event written), no Argilla call."""
        from crowdpref.prolific import WebhookRejected, verify_webhook

        secret = self._webhook_secret()
        if secret is None:
            log.warning("503: Prolific webhook refused: no webhook secret configured (run `crowdpref prolific-webhooks`)")
            return 503, {"error": "no webhook secret configured: run `crowdpref prolific-webhooks`"}
        try:
            try:
                verified = verify_webhook(secret, headers, body, now=self.clock())
            except WebhookRejected as exc:
                fresh = self._webhook_secret(again=True)  # a secret replaced since it was read
                if exc.status != 401 or fresh in (None, secret):
                    raise
                verified = verify_webhook(fresh, headers, body, now=self.clock())
        except WebhookRejected as exc:
            return exc.status, {"error": exc.reason}
        event_id, signed = verified.event_id, verified.signed_hash
        if verified.id_missing:
            log.warning("Prolific webhook without an X-Event-ID: de-duplicated on a hash of its timestamp and body")
        try:
            payload = json.loads(body)
            if not isinstance(payload, dict):
                raise ValueError("not an object")
        except ValueError:
            return 400, {"error": "body is not a JSON object"}
        kind = str(payload.get("event_type") or "submission.status.change")
        if kind != "submission.status.change":
            if not self.store.record_delivery(event_id, "prolific", kind, "ignored", signed_hash=signed):
                return 200, {"duplicate": True}
            return 200, {"outcome": "ignored"}
        session, person = payload.get("resource_id"), payload.get("participant_id")
        recorded = self.store.record_status_delivery(
            event_id, "prolific", kind, str(payload.get("status", "")).upper(), freeing=FREEING,
            session_id=session if isinstance(session, str) and session else None,
            key=person if isinstance(person, str) else None, signed_hash=signed)
        if recorded is None:  # recorded before (by its event id, or its signed content under another
            return 200, {"duplicate": True}  # id), or by a concurrent request
        if recorded.pending:
            self.after_reply.submit(event_id)
        return 200, {"outcome": recorded.outcome}

    def _webhook_secret(self, again: bool = False) -> str | None:
        """Prolific's webhook secret from the store, read once per :data:`SECRET_READ_S` (``again``:
        now - a signature that fails with the secret held may be signed with a new one)."""
        now = time.monotonic()
        held = self._secret_read
        if again or held is None or held[1] is None or now - held[0] >= SECRET_READ_S:  # none yet: ask again
            held = self._secret_read = (now, self.store.get_meta(WEBHOOK_SECRET))
        return held[1]

    def run_delivery(self, event_id: str) -> str | None:
        """Do the work a pending delivery asks for - release the participant's unsubmitted work
        (or withdraw them when they had completed) - and mark it done; None when it was done
        already. A release that began and did not finish (the participant left ``releasing``)
        is finished."""
        pending = self.store.pending_delivery(event_id)
        if pending is None:
            return None
        info, participant, status = pending
        outcome = self._free(info, participant, status)
        self.store.finish_delivery(event_id, outcome)
        log.info("Prolific webhook handled after its reply: %s", outcome)
        return outcome

    def resume_deliveries(self) -> int:
        """At start-up: run again the work of every delivery a portal replied to and did not
        finish (it died, or was stopped). Returns how many were submitted."""
        pending = self.store.pending_deliveries("prolific")
        if pending:
            log.info("%d Prolific webhook(s) replied to before the portal stopped: finishing their work", len(pending))
        return sum(self.after_reply.submit(event_id) for event_id in pending)

    def _free(self, info: Any, participant: ParticipantState, status: str) -> str:
        if participant.status == COMPLETE:  # finished, then returned / rejected / timed out: they withdrew
            from crowdpref.withdrawals import withdraw_on_platform

            try:
                target: Any = self.collection(info.study, info.key)
            except Refusal:
                target = self.store  # (their records stay in Argilla: `crowdpref withdraw` deletes them)
            try:
                done = withdraw_on_platform(target, participant, status, info, via=" (webhook)")
            except CrowdprefError:
                return f"{status}: withdrawal failed; `crowdpref withdraw` or the next sync repeats it"
            return f"{status}: {'withdrawn' if done and done.now else 'already withdrawn'}"
        if participant.status not in (ACTIVE, RELEASING):
            return f"{status}: nothing held"
        try:
            collection = self.collection(info.study, info.key)
        except Refusal:
            if participant.status == RELEASING:
                return f"{status}: release begun, the next monitoring pass finishes it"
            self.store.request_drop(info.id, participant.username)
            return f"{status}: drop requested (study config not found here)"
        try:
            if participant.status == RELEASING:  # begun by a portal that died mid-release: finish it
                collection.finish_release(participant)
                return f"{status}: work released"
            released = collection.release(participant, f"{status} on Prolific")
        except CrowdprefError:
            return f"{status}: release begun, the next monitoring pass finishes it"
        return f"{status}: work released" if released else f"{status}: nothing held"


class ArgillaWebhooks:
    """The :class:`~crowdpref.portal.service.Portal`'s Argilla webhooks (its ``settings`` and
    ``store``)."""

    def register_argilla_webhook(self, owner: Any | None = None) -> str:
        """Make Argilla report participants' responses to this portal (``/hooks/argilla``): the
        webhook is found or created on the configured Argilla, its secret kept in the store.
        Idempotent; returns the webhook id."""
        if owner is None:
            from crowdpref.argilla_client import owner_for

            owner = owner_for(self.settings, timeout_s=10.0)
        return argilla_hooks.register(owner, self.store, argilla_hooks.hook_url(self.settings))

    def stand_down_argilla_webhook(self) -> None:
        """When the portal stops: :func:`argilla_hooks.stand_down` on the configured Argilla.
        Never raises (Argilla may be down already: monitoring polls either way)."""
        from crowdpref.argilla_client import owner_for

        def disable(webhook_id: str) -> None:
            owner = owner_for(self.settings, timeout_s=5.0)
            try:
                owner.disable_webhook(webhook_id)
            finally:
                owner.close()

        try:
            if argilla_hooks.stand_down(self.store, self.settings.argilla_api_url, disable):
                log.info("Argilla webhook disabled: monitoring polls until the portal starts again")
        except Exception as exc:  # noqa: BLE001 - stopping must not fail
            reason = first_line(exc)
            log.warning("Argilla webhook not disabled (%s): monitoring polls anyway", reason)

    def register_argilla_webhook_in_background(self, retry_s: float = 10.0) -> threading.Thread:
        """:meth:`register_argilla_webhook` from a daemon thread, retried until Argilla answers
        (the portal may start before it). Until then monitoring polls, as without webhooks."""
        def run() -> None:
            while True:
                try:
                    self.register_argilla_webhook()
                    log.info("Argilla webhook registered: responses are reported to %s", argilla_hooks.PATH)
                    return
                except CrowdprefError as exc:
                    reason = first_line(exc)
                except Exception as exc:  # noqa: BLE001 - keep trying; the portal serves meanwhile
                    reason = exc.__class__.__name__
                log.warning("Argilla webhook not registered yet (%s); retrying in %g s", reason, retry_s)
                time.sleep(retry_s)

        thread = threading.Thread(target=run, name="argilla-webhook", daemon=True)
        thread.start()
        return thread

    def argilla_webhook(self, headers: Mapping[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        """Verify one of Argilla's response events and record it: the participant is marked as
        having activity (the next monitoring pass reads them from Argilla) and, when it is their
        own submitted answer to an item they hold, the submission counts now. Store writes only,
        no Argilla call. Returns (HTTP status, reply); the reply names no participant."""
        secret = self.store.get_meta(argilla_hooks.SECRET_META)
        if secret is None:
            log.warning("503: Argilla webhook refused: no Argilla webhook is registered for this portal yet")
            return 503, {"error": "no Argilla webhook is registered for this portal"}
        try:
            argilla_hooks.verify(secret, headers, body)
        except argilla_hooks.WebhookRejected as exc:
            return 401, {"error": str(exc)}
        try:
            payload = json.loads(body)
        except ValueError:
            return 400, {"error": "body is not JSON"}
        event = argilla_hooks.parse(payload)
        if event is None:
            return 200, {"outcome": "ignored"}
        named = self.store.note_activity(event.dataset_id, event.workspace)
        if not named:
            return 200, {"outcome": "not a participant's dataset"}
        counted = 0
        for info, participant in named:
            if event.kind == "response.deleted" or participant.status != ACTIVE or event.username != participant.username:
                continue  # someone else's answer in their workspace never counts (the read decides)
            submitted = {}
            if event.status == "submitted" and event.record_external_id in participant.held:
                submitted[event.record_external_id] = event.updated_at or self.clock()
            counted += self.store.record_progress(info.id, participant.id, submitted, event.updated_at)
        return 200, {"outcome": "activity recorded", "counted": counted}
