"""The Prolific backstop: reconcile submissions with the study store."""

from __future__ import annotations

from typing import Any

from prefect import flow

from crowdpref.config import load_study
from crowdpref.recruitment import cap_note
from crowdpref.settings import load_settings
from crowdpref.store import open_store
from tasks.prolific import sync_prolific_submissions


@flow(name="sync-prolific", log_prints=True)
def sync_prolific(study: str = "studies/demo.yaml") -> dict[str, Any]:
    """For each collection of the study that has a Prolific study: release the work of
    returned, timed-out and rejected submissions that the webhooks did not bring (a lost or
    late webhook), approve the submissions whose work crowdpref verified (complete, checks
    passed, not too fast: `prolific.auto_approve`; otherwise they are listed for review in an
    artifact; a completion code alone never approves), and raise places when freed work waits
    for nobody, up to the budget cap (`prolific.studyN.max_places`). Safe to run any time; scheduled every 10 minutes (inactive until you
    resume it in the UI)."""
    config = load_study(study)
    store = open_store(load_settings())
    try:
        keys = [key for key in ("study1", "study2")
                if (info := store.find_collection(config.name, key)) is not None and store.platform_study(info.id)]
    finally:
        store.close()
    rows = {key: sync_prolific_submissions(study, key) for key in keys}
    for key, row in rows.items():
        print(f"{key}: " + ", ".join(f"{k} {v}" for k, v in row.items() if k != "study"))
        if row.get("places capped at"):
            print(f"{key}: {cap_note(key, row['places capped at'], row['places short'])}")
    return rows
