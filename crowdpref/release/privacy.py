"""Personal details and credentials that must not be published, recognised by their form, and
what the release does with them.

The release's secret scan (:func:`crowdpref.release.scan.scan_for_secrets`) finds the exact
strings it is given (our usernames, passwords, keys). This module adds the values nobody listed
but whose form gives them away: a Prolific participant id typed into an answer, an e-mail
address, a token or key of a service crowdpref talks to. Every pattern is written here, once:

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

Phone numbers, payment cards, IBANs, IP addresses, URLs, names and places are found by
:mod:`crowdpref.release.recognisers` and decided by a person (:mod:`crowdpref.release.review`);
:class:`PrivacyReport` counts those findings per kind and decision, and :func:`privacy_markdown`
states them (and loudly, when no NER model looked for names and places).

Long random-looking strings in general are NOT matched: without a prefix or a context word they
cannot be told apart from ordinary text (ids, hashes, URLs) without false positives.

:func:`find` returns the hits in a text (pattern name and span: callers report the pattern and
where, never the value); :func:`mask` replaces each hit by its placeholder, e.g.
``[email removed]``.

In the release (:func:`apply_privacy`, called by :func:`crowdpref.release.build.build_release`):
personal details are masked in the columns people wrote (``Column.free_text``: answers and
questions) and counted in the card's "Privacy" section (:func:`privacy_markdown`) and
``<run>/privacy.json`` (:class:`PrivacyReport`); one in any other column (crowdpref's own ids,
labels, metadata) stops the build with a :class:`PrivacyError`, as does a token, key or
Prolific-style id in the card's own text (:func:`check_card_text`: the config's description or
citation; an e-mail address there is allowed).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from crowdpref.errors import CrowdprefError
from crowdpref.release.markdown import cell
from crowdpref.release.recognisers import BY_KIND as RECOGNISED
from crowdpref.release.scan import Needle, as_text, describe, scan_values
from crowdpref.release.schema import TIMESTAMP_PRECISIONS, Subset
from crowdpref.release.stats import read_stats
from crowdpref.runfolder import RunFolder

__all__ = [
    "BY_NAME",
    "CARD_ALLOWED_PATTERNS",
    "PATTERNS",
    "PRIVACY_FILE",
    "Hit",
    "Pattern",
    "PrivacyError",
    "PrivacyReport",
    "apply_privacy",
    "check_card_text",
    "find",
    "first_hit",
    "mask",
    "mask_all",
    "privacy_markdown",
    "read_privacy_report",
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
"""Pattern name -> :class:`Pattern`."""


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


# --- in the release ------------------------------------------------------------------------
PRIVACY_FILE = "privacy.json"
"""What the privacy pass of the last build masked (counts only, never a value), in the run folder."""


class PrivacyError(CrowdprefError):
    """A personal detail or credential in one of crowdpref's own columns, or a credential or
    Prolific-style id in the card's own text: the build stops."""


CARD_ALLOWED_PATTERNS = frozenset({"email"})
"""Pattern kinds the card's own text may hold: the study team's contact address is theirs to
publish (participants' text is masked before any of it reaches the card)."""


def check_card_text(card: str, source: str | None) -> None:
    """The card's text comes from the study config (title, description, citation, category
    descriptions) and from crowdpref: a token, key or Prolific-style id in it stops the build,
    with the line and the kind, never the value."""
    hits = find(card, [p for p in PATTERNS if p.name not in CARD_ALLOWED_PATTERNS])
    if hits:
        line = card.count("\n", 0, hits[0].start) + 1
        label = BY_NAME[hits[0].pattern].label
        raise PrivacyError(
            f"refusing to publish: the dataset card (README.md line {line}) would contain a "
            f"{label}, from the study config's text ({source or 'the study config'}: title, description, "
            "publish.citation or a category description): remove it and build again; "
            "nothing was written")


