"""The passwords of participants' Argilla accounts: derived when needed, kept nowhere.

Argilla needs a password to create an account, and one place still uses it afterwards: the
check that an account found in Argilla is the one crowdpref made
(:meth:`ArgillaOwner.ensure_annotator`). Participants never sign in with it (the portal mints
their Argilla sessions: :mod:`crowdpref.portal.argilla_session`). Neither needs it stored. An account's password is the HMAC-SHA256
of its username under a key generated once into ``<secrets>/argilla-account-key`` (0600),
shortened to 27 URL-safe characters (160 bits): the study store, its backups' database dumps and
every log hold no password, and each process that holds the key (the flows, the portal, the
``crowdpref password`` command) derives the same one.

Holding the key means being able to sign in as any participant account - as holding Argilla's
token-signing key (``argilla-auth-secret``) already does. Losing it only stops new accounts
being checked against old ones; a new key makes new passwords (accounts not yet bound are
refused as "exists with another password": delete them in Argilla or choose another
``username_prefix``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from crowdpref.errors import CrowdprefError

KEY_FILE = "argilla-account-key"
"""Under ``settings.secrets_dir``."""


class AccountPasswords:
    """``passwords(username)``: the account's password under this key."""

    def __init__(self, key: bytes):
        if len(key) < 32:
            raise ValueError("an account-password key needs at least 32 bytes")
        self._key = key

    def __call__(self, username: str) -> str:
        digest = hmac.new(self._key, b"argilla-account:" + username.encode("utf-8"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:20]).decode("ascii").rstrip("=")

    def __repr__(self) -> str:  # never the key
        return "AccountPasswords(<key>)"

    @classmethod
    def ephemeral(cls) -> AccountPasswords:
        """A key of this process only (tests, smoke checks): the passwords die with it."""
        return cls(secrets.token_bytes(32))

    @classmethod
    def from_secrets(cls, secrets_dir: Path) -> AccountPasswords:
        """The key in ``secrets_dir``, made there on first use. Two processes making it at once
        agree: it is written to a private temporary file and linked into place only if no key
        is there yet, then read back. :class:`CrowdprefError` (one line, the file named, never
        its content) when it cannot be read or is damaged."""
        path = Path(secrets_dir) / KEY_FILE
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(path.parent, 0o700)
            tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                with os.fdopen(fd, "w", encoding="ascii") as out:
                    out.write(secrets.token_hex(32))
                    out.flush()
                    os.fsync(out.fileno())
                try:
                    os.link(tmp, path)  # fails when another process made it first: theirs is the key
                except FileExistsError:
                    pass
            finally:
                tmp.unlink(missing_ok=True)
        try:
            key = bytes.fromhex(path.read_text(encoding="ascii").strip())
            return cls(key)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise CrowdprefError(f"the account-password key {path} cannot be used ({exc.__class__.__name__}): "
                                 "restore it from your backup (participants' accounts were made with it)") from None
