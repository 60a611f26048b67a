"""The privacy review: answers and questions in which a recogniser
(:mod:`crowdpref.release.recognisers`: phone numbers, payment cards, IBANs, IP addresses, URLs,
and names and places where an NER model is installed) found a personal detail are listed in a
review file, and the release is built only once each of them is decided.

The review file is ``<run>/private/privacy-review.json`` (owner-only: 0600 in a 0700 folder,
like the key mapping; never published, never logged). One row per flagged text, its id stable
across builds: ``answer:<response_id>`` or ``question:<question_id>``. Each row holds the text and
what was found where (kind, start, end and the value), so the operator can judge it, and a
``decision``:

- ``keep``: published as written;
- ``mask``: each finding replaced by its placeholder (``[phone removed]``...) wherever the text
  is published (``responses.text``, ``default.chosen``...);
- ``drop``: left out of the release: an answer's rows, the preference pairs and ratings that hold
  it and its screening row; a question's rows with everything answering it;
- ``null``: undecided. :func:`review_release` refuses the build while any row is undecided,
  naming the file, how many, and how to decide (edit the file, or ``crowdpref privacy-review``).

Every build rewrites the file from what it finds: a row keeps its decision while its text is
unchanged (``text_sha256``); a row whose text changed is undecided again; a text no longer
published (a withdrawal) leaves the file. ``publish.privacy_undecided: mask`` - allowed only for
``participants: simulated`` studies - decides every undecided row ``mask`` at build time
(``decided_by: config``), so the demo publishes without a person deciding.

E-mail addresses, tokens, keys and Prolific-style ids (:mod:`crowdpref.release.privacy`) are not
listed here: they are always masked, and a recogniser's finding that overlaps one of them is left
to that masking.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from crowdpref.errors import CrowdprefError, first_line
from crowdpref.release.privacy import PrivacyError, find
from crowdpref.release.recognisers import Finding, Recognisers, mask_findings
from crowdpref.release.schema import Subset
from crowdpref.runfolder import RunFolder, write_json
from crowdpref.withdrawals import RESPONSE_COLUMNS

__all__ = ["DECISIONS", "ORIGINS", "REVIEW_FILE", "Outcome", "decide", "read_review",
           "review_file", "review_release"]

REVIEW_FILE = "privacy-review.json"
"""The review file's name in the run folder's ``private/``."""

DECISIONS = ("keep", "mask", "drop")

ORIGINS: dict[tuple[str, str], tuple[str, str]] = {
    ("default", "prompt"): ("question", "question_id"),
    ("default", "chosen"): ("answer", "chosen_response_id"),
    ("default", "rejected"): ("answer", "rejected_response_id"),
    ("responses", "text"): ("answer", "response_id"),
    ("responses_raw", "text"): ("answer", "response_id"),
    ("questions", "question"): ("question", "question_id"),
}
"""(configuration, free-text column) -> (what the text is, the column holding its id)."""

_ABOUT = ("Personal details found in answers and questions before publication. Set each row's "
          "\"decision\" to \"keep\" (publish as written), \"mask\" (replace what was found by a "
          "placeholder) or \"drop\" (leave the answer or question out, with what holds it), then "
          "publish again. This file stays private: never publish or share it.")


def review_file(run: RunFolder) -> Path:
    return run.private_dir / REVIEW_FILE


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class Outcome:
    """What the review decided for this build (counts only: no text, no id)."""

    findings: dict[str, dict[str, int]] = field(default_factory=dict)
    """kind -> {decision: findings}."""
    rows: dict[str, int] = field(default_factory=dict)
    """decision -> flagged rows (answers and questions)."""
    dropped: dict[str, int] = field(default_factory=dict)
    """"answer"/"question" -> how many were dropped."""
    by_config: int = 0
    """Rows decided by ``publish.privacy_undecided: mask``, not by a person."""


def read_review(path: Path) -> dict[str, dict[str, Any]]:
    """The rows of the review file by id ({} when there is none); a file that is not what
    :func:`review_release` wrote, or a decision that is not one of :data:`DECISIONS`, is a
    one-line error naming the file, the row and the fix."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise CrowdprefError(f"{path}: not valid JSON ({first_line(exc, None)}): fix the edit, "
                             "or delete the file to review every flagged row again") from None
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get("id"), str)
                                             for r in rows):
        raise CrowdprefError(f"{path}: not a privacy review file (no \"rows\" list of rows with an "
                             "\"id\"): delete it to review every flagged row again")
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        decision = row.get("decision")
        if decision is not None and decision not in DECISIONS:
            raise CrowdprefError(f"{path}: row {row['id']}: \"decision\" is {decision!r}: write "
                                 "\"keep\", \"mask\" or \"drop\" (or null while undecided)")
        out[row["id"]] = row
    return out


