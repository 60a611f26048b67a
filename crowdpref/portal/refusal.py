"""How the portal turns a request down: a :class:`Refusal` (HTTP status, title, a plain sentence
for the person), decided BEFORE anything is allocated, and the one-line log text of a cause
(:func:`one_line`, with Prolific ids masked). Prolific ids, session ids and passwords never
appear in a message, a log line or an event."""

from __future__ import annotations

import logging
import re

from crowdpref.errors import CrowdprefError, first_line

RETURN_WORDING = ("Please return your submission on Prolific (click \u201cReturn study\u201d in the Prolific app) "
                  "so that it does not count against you.")
log = logging.getLogger("crowdpref.portal")
_HEX_ID = re.compile(r"[0-9a-fA-F]{24}")


class Refusal(CrowdprefError):
    """A request the portal turns down: ``status`` is the HTTP status, ``title`` and ``str()``
    the page a person sees (no ids in it); ``retry_after``: seconds after which the page opens
    again by itself (the ``Retry-After`` and ``Refresh`` headers)."""

    def __init__(self, status: int, title: str, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.status = status
        self.title = title
        self.retry_after = retry_after


def one_line(exc: BaseException) -> str:
    """An exception as one log line with no Prolific id in it (24-hex ids are masked)."""
    return _HEX_ID.sub("<id>", first_line(exc, with_type=True))


def unavailable(cause: str, message: str, title: str = "Please try again") -> Refusal:
    """A 503 whose cause the portal log names, in one line (never a secret: ``cause`` holds
    class names, config problems and masked messages only); the person sees ``message``."""
    log.warning("503: %s", cause)
    return Refusal(503, title, message)
