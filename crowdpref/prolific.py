"""A small client for Prolific's REST API (httpx, explicit timeouts, typed errors) and the
signature check of Prolific's webhooks.

Retries: only where a repeat cannot do harm. Reads and idempotent writes retry on 429, 5xx and
transport errors with exponential backoff and jitter (``Retry-After`` honoured). Calls that
create something (a study, a participant group, a webhook secret or subscription, a bonus)
retry only when the request certainly never reached Prolific (429, a refused connection);
after a 5xx or a dropped read they fail at once and the caller reconciles (the recruit step
looks its study up by internal name). Paying bonuses is never retried.

The token is sent in a header and never appears in an error, a repr or a log line.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from crowdpref.errors import ConfigError, CrowdprefError

CallKind = Literal["read", "idempotent", "create", "never"]


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
    """Another 4xx: Prolific refused the request as made (validation...)."""


class ProlificUnavailable(ProlificError):
    """429 / 5xx / network trouble, still failing after the retries allowed for the call."""


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
        return cls(id=str(data["id"]), name=str(data.get("name", "")), internal_name=data.get("internal_name"),
                   status=str(data.get("status", "")), total_available_places=int(data.get("total_available_places") or 0),
                   external_study_url=str(data.get("external_study_url", "")),
                   completion_codes=list(data.get("completion_codes") or []), filters=list(data.get("filters") or []),
                   places_taken=data.get("places_taken"), raw=dict(data))


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
    def from_json(cls, data: Mapping[str, Any]) -> Submission:
        return cls(id=str(data["id"]), participant_id=str(data.get("participant_id") or data.get("participant", "")),
                   study_id=str(data.get("study_id", "")), status=str(data.get("status", "")),
                   started_at=data.get("started_at"), completed_at=data.get("completed_at"),
                   study_code=data.get("study_code"), raw=dict(data))

    def __repr__(self) -> str:  # participant ids are personal data: keep them out of logs
        return f"Submission(status={self.status!r})"


def retry_decision(kind: CallKind, outcome: httpx.Response | BaseException) -> bool:
    """Whether a failed attempt may be repeated. ``outcome`` is the response (a status worth
    judging) or the transport exception."""
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


class ProlificClient:
    """Prolific's API at ``base_url`` (``https://api.prolific.com/api/v1/``) with a token."""

    def __init__(self, base_url: str, token: str, *, timeout_s: float = 15.0, max_attempts: int = 5,
                 backoff_s: float = 0.5, transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        self.base_url = base_url.rstrip("/") + "/"
        self.max_attempts = max(1, max_attempts)
        self.backoff_s = backoff_s
        self.sleep = sleep
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, transport=transport,
                                  headers={"Authorization": f"Token {token}", "Accept": "application/json"})

    @classmethod
    def from_settings(cls, settings: Any, base_url: str | None = None, **options: Any) -> ProlificClient:
        if settings.prolific_token is None:
            raise ConfigError("PROLIFIC_TOKEN is not set: create an API token in Prolific (Settings > API tokens) "
                              "and export PROLIFIC_TOKEN=...")
        return cls(base_url or settings.prolific_api_url, settings.prolific_token.get_secret_value(), **options)

    def __repr__(self) -> str:
        return f"ProlificClient({self.base_url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ProlificClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # the one request path ------------------------------------------------------------------------
    def _request(self, method: str, path: str, kind: CallKind = "read", **kwargs: Any) -> Any:
        call = f"{method} {path.split('?', 1)[0]}"
        for attempt in range(1, self.max_attempts + 1):
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                if attempt < self.max_attempts and retry_decision(kind, exc):
                    self._wait(attempt, None)
                    continue
                raise ProlificUnavailable(f"Prolific {call} failed: {exc.__class__.__name__} (network): check the "
                                          "connection and retry", transient=True) from None
            if response.status_code < 400:
                return response.json() if response.content else {}
            if attempt < self.max_attempts and retry_decision(kind, response):
                self._wait(attempt, response.headers.get("Retry-After"))
                continue
            raise self._error(call, response)
        raise AssertionError("unreachable")

    def _wait(self, attempt: int, retry_after: str | None) -> None:
        delay = self.backoff_s * 2 ** (attempt - 1) * (1 + random.random() / 2)
        if retry_after is not None:
            try:
                delay = max(delay, float(retry_after))
            except ValueError:
                pass
        self.sleep(min(delay, 60.0))

    @staticmethod
    def _error(call: str, response: httpx.Response) -> ProlificError:
        status = response.status_code
        try:
            body = response.json()
            detail = body.get("error", body) if isinstance(body, dict) else body
            if isinstance(detail, dict):
                detail = detail.get("detail", detail)
            excerpt = str(detail)[:200]
        except ValueError:
            excerpt = response.text[:200]
        if status in (401, 403):
            return ProlificAuthError(f"Prolific {call}: {status} (not allowed): check PROLIFIC_TOKEN and the "
                                     "workspace it belongs to", status)
        if status == 404:
            return ProlificNotFound(f"Prolific {call}: 404 (not found)", status)
        if status == 429 or status >= 500:
            return ProlificUnavailable(f"Prolific {call}: {status} after retries: try again later", status,
                                       transient=True)
        return ProlificRequestError(f"Prolific {call}: {status}: {excerpt}", status)

    def _pages(self, path: str, params: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Every result of a paginated list (``results`` + ``_links.next.href``)."""
        data = self._request("GET", path, params=params)
        while True:
            yield from data.get("results", [])
            nxt = ((data.get("_links") or {}).get("next") or {}).get("href")
            if not nxt:
                return
            if nxt.startswith(self.base_url):
                nxt = nxt[len(self.base_url):]
            elif nxt.startswith("http"):  # absolute elsewhere on the same API: keep the path
                nxt = nxt.split("/api/v1/", 1)[-1]
            data = self._request("GET", nxt.lstrip("/"))

    # studies ---------------------------------------------------------------------------------------
    def create_study(self, payload: Mapping[str, Any]) -> Study:
        return Study.from_json(self._request("POST", "studies/", "create", json=dict(payload)))

    def list_studies(self) -> list[Study]:
        return [Study.from_json(s) for s in self._pages("studies/")]

    def get_study(self, study_id: str) -> Study:
        return Study.from_json(self._request("GET", f"studies/{study_id}/"))

    def transition_study(self, study_id: str, action: str) -> Study:
        return Study.from_json(self._request("POST", f"studies/{study_id}/transition/", "idempotent",
                                             json={"action": action}))

    def publish_study(self, study_id: str) -> Study:
        return self.transition_study(study_id, "PUBLISH")

    def pause_study(self, study_id: str) -> Study:
        return self.transition_study(study_id, "PAUSE")

    def start_study(self, study_id: str) -> Study:
        return self.transition_study(study_id, "START")

    def stop_study(self, study_id: str) -> Study:
        return self.transition_study(study_id, "STOP")

    def increase_places(self, study_id: str, total: int) -> Study:
        """Places can only go up once a study is published."""
        current = self.get_study(study_id).total_available_places
        if total < current:
            raise ValueError(f"Prolific places can only increase (study has {current}, asked for {total})")
        return Study.from_json(self._request("PATCH", f"studies/{study_id}/", "idempotent",
                                             json={"total_available_places": total}))

    # submissions -----------------------------------------------------------------------------------
    def list_submissions(self, study_id: str) -> list[Submission]:
        return [Submission.from_json(s) for s in self._pages(f"studies/{study_id}/submissions/")]

    def get_submission(self, submission_id: str) -> Submission:
        return Submission.from_json(self._request("GET", f"submissions/{submission_id}/"))

    def submission_counts(self, study_id: str) -> dict[str, int]:
        return {str(k): int(v) for k, v in self._request("GET", f"studies/{study_id}/submissions/counts/").items()}

    def approve_submission(self, submission_id: str) -> Submission:
        return Submission.from_json(self._request("POST", f"submissions/{submission_id}/transition/", "idempotent",
                                                  json={"action": "APPROVE"}))

    def reject_submission(self, submission_id: str, message: str, category: str) -> Submission:
        if len(message) < 100:
            raise ValueError(f"Prolific needs a rejection message of at least 100 characters (got {len(message)})")
        return Submission.from_json(self._request(
            "POST", f"submissions/{submission_id}/transition/", "idempotent",
            json={"action": "REJECT", "message": message, "rejection_category": category}))

    def bulk_approve(self, submission_ids: list[str]) -> dict[str, Any]:
        return self._request("POST", "submissions/bulk-approve/", "idempotent",
                             json={"submission_ids": list(submission_ids)})

    def request_return(self, submission_id: str, reasons: list[str]) -> dict[str, Any]:
        return self._request("POST", f"submissions/{submission_id}/request-return/", "idempotent",
                             json={"request_return_reasons": list(reasons)})

    # participant groups -------------------------------------------------------------------------------
    def create_participant_group(self, name: str, workspace_id: str | None = None) -> str:
        body: dict[str, Any] = {"name": name}
        if workspace_id:
            body["workspace_id"] = workspace_id
        return str(self._request("POST", "participant-groups/", "create", json=body)["id"])

    def participant_group_members(self, group_id: str) -> list[str]:
        return [str(m.get("participant_id")) for m in self._pages(f"participant-groups/{group_id}/participants/")]

    def add_to_participant_group(self, group_id: str, participant_ids: list[str]) -> None:
        self._request("POST", f"participant-groups/{group_id}/participants/", "idempotent",
                      json={"participant_ids": list(participant_ids)})

    def remove_from_participant_group(self, group_id: str, participant_ids: list[str]) -> None:
        self._request("DELETE", f"participant-groups/{group_id}/participants/", "idempotent",
                      json={"participant_ids": list(participant_ids)})

    # bonuses -------------------------------------------------------------------------------------------
    def create_bonus(self, study_id: str, csv_bonuses: str) -> str:
        return str(self._request("POST", "submissions/bonus-payments/", "create",
                                 json={"study_id": study_id, "csv_bonuses": csv_bonuses})["id"])

    def pay_bonus(self, bonus_id: str) -> dict[str, Any]:
        """Pays real money: never retried (record that it was sent before calling)."""
        return self._request("POST", f"bulk-bonus-payments/{bonus_id}/pay/", "never")

    # webhooks ------------------------------------------------------------------------------------------
    def create_webhook_secret(self, workspace_id: str) -> str:
        return str(self._request("POST", "hooks/secrets/", "create", json={"workspace_id": workspace_id})["secret"])

    def subscribe_webhook(self, workspace_id: str, event_type: str, target_url: str) -> tuple[str, str]:
        call = "POST hooks/subscriptions/"
        for attempt in range(1, self.max_attempts + 1):  # the hook secret is in a header: own loop
            try:
                response = self._http.post("hooks/subscriptions/", json={
                    "workspace_id": workspace_id, "event_type": event_type, "target_url": target_url})
            except httpx.TransportError as exc:
                if attempt < self.max_attempts and retry_decision("create", exc):
                    self._wait(attempt, None)
                    continue
                raise ProlificUnavailable(f"Prolific {call} failed: {exc.__class__.__name__} (network)",
                                          transient=True) from None
            if response.status_code < 400:
                body = response.json()
                secret = response.headers.get("X-Hook-Secret") or body.get("X-Hook-Secret") or body.get("secret")
                return str(body["id"]), str(secret)
            if attempt < self.max_attempts and retry_decision("create", response):
                self._wait(attempt, response.headers.get("Retry-After"))
                continue
            raise self._error(call, response)
        raise AssertionError("unreachable")

    def confirm_webhook(self, subscription_id: str, hook_secret: str) -> dict[str, Any]:
        return self._request("POST", f"hooks/subscriptions/{subscription_id}/", "idempotent",
                             json={"secret": hook_secret})

    def webhook_event_types(self) -> list[str]:
        data = self._request("GET", "hooks/event-types/")
        items = data.get("results", data) if isinstance(data, dict) else data
        return [str(i.get("event_type", i)) if isinstance(i, dict) else str(i) for i in items]


# --- webhook signatures ----------------------------------------------------------------------------------
SIGNATURE, TIMESTAMP, EVENT_ID = "X-Prolific-Request-Signature", "X-Prolific-Request-Timestamp", "X-Event-ID"


def sign_webhook(secret: str, timestamp: str, body: bytes) -> str:
    """base64(HMAC-SHA256(secret, timestamp + body)), as Prolific signs its webhooks."""
    mac = hmac.new(secret.encode(), timestamp.encode() + body, hashlib.sha256).digest()
    return base64.b64encode(mac).decode()


def verify_webhook(secret: str, headers: Mapping[str, str], body: bytes, *, now: float,
                   tolerance_s: float = 300.0) -> str:
    """Check a webhook's signature and freshness; returns its event id (for de-duplication).
    Raises :class:`WebhookRejected` with the HTTP status to answer."""
    lower = {k.lower(): v for k, v in headers.items()}
    signature, timestamp, event_id = (lower.get(h.lower()) for h in (SIGNATURE, TIMESTAMP, EVENT_ID))
    missing = [h for h, v in ((SIGNATURE, signature), (TIMESTAMP, timestamp), (EVENT_ID, event_id)) if not v]
    if missing:
        raise WebhookRejected(f"missing {', '.join(missing)}", 400)
    try:
        sent = float(timestamp)  # type: ignore[arg-type]
    except ValueError:
        raise WebhookRejected("the timestamp is not a number", 400) from None
    if abs(now - sent) > tolerance_s:
        raise WebhookRejected(f"stale timestamp ({now - sent:+.0f} s)", 401)
    expected = sign_webhook(secret, timestamp, body)  # type: ignore[arg-type]
    if not hmac.compare_digest(expected.encode(), str(signature).encode()):
        raise WebhookRejected("bad signature", 401)
    return str(event_id)
