"""Caddy in front of the stack: the portal and Argilla on one origin (``settings.site_url``).

In the public profile that origin is the host name of ``settings.public_url``, over HTTPS. On
the laptop stack (no public URL) it is ``http://HOST:SITE_PORT``: a plain-HTTP site bound to
HOST only (``auto_https off``: no ACME, no certificate, no redirect, no HSTS), with the same
routes. One origin is what lets the portal hand the browser the Argilla session it minted
(crowdpref/portal/argilla_session.py): a portal page writes where Argilla's frontend keeps its
session.

Debian's ``caddy`` binary runs in the foreground as a service of the stack (``caddy run --config
<state>/caddy/Caddyfile --adapter caddyfile``), never the packaged ``caddy.service``: its
Caddyfile is written from the settings at every start, and its certificates, ACME account and
internal CA live in ``<state>/caddy/data`` (``XDG_DATA_HOME``/``XDG_CONFIG_HOME``/``HOME`` point
inside ``<state>/caddy``). Its admin API is off, so it opens no port but the two below and never
meets the packaged service's admin port (2019).

Routes on ``https_port`` (``http_port`` redirects to HTTPS and answers ACME's HTTP challenge),
or on the laptop stack on ``site_port``:

- ``/s/*``, ``/hooks/*``, ``/healthz`` -> the portal on ``host:portal_port``; request bodies up
  to ``PORTAL_MAX_BODY`` (64 KiB, the portal's own limit), ``/hooks/argilla`` up to
  ``ARGILLA_HOOK_MAX_BODY`` (1 MiB, its events carry the record);
- everything else -> Argilla (``settings.argilla_api_url``); bodies up to ``ARGILLA_MAX_BODY``
  (16 MiB: a bulk call of Argilla's holds at most 500 records or 100 responses);
- from a client not on this host (``THIS_HOST``), 403 before anything is forwarded for Argilla's
  password sign-in (``OWNER_ONLY_PATHS``), its administration (``ADMIN_PATHS``, other than GET)
  and any request with an ``X-Argilla-Api-Key``; with the embedded Argilla, ``/hooks/argilla``
  answers 404 (Argilla delivers to the portal on this host), and a change to an answer
  (``ANSWER_CHANGES``: Argilla lets an answer's author edit or delete it for as long as the
  account exists) goes ahead only when the portal says the session's participant is still
  working (``forward_auth`` to :data:`crowdpref.portal.answer_guard.GUARD_PATH`; 403 otherwise,
  nothing forwarded). Argilla's pages may be framed by the host's own pages only
  (``FRAME_ANCESTORS``), and take style sheets and fonts from this origin only
  (``ARGILLA_PAGES_CSP``): the Google Fonts that Argilla's bundled CSS imports are not fetched, so
  a participant's address does not go to Google (the pages use system fonts). On the laptop stack (HOST 127.0.0.1 by default) every client is on this
  host, so these refusals apply only where HOST is an address others reach.

The answers of the portal and Argilla, and Caddy's 413s, carry ``Strict-Transport-Security``
(one year; the public profile only) and no ``Server`` header (Caddy's own 502, when an upstream is down, may lack them). The
certificate is ACME's (``public_tls: acme``, contact ``acme_email``) or Caddy's own CA
(``public_tls: internal``: tests, private networks).

The access log (``<state>/logs/caddy-access.log``, JSON, rolled at 50 MiB) keeps method, path,
status and timings, and drops what identifies or signs in a person: the query string of every
URI (``auth=``, ``PROLIFIC_PID``, ``STUDY_ID``, ``SESSION_ID``, ``invite=``), the request's
Cookie, Authorization and Referer headers (Argilla's pages send their own URL, the sign-in query
included, as Referer) and every response header (``Location`` carries the sign-in URL,
``Set-Cookie`` the portal's cookie). The client address stays (who to block).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import socket
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from crowdpref.errors import ConfigError, ServiceError
from crowdpref.portal.answer_guard import GUARD_PATH
from crowdpref.settings import Settings
from services.process import (
    ProcessManager,
    RunningService,
    ServiceSpec,
    http_ok,
    port_in_use,
)

NAME = "caddy"
PORTAL_MAX_BODY = "64KiB"
ARGILLA_HOOK_MAX_BODY = "1MiB"
ARGILLA_MAX_BODY = "16MiB"
HSTS = "max-age=31536000"
PORTAL_PATHS = ("/s/*", "/hooks/*", "/healthz")
THIS_HOST = ("127.0.0.0/8", "::1")  # Caddy's peer on the same machine: the operator, an SSH tunnel
# Argilla's routes no participant needs and an outsider must not reach: the password login (bcrypt,
# ~0.28 s of CPU a try; participants get minted sessions) and the administration of users,
# workspaces and webhooks (their GETs stay: Argilla's own policies answer them)
OWNER_ONLY_PATHS = ("/api/v1/token", "/api/v1/token/*")
ADMIN_PATHS = ("/api/v1/users", "/api/v1/users/*", "/api/v1/workspaces", "/api/v1/workspaces/*",
               "/api/v1/webhooks", "/api/v1/webhooks/*")
# Changes to an answer in Argilla (its author may make them as long as the account exists, workspace
# or not): from outside, Caddy asks the portal first (crowdpref.portal.answer_guard)
ANSWER_CHANGES = ("/api/v1/responses/*",)
ANSWER_CHANGE_METHODS = ("PUT", "PATCH", "DELETE")
# Argilla's pages may be framed by the host's own pages only (the portal's work frame), and load
# style sheets and fonts from this origin only: Argilla's bundled CSS imports two Google Fonts, and a
# participant's browser would send Google their address for them (they fall back to system fonts)
FRAME_ANCESTORS = "frame-ancestors 'self'"
ARGILLA_PAGES_CSP = f"{FRAME_ANCESTORS}; style-src 'self' 'unsafe-inline'; font-src 'self' data:"
_HOST = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")
# what a log line may not keep (both Caddy's logs: the access log and its own, which records
# the request of every proxy error): queries, credentials, the Referer, every response header
LOG_FILTERS = (
    'request>uri regexp \\?.*$ ""',
    "request>headers>Cookie delete",
    "request>headers>Authorization delete",
    "request>headers>Referer delete",
    "resp_headers delete",
)
_EMAIL = re.compile(r"^[^\s@{}\"#]+@[^\s@{}\"#]+$")


def folder(settings: Settings) -> Path:
    """Caddy's home in the state folder (Caddyfile, data = certificates and CA, config)."""
    return settings.state_dir / "caddy"


