"""Commands that save and restore the state: ``backup`` and ``restore``."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import typer

from crowdpref.cli.common import _settings, app, console, err_console, friendly_errors
from crowdpref.project import use_project


@app.command()
@friendly_errors
def backup(
    to: Path = typer.Option(None, "--to", help="Write the archive here instead of "
                            "<state>/backups/crowdpref-YYYYmmddTHHMMSSZ.tar.gz.", show_default=False),
) -> None:
    """Write one backup archive while the stack runs: the study store, the embedded Argilla's
    database, the secrets and the study run folders, with a manifest of sizes and sha256.

    The archive holds passwords and keys: it is written owner-only (mode 0600); keep it private.
    Then the archives of <state>/backups/ older than backup_retention_days (30) are deleted."""
    use_project()
    from services import backup as backups

    settings = _settings()
    with _byte_progress() as (progress, on_progress):
        result = backups.create(settings, to, progress=on_progress)
        progress.stop()
    deleted = backups.prune(settings)
    held = ", ".join(f"{part} ({kind})" for part, kind in result.databases.items())
    console.print(f"backup written: {result.path} ({result.size / 1e6:.1f} MB, {result.files} files; databases: "
                  f"{held}; mode 0600) in {result.seconds:.1f} s; {len(deleted)} archive(s) older than "
                  f"{settings.backup_retention_days:g} days deleted", highlight=False, soft_wrap=True)


@app.command()
@friendly_errors
def restore(
    archive: Path = typer.Argument(..., help="An archive `crowdpref backup` wrote."),
) -> None:
    """Restore a backup archive with the stack down (`crowdpref down` first).

    The manifest and every file's sha256 are checked in a temporary folder before anything is
    replaced: a damaged archive changes nothing. Then `crowdpref up` starts the restored state."""
    use_project()
    from services import backup as backups

    settings = _settings()
    with _byte_progress() as (progress, on_progress):
        result = backups.restore(settings, archive, progress=on_progress)
        progress.stop()
    console.print(f"restored {result.archive} (taken {result.created_at}; {result.files} files) into "
                  f"{settings.state_dir} in {result.seconds:.1f} s: run `crowdpref up`", highlight=False,
                  soft_wrap=True)


@contextlib.contextmanager
def _byte_progress() -> Any:
    """A rich progress bar and the ``progress(what, done, total)`` callback that moves it."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeElapsedColumn(), console=err_console, transient=True,
                  disable=not err_console.is_terminal) as progress:
        task = progress.add_task("starting", total=1)

        def on_progress(what: str, done: int, total: int) -> None:
            progress.update(task, description=what, completed=done, total=max(total, 1))

        yield progress, on_progress
