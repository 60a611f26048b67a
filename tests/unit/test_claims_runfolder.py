"""The run folder's writes are atomic and private files are owner-only (docs/tutorial/demo.md,
the run folder: every stage "writes its own atomically", ``private/`` is never published;
docs/explanation/privacy.md: ``private/`` files 0600; the module docstring of
crowdpref/runfolder.py: "a crash never leaves a half-written output that a rerun would mistake
for a finished stage"). And every stage writes through it."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pandas as pd
import pytest

from crowdpref.runfolder import write_json, write_parquet, write_text

REPO = Path(__file__).resolve().parents[2]


class Crash(BaseException):
    """A kill in the middle of a write (nothing catches a BaseException)."""


def _half_written_parquet(self: pd.DataFrame, path, *args, **kwargs) -> None:
    Path(path).write_bytes(b"PAR1 half a file")
    raise Crash()


def _leftovers(folder: Path, name: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != name)


def test_a_crash_mid_write_leaves_the_old_output_whole_and_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "responses.parquet"
    old = pd.DataFrame({"response_id": ["r_1", "r_2"], "text": ["a", "b"]})
    write_parquet(old, target)

    monkeypatch.setattr(pd.DataFrame, "to_parquet", _half_written_parquet)
    with pytest.raises(Crash):
        write_parquet(pd.DataFrame({"response_id": ["r_3"], "text": ["c"]}), target)
    monkeypatch.undo()

    pd.testing.assert_frame_equal(pd.read_parquet(target), old)
    assert _leftovers(tmp_path, target.name) == []


def test_a_crash_before_the_first_write_leaves_no_output_a_rerun_could_take_for_finished(tmp_path, monkeypatch):
    target = tmp_path / "screening.parquet"
    monkeypatch.setattr(pd.DataFrame, "to_parquet", _half_written_parquet)
    with pytest.raises(Crash):
        write_parquet(pd.DataFrame({"x": [1]}), target)
    assert not target.exists() and _leftovers(tmp_path, target.name) == []


def test_a_crash_mid_json_write_keeps_the_old_json(tmp_path, monkeypatch):
    target = tmp_path / "aggregation.json"
    write_json({"pairs": 72}, target)

    def crash(self: Path, text: str, *args, **kwargs) -> int:
        Path.write_bytes(self, text[: len(text) // 2].encode())
        raise Crash()

    monkeypatch.setattr(Path, "write_text", crash)
    with pytest.raises(Crash):
        write_json({"pairs": 36, "more": list(range(100))}, target)
    monkeypatch.undo()
    assert target.read_text(encoding="utf-8") == '{\n  "pairs": 72\n}'
    assert _leftovers(tmp_path, target.name) == []


def test_private_files_are_0600_in_a_0700_folder(tmp_path):
    private = tmp_path / "run" / "private"
    private.mkdir(parents=True, mode=0o755)
    write_json({"salt": "x"}, private / "participant-key-salt.json", private=True)
    write_text("secret", private / "other", private=True)
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    for name in ("participant-key-salt.json", "other"):
        assert stat.S_IMODE((private / name).stat().st_mode) == 0o600, name


def test_every_stage_writes_through_the_run_folder():
    """No module of the library, the tasks or the flows writes a stage file directly (which
    would not be atomic); the release is built in a staging folder and swapped in whole."""
    direct = re.compile(r"\.to_parquet\(|\.to_json\(\s*[^)\s]|\.to_csv\(|json\.dump\(|\.write_text\(|\.write_bytes\(")
    offenders = []
    for folder in ("crowdpref", "tasks", "flows"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path.name == "runfolder.py" or "migrations" in path.parts:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if direct.search(line) and not line.lstrip().startswith("#"):
                    offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    # the one allowed: the dataset card, written into the release's staging folder
    allowed = [o for o in offenders if o.startswith("crowdpref/release/build.py") and "staging" in o]
    assert sorted(set(offenders) - set(allowed)) == []
