"""Onboarding: what a participant reads, practises and passes before they take any work.

The config models (:class:`ChoiceItem`, :class:`AnswerExample`, :class:`PairExample`,
:class:`QuizConfig`, :class:`OnboardingConfig` and the per-study sections) are defined in
:mod:`crowdpref.config.onboarding`, which explains each field, and re-exported here with the
pure grading: :func:`grade`, :func:`passes`, :func:`onboarding_of`.
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
