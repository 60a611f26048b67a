"""A fake Prolific that follows Prolific's published API (its OpenAPI document, copied to
prolific-openapi.yml beside this module, and where that is silent Prolific's prose docs, as noted
where used), so the REAL client (crowdpref.prolific) and the portal can be driven over HTTP.
Part of the simulation: the demo runs it, and the tests use it.

    with FakeProlific() as fake:
        client = ProlificClient(fake.base_url, fake.token)

Serves ``/api/v1/`` (token auth) on 127.0.0.1: studies (draft -> ACTIVE -> PAUSED / COMPLETED,
AWAITING REVIEW while no place is open - Prolific's oddity - and ACTIVE again with more places,
places only up once published, ``submissions_config.max_concurrent_submissions``, paginated lists), submissions with their statuses (RESERVED,
ACTIVE, TIMED-OUT, AWAITING REVIEW, APPROVED, RETURNED, REJECTED; SCREENED OUT through a
FIXED_SCREEN_OUT_PAYMENT code, paid and counted against its slots), completion codes with their
``actor`` (a participant enters only a ``participant`` code; a ``researcher`` code is given
through ``COMPLETE``), approve / reject / complete / bulk approve, request-return, participant
groups, webhook secrets and subscriptions (confirm handshake).
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
``python -m crowdpref.simulation.prolific_server --host 127.0.0.1 --port 6920``.

Python equivalents: :meth:`FakeProlific.arrive`, :meth:`~FakeProlific.return_submission`,
:meth:`~FakeProlific.time_out`, :meth:`~FakeProlific.complete`, :meth:`~FakeProlific.configure`,
:meth:`~FakeProlific.add_faults`; ``requests`` logs (method, path) of every API request,
``deliveries`` every webhook attempt, ``completion_visits`` the codes seen on the completion page.

The contract: every API request and every reply goes through :mod:`crowdpref.simulation.prolific_contract`
(Prolific's published OpenAPI document, prolific-openapi.yml, with openapi-core). A breach - the
client's request or this fake's reply - is kept in ``contract_violations`` (method, path, side,
the validator's message); a request that breaches it is refused with 400, as Prolific refuses an
invalid request, and not acted on. :meth:`FakeProlific.stop` (the ``with`` block's end) raises
AssertionError listing the breaches not yet reported, and tests/conftest.py fails the test during
which any fake recorded one; a test that sends a bad request on purpose takes them with
:meth:`~FakeProlific.take_violations`. Run as a process (the demo) it prints each breach to
stderr and goes on; without openapi-core (the ``test`` extra) it says once on stderr that nothing
is checked, and serves. Test control (``/_fake/...``, ``/submissions/complete``, ``/health``) is
not Prolific's API and is not checked.

Where the document is silent, the fake decides, and says so where it does (which status a
refused transition gets, whether approving an approved submission is refused, what a participant
who types in a researcher's code gets: refused, nothing paid).
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
import ssl
import sys
import threading
import time
import urllib.error
import weakref
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:  # the contract module (openapi-core) is imported when a fake is made
    from crowdpref.simulation.prolific_contract import ProlificContract, Violation

DEFAULT_TOKEN = "fake-prolific-token"
FREEING = ("RETURNED", "TIMED-OUT", "REJECTED")
# a screened-out submission holds no place either: its own limit is the screen-out code's slots
NOT_HOLDING = FREEING + ("SCREENED OUT",)
# GET /studies/{id}/submissions/counts/ (SubmissionsCountResponse): every status and the TOTAL
COUNTED = ("ACTIVE", "APPROVED", "AWAITING REVIEW", "REJECTED", "RESERVED", "RETURNED", "TIMED-OUT",
           "PARTIALLY APPROVED", "SCREENED OUT")
# GET /studies/ lists StudyShort: these fields only (the full Study is GET /studies/{id}/)
STUDY_SHORT = ("id", "name", "internal_name", "status", "study_type", "estimated_completion_time",
               "total_available_places", "places_taken", "number_of_submissions", "reward", "total_cost",
               "published_at", "publish_at", "date_created", "credential_pool_id", "is_ready_to_publish")
# (AWAITING REVIEW: a running study whose places are all taken, see FakeProlific._places_changed)
TRANSITIONS = {"PUBLISH": ({"UNPUBLISHED"}, "ACTIVE"), "PAUSE": ({"ACTIVE", "AWAITING REVIEW"}, "PAUSED"),
               "START": ({"PAUSED"}, "ACTIVE"), "STOP": ({"ACTIVE", "PAUSED", "AWAITING REVIEW"}, "COMPLETED")}
PLACEHOLDERS = ("{{%PROLIFIC_PID%}}", "{{%STUDY_ID%}}", "{{%SESSION_ID%}}")


def _hex_id() -> str:
    return secrets.token_hex(12)  # 24 hex digits, like Prolific's ids


class ApiError(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


TITLES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 429: "Too Many Requests",
          500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}


def error_detail(status: int, detail: str) -> dict[str, Any]:
    """ErrorDetail: status, error_code, title and detail are all required (the error_code's values
    are not documented: the fake uses the status times 1000)."""
    return {"status": status, "error_code": status * 1000, "title": TITLES.get(status, "Error"), "detail": detail}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())  # UTC, as the Z says


def submission_short(sub: dict[str, Any]) -> dict[str, Any]:
    """A submission as lists show it (SubmissionShort: ``participant_id``, ``study_code``)."""
    return {"id": sub["id"], "participant_id": sub["participant_id"], "status": sub["status"],
            "started_at": sub["started_at"], "completed_at": sub["completed_at"], "has_siblings": False,
            "study_code": sub["study_code"], "return_requested": sub.get("return_requested")}


def submission_detail(sub: dict[str, Any]) -> dict[str, Any]:
    """``GET /submissions/{id}/`` (SubmissionDetail: ``participant``, ``entered_code``, ``study_id``)."""
    return {**submission_reply(sub), "parent_study_id": None, "bonus_payments": [],
            "return_requested": sub.get("return_requested")}


def submission_reply(sub: dict[str, Any]) -> dict[str, Any]:
    """The reply to a submission's transition (Submission)."""
    return {"id": sub["id"], "completed_at": sub["completed_at"], "entered_code": sub["study_code"],
            "participant": sub["participant_id"], "started_at": sub["started_at"], "status": sub["status"],
            "study_id": sub["study_id"]}


