"""The screen-responses flow end to end on a temporary Prefect server (prefect_test_harness),
with the REAL detoxify loader on a tiny local checkpoint (tests/fakes/tiny_detoxify.py):
writes screening.parquet + screening.json, publishes the three artifacts, skips a rerun unless
forced, stops clearly without responses.parquet, and - only when the study configures it -
falls back to profanity-check, saying so in the artifacts. Needs no embedded Argilla."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from prefect.artifacts import Artifact

from crowdpref.contracts import RESPONSES
from crowdpref.errors import CrowdprefError
from crowdpref.runfolder import write_parquet
from flows.screen_responses import screen_responses
from tests.fakes.tiny_detoxify import (
    BENIGN_TEXTS,
    INSULT_TEXTS,
    LABELS,
    THREAT_TEXTS,
    TinyDetoxify,
    tiny_detoxify,  # noqa: F401 - the session fixture
)

TEXTS = [*BENIGN_TEXTS, *INSULT_TEXTS, *THREAT_TEXTS]


def write_study(folder: Path, name: str, screening: dict) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name,
        "study1": {"questions_per_participant": 2},
        "study2": {"pairs_per_participant": 2},
        "screening": screening,
    }), encoding="utf-8")
    return path


def write_responses(home: Path, name: str, texts: list[str]) -> pd.DataFrame:
    frame = pd.DataFrame({
        "response_id": [f"r_{i:016x}" for i in range(len(texts))],
        "question_id": [f"q_{i // 4:016x}" for i in range(len(texts))],
        "category": "empathy",
        "source": "simulated",
        "participant_key": [f"p_{i % 3:012x}" for i in range(len(texts))],
        "text": texts,
        "quality": 4,
        "submitted_at": pd.Timestamp("2026-01-01T12:00:00", tz="UTC"),
    })[RESPONSES]
    write_parquet(frame, home / "studies" / name / "responses.parquet")
    return frame


def test_flow_screens_writes_artifacts_then_skips_a_rerun(
        crowdpref_home: Path, tmp_path: Path, tiny_detoxify: TinyDetoxify) -> None:  # noqa: F811
    study = write_study(tmp_path, "screen-flow", {
        "checkpoint": str(tiny_detoxify.checkpoint), "device": "cpu", "batch_size": 3,
        "thresholds": {"toxicity": 0.5, "insult": 0.5, "threat": 0.5}, "policy": "flag",
    })
    with pytest.raises(CrowdprefError, match="responses.parquet: not found: run collect-responses first"):
        screen_responses(study=str(study))

    responses = write_responses(crowdpref_home, "screen-flow", TEXTS)
    path = screen_responses(study=str(study))
    assert path == crowdpref_home.resolve() / "studies" / "screen-flow" / "screening.parquet"
    screening = pd.read_parquet(path)
    assert list(screening.columns) == ["response_id", "model", *LABELS, "flagged", "flagged_labels"]
    assert screening["response_id"].tolist() == responses["response_id"].tolist()
    assert set(screening["model"]) == {"detoxify:checkpoint:tiny-detoxify.ckpt"}
    n_benign = len(BENIGN_TEXTS)
    assert not screening["flagged"][:n_benign].any() and screening["flagged"][n_benign:].all()
    assert screening["flagged_labels"].tolist()[n_benign:] == (
        ["toxicity,insult"] * len(INSULT_TEXTS) + ["toxicity,threat"] * len(THREAT_TEXTS))

    summary = json.loads((path.parent / "screening.json").read_text())
    assert summary["n_flagged"] == 4 and summary["policy"] == "flag"
    assert summary["flagged_per_label"] == {"toxicity": 4, "threat": 2, "insult": 2}
    assert summary["fallback_used"] is False and summary["limitations"]

    flagged = Artifact.get("screen-flow-screening-flagged")
    assert flagged is not None and flagged.type == "table"
    rows = {r["label"]: r["flagged"] for r in json.loads(flagged.data)}
    assert rows == {"toxicity": 4, "insult": 2, "threat": 2, "any (flagged)": 4}
    scores = Artifact.get("screen-flow-screening-scores")
    assert scores is not None and scores.type == "table"
    assert [r["label"] for r in json.loads(scores.data)] == list(LABELS)
    model = Artifact.get("screen-flow-screening-model")
    assert model is not None and model.type == "markdown"
    assert "detoxify:checkpoint:tiny-detoxify.ckpt" in model.data and "Device: cpu" in model.data
    assert "Limitations" in model.data and "FALLBACK" not in model.data

    written_at = path.stat().st_mtime_ns
    assert screen_responses(study=str(study)) == path  # skipped: file untouched
    assert path.stat().st_mtime_ns == written_at
    assert screen_responses(study=str(study), force=True) == path
    assert path.stat().st_mtime_ns != written_at
    pd.testing.assert_frame_equal(pd.read_parquet(path), screening, atol=1e-6)


def test_flow_falls_back_loudly_only_when_configured(
        crowdpref_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "empty-torch"))  # no released weights
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    texts = ["Thank you, that was a kind thing to say.", "Shut up, you fucking idiot."]

    strict = write_study(tmp_path, "screen-strict", {"device": "cpu"})
    write_responses(crowdpref_home, "screen-strict", texts)
    with pytest.raises(CrowdprefError, match="toxic_original-c1212f89.ckpt"):
        screen_responses(study=str(strict))
    assert not (crowdpref_home / "studies" / "screen-strict" / "screening.parquet").exists()

    study = write_study(tmp_path, "screen-fallback",
                        {"device": "cpu", "fallback": "profanity-check", "policy": "drop"})
    write_responses(crowdpref_home, "screen-fallback", texts)
    screening = pd.read_parquet(screen_responses(study=str(study)))
    assert list(screening.columns) == ["response_id", "model", "profanity", "flagged", "flagged_labels"]
    assert screening["flagged"].tolist() == [False, True] and len(screening) == 2
    model = Artifact.get("screen-fallback-screening-model")
    assert model is not None and "FALLBACK SCREENER IN USE" in model.data
    assert "MISSES hate speech" in model.data
