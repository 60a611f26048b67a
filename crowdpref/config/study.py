"""The whole study: :class:`StudyConfig`, its sections together, and the checks that compare
sections (the usernames of both studies, Prolific against ``participants``, answers per
question against pairs, questions and pairs against batch sizes).

Each section's own model and checks are in :mod:`crowdpref.config.sections`; the numbers a
study plans (:meth:`StudyConfig.plan`) are :mod:`crowdpref.config.plan`'s; reading a YAML file
is :func:`crowdpref.config.load.load_study`.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import Field, PrivateAttr, field_validator, model_validator
from pydantic_core import PydanticCustomError

from crowdpref.config.base import Int, Str, _check_slug, _problem, _Section
from crowdpref.config.explain import (
    UNVERIFIED_PILOT,
    describe_aggregation,
    describe_crowd,
    describe_filters,
    describe_plan,
    describe_prolific,
    describe_publish,
    describe_questions,
    describe_screening,
    describe_study1,
    describe_study2,
)
from crowdpref.config.onboarding import check_onboarding
from crowdpref.config.plan import Batches, ProlificCost, StudyPlan, _check_batches
from crowdpref.config.sections import (
    AggregationConfig,
    CrowdConfig,
    EvaluationConfig,
    FiltersConfig,
    InviteConfig,
    ProlificConfig,
    PublishConfig,
    QuestionsConfig,
    ScreeningConfig,
    Study1Config,
    Study2Config,
)
from crowdpref.contracts import SOURCES
from crowdpref.errors import ConfigError

__all__ = ["Participants", "StudyConfig"]

#: Who does the work (``participants:``): the provenance names of :data:`crowdpref.contracts.SOURCES`,
#: in the order the config's error messages list them.
Participants = Literal["prolific", "invite", "simulated"]
if set(get_args(Participants)) != set(SOURCES):  # checked at import: the two cannot drift apart
    raise RuntimeError(f"crowdpref.config.study.Participants {get_args(Participants)} differs from "
                       f"crowdpref.contracts.SOURCES {SOURCES}")


_SECTIONS = ("questions", "study1", "study2", "screening", "aggregation", "evaluation", "filters", "publish", "crowd",
             "prolific", "invites")


class StudyConfig(_Section):
    """One RLHF data study. Defaults reproduce the published social-reasoning study."""

    name: Str
    """Slug (lowercase letters, digits, dashes): the run-folder name and Argilla prefix."""
    title: Str | None = None
    """Human-readable title; None: derived from the name."""
    description: Str = ""
    """What the study is for (shown in the summary and the dataset card)."""
    seed: Int = Field(0, ge=0, le=2**31 - 1)
    """Seed for every random choice (sampling, allocation, simulated crowd); 0 .. 2147483647
    (the study store keeps it as a 32-bit integer, on PostgreSQL too)."""
    participants: Participants = "prolific"
    """Who does the work: people recruited on Prolific (the method), people with invite links
    (pilots, an own panel), or the simulated crowd (demo, tests). The simulated crowd refuses to
    work on a study that takes real people."""
    questions: QuestionsConfig = Field(default_factory=QuestionsConfig)
    study1: Study1Config = Field(default_factory=Study1Config)
    study2: Study2Config = Field(default_factory=Study2Config)
    screening: ScreeningConfig = Field(default_factory=ScreeningConfig)
    aggregation: AggregationConfig = Field(default_factory=AggregationConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    """Does the data carry signal beyond answer length? (the ``evaluate`` stage)"""
    filters: FiltersConfig = Field(default_factory=FiltersConfig)
    """Preregistered filters (fixed before collection starts)."""
    publish: PublishConfig = Field(default_factory=PublishConfig)
    crowd: CrowdConfig = Field(default_factory=CrowdConfig)
    prolific: ProlificConfig = Field(default_factory=ProlificConfig)
    invites: InviteConfig = Field(default_factory=InviteConfig)

    _source: str | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _empty_sections(cls, data: Any) -> Any:
        """``study1:`` with nothing under it means "all defaults"."""
        if isinstance(data, dict):
            return {k: ({} if k in _SECTIONS and v is None else v) for k, v in data.items()}
        return data

    def _fit_inactivity_to_prolific_time(self) -> None:
        """A Prolific study's maximum allowed time is its ``inactive_after_minutes`` (the study
        payload sets it), so crowdpref never releases for inactivity someone whom Prolific still
        gives time: Prolific's rules do not let a researcher reject for that. Prolific accepts no
        maximum time below :attr:`~crowdpref.config.sections.ProlificStudy.least_allowed_minutes`:
        an ``inactive_after_minutes`` left out is raised to it; one set below it is refused."""
        for key in ("study1", "study2"):
            section, least = getattr(self, key), getattr(self.prolific, key).least_allowed_minutes
            if "inactive_after_minutes" not in section.model_fields_set:
                section.inactive_after_minutes = max(section.inactive_after_minutes, float(least))
            elif section.inactive_after_minutes < least:
                estimated = getattr(self.prolific, key).estimated_completion_minutes
                raise _problem(f"{key}.inactive_after_minutes",
                               f"{section.inactive_after_minutes:g} min is shorter than the least time Prolific "
                               f"allows a participant of this study ({least} min for "
                               f"prolific.{key}.estimated_completion_minutes: {estimated}), so crowdpref would "
                               "release people whom Prolific still gives time",
                               f"set it to at least {least}, or lower prolific.{key}.estimated_completion_minutes")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _check_slug("", value, "a name")

    @model_validator(mode="after")
    def _check(self) -> StudyConfig:
        if self.title is None:
            self.title = self.name.replace("-", " ").capitalize()
        if self.publish.pretty_name is None:
            self.publish.pretty_name = self.title
        if self.study1.username_prefix is None:
            self.study1.username_prefix = f"{self.name}-s1"
        if self.study2.username_prefix is None:
            self.study2.username_prefix = f"{self.name}-s2"
        if self.study1.username_prefix == self.study2.username_prefix:
            raise _problem("study2.username_prefix", "same prefix as study1.username_prefix",
                           "give the two studies different prefixes")
        if self.crowd.arrive_via == "prolific" and self.participants != "simulated":
            raise _problem("crowd.arrive_via", "the simulated crowd arrives through the fake Prolific only in a "
                           f"simulation, but participants is '{self.participants}'",
                           "set participants: simulated, or crowd.arrive_via: direct")
        if self.publish.privacy_undecided == "mask" and self.participants != "simulated":
            raise _problem("publish.privacy_undecided", "mask decides the privacy review for real "
                           f"people's answers without a person (participants is '{self.participants}')",
                           "remove it: decide each flagged row in the review file")
        if self.prolific.enabled is None:
            self.prolific.enabled = self.participants == "prolific"
        if self.prolific.enabled and self.participants != "prolific":
            raise _problem("participants", f"prolific.enabled is true but participants is '{self.participants}'",
                           "set participants: prolific, or prolific.enabled: false")
        if self.participants == "prolific" and not self.prolific.enabled and self.prolific.verify:
            raise _problem("prolific.enabled", "participants: prolific but Prolific is not enabled, so no arrival "
                           "can be verified (any made-up PROLIFIC_PID would get work and an account)",
                           "set prolific.enabled: true (with PROLIFIC_TOKEN), or prolific.verify: false for an "
                           "unverified pilot (the data card then marks the data as unverified)")
        if self.prolific.enabled and not self.prolific.verify:
            raise _problem("prolific.verify", "verify: false with prolific.enabled: true (the API is there, so "
                           "there is no reason to let unverified people in)",
                           "remove prolific.verify (it defaults to true)")
        if self.participants == "prolific" and self.prolific.enabled:
            self._fit_inactivity_to_prolific_time()
        for key in ("study1", "study2"):
            part = getattr(self.prolific, key)
            if part.max_places is not None and part.places is not None and part.max_places < part.places:
                raise _problem(f"prolific.{key}.max_places", f"{part.max_places} is below the first places "
                               f"({part.places})", f"set max_places >= {part.places}, or remove it")
        check_onboarding(self)  # a Prolific quiz pays those it screens out, below the study reward
        r = self.study1.responses_per_question
        if r < 2:
            raise _problem("study1.responses_per_question",
                           f"study 2 compares pairs of answers, so it needs at least 2 (got {r})",
                           "set responses_per_question to 2 or more (the method uses 4)")
        every = r * (r - 1) // 2
        if self.study2.pairs != "all" and self.study2.pairs > every:
            raise _problem("study2.pairs",
                           f"{self.study2.pairs} pairs per question, but {r} answers make only "
                           f"{every}", f"use at most {every}, or pairs: all")
        n = self.questions.expected_questions
        if n is not None:
            k = len(self.questions.categories)
            self._check_counts(n, f"{k} categor{'ies' if k != 1 else 'y'} x "
                                  f"{self.questions.per_category} per category")
        return self

    def _check_counts(self, n: int, origin: str) -> None:
        q = self.study1.questions_per_participant
        if q > n:
            raise _problem("study1.questions_per_participant",
                           f"{q} distinct questions per participant, but only {n} "
                           f"question{'s' * (n != 1)} ({origin})", f"use at most {n}, or add questions")
        _check_batches(self.study1.batches(n), self.study1.remainder, "study1.remainder",
                       f"answers ({n} questions x {self.study1.responses_per_question})")
        plan = self.plan(n)
        self._check_pairs(plan.n_pairs, f"{n} questions x {plan.pairs_per_question}")

    def _check_pairs(self, n_pairs: int, origin: str) -> None:
        p = self.study2.pairs_per_participant
        if p > n_pairs:
            raise _problem("study2.pairs_per_participant",
                           f"{p} distinct pairs per participant, but only {n_pairs} pairs ({origin})",
                           f"use at most {n_pairs}, or add questions")
        _check_batches(self.study2.batches(n_pairs), self.study2.remainder, "study2.remainder",
                       f"ratings ({n_pairs} pairs x {self.study2.ratings_per_pair})")

    # --- derived numbers ---------------------------------------------------------------------
    @property
    def source(self) -> str | None:
        """The YAML file this config came from (as given to
        :func:`~crowdpref.config.load.load_study`), if any."""
        return self._source

    def plan(self, n_questions: int) -> StudyPlan:
        """Participants, answers, pairs and ratings for ``n_questions`` questions."""
        per_q = self.study2.pairs_per_question(self.study1.responses_per_question)
        n_pairs = n_questions * per_q
        return StudyPlan(
            n_questions=n_questions,
            study1=self.study1.batches(n_questions),
            pairs_per_question=per_q,
            n_pairs=n_pairs,
            study2=self.study2.batches(n_pairs),
        )

    def check_question_count(self, n_questions: int) -> StudyPlan:
        """Check the plan for the questions actually loaded (Q <= n, pairs per participant <=
        pairs, remainder policy); raise a one-line :class:`~crowdpref.errors.ConfigError` if it
        cannot work."""
        try:
            if n_questions < 1:
                raise _problem("questions", "no questions were loaded",
                               "add questions (bank, files or LLM) or relax the filters")
            self._check_counts(n_questions, "loaded")
        except PydanticCustomError as exc:
            raise self._config_error(exc) from None
        return self.plan(n_questions)

    def check_pair_count(self, n_pairs: int) -> Batches:
        """The same study-2 checks for the pairs actually built (pairs.parquet may hold fewer
        than the plan: questions with too few usable answers, screened-out answers)."""
        try:
            self._check_pairs(n_pairs, "in pairs.parquet")
        except PydanticCustomError as exc:
            raise self._config_error(exc) from None
        return self.study2.batches(n_pairs)

    def _config_error(self, exc: PydanticCustomError) -> ConfigError:
        ctx = exc.context or {}
        return ConfigError(f"{self._source or 'study config'}: {ctx['field']}: {ctx['problem']}: {ctx['fix']}")

    def prolific_cost(self, n_questions: int) -> ProlificCost:
        """The study's cost on Prolific for ``n_questions`` questions (see
        :class:`~crowdpref.config.plan.ProlificCost`)."""
        plan = self.plan(n_questions)
        pr = self.prolific
        batches = (plan.study1.participants, plan.study2.participants)
        parts = (pr.study1, pr.study2)
        return ProlificCost(places=tuple(p.initial_places(b) for p, b in zip(parts, batches)),  # type: ignore[arg-type]
                            caps=tuple(p.places_cap(b) for p, b in zip(parts, batches)),  # type: ignore[arg-type]
                            rewards=(pr.study1.reward, pr.study2.reward), fee_rate=pr.fee_rate)

    def summary_rows(self, n_questions: int | None = None) -> list[tuple[str, str]]:
        """(label, value) rows describing the study, for the CLI. ``n_questions`` defaults to
        the expected count (categories x per_category) when that is known. The wording is
        :mod:`crowdpref.config.explain`'s."""
        n = n_questions if n_questions is not None else self.questions.expected_questions
        rows = [
            ("Study", f"{self.name}: {self.title}"),
            ("Seed", str(self.seed)),
            ("Recruitment", self.participants + ("" if self.participants != "simulated"
                                                  else " (the simulated crowd: not real people)")),
            ("Questions", describe_questions(self.questions)),
            ("Study 1", describe_study1(self.study1)),
            ("Study 2", describe_study2(self.study2)),
        ]
        if n is not None:
            rows += describe_plan(self.plan(n))
        rows += [
            ("Screening", describe_screening(self.screening)),
            ("Aggregation", describe_aggregation(self.aggregation)),
            ("Filters", describe_filters(self.filters)),
            ("Publish", describe_publish(self.publish)),
        ]
        if self.prolific.enabled:
            rows.append(("Prolific", describe_prolific(self.prolific)))
            if n is not None:
                rows.append(("Cost on Prolific", self.prolific_cost(n).describe()))
        elif self.participants == "prolific":
            rows.append(("Prolific", UNVERIFIED_PILOT))
        else:
            rows.append(("Participants", describe_crowd(self.crowd)))
        return rows
