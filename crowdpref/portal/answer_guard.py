"""Whether a change to an answer in Argilla may go ahead: what Caddy asks the portal before it
forwards one from outside (the public profile).

Argilla lets an answer's author edit or delete it for as long as the account exists
(``PUT``/``DELETE /api/v1/responses/{id}``: its ``ResponsePolicy`` asks only whether the caller
wrote it), even once the account has left its workspace at completion
(:meth:`crowdpref.collection.Collection.revoke_access`). A paid participant could so still
change a counted answer, or set it back to draft, until the export. Caddy therefore sends every
such request from outside this host to the portal first (``forward_auth``, services/caddy.py):
the portal verifies the Argilla session in its ``Authorization`` header with Argilla's
signing key and answers 204 only when the account belongs to a participant still working
(:meth:`~crowdpref.store.Store.holds_work`: active, not withdrawn); else 403, and Caddy returns
that 403 without forwarding anything. API keys never get this far: Caddy refuses any request
from outside that carries one.
"""

from __future__ import annotations

from collections.abc import Mapping

import jwt

from crowdpref.errors import CrowdprefError

GUARD_PATH = "/guard/answer-change"
"""The portal's route Caddy's ``forward_auth`` calls (never routed to the portal from outside:
Caddy sends only ``/s/*``, ``/hooks/*`` and ``/healthz`` there)."""


class AnswerGuard:
    """Mixin of :class:`crowdpref.portal.service.Portal` (its ``store`` and, from
    :class:`~crowdpref.portal.session.Sessions`, ``signing_key``)."""

    def answer_change_allowed(self, headers: Mapping[str, str]) -> int:
        """204 when the request's Argilla session (``Authorization: Bearer <jwt>``, verified
        with Argilla's signing key, not expired) belongs to a participant still working; 403
        otherwise (no session, a forged or expired one, someone who completed, was released or
        withdrew, an account that is not a participant's); 503 when the key cannot be read."""
        auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return 403
        try:
            secret = self.signing_key()  # type: ignore[attr-defined]
        except CrowdprefError:
            return 503
        try:
            claims = jwt.decode(token.strip(), secret, algorithms=["HS256"])
        except jwt.InvalidTokenError:
            return 403
        username = claims.get("username")
        if not isinstance(username, str) or not username:
            return 403
        return 204 if self.store.holds_work(username) else 403  # type: ignore[attr-defined]
