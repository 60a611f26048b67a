"""The public profile's front door: Debian's caddy, started by services/caddy.py with ``tls
internal`` on free high ports, in front of the real portal (served over HTTP from this process)
and a stand-in Argilla (an HTTP server here that echoes what reached it).

- routing on one host name, HSTS, the HTTP port's redirect, request body limits (413);
- the per-address entry limit counts the client Caddy saw (X-Forwarded-For from the stack's own
  Caddy is trusted by default in the public profile; a forged one is not);
- Caddy's two logs (access, and its own, which records the request of a proxy error) hold no
  query string, cookie, Authorization or Referer value and no response header;
- the public profile's ``up`` / ``status`` / ``down`` through the stack (PostgreSQL, the portal
  as a process, Caddy): the portal's /proc/<pid>/environ holds no Hub or LLM secret, ``crowdpref
  status`` shows the public URL and the certificate's expiry, and nothing is left running.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from crowdpref.portal.app import create_app
from crowdpref.portal.service import Portal, RateLimiter
from crowdpref.settings import Settings
from crowdpref.store import Store
from services import caddy
from services.process import ProcessManager, group_members, port_in_use
from tests.conftest import REPO, free_port, isolated_settings
from tests.portal_server import PortalThread

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("caddy") is None,
                       reason="!!! CADDY TESTS SKIPPED: Debian's caddy is missing - run make setup (as root) !!!"),
]

SECRETS = ("PIDSECRET0000000000000000", "SESSIONSECRET", "STUDYSECRET", "AUTHSECRET", "INVITESECRET",
           "COOKIESECRET", "BEARERSECRET", "REFERERSECRET", "LOCATIONSECRET", "SETCOOKIESECRET")
QUERY = ("PROLIFIC_PID=PIDSECRET0000000000000000&STUDY_ID=STUDYSECRET&SESSION_ID=SESSIONSECRET"
         "&auth=AUTHSECRET&invite=INVITESECRET")


class _Argilla(BaseHTTPRequestHandler):
    """A stand-in for Argilla: reads the whole body (chunked too), answers what reached it, with
    a Location and a Set-Cookie that must not reach Caddy's log; ``/_drop`` closes the connection
    unanswered (Caddy then logs a proxy error)."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        if self.path.startswith("/_drop"):
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        size = 0
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":  # (cut off: the proxy errs)
            while (chunk := int(self.rfile.readline().split(b";")[0] or b"0", 16)) > 0:
                size += len(self.rfile.read(chunk))
                self.rfile.readline()
            self.rfile.readline()
        elif self.headers.get("Content-Length"):
            size = len(self.rfile.read(int(self.headers["Content-Length"])))
        body = json.dumps({"who": "argilla", "path": self.path, "size": size,
                           "forwarded_for": self.headers.get("X-Forwarded-For"),
                           "forwarded_proto": self.headers.get("X-Forwarded-Proto")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Location", "/sign-in?auth=LOCATIONSECRET")
        self.send_header("Set-Cookie", "argilla=SETCOOKIESECRET")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = _answer

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class Front:
    settings: Settings
    portal: Portal
    root: Path  # Caddy's internal CA: what clients trust

    @property
    def url(self) -> str:
        return self.settings.public_url or ""

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(verify=str(self.root), timeout=30, **kwargs)  # type: ignore[arg-type]


def _argilla_upstream() -> tuple[ThreadingHTTPServer, int]:
    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), _Argilla)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, port


def _public_settings(tmp_path: Path, argilla_port: int, **overrides: object) -> Settings:
    https = free_port()
    values: dict[str, object] = dict(
        public_url=f"https://localhost:{https}", public_tls="internal", https_port=https, http_port=free_port(),
        argilla_url=f"http://127.0.0.1:{argilla_port}", argilla_api_key="stand-in-key",
        portal_studies=tmp_path / "studies")
    values.update(overrides)
    (tmp_path / "studies").mkdir(exist_ok=True)
    settings = isolated_settings(tmp_path / "home", **values)
    if not settings.embedded_argilla:  # the stand-in's signing key, where an operator puts an external Argilla's
        _stand_in_key(settings)
    return settings


