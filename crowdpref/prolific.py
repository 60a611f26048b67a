"""A small client for Prolific's REST API (httpx, explicit timeouts, typed errors) and the
signature check of Prolific's webhooks. No Prefect here: tasks wrap it.

    with ProlificClient(api_url, token) as client:
        study = client.create_study(payload)
        client.publish_study(study.id)

Retries (one rule, :func:`retry_decision`): only where a repeat cannot do harm. Reads and
idempotent writes retry on 429, 5xx and transport errors with exponential backoff and jitter
(``Retry-After`` honoured). Calls that create something (a study, a participant group, a
webhook secret or subscription) retry only when the request certainly was not
processed (429, a refused or timed-out connection); after a 5xx or a dropped read they fail at
once with :class:`ProlificAmbiguous` - NOT transient, so no retry policy repeats it - and the
caller reconciles (the recruit step looks its study up by internal name, a group is found by
name with :meth:`ProlificClient.list_participant_groups`). Bulk approval is never repeated at
all. A single approve / reject refused (4xx) after an earlier attempt - ours
whose reply was lost, or another reviewer's - reads the submission back and is done when it is
already in the state asked for.

Field names and shapes follow Prolific's published OpenAPI document (the contract the tests
check every request and reply against: crowdpref/simulation/prolific-openapi.yml).

The token is sent in a header and never appears in an error, a repr or a log line.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import math
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit

import httpx

from crowdpref.errors import CrowdprefError
from crowdpref.tls import shared_context

log = logging.getLogger(__name__)

CallKind = Literal["read", "idempotent", "create", "never"]
"""How a call may be repeated: ``read`` / ``idempotent`` whenever the failure is transient,
``create`` only when the request certainly was not processed, ``never`` not at all."""

MAX_WAIT_S = 60.0  # the longest single pause between attempts (a larger Retry-After is capped)


class ProlificError(CrowdprefError):
    """A Prolific API call failed; the message names the call and the status."""

    def __init__(self, message: str, status: int | None = None, transient: bool = False):
        super().__init__(message, transient=transient)
        self.status = status


class ProlificAuthError(ProlificError):
    """401 / 403: the token is wrong, expired, or lacks the right."""


class ProlificNotFound(ProlificError):
    """404: no such study, submission, group..."""


class ProlificRequestError(ProlificError):
    """Another 4xx: Prolific refused the request as made (validation, a bad transition...)."""


class ProlificUnavailable(ProlificError):
    """429 / 5xx / network trouble, still failing after the retries allowed for the call."""


class ProlificAmbiguous(ProlificUnavailable):
    """A call that must not be repeated blindly (a creation, a payment, a bulk approval) failed
    after Prolific may have processed it (a 5xx, a lost reply): it may or may not have been done.
    Never transient - a retry policy that repeats it could create or pay twice; reconcile (look
    it up on Prolific) before repeating."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message, status, transient=False)


class WebhookRejected(CrowdprefError):
    """A webhook that must not be acted on; ``status`` is the HTTP status to answer."""

    def __init__(self, reason: str, status: int):
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass(frozen=True)
class Study:
    id: str
    name: str
    internal_name: str | None
    status: str
    total_available_places: int
    external_study_url: str
    completion_codes: list[dict[str, Any]]
    filters: list[dict[str, Any]]
    places_taken: int | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Study:
        taken = data.get("places_taken")
        return cls(id=str(data["id"]), name=str(data.get("name") or ""), internal_name=data.get("internal_name"),
                   status=str(data.get("status") or ""),
                   total_available_places=int(data.get("total_available_places") or 0),
                   external_study_url=str(data.get("external_study_url") or ""),
                   completion_codes=list(data.get("completion_codes") or []), filters=list(data.get("filters") or []),
                   places_taken=None if taken is None else int(taken), raw=dict(data))


@dataclass(frozen=True)
class Submission:
    id: str
    participant_id: str
    study_id: str
    status: str
    started_at: str | None
    completed_at: str | None
    study_code: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], study_id: str | None = None) -> Submission:
        """Any of Prolific's three shapes: the lists' SubmissionShort (``participant_id``,
        ``study_code``, no study id: pass ``study_id``), ``GET /submissions/{id}/``'s
        SubmissionDetail and a transition's Submission (``participant``, ``entered_code``)."""
        code = data.get("study_code") if data.get("study_code") is not None else data.get("entered_code")
        return cls(id=str(data["id"]), participant_id=str(data.get("participant_id") or data.get("participant") or ""),
                   study_id=str(data.get("study_id") or data.get("study") or study_id or ""),
                   status=str(data.get("status") or ""), started_at=data.get("started_at"),
                   completed_at=data.get("completed_at"), study_code=code, raw=dict(data))

    def __repr__(self) -> str:  # participant ids are personal data: keep them out of logs
        return f"Submission(status={self.status!r})"


