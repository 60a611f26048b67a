"""Onboarding in the study config (crowdpref.onboarding): every mistake is one line naming the
field and the fix; the shipped studies' onboarding is valid; the quiz is graded as written; and
the simulated crowd fails the quiz at a rate that follows from how it behaves."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from crowdpref.config import load_study, parse_study
from crowdpref.errors import ConfigError
from crowdpref.onboarding import (
    AnswerExample,
    ChoiceItem,
    PairExample,
    QuizConfig,
    Study1Onboarding,
    Study2Onboarding,
    grade,
    onboarding_of,
    passes,
)

ROOT = Path(__file__).resolve().parents[2]


def _item(answer: int = 2, options: int = 3) -> dict[str, Any]:
    return {"prompt": "Which answer explains its reasoning?", "options": [f"Option {n}" for n in range(1, options + 1)],
            "answer": answer, "explanation": "It says why."}


def _onboarding(study: str = "study1") -> dict[str, Any]:
    example = ({"question": "Q?", "strong": "Because ...", "strong_why": "reasons", "weak": "idk",
                "weak_why": "no reasons"} if study == "study1" else
               {"question": "Q?", "answer_a": "A", "answer_b": "B", "rating": 2, "why": "A explains itself"})
    return {"introduction": "What the study is for; about 5 minutes.", "minutes": 5, "examples": [example],
            "practice": [_item()], "quiz": {"items": [_item(), _item(1), _item(3)], "pass_mark": 2, "attempts": 2}}


def _config(study: str = "study1", participants: str = "simulated", **onboarding: Any) -> dict[str, Any]:
    section = {**_onboarding(study), **onboarding}
    data: dict[str, Any] = {"name": "x", "participants": participants, study: {"onboarding": section}}
    if participants == "prolific":
        data["prolific"] = {"study1": {"reward": 450}, "study2": {"reward": 450}}
    return data


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_study(data, source="studies/x.yaml")
    message = str(info.value)
    assert "\n" not in message and message.startswith("studies/x.yaml: ")
    return message


# --- the config --------------------------------------------------------------------------------
def test_onboarding_is_off_when_absent_and_typed_per_study_when_present() -> None:
    plain = parse_study({"name": "x"})
    assert plain.study1.onboarding is None and plain.study2.onboarding is None
    assert onboarding_of(plain, "study1") is None
    one = parse_study(_config("study1"))
    two = parse_study(_config("study2"))
    assert isinstance(one.study1.onboarding, Study1Onboarding)
    assert isinstance(one.study1.onboarding.examples[0], AnswerExample)
    assert isinstance(two.study2.onboarding, Study2Onboarding)
    assert isinstance(two.study2.onboarding.examples[0], PairExample)
    assert onboarding_of(two, "study2") is two.study2.onboarding
    with pytest.raises(ValueError):
        onboarding_of(two, "study3")


@pytest.mark.parametrize(("data", "field", "says"), [
    (_config(quiz={"items": [_item()] * 3, "pass_mark": 4}), "study1.onboarding.quiz.pass_mark",
     "but the quiz has 3 items"),
    (_config(quiz={"items": [_item()], "pass_mark": 0}), "study1.onboarding.quiz.pass_mark", "is 0"),
    (_config(quiz={"items": [], "pass_mark": 1}), "study1.onboarding.quiz.items", "too short"),
    (_config(quiz={"items": [_item()], "pass_mark": 1, "attempts": 0}), "study1.onboarding.quiz.attempts", ">= 1"),
    (_config(practice=[_item(answer=4)]), "study1.onboarding.practice[0].answer", "is 4, but there are 3 options"),
    (_config(practice=[_item(answer=0)]), "study1.onboarding.practice[0].answer", "is 0"),
    (_config(practice=[{**_item(), "options": ["Same", "same "]}]), "study1.onboarding.practice[0].options",
     "the same option twice"),
    (_config(practice=[{**_item(), "options": ["Only one"], "answer": 1}]), "study1.onboarding.practice[0].options",
     "too short"),
    (_config(introduction="  "), "study1.onboarding.introduction", "is empty"),
    (_config(minutes="5"), "study1.onboarding.minutes", "remove the quotes"),
    (_config(quizz={"items": [_item()], "pass_mark": 1}), "study1.onboarding.quizz", "did you mean 'quiz'"),
    (_config("study2", examples=[{**_onboarding("study2")["examples"][0], "rating": 9}]),
     "study2.onboarding.examples[0].rating", "off the 8-point scale"),
    (_config("study2", examples=[{**_onboarding("study2")["examples"][0], "rating": 0}]),
     "study2.onboarding.examples[0].rating", "must be 1 or more"),
    # a pair example in study 1 (or an answer example in study 2) is the wrong kind: its keys are unknown
    (_config("study1", examples=_onboarding("study2")["examples"]), "study1.onboarding.examples[0].answer_a",
     "unknown field"),
    (_config("study2", examples=_onboarding("study1")["examples"]), "study2.onboarding.examples[0].strong",
     "unknown field"),
    (_config("study1", participants="prolific"), "study1.onboarding.screen_out_reward",
     "must pay the people the quiz screens out"),
    (_config("study2", participants="prolific", screen_out_reward=450), "study2.onboarding.screen_out_reward",
     "450 is not below the study reward"),
])
def test_each_mistake_is_one_line_naming_the_field(data: dict[str, Any], field: str, says: str) -> None:
    message = _error(data)
    assert f": {field}: " in message, message
    assert says in message, message


def test_a_prolific_study_with_a_quiz_and_a_screen_out_reward_below_the_reward_is_valid() -> None:
    config = parse_study(_config("study1", participants="prolific", screen_out_reward=60))
    assert config.study1.onboarding is not None and config.study1.onboarding.screen_out_reward == 60
    # without a quiz nobody is screened out, so no screen-out payment is needed
    no_quiz = parse_study(_config("study1", participants="prolific", quiz=None))
    assert no_quiz.study1.onboarding is not None and no_quiz.study1.onboarding.quiz is None


def test_the_shipped_studies_have_onboarding_for_both_studies() -> None:
    for name in ("demo.yaml", "social-reasoning.yaml"):
        config = load_study(ROOT / "studies" / name)
        for key in ("study1", "study2"):
            onboarding = onboarding_of(config, key)
            assert onboarding is not None, (name, key)
            assert len(onboarding.examples) >= 2 and len(onboarding.practice) >= 3
            assert onboarding.quiz is not None and len(onboarding.quiz.items) == 4
            assert onboarding.quiz.pass_mark == 3 and onboarding.quiz.attempts == 2
            if config.participants == "prolific":
                reward = getattr(config.prolific, key).reward
                assert onboarding.screen_out_reward is not None and 0 < onboarding.screen_out_reward < reward
    text = (ROOT / "studies" / "social-reasoning.yaml").read_text(encoding="utf-8")
    assert "published study had no onboarding" in " ".join(text.replace("#", " ").split())


# --- grading -------------------------------------------------------------------------------------
def _quiz(pass_mark: int = 2) -> QuizConfig:
    return QuizConfig(items=[ChoiceItem(**_item(2)), ChoiceItem(**_item(1)), ChoiceItem(**_item(3))],
                      pass_mark=pass_mark)


def test_grading_counts_right_answers_and_names_the_wrong_ones() -> None:
    quiz = _quiz()
    all_right = grade(quiz.items, [2, 1, 3])
    assert (all_right.score, all_right.total, all_right.wrong) == (3, 3, ())
    one_wrong = grade(quiz.items, [2, 2, 3])
    assert (one_wrong.score, one_wrong.wrong) == (2, (1,))
    assert passes(quiz, one_wrong)  # pass_mark 2: 2 right is enough
    unanswered = grade(quiz.items, [2, None])  # a missing answer counts as wrong
    assert (unanswered.score, unanswered.wrong) == (1, (1, 2))
    assert not passes(quiz, unanswered)
    assert passes(_quiz(3), all_right) and not passes(_quiz(3), one_wrong)
    with pytest.raises(ValueError):
        grade(quiz.items, [1, 1, 1, 1])


# --- the simulated crowd -------------------------------------------------------------------------
def test_careless_participants_fail_the_quiz_far_more_often_than_careful_ones() -> None:
    """Nobody is handed a pass rate: the careless (who never read instructions) guess among the
    options, the careful read the items and slip only in their moments of low effort."""
    from crowdpref.config import CrowdConfig
    from crowdpref.simulation.crowd import SimulatedCrowd, quiz_answers

    config = load_study(ROOT / "studies" / "demo.yaml")
    onboarding = config.study1.onboarding
    assert onboarding is not None and onboarding.quiz is not None
    quiz = onboarding.quiz
    crowd = SimulatedCrowd(CrowdConfig(careless_rate=0.5, low_effort_rate=0.1), seed=3)
    outcome: dict[bool, list[bool]] = {True: [], False: []}
    for n in range(400):
        key = SimulatedCrowd.key("study1", n)
        profile = crowd.profile(key, "study1")
        passed = any(passes(quiz, grade(quiz.items, quiz_answers(profile, quiz.items, crowd.rng(key, "quiz", a))))
                     for a in range(quiz.attempts))
        outcome[profile.careless].append(passed)
    careless, careful = (sum(outcome[c]) / len(outcome[c]) for c in (True, False))
    assert len(outcome[True]) > 100 and len(outcome[False]) > 100  # careless_rate 0.5 splits the crowd
    assert careful > 0.95 and careless < 0.5, (careful, careless)
    # careless people guess: with 3-4 options, about one answer in three or four is right
    guesses = [a == item.answer for n in range(300) for a, item in zip(
        quiz_answers(crowd.profile("c", "study1", careless=True), quiz.items, random.Random(n)), quiz.items)]
    assert 0.15 < sum(guesses) / len(guesses) < 0.45


def test_the_careless_in_onboarding_are_the_careless_at_work() -> None:
    """The same person is careless in the quiz and in their batch (so screening them out
    removes the work the checks would later redo)."""
    from crowdpref.config import CrowdConfig
    from crowdpref.simulation.crowd import SimulatedCrowd

    crowd = SimulatedCrowd(CrowdConfig(careless_rate=0.5, random_clicker_rate=0.5), seed=11)
    for n in range(40):
        key = SimulatedCrowd.key("study1", n)
        crowd.bind(key, f"user-{n}")
        assert crowd.is_careless(f"user-{n}") == crowd.profile(key, "study1").careless
        key2 = SimulatedCrowd.key("study2", n)
        crowd.bind(key2, f"rater-{n}")
        assert crowd.is_random_clicker(f"rater-{n}") == crowd.profile(key2, "study2").careless


def test_practice_answers_follow_the_same_behaviour() -> None:
    from crowdpref.config import CrowdConfig
    from crowdpref.simulation.crowd import SimulatedCrowd, practice_answers

    config = load_study(ROOT / "studies" / "demo.yaml")
    onboarding = config.study2.onboarding
    assert onboarding is not None
    crowd = SimulatedCrowd(CrowdConfig(low_effort_rate=0.0), seed=1)
    careful = crowd.profile("k", "study2", careless=False)
    answers = practice_answers(careful, onboarding.practice, random.Random(0))
    assert answers == [item.answer for item in onboarding.practice]  # no lapses at low_effort_rate 0
    assert len(practice_answers(crowd.profile("k", "study2", careless=True), onboarding.practice,
                                random.Random(0))) == len(onboarding.practice)
