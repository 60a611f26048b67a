"""An Argilla session the portal hands a participant without a password login.

Argilla's own sign-in (``POST /api/v1/token``) checks a bcrypt hash of cost 12: about 0.25 s of
CPU per arrival on argilla-server, which a launch burst cannot afford
(docs/explanation/portal.md, "Signing in without a password"). The portal holds the key Argilla
signs its session tokens with (``ARGILLA_AUTH_SECRET_KEY``, kept in
``<state>/secrets/argilla-auth-secret``), so it can issue the very token that login would have
returned: an HS256 JWT (argilla-server 2.8, ``security/authentication/jwt.py``) whose claims
are the ``UserInfo`` Argilla's login puts in it (``username``, ``name``, ``role``) and ``exp``.
Argilla's bearer check decodes it with the shared key and looks the user up by ``username``; no
password is involved.

The token reaches the browser in the body of the portal's answer to *Start* (a POST), never in a
URL, so no access log, browser history or Referer carries it. A page served from Argilla's own
origin (the public profile serves both at one host name) writes it where Argilla 2.8's Nuxt
frontend keeps its session (``@nuxtjs/auth-next``, ``localStorage``: :data:`TOKEN_KEY` =
``Bearer <jwt>``, :data:`EXPIRATION_KEY` = its ``exp`` in milliseconds) and moves on into
Argilla. Those keys are an internal detail of Argilla's frontend; the real-browser test
``tests/browser/test_token_sign_in.py`` fails when an upgrade changes them. Where the portal and
Argilla are on different origins (the laptop stack: two ports), a portal page cannot write into
Argilla's storage: there the portal's work frame opens Argilla's own hand-over page
(:data:`HANDOVER_PATH`, served by services/argilla/launch.py) with the minted session in the URL's
fragment, which never leaves the browser. An Argilla crowdpref did not start has no such page:
for it the portal keeps the one-hop ``/sign-in?auth=`` login.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import jwt

from crowdpref.errors import CrowdprefError

SECRET_FILE = "argilla-auth-secret"
"""Under ``settings.secrets_dir``: the file services/argilla/service.py ``auth_secret`` writes
and gives argilla-server as ``ARGILLA_AUTH_SECRET_KEY``."""
TOKEN_LIFETIME_S = 24 * 3600
"""How long a minted token lasts: Argilla's own default (``ARGILLA_AUTH_TOKEN_EXPIRATION``), so
a participant keeps the session a password login would have given them."""
OWNER_USERNAME = "crowdpref-owner"
"""The embedded Argilla's owner account (services/argilla/service.py makes it)."""
OWNER_SESSION_S = 300
"""How long each owner session :class:`OwnerSessions` mints lasts (one is minted per request)."""
TOKEN_KEY = "auth._token.local"
EXPIRATION_KEY = "auth._token_expiration.local"


def load_secret(secrets_dir: Path) -> str:
    """Argilla's token-signing key from ``secrets_dir``. :class:`CrowdprefError` (one line, the
    file named, never its content) when it is missing or empty."""
    path = Path(secrets_dir) / SECRET_FILE
    try:
        secret = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise CrowdprefError(f"Argilla's token key {path} cannot be read ({exc.__class__.__name__}): start Argilla "
                             "with `crowdpref up`, which creates it") from None
    if not secret:
        raise CrowdprefError(f"Argilla's token key {path} is empty: delete it and restart the stack "
                             "(`crowdpref down`, `crowdpref up`)")
    return secret


def mint_token(secret: str, username: str, *, role: str = "annotator", now: float | None = None,
               lifetime_s: int = TOKEN_LIFETIME_S) -> tuple[str, int]:
    """An Argilla session token for ``username`` signed with ``secret`` (HS256, as Argilla's
    ``JWT.create``), and its expiry (Unix seconds). PyJWT writes the header ``{"alg":"HS256",
    "typ":"JWT"}`` and the claims in this order, compactly."""
    expires = int((time.time() if now is None else now) + lifetime_s)
    claims = {"username": username, "name": username, "role": role, "exp": expires}
    return jwt.encode(claims, secret, algorithm="HS256"), expires


class OwnerSessions(httpx.Auth):
    """Signs each request to Argilla in as its owner with a session minted for it (HS256, as
    :func:`mint_token`, lasting :data:`OWNER_SESSION_S`), in place of the owner's API key: what
    the portal uses, so that it needs Argilla's signing key only and never reads the owner's
    permanent key (``<state>/secrets/argilla-owner.json``). Holding the signing key is holding
    every account of this Argilla, the owner's included; unlike the API key, a new signing key
    (delete the file, restart the stack) ends every session signed with the old one. An
    ``X-Argilla-Api-Key`` header (the Argilla SDK sets one) is removed, so Argilla reads the
    session only."""

    def __init__(self, secret: str, username: str = OWNER_USERNAME, lifetime_s: int = OWNER_SESSION_S):
        self._secret, self.username, self.lifetime_s = secret, username, lifetime_s

    def __repr__(self) -> str:  # never the key
        return f"OwnerSessions({self.username!r})"

    def auth_flow(self, request: httpx.Request):  # type: ignore[no-untyped-def]
        request.headers.pop("X-Argilla-Api-Key", None)
        token, _ = mint_token(self._secret, self.username, role="owner", lifetime_s=self.lifetime_s)
        request.headers["Authorization"] = f"Bearer {token}"
        yield request


HANDOVER_PATH = "/crowdpref/session"
"""The session hand-over page that services/argilla/launch.py adds to every argilla-server
crowdpref starts (``mount_session_handover``; a unit test holds the two files to one path and
one pair of keys)."""


def handover_url(argilla_url: str, token: str, expires: int, to: str) -> str:
    """Argilla's hand-over page with a minted session in the URL's fragment - which no server,
    proxy or access log ever receives - and the path on Argilla to open next (``to``)."""
    return f"{argilla_url.rstrip('/')}{HANDOVER_PATH}#" + urlencode({"t": token, "e": str(expires * 1000), "to": to})


def handover_token(url: str) -> str | None:
    """The session a :func:`handover_url` carries (what the hand-over page stores), or None."""
    parts = urlsplit(url)
    if parts.path != HANDOVER_PATH or not parts.fragment:
        return None
    return (parse_qs(parts.fragment).get("t") or [None])[0]


def username_of(token: str) -> str:
    """The ``username`` claim of a token (read, not verified: Argilla verifies it)."""
    return str(jwt.decode(token, options={"verify_signature": False})["username"])


def same_origin(a: str, b: str) -> bool:
    """Whether two URLs share scheme, host and port (the browser's same-origin rule; a missing
    port is the scheme's default)."""
    def origin(url: str) -> tuple[str, str, int | None]:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        return scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(scheme)

    return origin(a) == origin(b)