def data_dir(settings: Settings) -> Path:
    """Where Caddy keeps certificates, its ACME account and its internal CA."""
    return folder(settings) / "data"


def caddyfile_path(settings: Settings) -> Path:
    return folder(settings) / "Caddyfile"


def access_log_path(settings: Settings) -> Path:
    return settings.logs_dir / "caddy-access.log"


def hostname(settings: Settings) -> str:
    """The public host name (``public_url`` without scheme and port); a one-line error when the
    profile is off or the name is not a plain DNS name Caddy can get a certificate for."""
    if settings.public_url is None:
        raise ConfigError("public_url (CROWDPREF_PUBLIC_URL) is not set: a host name is what the public profile serves (the laptop stack serves http://HOST:SITE_PORT)")
    host = (urlsplit(settings.public_url).hostname or "").lower()
    if not _HOST.match(host):
        raise ConfigError(f"public_url (CROWDPREF_PUBLIC_URL): '{host}' is not a DNS host name: use one such as "
                          "https://study.example.org")
    return host


DEBIAN_BINARIES = ("/usr/bin/caddy",)  # where Debian's package puts it (a PATH without /usr/bin still finds it)


def binary() -> str:
    found = shutil.which("caddy") or next((path for path in DEBIAN_BINARIES if Path(path).exists()), None)
    if found is None:
        raise ServiceError("caddy not found: the stack serves the portal and Argilla on one origin through Debian's "
                           "caddy package: run `make setup` (as root) or `apt-get install caddy`")
    return found


def _quoted(path: Path) -> str:
    text = str(path)
    if any(c in text for c in '"\n\\{}'):
        raise ConfigError(f"{text}: the state folder's path cannot go into a Caddyfile (it holds a quote, brace, "
                          "backslash or newline): set CROWDPREF_HOME to a plainer path")
    return f'"{text}"'


def listen_port(settings: Settings) -> tuple[int, str]:
    """The port Caddy serves the stack's origin on, and the setting that moves it: HTTPS in the
    public profile, the laptop stack's plain-HTTP ``site_port`` otherwise."""
    return (settings.https_port, "CROWDPREF_HTTPS_PORT") if settings.public else (settings.site_port, "CROWDPREF_SITE_PORT")


