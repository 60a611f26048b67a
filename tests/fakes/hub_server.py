"""A fake Hugging Face Hub, so tests can drive the REAL ``huggingface_hub.HfApi`` over HTTP.

    with FakeHubServer() as hub:
        api = HfApi(endpoint=hub.url, token=hub.write_token)
        api.create_repo("me/data", repo_type="dataset", private=True, exist_ok=True)
        api.upload_folder(repo_id="me/data", folder_path=folder, repo_type="dataset")
        hub.repos["datasets/me/data"].files  # {"README.md": b"...", ...}

It implements just what ``create_repo``, ``list_repo_files`` / ``list_repo_tree``,
``create_commit`` and ``upload_folder`` of huggingface_hub 2.x call (read from ``hf_api.py`` /
``_commit_api.py`` / ``utils/_pagination.py``):

``POST /api/repos/create``                       ``{name, organization, type, visibility}``;
                                                 409 when it exists (``exist_ok`` accepts that).
                                                 Like the Hub, a new repo starts with a system
                                                 commit holding ``.gitattributes``
                                                 (:data:`GITATTRIBUTES`)
``GET  /api/{type}s/{owner}/{name}[/revision/r]`` repo info (used after a 403 on create)
``GET  /api/{type}s/{repo}/tree/{rev}[/{path}]``  ``?recursive=&expand=``: a JSON list of
                                                 ``{type: file|directory, oid, size, path}``,
                                                 ``tree_page_size`` entries per page, the next
                                                 page in a ``Link: <...>; rel="next"`` header
                                                 (the Hub's cursor pagination); ``rev`` is
                                                 ``main`` or the head commit, else 404
                                                 ``RevisionNotFound``
``POST /api/validate-yaml``                      README metadata check (YAML must parse)
``POST /api/{type}s/{repo}/preupload/{rev}``     answers every file ``uploadMode: regular``
                                                 (with the git oid of the stored copy, so
                                                 unchanged files are skipped like on the Hub)
``POST /api/{type}s/{repo}/commit/{rev}``        NDJSON: a ``header`` line (``summary``,
                                                 ``description``, optional ``parentCommit``:
                                                 412 when it is not the head), then ``file``
                                                 lines with base64 content, ``deletedFile``
                                                 (404 ``EntryNotFound`` for a path that does not
                                                 exist, as the Hub answers) and
                                                 ``deletedFolder`` lines, all applied as ONE
                                                 commit (``lfsFile`` lines are refused: nothing
                                                 here stores LFS objects)
``GET  /api/{type}s/{repo}/commits/{rev}``       the commits reachable from ``rev`` (``main``
                                                 or a commit id), newest first, as
                                                 ``list_repo_commits`` reads them
``POST /api/{type}s/{repo}/super-squash/{branch}`` ``{message}``: the branch's history becomes
                                                 one commit holding the head's files; every
                                                 earlier commit is gone (its tree: 404
                                                 ``RevisionNotFound``), as on the Hub
                                                 (``HfApi.super_squash_history``)
``GET  /api/whoami-v2``                          the token's user

Revisions: every commit keeps a snapshot of the repo's files, so a tree listing at an earlier
commit id answers what that revision held (:meth:`FakeHubServer.file_at` reads a file of any
revision still in the history, :meth:`FakeHubServer.revisions` lists them).

Tokens: ``write_token`` may do everything, ``read_token`` may read but gets 403 on writes,
anything else gets 401 (whose body echoes the token, as careless servers do, so tests can check
that it is never repeated). ``fail_next`` injects error statuses into the next POSTs;
``commit_after_listing`` makes another writer commit right after a push has listed the repo.
``requests`` logs ``(method, path)`` of every call; ``repos`` holds what arrived (``private``
flag, files and their bytes, commits: each with the files it ``added`` and ``deleted`` and the
``snapshot`` of every file after it).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import uuid
from urllib.parse import parse_qs, unquote, urlsplit
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import yaml

WRITE_TOKEN = "hf_fakeWriteToken0123456789abcdef"
READ_TOKEN = "hf_fakeReadToken0123456789abcdef"
USER = "crowdpref-tester"
GITATTRIBUTES = (b"*.parquet filter=lfs diff=lfs merge=lfs -text\n"
                 b"*.arrow filter=lfs diff=lfs merge=lfs -text\n")
"""What the fake (like the Hub, in a longer version) puts in a new repo's first commit."""


