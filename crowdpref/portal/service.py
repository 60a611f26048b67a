"""What the portal does, without the web framework: check who arrives, claim their work, say
where to go, recognise them when they are done, and act on Prolific's and Argilla's webhooks.

Every refusal is a :class:`Refusal` (HTTP status, title, a plain sentence for the person) and
is decided BEFORE anything is allocated. Prolific ids, session ids and passwords never appear
in a message, a log line or an event; the store keeps salted hashes only.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from itsdangerous import BadSignature, URLSafeSerializer

from crowdpref.collection import Collection
from crowdpref.config import StudyConfig, load_study
from crowdpref.errors import CrowdprefError
from crowdpref.portal import argilla_hooks, links
from crowdpref.recruitment import FREEING, WEBHOOK_SECRET_META as WEBHOOK_SECRET, ProlificTarget, prolific_target
from crowdpref.store import ACTIVE, COMPLETE, Claimed, Full, ParticipantState, Refused, Store

Key = Literal["study1", "study2"]
KEYS: tuple[Key, ...] = ("study1", "study2")
PROLIFIC_ID = re.compile(r"^[0-9a-fA-F]{24}$")
# Prolific statuses under which the person may (still) work or see their code
WORKING = ("RESERVED", "ACTIVE")
FINISHED = ("AWAITING REVIEW", "APPROVED")
RETURN_WORDING = ("Please return your submission on Prolific (click \u201cReturn study\u201d in the Prolific app) "
                  "so that it does not count against you.")
ENTRIES_PER_WINDOW, ENTRY_WINDOW_S = 10, 10.0
log = logging.getLogger("crowdpref.portal")


class Refusal(CrowdprefError):
    """A request the portal turns down: ``status`` is the HTTP status, ``title`` and ``str()``
    the page a person sees (no ids in it)."""

    def __init__(self, status: int, title: str, message: str):
        super().__init__(message)
        self.status = status
        self.title = title


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
    participant: ParticipantState
    cookie: str  # signed: collection id + username


@dataclass(frozen=True)
class Finish:
    """The finish page: ``code`` when every item is submitted, else how many are left."""

    done: bool
    submitted: int
    total: int
    code: str | None = None
    completion_url: str | None = None
    argilla_url: str | None = None


class StudyRegistry:
    """Study configs by name from the portal's studies folder (re-read when a name is unknown,
    so a new study needs no restart)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._paths: dict[str, Path] = {}
        self._lock = threading.Lock()

    def path(self, name: str) -> Path | None:
        with self._lock:
            if name not in self._paths:
                self._scan()
            return self._paths.get(name)

    def _scan(self) -> None:
        for file in sorted(self.folder.glob("*.y*ml")):
            try:
                data = yaml.safe_load(file.read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError, UnicodeDecodeError):
                continue
            if isinstance(data, dict) and isinstance(data.get("name"), str):
                self._paths.setdefault(data["name"], file)