def caddyfile(settings: Settings) -> str:
    """The Caddyfile for ``settings`` (see the module docstring for what it does)."""
    upstream_portal = f"{_connect_host(settings)}:{settings.portal_port}"
    argilla = urlsplit(settings.argilla_api_url)
    upstream_argilla = settings.argilla_api_url if argilla.scheme == "https" else argilla.netloc
    if not settings.public:  # the laptop stack: plain HTTP on HOST, any Host header (127.0.0.1, localhost)
        site, email, tls, hsts = f"http://:{settings.site_port}", "", _bind(settings), ""
        ports = "\tauto_https off\n"
    elif settings.public_tls == "acme":
        if not settings.acme_email:
            raise ConfigError("acme_email (CROWDPREF_ACME_EMAIL) is not set: the ACME CA needs a contact address "
                              "in the public profile (or set public_tls: internal for a private network)")
        if not _EMAIL.match(settings.acme_email):
            raise ConfigError(f"acme_email (CROWDPREF_ACME_EMAIL): '{settings.acme_email}' is not an e-mail address")
        email, tls = f"\temail {settings.acme_email}\n", ""
    else:
        email, tls = "", "\ttls internal\n"
    if settings.public:
        site, hsts = hostname(settings), f'\t\tStrict-Transport-Security "{HSTS}"\n'
        ports = f"\thttp_port {settings.http_port}\n\thttps_port {settings.https_port}\n"
    portal_paths = " ".join(PORTAL_PATHS)
    filters = "\n".join("\t" * 4 + line for line in LOG_FILTERS)
    # both logs (Caddy's own, the access log): JSON without query strings, cookies, credentials
    log_format = f"\t\tformat filter {{\n\t\t\twrap json\n\t\t\tfields {{\n{filters}\n\t\t\t}}\n\t\t}}\n"
    outside = f"\t\tnot remote_ip {' '.join(THIS_HOST)}\n"
    refusals = (f"\t@owner_only {{\n\t\tpath {' '.join(OWNER_ONLY_PATHS)}\n{outside}\t}}\n"
                f"\t@administration {{\n\t\tpath {' '.join(ADMIN_PATHS)}\n\t\tnot method GET HEAD\n{outside}\t}}\n"
                f"\t@api_key {{\n\t\theader X-Argilla-Api-Key *\n{outside}\t}}\n")
    refuse = ("\t\trespond @owner_only \"Argilla's sign-in is for the operator, on this host\" 403\n"
              "\t\trespond @administration \"Argilla's administration is for the operator, on this host\" 403\n"
              "\t\trespond @api_key \"Argilla's API keys are for the operator, on this host\" 403\n")
    if settings.embedded_argilla:  # Argilla delivers its events to the portal on this host, never through Caddy
        refuse += "\t\trespond /hooks/argilla 404\n"
    # the portal holds Argilla's signing key (it mints the sessions of this one origin): it can tell
    # whose session an answer change carries
    refusals += (f"\t@answer_change {{\n\t\tpath {' '.join(ANSWER_CHANGES)}\n"
                 f"\t\tmethod {' '.join(ANSWER_CHANGE_METHODS)}\n{outside}\t}}\n")
    refuse += f"\t\tforward_auth @answer_change {upstream_portal} {{\n\t\t\turi {GUARD_PATH}\n\t\t}}\n"
    too_big = "\n".join(_too_big(name, limit) for name, limit in (
        ("argilla_hook", ARGILLA_HOOK_MAX_BODY), ("portal_forms", PORTAL_MAX_BODY), ("", ARGILLA_MAX_BODY)))
    return f"""# Written by crowdpref (services/caddy.py) from the settings at every `crowdpref up`: edits are lost.
{{
\tadmin off
\tskip_install_trust
{ports}{email}\tlog default {{
\t\toutput stderr
{log_format}\t}}
\tstorage file_system {{
\t\troot {_quoted(data_dir(settings))}
\t}}
}}

{site} {{
{tls}\theader {{
{hsts}\t\t-Server
\t}}
\theader @argilla_pages Content-Security-Policy "{ARGILLA_PAGES_CSP}"
\tlog {{
\t\toutput file {_quoted(access_log_path(settings))} {{
\t\t\troll_size 50MiB
\t\t\troll_keep 10
\t\t}}
{log_format}\t}}
\t@portal path {portal_paths}
\t@argilla_hook path /hooks/argilla
\t@argilla_pages not path {portal_paths}
{refusals}\t@portal_forms {{
\t\tpath {portal_paths}
\t\tnot path /hooks/argilla
\t}}
\troute {{
{refuse}{too_big}
\t\trequest_body @argilla_hook {{
\t\t\tmax_size {ARGILLA_HOOK_MAX_BODY}
\t\t}}
\t\trequest_body @portal_forms {{
\t\t\tmax_size {PORTAL_MAX_BODY}
\t\t}}
\t\treverse_proxy @portal {upstream_portal}
\t\trequest_body {{
\t\t\tmax_size {ARGILLA_MAX_BODY}
\t\t}}
\t\treverse_proxy {upstream_argilla}
\t}}
}}
"""


