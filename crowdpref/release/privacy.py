"""Personal details and credentials that must not be published, recognised by their form.

The release's secret scan (:func:`crowdpref.publish.scan_for_secrets`) finds the exact strings it
is given (our usernames, passwords, keys). This module adds the values nobody listed but whose
form gives them away: a Prolific participant id typed into an answer, an e-mail address, a token
or key of a service crowdpref talks to. Every pattern is written here, once:

=================  ==========================================================================
``prolific-id``    24 hex digits standing alone (Prolific ids are MongoDB ObjectIds:
                   ``5f1d2a3b4c5d6e7f8a9b0c1d``)
``email``          an e-mail address (``name@domain.tld``)
``hf-token``       a Hugging Face token: ``hf_`` + 30 or more letters and digits
                   (``api_org_`` organisation tokens too)
``openai-key``     an OpenAI key: ``sk-`` + 20 or more of ``[A-Za-z0-9_-]`` (``sk-proj-...``,
                   ``sk-svcacct-...``, ``sk-admin-...`` included)
``argilla-key``    an Argilla API key: what argilla-server generates (``secrets.token_urlsafe(80)``:
                   exactly 107 URL-safe characters, mixing upper case, lower case and digits),
                   the ``<name>.apikey`` form of Argilla's documented defaults
                   (``argilla.apikey``, ``owner.apikey``) and crowdpref's own owner key
                   (``crowdpref.apikey.<random>``)
``bearer-token``   a credential written the way an ``Authorization`` header carries it:
                   ``Bearer <x>`` / ``Token <x>`` with 20 or more credential characters (Prolific
                   API tokens have no documented shape of their own; this is how they travel)
``jwt``            a JSON Web Token (``eyJ...`` . ``eyJ...`` . signature)
=================  ==========================================================================

Long random-looking strings in general are NOT matched: without a prefix or a context word they
cannot be told apart from ordinary text (ids, hashes, URLs) without false positives.

:func:`find` returns the hits in a text (pattern name and span: callers report the pattern and
where, never the value); :func:`mask` replaces each hit by its placeholder, e.g.
``[email removed]``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "PATTERNS",
    "TIMESTAMP_PRECISIONS",
    "Hit",
    "Pattern",
    "find",
    "first_hit",
    "mask",
    "mask_all",
]


@dataclass(frozen=True)
class Pattern:
    """One kind of value that must not be published."""

    name: str
    """Short id used in errors, the card and artifacts (``email``, ``hf-token``...)."""
    label: str
    """What it is, in words, for the card."""
    regex: re.Pattern[str]
    placeholder: str
    """What a masked value becomes."""
    hints: tuple[str, ...] = ()
    """Lower-case substrings one of which every match contains: a text holding none of them is
    skipped without running the regular expression (a column is scanned several times faster)."""

    def accept(self, match: re.Match[str]) -> bool:
        """Extra checks a regular expression cannot say well (see ``argilla-key``)."""
        if self.name == "argilla-key" and len(match.group(0)) == _ARGILLA_GENERATED:
            value = match.group(0)
            return (any(c.isupper() for c in value) and any(c.islower() for c in value)
                    and any(c.isdigit() for c in value))
        return True


_ARGILLA_GENERATED = 107
"""len(secrets.token_urlsafe(80)): argilla_server.models.database.generate_user_api_key."""

_URLSAFE = r"A-Za-z0-9_\-"

PATTERNS: tuple[Pattern, ...] = (
    Pattern("hf-token", "Hugging Face token",
            re.compile(r"(?<![A-Za-z0-9_])(?:hf_|api_org_)[A-Za-z0-9]{30,}(?![A-Za-z0-9])"),
            "[hf-token removed]", ("hf_", "api_org_")),
    Pattern("openai-key", "OpenAI API key",
            re.compile(rf"(?<![{_URLSAFE}])sk-[{_URLSAFE}]{{20,}}"),
            "[openai-key removed]", ("sk-",)),
    Pattern("argilla-key", "Argilla API key",
            re.compile(rf"(?<![{_URLSAFE}.])(?:(?:[A-Za-z0-9_-]+\.)+apikey(?:\.[{_URLSAFE}]+)?"
                       rf"|[{_URLSAFE}]{{{_ARGILLA_GENERATED}}})(?![{_URLSAFE}])"),
            "[argilla-key removed]"),
    Pattern("jwt", "JSON Web Token",
            re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}"
                       r"\.[A-Za-z0-9_-]+"),
            "[token removed]", ("eyj",)),
    Pattern("bearer-token", "token written as in an Authorization header (Bearer/Token ...)",
            re.compile(r"(?i)(?<![A-Za-z0-9])(?:bearer|token)\s+"
                       r"(?=[A-Za-z0-9._~+/=-]*[0-9])[A-Za-z0-9._~+/-]{20,}=*"),
            "[token removed]", ("bearer", "token")),
    Pattern("email", "e-mail address",
            re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*"
                       r"[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
                       r"\.[A-Za-z]{2,}(?![A-Za-z0-9-])"),
            "[email removed]", ("@",)),
    Pattern("prolific-id", "Prolific-style participant id (24 hex digits)",
            re.compile(r"(?<![A-Za-z0-9_])[0-9a-fA-F]{24}(?![A-Za-z0-9_])"),
            "[prolific-id removed]"),
)
"""Checked in this order: a token is reported as a token, not as the hex run inside it."""

BY_NAME = {p.name: p for p in PATTERNS}

TIMESTAMP_PRECISIONS = ("day", "hour", "minute", "second", "microsecond")
"""How precisely published timestamps are kept (``publish.timestamp_precision``): truncated
(floored, in UTC) to the start of the day, hour, minute or second, or as recorded."""


@dataclass(frozen=True)
class Hit:
    pattern: str
    start: int
    end: int


def find(text: str, patterns: Iterable[Pattern] = PATTERNS) -> list[Hit]:
    """Every non-overlapping hit in ``text``, earlier patterns first where two overlap."""
    if not text:
        return []
    hits: list[Hit] = []
    lowered = text.lower()
    for pattern in patterns:
        if pattern.hints and not any(h in lowered for h in pattern.hints):
            continue
        for match in pattern.regex.finditer(text):
            if not pattern.accept(match):
                continue
            if any(match.start() < h.end and h.start < match.end() for h in hits):
                continue
            hits.append(Hit(pattern.name, match.start(), match.end()))
    return sorted(hits, key=lambda h: h.start)


def mask(text: str, patterns: Iterable[Pattern] = PATTERNS) -> tuple[str, Counter[str]]:
    """``text`` with every hit replaced by its pattern's placeholder, and the hits per pattern."""
    hits = find(text, patterns)
    if not hits:
        return text, Counter()
    out, last = [], 0
    for hit in hits:
        out += [text[last:hit.start], BY_NAME[hit.pattern].placeholder]
        last = hit.end
    out.append(text[last:])
    return "".join(out), Counter(h.pattern for h in hits)


def _blob(values: list[object]) -> tuple[list[str], str]:
    """The text values joined by NUL, which no pattern matches or crosses: one regex pass per
    pattern over a whole column instead of one per value."""
    texts = [v if isinstance(v, str) else "" for v in values]
    return texts, "\x00".join(texts)


def mask_all(values: Iterable[object]) -> tuple[list[object], Counter[str]]:
    """:func:`mask` over a column's values (None and non-text values pass unchanged): the new
    values and the hits per pattern over all of them."""
    values = list(values)
    if not find(_blob(values)[1]):
        return values, Counter()
    total: Counter[str] = Counter()
    out: list[object] = []
    for value in values:
        if isinstance(value, str):
            value, counts = mask(value)
            total.update(counts)
        out.append(value)
    return out, total


def first_hit(values: Iterable[object]) -> tuple[int, str] | None:
    """(row, pattern name) of the first hit among a column's text values; None when none."""
    texts, blob = _blob(list(values))
    hits = find(blob)
    if not hits:
        return None
    end = 0
    for row, text in enumerate(texts):
        end += len(text) + 1
        if hits[0].start < end:
            return row, hits[0].pattern
    return len(texts) - 1, hits[0].pattern