class Portal:
    """The portal's logic for one deployment (settings + store)."""

    def __init__(self, settings: Any, store: Store, *, open_collection: Callable[[Path, Key], Collection] | None = None,
                 prolific_factory: Callable[[ProlificTarget], Any] | None = None, clock: Callable[[], float] = time.time):
        self.settings = settings
        self.store = store
        self.registry = StudyRegistry(Path(settings.portal_studies))
        self.clock = clock
        self._open_collection = open_collection or (lambda path, key: _open_collection(path, key, settings))
        self._prolific_factory = prolific_factory or _prolific_client
        self._collections: dict[tuple[str, str], Collection] = {}
        self._configs: dict[Path, tuple[int, StudyConfig]] = {}
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._person_locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        self._entries: dict[str, deque[float]] = defaultdict(deque)
        self.cookies = URLSafeSerializer(store.secret("portal_cookie_key"), salt="crowdpref-portal-session")
        self.invites = URLSafeSerializer(store.secret("portal_invite_key"), salt="crowdpref-invite")

    # studies and collections -------------------------------------------------------------------
    def config(self, study: str, key: str) -> tuple[StudyConfig, Path]:
        if key not in KEYS:
            raise Refusal(404, "Page not found", "This address does not belong to a study. Please check the link.")
        path = self.registry.path(study)
        if path is None:
            raise Refusal(404, "Study not found",
                          "We could not find this study. Please check the link, or contact the researchers.")
        try:
            mtime = path.stat().st_mtime_ns
            with self._lock:
                cached = self._configs.get(path)
            if cached is None or cached[0] != mtime:  # parsed once per version of the file
                cached = (mtime, load_study(path))
                with self._lock:
                    self._configs[path] = cached
        except (OSError, CrowdprefError) as exc:  # the config broke while the study runs
            raise Refusal(503, "Study unavailable", "This study cannot be opened right now. Please try again "
                          "in a few minutes, or contact the researchers.") from exc
        return cached[1], path

    def collection(self, study: str, key: Key) -> Collection:
        config, path = self.config(study, key)
        with self._lock:
            cached = self._collections.get((study, key))
        if cached is not None:
            return cached
        try:
            collection = self._open_collection(path, key)
        except CrowdprefError as exc:  # e.g. study 2 before its pairs exist
            raise Refusal(409, "Not open yet",
                          "This part of the study is not open yet. " + RETURN_WORDING) from exc
        with self._lock:
            return self._collections.setdefault((study, key), collection)

    def prolific(self, config: StudyConfig) -> Any | None:
        target = prolific_target(config, self.settings)
        if target is None:
            return None
        with self._lock:
            if target.api_url not in self._clients:
                self._clients[target.api_url] = self._prolific_factory(target)
            return self._clients[target.api_url]

    # arrival --------------------------------------------------------------------------------------
    def visitor(self, study: str, key: Key, params: Mapping[str, str]) -> Visitor:
        """Check the entry parameters (and, with Prolific, the submission they name). Nothing is
        allocated here."""
        config, _ = self.config(study, key)
        if config.participants == "invite":
            token = params.get("invite", "")
            try:
                invite = self.invites.loads(token)
            except BadSignature:
                raise Refusal(403, "Link not valid",
                              "This invitation link is not valid. Please use the exact link you were sent.") from None
            if not isinstance(invite, dict) or invite.get("study") != study or invite.get("key") != key:
                raise Refusal(403, "Link not valid", "This invitation link belongs to another study.")
            return Visitor(f"invite:{invite['id']}", "invite")
        pid, study_id, session_id = (params.get(name, "") for name in ("PROLIFIC_PID", "STUDY_ID", "SESSION_ID"))
        missing = [name for name, value in (("PROLIFIC_PID", pid), ("STUDY_ID", study_id), ("SESSION_ID", session_id))
                   if not value]
        if missing:
            raise Refusal(400, "Link incomplete",
                          f"The link is missing {', '.join(missing)}. Please open the study from Prolific again.")
        bad = [name for name, value in (("PROLIFIC_PID", pid), ("STUDY_ID", study_id), ("SESSION_ID", session_id))
               if not PROLIFIC_ID.fullmatch(value)]
        if bad:
            raise Refusal(400, "Link not valid",
                          f"The link's {', '.join(bad)} is not a Prolific id. Please open the study from Prolific again.")
        pid, study_id, session_id = pid.lower(), study_id.lower(), session_id.lower()
        source = "simulated" if config.participants == "simulated" else "prolific"
        client = self.prolific(config)
        if client is None:  # Prolific people without API access: the ids are all we can check
            return Visitor(pid, source, session_id, study_id)
        collection = self.collection(study, key)
        platform = self.store.platform_study(collection.info.id)
        if platform is None:
            raise Refusal(409, "Not open yet", "This study is not open yet. " + RETURN_WORDING)
        if platform.external_id != study_id:
            raise Refusal(403, "Wrong study", "This link belongs to another Prolific study. " + RETURN_WORDING)
        from crowdpref.prolific import ProlificError, ProlificNotFound

        try:
            submission = client.get_submission(session_id)
        except ProlificNotFound:
            raise Refusal(403, "Submission not found",
                          "Prolific does not know this session. Please open the study from Prolific again.") from None
        except ProlificError:
            raise Refusal(503, "Please try again",
                          "We cannot reach Prolific right now. Please wait a minute and open the link again.") from None
        if submission.participant_id.lower() != pid or submission.study_id.lower() != study_id:
            raise Refusal(403, "Not your session",
                          "This session belongs to someone else. Please open the study from your own Prolific account.")
        if submission.status not in WORKING + FINISHED:
            raise Refusal(409, "Submission closed",
                          f"Prolific says your submission is {submission.status.lower()}, so it cannot continue.")
        return Visitor(pid, source, session_id, study_id)

    def enter(self, study: str, key: Key, params: Mapping[str, str]) -> Entered:
        """Verify the visitor, claim their work (the same work when they come back) and make it
        visible in their Argilla dataset."""
        visitor = self.visitor(study, key, params)
        collection = self.collection(study, key)
        person = self.store.key_hash(visitor.key)
        self._throttle(person)
        with self._person_locks[person]:  # two tabs at once: one claim, the other waits and gets the same
            try:
                result = collection.claim(visitor.key, visitor.source, refill=True)
            except Refusal:
                raise
            except CrowdprefError as exc:
                raise Refusal(503, "Please try again", "Something went wrong while preparing your work. "
                              "Please wait a minute and open the link again.") from exc
        if isinstance(result, Full):
            raise Refusal(409, "Study full", "Sorry: all the work in this study is taken right now. " + RETURN_WORDING)
        if isinstance(result, Refused):
            if result.reason == "excluded":
                raise Refusal(403, "Not eligible", "You took part in the first part of this project, so you cannot "
                              "take part in this one. " + RETURN_WORDING)
            raise Refusal(410, "Place given back", "Your place in this study was given back (the study was returned, "
                          "timed out, or inactive for too long), so it cannot continue. " + RETURN_WORDING)
        assert isinstance(result, Claimed)
        participant = result.participant
        if visitor.session_id and participant.session_hash != self.store.key_hash(visitor.session_id):
            self.store.record_session(collection.info.id, participant.id, visitor.session_id)
        self.store.log_event(collection.info.id, "entered", participant.id, source=visitor.source, new=result.new)
        cookie = self.cookies.dumps({"c": collection.info.id, "u": participant.username})
        return Entered(study, key, participant, cookie)

    def _throttle(self, person: str) -> None:
        now = self.clock()
        with self._lock:
            recent = self._entries[person]
            while recent and recent[0] < now - ENTRY_WINDOW_S:
                recent.popleft()
            if len(recent) >= ENTRIES_PER_WINDOW:
                raise Refusal(429, "Too many requests", "You opened this link many times in a few seconds. "
                              "Please wait a moment, then open it once.")
            recent.append(now)

    # returning visitors (the signed cookie) --------------------------------------------------------
    def participant(self, study: str, key: Key, cookie: str | None) -> tuple[Collection, ParticipantState]:
        collection = self.collection(study, key)
        try:
            data = self.cookies.loads(cookie or "")
        except BadSignature:
            raise Refusal(401, "Please start from your study link",
                          "We do not recognise this browser. Please open the study from Prolific (or your "
                          "invitation) again: your work is kept.") from None
        if not isinstance(data, dict) or data.get("c") != collection.info.id:
            raise Refusal(401, "Please start from your study link",
                          "This browser belongs to another study. Please open the study from its link again.")
        return collection, self.store.participant(collection.info.id, str(data["u"]))

    def sign_in_url(self, study: str, key: Key, cookie: str | None) -> str:
        """Argilla's sign-in page with the participant's credentials (one hop; never logged)."""
        collection, participant = self.participant(study, key, cookie)
        if participant.status not in (ACTIVE, COMPLETE):
            raise Refusal(410, "Place given back", "Your place in this study was given back, so it cannot continue. "
                          + RETURN_WORDING)
        password = collection.store.password(participant.account_id)
        auth = base64.b64encode(f"{participant.username}:{password}".encode()).decode()
        return f"{self.settings.argilla_participant_url}/sign-in?auth={auth}"

    def finish(self, study: str, key: Key, cookie: str | None) -> Finish:
        """Check with Argilla that every item is submitted; then the completion code."""
        collection, participant = self.participant(study, key, cookie)
        if participant.status not in (ACTIVE, COMPLETE):
            raise Refusal(410, "Place given back", "Your place in this study was given back, so it cannot be "
                          "completed. " + RETURN_WORDING)
        try:
            participant = collection.refresh(participant)
        except CrowdprefError as exc:
            raise Refusal(503, "Please try again",
                          "We cannot check your answers right now. Please wait a minute and reload this page.") from exc
        total = len(participant.assignments)
        submitted = len(participant.submitted)
        if participant.status != COMPLETE:
            dataset = participant.dataset_id
            url = (f"{self.settings.argilla_participant_url}/dataset/{dataset}/annotation-mode" if dataset
                   else self.settings.argilla_participant_url)
            return Finish(False, submitted, total, argilla_url=url)
        code = self.store.completion_code(collection.info.id)
        config, _ = self.config(study, key)
        target = prolific_target(config, self.settings)
        completion = None
        if config.participants != "invite":
            completion = links.completion_url(self.settings, code, target.app_url if target else None)
        if not any(e["participant_id"] == participant.id for e in
                   self.store.events(collection.info.id, kinds=["completion_shown"])):
            self.store.log_event(collection.info.id, "completion_shown", participant.id)
        return Finish(True, submitted, total, code=code, completion_url=completion)

    def welcome(self, study: str, key: Key, cookie: str | None) -> tuple[StudyConfig, ParticipantState]:
        _, participant = self.participant(study, key, cookie)
        config, _ = self.config(study, key)
        return config, participant

    def invite_link(self, study: str, key: Key, invite_id: str) -> str:
        """A signed invitation link for one participant (``participants: invite`` studies)."""
        token = self.invites.dumps({"study": study, "key": key, "id": invite_id})
        return f"{links.entry_url(self.settings, study, key)}?invite={token}"

    # Prolific webhooks -------------------------------------------------------------------------------
    def prolific_webhook(self, headers: Mapping[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        """Verify, de-duplicate and act on one Prolific webhook. Returns (HTTP status, reply)."""
        from crowdpref.prolific import WebhookRejected, verify_webhook

        secret = self.store.get_meta(WEBHOOK_SECRET)
        if secret is None:
            return 503, {"error": "no webhook secret configured: run `crowdpref prolific-webhooks`"}
        try:
            event_id = verify_webhook(secret, headers, body, now=self.clock())
        except WebhookRejected as exc:
            return exc.status, {"error": exc.reason}
        if self.store.delivery_seen(event_id):
            return 200, {"duplicate": True}
        try:
            payload = json.loads(body)
            if not isinstance(payload, dict):
                raise ValueError("not an object")
        except ValueError:
            return 400, {"error": "body is not a JSON object"}
        kind = str(payload.get("event_type") or "submission.status.change")
        outcome = self._act_on(kind, payload)
        self.store.record_delivery(event_id, "prolific", kind, outcome)
        return 200, {"outcome": outcome}

    def _act_on(self, kind: str, payload: Mapping[str, Any]) -> str:
        if kind != "submission.status.change":
            return "ignored"
        status = str(payload.get("status", "")).upper()
        found = None
        session = payload.get("resource_id")
        if isinstance(session, str) and session:
            found = self.store.find_by_session(session)
        if found is None and isinstance(payload.get("participant_id"), str):
            active = [(i, p) for i, p in self.store.find_by_key(payload["participant_id"]) if p.status == ACTIVE]
            found = active[0] if len(active) == 1 else None
        if found is None:
            return "unknown participant"
        info, participant = found
        self.store.log_event(info.id, "platform_status", participant.id, status=status)
        if status not in FREEING:
            return f"recorded {status}"
        if participant.status == COMPLETE:  # finished, then returned / rejected / timed out: they withdrew
            from crowdpref.withdrawals import withdraw_on_platform

            try:
                target: Any = self.collection(info.study, info.key)  # type: ignore[arg-type]
            except Refusal:
                target = self.store  # (their records stay in Argilla: `crowdpref withdraw` deletes them)
            try:
                done = withdraw_on_platform(target, participant, status, info, via=" (webhook)")
            except CrowdprefError:
                return f"{status}: withdrawal failed; `crowdpref withdraw` or the next sync repeats it"
            return f"{status}: {'withdrawn' if done and done.now else 'already withdrawn'}"
        try:
            collection = self.collection(info.study, info.key)  # type: ignore[arg-type]
        except Refusal:
            self.store.request_drop(info.id, participant.username)
            return f"{status}: drop requested (study config not found here)"
        try:
            released = collection.release(participant, f"{status} on Prolific")
        except CrowdprefError:
            return f"{status}: release begun, the next monitoring pass finishes it"
        return f"{status}: work released" if released else f"{status}: nothing held"


    # Argilla webhooks ---------------------------------------------------------------------------------
    def register_argilla_webhook(self, owner: Any | None = None) -> str:
        """Make Argilla report participants' responses to this portal (``/hooks/argilla``): the
        webhook is found or created on the configured Argilla, its secret kept in the store.
        Idempotent; returns the webhook id."""
        if owner is None:
            from crowdpref.argilla_client import ArgillaOwner

            owner = ArgillaOwner(self.settings.argilla_api_url, self.settings.resolved_argilla_api_key(), timeout_s=10.0)
        return argilla_hooks.register(owner, self.store, argilla_hooks.hook_url(self.settings))

    def stand_down_argilla_webhook(self) -> None:
        """When the portal stops: :func:`argilla_hooks.stand_down` on the configured Argilla.
        Never raises (Argilla may be down already: monitoring polls either way)."""
        from crowdpref.argilla_client import ArgillaOwner

        def disable(webhook_id: str) -> None:
            owner = ArgillaOwner(self.settings.argilla_api_url, self.settings.resolved_argilla_api_key(), timeout_s=5.0)
            try:
                owner.disable_webhook(webhook_id)
            finally:
                owner.close()

        try:
            if argilla_hooks.stand_down(self.store, self.settings.argilla_api_url, disable):
                log.info("Argilla webhook disabled: monitoring polls until the portal starts again")
        except Exception as exc:  # noqa: BLE001 - stopping must not fail
            reason = (str(exc).splitlines() or [exc.__class__.__name__])[0][:200]
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
                    reason = (str(exc).splitlines() or [exc.__class__.__name__])[0][:200]
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


def _open_collection(path: Path, key: Key, settings: Any) -> Collection:
    from crowdpref.studies import open_collection

    return open_collection(path, key, settings)


def _prolific_client(target: ProlificTarget) -> Any:
    from crowdpref.prolific import ProlificClient

    return ProlificClient(target.api_url, target.token, timeout_s=10.0, max_attempts=3)
