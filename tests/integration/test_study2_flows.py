"""The collect-ratings flow as a team runs it: from a complete study-1 export it pairs the
answers, provisions raters and ends "waiting"; the simulated raters rate; the next run exports
ratings.parquet with exactly R ratings per pair and publishes the pairs, progress and per-rater
artifacts."""

from __future__ import annotations

import asyncio

import pandas as pd
import pytest
import yaml

from crowdpref.runfolder import write_json, write_parquet
from tests.integration.test_study2_collection import _study1_export

pytestmark = pytest.mark.integration


def test_collect_ratings_flow(prefect_harness, study_env, tmp_path, unique):
    from prefect.client.orchestration import get_client

    from flows.collect_ratings import collect_ratings
    from flows.simulate_crowd import simulate_crowd

    name = f"r{unique}"
    study = tmp_path / f"{name}.yaml"
    study.write_text(yaml.safe_dump({
        "name": name, "seed": 2, "participants": "simulated",
        "study1": {"responses_per_question": 4, "questions_per_participant": 2},
        "study2": {"ratings_per_pair": 3, "pairs_per_participant": 6},
        "crowd": {"dropout_rate": 0, "random_clicker_rate": 0, "never_start_rate": 0, "arrivals_per_visit": 6},
    }))
    run_dir = study_env / "studies" / name
    questions, responses, hidden = _study1_export(2, 4)
    write_parquet(questions, run_dir / "questions.parquet")
    write_parquet(responses, run_dir / "responses.parquet")
    write_json({"valid": True}, run_dir / "study1" / "validation.json")
    write_parquet(pd.DataFrame({"response_id": list(hidden), "hidden_quality": list(hidden.values())}),
                  run_dir / "private" / "crowd-truth-responses.parquet")

    assert collect_ratings(str(study)) == "waiting"
    pairs = pd.read_parquet(run_dir / "pairs.parquet")
    assert len(pairs) == 12
    assert simulate_crowd(str(study))["submitted"] == 36  # auto: study 1 is exported, so raters play
    assert collect_ratings(str(study)) == "complete"
    ratings = pd.read_parquet(run_dir / "ratings.parquet")
    assert ratings.groupby("pair_id").size().tolist() == [3] * 12
    assert ratings["rater_key"].nunique() == 6
    assert collect_ratings(str(study)) == "complete"

    async def keys() -> set[str]:
        async with get_client() as client:
            return {a.key for a in await client.read_artifacts(artifact_filter=_ours(name))}

    assert {f"{name}-study2-pairs-per-question", f"{name}-study2-progress", f"{name}-study2-participants",
            f"{name}-study2-ratings-per-rater", f"{name}-study2-validation"} <= asyncio.run(keys())


def test_collect_ratings_without_study1_is_a_clear_error(prefect_harness, study_env, tmp_path, unique):
    from flows.collect_ratings import collect_ratings

    study = tmp_path / "x.yaml"
    study.write_text(yaml.safe_dump({"name": f"x{unique}", "study2": {"pairs_per_participant": 6}}))
    with pytest.raises(Exception, match="responses.parquet: not found: run collect-responses until study 1 is complete"):
        collect_ratings(str(study))


def _ours(name: str):
    """Only this test's artifacts (the session's Prefect holds every test's: an unfiltered read
    is cut off at the server's page limit)."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    return ArtifactFilter(key=ArtifactFilterKey(like_=f"{name}-"))
