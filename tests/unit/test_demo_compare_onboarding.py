"""``crowdpref demo --compare-onboarding`` runs the demo's study a second time as
``<name>-no-onboarding``: the same config - seed, crowd, checks - with no onboarding, so the same
simulated people meet the work with nothing before it. The copy is a valid config and differs
from the original in its name and its onboarding only; the comparison table reads both runs'
progress (screened out, claimed, excluded by the checks)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import yaml

from crowdpref.cli import runs
from crowdpref.config import load_study
from tests.conftest import isolated_settings

DEMO = Path(__file__).resolve().parents[2] / "studies" / "demo.yaml"


def test_the_copy_is_the_demo_without_onboarding(tmp_path):
    settings = isolated_settings(tmp_path / "home")
    path = runs.without_onboarding(DEMO, settings)
    original, copy = yaml.safe_load(DEMO.read_text()), yaml.safe_load(path.read_text())
    assert path == settings.state_dir / "studies" / "demo-no-onboarding.yaml"
    assert copy["name"] == "demo-no-onboarding"
    assert "onboarding" in original["study1"] and "onboarding" in original["study2"]  # the demo has it
    for key in ("study1", "study2"):
        assert "onboarding" not in copy[key]
        assert {k: v for k, v in original[key].items() if k != "onboarding"} == copy[key]
    assert {k: v for k, v in original.items() if k not in ("name", "study1", "study2")} == \
        {k: v for k, v in copy.items() if k not in ("name", "study1", "study2")}  # the same crowd and seed
    config = load_study(path)
    assert config.study1.onboarding is None and config.study2.onboarding is None


def test_the_table_sets_both_runs_side_by_side(tmp_path, monkeypatch):
    def part(key, screened, excluded, people):
        onboarding = SimpleNamespace(screened_out=screened) if screened is not None else None
        return SimpleNamespace(key=key, onboarding=onboarding, participants={"complete": people}, excluded=excluded,
                               unit="answers" if key == "study1" else "ratings",
                               checks=SimpleNamespace(excluded_participants=excluded // 5))
    figures = {"with": [part("study1", 1, 0, 11), part("study2", 2, 0, 18)],
               "without": [part("study1", None, 10, 13), part("study2", None, 30, 21)]}
    monkeypatch.setattr("crowdpref.progress.study_progress",
                        lambda config, settings: SimpleNamespace(parts=figures[config]))
    from rich.console import Console

    console = Console(width=250, record=True)
    console.print(runs.onboarding_comparison("with", "without", isolated_settings(tmp_path / "home")))
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in console.export_text().splitlines()
            if line.startswith("│ study")]
    assert rows == [
        ["study1", "with onboarding", "11", "1", "0", "0 answers"],
        ["study1", "without", "13", "0", "2", "10 answers"],
        ["study2", "with onboarding", "18", "2", "0", "0 ratings"],
        ["study2", "without", "21", "0", "6", "30 ratings"],
    ]