@dataclass
class PrivacyReport:
    """What the build masked in participant text, per pattern and published column (counts
    only), and how precisely timestamps were published."""

    timestamp_precision: str = "microsecond"
    masked: dict[str, dict[str, int]] = field(default_factory=dict)
    """Pattern name -> {"<configuration>.<column>": values replaced}."""
    reviewed: bool = False
    """The recognisers of :mod:`crowdpref.release.recognisers` ran (False: an older report)."""
    kinds_checked: list[str] = field(default_factory=list)
    """The recognisers' kinds looked for (``phone``, ``url``... and ``person``/``place`` only
    with an NER model)."""
    ner_model: str | None = None
    warnings: list[str] = field(default_factory=list)
    flagged: dict[str, dict[str, int]] = field(default_factory=dict)
    """Recogniser kind -> {decision: findings} (:mod:`crowdpref.release.review`)."""
    flagged_rows: dict[str, int] = field(default_factory=dict)
    """Decision -> flagged answers and questions."""
    dropped: dict[str, int] = field(default_factory=dict)
    """"answer"/"question" -> how many the review dropped."""
    decided_by_config: int = 0
    """Flagged rows decided by ``publish.privacy_undecided`` (simulated studies), not a person."""

    def add(self, pattern: str, where: str, count: int) -> None:
        if count:
            cell = self.masked.setdefault(pattern, {})
            cell[where] = cell.get(where, 0) + count

    @property
    def total(self) -> int:
        return sum(n for cells in self.masked.values() for n in cells.values())

    def rows(self) -> list[dict[str, Any]]:
        """One row per pattern that hit (in :data:`PATTERNS` order)."""
        return [{"pattern": p.name, "what": p.label, "placeholder": p.placeholder,
                 "replaced": sum(self.masked[p.name].values()),
                 "columns": ", ".join(f"{w} ({n})" for w, n in sorted(self.masked[p.name].items()))}
                for p in PATTERNS if p.name in self.masked]

    def to_json(self) -> dict[str, Any]:
        return {"about": "personal details masked in the release (counts only)",
                "timestamp_precision": self.timestamp_precision, "total": self.total,
                "masked": self.masked, "patterns": self.rows(), "reviewed": self.reviewed,
                "kinds_checked": self.kinds_checked, "ner_model": self.ner_model,
                "warnings": self.warnings, "flagged": self.flagged,
                "flagged_rows": self.flagged_rows, "dropped": self.dropped,
                "decided_by_config": self.decided_by_config}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> PrivacyReport:
        """The report :meth:`to_json` wrote (an empty one for None or a malformed file)."""
        data = data or {}
        precision = data.get("timestamp_precision")
        report = cls(timestamp_precision=precision if precision in TIMESTAMP_PRECISIONS
                     else "microsecond")
        masked = data.get("masked")
        for pattern, cells in (masked.items() if isinstance(masked, Mapping) else ()):
            for where, count in (cells.items() if isinstance(cells, Mapping) else ()):
                if isinstance(count, int):
                    report.add(str(pattern), str(where), count)
        report.reviewed = data.get("reviewed") is True
        kinds = data.get("kinds_checked")
        report.kinds_checked = [str(k) for k in kinds] if isinstance(kinds, list) else []
        ner = data.get("ner_model")
        report.ner_model = ner if isinstance(ner, str) else None
        warnings = data.get("warnings")
        report.warnings = [str(w) for w in warnings] if isinstance(warnings, list) else []
        flagged = data.get("flagged")
        for kind, cells in (flagged.items() if isinstance(flagged, Mapping) else ()):
            if isinstance(cells, Mapping):
                report.flagged[str(kind)] = {str(d): n for d, n in cells.items() if isinstance(n, int)}
        by_config = data.get("decided_by_config")
        report.decided_by_config = by_config if isinstance(by_config, int) else 0
        for name in ("flagged_rows", "dropped"):
            value = data.get(name)
            if isinstance(value, Mapping):
                setattr(report, name, {str(k): n for k, n in value.items() if isinstance(n, int)})
        return report


def privacy_markdown(report: PrivacyReport) -> list[str]:
    """The card's (and the artifact's) lines on what the pattern scan masked and on timestamps."""
    kinds = ", ".join(p.label for p in PATTERNS)
    out = [f"Answer and question texts were scanned for personal details and credentials "
           f"recognised by their form ({kinds}). "]
    if report.total:
        out[0] += (f"{report.total} were found and replaced by a placeholder such as "
                   "`[email removed]` (the values themselves are not kept in the release):")
        out += ["", "| What | Placeholder | Replaced | In (configuration.column: values) |",
                "|---|---|---|---|"]
        out += [f"| {r['what']} | `{r['placeholder']}` | {r['replaced']} | {cell(r['columns'])} |"
                for r in report.rows()]
        out += ["", "The same answer appears in several configurations (e.g. `responses.text` "
                "and `default.chosen`), so one typed value can be counted more than once."]
    else:
        out[0] += "None was found."
    out += _review_markdown(report)
    other = "stories, descriptions" if report.ner_model else "names, places, stories"
    out += ["", f"Other personal details ({other}) cannot be recognised this way: "
            "answer texts are otherwise published as written, not edited."]
    precision = report.timestamp_precision
    out += ["", "Timestamps (`submitted_at`) are published "
            + ("as recorded, to the microsecond." if precision == "microsecond" else
               f"to the {precision}: truncated in UTC to the start of the {precision}"
               + (" (the time of day is always 00:00)" if precision == "day" else "")
               + ", so the moment a participant worked cannot be read from them.")]
    return out


