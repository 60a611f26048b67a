"""Prefect tasks over :mod:`crowdpref.questions`: build the question set, write
``questions.parquet``, and show what came out as artifacts in the Prefect UI."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE

from crowdpref.config import StudyConfig
from crowdpref.questions import QuestionSet, build_questions
from crowdpref.runfolder import write_parquet
from crowdpref.settings import Settings
from tasks.artifacts import which_rows

SAMPLE_PER_CATEGORY = 3
REJECTED_SHOWN = 100


# No Prefect retries: each LLM call is already retried by the openai client
# (questions.llm.max_retries), and everything else is deterministic, so a task retry would
# only repeat a failure. No caching either: the LLM's answers differ from run to run, and the
# run folder's questions.parquet (checked by the flow) is what marks this stage as done.
@task(name="build-questions", cache_policy=NONE)
def build_question_set(cfg: StudyConfig, settings: Settings) -> QuestionSet:
    """Gather, clean, de-duplicate and cap the study's questions; log warnings and a summary."""
    logger = get_run_logger()
    question_set = build_questions(cfg, settings)
    for warning in question_set.warnings:
        logger.warning(warning)
    logger.info(question_set.summary())
    return question_set


@task(name="write-questions", cache_policy=NONE, retries=2, retry_delay_seconds=1)
def write_questions(question_set: QuestionSet, path: Path) -> Path:
    """Write ``questions.parquet`` atomically (safe to retry: it replaces the whole file)."""
    return write_parquet(question_set.questions, path)


@task(name="question-artifacts", cache_policy=NONE)
def publish_question_artifacts(study: str, question_set: QuestionSet) -> None:
    """Table of counts per category, table of counts per source, a markdown sample of the
    questions and a table of what was not used (keys ``<study>-questions-...``)."""
    per_category = question_set.per_category()
    create_table_artifact(
        key=f"{study}-questions-per-category",
        table=[{"category": c, "questions": n} for c, n in per_category.items()],
        description=f"Questions per category ({sum(per_category.values())} in all).",
    )
    create_table_artifact(
        key=f"{study}-questions-sources",
        table=question_set.source_counts.to_dict(orient="records"),
        description="Per source: questions offered, rejected (invalid or duplicate), "
                    "sampled out (over per_category) and kept.",
    )
    create_markdown_artifact(
        key=f"{study}-questions-sample",
        markdown=sample_markdown(question_set),
        description=f"Up to {SAMPLE_PER_CATEGORY} questions per category.",
    )
    shown = question_set.rejected.head(REJECTED_SHOWN)
    rejected_rows = shown[["kind", "source", "where", "category", "question", "reason"]].to_dict(
        orient="records")
    create_table_artifact(
        key=f"{study}-questions-rejected",
        table=rejected_rows or [{"kind": "(none)", "reason": "every question offered was used"}],
        description=f"Questions not used, and why ({which_rows(REJECTED_SHOWN, len(question_set.rejected))}).",
    )


def sample_markdown(question_set: QuestionSet) -> str:
    """The first few questions of each category as markdown, with warnings on top."""
    lines = ["# Question sample", ""]
    if question_set.warnings:
        lines += ["**Warnings**", ""] + [f"- {w}" for w in question_set.warnings] + [""]
    for category, rows in question_set.questions.groupby("category", sort=False):
        lines += [f"## {category} ({len(rows)})", ""]
        lines += [f"- {row.question} _({row.source})_" for row in rows.head(SAMPLE_PER_CATEGORY).itertuples()]
        lines.append("")
    return "\n".join(lines)
