"""Backup flow: one restic snapshot of the study store, Argilla's database, the secrets and the
run folders (:mod:`services.backup`), taken while the stack runs, then the retention (snapshots
older than ``backup_retention_days`` forgotten). Its deployment's schedule (every 6 hours) is
inactive like every other; turn it on for a live study."""

from __future__ import annotations

from prefect import flow

from crowdpref.settings import load_settings
from tasks.backup import backup_snapshot


@flow(name="backup", log_prints=True)
def backup() -> str:
    """Take one snapshot into the backup repository (``backup_repository``, default
    ``<state>/backups/restic``) and forget this state folder's snapshots older than
    ``backup_retention_days``. Returns the snapshot's id."""
    result = backup_snapshot(load_settings())
    print(f"backup snapshot {result.snapshot} saved in {result.repository} ({result.size / 1e6:.1f} MB, "
          f"{result.files} files) in {result.seconds:.1f} s; {len(result.forgotten)} old snapshot(s) forgotten")
    return result.snapshot