def _stand_in_key(settings: Settings) -> None:
    """The token-signing key of an Argilla crowdpref did not start, in the secrets folder: the portal
    does not start without it (crowdpref.portal.argilla_session.check_signing_key)."""
    settings.secrets_dir.mkdir(parents=True, exist_ok=True)
    (settings.secrets_dir / "argilla-auth-secret").write_text("stand-in-signing-key")


@pytest.fixture(params=["external"])
def front(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Front]:
    """Caddy in front of the portal and a stand-in Argilla: ``external`` (``argilla_url`` set, as
    a separate Argilla server) or ``embedded`` (the stack's own Argilla, on this host)."""
    argilla, argilla_port = _argilla_upstream()
    if request.param == "embedded":
        settings = _public_settings(tmp_path, argilla_port, argilla_url=None, argilla_api_key=None)
        settings = settings.model_copy(update={"argilla_port": argilla_port})
        assert settings.embedded_argilla
    else:
        settings = _public_settings(tmp_path, argilla_port)
    portal = Portal(settings, Store(f"sqlite:///{tmp_path / 'store.sqlite'}"))
    manager = ProcessManager(settings.state_dir)
    try:
        server = PortalThread(create_app(portal), port=settings.portal_port)
        # the portal's own rule decides whom the limits count (uvicorn's proxy_headers, on in the
        # portal process, would also believe X-Forwarded-For from 127.0.0.1, and hide a broken rule)
        server.config.proxy_headers = False
        with server:
            caddy.start(settings, manager)
            yield Front(settings, portal, caddy.internal_root(settings))
    finally:
        manager.stop(caddy.NAME)
        argilla.shutdown()
    assert not port_in_use("0.0.0.0", settings.https_port)


def test_one_host_name_routes_the_portal_and_argilla_with_hsts_and_body_limits(front):
    with front.client() as http:
        health = http.get(f"{front.url}/healthz")
        assert health.status_code == 200 and health.json() == {"status": "ok"}  # the portal's
        assert health.headers["strict-transport-security"] == "max-age=31536000"
        assert "server" not in health.headers
        unknown = http.get(f"{front.url}/s/nosuchstudy/study1")
        assert unknown.status_code == 404 and "Study not found" in unknown.text  # the portal's page
        argilla = http.get(f"{front.url}/api/v1/status?x=1")
        assert argilla.json()["who"] == "argilla" and argilla.json()["path"] == "/api/v1/status?x=1"
        assert argilla.json()["forwarded_proto"] == "https"
        assert argilla.headers["strict-transport-security"] == "max-age=31536000"
        assert http.get(f"{front.url}/dataset/x/annotation-mode").json()["who"] == "argilla"

        # request bodies: the portal's forms and Prolific's hooks 64 KiB, Argilla's events 1 MiB,
        # Argilla itself 16 MiB: 413 when the Content-Length says so; a chunked body is cut off at
        # the limit (Caddy 2.6 answers 413 or 502 then, or the portal its own 413)
        def post(path: str, size: int, chunked: bool = False) -> httpx.Response:
            body = b"x" * size
            content = iter([body[i:i + 65536] for i in range(0, size, 65536)]) if chunked else body
            return http.post(f"{front.url}{path}", content=content)

        refused = post("/hooks/prolific", 70 * 1024)
        assert refused.status_code == 413 and refused.headers["strict-transport-security"] == "max-age=31536000"
        assert post("/hooks/prolific", 70 * 1024, chunked=True).status_code in (413, 502)
        assert post("/s/x/study1/start", 70 * 1024).status_code == 413
        assert post("/hooks/prolific", 1024).status_code not in (413, 502)  # the portal answers it
        assert post("/hooks/argilla", 900 * 1024).status_code not in (413, 502)
        assert post("/hooks/argilla", 1100 * 1024).status_code == 413
        big = post("/api/v1/me/responses/bulk", 15 * 1024 * 1024)
        assert big.status_code == 200 and big.json()["size"] == 15 * 1024 * 1024
        assert post("/api/v1/me/responses/bulk", 17 * 1024 * 1024).status_code == 413
        assert post("/api/v1/me/responses/bulk", 17 * 1024 * 1024, chunked=True).status_code in (413, 502)
        assert post("/api/v1/me/responses/bulk", 15 * 1024 * 1024, chunked=True).json()["size"] == 15 * 1024 * 1024

    # the HTTP port sends browsers to HTTPS
    plain = httpx.get(f"http://localhost:{front.settings.http_port}/s/x/study1", follow_redirects=False, timeout=10)
    assert plain.status_code == 308 and plain.headers["location"].startswith("https://localhost")


