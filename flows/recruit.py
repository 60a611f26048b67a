"""Recruitment: publish a study's collection on Prolific."""

from __future__ import annotations

from typing import Any, Literal

from prefect import flow

from crowdpref.config import load_study
from crowdpref.recruitment import auto_key
from crowdpref.runfolder import RunFolder
from crowdpref.settings import load_settings
from tasks.prolific import publish_prolific_study


@flow(name="recruit", log_prints=True)
def recruit(study: str = "studies/demo.yaml", key: Literal["auto", "study1", "study2"] = "auto",
            skip_preflight: bool = False, skipped_by: str | None = None) -> dict[str, Any]:
    """Create the collection's Prolific study and publish it - once: a second run finds the
    study it recorded (or, after a run killed mid-way, the one with its internal name) and
    never creates another. The external URL is the portal's entry with Prolific's
    placeholders; the completion code is the collection's. Study 1's completers join a
    participant group that study 2 blocklists. A paced launch (`prolific.studyN.launch`, the
    default) opens only its first step of places; each collection run and `sync-prolific` opens
    the next as people arrive, at the pace the server's measured capacity allows.

    `key: auto` (what `crowdpref run recruit STUDY` uses) recruits the collection that is
    being collected: study 2 once its pairs exist, else study 1 while its answers are not all
    in; in between it stops with a one-line message (run collect-ratings first). Returns a
    summary: key, Prolific study id, state and places.

    Needs PROLIFIC_TOKEN and `prolific.enabled: true` (a simulation recruits on the fake
    Prolific that `crowdpref demo` starts). On the real Prolific, publishing waits for a passed
    pre-flight less than a day old (`crowdpref preflight STUDY.yaml`); `skip_preflight` goes
    ahead and records who skipped it (`skipped_by`, else the OS user) in the study's events."""
    if key == "auto":
        config = load_study(study)
        key = auto_key(RunFolder.for_study(load_settings().runs_dir, config.name))  # type: ignore[assignment]
    summary = publish_prolific_study(study, key, skip_preflight, skipped_by)
    print(f"{key}: Prolific study {summary['state']}, {summary['places']} places")
    return summary
