"""Backup flow: one archive of the study store, Argilla's database, the secrets and the run
folders (:mod:`services.backup`), taken while the stack runs. Its deployment's schedule (every
6 hours) is inactive like every other; turn it on for a live study."""

from __future__ import annotations

from prefect import flow

from crowdpref.settings import load_settings
from tasks.backup import backup_archive


@flow(name="backup", log_prints=True)
def backup(keep: int = 28) -> str:
    """Write ``<state>/backups/crowdpref-<UTC time>.tar.gz`` and keep the newest ``keep`` such
    archives (28: a week at the 6-hour schedule). Returns the archive's path."""
    result = backup_archive(load_settings(), keep)
    print(f"backup written: {result.path} ({result.size / 1e6:.1f} MB, {result.files} files) in {result.seconds:.1f} s")
    return str(result.path)
