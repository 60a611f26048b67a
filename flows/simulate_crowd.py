"""A simulated crowd plays the provisioned participants (demo and tests)."""

from __future__ import annotations

from typing import Literal

from prefect import flow

from crowdpref.config import load_study
from crowdpref.runfolder import RunFolder
from crowdpref.settings import load_settings
from tasks.study1 import simulate_study1_crowd
from tasks.study2 import simulate_study2_crowd


@flow(name="simulate-crowd", log_prints=True)
def simulate_crowd(
    study: str = "studies/demo.yaml",
    dropouts: list[str] | None = None,
    stage: Literal["auto", "study1", "study2"] = "auto",
    force: bool = False,
) -> dict[str, int | bool]:
    """Simulated participants arrive and claim work exactly as people do (the same claim the
    portal makes), log in to Argilla and work through their datasets through the annotator API
    a browser uses: writers answer questions (study 1), raters compare answer pairs (study 2).
    Some never start, some go quiet part-way, some answer carelessly or rudely, some raters
    click at random - as configured in the study's `crowd` section. `stage: auto` plays study 1
    until its export exists, then study 2. Returns what happened at this visit: items
    `submitted`, participants who `arrived`, who `left` through Prolific (returned or timed out:
    their work is free again), who `finished` with their completion code, and whether the study
    was `full` for a newcomer.

    Refuses a study whose config takes real participants (`participants: prolific` or
    `invite`) unless `force` is set."""
    if stage == "auto":
        config = load_study(study)
        run = RunFolder.for_study(load_settings().runs_dir, config.name)
        stage = "study2" if run.responses.exists() else "study1"
    play = simulate_study1_crowd if stage == "study1" else simulate_study2_crowd
    report = play(study, dropouts, force)
    print(f"{stage}: {report.arrived} arrived{' (study full)' if report.full else ''}, "
          f"{report.screened_out} screened out by the onboarding quiz, "
          f"{report.participants_played} participants played, {report.answers_submitted} submitted, "
          f"{report.finished} finished with their code, {len(report.never_started)} never started, "
          f"{len(report.dropouts)} drop-outs, kinds {report.kinds}")
    return {"submitted": report.answers_submitted, "arrived": report.arrived, "left": report.left,
            "finished": report.finished, "full": report.full, "screened_out": report.screened_out}
