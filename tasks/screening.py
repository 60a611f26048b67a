"""Prefect tasks over :mod:`crowdpref.screening`: load the classifier, screen the answers,
write ``screening.parquet`` (+ ``screening.json`` for the dataset card) and show the flags,
the score distribution and the model's limitations as artifacts."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE

from crowdpref.config import ScreeningConfig
from crowdpref.runfolder import RunFolder, write_json, write_parquet
from crowdpref.screening import Screener, ScreeningResult, load_screener, screen_responses

SCREENING_SUMMARY = "screening.json"
"""Beside screening.parquet: model, device, thresholds, counts and limitations (for the card)."""


# No retries: the model is read from local files (the loader never downloads here), so a
# missing or broken file stays missing on a retry, and the error already says how to fix it.
# The loaded model is not persisted as a task result (hundreds of MB of weights).
@task(name="load-screening-model", cache_policy=NONE, persist_result=False)
def load_screening_model(cfg: ScreeningConfig) -> Screener:
    """detoxify (or, only if the study configures it, the profanity-check fallback - warned)."""
    logger = get_run_logger()
    screener = load_screener(cfg, precision=cfg.precision)
    for warning in screener.warnings:
        logger.warning(warning)
    logger.info(f"screening model: {screener.model} on {screener.device}: {screener.description}")
    return screener


# No retries: scoring is deterministic; a failure (bad text, out of memory) would repeat.
@task(name="screen-answers", cache_policy=NONE, persist_result=False)
def screen_answers(responses: pd.DataFrame, cfg: ScreeningConfig,
                   screener: Screener | None) -> ScreeningResult:
    """Score every answer (length-sorted batches), apply the thresholds; log progress."""
    logger = get_run_logger()
    step = max(1, len(responses) // 10)
    next_report = [step]

    def progress(done: int, total: int) -> None:
        if done >= next_report[0] or done == total:
            logger.info(f"screened {done}/{total} answers")
            next_report[0] = done + step

    result = screen_responses(responses, cfg, screener=screener, progress=progress)
    for warning in result.warnings[len(screener.warnings) if screener else 0:]:
        logger.warning(warning)
    logger.info(result.summary())
    return result


@task(name="write-screening", cache_policy=NONE, retries=2, retry_delay_seconds=1)
def write_screening(result: ScreeningResult, run: RunFolder) -> Path:
    """``screening.parquet`` and ``screening.json``, atomically (safe to retry)."""
    write_json(result.card_summary(), run.file(SCREENING_SUMMARY))
    return write_parquet(result.frame, run.screening)


@task(name="screening-artifacts", cache_policy=NONE)
def publish_screening_artifacts(study: str, result: ScreeningResult) -> None:
    """Flagged counts per label (table), the score distribution per label (table) and the
    model, device, policy and limitations (markdown); keys ``<study>-screening-...``."""
    create_table_artifact(
        key=f"{study}-screening-flagged",
        table=flagged_rows(result),
        description=f"Answers at or above each label's threshold ({result.model}); "
                    f"policy {result.policy}.",
    )
    dist = result.distribution()
    create_table_artifact(
        key=f"{study}-screening-scores",
        table=dist.astype(object).where(dist.notna(), None).to_dict(orient="records")
        or [{"label": "(none)", "note": "screening disabled: no scores"}],
        description="Score distribution per label: mean, quantiles and counts per 0.1-wide bin.",
    )
    create_markdown_artifact(
        key=f"{study}-screening-model",
        markdown=model_markdown(result),
        description="Which classifier screened the answers, where, and what it misses.",
    )


def flagged_rows(result: ScreeningResult) -> list[dict[str, object]]:
    n = result.n_responses
    if not result.enabled:
        return [{"label": "(screening disabled)", "threshold": None, "flagged": 0, "share": None}]
    rows: list[dict[str, object]] = [
        {"label": label, "threshold": result.thresholds[label], "flagged": count,
         "share": round(count / n, 4) if n else None}
        for label, count in result.counts.items()
    ]
    rows.append({"label": "any (flagged)", "threshold": None, "flagged": result.n_flagged,
                 "share": round(result.n_flagged / n, 4) if n else None})
    return rows


def model_markdown(result: ScreeningResult) -> str:
    lines = ["# Screening model", ""]
    if result.fallback_used:
        lines += ["**FALLBACK SCREENER IN USE - detoxify could not be loaded.**", ""]
    lines += [
        f"- Model: `{result.model}`",
        f"- Device: {result.device}",
        f"- Policy: {result.policy}",
        f"- Answers screened: {result.n_responses}"
        + (f" in {result.seconds:.1f} s ({result.n_responses / result.seconds:.1f} texts/s)"
           if result.seconds > 0 else ""),
        "",
    ]
    return "\n".join(lines) + result.card_markdown()