def _own_addresses() -> list[str]:
    """This machine's non-loopback IPv4 addresses (a client connecting from one of them is not
    loopback, which the portal's per-address limits ignore)."""
    found = set()
    try:
        found.update(socket.gethostbyname_ex(socket.gethostname())[2])
    except OSError:
        pass
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: only the route's source address
            found.add(probe.getsockname()[0])
    except OSError:
        pass
    return sorted(a for a in found if not a.startswith("127."))


def test_the_per_address_entry_limit_counts_the_client_caddy_saw(front):
    addresses = _own_addresses()
    if not addresses:
        pytest.skip("this machine has no non-loopback address to connect from")
    limit = 3
    front.portal.limits["address"] = RateLimiter(limit, 600)
    entry = f"{front.url}/s/nosuchstudy/study1?PROLIFIC_PID=5f0000000000000000000001"
    remote = httpx.HTTPTransport(local_address=addresses[0], verify=str(front.root))
    with httpx.Client(transport=remote, timeout=30) as outside, front.client() as local:
        seen = [outside.get(entry).status_code for _ in range(limit)]
        assert 429 not in seen, seen
        assert outside.get(entry).status_code == 429  # the real client used its entries
        # a forged X-Forwarded-For does not make them someone else (Caddy replaces it)
        assert outside.get(entry, headers={"X-Forwarded-For": "198.51.100.7"}).status_code == 429
        # the same portal, the same proxy: another client is not limited by them
        assert local.get(entry).status_code == 404


def test_caddys_logs_keep_paths_and_nothing_that_identifies_or_signs_in(front):
    headers = {"Cookie": "crowdpref-x-study1=COOKIESECRET", "Authorization": "Bearer BEARERSECRET",
               "Referer": f"{front.url}/sign-in?auth=REFERERSECRET"}
    with front.client() as http:
        assert http.get(f"{front.url}/s/nosuchstudy/study1?{QUERY}", headers=headers).status_code == 404
        assert http.post(f"{front.url}/s/nosuchstudy/study1/start?{QUERY}", headers=headers).status_code == 404
        assert http.get(f"{front.url}/sign-in?{QUERY}", headers=headers).status_code == 200
        assert http.get(f"{front.url}/api/v1/me?{QUERY}", headers=headers).status_code == 200
        assert http.get(f"{front.url}/_drop?{QUERY}", headers=headers).status_code == 502  # a proxy error
    access, own = caddy.access_log_path(front.settings), front.settings.logs_dir / "caddy.log"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and access.read_text().count("\n") < 5:
        time.sleep(0.2)
    entries = [json.loads(line) for line in access.read_text().splitlines()]
    uris = [e["request"]["uri"] for e in entries if "request" in e]
    for path in ("/s/nosuchstudy/study1", "/s/nosuchstudy/study1/start", "/sign-in", "/api/v1/me", "/_drop"):
        assert path in uris, uris  # the paths stay
    assert any(e.get("msg") == "handled request" and e.get("status") == 502 for e in entries)
    assert all(e["request"]["remote_ip"] == "127.0.0.1" for e in entries if "request" in e)  # who, kept
    own_entries = [json.loads(line) for line in own.read_text().splitlines() if line.startswith("{")]
    errors = [e for e in own_entries if e.get("logger", "").startswith("http.log.error")]
    assert [e["request"]["uri"] for e in errors] == ["/_drop"]  # the proxy error's request: its path only
    for log in (access, own):
        text = log.read_text()
        for secret in SECRETS:
            assert secret not in text, (log.name, secret)
        assert "PROLIFIC_PID" not in text and "auth=" not in text


