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
origin writes it where Argilla 2.8's Nuxt frontend keeps its session (``@nuxtjs/auth-next``,
``localStorage``: :data:`TOKEN_KEY` = ``Bearer <jwt>``, :data:`EXPIRATION_KEY` = its ``exp`` in
milliseconds) and moves on into Argilla. Those keys are an internal detail of Argilla's frontend;
the real-browser test ``tests/browser/test_token_sign_in.py`` fails when an upgrade changes them.

So the portal and Argilla must share an origin, as every stack ``crowdpref up`` starts does: Caddy
serves both at the public URL (HTTPS) or, on the laptop stack, at ``http://HOST:SITE_PORT``
(services/caddy.py). Addresses set to two origins (``portal_url``, ``argilla_public_url``) are
refused at the portal's start and ``crowdpref up`` (:func:`check_one_origin`): a browser could
not carry the session from one to the other, and there is no other way in.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import jwt

from crowdpref.errors import ConfigError, CrowdprefError

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


def signing_key_problem(settings: Any) -> tuple[str, str] | None:
    """Why the portal could not sign participants' sessions for an Argilla crowdpref did not
    start (``argilla_url`` set), and the fix: its token-signing key is not in
    ``<state>/secrets/argilla-auth-secret`` (missing, empty or unreadable; the file named, never
    its content). None when it is there, or for the embedded Argilla, whose key ``crowdpref up``
    makes when it starts Argilla (services/argilla/service.py)."""
    if settings.embedded_argilla:
        return None
    path = Path(settings.secrets_dir) / SECRET_FILE
    try:
        problem = "is empty" if not path.read_text(encoding="utf-8").strip() else None
    except FileNotFoundError:
        problem = "is missing"
    except OSError as exc:
        problem = f"cannot be read ({exc.__class__.__name__})"
    if problem is None:
        return None
    why = (f"{path} {problem}: the portal signs participants' sessions for the Argilla of CROWDPREF_ARGILLA_URL "
           "with that Argilla's token-signing key, and without it Start refuses everyone (503)")
    return why, f"put that server's ARGILLA_AUTH_SECRET_KEY in {path} (one line, `chmod 600`)"


def check_signing_key(settings: Any) -> None:
    """:class:`ConfigError` (one line: :func:`signing_key_problem` and its fix) where the portal
    could sign no Argilla session: every participant's Start would answer 503."""
    found = signing_key_problem(settings)
    if found is not None:
        raise ConfigError(f"{found[0]}: {found[1]}")


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


def check_one_origin(settings: Any) -> None:
    """:class:`ConfigError` (one line, both addresses and their settings named) when participants
    would reach the portal and Argilla on two origins: the browser could not carry the session
    the portal mints into Argilla. Unset, both are the stack's one origin (Caddy's)."""
    portal, argilla = settings.portal_public_url, settings.argilla_participant_url
    if not same_origin(portal, argilla):
        raise ConfigError(
            f"the participant address of Argilla ({argilla}, argilla_public_url / CROWDPREF_ARGILLA_PUBLIC_URL) must "
            f"share an origin with the portal ({portal}, portal_url / CROWDPREF_PORTAL_URL): serve Argilla there "
            "through a proxy route (the portal on /s/, /hooks/, /healthz, Argilla on the rest, as the stack's Caddy "
            "does), or unset both to use the stack's own origin")


def check_participants_way_in(settings: Any) -> None:
    """Both things the portal needs to hand participants an Argilla session at Start, each a
    one-line :class:`ConfigError`: one origin with Argilla (:func:`check_one_origin`) and that
    Argilla's signing key (:func:`check_signing_key`). Checked where the portal starts
    (services/portal.py) and by ``crowdpref validate``."""
    check_one_origin(settings)
    check_signing_key(settings)
