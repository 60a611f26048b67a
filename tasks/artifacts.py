"""What the artifacts of several tasks share: their keys and their wording. Imports no other
task module, so every task module can import it."""

from __future__ import annotations


def artifact_key(study_name: str, what: str) -> str:
    """Artifact keys: lowercase letters, digits and dashes, per study so history is kept."""
    return f"{study_name}-{what}".lower().replace("_", "-")


def which_rows(limit: int, total: int) -> str:
    """How many of ``total`` rows a table capped at ``limit`` shows: ``all 24`` or
    ``first 100 of 250`` (never "first 100 of 24")."""
    return f"first {limit} of {total}" if total > limit else f"all {total}"
