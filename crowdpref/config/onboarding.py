"""The ``onboarding:`` section of study 1 and study 2: what a participant reads, practises and
passes before they take any work (the models, and the check that compares sections).

:mod:`crowdpref.onboarding` re-exports these models with the pure grading; they live in the
config package so that :mod:`crowdpref.config.sections` can use them without an import cycle.

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

The pure grading is :mod:`crowdpref.onboarding`'s; the portal runs the steps and the store
keeps attempts and scores. The published study had no onboarding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import Field, model_validator

from crowdpref.config.base import Int, Str, _problem, _Section

if TYPE_CHECKING:
    from crowdpref.config.study import StudyConfig

__all__ = [
    "MAX_OPTIONS",
    "AnswerExample",
    "ChoiceItem",
    "OnboardingConfig",
    "PairExample",
    "QuizConfig",
    "Study1Onboarding",
    "Study2Onboarding",
    "check_onboarding",
]

MAX_OPTIONS = 6
"""The most options a practice or quiz item may offer (more are hard to read on a phone)."""


def _text(field: str, value: str, what: str) -> None:
    if not value.strip():
        raise _problem(field, "is empty", f"write {what}")


class ChoiceItem(_Section):
    """One multiple-choice item of the practice or the quiz: a prompt, its options, which one is
    right, and the explanation the participant sees after answering."""

    prompt: Str
    """The question put to the participant (markdown)."""
    options: list[Str] = Field(min_length=2, max_length=MAX_OPTIONS)
    """The options to choose from (2-6, all different), shown in this order."""
    answer: Int
    """Which option is right: its number in ``options``, counting from 1."""
    explanation: Str
    """Feedback shown after answering: why the right option is right (markdown)."""

    @model_validator(mode="after")
    def _check(self) -> ChoiceItem:
        _text("prompt", self.prompt, "the question to put to the participant")
        _text("explanation", self.explanation, "why the right option is right (shown as feedback)")
        for i, option in enumerate(self.options):
            _text(f"options[{i}]", option, "the option's text, or remove it")
        seen = [o.strip().casefold() for o in self.options]
        dupes = sorted({o for o in self.options if seen.count(o.strip().casefold()) > 1})
        if dupes:
            raise _problem("options", f"the same option twice: {dupes[0]!r}", "make every option different")
        if not 1 <= self.answer <= len(self.options):
            raise _problem("answer", f"is {self.answer}, but there are {len(self.options)} options",
                           f"give the number of the right option, 1 to {len(self.options)}")
        return self


class AnswerExample(_Section):
    """A worked example for study 1: a question, a strong answer and a weak one, each with the
    reason it is strong or weak."""

    question: Str
    """The question, as participants will see questions in the study."""
    strong: Str
    """A strong answer to it."""
    strong_why: Str
    """Why that answer is strong (which guideline it follows)."""
    weak: Str
    """A weak answer to the same question."""
    weak_why: Str
    """Why that answer is weak, and what would make it better."""

    @model_validator(mode="after")
    def _check(self) -> AnswerExample:
        for name in ("question", "strong", "strong_why", "weak", "weak_why"):
            _text(name, getattr(self, name), f"the example's {name.replace('_', ' ')}")
        return self


class PairExample(_Section):
    """A worked example for study 2: a question, two answers (A and B), the rating the team
    would give on the study's scale, and why."""

    question: Str
    """The question both answers reply to."""
    answer_a: Str
    """The answer shown as A."""
    answer_b: Str
    """The answer shown as B."""
    rating: Int
    """The rating the team would give: 1 = strong preference for A ... ``study2.scale_points``
    = strong preference for B."""
    why: Str
    """Why this rating: what makes one answer better, and by how much."""

    @model_validator(mode="after")
    def _check(self) -> PairExample:
        for name in ("question", "answer_a", "answer_b", "why"):
            _text(name, getattr(self, name), f"the example's {name.replace('_', ' ')}")
        if self.rating < 1:
            raise _problem("rating", f"must be 1 or more (got {self.rating})",
                           "use a point of the scale, 1 = strong preference for A")
        return self