def _bind(settings: Settings) -> str:
    """The laptop site's ``bind`` line: HOST only (unset or every address: no line)."""
    return "" if settings.host in ("", "0.0.0.0", "::") else f"\tbind {settings.host}\n"


def _bytes(size: str) -> int:
    return int(size[:-3]) * {"KiB": 1024, "MiB": 1024 * 1024}[size[-3:]]


def over_regexp(limit: int) -> str:
    """A regular expression that matches exactly the decimal numbers above ``limit`` (leading
    zeros allowed): Caddy 2.6's header matcher compares no numbers, and its CEL expression
    matcher fails the whole request when a header is missing."""
    digits = str(limit)
    # no {n} counts: the Caddyfile would read braces as placeholders
    alternatives = ["[1-9]" + r"\d" * len(digits) + "+"]  # more digits
    for i, digit in enumerate(digits):  # same length: equal up to i, then greater
        if digit != "9":
            rest = len(digits) - i - 1
            higher = str(int(digit) + 1) if digit == "8" else f"[{int(digit) + 1}-9]"
            alternatives.append(digits[:i] + higher + r"\d" * rest)
    return "^0*(" + "|".join(alternatives) + ")$"


def _too_big(matcher: str, limit: str) -> str:
    """413 at once for a declared Content-Length over ``limit`` (a chunked body over it is cut
    off by ``request_body``: Caddy 2.6 then answers 413 or 502). Caddy's ``handle_errors`` is not used
    for this: with it, Caddy 2.6 no longer logs proxy errors."""
    paths = {"portal_forms": f"\t\t\tpath {' '.join(PORTAL_PATHS)}\n\t\t\tnot path /hooks/argilla\n",
             "argilla_hook": "\t\t\tpath /hooks/argilla\n"}.get(matcher, "")
    name = f"too_big_{matcher or 'argilla'}"
    return (f"\t\t@{name} {{\n{paths}\t\t\theader_regexp Content-Length {over_regexp(_bytes(limit))}\n\t\t}}\n"
            f'\t\trespond @{name} "request body over {limit}" 413 {{\n\t\t\tclose\n\t\t}}')


def write_caddyfile(settings: Settings) -> Path:
    """Write the Caddyfile into ``<state>/caddy`` (and make the folders Caddy writes to)."""
    path = caddyfile_path(settings)
    for needed in (folder(settings), data_dir(settings), folder(settings) / "config", settings.logs_dir):
        needed.mkdir(parents=True, exist_ok=True)
    text = caddyfile(settings)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def env(settings: Settings, config: str = "") -> dict[str, str]:
    """Caddy's environment: nothing of crowdpref's settings (no secret), its homes in the state
    folder, and the Caddyfile's hash (``up`` restarts a running Caddy whose Caddyfile changed)."""
    home = folder(settings)
    return {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "CADDYFILE_SHA256": hashlib.sha256(config.encode()).hexdigest(),
    }


def healthy(settings: Settings) -> bool:
    """Caddy answers TLS on ``https_port`` with a certificate for the host name: the portal's
    /healthz through it comes back 200 (an ACME certificate not issued yet: unhealthy). On the
    laptop stack: the portal's /healthz through the plain-HTTP site comes back 200."""
    if not settings.public:
        return http_ok(f"http://{_connect_host(settings)}:{settings.site_port}/healthz")
    try:
        with _tls_connection(settings, verify=False) as conn:
            request = (f"GET /healthz HTTP/1.1\r\nHost: {hostname(settings)}\r\nConnection: close\r\n\r\n").encode()
            conn.sendall(request)
            status = conn.recv(64).split(b"\r\n", 1)[0]
        return status.startswith(b"HTTP/1.1 200")
    except (OSError, ssl.SSLError, ConfigError):
        return False


