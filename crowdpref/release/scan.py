"""The secret scan: every file of a built release is searched for the exact strings that must
never be published (:func:`forbidden_strings`: participants' usernames and passwords, API keys
and tokens, the participant-key salt, what the Prolific sync keeps privately, and the original
participant keys). :func:`scan_for_secrets` reports where each was found and never the string
itself. Values nobody listed but whose form gives them away are :mod:`crowdpref.release.privacy`'s."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from crowdpref.pseudonyms import SALT_FILE
from crowdpref.release.stats import read_json
from crowdpref.runfolder import RunFolder

__all__ = [
    "MIN_SECRET_LENGTH",
    "REVIEW_FILE_PREFIX",
    "REVIEW_FILE_SECRETS",
    "Needle",
    "describe",
    "forbidden_strings",
    "needles_of",
    "scan_for_secrets",
    "scan_values",
]

MIN_SECRET_LENGTH = 4
"""Forbidden strings shorter than this are ignored by the scan (they would match anywhere)."""


@dataclass(frozen=True)
class Needle:
    """A forbidden string and its 1-based position in the list it came from (errors name the
    position, never the string)."""

    number: int
    text: str

    @property
    def data(self) -> bytes:
        return self.text.encode("utf-8")


def needles_of(forbidden: Iterable[str]) -> list[Needle]:
    """The forbidden strings worth searching for (at least :data:`MIN_SECRET_LENGTH` characters)."""
    return [Needle(number, value) for number, value in enumerate(forbidden, start=1)
            if isinstance(value, str) and len(value.strip()) >= MIN_SECRET_LENGTH]


def describe(needle: Needle) -> str:
    """How a hit names the string: its number and length, never its text."""
    return f"forbidden string #{needle.number} ({len(needle.text)} characters)"


def as_text(value: Any) -> str:
    """A cell value as the text the scan searches ("" for None)."""
    return "" if value is None else (value if isinstance(value, str) else str(value))


_HASH_BITS = 22


def _hash(words: np.ndarray) -> np.ndarray:
    """Multiplicative hash of 32-bit words to :data:`_HASH_BITS` bits."""
    return (words * np.uint32(2654435761)) >> np.uint32(32 - _HASH_BITS)


def _present(data: bytes, needles: list[Needle]) -> list[Needle]:
    """The needles occurring in ``data``, in one vectorised pass: every 4-byte window of the
    data is looked up among the needles' first 4 bytes, and only those candidate positions are
    compared in full (thousands of needles over megabytes take well under a second, where one
    ``find`` per needle would take tens of seconds)."""
    if len(data) < MIN_SECRET_LENGTH:
        return []
    by_prefix: dict[int, list[Needle]] = {}
    for needle in needles:
        by_prefix.setdefault(int.from_bytes(needle.data[:4], "little"), []).append(needle)
    arr = np.frombuffer(data, dtype=np.uint8).astype(np.uint32)
    windows = arr[:-3] | (arr[1:-2] << 8) | (arr[2:-1] << 16) | (arr[3:] << 24)
    keys = np.fromiter(by_prefix, dtype=np.uint32, count=len(by_prefix))
    table = np.zeros(1 << _HASH_BITS, dtype=bool)  # a hashed bitmap of the prefixes
    table[_hash(keys)] = True
    found: dict[int, Needle] = {}
    for pos in np.flatnonzero(table[_hash(windows)]).tolist():
        for needle in by_prefix.get(int(windows[pos]), ()):
            if needle.number not in found and data.startswith(needle.data, pos):
                found[needle.number] = needle
    return sorted(found.values(), key=lambda n: n.number)


def scan_values(values: list[str], needles: list[Needle], where: str,
                 rows: Callable[[], list[str]] | None = None) -> list[tuple[Needle, str]]:
    """The needles found in ``values`` with the first row holding each. ``values`` may be a
    column's distinct values; ``rows`` (giving the full column) then locates the row."""
    if not values:
        return []
    blob = "\n".join(values)
    present = _present(blob.encode("utf-8"), needles)
    if not present:
        return []
    full = rows() if rows is not None else values
    out = []
    for needle in present:
        row = next((i for i, v in enumerate(full) if needle.text in v), 0)
        out.append((needle, f"{where} row {row}"))
    return out