@pytest.fixture()
def public_stack(tmp_path: Path) -> Iterator[tuple[Settings, dict[str, str]]]:
    """The public profile's stack with the portal and Caddy (and the PostgreSQL of the profile),
    with a Hub token and an LLM key set; Argilla and Prefect elsewhere (stand-ins)."""
    from services import postgres, stack

    reason = postgres.unavailable_reason()
    if reason:
        pytest.skip(f"no PostgreSQL server: {reason}")
    argilla, argilla_port = _argilla_upstream()
    secrets = {"hf_token": "hf_STACKSECRET0123456789", "openai_api_key": "sk-STACKSECRET0123456789"}
    settings = _public_settings(tmp_path, argilla_port, prefect_api_url=f"http://127.0.0.1:{free_port()}/api",
                                postgres_port=free_port(), **secrets)
    try:
        yield settings, secrets
    finally:
        stack.down(settings)
        argilla.shutdown()


def test_the_public_profile_up_status_down_with_a_portal_that_holds_no_hub_or_llm_secret(public_stack):
    from services import stack

    settings, secrets = public_stack
    rows = {row.name: row for row in stack.up(settings, ["portal", "caddy"], supervise=False)}
    assert rows["caddy"].healthy and rows["portal"].healthy, rows
    assert rows["caddy"].url.startswith(settings.public_url or "-")
    manager = ProcessManager(settings.state_dir)
    pids = {name: manager.running(name).pid for name in ("portal", "caddy")}  # type: ignore[union-attr]

    # the portal that faces the internet: no Hub token, no LLM key in its environment
    environ = Path(f"/proc/{pids['portal']}/environ").read_bytes().split(b"\0")
    names = {item.split(b"=", 1)[0].decode() for item in environ if item}
    assert "CROWDPREF_HOME" in names and "CROWDPREF_PUBLIC_URL" in names  # it is the portal's environment
    for value in secrets.values():
        assert value.encode() not in b"\0".join(environ)
    assert not {n for n in names if n.startswith(("CROWDPREF_HF_", "CROWDPREF_OPENAI_", "HF_", "OPENAI_"))}
    # nor in Caddy's
    assert not any(value.encode() in Path(f"/proc/{pids['caddy']}/environ").read_bytes() for value in secrets.values())

    # through Caddy, over HTTPS, trusting only Caddy's own CA
    with httpx.Client(verify=str(caddy.internal_root(settings)), timeout=30) as http:
        assert http.get(f"{settings.public_url}/healthz").status_code == 200
        assert http.get(f"{settings.public_url}/api/v1/status").json()["who"] == "argilla"

    # crowdpref status: the public URLs and the certificate's expiry
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CROWDPREF_", "ARGILLA_", "PREFECT_", "HF_", "OPENAI_"))}
    env.update(settings.as_environment())
    env["COLUMNS"] = "200"
    shown = subprocess.run([sys.executable, "-m", "crowdpref.cli", "status"], env=env, cwd=REPO, capture_output=True,
                           text=True, timeout=120)
    assert f"Public URL:  {settings.public_url}" in shown.stdout, shown.stdout + shown.stderr
    assert f"Prolific webhooks: {settings.public_url}/hooks/prolific" in shown.stdout
    assert "TLS (internal): certificate expires 20" in shown.stdout and "(in 0 days)" in shown.stdout, shown.stdout
    for value in secrets.values():
        assert value not in shown.stdout + shown.stderr

    stopped = stack.down(settings)
    assert {"portal", "caddy"} <= set(stopped)
    for pid in pids.values():
        assert group_members(pid) == []
    assert not port_in_use("0.0.0.0", settings.https_port) and not port_in_use("0.0.0.0", settings.http_port)
    assert not [row for row in stack.status(settings) if row.pid]


