"""Commands that write and check a study config: ``validate`` and ``new-study``."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.table import Table

from crowdpref.cli.common import _settings, app, console, friendly_errors


@app.command()
@friendly_errors
def validate(study: Path = typer.Argument(..., help="A study config, e.g. studies/demo.yaml.")) -> None:
    """Check a study config and print what it will do. Exit 2 with one line if it is invalid."""
    _validate(study)


def _validate(study: Path) -> None:
    from crowdpref.config import load_study
    from crowdpref.config.explain import dropout_warnings, validation_rows
    from crowdpref.launch_pacing import launch_report
    from crowdpref.preflight.host import read_capacity
    from crowdpref.recruitment import recruits_on_prolific

    config = load_study(study)
    if config.participants != "simulated" or config.crowd.arrive_via == "prolific":  # they come through the portal
        from crowdpref.portal.argilla_session import check_participants_way_in

        check_participants_way_in(_settings())  # one line where the portal could not hand them an Argilla session
    launch_rows: list[tuple[str, str]] = []
    launch_warnings: list[str] = []
    if recruits_on_prolific(config):  # the pace against this server's measured capacity (<state>/capacity.json)
        launch_rows, launch_warnings = launch_report(config, read_capacity(_settings().state_dir))
    table = Table(title=f"{study}: valid")
    table.add_column("setting")
    table.add_column("value")
    for label, value in validation_rows(config) + launch_rows:
        table.add_row(label, str(value))
    console.print(table)
    for line in dropout_warnings(config) + launch_warnings:  # warnings, not errors: the config is valid
        print(line, file=sys.stderr)


@app.command("new-study")
@friendly_errors
def new_study(
    name: str = typer.Argument(..., help="The study's name, e.g. my-pilot (its config file is NAME.yaml)."),
    participants: str = typer.Option(..., "--participants", help="invite (links you hand out) or prolific."),
    out: Path | None = typer.Option(None, "--out", help="Where to write it (a file or a folder); default: the "
                                    "portal's studies folder (setting portal_studies), where the portal serves it."),
) -> None:
    """Write a config for a study with real people - a drop-out window of 45 minutes, onboarding
    on, no simulated crowd - refusing to overwrite a file, then validate it."""
    from crowdpref.config.templates import write_new_study

    folder = out if out is not None else Path(_settings().portal_studies).expanduser()
    path = write_new_study(name, participants, folder)
    print(f"wrote {path}")
    _validate(path)
    print(f"next: change what you need in {path}, then check it again with `crowdpref validate {path}`")