def scan_for_secrets(folder: Path, forbidden: Iterable[str]) -> list[str]:
    """Read every file under ``folder`` and report each forbidden string found, as
    ``"<file>: column 'c' row n: forbidden string #i (n characters)"`` (or ``line n`` for text
    files) - the string itself is never repeated; ``#i`` is its 1-based position in
    ``forbidden``. Parquet files are decoded (their pages are compressed) and every value, column
    name and metadata entry is searched, then the raw bytes; other files as text and as raw
    bytes. Strings shorter than :data:`MIN_SECRET_LENGTH` characters are ignored."""
    folder = Path(folder)
    needles = needles_of(forbidden)
    hits: list[str] = []
    if not needles:
        return hits
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        reported: set[int] = set()

        def report(found: list[tuple[Needle, str]]) -> None:
            for needle, where in found:
                if needle.number not in reported:
                    reported.add(needle.number)
                    hits.append(f"{where}: {describe(needle)}")

        if path.suffix == ".parquet":
            try:
                table = pq.read_table(path)
            except Exception:  # noqa: BLE001 - an unreadable file is still scanned as bytes
                table = None
            if table is not None:
                meta = table.schema.metadata or {}
                header = [*table.column_names,
                          *(b.decode("utf-8", "replace") for kv in meta.items() for b in kv)]
                report([(n, w.replace(" row ", " entry ", 1)) for n, w in
                        scan_values(header, needles, f"{rel}: column names/metadata")])
                for name in table.column_names:
                    column = table.column(name)
                    try:
                        distinct = column.unique().to_pylist()  # ids and labels repeat a lot
                    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
                        distinct = column.to_pylist()
                    report(scan_values(
                        [as_text(v) for v in distinct], needles, f"{rel}: column '{name}'",
                        rows=lambda column=column: [as_text(v) for v in column.to_pylist()]))
        raw = path.read_bytes()
        lines = raw.split(b"\n")
        for needle in _present(raw, [n for n in needles if n.number not in reported]):
            line = next((i for i, ln in enumerate(lines, start=1) if needle.data in ln), None)
            report([(needle, f"{rel}: line {line}" if line and path.suffix != ".parquet"
                     else f"{rel}: (bytes)")])
    return hits


def forbidden_strings(run_folder: RunFolder | Path, secrets_: Iterable[str | None] = (),
                      accounts: Iterable[tuple[str, str]] = ()) -> list[str]:
    """What must never be published: every participant account's username and password
    (``accounts``, from the study store), the participant-key salt and every string of
    ``private/*prolific*.json`` in the run folder, plus ``secrets_`` (API keys and tokens from
    settings; None entries are skipped)."""
    run = run_folder if isinstance(run_folder, RunFolder) else RunFolder(Path(run_folder))
    out: list[str] = [s for s in secrets_ if s]
    for username, password in accounts:
        out += [str(username), str(password)]
    private = run.private_dir
    if not private.is_dir():
        return out
    salt = read_json(private / SALT_FILE)
    if isinstance(salt, dict) and salt.get("salt"):
        out.append(str(salt["salt"]))
    for path in sorted(private.glob("*prolific*.json")):
        data = read_json(path)
        if path.name.startswith(REVIEW_FILE_PREFIX) and isinstance(data, list):
            # the sync's review list: who and which submission; its field names and crowdpref's own
            # reasons ("complete: approve", proposed messages) are not secrets and appear in the card
            data = [[entry.get(field) for field in REVIEW_FILE_SECRETS] for entry in data if isinstance(entry, dict)]
        out += [s for s in _strings(data) if len(s) >= 8]
    return out


REVIEW_FILE_PREFIX = "prolific-review-"
"""``private/prolific-review-<key>.json`` (:func:`crowdpref.recruitment.sync_prolific`)."""
REVIEW_FILE_SECRETS = ("username", "submission_id")


def _strings(data: Any) -> list[str]:
    if isinstance(data, str):
        return [data]
    if isinstance(data, dict):
        return [s for k, v in data.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(data, list):
        return [s for item in data for s in _strings(item)]
    return []
