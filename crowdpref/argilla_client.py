"""A small client for what the study needs from Argilla, on both sides of the screen.

- :class:`ArgillaOwner` - the study team (owner/admin API key): idempotent ``ensure_*`` for
  annotator accounts, workspaces and datasets, record upserts by id, record deletion, and reading
  back submitted answers. Built on the argilla 2.x SDK.
- :class:`AnnotatorSession` - one participant (username/password), speaking the HTTP API the
  web UI speaks: token login, the pending queue, bulk response submission. The simulated crowd
  uses it, so simulated answers travel exactly the path a person's browser does.

Every failure a user can act on becomes an :class:`ArgillaError` with one line naming the
server, the setting and the fix. Passwords and API keys never appear in messages.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import argilla as rg
import httpx
from argilla._exceptions import ArgillaAPIError, ArgillaCredentialsError, ConflictError
from argilla._exceptions import ArgillaError as SDKError

from crowdpref.account_passwords import AccountPasswords
from crowdpref.errors import CrowdprefError
from crowdpref.tls import shared_context

DEFAULT_TIMEOUT_S = 60.0
RECORDS_BULK_MAX = 500  # server limit for PUT /api/v1/datasets/{id}/records/bulk
RESPONSES_BULK_MAX = 100  # server limit for /api/v1/me/responses/bulk
SEARCH_PAGE_MAX = 1000  # server limit for the search endpoint's `limit`


class ArgillaError(CrowdprefError):
    """Argilla refused, is unreachable, or holds something that contradicts the study store."""


@dataclass(frozen=True)
class DatasetRef:
    """A dataset known by its server id (no lookup needed): what the record calls use."""

    id: str
    name: str


@dataclass(frozen=True)
class SubmittedAnswer:
    """One response as the owner reads it back: which record (our external id), who, what."""

    record_external_id: str
    user_id: str
    status: str
    values: dict[str, Any]
    updated_at: datetime | None


MINTED = "minted-owner-session"
"""The API key :func:`owner_for` gives an :class:`ArgillaOwner` that signs in with minted owner
sessions (the Argilla SDK requires one; the session's ``auth`` removes it from every request)."""


def check_server(api_url: str, api_key: str, timeout_s: float = 10.0, auth: httpx.Auth | None = None) -> None:
    """Fail fast, in one line, when the server is unreachable or the key (or ``auth``'s session)
    is wrong."""
    try:
        response = httpx.get(f"{api_url}/api/v1/me", headers={"X-Argilla-Api-Key": api_key}, timeout=timeout_s,
                             verify=shared_context(), auth=auth)
    except httpx.HTTPError as exc:
        raise ArgillaError(
            f"Argilla is unreachable at {api_url} ({exc.__class__.__name__}): run `crowdpref up`, "
            "or fix CROWDPREF_ARGILLA_URL",
            transient=True,
        ) from None
    if response.status_code == 401 and auth is not None:
        raise ArgillaError(f"Argilla at {api_url} rejected the owner session signed with its token key: the key in "
                           "<state>/secrets/argilla-auth-secret is not the one this Argilla runs with - restart the "
                           "stack (`crowdpref down`, `crowdpref up`)")
    if response.status_code == 401:
        raise ArgillaError(
            f"Argilla at {api_url} rejected the API key: fix CROWDPREF_ARGILLA_API_KEY "
            "(embedded server: see .crowdpref/secrets/argilla-owner.json)"
        )
    if response.status_code != 200:
        raise ArgillaError(f"Argilla at {api_url} answered {response.status_code} to /api/v1/me: is it an Argilla 2.x server?")
    role = response.json().get("role")
    if role not in ("owner", "admin"):
        raise ArgillaError(f"the Argilla API key for {api_url} belongs to a '{role}': use an owner or admin key")


class StaleConnectionRetry(httpx.HTTPTransport):
    """Sends an idempotent request (GET, HEAD, PUT, DELETE) once more when the server closed a
    kept-alive connection without answering it: uvicorn closes idle connections after a few
    seconds, and a request sent on one at that moment gets "Server disconnected without sending
    a response" (seen once in a full test run under load). A POST is never repeated."""

    IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return super().handle_request(request)
        except httpx.RemoteProtocolError:
            if request.method not in self.IDEMPOTENT:
                raise
            return super().handle_request(request)


class ArgillaOwner:
    """Owner-side operations. All ``ensure_*`` methods are idempotent: a rerun finds what an
    earlier (possibly crashed) run created and completes it, creating nothing twice."""

    def __init__(self, api_url: str, api_key: str, timeout_s: float = DEFAULT_TIMEOUT_S, retries: int = 2,
                 after_change: Callable[[str], None] | None = None, passwords: AccountPasswords | None = None,
                 auth: httpx.Auth | None = None):
        """``after_change`` is called with "METHOD path" after every call that changes the server
        (SDK calls included): the fault-injection tests crash there, between two calls.
        ``passwords``: the participant accounts' passwords (:mod:`crowdpref.account_passwords`;
        default: a key of this process only - give the state folder's, so that every process
        derives the same). ``auth``: how requests sign in instead of ``api_key`` (the portal's
        :class:`~crowdpref.portal.argilla_session.OwnerSessions`; see :func:`owner_for`)."""
        self.api_url = api_url.rstrip("/")
        self.passwords = passwords or AccountPasswords.ephemeral()
        check_server(self.api_url, api_key, auth=auth)
        hooks = {"response": [self._after_response]}
        self.after_change = after_change
        signing_in = {"auth": auth} if auth is not None else {}
        self.client = rg.Argilla(api_url=self.api_url, api_key=api_key, timeout=int(timeout_s), retries=retries,
                                 event_hooks=hooks, verify=shared_context(), **signing_in)
        self._http = httpx.Client(
            base_url=self.api_url, headers={"X-Argilla-Api-Key": api_key}, timeout=timeout_s, event_hooks=hooks,
            transport=StaleConnectionRetry(verify=shared_context()), **signing_in,
        )
        self._user_ids: dict[str, str] = {}

    def _after_response(self, response: httpx.Response) -> None:
        if self.after_change is not None and response.request.method != "GET" and response.status_code < 400 \
                and not response.request.url.path.endswith("/search"):
            self.after_change(f"{response.request.method} {response.request.url.path}")

    # --- accounts and workspaces -------------------------------------------------------------
    def ensure_workspace(self, name: str) -> rg.Workspace:
        """The workspace, created if missing. Created first, looked up only when Argilla says it
        exists (a rerun after a crash): the SDK finds a workspace by name by listing them all,
        which grows with every participant."""
        try:
            return rg.Workspace(name=name, client=self.client).create()
        except ConflictError:
            with _quiet_lookup():
                found = self.client.workspaces(name)
            if found is None:
                raise
            return found

    def ensure_annotator(self, username: str, workspace: rg.Workspace) -> rg.User:
        """The annotator account, created with its password (:attr:`passwords`) if missing. An
        existing account must accept that password (else someone else's account would receive
        our records). Created first, looked up only when Argilla says it exists (as
        :meth:`ensure_workspace`: the SDK finds a user by name by listing them all)."""
        password = self.passwords(username)
        try:
            user = rg.User(username=username, password=password, role="annotator", client=self.client).create()
            created = True
        except ConflictError:
            with _quiet_lookup():
                user = self.client.users(username)
            if user is None:
                raise
            created = False
        if created:
            workspace.add_user(user)  # a new account belongs to no workspace yet
        else:
            if user.role != "annotator":
                raise ArgillaError(
                    f"Argilla user '{username}' at {self.api_url} exists with role '{user.role}': "
                    "choose another username_prefix in the study config"
                )
            if not AnnotatorSession.password_works(self.api_url, username, password):
                raise ArgillaError(
                    f"Argilla user '{username}' at {self.api_url} already exists with another password: "
                    "delete that user, restore the state folder's secrets (the account-password key), "
                    "or choose another username_prefix"
                )
            if workspace.name not in {ws["name"] for ws in self._user_workspaces(str(user.id), username)}:
                workspace.add_user(user)
        self._user_ids[username] = str(user.id)
        return user

    def _user_workspaces(self, user_id: str, username: str) -> list[dict[str, Any]]:
        """The workspaces the user belongs to, as Argilla lists them (``id``, ``name``, ...)."""
        response = self._http.get(f"/api/v1/users/{user_id}/workspaces")
        _raise_for_status(response, self.api_url, f"workspaces of user '{username}'")
        return list(response.json()["items"])

    def user_id(self, username: str) -> str:
        """The account's id (cached): answers count only when they are this user's."""
        if username not in self._user_ids:
            with _quiet_lookup():
                user = self.client.users(username)
            if user is None:
                raise ArgillaError(f"Argilla user '{username}' at {self.api_url} is missing: rerun provisioning")
            self._user_ids[username] = str(user.id)
        return self._user_ids[username]

    def revoke_access(self, username: str, dataset_id: str | None = None) -> int:
        """Take the account out of every workspace it belongs to (``DELETE
        /api/v1/workspaces/{id}/users/{user_id}``, the owner's right; no bcrypt): from then on
        its session and its permanent API key get 403 from Argilla for its datasets, records and
        searches, and it can add no answer. (An answer's author may still edit it through
        ``PUT /api/v1/responses/{id}`` - Argilla's own rule; on the public profile Caddy asks the
        portal first, :mod:`crowdpref.portal.answer_guard`.) With ``dataset_id`` (the account's
        dataset) its workspace is found through it, three calls that do not grow with the number
        of accounts; else through the user (the SDK lists every user to find one by name).
        Returns how many memberships were removed; 0 when none was left (called again, it
        changes nothing)."""
        if dataset_id is not None:
            dataset = self._http.get(f"/api/v1/datasets/{dataset_id}")
            if dataset.status_code != 404:  # (a dataset deleted meanwhile: through the user below)
                _raise_for_status(dataset, self.api_url, f"dataset {dataset_id} of user '{username}'")
                workspace_id = dataset.json()["workspace_id"]
                members = self._http.get(f"/api/v1/workspaces/{workspace_id}/users")
                _raise_for_status(members, self.api_url, f"members of the workspace of user '{username}'")
                ids = [m["id"] for m in members.json()["items"] if m["username"] == username]
                return sum(self._leave(username, workspace_id, user_id) for user_id in ids)
        user_id = self.user_id(username)
        return sum(self._leave(username, item["id"], user_id) for item in self._user_workspaces(user_id, username))

    def _leave(self, username: str, workspace_id: str, user_id: str) -> int:
        gone = self._http.delete(f"/api/v1/workspaces/{workspace_id}/users/{user_id}")
        if gone.status_code == 404:  # removed meanwhile (a second pass, another process)
            return 0
        _raise_for_status(gone, self.api_url, f"removing user '{username}' from workspace {workspace_id}")
        return 1

    def delete_accounts(self, usernames: Iterable[str]) -> dict[str, int]:
        """Delete participant accounts for good (a throw-away study's: the pre-flight's dress
        rehearsal): each account's workspace (named as the user) with every dataset in it, then
        the user. Three listing calls whatever the number of accounts, then one call per object;
        what is already gone is skipped, so a second call changes nothing. Returns how many
        datasets, workspaces and users were deleted."""
        wanted = set(usernames)
        deleted = {"datasets": 0, "workspaces": 0, "users": 0}
        if not wanted:
            return deleted
        workspaces = self._listed("/api/v1/me/workspaces", "workspaces")
        ours = {w["id"] for w in workspaces if w["name"] in wanted}
        for dataset in self._listed("/api/v1/me/datasets", "datasets"):
            if dataset.get("workspace_id") in ours:
                self.delete_dataset(str(dataset["id"]))
                deleted["datasets"] += 1
        for workspace_id in ours:
            gone = self._http.delete(f"/api/v1/workspaces/{workspace_id}")
            if gone.status_code != 404:
                _raise_for_status(gone, self.api_url, f"deleting workspace {workspace_id}")
                deleted["workspaces"] += 1
        for user in self._listed("/api/v1/users", "users"):
            if user["username"] in wanted and user.get("role") == "annotator":
                gone = self._http.delete(f"/api/v1/users/{user['id']}")
                if gone.status_code != 404:
                    _raise_for_status(gone, self.api_url, f"deleting user '{user['username']}'")
                    deleted["users"] += 1
                self._user_ids.pop(user["username"], None)
        return deleted

    def _listed(self, path: str, what: str) -> list[dict[str, Any]]:
        response = self._http.get(path)
        _raise_for_status(response, self.api_url, f"listing {what}")
        return list(response.json()["items"])

    # --- datasets and records ----------------------------------------------------------------
    def ensure_dataset(self, name: str, workspace: rg.Workspace, settings: rg.Settings) -> rg.Dataset:
        """The dataset with these settings. Creating one takes several calls (dataset, fields,
        questions, metadata, publish); a process killed in between leaves a draft or a dataset
        with part of its settings. Such a dataset holds no records yet, so it is deleted and
        created again; one that holds records and differs is someone else's and is refused."""
        with _quiet_lookup():
            existing = self.client.datasets(name, workspace=workspace)
        if existing is not None:
            expected = ({q.name for q in settings.questions}, {f.name for f in settings.fields})
            found = ({q.name for q in existing.settings.questions}, {f.name for f in existing.settings.fields})
            published = self._dataset_status(str(existing.id)) == "ready"
            if published and expected == found:
                return existing
            if published and self.record_ids(existing):
                raise ArgillaError(
                    f"Argilla dataset '{workspace.name}/{name}' exists with questions {sorted(found[0])} "
                    f"instead of {sorted(expected[0])}: delete it or use another study name"
                )
            self.delete_dataset(str(existing.id))  # half-created by a killed run: start it again
        return rg.Dataset(name=name, workspace=workspace, settings=settings, client=self.client).create()

    def _dataset_status(self, dataset_id: str) -> str:
        response = self._http.get(f"/api/v1/datasets/{dataset_id}")
        _raise_for_status(response, self.api_url, f"dataset {dataset_id}")
        return str(response.json().get("status"))

    def delete_dataset(self, dataset_id: str) -> None:
        response = self._http.delete(f"/api/v1/datasets/{dataset_id}")
        if response.status_code != 404:
            _raise_for_status(response, self.api_url, f"deleting dataset {dataset_id}")

    def find_dataset(self, name: str, workspace: str) -> rg.Dataset | None:
        """The dataset, or None when it (or its workspace) does not exist. A server error is
        NOT "missing": it is raised as a transient error, worth a retry."""
        try:
            with _quiet_lookup():
                return self.client.datasets(name, workspace=workspace)
        except ArgillaAPIError as exc:
            if exc.status_code == 404:
                return None
            raise ArgillaError(f"Argilla at {self.api_url} answered {exc.status_code} while looking up dataset "
                               f"'{workspace}/{name}'", transient=exc.status_code >= 500) from None
        except SDKError:  # the SDK's own "workspace not found"
            return None

    def log_records(self, dataset: rg.Dataset | DatasetRef, records: Sequence[rg.Record]) -> None:
        """Upsert by record id: the id becomes the server's ``external_id``, and logging the same
        id again updates that record, never duplicates it. Sent straight to the bulk-upsert
        endpoint (what the SDK does underneath, without its per-call progress bar). A record's
        metadata is sent only when it has some (the studies' records have none: issue 34)."""
        for start in range(0, len(records), RECORDS_BULK_MAX):
            items = [
                {"external_id": str(r.id), "fields": dict(r.fields), **({"metadata": dict(r.metadata)} if r.metadata else {})}
                for r in records[start : start + RECORDS_BULK_MAX]
            ]
            response = self._http.put(f"/api/v1/datasets/{dataset.id}/records/bulk", json={"items": items})
            _raise_for_status(response, self.api_url, f"logging records to dataset '{dataset.name}'")

    def record_ids(self, dataset: rg.Dataset | DatasetRef) -> dict[str, str]:
        """external id -> server id of every record in the dataset."""
        return {item["external_id"]: item["id"] for item in self._iter_records(dataset, include_responses=False)}

    def delete_records(self, dataset: rg.Dataset | DatasetRef, external_ids: Iterable[str]) -> int:
        """Delete records by our ids (their responses, drafts included, go with them)."""
        wanted = set(external_ids)
        server_ids = [sid for ext, sid in self.record_ids(dataset).items() if ext in wanted]
        for start in range(0, len(server_ids), 100):  # server limit per delete call
            chunk = server_ids[start : start + 100]
            response = self._http.delete(f"/api/v1/datasets/{dataset.id}/records", params={"ids": ",".join(chunk)})
            _raise_for_status(response, self.api_url, f"deleting records of dataset '{dataset.name}'")
        return len(server_ids)

    def answers(self, dataset: rg.Dataset | DatasetRef) -> list[SubmittedAnswer]:
        """Every response (any status) on the dataset's records, with the record's external id."""
        out = []
        for item in self._iter_records(dataset, include_responses=True):
            for response in item.get("responses") or []:
                out.append(
                    SubmittedAnswer(
                        record_external_id=item["external_id"],
                        user_id=str(response["user_id"]),
                        status=response["status"],
                        values={k: v.get("value") for k, v in (response.get("values") or {}).items()},
                        updated_at=_parse_time(response.get("updated_at")),
                    )
                )
        return out

    def _iter_records(self, dataset: rg.Dataset | DatasetRef, include_responses: bool) -> Iterator[dict[str, Any]]:
        offset = 0
        params: dict[str, Any] = {"limit": SEARCH_PAGE_MAX}
        if include_responses:
            params["include"] = "responses"
        while True:
            response = self._http.get(f"/api/v1/datasets/{dataset.id}/records", params={**params, "offset": offset})
            _raise_for_status(response, self.api_url, f"records of dataset '{dataset.name}'")
            items = response.json()["items"]
            yield from items
            if len(items) < SEARCH_PAGE_MAX:
                return
            offset += len(items)

    # --- webhooks (Standard Webhooks, sent by the server's rq worker) -------------------------
    def webhooks(self) -> list[dict[str, Any]]:
        """The server's webhooks (id, url, events, enabled, secret: owner only)."""
        response = self._http.get("/api/v1/webhooks")
        _raise_for_status(response, self.api_url, "the list of webhooks")
        return list(response.json()["items"])

    def ensure_webhook(self, url: str, events: Sequence[str], description: str | None = None) -> tuple[str, str]:
        """The webhook that sends ``events`` to ``url``: found by its URL (one per URL, never a
        second), its events and ``enabled`` brought in line, else created. Returns (id,
        secret); the secret signs every delivery (keep it owner-only)."""
        wanted = url.rstrip("/")
        found = [w for w in self.webhooks() if str(w["url"]).rstrip("/") == wanted]
        if found:
            hook = found[0]
            if set(hook["events"]) != set(events) or not hook["enabled"]:
                response = self._http.patch(f"/api/v1/webhooks/{hook['id']}",
                                            json={"events": list(events), "enabled": True})
                _raise_for_status(response, self.api_url, f"updating the webhook to {wanted}")
            return str(hook["id"]), str(hook["secret"])
        body: dict[str, Any] = {"url": url, "events": list(events)}
        if description:
            body["description"] = description
        response = self._http.post("/api/v1/webhooks", json=body)
        _raise_for_status(response, self.api_url, f"creating a webhook to {wanted}")
        created = response.json()
        return str(created["id"]), str(created["secret"])

    def disable_webhook(self, webhook_id: str) -> None:
        """Stop deliveries of a webhook (kept, with its id and secret, for :meth:`ensure_webhook`
        to enable again). A webhook that no longer exists is fine."""
        response = self._http.patch(f"/api/v1/webhooks/{webhook_id}", json={"enabled": False})
        if response.status_code != 404:
            _raise_for_status(response, self.api_url, f"disabling webhook {webhook_id}")

    def delete_webhook(self, webhook_id: str) -> None:
        response = self._http.delete(f"/api/v1/webhooks/{webhook_id}")
        if response.status_code != 404:
            _raise_for_status(response, self.api_url, f"deleting webhook {webhook_id}")

    def close(self) -> None:
        self._http.close()


def owner_for(settings: Any, *, timeout_s: float = DEFAULT_TIMEOUT_S,
              passwords: AccountPasswords | None = None) -> ArgillaOwner:
    """The owner side of the configured Argilla (``settings``: :class:`crowdpref.settings.Settings`):
    with ``argilla_owner_session`` (the portal, on the embedded Argilla) it signs in with owner
    sessions minted with Argilla's signing key and never reads the owner's API key; else with
    the configured or embedded owner's API key."""
    if settings.argilla_owner_session:
        from crowdpref.portal import argilla_session

        auth = argilla_session.OwnerSessions(argilla_session.load_secret(settings.secrets_dir))
        return ArgillaOwner(settings.argilla_api_url, MINTED, timeout_s=timeout_s, passwords=passwords, auth=auth)
    return ArgillaOwner(settings.argilla_api_url, settings.resolved_argilla_api_key(), timeout_s=timeout_s,
                        passwords=passwords)


class AnnotatorSession:
    """One participant's session: what their browser does, over HTTP."""

    def __init__(self, api_url: str, username: str, password: str | None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 token: str | None = None):
        """Signs in with ``password`` (Argilla's login), or uses ``token``, an Argilla session
        the portal minted (what the browser holds in the public profile; no login)."""
        self.api_url = api_url.rstrip("/")
        self.username = username
        if token is None:
            if password is None:
                raise ValueError("AnnotatorSession needs a password or a token")
            token = self._token(self.api_url, username, password, timeout_s)
        if token is None:
            raise ArgillaError(f"Argilla at {self.api_url} refused the login of '{username}': check the password in the study store")
        self._http = httpx.Client(
            base_url=self.api_url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s,
            transport=StaleConnectionRetry(verify=shared_context()),
        )

    @staticmethod
    def _token(api_url: str, username: str, password: str, timeout_s: float) -> str | None:
        try:
            response = httpx.post(
                f"{api_url}/api/v1/token", data={"username": username, "password": password}, timeout=timeout_s,
                verify=shared_context(),
            )
        except httpx.HTTPError as exc:
            raise ArgillaError(f"Argilla is unreachable at {api_url} ({exc.__class__.__name__})", transient=True) from None
        if response.status_code == 401:
            return None
        _raise_for_status(response, api_url, "login")
        return response.json()["access_token"]

    @classmethod
    def password_works(cls, api_url: str, username: str, password: str) -> bool:
        return cls._token(api_url, username, password, 10.0) is not None

    def datasets(self) -> list[dict[str, Any]]:
        response = self._http.get("/api/v1/me/datasets")
        _raise_for_status(response, self.api_url, "the annotator's datasets")
        return response.json()["items"]

    def pending_records(self, dataset_id: str, limit: int = SEARCH_PAGE_MAX) -> list[dict[str, Any]]:
        """The annotator's queue: records this user has not answered yet (what the UI shows)."""
        body = {
            "filters": {
                "and": [{"type": "terms", "scope": {"entity": "response", "property": "status"}, "values": ["pending"]}]
            }
        }
        response = self._http.post(
            f"/api/v1/me/datasets/{dataset_id}/records/search", json=body, params={"limit": limit}
        )
        _raise_for_status(response, self.api_url, "the annotator's queue")
        return [item["record"] for item in response.json()["items"]]

    def submit(self, answers: Sequence[tuple[str, dict[str, Any]]], status: str = "submitted") -> int:
        """Submit ``(server record id, {question: value})`` pairs in bulk; returns how many
        the server accepted. Errors per item are raised, never ignored."""
        accepted = 0
        for start in range(0, len(answers), RESPONSES_BULK_MAX):
            items = [
                {"record_id": record_id, "status": status, "values": {q: {"value": v} for q, v in values.items()}}
                for record_id, values in answers[start : start + RESPONSES_BULK_MAX]
            ]
            response = self._http.post("/api/v1/me/responses/bulk", json={"items": items})
            _raise_for_status(response, self.api_url, "submitting responses")
            errors = [item["error"] for item in response.json()["items"] if item.get("error")]
            if errors:
                raise ArgillaError(f"Argilla at {self.api_url} rejected {len(errors)} responses of '{self.username}': {errors[0]}")
            accepted += len(items)
        return accepted

    def close(self) -> None:
        self._http.close()


@contextmanager
def _quiet_lookup() -> Iterator[None]:
    """The SDK warns on every lookup that finds nothing; for our ensure_* that is the norm."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


def _raise_for_status(response: httpx.Response, api_url: str, what: str) -> None:
    if response.status_code < 400:
        return
    detail = response.text[:200].replace("\n", " ")
    raise ArgillaError(
        f"Argilla at {api_url} answered {response.status_code} for {what}: {detail}",
        transient=response.status_code >= 500,
    )


def _parse_time(value: str | None) -> datetime | None:
    """Server timestamps are UTC, sent without a zone: make them aware, so ``.timestamp()`` does
    not read them as local time (which would shift inactivity by the machine's UTC offset)."""
    if not value:
        return None
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


__all__ = [
    "AnnotatorSession",
    "ArgillaAPIError",
    "DatasetRef",
    "ArgillaCredentialsError",
    "ArgillaError",
    "ArgillaOwner",
    "SubmittedAnswer",
    "check_server",
]
