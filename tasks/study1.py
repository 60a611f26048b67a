"""Prefect tasks specific to study 1 (the shared ones are in tasks/collection.py)."""

from __future__ import annotations

from prefect import task

from crowdpref.config import load_study
from crowdpref.crowd import CrowdReport, SimulatedCrowd, check_may_play, open_answer_writer
from crowdpref.crowd_arrivals import open_door
from crowdpref.runfolder import RunFolder
from crowdpref.settings import load_settings
from crowdpref.studies import open_collection
from crowdpref.study1 import export_responses as export_responses_to
from tasks.collection import publish_validation
from tasks.retries import NETWORK


@task(name="export-responses", **NETWORK)
def export_responses(study: str) -> str:
    """responses.parquet and the validation report, once every question has its R answers."""
    collection = open_collection(study, "study1")
    frame, report = export_responses_to(collection, collection.folder.parent)
    publish_validation(collection.spec.study_name, "study1", report)
    return str(collection.folder.parent / "responses.parquet")


@task(name="simulate-study1-crowd")
def simulate_study1_crowd(study: str, dropouts: list[str] | None = None, force: bool = False) -> CrowdReport:
    """Simulated participants arrive and claim work as people do, then answer what is pending
    (not retried: a retry would be a second visit by the same people, which the next scheduled
    run does anyway). Refuses a study that takes real participants unless ``force``."""
    config = load_study(study)
    settings = load_settings()
    collection = open_collection(study, "study1")
    check_may_play(config, collection, force)
    check = config.study1.attention_check
    run = RunFolder.for_study(settings.runs_dir, config.name)
    writer = open_answer_writer(config.crowd, settings)
    crowd = SimulatedCrowd(config.crowd, config.seed, dropouts=dropouts, writer=writer)
    return crowd.play_study1(
        collection,
        settings.argilla_api_url,
        collection.spec.questions,  # type: ignore[attr-defined]
        run.private_dir / "crowd-truth-study1.parquet",
        attention_answer=check.expected if check else None,
        door=open_door(config, settings, collection),
    )