@pytest.mark.parametrize("front", ["embedded"], indirect=True)
def test_outsiders_reach_only_what_participants_use(front):
    """From another address, Caddy refuses Argilla's password sign-in (bcrypt: ~0.28 s of CPU a
    try), its administration of users, workspaces and webhooks, any API key, and - Argilla being on
    this host - the portal's /hooks/argilla, without reaching Argilla; what a participant's browser
    uses still passes, the operator on this host still signs in, and Argilla's pages may be framed
    by the host's own pages only."""
    addresses = _own_addresses()
    if not addresses:
        pytest.skip("this machine has no non-loopback address to connect from")
    url = front.url
    remote = httpx.HTTPTransport(local_address=addresses[0], verify=str(front.root))
    with httpx.Client(transport=remote, timeout=30) as outside, front.client() as local:
        for method, path in (("POST", "/api/v1/token"), ("GET", "/api/v1/token"), ("POST", "/api/v1/users"),
                             ("PATCH", "/api/v1/users/u1"), ("DELETE", "/api/v1/users/u1"),
                             ("POST", "/api/v1/workspaces"), ("DELETE", "/api/v1/workspaces/w1/users/u1"),
                             ("POST", "/api/v1/webhooks"), ("PATCH", "/api/v1/webhooks/h1")):
            refused = outside.request(method, f"{url}{path}", data={"username": "owner", "password": "x"})
            assert refused.status_code == 403 and "argilla" not in refused.text.split("for the operator")[-1], \
                (method, path, refused.status_code, refused.text)
        keyed = outside.get(f"{url}/api/v1/me", headers={"X-Argilla-Api-Key": "a-participants-key"})
        assert keyed.status_code == 403
        assert outside.post(f"{url}/hooks/argilla", content=b"{}").status_code == 404
        assert local.post(f"{url}/hooks/argilla", content=b"{}").status_code == 404  # Argilla delivers on this host

        me = outside.get(f"{url}/api/v1/me", headers={"Authorization": "Bearer minted"})
        assert me.json()["who"] == "argilla"  # a participant's session
        assert outside.get(f"{url}/api/v1/users/u1").json()["who"] == "argilla"  # reads: Argilla's own policies
        assert outside.post(f"{url}/api/v1/me/responses/bulk", content=b"{}").json()["who"] == "argilla"
        assert local.post(f"{url}/api/v1/token", data={"username": "owner", "password": "x"}).json()["who"] == "argilla"
        assert local.get(f"{url}/api/v1/me", headers={"X-Argilla-Api-Key": "owner-key"}).json()["who"] == "argilla"

        page = outside.get(f"{url}/dataset/x/annotation-mode")
        assert page.headers["content-security-policy"] == caddy.ARGILLA_PAGES_CSP  # framed by the host only, no Google Fonts
        assert "content-security-policy" not in outside.get(f"{url}/healthz").headers  # the portal sets its own


@pytest.mark.parametrize("front", ["embedded"], indirect=True)
def test_from_outside_only_a_working_participant_may_change_an_answer(front):
    """Argilla lets an answer's author edit or delete it while the account exists, workspace or
    not: from outside, Caddy asks the portal first (forward_auth), which lets through only the
    verified session of a participant still working - no session, a forged or expired one, or
    one of a participant who completed gets 403 and nothing reaches Argilla. On this host (the
    operator, the flows) Caddy asks nobody."""
    import jwt

    from crowdpref.portal import argilla_session
    from crowdpref.store import Claimed

    addresses = _own_addresses()
    if not addresses:
        pytest.skip("this machine has no non-loopback address to connect from")
    secret = "k" * 43
    front.settings.secrets_dir.mkdir(parents=True, exist_ok=True)
    (front.settings.secrets_dir / argilla_session.SECRET_FILE).write_text(secret)
    store = front.portal.store
    info = store.collection("guarded", "study1", ["item-1", "item-2"], copies=1, per_participant=1, seed=0,
                            username_prefix="guarded")
    working, finished = (store.claim(info, key, "simulated") for key in ("w", "f"))
    assert isinstance(working, Claimed) and isinstance(finished, Claimed)
    store.record_progress(info.id, finished.participant.id, {finished.participant.items[0]: time.time()}, None)
    assert store.participant(info.id, finished.participant.username).status == "complete"

    def bearer(username: str, key: str = secret, lifetime_s: int = 600) -> dict[str, str]:
        return {"Authorization": f"Bearer {argilla_session.mint_token(key, username, lifetime_s=lifetime_s)[0]}"}

    url = f"{front.url}/api/v1/responses/0b9e2c1e-0000-4000-8000-000000000001"
    remote = httpx.HTTPTransport(local_address=addresses[0], verify=str(front.root))
    with httpx.Client(transport=remote, timeout=30) as outside, front.client() as local:
        body = {"values": {"quality": {"value": 1}}, "status": "draft"}
        allowed = outside.put(url, json=body, headers=bearer(working.participant.username))
        assert allowed.status_code == 200 and allowed.json()["who"] == "argilla", allowed.text
        assert allowed.json()["path"] == url.split(front.url, 1)[1]  # the request itself went on
        for method in ("PUT", "PATCH", "DELETE"):
            for headers in ({}, bearer(finished.participant.username), bearer(working.participant.username, "f" * 43),
                            bearer(working.participant.username, lifetime_s=-60), bearer("owner"),
                            {"Authorization": "Bearer " + jwt.encode({"username": working.participant.username},
                                                                      "x", algorithm="HS256")}):
                refused = outside.request(method, url, json=body, headers=headers)
                assert refused.status_code == 403 and "argilla" not in refused.text, (method, headers, refused.text)
        assert local.put(url, json=body).json()["who"] == "argilla"  # the operator on this host: Argilla decides
        assert outside.get(url, headers=bearer(finished.participant.username)).json()["who"] == "argilla"  # reads


