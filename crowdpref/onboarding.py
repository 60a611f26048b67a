"""Onboarding: what a participant reads, practises and passes before they take any work.

The study method names "dedicated onboarding per task" as its next step: a participant should
know what a good answer looks like, and how the rating scale is meant to be used, before they
touch the pool. Each study of a config may have an ``onboarding:`` section
(:class:`Study1Onboarding`, :class:`Study2Onboarding`; absent: off):

- an ``introduction`` (what the study is for, how long it takes) and ``minutes``;
- worked ``examples``: study 1 a question with a strong and a weak answer, each with the
  reason (:class:`AnswerExample`); study 2 a pair with the rating the team would give, and why
  (:class:`PairExample`);
- ``practice`` items with immediate feedback (:class:`ChoiceItem`), answered in the portal and
  never counted;
- a qualification ``quiz`` (:class:`QuizConfig`): items, a pass mark and a number of attempts;
- ``screen_out_reward``: on Prolific, the fixed payment for someone the quiz screens out.

The models are :mod:`crowdpref.config.onboarding`'s (re-exported here); the pure grading
(:func:`grade`, :func:`passes`) is here; the portal runs the steps and the store
(:class:`crowdpref.store.Store`'s ``onboarding_*`` methods) keeps attempts and scores.
The published study had no onboarding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crowdpref.config.onboarding import (
    MAX_OPTIONS,
    AnswerExample,
    ChoiceItem,
    OnboardingConfig,
    PairExample,
    QuizConfig,
    Study1Onboarding,
    Study2Onboarding,
    check_onboarding,
)

if TYPE_CHECKING:
    from crowdpref.config.study import StudyConfig

__all__ = [
    "MAX_OPTIONS",
    "AnswerExample",
    "ChoiceItem",
    "Graded",
    "OnboardingConfig",
    "PairExample",
    "QuizConfig",
    "Study1Onboarding",
    "Study2Onboarding",
    "check_onboarding",
    "grade",
    "onboarding_of",
    "passes",
]


# --- grading ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Graded:
    """A graded set of answers: correct answers, items, and which items were wrong (0-based)."""

    score: int
    total: int
    wrong: tuple[int, ...]


def grade(items: Sequence[ChoiceItem], answers: Sequence[int | None]) -> Graded:
    """Grade ``answers`` (1-based option numbers, None: not answered) against ``items``; an
    item without an answer (None, or ``answers`` shorter than ``items``) counts as wrong."""
    if len(answers) > len(items):
        raise ValueError(f"{len(answers)} answers for {len(items)} items: give at most one answer per item")
    wrong = tuple(i for i, item in enumerate(items) if i >= len(answers) or answers[i] != item.answer)
    return Graded(score=len(items) - len(wrong), total=len(items), wrong=wrong)


def passes(quiz: QuizConfig, graded: Graded) -> bool:
    """Whether a graded quiz attempt passes: at least ``pass_mark`` correct answers."""
    return graded.score >= quiz.pass_mark


def onboarding_of(config: StudyConfig, key: str) -> OnboardingConfig | None:
    """The onboarding of study ``key`` (``study1`` or ``study2``) of ``config``; None: off."""
    if key not in ("study1", "study2"):
        raise ValueError(f"unknown study key {key!r}: use study1 or study2")
    return getattr(config, key).onboarding
