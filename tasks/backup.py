"""Prefect task over :mod:`services.backup`."""

from __future__ import annotations

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NONE

from crowdpref.settings import Settings
from services.backup import BackupResult, create


@task(name="backup-snapshot", cache_policy=NONE, persist_result=False)
def backup_snapshot(settings: Settings) -> BackupResult:
    """Take one restic snapshot, then forget this state folder's snapshots older than
    ``backup_retention_days``. Never cached: every run takes a new snapshot."""
    result = create(settings)
    held = ", ".join(f"{part}: {kind}" for part, kind in result.databases.items())
    new = (f"\n- **new repository**: its password is in `{result.password_file}`; keep a copy of that file off "
           "this server\n" if result.initialised else "\n")
    create_markdown_artifact(
        key="backup",
        markdown=(
            f"# Backup\n\n- snapshot `{result.snapshot}` in `{result.repository}` ({result.size / 1e6:.1f} MB, "
            f"{result.files} files, {result.added / 1e6:.1f} MB new)\n"
            f"- databases: {held}\n- took {result.seconds:.1f} s\n"
            f"- snapshots older than {settings.backup_retention_days:g} days forgotten: "
            f"{len(result.forgotten)}{new}"
        ),
        description="The state's backup snapshot: study store, Argilla's database, secrets, run folders.",
    )
    return result
