"""The aggregate-ratings flow on a temporary Prefect server (prefect_test_harness) with fixture
files in a private run folder: writes preferences.parquet (contract columns) and
aggregation.json, publishes artifacts, reports the agreement with the hidden truth, skips a
rerun unless forced, and names the stage to run first when an input is missing. Needs no
embedded Argilla services."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from prefect.artifacts import Artifact

from crowdpref.contracts import PREFERENCES
from crowdpref.errors import CrowdprefError
from flows.aggregate_ratings import aggregate_ratings
from tests.fakes.study_fixtures import make_study


def write_study(tmp_path: Path, name: str, **aggregation: object) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name,
        "study2": {"ratings_per_pair": 3, "scale_points": 8},
        "screening": {"policy": "flag"},
        "aggregation": {"bradley_terry": True, **aggregation},
    }))
    return str(path)


def test_flow_writes_preferences_and_stats_then_skips_a_rerun(crowdpref_home: Path, tmp_path: Path) -> None:
    study = write_study(tmp_path, "agg-flow")
    fixture = make_study(n_questions=12, noise=1.0, flagged_rate=0.2, seed=8)
    run_dir = crowdpref_home / "studies" / "agg-flow"
    fixture.write(run_dir)

    path = aggregate_ratings(study=study)
    assert path.resolve() == (run_dir / "preferences.parquet").resolve()
    prefs = pd.read_parquet(path)
    assert list(prefs.columns) == PREFERENCES
    assert len(prefs) == len(fixture.pairs)  # 3 ratings on an 8-point scale never tie
    assert (prefs["mean_rating"] < 4.5).all() and prefs["margin"].between(0, 1, inclusive="right").all()
    assert prefs["chosen_flagged"].any() or prefs["rejected_flagged"].any()

    stats = json.loads((run_dir / "aggregation.json").read_text())
    assert stats["kept"] == len(prefs) and stats["pairs"] == len(fixture.pairs)
    assert stats["alpha"] > 0.5
    assert stats["truth"]["share"] > 0.75 and stats["truth"]["compared"] > 0
    assert {row["category"] for row in stats["per_category"]} == set(fixture.pairs["category"])
    assert stats["bradley_terry_questions"] == 12

    markdown = Artifact.get("agg-flow-aggregation-stats")
    assert markdown is not None and "Krippendorff" in markdown.data
    for key in ("agg-flow-aggregation-per-category", "agg-flow-aggregation-ties-incomplete",
                "agg-flow-aggregation-bradley-terry"):
        artifact = Artifact.get(key)
        assert artifact is not None and artifact.type == "table", key

    written_at = path.stat().st_mtime_ns
    assert aggregate_ratings(study=study) == path  # skipped: file untouched
    assert path.stat().st_mtime_ns == written_at
    aggregate_ratings(study=study, force=True)
    assert pd.read_parquet(path).equals(prefs)  # deterministic


def test_flow_reports_incomplete_pairs_and_drops_them_by_policy(crowdpref_home: Path, tmp_path: Path) -> None:
    study = write_study(tmp_path, "agg-drop", incomplete_pairs="drop")
    fixture = make_study(n_questions=4, seed=2)
    short = fixture.pairs["pair_id"].iloc[0]
    fixture.ratings = fixture.ratings.drop(fixture.ratings.index[fixture.ratings["pair_id"] == short][:1])
    run_dir = crowdpref_home / "studies" / "agg-drop"
    fixture.write(run_dir, screening=False, truth=False)

    prefs = pd.read_parquet(aggregate_ratings(study=study))
    assert short not in set(prefs["pair_id"]) and len(prefs) == len(fixture.pairs) - 1
    assert not prefs[["chosen_flagged", "rejected_flagged"]].any().any()
    stats = json.loads((run_dir / "aggregation.json").read_text())
    assert stats["incomplete_pairs"] == 1 and stats["incomplete_dropped"] == 1 and stats["truth"] is None
    report = Artifact.get("agg-drop-aggregation-ties-incomplete")
    assert report is not None and short in report.data


def test_missing_input_names_the_stage_to_run(crowdpref_home: Path, tmp_path: Path) -> None:
    study = write_study(tmp_path, "agg-missing")
    fixture = make_study(n_questions=2, seed=1)
    run_dir = crowdpref_home / "studies" / "agg-missing"
    fixture.write(run_dir)
    (run_dir / "ratings.parquet").unlink()
    with pytest.raises(CrowdprefError, match="ratings.parquet: not found: run the collect-ratings flow first"):
        aggregate_ratings(study=study)
    assert not (run_dir / "preferences.parquet").exists()
