"""The numbers the README states about the published method, the demo and the schedules are the
ones the shipped study configs and prefect.yaml hold - read from the README's own sentences, so
either side changing alone fails here."""

from __future__ import annotations

import re
from pathlib import Path

from crowdpref.config import load_study, parse_study
from deployments.definitions import load_definitions

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
TEXT = " ".join(README.split())  # sentences without their line breaks


def _number(pattern: str) -> float:
    found = re.search(pattern, TEXT)
    assert found, f"README no longer says: {pattern}"
    return float(found.group(1).replace(",", ""))


def test_the_published_method_in_the_opening_paragraph_is_social_reasoning_yaml():
    cfg = load_study(REPO / "studies" / "social-reasoning.yaml")
    assert _number(r"questions across (\d+) social-reasoning categories") == len(cfg.questions.categories)
    assert _number(r"\((\d+) answers per question") == cfg.study1.responses_per_question
    assert _number(r"answers per question, (\d+) questions each") == cfg.study1.questions_per_participant
    assert _number(r"on an (\d+)-point A/B scale") == cfg.study2.scale_points
    assert _number(r"\((\d+) ratings per pair") == cfg.study2.ratings_per_pair
    assert _number(r"ratings per pair, (\d+) pairs each") == cfg.study2.pairs_per_participant
    assert cfg.screening.policy == "flag"  # "hate-speech screening with detoxify (flag, keep)"


def test_the_demo_described_in_make_demo_is_demo_yaml():
    cfg = load_study(REPO / "studies" / "demo.yaml")
    n = cfg.questions.expected_questions
    plan = cfg.plan(n)
    assert _number(r"(\d+) questions from the curated bank") == n
    assert cfg.questions.bank and not cfg.questions.llm.enabled
    assert _number(r"writers answer (\d+) questions each") == cfg.study1.questions_per_participant
    assert _number(r"raters compare (\d+) answer pairs") == plan.n_pairs
    assert _number(r"\((\d+) ratings, each pair's") == plan.n_ratings
    assert _number(r"each pair's (\d+) raters see it") == cfg.study2.ratings_per_pair
    assert _number(r"(\d+)% of the demo's raters click at random") / 100 == cfg.crowd.random_clicker_rate
    assert cfg.study2.exclude_study1_participants  # "study-1 people kept out"
    assert cfg.participants == "simulated" and cfg.crowd.arrive_via == "prolific"  # through the fake Prolific
    assert cfg.study1.checks.on_fail == cfg.study2.checks.on_fail == "exclude"  # "with `on_fail: exclude`"


def test_the_pool_size_default_the_readme_states():
    default = parse_study({"name": "x"})
    stated = _number(r"`pool_size`, default (\d+)")
    assert default.study1.pool_size == default.study2.pool_size == stated


def test_the_schedules_the_readme_states_are_in_prefect_yaml():
    definitions = {d.name: d for d in load_definitions()}
    (study,) = definitions["study"].schedules
    assert study.interval == _number(r"on the (\d+)-minute schedule") * 60
    (sync,) = definitions["sync-prolific"].schedules
    assert sync.interval == _number(r"`sync-prolific` flow \(a (\d+)-minute schedule") * 60
    assert "registered inactive" in TEXT and not sync.active and not study.active


def test_the_module_map_lists_every_cli_command():
    from typer.main import get_command

    from crowdpref.cli import app

    listed = re.search(r"cli\.py `crowdpref ([a-z|-]+ ?[a-z|-]*)`", TEXT)
    assert listed, "README module map no longer lists the CLI commands"
    assert set(listed.group(1).replace(" ", "").split("|")) == set(get_command(app).commands)
