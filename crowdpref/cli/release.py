"""The release's command: ``privacy-review`` (list or decide the flagged answers and questions)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from crowdpref.cli.common import _settings, app, console, friendly_errors
from crowdpref.errors import CrowdprefError


@app.command("privacy-review")
@friendly_errors
def privacy_review(
    study: Path = typer.Argument(..., help="The study config, e.g. studies/my-study.yaml."),
    decide: str = typer.Option(None, "--decide", help="keep, mask or drop: set this decision on the rows "
                               "named by --row, or on every undecided row.", show_default=False),
    row: list[str] = typer.Option([], "--row", help="A row id of the review file (answer:<id> or "
                                  "question:<id>); repeat for several.", show_default=False),
) -> None:
    """List the privacy review's flagged answers and questions (ids, kinds found, decisions), or
    decide them. The texts stay in the review file (<run>/private/privacy-review.json, owner-only):
    read them there before deciding; publish-dataset publishes once every row is decided."""
    from crowdpref.config import load_study
    from crowdpref.release.review import decide as set_decision
    from crowdpref.release.review import read_review, review_file
    from crowdpref.runfolder import RunFolder

    config = load_study(study)
    path = review_file(RunFolder.for_study(_settings().runs_dir, config.name))
    if row and not decide:
        raise CrowdprefError("--row needs --decide keep|mask|drop")
    if decide:
        changed, left = set_decision(path, decide, row)
        console.print(f"{path}: {changed} row(s) set to {decide}; {left} undecided", highlight=False)
        return
    rows = read_review(path)
    if not rows:
        console.print(f"{path}: no flagged answer or question (the last build found none)", highlight=False)
        return
    table = Table(title=str(path))
    for column in ("id", "found", "decision"):
        table.add_column(column)
    for row_id, item in rows.items():
        kinds = item.get("kinds") if isinstance(item.get("kinds"), dict) else {}
        table.add_row(row_id, ", ".join(f"{k} {n}" for k, n in kinds.items()),
                      str(item.get("decision") or "UNDECIDED"))
    console.print(table)
