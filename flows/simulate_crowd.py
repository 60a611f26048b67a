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
) -> int:
    """Simulated participants log in to Argilla and work through what is pending in their
    datasets, through the annotator API a browser uses: writers answer questions (study 1),
    raters compare answer pairs (study 2). Some drop out, some answer carelessly or rudely, some
    raters click at random - as configured in the study's `crowd` section. `stage: auto` plays
    study 1 until its export exists, then study 2. Returns the number of items submitted."""
    if stage == "auto":
        config = load_study(study)
        run = RunFolder.for_study(load_settings().runs_dir, config.name)
        stage = "study2" if run.responses.exists() else "study1"
    play = simulate_study1_crowd if stage == "study1" else simulate_study2_crowd
    report = play(study, dropouts)
    print(f"{stage}: {report.participants_played} participants played, {report.answers_submitted} submitted, "
          f"{len(report.dropouts)} drop-outs, kinds {report.kinds}")
    return report.answers_submitted