def git_blob_oid(content: bytes) -> str:
    """The git object id of a blob (what the Hub reports for regular files)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


@dataclass
class FakeRepo:
    repo_type: str
    repo_id: str
    private: bool
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[dict[str, Any]] = field(default_factory=list)

    @property
    def sha(self) -> str:
        return self.commits[-1]["oid"] if self.commits else "0" * 40

    def record(self, oid: str, summary: str | None, added: list[str], deleted: list[str]) -> None:
        """Append a commit holding a snapshot of the files as they are now."""
        self.commits.append({"oid": oid, "summary": summary, "files": sorted(added), "deleted": sorted(deleted),
                             "snapshot": dict(self.files), "date": f"2026-01-01T00:00:{len(self.commits) % 60:02d}Z"})

    def files_at(self, revision: str) -> dict[str, bytes] | None:
        """The files of ``revision`` (``main`` or a commit id still in the history), or None.
        The head is the live files (a test may plant files without a commit)."""
        if revision in ("main", self.sha):
            return dict(self.files)
        for commit in self.commits:
            if commit["oid"] == revision:
                return dict(commit.get("snapshot", {}))
        return None


class FakeHubServer:
    def __init__(self, users: dict[str, tuple[str, str]] | None = None):
        #: token -> (username, role "write" | "read")
        self.users = users or {WRITE_TOKEN: (USER, "write"), READ_TOKEN: (USER, "read")}
        self.write_token = WRITE_TOKEN
        self.read_token = READ_TOKEN
        self.repos: dict[str, FakeRepo] = {}  # "<type>s/<owner>/<name>" -> repo
        self.requests: list[tuple[str, str]] = []
        #: status codes to answer the next POSTs with (one per request), e.g. [503]
        self.fail_next: list[int] = []
        #: entries per page of a tree listing (the Hub pages by 1000)
        self.tree_page_size = 1000
        #: "<type>s/<owner>/<name>" -> files another writer commits right after the next
        #: complete listing of that repo (a race between a push's listing and its commit)
        self.commit_after_listing: dict[str, dict[str, bytes]] = {}
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeHubServer:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeHubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # queries for tests -------------------------------------------------------------------
    def dataset(self, repo_id: str) -> FakeRepo:
        return self.repos[f"datasets/{repo_id}"]

    def revisions(self, repo_id: str) -> list[str]:
        """The commit ids of a dataset repo's history, oldest first."""
        return [c["oid"] for c in self.dataset(repo_id).commits]

    def file_at(self, repo_id: str, revision: str, path: str) -> bytes | None:
        """A file of a dataset repo at ``revision`` (None: not in that revision, or the revision
        is no longer in the history)."""
        files = self.dataset(repo_id).files_at(revision)
        return None if files is None else files.get(path)


