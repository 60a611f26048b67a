"""Study 1, written responses: participants answer questions in their own Argilla workspace."""

from __future__ import annotations

from prefect import flow

from crowdpref.config import load_study
from crowdpref.runfolder import RunFolder
from crowdpref.settings import load_settings
from tasks.collection import advance_collection
from tasks.study1 import export_responses


@flow(name="collect-responses", log_prints=True)
def collect_responses(study: str = "studies/demo.yaml") -> str:
    """Keep K warm accounts ready for arriving participants (who claim their Q questions when
    they arrive), read back what participants submitted (with the portal receiving Argilla's
    webhooks: only those who worked since the last read, plus a slow backstop), release those who
    went quiet (their unanswered questions return to the pool for the next claim), and export
    `responses.parquet` once every question has its R answers.

    Never waits for people: returns "waiting" with the progress recorded, or "complete".
    Run it again (by hand or on a schedule) to advance the collection."""
    config = load_study(study)
    run = RunFolder.for_study(load_settings().runs_dir, config.name)
    return advance_collection(study, "study1", run.responses, export_responses, noun="answers")
