"""Prefect tasks over :mod:`crowdpref.evaluation`: read the data (a run folder, a release
folder or a Hub dataset id), run the evaluation, write ``evaluation.json`` and the plot, and
publish the table and the verdict as a Markdown artifact."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NONE

from crowdpref.config import EvaluationConfig
from crowdpref.evaluation import (
    EvalData,
    EvaluationResult,
    evaluate,
    from_release,
    from_run_folder,
    load_encoder,
    markdown,
    write_outputs,
)
from crowdpref.evaluation.finetune import FineTune
from tasks.artifacts import artifact_key


@task(name="read-evaluation-data", cache_policy=NONE, retries=2, retry_delay_seconds=1)
def read_data(run_folder: Path | None = None, release: str | None = None) -> EvalData:
    """The run folder's preferences (with ratings and the simulated crowd's truth when there),
    or a published release (a folder or a Hub dataset id)."""
    if release is not None:
        return from_release(release)
    assert run_folder is not None
    return from_run_folder(run_folder)


@task(name="evaluate-preferences", cache_policy=NONE, log_prints=False)
def run_evaluation(data: EvalData, config: EvaluationConfig, seed: int) -> EvaluationResult:
    """Split, fit, score; deterministic for a seed, so not retried. Not ``log_prints``: dill
    (under ``datasets``, under TRL) reads the disassembly it prints to a captured stdout, which
    Prefect's print-to-log would send to the run's log instead."""
    logger = get_run_logger()
    encoder, skipped = load_encoder(config.embedding_model)
    fine_tune = None if config.reward_model is None else FineTune(**config.reward_model.model_dump())
    if fine_tune is not None:
        logger.info("fine-tuning %s as a reward model (TRL RewardTrainer; device %s)",
                    fine_tune.model, fine_tune.device)
    result = evaluate(data, seed=seed, test_share=config.test_share,
                      bootstrap_samples=config.bootstrap_samples, encoder=encoder,
                      encoder_skipped=skipped, fine_tune=fine_tune)
    for line in [*result.skipped, *result.warnings]:
        logger.warning(line)
    return result


@task(name="write-evaluation", cache_policy=NONE, retries=2, retry_delay_seconds=1)
def write_evaluation(result: EvaluationResult, folder: Path) -> Path:
    """The plot and ``evaluation.json`` (atomic: safe to retry)."""
    path, plot = write_outputs(result, folder)
    if plot is None:
        get_run_logger().warning("matplotlib is not installed: no learning-curve plot "
                                 "(pip install matplotlib)")
    return path


@task(name="evaluation-artifact", cache_policy=NONE)
def publish_evaluation_artifact(name: str, result: EvaluationResult) -> None:
    """The table of models and controls, the learning curve and the verdict."""
    create_markdown_artifact(key=artifact_key(name, "evaluation"), markdown=markdown(result),
                             description=result.verdict[:250])
