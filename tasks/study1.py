"""Prefect tasks specific to study 1 (the shared ones are in tasks/collection.py)."""

from __future__ import annotations

import pandas as pd
from prefect import task
from prefect.artifacts import create_table_artifact

from crowdpref.config import load_study
from crowdpref.runfolder import RunFolder, write_parquet
from crowdpref.settings import load_settings
from crowdpref.simulation.arrivals import open_door
from crowdpref.simulation.crowd import CrowdReport, SimulatedCrowd, check_may_play, open_answer_writer
from crowdpref.studies import open_collection
from crowdpref.study1 import export_responses as export_responses_to
from crowdpref.work_quality import answer_flags, describe_flags, flag_counts, flagged_rows
from tasks.artifacts import artifact_key
from tasks.collection import publish_validation
from tasks.retries import NETWORK


@task(name="export-responses", **NETWORK)
def export_responses(study: str) -> str:
    """responses.parquet and the validation report, once every question has its R answers."""
    collection = open_collection(study, "study1")
    frame, report = export_responses_to(collection, collection.folder.parent)
    publish_validation(collection.spec.study_name, "study1", report)
    flag_answers(frame, RunFolder(collection.folder.parent), collection.spec.study_name)
    return str(collection.folder.parent / "responses.parquet")


ANSWER_FLAGS_FILE = "answer_flags.parquet"


def flag_answers(responses: pd.DataFrame, run: RunFolder, study_name: str) -> pd.DataFrame:
    """answer_flags.parquet in the run folder (see :func:`crowdpref.work_quality.answer_flags`)
    and a table of the flagged answers (ids, flags, text cut to 80 characters)."""
    flags = answer_flags(responses)
    write_parquet(flags, run.file(ANSWER_FLAGS_FILE))
    counts = flag_counts(flags)
    create_table_artifact(
        key=artifact_key(study_name, "study1-answer-flags"),
        table=flagged_rows(flags, responses),
        description=f"study1: {describe_flags(counts)} (for review; nothing is dropped; all answers' flags in "
                    f"{ANSWER_FLAGS_FILE})",
    )
    return flags


@task(name="simulate-study1-crowd")
def simulate_study1_crowd(study: str, dropouts: list[str] | None = None, force: bool = False) -> CrowdReport:
    """Simulated participants arrive and claim work as people do, then answer what is pending
    (not retried: a retry would be a second visit by the same people, which the next scheduled
    run does anyway). Refuses a study that takes real participants unless ``force``."""
    config = load_study(study)
    settings = load_settings()
    collection = open_collection(study, "study1")
    check_may_play(config, collection, force)
    run = RunFolder.for_study(settings.runs_dir, config.name)
    writer = open_answer_writer(config.crowd, settings)
    crowd = SimulatedCrowd(config.crowd, config.seed, dropouts=dropouts, writer=writer)
    return crowd.play_study1(
        collection,
        settings.argilla_api_url,
        collection.spec.questions,  # type: ignore[attr-defined]
        run.private_dir / "crowd-truth-study1.parquet",
        door=open_door(config, settings, collection, onboard=crowd.onboarding_walker(config, "study1")),
    )
