"""The credentials roster: username -> password (+ the Argilla URL to log in at), for handing
accounts to participants. Private: one JSON file, mode 0600, in the run folder's ``private/``.
Never logged, never in artifacts, never published.

A password is generated and saved BEFORE its account is created, so a crash between the two
cannot leave an account whose password nobody knows."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from crowdpref.runfolder import write_json


class Roster:
    def __init__(self, path: Path, argilla_url: str):
        self.path = path
        self.argilla_url = argilla_url
        self._entries: dict[str, dict[str, str]] = json.loads(path.read_text()) if path.exists() else {}

    def password_for(self, username: str) -> str:
        """The account's password, generated (token_urlsafe, 20 bytes) and saved on first use."""
        entry = self._entries.get(username)
        if entry is None:
            entry = {"password": secrets.token_urlsafe(20), "argilla_url": self.argilla_url}
            self._entries[username] = entry
            write_json(self._entries, self.path, private=True)
        return entry["password"]

    def passwords(self, usernames: list[str]) -> dict[str, str]:
        """Existing passwords only (for playing accounts that exist; never generates)."""
        return {u: self._entries[u]["password"] for u in usernames if u in self._entries}

    def usernames(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, username: str) -> bool:
        return username in self._entries

    def __repr__(self) -> str:  # never show passwords, even in a debugger or a traceback
        return f"Roster({self.path}, {len(self._entries)} accounts)"