def _contract_problem(exc: BaseException) -> str:
    return f"the contract could not be checked: {type(exc).__name__}: {exc}"

class FakeProlific:
    #: every fake made in this process (tests/conftest.py checks them after each test)
    instances: weakref.WeakSet[FakeProlific] = weakref.WeakSet()

    def __init__(self, token: str = DEFAULT_TOKEN, page_size: int = 2, host: str = "127.0.0.1", port: int = 0,
                 retry_delay_s: float = 0.2, duplicate_deliveries: bool = False, drop_webhooks: bool = False,
                 contract: bool = True, violations_fatal: bool = True, trust: Path | None = None):
        """``contract``: check every API exchange against Prolific's published document;
        ``violations_fatal``: :meth:`stop` raises on unreported breaches (off: they are printed
        to stderr as they happen, the demo's process); ``trust``: a CA certificate the webhook
        sender trusts besides the system's (Caddy's internal root in the public profile's tests;
        read at each delivery, so it may appear after the fake starts)."""
        self.token = token
        self.trust = trust
        self.page_size = page_size
        self.retry_delay_s = retry_delay_s
        self.duplicate_deliveries = duplicate_deliveries
        self.drop_webhooks = drop_webhooks
        self.lock = threading.RLock()
        self.studies: dict[str, dict[str, Any]] = {}
        self.submissions: dict[str, dict[str, Any]] = {}
        self.groups: dict[str, dict[str, Any]] = {}
        self.secrets: dict[str, str] = {}  # workspace -> active secret
        self.subscriptions: dict[str, dict[str, Any]] = {}
        self.deliveries: list[tuple[str, str, int, int | None]] = []  # event id, status, attempt, http status
        self.completion_visits: list[str] = []
        #: (study id, submission id, fixed reward) of every submission completed with a
        #: FIXED_SCREEN_OUT_PAYMENT code (what Prolific pays those the study screens out)
        self.screen_out_payments: list[tuple[str, str, int]] = []
        self.requests: list[tuple[str, str]] = []  # method, path of every API request
        self.contract: ProlificContract | None = None
        if contract:
            from crowdpref.simulation.prolific_contract import ProlificContract

            self.contract = ProlificContract.load()
        self.violations_fatal = violations_fatal
        #: every breach of the contract seen (see :meth:`take_violations`, :meth:`check_contract`)
        self.contract_violations: list[Violation] = []
        self._reported = 0
        #: what the next API requests get instead of an answer: a status (int) or a dict
        #: {"status", "retry_after"} / {"disconnect": "before" | "after"} (see add_faults)
        self.faults: list[int | dict[str, Any]] = []
        self._events: queue.Queue[tuple[dict[str, Any], str, list[str]] | None] = queue.Queue()
        self._pending = 0
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self.host, self.port = self._server.server_address[:2]
        self._threads: list[threading.Thread] = []
        FakeProlific.instances.add(self)

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

    def stop(self, check: bool = True) -> None:
        """Stop serving; then (``check``, with fatal violations) raise AssertionError listing the
        contract breaches not reported yet."""
        if self._threads:
            self._events.put(None)
            self._server.shutdown()
            self._server.server_close()
            for thread in self._threads:
                thread.join(timeout=5)
            self._threads = []
        if check and self.violations_fatal:
            self.check_contract()

    def __enter__(self) -> FakeProlific:
        return self.start()

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.stop(check=exc_type is None)  # never hide the error already on its way

    # --- the contract ------------------------------------------------------------------------------
    def error_body(self, method: str, path: str, status: int, detail: str) -> dict[str, Any]:
        """A refusal as the operation documents it: ``{"error": ErrorDetail}`` for most,
        the bare ErrorDetail for those whose 400 is declared so (``GET``/``POST /studies/``,
        the submission lists and counts, bulk approve)."""
        body = error_detail(status, detail)
        if self.contract is not None and self.contract.error_schema(method, path) == "ErrorDetail":
            return body
        return {"error": body}

    def record_violations(self, violations: list[Violation]) -> None:
        if not violations:
            return
        with self.lock:
            self.contract_violations += violations
        if not self.violations_fatal:
            for violation in violations:
                print(f"fake prolific: contract violation: {violation}", file=sys.stderr, flush=True)

    def take_violations(self) -> list[Violation]:
        """The breaches not reported yet, now counted as reported (for a test that sends a bad
        request on purpose and checks that it is caught)."""
        with self.lock:
            taken = self.contract_violations[self._reported:]
            self._reported = len(self.contract_violations)
            return taken

    def check_contract(self) -> None:
        """Raise AssertionError naming every breach not reported yet (then they are)."""
        taken = self.take_violations()
        if taken:
            raise AssertionError(f"the fake Prolific saw {len(taken)} breach(es) of Prolific's published API "
                                 "(crowdpref/simulation/prolific-openapi.yml):\n" + "\n".join(f"- {v}" for v in taken))

    # --- the API --------------------------------------------------------------------------------
    def api(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        parts = [p for p in path.strip("/").split("/") if p]
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        with self.lock:
            if parts == ["studies"] and method == "POST":
                return 201, self._study(self._create_study(body))
            if parts == ["studies"] and method == "GET":  # StudyShort, not the whole study
                shorts = [{k: s[k] for k in STUDY_SHORT if k in s} for s in self.studies.values()]
                return 200, self._page(shorts, path, query)
            if len(parts) >= 2 and parts[0] == "studies":
                study = self._get(self.studies, parts[1], "study")
                if len(parts) == 2 and method == "GET":
                    return 200, self._study(study)
                if len(parts) == 2 and method == "PATCH":
                    return 200, self._study(self._patch_study(study, body))
                if parts[2:] == ["transition"] and method == "POST":
                    return 200, self._study(self._transition(study, str(body.get("action", ""))))
                if parts[2:] == ["submissions"] and method == "GET":
                    subs = [submission_short(s) for s in self.submissions.values() if s["study_id"] == study["id"]]
                    return 200, self._page(subs, path, query)
                if parts[2:] == ["submissions", "counts"] and method == "GET":
                    counts = dict.fromkeys(COUNTED, 0)
                    for s in self.submissions.values():
                        if s["study_id"] == study["id"]:
                            counts[s["status"]] = counts.get(s["status"], 0) + 1
                    return 200, {**counts, "TOTAL": sum(counts.values())}
            if parts == ["submissions"] and method == "GET":
                if not query.get("study"):
                    raise ApiError(400, "study: this query parameter is required")
                subs = [submission_short(s) for s in self.submissions.values() if s["study_id"] == query["study"]]
                return 200, self._page(subs, path, query)
            if parts == ["submissions", "bulk-approve"] and method == "POST":
                # {"submission_ids"} or {"study_id", "participant_ids"}; only AWAITING REVIEW ones
                # move (the document says nothing of the others: they are left as they are)
                ids = list(body.get("submission_ids") or [])
                if "participant_ids" in body:
                    wanted = set(body.get("participant_ids") or [])
                    ids = [s["id"] for s in self.submissions.values()
                           if s["study_id"] == body.get("study_id") and s["participant_id"] in wanted]
                for sid in ids:
                    sub = self._get(self.submissions, sid, "submission")
                    if sub["status"] == "AWAITING REVIEW":
                        self._set_status(sub, "APPROVED")
                return 200, "The request to bulk approve has been made successfully."
            if len(parts) >= 2 and parts[0] == "submissions":
                sub = self._get(self.submissions, parts[1], "submission")
                if len(parts) == 2 and method == "GET":
                    return 200, submission_detail(sub)
                if parts[2:] == ["transition"] and method == "POST":
                    return 200, submission_reply(self._review(sub, body))
                if parts[2:] == ["request-return"] and method == "POST":
                    if not body.get("request_return_reasons"):
                        raise ApiError(400, "request_return_reasons: at least one reason is required")
                    sub["return_requested"] = sub.get("return_requested") or _now()
                    return 200, {"id": sub["id"], "status": sub["status"], "participant": sub["participant_id"],
                                 "return_requested": sub["return_requested"]}
            if parts == ["participant-groups"] and method == "POST":
                if not str(body.get("name") or "").strip():
                    raise ApiError(400, "name: required")
                group_id = _hex_id()
                members = [str(p) for p in body.get("participant_ids") or []]
                self.groups[group_id] = {"id": group_id, "name": body.get("name"), "members": list(dict.fromkeys(members)),
                                         "workspace_id": body.get("workspace_id"), "joined": {m: _now() for m in members}}
                return 201, self._group(self.groups[group_id])
            if parts == ["participant-groups"] and method == "GET":
                # filter: workspace_id or project_id (exploded); the fake has no projects
                if not query.get("workspace_id") and not query.get("project_id"):
                    raise ApiError(400, "a workspace_id or project_id filter is required")
                groups = [self._group(g) for g in self.groups.values()
                          if query.get("workspace_id") and g["workspace_id"] == query["workspace_id"]]
                return 200, {"results": groups}
            if len(parts) == 3 and parts[0] == "participant-groups" and parts[2] == "participants":
                group = self._get(self.groups, parts[1], "participant group")
                ids = [str(i) for i in body.get("participant_ids") or []]
                if method == "GET":
                    return 200, self._page(self._memberships(group), path, query)
                if method == "POST":  # members already in are ignored (documented)
                    for i in ids:
                        if i not in group["members"]:
                            group["members"].append(i)
                            group["joined"][i] = _now()
                    return 200, {"results": self._memberships(group)}
                if method == "DELETE":  # non-members are ignored (documented)
                    group["members"] = [m for m in group["members"] if m not in ids]
                    return 200, {"results": self._memberships(group)}
            if parts == ["hooks", "secrets"] and method == "POST":
                secret = base64.b64encode(secrets.token_bytes(48)).decode()
                self.secrets[str(body.get("workspace_id"))] = secret
                return 201, {"id": _hex_id(), "value": secret, "workspace_id": body.get("workspace_id")}
            if parts == ["hooks", "event-types"] and method == "GET":
                return 200, {"results": [{"event_type": t} for t in (
                    "submission.status.change", "study.status.change", "study.progress.change",
                    "study.has_high_return_rate")]}
            if parts == ["hooks", "subscriptions"] and method == "POST":
                # the reply of Prolific's prose docs: the subscription (with its id) and the
                # X-Hook-Secret header to confirm it with (the document declares a list; see
                # prolific_contract.py, quirk 2)
                if str(body.get("workspace_id")) not in self.secrets:  # "you must ... have created a secret"
                    raise ApiError(400, "create a secret for this workspace first (POST /hooks/secrets/)")
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

    @staticmethod
    def _study(study: dict[str, Any]) -> dict[str, Any]:
        """The whole study (Study): ``places_taken`` is a field of the lists' StudyShort only."""
        return {k: v for k, v in study.items() if k != "places_taken"}

    @staticmethod
    def _group(group: dict[str, Any]) -> dict[str, Any]:
        return {"id": group["id"], "name": group["name"], "workspace_id": group["workspace_id"], "project_id": None,
                "participant_count": len(group["members"]), "is_deleted": False}

    @staticmethod
    def _memberships(group: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"participant_id": m, "datetime_created": group["joined"].get(m, "")} for m in group["members"]]

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
        problems += self._screen_out_problems(body) + self._time_problems(body)
        if problems:
            raise ApiError(400, "; ".join(problems))
        study = dict(body, id=_hex_id(), status="UNPUBLISHED", places_taken=0)
        self.studies[study["id"]] = study
        return study

    @staticmethod
    def _screen_out_problems(body: dict[str, Any]) -> list[str]:
        """The rules the document states in prose for completion codes: a code is unique within
        the study; a FIXED_SCREEN_OUT_PAYMENT's reward is less than the study reward and its
        slots at least 1 (the schema checks the fields are there and are integers)."""
        codes = [c for c in body.get("completion_codes") or [] if isinstance(c, dict)]
        names = [c.get("code") for c in codes if c.get("code") is not None]
        unique = len(names) == len(set(names))
        problems = [] if unique else ["completion_codes: the code must be unique within the study"]
        reward = body.get("reward")
        for code in codes:
            for action in code.get("actions") or []:
                if not isinstance(action, dict) or action.get("action") != "FIXED_SCREEN_OUT_PAYMENT":
                    continue
                fixed, slots = action.get("fixed_screen_out_reward"), action.get("slots")
                if not isinstance(fixed, int) or fixed < 1 or (isinstance(reward, int) and fixed >= reward):
                    problems.append(f"fixed_screen_out_reward {fixed!r} must be at least 1 and less than the "
                                    "study reward")
                if not isinstance(slots, int) or slots < 1:
                    problems.append(f"slots {slots!r} must be at least 1")
        return problems

    @staticmethod
    def _time_problems(body: dict[str, Any]) -> list[str]:
        """The document's prose rule for ``maximum_allowed_time`` (minutes): at least two minutes
        plus two times the estimated time plus two times its square root. (Left out, Prolific
        uses "the max value", which the document does not give.)"""
        allowed, estimated = body.get("maximum_allowed_time"), body.get("estimated_completion_time")
        if allowed is None or not isinstance(estimated, (int, float)):
            return []
        least = 2 + 2 * estimated + 2 * estimated ** 0.5
        if not isinstance(allowed, (int, float)) or allowed < least:
            return [f"maximum_allowed_time {allowed!r} is below the least allowed for this estimated time ({least:.1f})"]
        return []

    def _patch_study(self, study: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        # The document's update-study: once published, only internal_name, total_available_places
        # (increase only: "a completed study will become active again and resume recruiting") and
        # submissions_config (among the fields the fake knows) may change.
        if study["status"] != "UNPUBLISHED":
            extra = set(body) - {"internal_name", "total_available_places", "submissions_config"}
            if extra:
                raise ApiError(400, f"a published study can only change internal_name, places and "
                                    f"submissions_config, not {sorted(extra)}")
            if "total_available_places" in body and int(body["total_available_places"]) < study["total_available_places"]:
                raise ApiError(400, "places can only increase once a study is published")
        if "total_available_places" in body:
            places = body["total_available_places"]
            if not isinstance(places, int) or isinstance(places, bool) or places < 1:
                raise ApiError(400, "total_available_places must be an integer of at least 1")
        raised = body.get("total_available_places", 0) > study["total_available_places"]
        if isinstance(body.get("submissions_config"), dict):
            body = {**body, "submissions_config": {**(study.get("submissions_config") or {}),
                                                   **body["submissions_config"]}}
        study.update(body)
        if raised and study["status"] in ("AWAITING REVIEW", "COMPLETED"):
            study["status"] = "ACTIVE"  # more places: recruiting again
        return study

    def _transition(self, study: dict[str, Any], action: str) -> dict[str, Any]:
        # The document lists the allowed transitions but not the status of a refused one: it
        # declares 400 as the only refusal of this operation, so that is what the fake answers.
        if action not in TRANSITIONS or study["status"] not in TRANSITIONS[action][0]:
            raise ApiError(400, f"cannot {action} a study that is {study['status']}")
        study["status"] = TRANSITIONS[action][1]
        self._places_changed(study)  # started again while full: awaiting review at once
        return study

    def _review(self, sub: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        # The document is silent on approving an APPROVED (rejecting a REJECTED) submission and
        # on the status of a refused transition; the notes call approval idempotent. The fake
        # takes the stricter reading - any move out of a state other than AWAITING REVIEW is
        # refused with 400, the one refusal the operation declares - so the client's read-back
        # after a refused repeat (crowdpref.prolific: approve / reject) is what makes it idempotent.
        action = body.get("action")
        if action == "APPROVE":
            if sub["status"] != "AWAITING REVIEW":
                raise ApiError(400, f"cannot approve a submission that is {sub['status']}")
            self._set_status(sub, "APPROVED")
            return sub
        if action == "REJECT":
            if len(str(body.get("message", ""))) < 100 or not body.get("rejection_category"):
                raise ApiError(400, "a rejection needs a message of at least 100 characters and a rejection_category")
            if sub["status"] != "AWAITING REVIEW":
                raise ApiError(400, f"cannot reject a submission that is {sub['status']}")
            self._set_status(sub, "REJECTED")
            return sub
        if action == "COMPLETE":
            return self._researcher_completes(sub, str(body.get("completion_code") or ""))
        raise ApiError(400, f"unknown action {action!r}")

    def _researcher_completes(self, sub: dict[str, Any], code: str) -> dict[str, Any]:
        """``{"action": "COMPLETE", "completion_code": CODE}``: the document requires a code of the
        study whose actor is ``researcher`` and carries out its actions. It calls the transition
        idempotent ("the second request will be ignored"): a repeat of the completion that
        already happened (the same code on this submission) changes nothing and answers the
        submission. Anything else (an unknown code, a participant-actor code, a submission that is
        not RESERVED or ACTIVE) is refused with 400, the one refusal the operation declares."""
        study = self.studies[sub["study_id"]]
        match = next((c for c in study.get("completion_codes") or [] if c.get("code") == code), None)
        if match is None:
            raise ApiError(400, "completion_code: not a completion code of this study")
        if match.get("actor", "participant") != "researcher":
            raise ApiError(400, "completion_code: only a code whose actor is researcher can be given through the API")
        if sub["study_code"] == code and sub["status"] not in ("RESERVED", "ACTIVE"):
            return sub  # the repeat is ignored
        if sub["status"] not in ("RESERVED", "ACTIVE"):
            raise ApiError(400, f"cannot complete a submission that is {sub['status']}")
        return self._complete_with(sub, study, match)

    def _taken(self, study_id: str) -> int:
        return sum(1 for s in self.submissions.values() if s["study_id"] == study_id and s["status"] not in NOT_HOLDING)

    def _places_changed(self, study: dict[str, Any]) -> None:
        """Prolific's oddity (Mephisto's notes on its API): when a study's open places reach zero
        it moves to AWAITING REVIEW; a place given back (or more places, :meth:`_patch_study`)
        makes it ACTIVE again. The fake does both at once: the flip lasts while it is full."""
        study["places_taken"] = self._taken(study["id"])
        full = study["places_taken"] >= int(study["total_available_places"])
        if full and study["status"] == "ACTIVE":
            study["status"] = "AWAITING REVIEW"
        elif not full and study["status"] == "AWAITING REVIEW":
            study["status"] = "ACTIVE"

    def _concurrent(self, study_id: str) -> int:
        return sum(1 for s in self.submissions.values()
                   if s["study_id"] == study_id and s["status"] in ("RESERVED", "ACTIVE"))

    # --- participants (test control) ------------------------------------------------------------------
    def arrive(self, study_id: str, participant_id: str | None = None) -> dict[str, Any]:
        with self.lock:
            study = self._get(self.studies, study_id, "study")
            if study["status"] not in ("ACTIVE", "AWAITING REVIEW"):  # the latter: full (no places, below)
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
            # submissions_config.max_concurrent_submissions: -1 (the default) unlimited; N: at most
            # N reserved or active submissions at once
            limit = (study.get("submissions_config") or {}).get("max_concurrent_submissions")
            if isinstance(limit, int) and limit >= 1 and self._concurrent(study_id) >= limit:
                raise ApiError(409, "too many people in the study at once (max_concurrent_submissions)")
            session = _hex_id()
            self.submissions[session] = {"id": session, "participant_id": pid, "study_id": study_id,
                                         "status": "ACTIVE", "started_at": _now(), "completed_at": None,
                                         "study_code": None, "return_requested": None}
            self._places_changed(study)
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
            # a code whose actor is researcher is one "the researcher provides" (the document's
            # CreateStudyCompletionCodesItemsActor): the document does not say what Prolific does
            # when a participant types one in; the fake treats it as no code of this study - refused,
            # nothing changes, nothing is paid (the safe reading: only the API can give it)
            if match is None or match.get("actor", "participant") != "participant":
                raise ApiError(400, "unknown completion code")
            if sub["status"] not in ("RESERVED", "ACTIVE"):
                raise ApiError(409, f"submission is {sub['status']}")
            return self._complete_with(sub, study, match)

    def _complete_with(self, sub: dict[str, Any], study: dict[str, Any], match: dict[str, Any]) -> dict[str, Any]:
        """Complete ``sub`` with the completion code ``match`` and carry out its actions (the
        participant entered it, or the researcher gave it through the API)."""
        with self.lock:
            sub["study_code"] = match["code"]
            sub["completed_at"] = _now()
            screen_out = next((a for a in match.get("actions") or []
                               if a.get("action") == "FIXED_SCREEN_OUT_PAYMENT"), None)
            if screen_out is not None:
                # screened out: paid the fixed reward at once, the place is free again; when the
                # screen-outs reach the code's slots with places unfilled, the study pauses
                self._set_status(sub, "SCREENED OUT")
                self.screen_out_payments.append((study["id"], sub["id"], int(screen_out["fixed_screen_out_reward"])))
                screened = sum(1 for p in self.screen_out_payments if p[0] == study["id"])
                if screened >= int(screen_out["slots"]) and study["status"] == "ACTIVE" \
                        and self._taken(study["id"]) < int(study["total_available_places"]):
                    study["status"] = "PAUSED"
                return sub
            self._set_status(sub, "AWAITING REVIEW")
            for action in match.get("actions") or []:
                if action.get("action") == "ADD_TO_PARTICIPANT_GROUP":
                    group = self.groups.get(str(action.get("participant_group")))
                    if group is not None and sub["participant_id"] not in group["members"]:
                        group["members"].append(sub["participant_id"])
                        group["joined"][sub["participant_id"]] = _now()
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
            self._places_changed(study)
        # The document has no schema for a hook's payload (SubscriptionEventPayload is an empty
        # object): this follows Prolific's prose docs on webhooks (resource_id - the submission -,
        # participant_id, status), with the event type and the study id beside them.
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
        handlers: list[Any] = [urllib.request.ProxyHandler({})]
        if self.trust is not None and Path(self.trust).exists():
            handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=str(self.trust))))
        opener = urllib.request.build_opener(*handlers)
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

        def _raw(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        @staticmethod
        def _parse(raw: bytes) -> Any:
            if not raw:
                return {}
            try:
                return json.loads(raw)
            except ValueError:
                raise ApiError(400, "body is not JSON") from None

        def _reply(self, exchange: tuple[str, str, dict[str, str], dict[str, str], bytes], status: int,
                   payload: Any, headers: dict[str, str] | None = None, send: bool = True) -> None:
            """Check an API reply against the contract, then send it (unless its loss is simulated)."""
            text = json.dumps(payload)
            if fake.contract is not None:
                try:
                    found = fake.contract.check_response(*exchange, status, headers or {}, text.encode())
                except Exception as exc:  # noqa: BLE001 - a checker that fails is a finding too
                    from crowdpref.simulation.prolific_contract import Violation

                    found = [Violation(exchange[0], exchange[1], "response", _contract_problem(exc), status)]
                fake.record_violations(found)
            if send:
                self._send(status, text, headers)
            else:
                self.close_connection = True

        def _dispatch(self, method: str) -> None:
            split = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(split.query).items()}
            exchange = None
            try:
                raw = self._raw()
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
                    return self._send(200, self._control(split.path[len("/_fake/"):].strip("/").split("/"),
                                                         self._parse(raw)))
                if not split.path.startswith("/api/v1/"):
                    raise ApiError(404, "not found")
                exchange = (method, split.path, query, dict(self.headers.items()), raw)
                if self.headers.get("Authorization") != f"Token {fake.token}":
                    return self._reply(exchange, 401, fake.error_body(method, split.path, 401, "Invalid token."))
                with fake.lock:
                    fake.requests.append((method, split.path))
                    fault = fake.faults.pop(0) if fake.faults else None
                violations = []
                if fake.contract is not None:
                    try:
                        violations = fake.contract.check_request(*exchange)
                    except Exception as exc:  # noqa: BLE001 - a checker that fails is a finding too
                        from crowdpref.simulation.prolific_contract import Violation

                        violations = [Violation(method, split.path, "request", _contract_problem(exc))]
                    fake.record_violations(violations)
                if isinstance(fault, int):  # the plain form: a status, Retry-After 0
                    fault = {"status": fault, "retry_after": "0"}
                if fault is not None and fault.get("disconnect") == "before":
                    self.close_connection = True  # no reply, nothing done
                    return None
                if fault is not None and "status" in fault:  # an outage, not Prolific's answer: not checked
                    after = fault.get("retry_after")
                    return self._send(int(fault["status"]),
                                      fake.error_body(method, split.path, int(fault["status"]), "injected fault"),
                                      None if after is None else {"Retry-After": str(after)})
                if violations and fake.contract is not None and fake.contract.known(method, split.path):
                    # refused as Prolific refuses an invalid request, and not acted on (an unknown
                    # route goes on to the fake's own 404)
                    status, payload = 400, fake.error_body(method, split.path, 400,
                                                           "; ".join(v.message for v in violations))
                else:
                    status, payload = fake.api(method, split.path[len("/api/v1/"):], query, self._parse(raw))
                headers = None
                if isinstance(payload, tuple):
                    payload, headers = payload
                # a "disconnect after" fault: done, but the reply is lost
                self._reply(exchange, status, payload, headers, send=fault is None)
            except ApiError as exc:
                if exchange is None:
                    self._send(exc.status, {"error": {"detail": exc.detail}})
                else:
                    self._reply(exchange, exc.status, fake.error_body(method, split.path, exc.status, exc.detail))
            except Exception as exc:  # noqa: BLE001 - a fake's bug still answers, as JSON
                detail = f"fake prolific failed: {type(exc).__name__}: {exc}"
                if exchange is None:
                    self._send(500, {"error": {"detail": detail}})
                else:  # and, undeclared, a 500 is a contract violation: the test that caused it fails
                    self._reply(exchange, 500, fake.error_body(method, split.path, 500, detail))

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
    parser = argparse.ArgumentParser(prog="python -m crowdpref.simulation.prolific_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6920)
    parser.add_argument("--token", default=DEFAULT_TOKEN)
    parser.add_argument("--page-size", type=int, default=100)
    parser.add_argument("--no-contract", action="store_true",
                        help="do not check requests and replies against Prolific's published API")
    parser.add_argument("--trust", type=Path, default=None,
                        help="a CA certificate webhook deliveries trust besides the system's (Caddy's internal root)")
    args = parser.parse_args()
    contract = not args.no_contract
    if contract:
        try:
            import openapi_core  # noqa: F401 - the contract's validator (the test extra)
        except ImportError:
            print("fake prolific: WARNING: openapi-core is not installed (the test extra: pip install "
                  "'crowdpref[test]'): requests and replies are NOT checked against Prolific's published API",
                  file=sys.stderr, flush=True)
            contract = False
    # the demo's fake: a breach is printed to stderr as it happens and the fake goes on
    fake = FakeProlific(token=args.token, host=args.host, port=args.port, page_size=args.page_size,
                        contract=contract, violations_fatal=False, trust=args.trust).start()
    print(f"fake prolific on {fake.base_url}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
