"""The study-1 flows as a team runs them: collect-responses fills the account pool and ends
"waiting" while nobody has arrived; simulated participants arrive and claim; the operator drops
a participant with `crowdpref drop` WHILE a collection run is in flight (the drop survives:
no lost update); the next arrival takes the released work, and the collection completes with
exactly R answers per question. Artifacts carry progress but never a password."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from crowdpref.cli import app
from crowdpref.collection import Collection
from crowdpref.account_passwords import AccountPasswords
from crowdpref.settings import load_settings
from crowdpref.store import open_store
from crowdpref.runfolder import write_parquet
from tests.integration.test_study1_collection import _questions

pytestmark = pytest.mark.integration


def _write_study(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name,
        "seed": 5,
        "participants": "simulated",
        "study1": {"responses_per_question": 2, "questions_per_participant": 3, "inactive_after_minutes": 600,
                   "pool_size": 2,
                   "checks": {"count": 1}},
        "study2": {"pairs_per_participant": 6},
        "crowd": {"dropout_rate": 0, "low_effort_rate": 0, "offensive_rate": 0, "never_start_rate": 0,
                  "arrivals_per_visit": 4, "careless_rate": 0},
    }))
    return path


def test_collect_simulate_drop_reallocate_complete(prefect_harness, study_env, tmp_path, unique, monkeypatch):
    from prefect.client.orchestration import get_client

    from flows.collect_responses import collect_responses
    from flows.simulate_crowd import simulate_crowd

    name = f"f{unique}"
    study = str(_write_study(tmp_path, name))
    run_dir = study_env / "studies" / name
    write_parquet(_questions(), run_dir / "questions.parquet")

    assert collect_responses(study) == "waiting"
    store = open_store(load_settings())
    info = store.find_collection(name, "study1")
    assert store.participants(info.id) == []  # nobody holds work before they arrive
    assert [a.state for a in store.accounts(info.id)] == ["ready", "ready"]  # the warm pool
    assert store.get_meta(f"filters:{name}") is not None  # the filter rules, recorded as collection began

    # four participants arrive and claim; sim-study1-0003 answers one question and goes quiet
    assert simulate_crowd(study, dropouts=["sim-study1-0003"])["submitted"] < 16  # 4 x (3 questions + the check)
    participants = store.participants(info.id)
    assert len(participants) == 4 and {p.source for p in participants} == {"simulated"}
    quitter = participants[2].username

    # the operator drops the quitter while a collection run is in flight (between its read of
    # the participant's answers and its writes): the drop must survive the run
    original = Collection._read_progress
    dropped = {}

    def drop_mid_run(self, participant):
        if participant.username == quitter and not dropped:
            dropped["result"] = CliRunner().invoke(app, ["drop", quitter, "--study", study])
        return original(self, participant)

    monkeypatch.setattr(Collection, "_read_progress", drop_mid_run)
    assert collect_responses(study) == "waiting"
    monkeypatch.setattr(Collection, "_read_progress", original)
    assert dropped["result"].exit_code == 0, dropped["result"].output
    assert store.participant(info.id, quitter).status == "released"  # released by the very run in flight

    simulate_crowd(study, dropouts=["sim-study1-0003"])  # a fifth participant arrives and takes the released work
    assert collect_responses(study) == "complete"
    newcomer = store.participants(info.id)[-1]
    assert newcomer.username != quitter and len(store.participants(info.id)) == 5
    responses = pd.read_parquet(run_dir / "responses.parquet")
    assert responses.groupby("question_id").size().tolist() == [2] * 6
    assert collect_responses(study) == "complete"  # a rerun does nothing
    validation = json.loads((run_dir / "study1" / "validation.json").read_text())
    assert validation["valid"], validation["anomalies"]
    # the quitter was released before answering the check (its record left their dataset);
    # every other participant read the instruction and answered it as asked
    checks = validation["checks"]
    assert checks["checks_answered"] == checks["checks_passed"] == checks["passed"] >= 3
    assert checks["failed"] == 0 and checks["failed_participant_keys"] == []
    kinds = [e["kind"] for e in store.events(info.id)]
    assert kinds.count("drop_requested") == 1 and kinds.count("released") == 1 and "reallocated" in kinds
    passwords = [AccountPasswords.from_secrets(load_settings().secrets_dir)(a.username) for a in store.accounts(info.id)]

    async def artifacts() -> list:
        async with get_client() as client:
            return await client.read_artifacts(artifact_filter=_ours(name))

    import asyncio

    found = asyncio.run(artifacts())
    keys = {a.key for a in found}
    assert {f"{name}-study1-progress", f"{name}-study1-participants", f"{name}-study1-account-pool",
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


def _ours(name: str):
    """Only this test's artifacts (the session's Prefect holds every test's: an unfiltered read
    is cut off at the server's page limit)."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    return ArtifactFilter(key=ArtifactFilterKey(like_=f"{name}-"))
