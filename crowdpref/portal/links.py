"""The portal's addresses, as participants, Prolific and Argilla guidelines use them. No web
framework here: collections and the Prolific study set-up import it."""

from __future__ import annotations

from typing import Any

PROLIFIC_PLACEHOLDERS = "PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}"


def entry_url(settings: Any, study: str, key: str) -> str:
    """Where a participant starts: ``<portal>/s/<study>/<study1|study2>``."""
    return f"{settings.portal_public_url}/s/{study}/{key}"


def prolific_entry_url(settings: Any, study: str, key: str) -> str:
    """The external study URL for Prolific: the entry with Prolific's placeholders."""
    return f"{entry_url(settings, study, key)}?{PROLIFIC_PLACEHOLDERS}"


def finish_url(settings: Any, study: str, key: str) -> str:
    """The page a participant opens when done (linked from their Argilla guidelines)."""
    return f"{entry_url(settings, study, key)}/done"


def webhook_url(settings: Any) -> str:
    return f"{settings.portal_public_url}/hooks/prolific"


def completion_url(settings: Any, code: str, app_url: str | None = None) -> str:
    """Prolific's completion page for ``code``."""
    return f"{(app_url or settings.prolific_app_url).rstrip('/')}/submissions/complete?cc={code}"
