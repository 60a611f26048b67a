"""A fake Prolific that follows the documented API shapes (../shared/notes/prolific-api.md),
so the REAL client (crowdpref.prolific) and the portal can be driven over HTTP.

    with FakeProlific() as fake:
        client = ProlificClient(fake.base_url, fake.token)

Serves ``/api/v1/`` (token auth) on 127.0.0.1: studies (draft -> ACTIVE -> PAUSED / COMPLETED,
places only up once published, paginated lists), submissions with their statuses (RESERVED,
ACTIVE, TIMED-OUT, AWAITING REVIEW, APPROVED, RETURNED, REJECTED), approve / reject / bulk
approve, participant groups, bonuses, webhook secrets and subscriptions (confirm handshake).
Every status change of a submission is delivered to the confirmed ``submission.status.change``
subscriptions, signed like Prolific (base64 HMAC-SHA256 over timestamp + body - computed here
independently of crowdpref's own code), at least once: failures are retried (up to 12
attempts), ``duplicate_deliveries`` sends every event twice with the same ``X-Event-ID``,
``drop_webhooks`` sends nothing (the "webhook never arrives" case).

Test control (not Prolific's API, no auth, also as methods): ``POST /_fake/studies/{id}/arrive``
(a participant takes a place: their PROLIFIC_PID, SESSION_ID and the filled-in study URL),
``/_fake/submissions/{id}/return|time-out|complete``, ``/_fake/config``, ``/_fake/faults``
(the next n API requests answer 503 or 429 - with ``retry_after`` if asked - or are cut off
without a reply, ``disconnect: "before"`` unprocessed or ``"after"`` processed: the lost-reply
case). ``GET /submissions/complete?cc=CODE`` is the completion page participants land on.
Run as a process for the demo:
``python -m tests.fakes.prolific_server --host 127.0.0.1 --port 6920``.

Python equivalents: :meth:`FakeProlific.arrive`, :meth:`~FakeProlific.return_submission`,
:meth:`~FakeProlific.time_out`, :meth:`~FakeProlific.complete`, :meth:`~FakeProlific.configure`,
:meth:`~FakeProlific.add_faults`; ``requests`` logs (method, path) of every API request,
``deliveries`` every webhook attempt, ``completion_visits`` the codes seen on the completion page.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import html
import json
import queue
import secrets
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

DEFAULT_TOKEN = "fake-prolific-token"
FREEING = ("RETURNED", "TIMED-OUT", "REJECTED")
TRANSITIONS = {"PUBLISH": ({"UNPUBLISHED"}, "ACTIVE"), "PAUSE": ({"ACTIVE"}, "PAUSED"),
               "START": ({"PAUSED"}, "ACTIVE"), "STOP": ({"ACTIVE", "PAUSED"}, "COMPLETED")}
PLACEHOLDERS = ("{{%PROLIFIC_PID%}}", "{{%STUDY_ID%}}", "{{%SESSION_ID%}}")


def _hex_id() -> str:
    return secrets.token_hex(12)  # 24 hex digits, like Prolific's ids


class ApiError(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


class FakeProlific:
    def __init__(self, token: str = DEFAULT_TOKEN, page_size: int = 2, host: str = "127.0.0.1", port: int = 0,
                 retry_delay_s: float = 0.2, duplicate_deliveries: bool = False, drop_webhooks: bool = False):
        self.token = token
        self.page_size = page_size
        self.retry_delay_s = retry_delay_s
        self.duplicate_deliveries = duplicate_deliveries
        self.drop_webhooks = drop_webhooks
        self.lock = threading.RLock()
        self.studies: dict[str, dict[str, Any]] = {}
        self.submissions: dict[str, dict[str, Any]] = {}
        self.groups: dict[str, dict[str, Any]] = {}
        self.bonuses: dict[str, dict[str, Any]] = {}
        self.secrets: dict[str, str] = {}  # workspace -> active secret
        self.subscriptions: dict[str, dict[str, Any]] = {}
        self.deliveries: list[tuple[str, str, int, int | None]] = []  # event id, status, attempt, http status
        self.completion_visits: list[str] = []
        self.requests: list[tuple[str, str]] = []  # method, path of every API request
        #: what the next API requests get instead of an answer: a status (int) or a dict
        #: {"status", "retry_after"} / {"disconnect": "before" | "after"} (see add_faults)
        self.faults: list[int | dict[str, Any]] = []
        self._events: queue.Queue[tuple[dict[str, Any], str, list[str]] | None] = queue.Queue()
        self._pending = 0
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self.host, self.port = self._server.server_address[:2]
        self._threads: list[threading.Thread] = []

    @property
    def app_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.app_url}/api/v1/"

    def start(self) -> FakeProlific:
        for target in (lambda: self._server.serve_forever(poll_interval=0.05), self._deliver_forever):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        if not self._threads:
            return
        self._events.put(None)
        self._server.shutdown()
        self._server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []

    def __enter__(self) -> FakeProlific:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the API --------------------------------------------------------------------------------
    def api(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        parts = [p for p in path.strip("/").split("/") if p]
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        with self.lock:
            if parts == ["studies"] and method == "POST":
                return 201, self._create_study(body)
            if parts == ["studies"] and method == "GET":
                return 200, self._page(list(self.studies.values()), path, query)
            if len(parts) >= 2 and parts[0] == "studies":
                study = self._get(self.studies, parts[1], "study")
                if len(parts) == 2 and method == "GET":
                    return 200, study
                if len(parts) == 2 and method == "PATCH":
                    return 200, self._patch_study(study, body)
                if parts[2:] == ["transition"] and method == "POST":
                    return 200, self._transition(study, str(body.get("action", "")))
                if parts[2:] == ["submissions"] and method == "GET":
                    subs = [s for s in self.submissions.values() if s["study_id"] == study["id"]]
                    return 200, self._page(subs, path, query)
                if parts[2:] == ["submissions", "counts"] and method == "GET":
                    counts: dict[str, int] = {}
                    for s in self.submissions.values():
                        if s["study_id"] == study["id"]:
                            counts[s["status"]] = counts.get(s["status"], 0) + 1
                    return 200, counts
            if parts == ["submissions"] and method == "GET":
                subs = [s for s in self.submissions.values() if s["study_id"] == query.get("study", s["study_id"])]
                return 200, self._page(subs, path, query)
            if parts == ["submissions", "bulk-approve"] and method == "POST":
                for sid in body.get("submission_ids", []):
                    sub = self._get(self.submissions, sid, "submission")
                    if sub["status"] == "AWAITING REVIEW":
                        self._set_status(sub, "APPROVED")
                return 202, {"status": "accepted"}
            if parts == ["submissions", "bonus-payments"] and method == "POST":
                bonus_id = _hex_id()
                if body.get("study_id") not in self.studies:
                    raise ApiError(400, "study_id: unknown study")
                if not str(body.get("csv_bonuses") or "").strip():
                    raise ApiError(400, "csv_bonuses: required")
                self.bonuses[bonus_id] = {"id": bonus_id, "study_id": body.get("study_id"), "paid": 0,
                                          "pay_calls": 0, "csv_bonuses": body.get("csv_bonuses")}
                return 201, self.bonuses[bonus_id]
            if len(parts) >= 2 and parts[0] == "submissions":
                sub = self._get(self.submissions, parts[1], "submission")
                if len(parts) == 2 and method == "GET":
                    return 200, sub
                if parts[2:] == ["transition"] and method == "POST":
                    return 200, self._review(sub, body)
                if parts[2:] == ["request-return"] and method == "POST":
                    sub["return_requested"] = True
                    return 200, sub
            if parts == ["bulk-bonus-payments", *parts[1:2], "pay"] and len(parts) == 3 and method == "POST":
                bonus = self._get(self.bonuses, parts[1], "bonus")
                bonus["pay_calls"] += 1
                if bonus["paid"]:
                    raise ApiError(400, "this bonus has already been paid")
                bonus["paid"] += 1
                return 200, bonus
            if parts == ["participant-groups"] and method == "POST":
                group_id = _hex_id()
                self.groups[group_id] = {"id": group_id, "name": body.get("name"), "members": []}
                return 201, {"id": group_id, "name": body.get("name")}
            if len(parts) == 3 and parts[0] == "participant-groups" and parts[2] == "participants":
                group = self._get(self.groups, parts[1], "participant group")
                ids = list(body.get("participant_ids", [])) if isinstance(body, dict) else []
                if method == "GET":
                    return 200, self._page([{"participant_id": m} for m in group["members"]], path, query)
                if method == "POST":
                    group["members"] += [i for i in ids if i not in group["members"]]
                    return 200, {"count": len(group["members"])}
                if method == "DELETE":
                    group["members"] = [m for m in group["members"] if m not in ids]
                    return 200, {"count": len(group["members"])}
            if parts == ["hooks", "secrets"] and method == "POST":
                secret = base64.b64encode(secrets.token_bytes(48)).decode()
                self.secrets[str(body.get("workspace_id"))] = secret
                return 201, {"id": _hex_id(), "secret": secret, "workspace_id": body.get("workspace_id")}
            if parts == ["hooks", "event-types"] and method == "GET":
                return 200, {"results": [{"event_type": t} for t in (
                    "submission.status.change", "study.status.change", "study.progress.change",
                    "study.has_high_return_rate")]}
            if parts == ["hooks", "subscriptions"] and method == "POST":
                sub_id = _hex_id()
                self.subscriptions[sub_id] = {"id": sub_id, "workspace_id": str(body.get("workspace_id")),
                                              "event_type": body.get("event_type"), "target_url": body.get("target_url"),
                                              "is_enabled": False, "hook_secret": secrets.token_hex(16)}
                public = {k: v for k, v in self.subscriptions[sub_id].items() if k != "hook_secret"}
                return 201, (public, {"X-Hook-Secret": self.subscriptions[sub_id]["hook_secret"]})
            if len(parts) == 3 and parts[:2] == ["hooks", "subscriptions"] and method == "POST":
                sub = self._get(self.subscriptions, parts[2], "subscription")
                if body.get("secret") != sub["hook_secret"]:
                    raise ApiError(400, "the X-Hook-Secret does not match")
                sub["is_enabled"] = True
                return 200, {k: v for k, v in sub.items() if k != "hook_secret"}
        raise ApiError(404, f"no route {method} /{path}")

    def _get(self, table: dict[str, dict[str, Any]], key: str, what: str) -> dict[str, Any]:
        if key not in table:
            raise ApiError(404, f"{what} not found")
        return table[key]

    def _page(self, items: list[dict[str, Any]], path: str, query: dict[str, str]) -> dict[str, Any]:
        page = int(query.get("page", "1"))
        start = (page - 1) * self.page_size
        chunk = items[start:start + self.page_size]
        nxt = None
        if start + self.page_size < len(items):
            rest = "&".join(f"{k}={v}" for k, v in query.items() if k != "page")
            nxt = f"{self.base_url}{path.strip('/')}/?page={page + 1}" + (f"&{rest}" if rest else "")
        return {"results": chunk, "_links": {"next": {"href": nxt}}, "meta": {"count": len(items)}}

    def _create_study(self, body: dict[str, Any]) -> dict[str, Any]:
        url = str(body.get("external_study_url") or "")
        problems = [f"{f}: required" for f in ("name", "external_study_url", "completion_codes") if not body.get(f)]
        if url:
            problems += [f"external_study_url lacks {p}" for p in PLACEHOLDERS if p not in url]
        codes = body.get("completion_codes")
        if codes and (not isinstance(codes, list) or not all(isinstance(c, dict) and c.get("code") for c in codes)):
            problems.append("completion_codes must be a list of {code, code_type, actions}")
        places = body.get("total_available_places")
        if not isinstance(places, int) or isinstance(places, bool) or places < 1:
            problems.append("total_available_places must be an integer of at least 1")
        if problems:
            raise ApiError(400, "; ".join(problems))
        study = dict(body, id=_hex_id(), status="UNPUBLISHED", places_taken=0)
        self.studies[study["id"]] = study
        return study

    def _patch_study(self, study: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        if study["status"] != "UNPUBLISHED":
            extra = set(body) - {"internal_name", "total_available_places"}
            if extra:
                raise ApiError(400, f"a published study can only change internal_name and places, not {sorted(extra)}")
            if "total_available_places" in body and int(body["total_available_places"]) < study["total_available_places"]:
                raise ApiError(400, "places can only increase once a study is published")
        if "total_available_places" in body:
            places = body["total_available_places"]
            if not isinstance(places, int) or isinstance(places, bool) or places < 1:
                raise ApiError(400, "total_available_places must be an integer of at least 1")
        study.update(body)
        return study

    def _transition(self, study: dict[str, Any], action: str) -> dict[str, Any]:
        if action not in TRANSITIONS or study["status"] not in TRANSITIONS[action][0]:
            raise ApiError(409, f"cannot {action} a study that is {study['status']}")
        study["status"] = TRANSITIONS[action][1]
        return study

    def _review(self, sub: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        action = body.get("action")
        if action == "APPROVE":
            if sub["status"] == "APPROVED":
                return sub
            if sub["status"] != "AWAITING REVIEW":
                raise ApiError(409, f"cannot approve a submission that is {sub['status']}")
            self._set_status(sub, "APPROVED")
            return sub
        if action == "REJECT":
            if len(str(body.get("message", ""))) < 100 or not body.get("rejection_category"):
                raise ApiError(400, "a rejection needs a message of at least 100 characters and a rejection_category")
            if sub["status"] == "REJECTED":
                return sub
            if sub["status"] != "AWAITING REVIEW":
                raise ApiError(409, f"cannot reject a submission that is {sub['status']}")
            self._set_status(sub, "REJECTED")
            return sub
        raise ApiError(400, f"unknown action {action!r}")

    def _taken(self, study_id: str) -> int:
        return sum(1 for s in self.submissions.values() if s["study_id"] == study_id and s["status"] not in FREEING)

    # --- participants (test control) ------------------------------------------------------------------
    def arrive(self, study_id: str, participant_id: str | None = None) -> dict[str, Any]:
        with self.lock:
            study = self._get(self.studies, study_id, "study")
            if study["status"] != "ACTIVE":
                raise ApiError(409, "not active")
            pid = participant_id or _hex_id()
            for f in study.get("filters") or []:
                if f.get("filter_id") == "participant_group_blocklist":
                    if any(pid in self.groups.get(g, {}).get("members", []) for g in f.get("selected_values", [])):
                        raise ApiError(403, "blocklisted")
            if any(s["participant_id"] == pid and s["study_id"] == study_id for s in self.submissions.values()):
                raise ApiError(409, "this participant already has a submission for this study")
            if self._taken(study_id) >= int(study["total_available_places"]):
                raise ApiError(409, "no places")
            session = _hex_id()
            self.submissions[session] = {"id": session, "participant_id": pid, "study_id": study_id,
                                         "status": "ACTIVE", "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                         "completed_at": None, "study_code": None}
            study["places_taken"] = self._taken(study_id)
            url = study["external_study_url"]
            for placeholder, value in zip(PLACEHOLDERS, (pid, study_id, session)):
                url = url.replace(placeholder, value)
            return {"participant_id": pid, "session_id": session, "study_id": study_id, "url": url}

    def return_submission(self, submission_id: str) -> dict[str, Any]:
        return self._participant_moves(submission_id, "RETURNED")

    def time_out(self, submission_id: str) -> dict[str, Any]:
        return self._participant_moves(submission_id, "TIMED-OUT")

    def _participant_moves(self, submission_id: str, status: str) -> dict[str, Any]:
        with self.lock:
            sub = self._get(self.submissions, submission_id, "submission")
            if sub["status"] not in ("RESERVED", "ACTIVE"):
                raise ApiError(409, f"submission is {sub['status']}")
            self._set_status(sub, status)
            return sub

    def complete(self, submission_id: str, code: str) -> dict[str, Any]:
        """What Prolific does when a participant lands on the completion URL with ``code``."""
        with self.lock:
            sub = self._get(self.submissions, submission_id, "submission")
            study = self.studies[sub["study_id"]]
            match = next((c for c in study.get("completion_codes") or [] if c.get("code") == code), None)
            if match is None:
                raise ApiError(400, "unknown completion code")
            if sub["status"] not in ("RESERVED", "ACTIVE"):
                raise ApiError(409, f"submission is {sub['status']}")
            sub["study_code"] = code
            sub["completed_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ")
            self._set_status(sub, "AWAITING REVIEW")
            for action in match.get("actions") or []:
                if action.get("action") == "ADD_TO_PARTICIPANT_GROUP":
                    group = self.groups.get(str(action.get("participant_group")))
                    if group is not None and sub["participant_id"] not in group["members"]:
                        group["members"].append(sub["participant_id"])
                if action.get("action") == "AUTOMATICALLY_APPROVE":
                    self._set_status(sub, "APPROVED")
            return sub

    def configure(self, duplicate_deliveries: bool | None = None, drop_webhooks: bool | None = None) -> dict[str, bool]:
        """Change the delivery options (None: leave as is); returns them."""
        with self.lock:
            if duplicate_deliveries is not None:
                self.duplicate_deliveries = bool(duplicate_deliveries)
            if drop_webhooks is not None:
                self.drop_webhooks = bool(drop_webhooks)
            return {"duplicate_deliveries": self.duplicate_deliveries, "drop_webhooks": self.drop_webhooks}

    def add_faults(self, status: int = 503, count: int = 1, retry_after: float | str | None = None,
                   disconnect: str | None = None) -> int:
        """The next ``count`` API requests answer ``status`` (with ``Retry-After`` if given), or,
        with ``disconnect``, get no reply at all: ``"before"`` the request is processed or
        ``"after"`` it was (a lost reply). Returns how many faults are queued."""
        if disconnect not in (None, "before", "after"):
            raise ApiError(400, "disconnect must be 'before' or 'after'")
        if disconnect is None and not 400 <= int(status) <= 599:
            raise ApiError(400, "status must be an HTTP error status")
        after = None if retry_after is None else str(retry_after)
        fault: dict[str, Any] = {"disconnect": disconnect} if disconnect else {"status": int(status), "retry_after": after}
        with self.lock:
            self.faults += [dict(fault) for _ in range(int(count))]
            return len(self.faults)

    # --- webhooks ---------------------------------------------------------------------------------------
    def _set_status(self, sub: dict[str, Any], status: str) -> None:
        sub["status"] = status
        study = self.studies.get(sub["study_id"])
        if study is not None:
            study["places_taken"] = self._taken(study["id"])
        event = {"event_type": "submission.status.change", "resource_id": sub["id"],
                 "participant_id": sub["participant_id"], "study_id": sub["study_id"], "status": status}
        event_id = _hex_id()
        targets = [s["id"] for s in self.subscriptions.values()
                   if s["is_enabled"] and s["event_type"] == event["event_type"]]
        if self.drop_webhooks or not targets:
            return
        for _copy in range(2 if self.duplicate_deliveries else 1):
            self._pending += 1
            self._events.put((event, event_id, targets))

    def _deliver_forever(self) -> None:
        while True:
            item = self._events.get()
            if item is None:
                return
            event, event_id, subscription_ids = item
            try:
                with self.lock:  # the workspace's secret as it is now (a new one replaces the old)
                    targets = [(s["target_url"], self.secrets.get(s["workspace_id"]))
                               for s in (self.subscriptions.get(i) for i in subscription_ids) if s is not None]
                for url, secret in targets:
                    if secret is not None:
                        self._deliver(url, secret, event, event_id)
            finally:
                with self.lock:
                    self._pending -= 1

    def _deliver(self, url: str, secret: str, event: dict[str, Any], event_id: str) -> None:
        body = json.dumps(event).encode()
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        for attempt in range(1, 13):
            timestamp = str(int(time.time()))
            mac = hmac.new(secret.encode(), timestamp.encode() + body, hashlib.sha256).digest()
            request = urllib.request.Request(url, data=body, method="POST", headers={
                "Content-Type": "application/json", "X-Prolific-Request-Signature": base64.b64encode(mac).decode(),
                "X-Prolific-Request-Timestamp": timestamp, "X-Event-ID": event_id})
            try:
                with opener.open(request, timeout=10) as response:
                    code: int | None = response.status
            except urllib.error.HTTPError as exc:
                code = exc.code
            except OSError:
                code = None
            with self.lock:
                self.deliveries.append((event_id, event["status"], attempt, code))
            if code is not None and 200 <= code < 300:
                return
            time.sleep(self.retry_delay_s)

    def wait_for_deliveries(self, timeout: float = 10.0) -> bool:
        """Wait until every queued webhook was delivered or gave up; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if self._pending == 0:
                    return True
            time.sleep(0.05)
        return False


