"""Argilla's webhooks to the portal: participants' responses reported as they happen, so
monitoring reads from Argilla only whom activity names (plus a slow backstop) instead of every
participant on every pass.

- :func:`register` (the portal does it when it starts): one webhook on the Argilla server for
  ``response.created|updated|deleted`` to ``<portal>/hooks/argilla``, found by its URL (never a
  second one); its secret goes to the owner-only study store (:data:`SECRET_META`), with the
  server it belongs to (:data:`SERVER_META`) - monitoring relies on webhooks only for that
  server.
- :func:`stand_down` (the portal does it when it stops): monitoring polls again and the webhook
  is disabled until the next :func:`register`.
- :func:`verify`: Standard Webhooks signatures (``webhook-id``, ``webhook-timestamp``,
  ``webhook-signature``; what Argilla's rq worker signs with), 5 minutes of tolerance.
- :func:`parse`: the few facts monitoring needs from a response event (the payload also holds
  the answer's text, the dataset's guidelines...: nothing of it is logged or kept).

No web framework and no Argilla call in the request path: the portal's handler records the
activity in one short store write (see :meth:`crowdpref.store.Store.note_activity`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from crowdpref.errors import CrowdprefError

log = logging.getLogger("crowdpref.portal")

EVENTS = ("response.created", "response.updated", "response.deleted")
PATH = "/hooks/argilla"
SECRET_META = "argilla_webhook_secret"
ID_META = "argilla_webhook_id"
SERVER_META = "argilla_webhook_server"  # the Argilla API URL the webhook is registered on


class WebhookRejected(CrowdprefError):
    """A delivery that is not Argilla's (bad or missing signature, stale timestamp)."""


@dataclass(frozen=True)
class ResponseEvent:
    """One response event, reduced to what monitoring uses."""

    kind: str  # response.created | response.updated | response.deleted
    dataset_id: str | None
    workspace: str | None  # = the participant's account username
    username: str | None  # who answered (their own answers count; the owner's never)
    record_external_id: str | None  # our item id
    status: str | None  # draft | submitted | discarded
    updated_at: float | None  # epoch seconds

    def __repr__(self) -> str:  # no values, no names
        return f"ResponseEvent({self.kind}, {self.status})"


def hook_url(settings: Any) -> str:
    """Where Argilla delivers: the portal's public address; with the embedded Argilla, the portal
    itself on HOST (Argilla's worker runs on the same machine: no detour through Caddy, which
    answers 404 there, and no trust in Caddy's certificate - which ``public_tls: internal`` would
    need)."""
    if getattr(settings, "embedded_argilla", False):
        host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
        return f"http://{host}:{settings.portal_port}{PATH}"
    return f"{settings.portal_public_url}{PATH}"


def register(owner: Any, store: Any, url: str) -> str:
    """Register (or find) the webhook to ``url`` on ``owner``'s Argilla and keep its secret in
    the store. Idempotent. Returns the webhook id."""
    webhook_id, secret = owner.ensure_webhook(url, EVENTS, description="crowdpref portal: responses")
    if store.get_meta(SECRET_META) != secret:
        store.set_meta(SECRET_META, secret)
    if store.get_meta(ID_META) != webhook_id:
        store.set_meta(ID_META, webhook_id)
    if store.get_meta(SERVER_META) != owner.api_url:
        store.set_meta(SERVER_META, owner.api_url[:200])
    return webhook_id


def stand_down(store: Any, api_url: str, disable: Callable[[str], None]) -> bool:
    """The portal is stopping: monitoring stops relying on webhooks from the Argilla at
    ``api_url`` (it reads every active participant again, as without webhooks), then
    ``disable(webhook_id)`` stops Argilla delivering to a portal that no longer listens
    (disabled, not deleted: the next :func:`register` enables it again, same id and secret).
    The store is told first, so an Argilla that cannot be reached leaves polling on, never off.
    Returns whether a webhook was in use."""
    webhook_id = store.get_meta(ID_META)
    if webhook_id is None or not registered_for(store, api_url):
        return False
    store.set_meta(SERVER_META, "")
    disable(webhook_id)
    return True


def registered_for(store: Any, api_url: str) -> bool:
    """Whether this store receives Argilla's webhooks from the server at ``api_url``."""
    server = store.get_meta(SERVER_META)
    return bool(server) and server == api_url.rstrip("/")[:200] and store.get_meta(SECRET_META) is not None


def verify(secret: str, headers: Mapping[str, str], body: bytes) -> str:
    """Check a delivery's Standard Webhooks signature; returns its ``webhook-id``. Raises
    :class:`WebhookRejected` (the reason names no secret and no payload value)."""
    from standardwebhooks.webhooks import Webhook, WebhookVerificationError

    lower = {k.lower(): v for k, v in headers.items()}
    needed = ("webhook-id", "webhook-timestamp", "webhook-signature")
    if any(name not in lower for name in needed):
        raise WebhookRejected("missing Standard Webhooks headers")
    try:
        Webhook(secret).verify(body, {name: lower[name] for name in needed})
    except WebhookVerificationError as exc:
        raise WebhookRejected(f"bad signature ({str(exc)[:60]})") from None
    except Exception:  # noqa: BLE001 - a malformed header or secret: rejected, not a 500
        raise WebhookRejected("bad signature") from None
    return lower["webhook-id"]


def parse(payload: Any) -> ResponseEvent | None:
    """The response event in a delivery's JSON payload; None for anything else."""
    if not isinstance(payload, dict):
        return None
    kind = payload.get("type")
    data = payload.get("data")
    if kind not in EVENTS or not isinstance(data, dict):
        return None
    record = data.get("record") if isinstance(data.get("record"), dict) else {}
    dataset = record.get("dataset") if isinstance(record.get("dataset"), dict) else {}
    workspace = dataset.get("workspace") if isinstance(dataset.get("workspace"), dict) else {}
    user = data.get("user") if isinstance(data.get("user"), dict) else {}
    return ResponseEvent(
        kind=str(kind),
        dataset_id=_str(dataset.get("id")),
        workspace=_str(workspace.get("name")),
        username=_str(user.get("username")),
        record_external_id=_str(record.get("external_id")),
        status=_str(data.get("status")),
        updated_at=_epoch(data.get("updated_at")),
    )


def _str(value: Any) -> str | None:
    return str(value) if isinstance(value, (str, int)) and str(value) else None


def _epoch(value: Any) -> float | None:
    from crowdpref.argilla_client import _parse_time

    if not isinstance(value, str):
        return None
    try:
        parsed: datetime | None = _parse_time(value)
    except ValueError:
        return None
    return parsed.timestamp() if parsed is not None else None