def _flagged(frames: dict[str, pd.DataFrame], subsets: Sequence[Subset],
             recognisers: Recognisers) -> tuple[dict[str, tuple[str, list[Finding]]],
                                                dict[str, list[Finding]]]:
    """(id -> (text, findings)) of every flagged text, and findings per distinct text."""
    by_text: dict[str, list[Finding]] = {}
    flagged: dict[str, tuple[str, list[Finding]]] = {}
    for subset in subsets:
        frame = frames.get(subset.name)
        if frame is None:
            continue
        for column in subset.columns:
            if not column.free_text:
                continue
            origin = ORIGINS.get((subset.name, column.name))
            if origin is None:  # a new free-text column must say whose text it is
                raise CrowdprefError(f"{subset.name}.{column.name}: a free-text column with no "
                                     "origin in crowdpref.release.review.ORIGINS")
            what, id_column = origin
            for ref, text in zip(frame[id_column].tolist(), frame[column.source_name].tolist()):
                if not isinstance(text, str):
                    continue
                if text not in by_text:
                    automatic = find(text)  # e-mail, tokens...: always masked, not reviewed
                    by_text[text] = [f for f in recognisers.find(text)
                                     if not any(f.start < h.end and h.start < f.end
                                                for h in automatic)]
                if by_text[text]:
                    flagged.setdefault(f"{what}:{ref}", (text, by_text[text]))
    return flagged, by_text


def review_release(frames: dict[str, pd.DataFrame], subsets: Sequence[Subset], run: RunFolder,
                   recognisers: Recognisers, *, target: Path, undecided: str = "block",
                   study: str | None = None) -> Outcome:
    """Scan every free-text column of ``frames``, write the review file, refuse the build while
    a flagged row is undecided (``undecided="mask"`` decides them ``mask``), then apply the
    decisions to ``frames`` in place: masked findings, dropped rows."""
    flagged, by_text = _flagged(frames, subsets, recognisers)
    path = review_file(run)
    previous = read_review(path) if flagged or path.exists() else {}
    rows: list[dict[str, Any]] = []
    for row_id, (text, findings) in sorted(flagged.items()):
        old = previous.get(row_id) or {}
        decision, by = None, None
        if old.get("text_sha256") == _sha(text) and old.get("decision") is not None:
            decision, by = old["decision"], old.get("decided_by") or "operator"
        elif undecided == "mask":
            decision, by = "mask", "config"
        rows.append({
            "id": row_id, "decision": decision, "decided_by": by,
            "kinds": dict(Counter(f.kind for f in findings)),
            "findings": [{"kind": f.kind, "start": f.start, "end": f.end,
                          "value": text[f.start:f.end]} for f in findings],
            "text": text, "text_sha256": _sha(text)})
    if rows or path.exists():
        write_json({"about": _ABOUT, "decisions": list(DECISIONS),
                    "ner_model": recognisers.ner_model, "rows": rows}, path, private=True)
    open_rows = [r for r in rows if r["decision"] is None]
    if open_rows:
        kinds = Counter(k for r in open_rows for k in r["kinds"])
        how = (f"`crowdpref privacy-review {study} --decide keep|mask|drop`" if study
               else "`crowdpref privacy-review STUDY --decide keep|mask|drop`")
        raise PrivacyError(
            f"refusing to publish {target}: {len(open_rows)} of {len(rows)} flagged row(s) in "
            f"{path} are undecided (found: {', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}): "
            f"set each row's \"decision\" to keep, mask or drop in that file, or run {how}, and "
            "publish again; nothing was published")

    outcome = Outcome()
    decision_of = {r["id"]: r["decision"] for r in rows}
    for r in rows:
        outcome.rows[r["decision"]] = outcome.rows.get(r["decision"], 0) + 1
        outcome.by_config += r["decided_by"] == "config"
        for kind, n in r["kinds"].items():
            cell = outcome.findings.setdefault(kind, {})
            cell[r["decision"]] = cell.get(r["decision"], 0) + n
    dropped = {what: {i.split(":", 1)[1] for i, d in decision_of.items()
                      if d == "drop" and i.startswith(what + ":")} for what in ("answer", "question")}
    outcome.dropped = {what: len(ids) for what, ids in dropped.items() if ids}
    if outcome.dropped:
        _drop(frames, dropped["answer"], dropped["question"])
    if any(d == "mask" for d in decision_of.values()):
        _mask(frames, subsets, decision_of, by_text)
    return outcome


