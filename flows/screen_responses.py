"""Screening flow: run every written answer of study 1 through the hate-speech classifier.
Reads ``responses.parquet``, writes ``screening.parquet`` (+ ``screening.json``) into the
study's run folder; aggregation and the dataset card read them from there."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from crowdpref.config import load_study
from crowdpref.runfolder import RunFolder, read_parquet
from crowdpref.settings import load_settings
from tasks.screening import (
    load_screening_model,
    publish_screening_artifacts,
    screen_answers,
    write_screening,
)


@flow(name="screen-responses", log_prints=True)
def screen_responses(study: str = "studies/demo.yaml", force: bool = False) -> Path:
    """Score every answer in ``responses.parquet`` with detoxify (``screening.model``, or the
    local ``screening.checkpoint``) in length-sorted batches, flag those at or above a label's
    threshold and write ``<runs>/<study>/screening.parquet``: response_id, model, one score
    column per label, flagged, flagged_labels. Flagged answers are kept (``policy: flag``, as
    in the published study) or left out of the preference data later (``policy: drop``).

    Weights are never downloaded here: missing ones stop the flow with a one-line error naming
    the file and how to provide it - unless the study sets ``fallback: profanity-check``, which
    then screens with alt-profanity-check and says so loudly (log, artifacts, card).

    Artifacts: ``<study>-screening-flagged`` (counts per label), ``<study>-screening-scores``
    (score distribution), ``<study>-screening-model`` (model, device, limitations).

    An existing ``screening.parquet`` is kept (the stage is done) unless ``force`` is true.
    Returns the path of ``screening.parquet``.
    """
    cfg = load_study(study)
    run = RunFolder.for_study(load_settings().runs_dir, cfg.name)
    if run.screening.exists() and not force:
        print(f"{run.screening} already exists: skipping screening "
              "(run with force=True to screen again)")
        return run.screening
    responses = read_parquet(run.responses, needed_by="run collect-responses first "
                                                      "(study 1 must be complete)")
    screener = load_screening_model(cfg.screening) if cfg.screening.enabled else None
    result = screen_answers(responses, cfg.screening, screener)
    path = write_screening(result, run)
    publish_screening_artifacts(cfg.name, result)
    print(f"{result.summary()} -> {path}")
    return path
