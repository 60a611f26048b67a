"""Question-generation flow: the first stage of a study. Writes ``questions.parquet`` into the
study's run folder; later stages read it from there."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from crowdpref.config import load_study
from crowdpref.runfolder import RunFolder
from crowdpref.settings import load_settings
from tasks.questions import build_question_set, publish_question_artifacts, write_questions


@flow(name="generate-questions", log_prints=True)
def generate_questions(study: str = "studies/demo.yaml", force: bool = False) -> Path:
    """Build the study's questions from the curated bank, its question files and (when enabled)
    an LLM; drop invalid and duplicate ones; cap each category at ``questions.per_category``;
    write ``<runs>/<study>/questions.parquet`` and publish counts and a sample as artifacts.

    An existing ``questions.parquet`` is kept (the stage is done) unless ``force`` is true.
    Returns the path of ``questions.parquet``.
    """
    cfg = load_study(study)
    settings = load_settings()
    run_folder = RunFolder.for_study(settings.runs_dir, cfg.name)
    if run_folder.questions.exists() and not force:
        print(f"{run_folder.questions} already exists: skipping question generation "
              "(run with force=True to rebuild it)")
        return run_folder.questions
    question_set = build_question_set(cfg, settings)
    path = write_questions(question_set, run_folder.questions)
    publish_question_artifacts(cfg.name, question_set)
    print(f"{question_set.summary()} -> {path}")
    return path
