"""Commands that save and restore the state: ``backup`` and ``restore`` (restic snapshots)."""

from __future__ import annotations

import contextlib
from typing import Any

import typer

from crowdpref.cli.common import _settings, app, console, err_console, friendly_errors
from crowdpref.project import use_project


@app.command()
@friendly_errors
def backup(
    list_: bool = typer.Option(False, "--list", help="List the repository's crowdpref snapshots instead "
                               "(* marks this state folder's)."),
) -> None:
    """Take one backup snapshot with restic while the stack runs: the study store, the embedded
    Argilla's database, the secrets and the study run folders, encrypted, in the repository
    backup_repository (default <state>/backups/restic).

    The first backup creates the repository and, unless backup_password_file names one, its
    password file <state>/backup-password (0600): keep a copy off the server, no backup can be
    restored without it. Then this state folder's snapshots older than backup_retention_days (30)
    are forgotten (restic forget --prune)."""
    use_project()
    from services import backup as backups

    settings = _settings()
    if list_:
        listed = backups.snapshots(settings)
        for snap in listed:
            console.print(f"{'*' if snap.mine else ' '} {snap.short_id}  {snap.time[:19].replace('T', ' ')}  "
                          f"{snap.hostname}  {', '.join(snap.paths)}", highlight=False, soft_wrap=True)
        console.print(f"{len(listed)} snapshot(s) in {backups.redacted_repository(backups.repository(settings))}; "
                      f"* this state folder's ({backups.state_tag(settings)})", highlight=False, soft_wrap=True)
        return
    with _byte_progress() as (progress, on_progress):
        result = backups.create(settings, progress=on_progress)
        progress.stop()
    if result.initialised:
        err_console.print(f"[bold yellow]new backup repository[/] {result.repository}: its password is in "
                          f"{result.password_file}. Keep a copy of that file OFF this server: without it no "
                          "backup can be restored.", highlight=False, soft_wrap=True)
    held = ", ".join(f"{part} ({kind})" for part, kind in result.databases.items())
    console.print(f"backup snapshot {result.snapshot} saved in {result.repository} ({result.size / 1e6:.1f} MB, "
                  f"{result.files} files, {result.added / 1e6:.1f} MB new; databases: {held}) in "
                  f"{result.seconds:.1f} s; {len(result.forgotten)} snapshot(s) older than "
                  f"{settings.backup_retention_days:g} days forgotten", highlight=False, soft_wrap=True)


@app.command()
@friendly_errors
def restore(
    snapshot: str = typer.Argument("latest", help="A snapshot id (`crowdpref backup --list`); default: this "
                                   "state folder's latest."),
) -> None:
    """Restore a backup snapshot with the stack down (`crowdpref down` first).

    restic restores and verifies it into a temporary folder inside the state folder before
    anything is replaced: a wrong password, a missing snapshot or a damaged repository changes
    nothing. Then `crowdpref up` starts the restored state."""
    use_project()
    from services import backup as backups

    settings = _settings()
    with _byte_progress() as (progress, on_progress):
        result = backups.restore(settings, snapshot, progress=on_progress)
        progress.stop()
    console.print(f"restored snapshot {result.snapshot} (taken {result.created_at}; {result.files} files) into "
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
