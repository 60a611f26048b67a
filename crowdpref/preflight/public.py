"""Pre-flight checks of the public address (the public profile): the host name resolves to this
machine, the certificate served for it is valid for the name with days left, plain HTTP
redirects to HTTPS, and only participant routes answer from outside - the routes Caddy closes
(services/caddy.py: Argilla's password sign-in, its administration, its API keys, the portal's
``/hooks/argilla`` with the embedded Argilla) are refused.

Each check takes the address to talk to (a host, a port, a base URL), so a test can point it
at a small local server that breaks the rule on purpose."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from crowdpref.preflight.report import Check, fail, ok, warn

CERT_WARN_DAYS = 14.0  # a certificate with fewer days left is a WARN (ACME renews at 30 days left)
CADDY_FIX = "run `crowdpref up` (Caddy is rewritten and restarted from the settings)"


def local_addresses() -> set[str]:
    """This machine's addresses: its host name's, the source address of its default route, and
    loopback. (No packet is sent: a UDP socket's connect only picks a route.)"""
    found = {"127.0.0.1", "::1"}
    try:
        found |= {str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None)}
    except OSError:
        pass
    for family, target in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                probe.connect((target, 9))
                found.add(str(probe.getsockname()[0]))
        except OSError:
            continue
    return found


def _loopback(address: str) -> bool:
    return address.startswith("127.") or address == "::1"


def resolve(host: str) -> list[str]:
    return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)})


def dns(host: str, mine: set[str], resolver: Callable[[str], list[str]] = resolve) -> Check:
    """``host`` resolves, and to an address of this machine. Resolving elsewhere is a WARN, not
    a FAIL: behind NAT or a load balancer the public address is not the machine's own."""
    name = "DNS resolves to this host"
    try:
        addresses = resolver(host)
    except OSError as exc:
        return fail(name, f"{host} does not resolve ({exc.__class__.__name__})",
                    f"create an A (and AAAA) record for {host} pointing at this server's public address; wait for "
                    "it to propagate")
    if not addresses:
        return fail(name, f"{host} resolves to no address", f"create an A record for {host} pointing at this server")
    here = [a for a in addresses if a in mine]
    if not here:
        return warn(name, f"{host} resolves to {', '.join(addresses)}, none of them an address of this machine "
                    f"({', '.join(sorted(mine))})",
                    "point the A record at this server, unless a NAT or load balancer forwards ports 80 and 443 to it")
    return ok(name, f"{host} resolves to {', '.join(addresses)}" +
              (" (loopback: only this machine reaches it)" if all(_loopback(a) for a in here) else ""))


@dataclass(frozen=True)
class Served:
    """What a TLS server presented for a name: verified or why not, and its expiry."""

    expires: float | None
    problem: str | None = None
    code: int | None = None  # OpenSSL's verify code: 10 expired, 62 host name mismatch


def served_certificate(host: str, port: int, connect_to: str, context: ssl.SSLContext,
                       timeout_s: float = 5.0) -> Served:
    """Connect to ``connect_to:port`` asking for ``host`` (SNI), verify the certificate with
    ``context`` and read its expiry (also when it does not verify: read unverified then)."""
    try:
        with socket.create_connection((connect_to, port), timeout=timeout_s) as raw, \
                context.wrap_socket(raw, server_hostname=host) as conn:
            cert = conn.getpeercert()
            return Served(float(ssl.cert_time_to_seconds(str(cert["notAfter"]))) if cert else None)
    except ssl.SSLCertVerificationError as exc:
        return Served(_unverified_expiry(host, port, connect_to, timeout_s), str(exc.verify_message),
                      exc.verify_code)
    except (OSError, ssl.SSLError) as exc:
        return Served(None, f"no TLS on {connect_to}:{port} ({exc.__class__.__name__})")


def _unverified_expiry(host: str, port: int, connect_to: str, timeout_s: float) -> float | None:
    from cryptography import x509

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((connect_to, port), timeout=timeout_s) as raw, \
                context.wrap_socket(raw, server_hostname=host) as conn:
            der = conn.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError):
        return None
    if not der:
        return None
    return x509.load_der_x509_certificate(der).not_valid_after_utc.timestamp()


