"""Published participant ids: every participant key (``participant_key``, ``rater_key``) is
replaced by a random 10-character id in the release. The mapping stays in
``<run>/private/published-ids.json`` (mode 0600) and is reused, so ids are stable across
re-publishing; it cannot be worked back from the ids, and it is never published."""

from __future__ import annotations

import json
import os
import secrets
import string
from collections.abc import Iterable
from pathlib import Path

from crowdpref.errors import CrowdprefError
from crowdpref.runfolder import write_json

__all__ = ["ID_ALPHABET", "ID_LENGTH", "PUBLISHED_IDS_FILE", "published_ids"]

PUBLISHED_IDS_FILE = "published-ids.json"
ID_LENGTH = 10
ID_ALPHABET = string.ascii_letters + string.digits


def _random_id() -> str:
    return "".join(secrets.choice(ID_ALPHABET) for _ in range(ID_LENGTH))


def published_ids(path: Path, keys: Iterable[str]) -> dict[str, str]:
    """Participant key -> random 10-character id. Existing entries of the private mapping file
    ``path`` are reused (ids stay stable across re-publishing); new keys get new ids and the
    file is rewritten atomically with mode 0600."""
    mapping: dict[str, str] = {}
    if path.exists():
        try:
            mapping = dict(json.loads(path.read_text(encoding="utf-8"))["ids"])
        except (ValueError, KeyError, TypeError):
            raise CrowdprefError(
                f"{path}: not a published-ids file (expected {{\"ids\": {{key: id}}}}): restore it "
                "from a backup, or delete it to give every participant a new id"
            ) from None
    used = set(mapping.values())
    changed = not path.exists()
    for key in sorted({str(k) for k in keys}):
        if key in mapping:
            continue
        new = _random_id()
        while new in used:
            new = _random_id()
        mapping[key] = new
        used.add(new)
        changed = True
    if changed:
        write_json({"about": "participant/rater key -> published id; private, never publish",
                    "ids": mapping}, path, private=True)
    elif path.stat().st_mode & 0o077:
        os.chmod(path, 0o600)
    return mapping