def test_the_laptop_stack_serves_the_portal_and_argilla_on_one_plain_http_origin(tmp_path):
    """No public URL: ``up`` starts Caddy too, over plain HTTP on HOST:SITE_PORT (no certificate,
    no HSTS), in front of the portal (its own process) and Argilla (a stand-in here); the
    participants' addresses are that origin, and ``status`` prints it. Addresses that would put
    Argilla on another origin than the portal stop ``up`` with one line, before anything starts."""
    from crowdpref.errors import ConfigError
    from services import stack

    argilla, argilla_port = _argilla_upstream()
    (tmp_path / "studies").mkdir()
    settings = isolated_settings(tmp_path / "home", argilla_url=f"http://127.0.0.1:{argilla_port}",
                                 argilla_api_key="stand-in-key", portal_studies=tmp_path / "studies",
                                 prefect_api_url=f"http://127.0.0.1:{free_port()}/api")
    _stand_in_key(settings)
    site = f"http://127.0.0.1:{settings.site_port}"
    assert settings.portal_public_url == settings.argilla_participant_url == site
    try:
        apart = settings.model_copy(update={"argilla_public_url": f"http://127.0.0.1:{argilla_port}"})
        with pytest.raises(ConfigError, match="must share an origin with the portal"):
            stack.up(apart, ["portal", "caddy"], supervise=False)
        assert not [row for row in stack.status(apart) if row.pid]

        rows = {row.name: row for row in stack.up(settings, ["portal", "caddy"], supervise=False)}
        assert rows["caddy"].healthy and rows["portal"].healthy, rows
        assert rows["caddy"].url.startswith(site) and rows["portal"].url.startswith(site)
        with httpx.Client(timeout=30) as http:
            health = http.get(f"{site}/healthz")  # the portal, through Caddy
            assert health.status_code == 200 and "strict-transport-security" not in health.headers
            assert "server" not in health.headers
            item = http.get(f"{site}/dataset/d1/annotation-mode")  # Argilla, on the same origin
            assert item.status_code == 200 and item.json()["path"] == "/dataset/d1/annotation-mode"
            assert item.headers["content-security-policy"] == caddy.ARGILLA_PAGES_CSP
        from typer.testing import CliRunner

        from crowdpref.cli import app

        unset = {k: None for k in os.environ if k.startswith(("CROWDPREF_", "ARGILLA_", "PREFECT_"))}
        shown = CliRunner().invoke(app, ["status"], env={**unset, **settings.as_environment(), "COLUMNS": "200"})
        assert f"One origin:  {site}" in shown.output, shown.output
    finally:
        stopped = stack.down(settings)
        argilla.shutdown()
    assert {"portal", "caddy"} <= set(stopped)
    assert not port_in_use(settings.host, settings.site_port)
