"""The numbers the README and the docs state about the published method, the demo and the
schedules are the ones the shipped study configs and prefect.yaml hold - read from the documents'
own sentences, so either side changing alone fails here.

Since issue 18 the README is short and the details live in the docs site's prose pages; each
claim is read where it now lives: the method in ``docs/explanation/method.md`` (and the README's
opening paragraph), the demo in ``docs/tutorial/demo.md``, the pool size in
``docs/explanation/store-and-claims.md``, the schedules in ``docs/how-to/recover.md``,
``docs/how-to/prolific.md`` and ``docs/how-to/server.md``. The CLI reference is generated from
the typer app by ``docs/gen_reference.py``; the commands the prose names must exist there.
"""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path

import pytest

from crowdpref.config import load_study, parse_study
from deployments.definitions import load_definitions

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


@cache
def _text(path: str) -> str:
    """A document's sentences without their line breaks (``path`` relative to the repository)."""
    return " ".join((REPO / path).read_text(encoding="utf-8").split())


def _number(pattern: str, path: str) -> float:
    found = re.search(pattern, _text(path))
    assert found, f"{path} no longer says: {pattern}"
    return float(found.group(1).replace(",", ""))


def _says(phrase: str, path: str) -> None:
    assert phrase in _text(path), f"{path} no longer says: {phrase}"


def test_the_published_method_in_the_opening_paragraph_is_social_reasoning_yaml():
    cfg = load_study(REPO / "studies" / "social-reasoning.yaml")
    method = "docs/explanation/method.md"
    assert _number(r"pairs of those answers on an (\d+)-point A/B scale", "README.md") == cfg.study2.scale_points
    assert _number(r"questions across (\d+) social-reasoning categories", method) == len(cfg.questions.categories)
    listed = re.search(r"social-reasoning categories: ([a-z ,-]+)\. ", _text(method))
    assert listed, f"{method} no longer lists the categories"
    assert listed.group(1).split(", ") == [c.title.lower() for c in cfg.questions.categories]
    assert _number(r"Every question gets R = (\d+) answers", method) == cfg.study1.responses_per_question
    assert _number(r"each participant answers Q = (\d+) questions", method) == cfg.study1.questions_per_participant
    assert _number(r"pick one point on an (\d+)-point scale", method) == cfg.study2.scale_points
    assert _number(r"\((\d+) answers give \d+ pairs\)", method) == cfg.study1.responses_per_question
    assert _number(r"answers give (\d+) pairs\)", method) == cfg.plan(cfg.questions.expected_questions).pairs_per_question
    assert _number(r"(\d+) ratings per pair", method) == cfg.study2.ratings_per_pair
    assert _number(r"ratings per pair, (\d+) pairs per participant", method) == cfg.study2.pairs_per_participant
    _says("Study-1 participants are kept out", method)
    assert cfg.study2.exclude_study1_participants
    # "Flagged answers are **kept** and marked ... (`screening.policy: flag`)"
    assert re.search(r"`screening\.policy: (\w+)`", _text(method)).group(1) == cfg.screening.policy == "flag"


def test_the_demo_described_in_make_demo_is_demo_yaml():
    cfg = load_study(REPO / "studies" / "demo.yaml")
    n = cfg.questions.expected_questions
    plan = cfg.plan(n)
    demo = "docs/tutorial/demo.md"
    assert _number(r"(\d+) questions from the curated bank", demo) == n
    assert _number(r"`studies/demo.yaml` \(`crowdpref demo`\): (\d+) questions", "README.md") == n
    assert cfg.questions.bank and not cfg.questions.llm.enabled
    assert _number(r"curated bank \((\d+) in each of", demo) == cfg.questions.per_category
    assert _number(r"in each of (\d+) categories\)", demo) == len(cfg.questions.categories)
    assert _number(r"categories\), (\d+) answers per question", demo) == cfg.study1.responses_per_question
    assert _number(r"and (\d+) questions per writer in study 1", demo) == cfg.study1.questions_per_participant
    assert _number(r"every pair of a question's answers \((\d+) pairs\)", demo) == plan.n_pairs
    assert _number(r"with (\d+) ratings each", demo) == cfg.study2.ratings_per_pair
    assert _number(r"ratings each \((\d+) ratings\)", demo) == plan.n_ratings
    assert _number(r"and (\d+) pairs per rater in study 2", demo) == cfg.study2.pairs_per_participant
    assert _number(r"About (\d+)% return the study part-way", demo) / 100 == cfg.crowd.dropout_rate
    assert _number(r"part-way and (\d+)% never start", demo) / 100 == cfg.crowd.never_start_rate
    assert _number(r"(\d+)% of the writers never read instructions", demo) / 100 == cfg.crowd.careless_rate
    assert _number(r"(\d+)% of the raters click at random", demo) / 100 == cfg.crowd.random_clicker_rate
    assert _number(r"(\d+)% of the demo's raters click at random", "docs/performance.md") / 100 \
        == cfg.crowd.random_clicker_rate
    _says("study-1 people are kept out", demo)
    assert cfg.study2.exclude_study1_participants
    _says("The fake Prolific hands each simulated person a place", demo)
    assert cfg.participants == "simulated" and cfg.crowd.arrive_via == "prolific"  # through the fake Prolific
    _says("a writer who fails it is excluded", demo)
    _says("a rater who fails is excluded", demo)
    assert cfg.study1.checks.on_fail == cfg.study2.checks.on_fail == "exclude"
    _says("Each batch holds one instructed-response check", demo)
    _says("Each batch holds a gold pair and a repeated pair", demo)
    assert cfg.study1.checks.count == cfg.study2.checks.gold_pairs == cfg.study2.checks.repeated_pairs == 1


