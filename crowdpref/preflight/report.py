"""A pre-flight's result: one :class:`Check` per line (OK, WARN, FAIL or SKIP, what was seen, the
fix), gathered in a :class:`Report` that is printed, written atomically into the study's run
folder (``preflight.json``) and read back by the gate before a study is published on Prolific
(:mod:`crowdpref.preflight.gate`).

A report is a list of lines, in the order they were checked: whoever adds a check (the dress
rehearsal, ``--rehearse``) appends its lines; nothing else changes."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from crowdpref.errors import StateFileError

OK, WARN, FAIL, SKIP = "OK", "WARN", "FAIL", "SKIP"
Status = Literal["OK", "WARN", "FAIL", "SKIP"]
REPORT_FILE = "preflight.json"
"""The last pre-flight of a study, in its run folder (``<state>/studies/<name>/preflight.json``)."""
FORMAT = "crowdpref-preflight"
VERSION = 1


@dataclass(frozen=True)
class Check:
    """One line of the report. ``detail``: what was seen (never a secret); ``fix``: what to do
    about it (empty for OK)."""

    name: str
    status: Status
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status:<4}  {self.name}: {self.detail}"
        return f"{text} -> fix: {self.fix}" if self.fix and self.status in (FAIL, WARN) else text


def ok(name: str, detail: str) -> Check:
    return Check(name, OK, detail)


def warn(name: str, detail: str, fix: str) -> Check:
    return Check(name, WARN, detail, fix)


def fail(name: str, detail: str, fix: str) -> Check:
    return Check(name, FAIL, detail, fix)


def skip(name: str, detail: str) -> Check:
    return Check(name, SKIP, detail)


@dataclass
class Report:
    """Every line of one pre-flight of ``study``, and when it ran (epoch seconds)."""

    study: str
    profile: str  # laptop | public
    ran_at: float
    checks: list[Check] = field(default_factory=list)

    def add(self, *checks: Check) -> None:
        self.checks.extend(checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAIL]

    @property
    def warned(self) -> list[Check]:
        return [c for c in self.checks if c.status == WARN]

    @property
    def passed(self) -> bool:
        return not self.failed

    def verdict(self) -> str:
        if self.failed:
            return f"NO-GO: {len(self.failed)} FAIL, {len(self.warned)} WARN of {len(self.checks)} checks"
        return f"GO: no FAIL ({len(self.warned)} WARN) of {len(self.checks)} checks"

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "study": self.study, "profile": self.profile,
                "ran_at": self.ran_at, "ran_at_utc": utc(self.ran_at), "passed": self.passed,
                "checks": [asdict(c) for c in self.checks]}

    @classmethod
    def from_json(cls, data: Any) -> Report:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError("not a crowdpref pre-flight report")
        checks = [Check(str(c["name"]), c["status"], str(c.get("detail", "")), str(c.get("fix", "")))
                  for c in data.get("checks") or []]
        if any(c.status not in (OK, WARN, FAIL, SKIP) for c in checks):
            raise ValueError("a check with an unknown status")
        return cls(str(data["study"]), str(data.get("profile", "?")), float(data["ran_at"]), checks)

    def to_markdown(self) -> str:
        rows = "\n".join(f"| {c.status} | {_cell(c.name)} | {_cell(c.detail)} | {_cell(c.fix)} |" for c in self.checks)
        return (f"# Pre-flight of {self.study}: {self.verdict()}\n\nRan {utc(self.ran_at)} on the {self.profile} "
                f"profile.\n\n| status | check | seen | fix |\n|---|---|---|---|\n{rows}\n")

    def lines(self) -> list[str]:
        return [c.line() for c in self.checks]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(epoch))


def report_path(runs_dir: Path, study: str) -> Path:
    return Path(runs_dir) / study / REPORT_FILE


def write_report(report: Report, runs_dir: Path) -> Path:
    """Write the report atomically into the study's run folder; returns its path."""
    from crowdpref.runfolder import write_json

    return write_json(report.to_json(), report_path(runs_dir, report.study))


def read_report(runs_dir: Path, study: str) -> Report | None:
    """The study's last pre-flight report; None when none was written. A damaged file: a
    one-line error naming it and the fix."""
    path = report_path(runs_dir, study)
    if not path.exists():
        return None
    try:
        return Report.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StateFileError(f"{path}: the last pre-flight report cannot be read ({exc.__class__.__name__}): "
                             f"run `crowdpref preflight STUDY.yaml` again (it rewrites it)") from None
