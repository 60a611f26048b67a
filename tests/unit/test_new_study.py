"""The pilot path (issue 20): ``crowdpref new-study`` writes a config for real people into the
portal's studies folder (45-minute drop-out window, onboarding on, no simulated crowd) and
refuses to overwrite; ``crowdpref validate`` warns in one line when real people get a drop-out
window under 10 minutes, says nothing about the simulated crowd for them, and counts the
screen-out cost; ``crowdpref invite`` refuses in one line a study the portal cannot serve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from crowdpref.cli import app
from crowdpref.config import load_study, parse_study
from crowdpref.config.explain import dropout_warnings, screen_out_cost, validation_rows
from tests.conftest import CONNECTION_ENV

PORTAL = "https://portal.example.org"


@pytest.fixture()
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in CONNECTION_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("CROWDPREF_PORTAL_STUDIES", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CROWDPREF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CROWDPREF_PORTAL_URL", PORTAL)
    return tmp_path


def _run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# --- new-study ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("participants", ["invite", "prolific"])
def test_new_study_writes_a_valid_config_for_real_people_into_the_portals_folder(cli_env: Path,
                                                                                participants: str) -> None:
    result = _run("new-study", "My Pilot", "--participants", participants)
    assert result.exit_code == 0, result.output
    path = cli_env / "studies" / "my-pilot.yaml"  # the portal's studies folder (portal_studies' default)
    assert f"wrote {Path('studies') / 'my-pilot.yaml'}" in result.output and "my-pilot.yaml: valid" in result.output
    written = Path("studies") / "my-pilot.yaml"  # it ends with the next step
    assert _lines(result.output)[-1] == (f"next: change what you need in {written}, then check it again with "
                                         f"`crowdpref validate {written}`")
    data = yaml.safe_load(path.read_text())
    assert "crowd" not in data  # no simulated crowd to configure
    config = load_study(path)
    assert config.participants == participants and config.name == "my-pilot"
    # on Prolific the drop-out window is the study's maximum time, at least Prolific's least for
    # 30 estimated minutes (2 + 2 x 30 + 2 x sqrt(30) = 72.95 -> 73)
    dropout = 73 if participants == "prolific" else 45
    assert config.study1.inactive_after_minutes == config.study2.inactive_after_minutes == dropout
    for key in ("study1", "study2"):
        onboarding = getattr(config, key).onboarding
        assert onboarding is not None and onboarding.quiz is not None and onboarding.examples and onboarding.practice
        # a screen-out payment only where a platform pays one
        assert (onboarding.screen_out_reward is not None) == (participants == "prolific")
    assert dropout_warnings(config) == []
    assert "simulated crowd" not in result.output


def test_new_study_refuses_to_overwrite_and_takes_out(cli_env: Path) -> None:
    assert _run("new-study", "pilot", "--participants", "invite").exit_code == 0
    before = (cli_env / "studies" / "pilot.yaml").read_text()
    again = _run("new-study", "pilot", "--participants", "prolific")
    assert again.exit_code != 0 and "refusing to overwrite" in again.output and len(_lines(again.output)) == 1
    assert (cli_env / "studies" / "pilot.yaml").read_text() == before
    elsewhere = _run("new-study", "pilot", "--participants", "invite", "--out", str(cli_env / "other" / "p.yaml"))
    assert elsewhere.exit_code == 0 and (cli_env / "other" / "p.yaml").exists()
    bad = _run("new-study", "pilot2", "--participants", "simulated")
    assert bad.exit_code != 0 and "--participants must be invite or prolific" in bad.output
    assert not (cli_env / "studies" / "pilot2.yaml").exists()


# --- validate ------------------------------------------------------------------------------------------
def test_validate_warns_in_one_line_when_real_people_get_a_short_dropout_window(cli_env: Path) -> None:
    path = cli_env / "quick.yaml"
    path.write_text(yaml.safe_dump({"name": "quick", "participants": "invite",
                                    "study1": {"inactive_after_minutes": 1}}))
    result = _run("validate", str(path))
    assert result.exit_code == 0, result.output  # a warning, not an error
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1
    assert "study1.inactive_after_minutes: 1 min is short for real people" in warnings[0] and "quick.yaml" in warnings[0]
    # the simulated crowd's 1-minute window is its own business
    simulated = parse_study({"name": "demo-like", "participants": "simulated", "study1": {"inactive_after_minutes": 1}})
    assert dropout_warnings(simulated) == []
    assert dropout_warnings(parse_study({"name": "x", "participants": "invite",
                                         "study2": {"inactive_after_minutes": 10}})) == []


def test_a_real_people_study_is_not_asked_about_the_simulated_crowd() -> None:
    invited = parse_study({"name": "x", "participants": "invite"})
    rows = dict(validation_rows(invited))
    assert "simulated crowd" not in " ".join(rows.values())
    assert rows["Participants"].startswith("real people through invitation links")
    simulated = dict(validation_rows(parse_study({"name": "x", "participants": "simulated"})))
    assert "simulated crowd" in simulated["Participants"]


def test_the_money_summary_includes_the_most_the_screen_outs_can_cost() -> None:
    item = {"prompt": "Which?", "options": ["a", "b"], "answer": 1, "explanation": "a is right."}
    onboarding = {"introduction": "Intro.", "minutes": 5, "quiz": {"items": [item], "pass_mark": 1},
                  "screen_out_reward": 100}
    config = parse_study({
        "name": "x", "participants": "prolific",
        "questions": {"categories": ["empathy", "ethics"], "per_category": 3},
        "study1": {"responses_per_question": 2, "questions_per_participant": 3, "onboarding": onboarding},
        "study2": {"ratings_per_pair": 2, "pairs_per_participant": 4},
        "prolific": {"enabled": True, "study1": {"reward": 400}, "study2": {"reward": 300}}})
    cost = screen_out_cost(config, 6)
    assert cost is not None and cost.slots == config.prolific_cost(6).places == (4, 3)
    assert cost.rewards == (100, None)
    assert cost.maximum == pytest.approx(4 * 1.00 * (1 + config.prolific.fee_rate))
    rows = validation_rows(config)
    labels = [label for label, _ in rows]
    assert labels.index("Screen-outs on Prolific") == labels.index("Cost on Prolific") + 1
    assert "the maximum" in dict(rows)["Screen-outs on Prolific"]
    # how many screen-outs the budget allows, per study: slots x the fixed reward
    assert "study 1: the budget allows 4 screen-outs (the code's slots) x 1.00 = 4.00" in dict(rows)[
        "Screen-outs on Prolific"] and "study 2:" not in dict(rows)["Screen-outs on Prolific"]
    # no quiz, or no Prolific: nothing to pay
    del onboarding["quiz"], onboarding["screen_out_reward"]
    assert screen_out_cost(parse_study({"name": "x", "participants": "prolific",
                                        "study1": {"onboarding": onboarding}}), 6) is None


def test_validate_refuses_a_dropout_window_shorter_than_prolifics_time_in_one_line(cli_env: Path) -> None:
    """Releasing someone for inactivity while Prolific still gives them time leads to a rejection
    Prolific's rules forbid: the window is the study's maximum time, at least Prolific's least."""
    path = cli_env / "short.yaml"
    path.write_text(yaml.safe_dump({"name": "short", "participants": "prolific",
                                    "study1": {"inactive_after_minutes": 45},
                                    "prolific": {"study1": {"estimated_completion_minutes": 30}}}))
    result = _run("validate", str(path))
    assert result.exit_code != 0
    lines = _lines(result.output)
    assert len(lines) == 1, result.output
    assert "short.yaml" in lines[0] and "study1.inactive_after_minutes" in lines[0]
    assert "45 min" in lines[0] and "73 min" in lines[0] and "estimated_completion_minutes: 30" in lines[0]
    # left out, it is raised to Prolific's least; a simulation or invitations keep theirs
    fitted = parse_study({"name": "x", "participants": "prolific", "prolific": {"study2": {
        "estimated_completion_minutes": 10}}})
    assert (fitted.study1.inactive_after_minutes, fitted.study2.inactive_after_minutes) == (73, 60)  # 2+20+6.3
    assert parse_study({"name": "x", "participants": "invite",
                        "study1": {"inactive_after_minutes": 45}}).study1.inactive_after_minutes == 45