def retry_decision(kind: CallKind, outcome: httpx.Response | BaseException) -> bool:
    """Whether a failed attempt of a ``kind`` call may be repeated. ``outcome`` is the response
    (its status is judged) or the exception the attempt raised. Pure: no I/O, no state."""
    if kind == "never":
        return False
    if isinstance(outcome, httpx.Response):
        if outcome.status_code == 429:
            return True  # refused before any work was done
        return outcome.status_code >= 500 and kind != "create"
    if isinstance(outcome, (httpx.ConnectError, httpx.ConnectTimeout)):
        return True  # never reached Prolific
    if isinstance(outcome, httpx.TransportError):
        return kind != "create"  # it may have been processed: a creation is reconciled instead
    return False


def _ambiguous(outcome: httpx.Response | BaseException) -> bool:
    """Whether the attempt may have been processed although it failed (a 5xx, a lost reply)."""
    if isinstance(outcome, httpx.Response):
        return outcome.status_code >= 500
    return not isinstance(outcome, (httpx.ConnectError, httpx.ConnectTimeout))


class ProlificClient:
    """Prolific's API at ``base_url`` (``https://api.prolific.com/api/v1/``) with a token."""

    def __init__(self, base_url: str, token: str, *, timeout_s: float = 15.0, max_attempts: int = 5,
                 backoff_s: float = 0.5, transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        self.base_url = base_url.rstrip("/") + "/"
        self.max_attempts = max(1, int(max_attempts))
        self.backoff_s = backoff_s
        self.sleep = sleep
        self._secret = token  # only for redacting server text; never shown
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, transport=transport,
                                  verify=shared_context(), headers={"Authorization": f"Token {token}", "Accept": "application/json"})

    def __repr__(self) -> str:
        return f"ProlificClient({self.base_url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ProlificClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # the one request path ------------------------------------------------------------------------
    def _send(self, method: str, path: str, kind: CallKind = "read",
              reconcile: Callable[[], Any] | None = None, **kwargs: Any) -> httpx.Response | Any:
        """Send with the retries ``kind`` allows; the successful response, or raise a typed error.
        ``reconcile`` answers a refusal (400, or 409) that follows an attempt which may have been
        processed (the repeat found the work done): its result, if not None, is returned instead."""
        call = f"{method} /{path.split('?', 1)[0].lstrip('/')}"
        maybe_done = False
        for attempt in range(1, self.max_attempts + 1):
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                outcome: httpx.Response | BaseException = exc
                reason = f"{type(exc).__name__} (network)"
                retry_after = None
            else:
                if response.status_code < 400:
                    return response
                # Prolific refuses a transition from the wrong state with 400 (the one refusal
                # its document declares; 409 is kept for safety): after an attempt that may
                # have been processed, that is our own change - the reconcile says
                if response.status_code in (400, 409) and maybe_done and reconcile is not None:
                    done = reconcile()
                    if done is not None:
                        log.info("Prolific %s: %d after an unanswered attempt; the change had been made", call,
                                 response.status_code)
                        return done
                if not (response.status_code == 429 or response.status_code >= 500):
                    raise self._error(call, response)
                outcome, reason = response, str(response.status_code)
                retry_after = response.headers.get("Retry-After") if response.status_code in (429, 503) else None
            maybe_done = maybe_done or _ambiguous(outcome)
            if attempt < self.max_attempts and retry_decision(kind, outcome):
                delay = self._delay(attempt, retry_after)
                log.info("Prolific %s: %s, retrying in %.1f s (attempt %d of %d)", call, reason, delay,
                         attempt + 1, self.max_attempts)
                self.sleep(delay)
                continue
            raise self._unavailable(call, kind, reason, attempt, maybe_done,
                                    outcome.status_code if isinstance(outcome, httpx.Response) else None)
        raise AssertionError("unreachable")

    def _request(self, method: str, path: str, kind: CallKind = "read", **kwargs: Any) -> Any:
        """Like :meth:`_send`, returning the decoded JSON body (``{}`` when empty)."""
        response = self._send(method, path, kind, **kwargs)
        if not isinstance(response, httpx.Response):
            return response  # reconciled
        return self._json(f"{method} /{path.split('?', 1)[0].lstrip('/')}", response)

    def _json(self, call: str, response: httpx.Response) -> Any:
        if not response.content:
            return {}
        try:
            return response.json()
        except ValueError:
            raise ProlificError(f"Prolific {call}: {response.status_code} but the reply is not JSON: "
                                f"{self._excerpt(response.text)!r} (check PROLIFIC_API_URL)",
                                response.status_code) from None

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        delay = self.backoff_s * 2 ** (attempt - 1) * (1 + random.random() / 2)  # exponential, 0-50 % jitter
        if retry_after is not None:
            try:
                asked = float(retry_after)
            except ValueError:  # an HTTP date: keep our own backoff
                asked = None
            if asked is not None and math.isfinite(asked):
                delay = max(delay, asked)
        return min(delay, MAX_WAIT_S)

    def _excerpt(self, text: str, limit: int = 200) -> str:
        text = " ".join(str(text).split())
        if self._secret:
            text = text.replace(self._secret, "[token]")  # a server that echoes it must not make us show it
        return text if len(text) <= limit else text[:limit - 3] + "..."

    @staticmethod
    def _unavailable(call: str, kind: CallKind, reason: str, attempts: int, maybe_done: bool,
                     status: int | None) -> ProlificUnavailable:
        tries = f"{attempts} attempt{'s' if attempts > 1 else ''}"
        if kind in ("create", "never") and maybe_done:  # may or may not have been done: never transient
            fix = ("it may or may not have been done: reconcile first (check on Prolific before paying or "
                   "approving again)" if kind == "never"
                   else "it may or may not have been created: reconcile (look it up) before creating it again")
            return ProlificAmbiguous(f"Prolific {call}: {reason} after {tries}, not repeated: {fix}", status)
        return ProlificUnavailable(f"Prolific {call}: {reason} after {tries}: Prolific is unreachable or busy, "
                                   "try again later", status, transient=True)

    def _error(self, call: str, response: httpx.Response) -> ProlificError:
        status = response.status_code
        try:
            body = response.json()
            detail = body.get("error", body) if isinstance(body, dict) else body
            if isinstance(detail, dict):
                detail = detail.get("detail", detail)
            excerpt = self._excerpt(str(detail))
        except ValueError:
            excerpt = self._excerpt(response.text)
        if status in (401, 403):
            return ProlificAuthError(f"Prolific {call}: {status} (not allowed): check PROLIFIC_TOKEN and the "
                                     "workspace it belongs to", status)
        if status == 404:
            return ProlificNotFound(f"Prolific {call}: 404 (not found): check the id", status)
        return ProlificRequestError(f"Prolific {call}: {status}: {excerpt or 'refused'}", status)

    def _next_path(self, href: str, current: str = "") -> str:
        """A ``_links.next.href`` as a path under base_url: absolute, root-relative
        (``/api/v1/studies/?page=2``), relative to the API (``studies/?page=2``) or a bare query
        (``?page=2``, for the ``current`` page). Only the path and query are kept: the token goes
        to our base URL and nowhere else, whatever host the link names."""
        base = urlsplit(self.base_url)
        page = urljoin(self.base_url, current.split("?", 1)[0]) if href.startswith("?") else self.base_url
        target = urlsplit(urljoin(page, href))
        path = target.path
        if path.startswith(base.path):
            path = path[len(base.path):]
        elif base.path.rstrip("/") and base.path.rstrip("/") in path:  # another prefix before /api/v1/
            path = path.split(base.path, 1)[-1]
        return path.lstrip("/") + (f"?{target.query}" if target.query else "")

    def _pages(self, path: str, params: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Every result of a paginated list (``results`` + ``_links.next.href``, null at the end)."""
        data = self._request("GET", path, params=params)
        current, seen = path, {path}
        while True:
            if isinstance(data, list):  # an unpaginated list
                yield from data
                return
            yield from data.get("results") or []
            nxt = ((data.get("_links") or {}).get("next") or {}).get("href")
            if not nxt:
                return
            nxt = self._next_path(nxt, current)
            if nxt in seen:
                raise ProlificError(f"Prolific GET /{path}: the next page link repeats an earlier page")
            seen.add(nxt)
            current, data = nxt, self._request("GET", nxt)

    # studies ---------------------------------------------------------------------------------------
    def create_study(self, payload: Mapping[str, Any]) -> Study:
        """A draft study (status UNPUBLISHED). Not repeated after a 5xx: look it up by internal name."""
        return Study.from_json(self._request("POST", "studies/", "create", json=dict(payload)))

    def list_studies(self) -> list[Study]:
        return [Study.from_json(s) for s in self._pages("studies/")]

    def get_study(self, study_id: str) -> Study:
        return Study.from_json(self._request("GET", f"studies/{study_id}/"))

    def transition_study(self, study_id: str, action: str) -> Study:
        """``PUBLISH`` / ``PAUSE`` / ``START`` / ``STOP``. A repeat after an unanswered attempt that
        finds the study already where the action leads (409) returns the study."""
        target = {"PUBLISH": "ACTIVE", "PAUSE": "PAUSED", "START": "ACTIVE", "STOP": "COMPLETED"}.get(action)

        def reconcile() -> Study | None:
            study = self.get_study(study_id)
            return study if study.status == target else None

        result = self._send("POST", f"studies/{study_id}/transition/", "idempotent", reconcile,
                            json={"action": action})
        if isinstance(result, Study):
            return result
        return Study.from_json(self._json(f"POST /studies/{study_id}/transition/", result))

    def publish_study(self, study_id: str) -> Study:
        return self.transition_study(study_id, "PUBLISH")

    def increase_places(self, study_id: str, total: int) -> Study:
        """Set the study's places to ``total``; once published places can only go up, so a lower
        total is refused here (ValueError) after reading the current one."""
        current = self.get_study(study_id)
        if total < current.total_available_places:
            raise ValueError(f"Prolific places can only increase (study has {current.total_available_places}, "
                             f"asked for {total})")
        if total == current.total_available_places:
            return current
        return Study.from_json(self._request("PATCH", f"studies/{study_id}/", "idempotent",
                                             json={"total_available_places": int(total)}))

    # submissions -----------------------------------------------------------------------------------
    def list_submissions(self, study_id: str) -> list[Submission]:
        return [Submission.from_json(s, study_id) for s in self._pages(f"studies/{study_id}/submissions/")]

    def get_submission(self, submission_id: str) -> Submission:
        return Submission.from_json(self._request("GET", f"submissions/{submission_id}/"))

    def submission_counts(self, study_id: str) -> dict[str, int]:
        """Submissions per status (every status Prolific reports, zeros included); its ``TOTAL``
        is not a status and is left out."""
        data = self._request("GET", f"studies/{study_id}/submissions/counts/")
        return {str(k): int(v) for k, v in data.items() if isinstance(v, (int, float)) and k != "TOTAL"}

    def _review(self, submission_id: str, body: dict[str, Any], target: str) -> Submission:
        """One submission's APPROVE / REJECT. A refusal (4xx) - our own earlier attempt whose
        reply was lost and that the repeat finds done, or another reviewer's decision - reads the
        submission back: already ``target``, it is returned; otherwise the refusal is raised.
        (Prolific's document does not say whether approving an approved submission succeeds or
        is refused, nor with which status: this copes with both.)"""
        try:
            return Submission.from_json(self._request("POST", f"submissions/{submission_id}/transition/",
                                                      "idempotent", json=body))
        except ProlificRequestError as refused:
            try:
                current = self.get_submission(submission_id)
            except ProlificError:
                raise refused from None
            if current.status != target:
                raise
            log.info("Prolific POST /submissions/.../transition/: %s refused (%s) but the submission is already %s",
                     body["action"], refused.status, target)
            return current

    def approve_submission(self, submission_id: str) -> Submission:
        return self._review(submission_id, {"action": "APPROVE"}, "APPROVED")

    def reject_submission(self, submission_id: str, message: str, category: str) -> Submission:
        """Prolific requires a message of at least 100 characters and a rejection category."""
        if len(message) < 100:
            raise ValueError(f"Prolific needs a rejection message of at least 100 characters (got {len(message)})")
        if not category:
            raise ValueError("Prolific needs a rejection category (e.g. LOW_EFFORT)")
        return self._review(submission_id, {"action": "REJECT", "message": message, "rejection_category": category},
                            "REJECTED")

    def complete_submission(self, submission_id: str, code: str, target: str = "SCREENED OUT") -> Submission:
        """Complete a submission with a completion code whose actor is ``researcher`` (the
        document's ``{"action": "COMPLETE", "completion_code": ...}``): Prolific carries out the
        code's actions - a ``FIXED_SCREEN_OUT_PAYMENT`` code screens the submission out and pays
        the fixed reward. The document calls the transition idempotent (a repeat is ignored);
        should a repeat be refused (4xx) instead, the submission is read back and is done when it
        is already ``target``."""
        return self._review(submission_id, {"action": "COMPLETE", "completion_code": code}, target)

    def bulk_approve(self, submission_ids: list[str]) -> str:
        """Approve many at once (Prolific applies it asynchronously; the reply is a message).
        Never repeated: after a 5xx or a lost reply it raises :class:`ProlificAmbiguous` - read
        the submissions back before approving again."""
        reply = self._request("POST", "submissions/bulk-approve/", "never",
                              json={"submission_ids": list(submission_ids)})
        return reply if isinstance(reply, str) else str(reply or "")

    def request_return(self, submission_id: str, reasons: list[str]) -> dict[str, Any]:
        """Ask the participant to return the submission; Prolific sends them a message built
        around ``reasons`` (free text). A message to a person: repeated only when the request
        certainly was not processed (a 5xx or a lost reply raises :class:`ProlificAmbiguous`);
        the caller records that it was sent before calling."""
        return self._request("POST", f"submissions/{submission_id}/request-return/", "create",
                             json={"request_return_reasons": list(reasons)})

    # participant groups -------------------------------------------------------------------------------
    def create_participant_group(self, name: str, workspace_id: str | None = None) -> str:
        """A new group (``name`` is all Prolific requires; the workspace when given). Not repeated
        after a 5xx or a lost reply (:class:`ProlificAmbiguous`): find it by name with
        :meth:`list_participant_groups` before creating it again."""
        body: dict[str, Any] = {"name": name}
        if workspace_id:
            body["workspace_id"] = workspace_id
        return str(self._request("POST", "participant-groups/", "create", json=body)["id"])

    def list_participant_groups(self, workspace_id: str | None = None, *,
                                project_id: str | None = None) -> list[dict[str, Any]]:
        """The groups of a workspace (or a project): dicts with at least ``id`` and ``name``
        (also ``workspace_id``, ``participant_count``, ``is_deleted``). Prolific lists groups
        only under a filter - its required ``filter`` parameter is a ``workspace_id`` or a
        ``project_id``, sent as that query parameter - so one of the two is required here."""
        if bool(workspace_id) == bool(project_id):
            raise ValueError("Prolific lists participant groups of one workspace or one project: give "
                             "workspace_id (settings: prolific_workspace_id) or project_id, not both")
        params = {"workspace_id": workspace_id} if workspace_id else {"project_id": project_id}
        return [dict(g) for g in self._pages("participant-groups/", params) if isinstance(g, dict)]

    # webhooks ------------------------------------------------------------------------------------------
    def create_webhook_secret(self, workspace_id: str) -> str:
        """A new signing secret for the workspace (it replaces the previous one)."""
        data = self._request("POST", "hooks/secrets/", "create", json={"workspace_id": workspace_id})
        # SecretDetail names the secret ``value``; no fallback to another name: a reply without
        # it is not Prolific's documented one and is refused rather than guessed at
        value = data.get("value") if isinstance(data, dict) else None
        if not value:
            raise ProlificError("Prolific POST /hooks/secrets/: the reply carries no secret (no 'value')")
        return str(value)

    def subscribe_webhook(self, workspace_id: str, event_type: str, target_url: str) -> tuple[str, str]:
        """Subscribe ``target_url``; returns (subscription id, hook secret) - the secret to send
        back with :meth:`confirm_webhook` (the ``X-Hook-Secret`` response header)."""
        response = self._send("POST", "hooks/subscriptions/", "create", json={
            "workspace_id": workspace_id, "event_type": event_type, "target_url": target_url})
        body = self._json("POST /hooks/subscriptions/", response)
        body = body if isinstance(body, dict) else {}
        if "id" not in body and isinstance(body.get("results"), list):
            # the document's shape (a SubscriptionList) rather than the prose's one subscription
            ours = [r for r in body["results"] if isinstance(r, dict) and r.get("event_type") == event_type
                    and r.get("target_url") == target_url]
            body = {**(ours[-1] if ours else {}), **{k: v for k, v in body.items() if k != "results"}}
        secret = response.headers.get("X-Hook-Secret") or body.get("X-Hook-Secret")
        if not body.get("id") or not secret:
            raise ProlificError("Prolific POST /hooks/subscriptions/: the reply lacks the subscription id or "
                                "the X-Hook-Secret to confirm it with")
        return str(body["id"]), str(secret)

    def confirm_webhook(self, subscription_id: str, hook_secret: str) -> dict[str, Any]:
        return self._request("POST", f"hooks/subscriptions/{subscription_id}/", "idempotent",
                             json={"secret": hook_secret})


# --- webhook signatures ----------------------------------------------------------------------------------
SIGNATURE, TIMESTAMP, EVENT_ID = "X-Prolific-Request-Signature", "X-Prolific-Request-Timestamp", "X-Event-ID"
_DECIMAL = re.compile(r"^[0-9]{1,12}(\.[0-9]{1,9})?$")


def sign_webhook(secret: str, timestamp: str, body: bytes) -> str:
    """base64(HMAC-SHA256(secret, timestamp + body)), as Prolific signs its webhooks."""
    mac = hmac.new(secret.encode(), timestamp.encode() + body, hashlib.sha256).digest()
    return base64.b64encode(mac).decode()


def documented_form(body: bytes) -> bytes | None:
    """The body as Prolific's "Verifying" page signs it in its Python example: ``json.dumps`` of
    the parsed body (Python's default separators, ASCII escapes); None when the body is not JSON.
    Which form the live sender signs is not documented beyond that example, so both are accepted."""
    try:
        return json.dumps(json.loads(body)).encode()
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


@dataclass(frozen=True)
class VerifiedWebhook:
    """A webhook whose signature and freshness passed: the keys that de-duplicate it.
    ``event_id`` is Prolific's ``X-Event-ID`` (stable across its retries, documented, but not
    signed) or, when the header is missing, ``sha256:`` + :attr:`signed_hash`; ``signed_hash``
    is the hash of what was signed (timestamp + the body in the form whose signature matched), so
    the same signed content re-sent under a new event id is a duplicate too."""

    event_id: str
    signed_hash: str
    id_missing: bool = False


def verify_webhook(secret: str, headers: Mapping[str, str], body: bytes, *, now: float,
                   tolerance_s: float = 300.0) -> VerifiedWebhook:
    """Check a webhook's signature and freshness; returns its de-duplication keys (the caller
    records them). The signature may cover the raw body or its :func:`documented_form`; both are
    compared in constant time. Raises :class:`WebhookRejected` with the HTTP status to answer:
    400 for a missing signature or timestamp or a timestamp that is not Unix seconds, 401 for a
    stale or future timestamp (more than ``tolerance_s`` away) or a bad signature. A missing
    ``X-Event-ID`` is not refused (see :class:`VerifiedWebhook`)."""
    lower = {str(k).lower(): v for k, v in headers.items()}
    signature, timestamp, event_id = (lower.get(h.lower()) for h in (SIGNATURE, TIMESTAMP, EVENT_ID))
    missing = [h for h, v in ((SIGNATURE, signature), (TIMESTAMP, timestamp)) if not v]
    if missing:
        raise WebhookRejected(f"missing {', '.join(missing)}", 400)
    timestamp = str(timestamp).strip()
    if not _DECIMAL.match(timestamp):
        raise WebhookRejected("the timestamp is not Unix seconds", 400)
    age = now - float(timestamp)
    if abs(age) > tolerance_s:
        raise WebhookRejected(f"{'stale' if age > 0 else 'future'} timestamp ({age:+.0f} s)", 401)
    given = str(signature).strip().encode()
    forms = [body] + [f for f in (documented_form(body),) if f is not None and f != body]
    # every form is compared (no early exit), each in constant time
    signed = [form for form in forms if hmac.compare_digest(sign_webhook(secret, timestamp, form).encode(), given)]
    if not signed:
        raise WebhookRejected("bad signature", 401)
    # the hash of what was signed (the matching form): a body re-spaced around the same signed
    # form is the same content
    signed_hash = hashlib.sha256(timestamp.encode() + b"\n" + signed[0]).hexdigest()
    event = str(event_id).strip() if event_id else ""
    return VerifiedWebhook(event or f"sha256:{signed_hash}", signed_hash, id_missing=not event)
