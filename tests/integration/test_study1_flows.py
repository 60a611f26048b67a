"""The study-1 flows as a team runs them: collect-responses provisions and ends "waiting"
while people work, simulate-crowd answers, the operator drops a participant with
`crowdpref drop`, the next collect run re-allocates, and the collection completes with exactly
R answers per question. Artifacts carry progress but never a password."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from crowdpref.cli import app
from crowdpref.runfolder import write_parquet
from tests.integration.test_study1_collection import _questions

pytestmark = pytest.mark.integration


def _write_study(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name,
        "seed": 5,
        "study1": {"responses_per_question": 2, "questions_per_participant": 3, "inactive_after_minutes": 600,
                   "attention_check": {"position": 2, "text": "Please answer with the word blue, then rate 3.",
                                       "expected": "blue"}},
        "study2": {"pairs_per_participant": 6},
        "crowd": {"dropout_rate": 0, "low_effort_rate": 0, "offensive_rate": 0},
    }))
    return path


def test_collect_simulate_drop_reallocate_complete(prefect_harness, study_env, tmp_path, unique):
    from prefect.client.orchestration import get_client

    from flows.collect_responses import collect_responses
    from flows.simulate_crowd import simulate_crowd

    name = f"f{unique}"
    study = str(_write_study(tmp_path, name))
    run_dir = study_env / "studies" / name
    write_parquet(_questions(), run_dir / "questions.parquet")

    assert collect_responses(study) == "waiting"
    ledger = json.loads((run_dir / "study1" / "ledger.json").read_text())
    usernames = [p["username"] for p in ledger["participants"]]
    assert len(usernames) == 4 and all(p["status"] == "provisioned" for p in ledger["participants"])

    quitter = usernames[2]
    assert simulate_crowd(study, dropouts=[quitter]) < 16  # 4 participants x (3 questions + the check)
    assert collect_responses(study) == "waiting"

    dropped = CliRunner().invoke(app, ["drop", quitter, "--study", study])
    assert dropped.exit_code == 0, dropped.output
    assert collect_responses(study) == "waiting"  # released, re-allocated, new account provisioned
    ledger = json.loads((run_dir / "study1" / "ledger.json").read_text())
    statuses = {p["username"]: p["status"] for p in ledger["participants"]}
    assert statuses[quitter] == "released" and statuses[f"{name}-s1-0005"] == "provisioned"

    simulate_crowd(study, dropouts=[quitter])
    assert collect_responses(study) == "complete"
    responses = pd.read_parquet(run_dir / "responses.parquet")
    assert responses.groupby("question_id").size().tolist() == [2] * 6
    assert collect_responses(study) == "complete"  # a rerun does nothing
    validation = json.loads((run_dir / "study1" / "validation.json").read_text())
    assert validation["valid"], validation["anomalies"]
    # the quitter was released before answering the check (its record left their dataset);
    # every other participant answered it as asked
    assert validation["attention_check"]["answered"] == validation["attention_check"]["passed"] >= 3
    assert validation["attention_check"]["failed_participant_keys"] == []

    roster = json.loads((run_dir / "private" / "study1-roster.json").read_text())
    passwords = [entry["password"] for entry in roster.values()]

    async def artifacts() -> list:
        async with get_client() as client:
            return await client.read_artifacts()

    import asyncio

    found = asyncio.run(artifacts())
    keys = {a.key for a in found}
    assert {f"{name}-study1-progress", f"{name}-study1-participants", f"{name}-study1-provisioning",
            f"{name}-study1-validation"} <= keys
    text = json.dumps([a.model_dump(mode="json") for a in found])
    assert not any(password in text for password in passwords)


def test_drop_of_unknown_participant_is_one_line(prefect_harness, study_env, tmp_path, unique):
    name = f"g{unique}"
    study = str(_write_study(tmp_path, name))
    write_parquet(_questions(), study_env / "studies" / name / "questions.parquet")
    result = CliRunner().invoke(app, ["drop", f"{name}-s1-9999", "--study", study])
    assert result.exit_code == 1
    assert f"no participant '{name}-s1-9999'" in result.output
