"""Recruitment: publish a study's collection on Prolific."""

from __future__ import annotations

from typing import Literal

from prefect import flow

from crowdpref.config import load_study
from crowdpref.runfolder import RunFolder
from crowdpref.settings import load_settings
from tasks.prolific import publish_prolific_study


@flow(name="recruit", log_prints=True)
def recruit(study: str = "studies/demo.yaml", key: Literal["auto", "study1", "study2"] = "auto") -> str:
    """Create the collection's Prolific study and publish it - once: a second run finds the
    study it recorded (or, after a run killed mid-way, the one with its internal name) and
    never creates another. The external URL is the portal's entry with Prolific's
    placeholders; the completion code is the collection's. Study 1's completers join a
    participant group that study 2 blocklists. `key: auto` recruits study 2 once study 1's
    export exists, else study 1. Returns the Prolific study id.

    Needs PROLIFIC_TOKEN and `prolific.enabled: true` (a simulation recruits on the fake
    Prolific that `crowdpref demo` starts)."""
    if key == "auto":
        config = load_study(study)
        run = RunFolder.for_study(load_settings().runs_dir, config.name)
        key = "study2" if run.responses.exists() else "study1"
    study_id = publish_prolific_study(study, key)
    print(f"{key}: Prolific study published")
    return study_id
