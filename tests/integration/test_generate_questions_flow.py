"""The generate-questions flow end to end on a temporary Prefect server (prefect_test_harness):
writes questions.parquet into the study's run folder, publishes artifacts, skips a rerun
unless forced, and tops categories up through the LLM (the real openai client against the
fake server). Needs no embedded Argilla services."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from prefect.artifacts import Artifact

from crowdpref.questions import QUESTION_COLUMNS
from flows.generate_questions import generate_questions
from tests.fakes.openai_server import FakeOpenAIServer

REPO = Path(__file__).resolve().parents[2]
DEMO_STUDY = REPO / "studies" / "demo.yaml"

def test_flow_writes_the_demo_questions_then_skips_a_rerun(crowdpref_home: Path) -> None:
    path = generate_questions(study=str(DEMO_STUDY))
    assert path == crowdpref_home.resolve() / "studies" / "demo" / "questions.parquet"
    questions = pd.read_parquet(path)
    assert tuple(questions.columns) == QUESTION_COLUMNS
    assert len(questions) == 12 and questions["question_id"].is_unique
    assert questions["category"].value_counts().to_dict() == dict.fromkeys(
        ["empathy", "conflict-resolution", "social-norms", "humour", "figurative-language", "ethics"], 2)
    assert set(questions["source"]) == {"bank"}

    per_category = Artifact.get("demo-questions-per-category")
    assert per_category is not None and per_category.type == "table"
    sample = Artifact.get("demo-questions-sample")
    assert sample is not None and questions["question"].iloc[0] in sample.data

    written_at = path.stat().st_mtime_ns
    assert generate_questions(study=str(DEMO_STUDY)) == path  # skipped: file untouched
    assert path.stat().st_mtime_ns == written_at
    assert generate_questions(study=str(DEMO_STUDY), force=True) == path
    assert path.stat().st_mtime_ns != written_at
    assert pd.read_parquet(path).equals(questions)  # same seed, same questions


def test_flow_tops_up_with_the_llm(crowdpref_home: Path, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    study = tmp_path / "llm.yaml"
    study.write_text(
        "name: llm-flow\n"
        "questions:\n"
        "  categories: [trust, kindness]\n"
        "  per_category: 13\n"
        "  llm: {enabled: true, max_retries: 0, timeout_s: 10}\n"
        "study1: {questions_per_participant: 2}\n"
        "study2: {pairs_per_participant: 2}\n",
        encoding="utf-8",
    )
    with FakeOpenAIServer(questions_per_reply=1) as server:
        monkeypatch.setenv("CROWDPREF_OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("CROWDPREF_OPENAI_API_KEY", server.api_key)
        monkeypatch.setenv("CROWDPREF_OPENAI_MODEL", "fake-model")
        path = generate_questions(study=str(study))
    questions = pd.read_parquet(path)
    assert questions["category"].value_counts().to_dict() == {"trust": 13, "kindness": 13}
    assert questions["source"].value_counts().to_dict() == {"bank": 24, "llm:fake-model": 2}
    sources = Artifact.get("llm-flow-questions-sources")
    assert sources is not None
    assert {row["source"] for row in json.loads(sources.data)} == {"bank", "llm:fake-model"}