def test_the_pool_size_default_the_readme_states():
    default = parse_study({"name": "x"})
    stated = _number(r"`pool_size`, default (\d+)", "docs/explanation/store-and-claims.md")
    assert default.study1.pool_size == default.study2.pool_size == stated


def test_the_schedules_the_readme_states_are_in_prefect_yaml():
    definitions = {d.name: d for d in load_definitions()}
    (study,) = definitions["study"].schedules
    assert study.interval == _number(r"on the `study` deployment's (\d+)-minute schedule", "docs/how-to/recover.md") * 60
    (sync,) = definitions["sync-prolific"].schedules
    prolific = "docs/how-to/prolific.md"
    assert sync.interval == _number(r"`sync-prolific` flow does the same alone; its deployment has a (\d+)-minute "
                                    r"schedule, registered inactive", prolific) * 60
    # server.md names the two schedules to turn on, by slug, and says every schedule is registered inactive
    server = "docs/how-to/server.md"
    _says("Schedules are registered inactive", server)
    assert not [d.name for d in definitions.values() for s in d.schedules if s.active]
    named = dict(re.findall(r"`([a-z-]+)`(?: deployment)?'s `([a-z0-9-]+)`", _text(server)))
    assert named == {"study": study.slug, "sync-prolific": sync.slug}
    for schedule in (study, sync):
        minutes = re.fullmatch(r"[a-z-]+-every-(\d+)-minutes", schedule.slug)
        assert minutes and int(minutes.group(1)) * 60 == schedule.interval, schedule.slug


def _cli_reference() -> str:
    """The CLI reference page exactly as ``make docs`` generates it."""
    sys.path.insert(0, str(DOCS))
    try:
        import gen_reference
    finally:
        sys.path.remove(str(DOCS))
    return gen_reference.cli_page()


def _commands_named_in_prose() -> set[str]:
    """Every ``crowdpref COMMAND`` of the README and the docs' prose pages: in inline code, or at
    the start of a line of a fenced code block."""
    named: set[str] = set()
    for path in [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        named.update(re.findall(r"`crowdpref ([a-z][a-z-]*)", text))
        for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S):
            named.update(re.findall(r"^\s*(?:\.venv/bin/)?crowdpref ([a-z][a-z-]*)", block, re.M))
    return named


def test_the_module_map_lists_every_cli_command():
    """The generated CLI reference (docs/reference/cli.md) has a section and a row of its table
    for every command of the app, and every command the README and the docs name exists."""
    from typer.main import get_command

    from crowdpref.cli import app

    commands = {name for name, command in get_command(app).commands.items() if not command.hidden}
    page = _cli_reference()
    sections = re.findall(r"^## `([a-z-]+)` \{#([a-z-]+)\}$", page, re.M)
    assert [a for a, b in sections if a != b] == []
    assert sorted(a for a, _ in sections) == sorted(commands), "the CLI reference and the app differ"
    rows = re.findall(r"^\| \[`([a-z-]+)`\]\(#([a-z-]+)\) \| (.*) \|$", page, re.M)
    assert sorted(a for a, b, _ in rows if a == b) == sorted(commands)
    assert [a for a, _, what in rows if not what.strip()] == [], "a command without a help line"
    for name in commands:
        assert f"\n```text\ncrowdpref {name} " in page, f"no usage line for {name}"
    named = _commands_named_in_prose()
    assert {"up", "down", "validate", "run", "demo"} <= named
    assert named - commands == set(), "the docs name commands the CLI does not have"


# --- the status lines --------------------------------------------------------------------------------
BUILT = {  # a capability the status might call missing -> the code that builds it
    "onboarding": "crowdpref/onboarding.py",
    "training": "crowdpref/onboarding.py",
    "public HTTPS home": "services/caddy.py",
    "portal": "crowdpref/portal/app.py",
    "withdrawals": "crowdpref/withdrawals.py",
    "privacy": "crowdpref/release/privacy.py",
}


def _status(path: str) -> str:
    found = re.search(r"## Status (.*?)(?: ## |$)", _text(path))
    assert found, f"{path} has no Status section"
    return found.group(1)


@pytest.mark.parametrize("path", ["README.md", "docs/index.md"])
def test_the_status_calls_nothing_built_unbuilt(path):
    """The status lines ("not built yet") name no capability whose code is in the repository."""
    for sentence in re.split(r"(?<=[.;])\s", _status(path)):
        if re.search(r"not (yet )?built|not built yet", sentence):
            named = [name for name, code in BUILT.items() if name.lower() in sentence.lower() and (REPO / code).exists()]
            assert not named, f"{path}'s status says '{sentence}', but {named} is built"