class QuizConfig(_Section):
    """The qualification quiz: who passes takes work; who fails every attempt is screened out
    (on Prolific: paid ``screen_out_reward`` through a screen-out completion code)."""

    items: list[ChoiceItem] = Field(min_length=1)
    """The quiz items, asked in this order, all on one page."""
    pass_mark: Int
    """Correct answers needed to pass (1 .. the number of items)."""
    attempts: Int = Field(2, ge=1, le=10)
    """How many times a participant may take the quiz; after the last failed attempt they are
    screened out and cannot take it again."""

    @model_validator(mode="after")
    def _check(self) -> QuizConfig:
        n = len(self.items)
        if not 1 <= self.pass_mark <= n:
            raise _problem("pass_mark", f"is {self.pass_mark}, but the quiz has {n} item{'s' * (n != 1)}",
                           f"use a number from 1 to {n} (correct answers needed)")
        return self


class OnboardingConfig(_Section):
    """Onboarding before the work: an introduction, worked examples, practice with feedback and
    an optional qualification quiz. Absent: off (as in the published study)."""

    introduction: Str
    """What the study is for and how long it takes, in plain words for participants (markdown)."""
    minutes: Int = Field(ge=1, le=120)
    """How many minutes onboarding takes (shown to participants; count it in the study's
    estimated time)."""
    examples: Sequence[AnswerExample | PairExample] = Field(default_factory=list)
    """Worked examples (study 1: :class:`AnswerExample`; study 2: :class:`PairExample`)."""
    practice: list[ChoiceItem] = Field(default_factory=list)
    """Practice items: answered in the portal with immediate feedback; never counted."""
    quiz: QuizConfig | None = None
    """The qualification quiz; None: everyone who reads the onboarding goes on to the work."""
    screen_out_reward: Int | None = Field(None, ge=1)
    """Prolific only: the fixed payment, in the study currency's minor unit (pence, cents), for
    someone the quiz screens out (a ``FIXED_SCREEN_OUT_PAYMENT`` completion code). Must be below
    the study's ``prolific.studyN.reward``; required when ``participants: prolific`` and there is
    a quiz."""

    @model_validator(mode="after")
    def _check(self) -> OnboardingConfig:
        _text("introduction", self.introduction, "what the study is for and how long it takes")
        return self


class Study1Onboarding(OnboardingConfig):
    """Study 1's onboarding: worked examples are questions with a strong and a weak answer."""

    examples: list[AnswerExample] = Field(default_factory=list)  # type: ignore[assignment]
    """Worked examples: a question, a strong answer and a weak one, each with the reason."""


class Study2Onboarding(OnboardingConfig):
    """Study 2's onboarding: worked examples are pairs with the rating the team would give."""

    examples: list[PairExample] = Field(default_factory=list)  # type: ignore[assignment]
    """Worked examples: a pair of answers, the rating the team would give, and why."""


# --- the checks that need the whole config ---------------------------------------------------------
def check_onboarding(config: StudyConfig) -> None:
    """The onboarding checks that compare sections (called by
    :class:`~crowdpref.config.study.StudyConfig`): a Prolific study with a quiz needs
    ``screen_out_reward``, and that reward must be below the study's reward."""
    for key in ("study1", "study2"):
        onboarding = getattr(config, key).onboarding
        if onboarding is None:
            continue
        field = f"{key}.onboarding.screen_out_reward"
        reward = getattr(config.prolific, key).reward
        if onboarding.quiz is not None and onboarding.screen_out_reward is None and config.participants == "prolific":
            minutes = getattr(config.prolific, key).estimated_completion_minutes
            fair = max(1, min(reward - 1, reward * onboarding.minutes // minutes))  # the onboarding's share of the time
            raise _problem(field, "a Prolific study with a quiz must pay the people the quiz screens out",
                           f"set screen_out_reward in pence/cents, below the study reward {reward}, e.g. {fair}")
        if onboarding.screen_out_reward is not None and onboarding.screen_out_reward >= reward:
            raise _problem(field, f"{onboarding.screen_out_reward} is not below the study reward "
                           f"(prolific.{key}.reward: {reward}); Prolific requires it to be less",
                           f"use less than {reward}")
