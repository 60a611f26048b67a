"""Ids derived from participants' usernames, salted with a per-study secret kept in the run
folder's ``private/`` - stable across reruns, but not reversible by hashing guessed usernames
(``demo-s1-0001`` is easy to guess). Publishing replaces participant keys with random ids on
top of this."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from crowdpref.errors import state_file_error
from crowdpref.ids import stable_id
from crowdpref.runfolder import write_json

SALT_FILE = "participant-key-salt.json"


class Pseudonyms:
    def __init__(self, private_dir: Path):
        path = private_dir / SALT_FILE
        if not path.exists():
            write_json({"salt": secrets.token_hex(16)}, path, private=True)
        try:
            salt = json.loads(path.read_text(encoding="utf-8"))["salt"]
            if not isinstance(salt, str) or not salt:
                raise TypeError("salt")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise state_file_error(path, "the participant-key salt", exc, _salt_fix(private_dir)) from None
        self._salt = salt

    def participant_key(self, username: str) -> str:
        return stable_id("p_", self._salt, username, length=12)

    def response_id(self, question_id: str, username: str) -> str:
        return stable_id("r_", self._salt, question_id, username)

    def rating_id(self, pair_id: str, username: str) -> str:
        return stable_id("rt_", self._salt, pair_id, username)

    def __repr__(self) -> str:  # never show the salt
        return "Pseudonyms(<salted>)"


def _salt_fix(private_dir: Path) -> str:
    """A new salt is harmless only before anything was exported with the old one (every
    participant key and response/rating id derives from it)."""
    exported = [name for name in ("responses.parquet", "ratings.parquet") if (private_dir.parent / name).exists()]
    if exported:
        return (f"restore it from your backup ({' and '.join(exported)} already use it; a new salt would change "
                "every participant key and response id)")
    return "nothing was exported with it yet: delete it and rerun the stage (a new salt is created)"
