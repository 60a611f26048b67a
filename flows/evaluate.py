"""Evaluation flow: does the preference data carry signal beyond answer length?"""

from __future__ import annotations

import re
from pathlib import Path

from prefect import flow

from crowdpref.config import EvaluationConfig, RewardModelConfig, load_study
from crowdpref.evaluation import EVALUATION_FILE, fine_tuned_line, truth_line
from crowdpref.runfolder import RunFolder
from crowdpref.settings import load_settings
from tasks.evaluate import (
    publish_evaluation_artifact,
    read_data,
    run_evaluation,
    write_evaluation,
)


@flow(name="evaluate", log_prints=True)
def evaluate(study: str = "studies/demo.yaml", release: str = "", force: bool = False, seed: int = 0,
             reward_model: str = "") -> Path:
    """Train small reward models (length only; TF-IDF + length; frozen sentence embeddings
    where a model is available locally) on part of the preferences, split by question, and
    score them on the held-out questions next to two controls that must sit at chance
    (shuffled labels; position only); bootstrap 95% intervals over questions, a learning
    curve, accuracy by category and by rater agreement, and a one-line verdict.

    ``study``: evaluate the study's run folder (preferences.parquet, ratings.parquet and a
    simulated crowd's hidden truth) with its ``evaluation`` settings and seed, writing
    ``evaluation.json`` and ``evaluation-learning-curve.png`` there. ``release`` (when given, instead): a
    published release folder or a Hub dataset id, evaluated with the default settings and
    ``seed``; the outputs go to ``<runs>/evaluations/<name>/``. An existing
    ``evaluation.json`` is kept unless ``force`` is true. ``reward_model`` (a Hugging Face model
    id or folder): also fine-tune it as a reward model (TRL; meant for a GPU), with the config's
    ``evaluation.reward_model`` settings when it has them, else their defaults. Returns its path."""
    settings = load_settings()
    if release:
        config, name = EvaluationConfig(), re.sub(r"[^a-z0-9]+", "-", release.lower()).strip("-")[-60:]
        folder, run_seed, run_folder = settings.runs_dir / "evaluations" / name, seed, None
    elif study:
        cfg = load_study(study)
        config, name = cfg.evaluation, cfg.name
        run_folder = RunFolder.for_study(settings.runs_dir, cfg.name).path
        folder, run_seed = run_folder, cfg.evaluation.seed if cfg.evaluation.seed is not None else cfg.seed
    else:
        raise ValueError("evaluate: give a study config or a release (folder or Hub dataset id)")
    if reward_model:
        tuned = (config.reward_model.model_copy(update={"model": reward_model}) if config.reward_model
                 else RewardModelConfig(model=reward_model))
        config = config.model_copy(update={"reward_model": tuned})
    target = folder / EVALUATION_FILE
    if target.exists() and not force:
        print(f"{target} already exists: skipping the evaluation (run with force=True to redo it)")
        return target
    data = read_data(run_folder=run_folder, release=release or None)
    result = run_evaluation(data, config, run_seed)
    path = write_evaluation(result, folder)
    publish_evaluation_artifact(name, result)
    print(f"verdict: {result.verdict} -> {path}")
    if result.truth:
        print(truth_line(result.truth))
    if result.fine_tuned:
        print(fine_tuned_line(result.fine_tuned))
    return path
