"""Wording shared by the artifacts of several tasks."""

from __future__ import annotations


def which_rows(limit: int, total: int) -> str:
    """How many of ``total`` rows a table capped at ``limit`` shows: ``all 24`` or
    ``first 100 of 250`` (never "first 100 of 24")."""
    return f"first {limit} of {total}" if total > limit else f"all {total}"
