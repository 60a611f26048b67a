"""The pre-flight report as a Prefect artifact (``<study>-preflight``): what ``crowdpref
preflight`` found, line by line, next to the study's runs in the UI. The report itself is
:mod:`crowdpref.preflight`'s; its file is ``<run>/preflight.json``."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact

from crowdpref.preflight import Report, read_report
from crowdpref.settings import load_settings
from tasks.artifacts import artifact_key


def preflight_artifact(report: Report) -> Any:
    """A markdown artifact of ``report`` (also outside a flow run: the CLI makes one when the
    Prefect server answers); returns its id."""
    return create_markdown_artifact(
        key=artifact_key(report.study, "preflight"),
        markdown=report.to_markdown(),
        description=f"Pre-flight of the server for {report.study}: {report.verdict()}",
    )


@task(name="preflight-report")
def show_preflight(study_name: str) -> str:
    """The study's last pre-flight report as an artifact of this run; what it says in one line
    (no report: says so - publishing on the real Prolific will ask for one)."""
    report = read_report(load_settings().runs_dir, study_name)
    if report is None:
        return "no pre-flight report yet: run `crowdpref preflight STUDY.yaml` before publishing on Prolific"
    preflight_artifact(report)
    return report.verdict()