def _handler(hub: FakeHubServer) -> type[BaseHTTPRequestHandler]:
    repo_path = re.compile(
        r"^/api/(models|datasets|spaces)/([^/]+)/([^/]+)"
        r"(?:/(preupload|commit|revision|commits|super-squash)/([^/]+))?$")
    tree_path = re.compile(r"^/api/(models|datasets|spaces)/([^/]+)/([^/]+)/tree/([^/]+)(?:/(.+))?$")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        # helpers ----------------------------------------------------------------------
        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def _user(self, write: bool) -> tuple[str, str] | None:
            """The caller's (user, role), or None after answering 401/403."""
            auth = self.headers.get("Authorization", "")
            token = auth.removeprefix("Bearer ").strip()
            user = hub.users.get(token)
            if user is None:
                self._send(401, {"error": f"Invalid credentials in Authorization header: {token!r}"})
                return None
            if write and user[1] != "write":
                self._send(403, {"error": "You don't have the rights to write to this repo "
                                          "(read-only token)"})
                return None
            return user

        def _repo_or_404(self, key: str, user: tuple[str, str]) -> FakeRepo | None:
            repo = hub.repos.get(key)  # one user: private repos are visible to every valid token
            if repo is None:
                self._send(404, {"error": "Repository not found"},
                           {"X-Error-Code": "RepoNotFound"})
                return None
            return repo

        # routes ------------------------------------------------------------------------
        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?")[0]
            hub.requests.append(("GET", path))
            if path == "/api/whoami-v2":
                user = self._user(write=False)
                if user:
                    self._send(200, {"type": "user", "name": user[0],
                                     "auth": {"accessToken": {"role": user[1]}}})
                return
            tree = tree_path.match(path)
            if tree:
                self._tree(tree)
                return
            match = repo_path.match(path)
            if match and match.group(4) == "commits":
                self._commits(match)
                return
            if match and match.group(4) in (None, "revision"):
                user = self._user(write=False)
                if user is None:
                    return
                kind, owner, name = match.group(1), match.group(2), match.group(3)
                repo = self._repo_or_404(f"{kind}/{owner}/{name}", user)
                if repo is None:
                    return
                self._send(200, {
                    "id": repo.repo_id, "_id": uuid.uuid5(uuid.NAMESPACE_URL, repo.repo_id).hex,
                    "private": repo.private, "sha": repo.sha, "author": owner,
                    "siblings": [{"rfilename": f} for f in sorted(repo.files)],
                    "tags": [], "downloads": 0, "likes": 0,
                })
                return
            self._send(404, {"error": f"not implemented in the fake hub: GET {path}"})

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?")[0]
            hub.requests.append(("POST", path))
            body = self._body()
            with hub.lock:
                failure = hub.fail_next.pop(0) if hub.fail_next else None
            if failure is not None:
                self._send(failure, {"error": f"injected failure {failure}"})
                return
            if path == "/api/validate-yaml":
                self._validate_yaml(body)
                return
            if path == "/api/repos/create":
                self._create(body)
                return
            match = repo_path.match(path)
            if match and match.group(4) in ("preupload", "commit", "super-squash"):
                user = self._user(write=True)
                if user is None:
                    return
                kind, owner, name, action = match.group(1), match.group(2), match.group(3), match.group(4)
                repo = self._repo_or_404(f"{kind}/{owner}/{name}", user)
                if repo is None:
                    return
                if action == "super-squash":
                    self._squash(repo, unquote(match.group(5)), body)
                elif action == "preupload":
                    files = json.loads(body)["files"]
                    self._send(200, {"files": [
                        {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                         "oid": git_blob_oid(repo.files[f["path"]]) if f["path"] in repo.files else None}
                        for f in files]})
                else:
                    self._commit(repo, body)
                return
            self._send(404, {"error": f"not implemented in the fake hub: POST {path}"})

        def _tree(self, match: re.Match[str]) -> None:
            user = self._user(write=False)
            if user is None:
                return
            kind, owner, name = match.group(1), match.group(2), match.group(3)
            revision, folder = unquote(match.group(4)), unquote(match.group(5) or "")
            repo = self._repo_or_404(f"{kind}/{owner}/{name}", user)
            if repo is None:
                return
            with hub.lock:
                at = repo.files_at(revision)
            if at is None:
                self._send(404, {"error": f"Invalid rev id: {revision}"},
                           {"X-Error-Code": "RevisionNotFound"})
                return
            query = parse_qs(urlsplit(self.path).query)
            recursive = (query.get("recursive") or ["false"])[0].lower() == "true"
            cursor = int((query.get("cursor") or ["0"])[0])
            prefix = folder.rstrip("/") + "/" if folder else ""
            files = {p: c for p, c in at.items() if p.startswith(prefix)}
            if folder and not files:
                self._send(404, {"error": f"Entry not found: {folder}"},
                           {"X-Error-Code": "EntryNotFound"})
                return
            entries: dict[str, dict[str, Any]] = {}
            for file_path, content in sorted(files.items()):
                parts = file_path[len(prefix):].split("/")
                if not recursive and len(parts) > 1:
                    entries.setdefault(prefix + parts[0], {"type": "directory", "size": 0})
                    continue
                for depth in range(1, len(parts)):
                    entries.setdefault(prefix + "/".join(parts[:depth]),
                                       {"type": "directory", "size": 0})
                entries[file_path] = {"type": "file", "size": len(content),
                                      "oid": git_blob_oid(content)}
            listing = [{"path": p, "oid": e.get("oid") or hashlib.sha1(p.encode()).hexdigest(),
                        **{k: v for k, v in e.items() if k != "oid"}}
                       for p, e in sorted(entries.items())]
            page = listing[cursor:cursor + hub.tree_page_size]
            headers = {}
            if cursor + hub.tree_page_size < len(listing):
                base = self.path.split("?")[0]
                headers["Link"] = (f"<{hub.url}{base}?recursive={str(recursive).lower()}"
                                   f"&expand=false&cursor={cursor + hub.tree_page_size}>; "
                                   'rel="next"')
            self._send(200, page, headers)
            if "Link" not in headers:  # the listing is complete: another writer may commit now
                with hub.lock:
                    added = hub.commit_after_listing.pop(f"{kind}/{owner}/{name}", None)
                    if added is not None:
                        repo.files.update(added)
                        repo.record(hashlib.sha1(repr(sorted(added)).encode() + repo.sha.encode()).hexdigest(),
                                    "another writer", list(added), [])

        def _validate_yaml(self, body: bytes) -> None:
            content = json.loads(body).get("content", "")
            match = re.match(r"^---\n(.*?)\n---\n", content, re.S)
            try:
                meta = yaml.safe_load(match.group(1)) if match else None
            except yaml.YAMLError as exc:
                self._send(400, {"errors": [{"message": f"invalid YAML: {exc}"}], "warnings": []})
                return
            warnings = ([] if isinstance(meta, dict) and meta
                        else [{"message": "empty or missing yaml metadata"}])
            self._send(200, {"errors": [], "warnings": warnings})

        def _create(self, body: bytes) -> None:
            user = self._user(write=True)
            if user is None:
                return
            payload = json.loads(body)
            kind = payload.get("type") or "model"
            owner = payload.get("organization") or user[0]
            repo_id = f"{owner}/{payload['name']}"
            key = f"{kind}s/{repo_id}"
            url = f"{hub.url}/{'' if kind == 'model' else kind + 's/'}{repo_id}"
            with hub.lock:
                if key in hub.repos:
                    self._send(409, {"error": "You already created this repo", "url": url})
                    return
                repo = FakeRepo(kind, repo_id, private=payload.get("visibility") == "private")
                repo.files[".gitattributes"] = GITATTRIBUTES  # the Hub's initial system commit
                repo.record(hashlib.sha1(repo_id.encode()).hexdigest(), "initial commit", [".gitattributes"], [])
                hub.repos[key] = repo
            self._send(200, {"url": url, "name": repo_id, "id": uuid.uuid4().hex})

        def _commit(self, repo: FakeRepo, body: bytes) -> None:
            lines = [json.loads(line) for line in body.splitlines() if line.strip()]
            if not lines or lines[0].get("key") != "header":
                self._send(400, {"error": "first NDJSON line must be the header"})
                return
            added: dict[str, bytes] = {}
            deleted: list[tuple[str, str]] = []
            for line in lines[1:]:
                key, value = line.get("key"), line.get("value", {})
                if key == "file":
                    if value.get("encoding") != "base64":
                        self._send(400, {"error": "file content must be base64"})
                        return
                    added[value["path"]] = base64.b64decode(value["content"])
                elif key in ("deletedFile", "deletedFolder"):
                    deleted.append((key, value["path"]))
                else:
                    self._send(400, {"error": f"the fake hub does not store {key!r} operations"})
                    return
            header = lines[0].get("value") or {}
            oid = hashlib.sha1(body).hexdigest()
            with hub.lock:
                parent = header.get("parentCommit")
                if parent is not None and parent != repo.sha:
                    self._send(412, {"error": "A commit has happened since. Please refresh and "
                                              "try again."})
                    return
                missing = [p for key, p in deleted if key == "deletedFile" and p not in repo.files]
                if missing:
                    self._send(404, {"error": f"A file with this name doesn't exist: {missing[0]}"},
                               {"X-Error-Code": "EntryNotFound"})
                    return
                for key, path in deleted:
                    inside = path.rstrip("/") + "/"
                    for existing in [p for p in repo.files
                                     if p == path or (key == "deletedFolder" and p.startswith(inside))]:
                        del repo.files[existing]
                repo.files.update(added)
                repo.record(oid, lines[0]["value"].get("summary"), list(added), [p for _, p in deleted])
            prefix = "" if repo.repo_type == "model" else f"{repo.repo_type}s/"
            self._send(200, {"commitUrl": f"{hub.url}/{prefix}{repo.repo_id}/commit/{oid}",
                             "commitOid": oid, "success": True})

        def _commits(self, match: re.Match[str]) -> None:
            user = self._user(write=False)
            if user is None:
                return
            repo = self._repo_or_404(f"{match.group(1)}/{match.group(2)}/{match.group(3)}", user)
            if repo is None:
                return
            revision = unquote(match.group(5))
            with hub.lock:
                oids = [c["oid"] for c in repo.commits]
                if revision != "main" and revision not in oids:
                    self._send(404, {"error": f"Invalid rev id: {revision}"}, {"X-Error-Code": "RevisionNotFound"})
                    return
                upto = len(oids) if revision == "main" else oids.index(revision) + 1
                listing = [{"id": c["oid"], "authors": [{"user": user[0]}], "date": c["date"],
                            "title": c["summary"] or "", "message": ""} for c in reversed(repo.commits[:upto])]
            self._send(200, listing)

        def _squash(self, repo: FakeRepo, branch: str, body: bytes) -> None:
            if branch != "main":
                self._send(404, {"error": f"Invalid rev id: {branch}"}, {"X-Error-Code": "RevisionNotFound"})
                return
            message = (json.loads(body or b"{}").get("message") or "").strip()
            if not message:
                self._send(400, {"error": "a commit message is required"})
                return
            with hub.lock:
                oid = hashlib.sha1(b"squash" + repo.sha.encode() + message.encode()).hexdigest()
                repo.commits.clear()  # every earlier revision is gone with the history
                repo.record(oid, message, list(repo.files), [])
            self._send(200, {})

    return Handler
