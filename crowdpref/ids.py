"""Stable ids: hashes of what a thing *is*, so a rerun produces the same ids and never
duplicates anything."""

from __future__ import annotations

import hashlib


def stable_id(prefix: str, *parts: object, length: int = 16) -> str:
    """``prefix`` + the first ``length`` hex digits of sha256 over the parts (joined by a
    separator that cannot occur inside a part's repr)."""
    digest = hashlib.sha256("\x1f".join(str(part) for part in parts).encode("utf-8")).hexdigest()
    return f"{prefix}{digest[:length]}"