def _review_markdown(report: PrivacyReport) -> list[str]:
    """The card's lines on the recognisers' findings and the review's decisions (counts per
    kind and per decision, never a text)."""
    if not report.reviewed:
        return []
    labels = [RECOGNISED[k].label for k in report.kinds_checked if k in RECOGNISED]
    out = ["", "They were also scanned with Presidio's recognisers for "
           + (", ".join(labels) or "nothing") + ". "]
    if report.ner_model:
        out[-1] += f"Names of people and places were looked for with the spaCy model `{report.ner_model}`."
    out[-1] = out[-1].rstrip()
    for warning in report.warnings:
        out += ["", f"> **WARNING:** {warning}"]
    rows = sum(report.flagged_rows.values())
    if not rows:
        out += ["", "None was found."]
        return out
    by = report.flagged_rows
    out += ["", f"{rows} answer(s) or question(s) held one; each was decided before publication: "
            f"{by.get('keep', 0)} kept as written, {by.get('mask', 0)} masked (what was found "
            f"replaced by a placeholder such as `[phone removed]`), {by.get('drop', 0)} dropped"
            + (f" ({report.decided_by_config} of them by the study config's "
               "`publish.privacy_undecided: mask`, allowed only for a simulated crowd, not by a "
               "person)" if report.decided_by_config else "") + ".",
            "", "| What | Found | Kept as written | Masked | Dropped |", "|---|---|---|---|---|"]
    for kind in RECOGNISED.values():
        cells = report.flagged.get(kind.name)
        if cells:
            out.append(f"| {kind.label} | {sum(cells.values())} | {cells.get('keep', 0)} | "
                       f"{cells.get('mask', 0)} | {cells.get('drop', 0)} |")
    if report.dropped:
        out += ["", "Dropped: " + ", ".join(f"{n} {what}(s)" for what, n in sorted(report.dropped.items()))
                + ", with the preference pairs and ratings that hold them. Figures taken from the "
                "aggregation were computed before they were left out."]
    return out


def apply_privacy(frames: dict[str, pd.DataFrame], subsets: Sequence[Subset], run: RunFolder,
                   target: Path, needles: list[Needle], report: PrivacyReport) -> None:
    """Mask personal details in every free-text column of ``frames`` (in place, recording what
    in ``report``); refuse one in any other text column (crowdpref's own). A known secret
    (``needles``) in a free-text column refuses the build before masking could hide it."""
    for subset in subsets:
        frame = frames[subset.name]
        where_file = subset.data_path
        for column in subset.columns:
            if not pa.types.is_string(column.type):
                continue
            values = frame[column.source_name].tolist()
            where = f"{where_file}: column '{column.name}'"
            if column.free_text:
                texts = [as_text(v) for v in values]
                found = scan_values(sorted(set(texts)), needles, where, rows=lambda t=texts: t)
                if found:
                    needle, at = found[0]
                    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
                    raise CrowdprefError(
                        f"refusing to publish {target}: {at}: {describe(needle)}{more}: remove "
                        "it from the run folder's data and build again; nothing was written")
                masked, counts = mask_all(values)
                for pattern, count in counts.items():
                    report.add(pattern, f"{subset.name}.{column.name}", count)
                if counts:
                    frames[subset.name] = frame = frame.assign(
                        **{column.source_name: pd.Series(masked, index=frame.index, dtype=object)})
                continue
            hit = first_hit(values)
            if hit is not None:
                row, pattern = hit
                raise PrivacyError(
                    f"refusing to publish {target}: {where} row {row} holds what looks like "
                    f"{_pattern_label(pattern)} ({pattern}); this column is written by crowdpref "
                    f"(from {run.file(subset.source_file).name}), not typed by participants: fix "
                    "the data or the stage that wrote it and build again; nothing was written")


def _pattern_label(name: str) -> str:
    label = next(p.label for p in PATTERNS if p.name == name)
    return ("an " if label[0].lower() in "aeiou" else "a ") + label


def read_privacy_report(run_folder: RunFolder | Path) -> dict[str, Any] | None:
    """The last build's :data:`PRIVACY_FILE` (counts only), or None."""
    run = run_folder if isinstance(run_folder, RunFolder) else RunFolder(Path(run_folder))
    return read_stats(run.file(PRIVACY_FILE))
