"""Screening flow: run every written answer of study 1 through the hate-speech classifier.
Reads ``responses.parquet``, writes ``screening.parquet`` (+ ``screening.json``) into the
study's run folder; aggregation and the dataset card read them from there."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from prefect import flow, unmapped

from crowdpref.config import ScreeningConfig, load_study
from crowdpref.runfolder import RunFolder, read_parquet
from crowdpref.screening import ScreeningResult, combine_results, split_for_workers
from crowdpref.settings import load_settings
from tasks.screening import (
    load_screening_model,
    publish_screening_artifacts,
    screen_answers,
    write_screening,
)


def screen_on_dask(responses: pd.DataFrame, cfg: ScreeningConfig) -> ScreeningResult:
    """Score chunks of the answers in parallel on a Dask cluster: a local one with
    ``screening.dask_workers`` processes, or the one at ``screening.dask_address``. Each worker
    loads the model once per chunk; the chunk results are merged in the original order."""
    from prefect_dask import DaskTaskRunner

    if cfg.dask_address:
        runner = DaskTaskRunner(address=cfg.dask_address)
    else:
        runner = DaskTaskRunner(cluster_kwargs={"n_workers": cfg.dask_workers, "threads_per_worker": 1,
                                                "processes": True, "dashboard_address": None})
    chunks = split_for_workers(responses, 2 * (cfg.dask_workers if not cfg.dask_address else 4))
    return screen_batches.with_options(task_runner=runner)(chunks, cfg, list(responses["response_id"]))


@flow(name="screen-batches", log_prints=True)
def screen_batches(chunks: list[pd.DataFrame], cfg: ScreeningConfig, order: list[str]) -> ScreeningResult:
    """Screen each chunk as its own task on the flow's task runner (Dask), then merge."""
    futures = screen_answers.map(chunks, unmapped(cfg), unmapped(None))
    return combine_results([future.result() for future in futures], order)


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
    if cfg.screening.enabled and cfg.screening.runner == "dask":
        result = screen_on_dask(responses, cfg.screening)
    else:
        screener = load_screening_model(cfg.screening) if cfg.screening.enabled else None
        result = screen_answers(responses, cfg.screening, screener)
    path = write_screening(result, run)
    publish_screening_artifacts(cfg.name, result)
    print(f"{result.summary()} -> {path}")
    return path