def _drop(frames: dict[str, pd.DataFrame], answers: set[str], questions: set[str]) -> None:
    """Leave out of every frame the dropped answers and questions, the answers to a dropped
    question, and the pairs (with their ratings) holding a dropped answer."""
    answers = set(answers)
    for frame in frames.values():
        if {"question_id", "response_id"} <= set(frame.columns):
            answers |= set(frame.loc[frame["question_id"].isin(questions), "response_id"].astype(str))
    pairs: set[str] = set()
    for frame in frames.values():
        columns = [c for c in RESPONSE_COLUMNS if c in frame.columns]
        if "pair_id" in frame.columns and columns:
            pairs |= set(frame.loc[frame[columns].isin(answers).any(axis=1), "pair_id"].astype(str))
    for name, frame in list(frames.items()):
        drop = pd.Series(False, index=frame.index)
        for column in RESPONSE_COLUMNS:
            if column in frame.columns:
                drop |= frame[column].isin(answers)
        if "question_id" in frame.columns:
            drop |= frame["question_id"].isin(questions)
        if "pair_id" in frame.columns:
            drop |= frame["pair_id"].isin(pairs)
        if drop.any():
            frames[name] = frame.loc[~drop.to_numpy(dtype=bool)].reset_index(drop=True)


def _mask(frames: dict[str, pd.DataFrame], subsets: Iterable[Subset], decision_of: dict[str, str],
          by_text: dict[str, list[Finding]]) -> None:
    for subset in subsets:
        frame = frames.get(subset.name)
        if frame is None:
            continue
        for column in subset.columns:
            origin = ORIGINS.get((subset.name, column.name)) if column.free_text else None
            if origin is None:
                continue
            what, id_column = origin
            values = frame[column.source_name].tolist()
            masked = [mask_findings(text, by_text[text])
                      if isinstance(text, str) and decision_of.get(f"{what}:{ref}") == "mask"
                      and by_text.get(text) else text
                      for ref, text in zip(frame[id_column].tolist(), values)]
            if masked != values:
                frames[subset.name] = frame = frame.assign(
                    **{column.source_name: pd.Series(masked, index=frame.index, dtype=object)})


def decide(path: Path, decision: str, rows: Sequence[str] = ()) -> tuple[int, int]:
    """Set ``decision`` on the named ``rows`` of the review file (every undecided row when none
    is named): (rows changed, rows still undecided). An unknown row id is a one-line error."""
    if decision not in DECISIONS:
        raise CrowdprefError(f"--decide {decision!r}: use keep, mask or drop")
    if not path.exists():
        raise CrowdprefError(f"{path}: not found: run the publish-dataset flow first (it writes "
                             "the review file when a personal detail is found)")
    read_review(path)  # validated
    data = json.loads(path.read_text(encoding="utf-8"))
    known = {r["id"] for r in data["rows"]}
    unknown = [r for r in rows if r not in known]
    if unknown:
        raise CrowdprefError(f"{path}: no row {unknown[0]!r}: use an \"id\" of the file")
    changed = 0
    for row in data["rows"]:
        if (row["id"] in rows) if rows else row.get("decision") is None:
            row["decision"], row["decided_by"] = decision, "operator"
            changed += 1
    write_json(data, path, private=True)
    return changed, sum(1 for r in data["rows"] if r.get("decision") is None)