def certificate(host: str, served: Served, now: float | None = None, tls: str = "acme") -> Check:
    """The certificate is valid for ``host`` (trusted, the name matches, not expired) and has
    more than :data:`CERT_WARN_DAYS` days left."""
    name = "certificate valid for the name"
    now = time.time() if now is None else now
    days = None if served.expires is None else (served.expires - now) / 86400
    left = f"; expires {time.strftime('%Y-%m-%d', time.gmtime(served.expires))} ({days:.0f} days)" \
        if served.expires is not None and days is not None else ""
    renew = ("Caddy renews it by itself when ports 80 and 443 reach it and DNS points here: check "
             "<state>/logs/caddy.log, then `crowdpref up`") if tls == "acme" else \
        "restart Caddy with `crowdpref up` (its internal CA issues a new one)"
    if served.problem is not None:
        if served.code == 10 or (days is not None and days < 0):
            return fail(name, f"expired{left}", renew)
        if served.code == 62:
            return fail(name, f"not valid for {host} ({served.problem}){left}",
                        f"serve a certificate for {host}: set CROWDPREF_PUBLIC_URL to the name DNS gives this "
                        f"server, then {CADDY_FIX}")
        return fail(name, f"not valid: {served.problem}{left}",
                    f"{CADDY_FIX}; with public_tls: internal, clients must trust <state>/caddy/data/pki/authorities/"
                    "local/root.crt" if tls == "internal" else f"{CADDY_FIX}; read <state>/logs/caddy.log")
    if days is None:
        return fail(name, "no expiry could be read", CADDY_FIX)
    if days < CERT_WARN_DAYS:
        return warn(name, f"valid for {host}, but only {days:.1f} days left{left}", renew)
    return ok(name, f"valid for {host}{left}")


def https_redirect(http_url: str, host: str, client: Any) -> Check:
    """A plain-HTTP request is redirected (301/302/307/308) to ``https://host``."""
    name = "HTTP redirects to HTTPS"
    try:
        response = client.get(http_url, headers={"Host": host}, follow_redirects=False)
    except Exception as exc:  # noqa: BLE001 - any failure to connect is the finding
        return fail(name, f"{http_url} does not answer ({exc.__class__.__name__})",
                    f"open port 80 in the firewall and {CADDY_FIX} (it serves the redirects and ACME challenges)")
    location = response.headers.get("location", "")
    if response.status_code in (301, 302, 307, 308) and location.startswith(f"https://{host}"):
        return ok(name, f"{http_url} -> {response.status_code} {location}")
    return fail(name, f"{http_url} answered {response.status_code}" + (f" to {location}" if location else "") +
                ", not a redirect to HTTPS", f"{CADDY_FIX}; make sure nothing else listens on port 80")


@dataclass(frozen=True)
class Probe:
    """A request an outsider must be refused (HTTP 403 or 404)."""

    method: str
    path: str
    what: str
    headers: tuple[tuple[str, str], ...] = ()


def closed_probes(embedded_argilla: bool) -> list[Probe]:
    """What services/caddy.py closes to outsiders, one request each."""
    probes = [
        Probe("POST", "/api/v1/token", "Argilla's password sign-in"),
        Probe("POST", "/api/v1/users", "Argilla's user administration"),
        Probe("POST", "/api/v1/workspaces", "Argilla's workspace administration"),
        Probe("POST", "/api/v1/webhooks", "Argilla's webhook administration"),
        Probe("GET", "/api/v1/me", "a request with an Argilla API key", (("X-Argilla-Api-Key", "preflight-probe"),)),
    ]
    if embedded_argilla:
        probes.append(Probe("POST", "/hooks/argilla", "the portal's Argilla webhook (delivered on this host only)"))
    return probes


def closed_routes(base_url: str, host: str, probes: Sequence[Probe], client: Any,
                  extensions: dict[str, Any] | None = None) -> Check:
    """Every probe is refused (403 or 404) when sent from outside to ``base_url`` (with the
    ``Host`` of the public name); the portal's health check answers (a participant route)."""
    name = "only participant routes answer from outside"
    open_: list[str] = []
    for probe in probes:
        try:
            response = client.request(probe.method, base_url + probe.path, headers={"Host": host, **dict(probe.headers)},
                                      content=b"{}", extensions=extensions or {})
        except Exception as exc:  # noqa: BLE001
            return fail(name, f"{base_url} does not answer ({exc.__class__.__name__})",
                        f"open port 443 in the firewall and {CADDY_FIX}")
        if response.status_code not in (403, 404):
            open_.append(f"{probe.method} {probe.path} ({probe.what}) answered {response.status_code}")
    if open_:
        return fail(name, "open to outsiders: " + "; ".join(open_),
                    f"{CADDY_FIX} (its Caddyfile refuses these from outside); make sure no other proxy or open port "
                    "serves Argilla or the portal")
    return ok(name, f"{len(probes)} closed routes refused from outside "
              f"({', '.join(sorted({p.path for p in probes}))})")


def outside_address(resolved: Iterable[str], mine: set[str]) -> str | None:
    """An address of this machine that Caddy counts as outside (not loopback), to send the
    probes to: one the name resolves to, else any non-loopback one of this machine."""
    resolved = list(resolved)
    for address in [*(a for a in resolved if a in mine), *sorted(mine)]:
        if not _loopback(address) and ":" not in address:
            return address
    return None
