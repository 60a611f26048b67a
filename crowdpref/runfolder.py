"""A study's run folder: every stage reads and writes its files here, so a stage can be rerun
alone and a finished stage is recognised by its output file.

Writes are atomic (temporary file in the same folder, then rename), so a crash never leaves a
half-written output that a rerun would mistake for a finished stage."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from crowdpref.errors import CrowdprefError


@dataclass(frozen=True)
class RunFolder:
    """``<state>/studies/<study name>/``; file names say what they hold."""

    path: Path

    @classmethod
    def for_study(cls, runs_dir: Path, study_name: str) -> RunFolder:
        return cls(runs_dir / study_name)

    def file(self, name: str) -> Path:
        return self.path / name

    # stage outputs (one obvious name each)
    @property
    def questions(self) -> Path:
        return self.file("questions.parquet")

    @property
    def responses(self) -> Path:
        return self.file("responses.parquet")

    @property
    def pairs(self) -> Path:
        return self.file("pairs.parquet")

    @property
    def ratings(self) -> Path:
        return self.file("ratings.parquet")

    @property
    def screening(self) -> Path:
        return self.file("screening.parquet")

    @property
    def preferences(self) -> Path:
        return self.file("preferences.parquet")

    @property
    def private_dir(self) -> Path:
        """Files that must never be published (key salt, participant key mapping, the crowd's truth)."""
        return self.file("private")


@contextmanager
def _atomic_target(path: Path) -> Iterator[Path]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def write_parquet(df: pd.DataFrame, path: Path) -> Path:
    """Write ``df`` to ``path`` atomically (no index)."""
    with _atomic_target(path) as tmp:
        df.to_parquet(tmp, index=False)
    return path


def read_parquet(path: Path, needed_by: str) -> pd.DataFrame:
    """Read a stage output; a missing file is a clear error naming the stage to run first."""
    if not path.exists():
        raise CrowdprefError(f"{path}: not found: {needed_by}")
    return pd.read_parquet(path)


def write_text(text: str, path: Path, private: bool = False) -> Path:
    """Write text atomically; ``private`` files are created 0600 in a 0700 folder (secrets,
    credentials, key mappings: never readable by other users, not even for a moment)."""
    with _atomic_target(path) as tmp:
        if private:
            os.chmod(path.parent, 0o700)
            os.chmod(tmp, 0o600)
        tmp.write_text(text, encoding="utf-8")
    return path


def write_json(data: Any, path: Path, private: bool = False) -> Path:
    """Write JSON atomically (see :func:`write_text` for ``private``)."""
    return write_text(json.dumps(data, indent=2, default=str), path, private=private)
