"""What ``crowdpref run FLOW STUDY`` prints when the flow is done (issue 31): the study flow's
stages as a table, another flow's fields as a table, a written file as a sentence - never the
Python repr of a dict. The flow itself is stubbed (no Prefect server): what is tested is the
command's output for the results the real flows return."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from crowdpref.cli import app, runs
from crowdpref.release.hub import PushResult
from tests.conftest import CONNECTION_ENV

DEMO = Path(__file__).resolve().parents[2] / "studies" / "demo.yaml"
RUN_URL = "http://127.0.0.1:4200/runs/flow-run/1234"


@pytest.fixture()
def flow_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Whatever the test puts here is what the stubbed flow returns."""
    for name in CONNECTION_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CROWDPREF_HOME", str(tmp_path / "home"))
    returned: list[Any] = []
    monkeypatch.setattr(runs, "_use_prefect", lambda settings: None)
    monkeypatch.setattr(runs, "_require_argilla", lambda settings: None)
    monkeypatch.setattr(runs, "_call_flow", lambda flow, settings, name, **parameters: (returned[0], RUN_URL))
    return returned


def _run(*args: str) -> str:
    result = CliRunner().invoke(app, ["run", *args], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_run_study_prints_its_stages_as_a_table(flow_result):
    flow_result.append({"study": "demo", "status": "waiting", "stages": [
        {"stage": "generate-questions", "status": "done", "seconds": 1.25},
        {"stage": "collect-responses", "status": "waiting", "seconds": 3.0}]})
    out = _run("study", str(DEMO))
    assert "{" not in out and "'stages'" not in out  # no dict repr
    assert "demo: waiting" in out
    rows = [line for line in out.splitlines() if "generate-questions" in line or "collect-responses" in line]
    assert len(rows) == 2 and "done" in rows[0] and "1.2" in rows[0] and "waiting" in rows[1] and "3.0" in rows[1]
    assert f"Prefect UI, this run: {RUN_URL}" in out


def test_other_flows_print_a_table_of_fields_or_a_sentence(flow_result, tmp_path):
    flow_result.append({"submitted": 12, "arrived": 5, "full": False})
    out = _run("simulate-crowd", str(DEMO))
    assert "{" not in out and any(line.split() == ["│", "submitted", "│", "12", "│"] for line in out.splitlines())

    flow_result[0] = PushResult(folder=tmp_path / "release", pushed=False, message="kept local")
    out = _run("publish-dataset", str(DEMO))
    assert "PushResult(" not in out and "kept local" in out and "pushed" in out

    flow_result[0] = tmp_path / "questions.parquet"
    assert f"generate-questions: done, wrote {tmp_path / 'questions.parquet'}" in _run("generate-questions", str(DEMO))