# --- invite ----------------------------------------------------------------------------------------------
def test_invite_serves_a_config_wherever_it_lives_and_refuses_another_file_of_the_same_name(cli_env: Path) -> None:
    """The portal learns a study's config from the store (issue 20), not only from its studies
    folder: ``invite`` records the file, and the portal then serves links to it."""
    from crowdpref.portal.service import Portal
    from crowdpref.settings import load_settings
    from crowdpref.store import open_store

    outside = cli_env / "elsewhere.yaml"
    outside.write_text(yaml.safe_dump({"name": "outside", "participants": "invite"}))
    links = _run("invite", str(outside))
    assert links.exit_code == 0, links.output
    assert links.output.strip().startswith(f"{PORTAL}/s/outside/study1?invite=")
    settings = load_settings()
    store = open_store(settings)
    try:
        portal = Portal(settings, store)
        assert portal.study_path("outside") == outside.resolve()
        assert portal.config("outside", "study1")[0].name == "outside"
    finally:
        store.close()
    twin_outside = cli_env / "twin-outside.yaml"
    twin_outside.write_text(yaml.safe_dump({"name": "outside", "participants": "invite"}))
    refused = _run("invite", str(twin_outside))
    assert refused.exit_code != 0 and len(_lines(refused.output)) == 1
    assert "serves study 'outside' from" in refused.output and "/s/outside/" not in refused.output
    # a config named like one the portal serves from another file
    assert _run("new-study", "served", "--participants", "invite").exit_code == 0
    twin = cli_env / "twin.yaml"
    twin.write_text(yaml.safe_dump({"name": "served", "participants": "invite"}))
    other = _run("invite", str(twin))
    assert other.exit_code != 0 and "serves study 'served' from" in other.output and len(_lines(other.output)) == 1
    # from new-study to links: the portal serves it
    links = _run("invite", str(cli_env / "studies" / "served.yaml"), "-n", "2")
    assert links.exit_code == 0, links.output
    assert [link.startswith(f"{PORTAL}/s/served/study1?invite=") for link in links.output.split()] == [True, True]