def _handler(fake: FakeProlific) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None,
                  content_type: str = "application/json") -> None:
            data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not raw:
                return {}
            try:
                return json.loads(raw)
            except ValueError:
                raise ApiError(400, "body is not JSON") from None

        def _dispatch(self, method: str) -> None:
            split = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(split.query).items()}
            try:
                body = self._body()
                if split.path == "/health":
                    return self._send(200, {"status": "ok"})
                if split.path == "/submissions/complete" and method == "GET":
                    code = query.get("cc", "")
                    with fake.lock:
                        fake.completion_visits.append(code)
                    return self._send(200, "<!doctype html><html><head><title>Prolific (fake)</title></head><body>"
                                           f"<h1>Prolific (fake): completion code {html.escape(code)} received</h1>"
                                           "</body></html>", content_type="text/html; charset=utf-8")
                if split.path.startswith("/_fake/"):
                    return self._send(200, self._control(split.path[len("/_fake/"):].strip("/").split("/"), body))
                if not split.path.startswith("/api/v1/"):
                    raise ApiError(404, "not found")
                if self.headers.get("Authorization") != f"Token {fake.token}":
                    return self._send(401, {"error": {"detail": "Invalid token."}})
                with fake.lock:
                    fake.requests.append((method, split.path))
                    fault = fake.faults.pop(0) if fake.faults else None
                if isinstance(fault, int):  # the plain form: a status, Retry-After 0
                    fault = {"status": fault, "retry_after": "0"}
                if fault is not None and fault.get("disconnect") == "before":
                    self.close_connection = True  # no reply, nothing done
                    return None
                if fault is not None and "status" in fault:
                    after = fault.get("retry_after")
                    return self._send(int(fault["status"]), {"error": {"detail": "injected fault"}},
                                      None if after is None else {"Retry-After": str(after)})
                status, payload = fake.api(method, split.path[len("/api/v1/"):], query, body)
                if fault is not None:  # disconnect "after": done, but the reply is lost
                    self.close_connection = True
                    return None
                headers = None
                if isinstance(payload, tuple):
                    payload, headers = payload
                self._send(status, payload, headers)
            except ApiError as exc:
                self._send(exc.status, {"error": {"detail": exc.detail}})
            except Exception as exc:  # noqa: BLE001 - a fake's bug still answers, as JSON
                self._send(500, {"error": {"detail": f"fake prolific failed: {type(exc).__name__}: {exc}"}})

        def _control(self, parts: list[str], body: Any) -> Any:
            if parts[:1] == ["studies"] and parts[2:] == ["arrive"]:
                return fake.arrive(parts[1], (body or {}).get("participant_id"))
            if parts[:1] == ["submissions"] and len(parts) == 3:
                if parts[2] == "return":
                    return fake.return_submission(parts[1])
                if parts[2] == "time-out":
                    return fake.time_out(parts[1])
                if parts[2] == "complete":
                    return fake.complete(parts[1], str((body or {}).get("code", "")))
            if not isinstance(body, dict):
                raise ApiError(400, "the body must be a JSON object")
            if parts == ["config"]:
                return fake.configure(body.get("duplicate_deliveries"), body.get("drop_webhooks"))
            if parts == ["faults"]:
                return {"faults": fake.add_faults(int(body.get("status", 503)), int(body.get("count", 1)),
                                                  body.get("retry_after"), body.get("disconnect"))}
            raise ApiError(404, "unknown control endpoint")

        def do_GET(self) -> None:  # noqa: N802
            self._dispatch("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._dispatch("POST")

        def do_PATCH(self) -> None:  # noqa: N802
            self._dispatch("PATCH")

        def do_DELETE(self) -> None:  # noqa: N802
            self._dispatch("DELETE")

    return Handler


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.prolific_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6920)
    parser.add_argument("--token", default=DEFAULT_TOKEN)
    parser.add_argument("--page-size", type=int, default=100)
    args = parser.parse_args()
    fake = FakeProlific(token=args.token, host=args.host, port=args.port, page_size=args.page_size).start()
    print(f"fake prolific on {fake.base_url}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