def started(settings: Settings) -> bool:
    """Caddy listens on ``https_port`` (its start-up check: the certificate may still be on its way)."""
    try:
        with socket.create_connection((_connect_host(settings), listen_port(settings)[0]), timeout=2):
            return True
    except OSError:
        return False


def _connect_host(settings: Settings) -> str:
    return "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host


def _tls_connection(settings: Settings, verify: bool) -> ssl.SSLSocket:
    context = ssl.create_default_context()
    if verify:
        root = internal_root(settings)
        if settings.public_tls == "internal" and root.exists():
            context.load_verify_locations(cafile=str(root))
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    raw = socket.create_connection((_connect_host(settings), settings.https_port), timeout=3)
    try:
        return context.wrap_socket(raw, server_hostname=hostname(settings))
    except BaseException:
        raw.close()
        raise


def internal_root(settings: Settings) -> Path:
    """The root certificate of Caddy's internal CA (``public_tls: internal``): trust it to
    verify the served certificate (tests, browsers on a private network)."""
    return data_dir(settings) / "pki" / "authorities" / "local" / "root.crt"


@dataclass(frozen=True)
class Certificate:
    """What ``crowdpref status`` says about the served certificate."""

    expires: float | None  # epoch seconds; None when it could not be read
    problem: str | None = None  # why not (not served yet, not trusted)

    def describe(self, now: float | None = None) -> str:
        if self.expires is None:
            return f"certificate: {self.problem}"
        days = (self.expires - (now or time.time())) / 86400
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.expires))
        return f"certificate expires {stamp} (in {days:.0f} days)"


def certificate(settings: Settings) -> Certificate:
    """The certificate Caddy serves for the host name, read over TLS and verified (against the
    system's CAs, plus Caddy's internal root with ``public_tls: internal``)."""
    try:
        with _tls_connection(settings, verify=True) as conn:
            cert = conn.getpeercert()
    except ssl.SSLCertVerificationError as exc:
        return Certificate(None, f"not trusted ({exc.verify_message})")
    except (OSError, ssl.SSLError) as exc:
        return Certificate(None, f"none served on port {settings.https_port} ({exc.__class__.__name__})")
    if not cert or "notAfter" not in cert:
        return Certificate(None, "unreadable")
    return Certificate(float(ssl.cert_time_to_seconds(str(cert["notAfter"]))))


def spec(settings: Settings) -> ServiceSpec:
    """Caddy as a service of the stack; writes its Caddyfile first."""
    config = write_caddyfile(settings)
    port, port_setting = listen_port(settings)
    return ServiceSpec(
        name=NAME,
        argv=[binary(), "run", "--config", str(config), "--adapter", "caddyfile"],
        env=env(settings, config.read_text(encoding="utf-8")),
        # plain HTTP or Caddy's own CA (signs at once): wait until the portal answers through it;
        # an ACME certificate may take minutes (or fail: `crowdpref status` says so), so only the port
        health=(lambda: started(settings)) if settings.public and settings.public_tls == "acme"
        else (lambda: healthy(settings)),
        port=port,
        port_setting=port_setting,
        cwd=folder(settings),
        start_timeout_s=30,
        restart_on_change=("CADDYFILE_", "XDG_"),
    )


def start(settings: Settings, manager: ProcessManager) -> RunningService:
    """Start Caddy unless it runs (again if its Caddyfile changed: ``restarted``); first, one
    line when a port it listens on (on every address) is taken by another program."""
    service = spec(settings)
    if manager.running(NAME) is None and settings.public:  # (the laptop's site: the manager checks HOST:SITE_PORT)
        for port, setting in ((settings.https_port, "CROWDPREF_HTTPS_PORT"), (settings.http_port, "CROWDPREF_HTTP_PORT")):
            if port_in_use("0.0.0.0", port):
                raise ServiceError(f"caddy: port {port} is in use by a program crowdpref did not start (Debian's "
                                   f"caddy.service? `systemctl disable --now caddy`): stop it or set {setting} "
                                   "to a free port")
    return manager.start(service, settings.host)
