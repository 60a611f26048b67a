"""Prefect task over :mod:`services.backup`."""

from __future__ import annotations

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NONE

from crowdpref.settings import Settings
from services.backup import BackupResult, create, prune


@task(name="backup-archive", cache_policy=NONE, persist_result=False)
def backup_archive(settings: Settings, keep: int) -> BackupResult:
    """Write one archive, then delete the scheduled ones beyond the newest ``keep`` and those
    older than ``backup_retention_days``. Never cached: every run writes a new archive."""
    result = create(settings)
    deleted = prune(settings, keep)
    held = ", ".join(f"{part}: {kind}" for part, kind in result.databases.items())
    create_markdown_artifact(
        key="backup",
        markdown=(
            f"# Backup\n\n- archive: `{result.path}` ({result.size / 1e6:.1f} MB, {result.files} files, mode 0600)\n"
            f"- databases: {held}\n- took {result.seconds:.1f} s\n"
            f"- older archives deleted (keeping {keep}, none older than "
            f"{settings.backup_retention_days:g} days): {len(deleted)}\n"
        ),
        description="The state's backup archive: study store, Argilla's database, secrets, run folders.",
    )
    return result
