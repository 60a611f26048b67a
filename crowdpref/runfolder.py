"""A study's run folder: every stage reads and writes its files here, so a stage can be rerun
alone and a finished stage is recognised by its output file.

Writes are atomic (temporary file in the same folder, then rename), so a crash never leaves a
half-written output that a rerun would mistake for a finished stage."""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import tempfile
import time
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
    def release(self) -> Path:
        """The dataset release in Hub layout (``publish-dataset``); see :func:`repair_release`."""
        return self.file(RELEASE_DIR)

    @property
    def private_dir(self) -> Path:
        """Files that must never be published (key salt, participant key mapping, the crowd's truth)."""
        return self.file("private")


def _umask() -> int:
    """The process's umask, read without setting it (os.umask would change it for every thread)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o077  # unknown: the strict choice


@contextmanager
def _atomic_target(path: Path) -> Iterator[Path]:
    """A temporary file beside ``path``, renamed over it when the block ends without error. It
    gets the mode a plain ``open`` would give (``0666`` less the umask), not mkstemp's 0600: the
    portal reads stage outputs the flows write, as its own user on a server
    (services/privileges.py); what must stay the writer's own is written ``private``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_umask())
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


# --- the release folder: swapped in whole, never missing -------------------------------------
RELEASE_DIR = "release"
STAGING_PREFIX = ".release-staging-"
"""A release being written (incomplete until renamed to :data:`READY_PREFIX`)."""
READY_PREFIX = ".release-ready-"
"""A release completely written and scanned, waiting to be swapped in."""
OLD_PREFIX = ".release-old-"
"""The previous release, moved aside during a swap."""
LOCK_FILE = ".release.lock"


def _stamp() -> str:
    """Sorts by creation time (nanoseconds, zero-padded) and never collides."""
    return f"{time.time_ns():020d}-{secrets.token_hex(3)}"


@contextmanager
def release_lock(run_path: Path) -> Iterator[None]:
    """Serialise builds, swaps and repairs of one run folder's release (an exclusive ``flock``
    on ``<run>/.release.lock``): while it is held, any staging folder not made by the holder is
    a leftover of a killed build."""
    run_path.mkdir(parents=True, exist_ok=True)
    with open(run_path / LOCK_FILE, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    if path.exists() or path.is_symlink():
        raise CrowdprefError(f"{path}: cannot remove a leftover release folder: check its "
                             "permissions, then delete it by hand")


def repair_release(run_path: Path) -> Path | None:
    """Bring ``<run>/release/`` back after a build or swap was killed, and clean what it left.
    Call with :func:`release_lock` held.

    - ``release/`` missing: the newest complete copy takes its place - a scanned
      ``.release-ready-*`` (the swap was killed after moving the old release aside) or else the
      newest ``.release-old-*`` (the previous release);
    - then every ``.release-staging-*`` (an incomplete build), ``.release-ready-*`` and
      ``.release-old-*`` is deleted.

    Every step is one ``os.replace`` or a deletion of a folder that is not ``release/``, so a
    kill inside the repair leaves a state the next repair finishes. Returns the release folder,
    or None when there is none (nothing was ever built)."""
    target = run_path / RELEASE_DIR
    if not run_path.is_dir():
        return None
    leftovers = sorted(p for p in run_path.iterdir() if p.is_dir() and p.name.startswith(
        (STAGING_PREFIX, READY_PREFIX, OLD_PREFIX)))
    if not target.exists():
        ready = [p for p in leftovers if p.name.startswith(READY_PREFIX)]
        old = [p for p in leftovers if p.name.startswith(OLD_PREFIX)]
        candidate = (ready or old or [None])[-1]  # names sort by time: the newest last
        if candidate is not None:
            os.replace(candidate, target)
            leftovers.remove(candidate)
    for path in leftovers:
        _rmtree(path)
    return target if target.is_dir() else None


def new_release_staging(run_path: Path) -> Path:
    """A fresh staging folder for a release build (public: mode 0755)."""
    staging = run_path / f"{STAGING_PREFIX}{_stamp()}"
    staging.mkdir(mode=0o755)
    os.chmod(staging, 0o755)  # whatever the umask: the release is meant to be public
    return staging


def swap_in_release(run_path: Path, staging: Path) -> Path:
    """Make the complete, scanned ``staging`` folder ``<run>/release/``. Call with
    :func:`release_lock` held. Three renames, so ``release/`` always exists or can be put back
    by :func:`repair_release`:

    1. ``staging`` -> ``.release-ready-<stamp>`` (marks it complete);
    2. ``release`` -> ``.release-old-<stamp>`` (when there is one);
    3. ``.release-ready-<stamp>`` -> ``release``;

    then the old copy is deleted. A kill between 2 and 3 leaves no ``release/`` for a moment:
    the next :func:`repair_release` (the start of every build and push) moves the ready copy in."""
    target = run_path / RELEASE_DIR
    stamp = _stamp()
    ready = run_path / f"{READY_PREFIX}{stamp}"
    os.replace(staging, ready)
    old = None
    if target.exists():
        old = run_path / f"{OLD_PREFIX}{stamp}"
        os.replace(target, old)
    os.replace(ready, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)  # a leftover is cleaned by the next repair
    return target
