"""crowdpref.errors.first_line: the one helper that turns an exception into one short line for
an error message or a log line, and the only place that rule is written."""

from __future__ import annotations

import re
from pathlib import Path

from crowdpref.errors import first_line

ROOT = Path(__file__).resolve().parents[2]


def test_first_line_is_the_first_non_blank_line_cut_to_the_limit() -> None:
    exc = ValueError("\n  line one is long\nline two")
    assert first_line(exc) == "line one is long"
    assert first_line(exc, 8) == "line one"
    assert first_line(ValueError("x" * 500)) == "x" * 200
    assert first_line(ValueError("x" * 500), None) == "x" * 500


def test_an_exception_without_text_is_named_by_its_class() -> None:
    assert first_line(KeyError()) == "KeyError"
    assert first_line(ValueError("  \n ")) == "ValueError"
    assert first_line(KeyError(), with_type=True) == "KeyError"
    assert first_line(OSError("disk full\nmore"), with_type=True) == "OSError: disk full"


def test_no_copy_of_the_rule_is_left() -> None:
    """``str(exc).splitlines()`` written out again (issue 31 found eight copies)."""
    copy = re.compile(r"str\((exc|err|error|e)\)(\.strip\(\))?\.splitlines\(\)")
    found = [f"{path.relative_to(ROOT)}:{n}" for folder in ("crowdpref", "services", "tasks", "flows", "deployments")
             for path in sorted((ROOT / folder).rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if copy.search(line) and path != ROOT / "crowdpref" / "errors.py"]
    assert not found, f"use crowdpref.errors.first_line instead: {found}"
