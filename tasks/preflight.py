"""The pre-flight report as a Prefect artifact (``<study>-preflight``): what ``crowdpref
preflight`` found, line by line, next to the study's runs in the UI. The report itself is
:mod:`crowdpref.preflight`'s; its file is ``<run>/preflight.json``."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import ArtifactCreate
from prefect.events.worker import EventsWorker

from crowdpref.preflight import Report, read_report
from crowdpref.settings import load_settings
from tasks.artifacts import artifact_key


def preflight_artifact(report: Report) -> Any:
    """A markdown artifact of ``report``; returns its id. Outside a flow run (the CLI makes one
    when the Prefect server answers) through the API client: Prefect deprecates
    ``create_markdown_artifact`` there."""
    key, markdown = artifact_key(report.study, "preflight"), report.to_markdown()
    description = f"Pre-flight of the server for {report.study}: {report.verdict()}"
    if get_run_context() is not None:
        return create_markdown_artifact(key=key, markdown=markdown, description=description)
    with get_client(sync_client=True) as client:
        made = client.create_artifact(ArtifactCreate(key=key, type="markdown", data=markdown,
                                                     description=description)).id
    # the client queues an "artifact created" event: sent now, not drained at exit with a warning
    EventsWorker.drain_all(timeout=10)
    return made


def get_run_context() -> Any:
    """The flow or task run this runs in (None: none)."""
    from prefect.context import FlowRunContext, TaskRunContext

    return TaskRunContext.get() or FlowRunContext.get()


@task(name="preflight-report")
def show_preflight(study_name: str) -> str:
    """The study's last pre-flight report as an artifact of this run; what it says in one line
    (no report: says so - publishing on the real Prolific will ask for one)."""
    report = read_report(load_settings().runs_dir, study_name)
    if report is None:
        return "no pre-flight report yet: run `crowdpref preflight STUDY.yaml` before publishing on Prolific"
    preflight_artifact(report)
    return report.verdict()
