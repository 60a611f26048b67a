"""The sections of a study config: one pydantic model per top-level YAML section, with the
checks that need only that section.

    questions:    :class:`QuestionsConfig` (categories :class:`Category`, LLM :class:`LLMExpansion`)
    study1:       :class:`Study1Config` (:class:`QualityScale`, :class:`InstructedChecks`)
    study2:       :class:`Study2Config` (:class:`RatingChecks`)
    screening:    :class:`ScreeningConfig`
    aggregation:  :class:`AggregationConfig`
    evaluation:   :class:`EvaluationConfig`
    filters:      :class:`FiltersConfig`
    publish:      :class:`PublishConfig`
    crowd:        :class:`CrowdConfig`
    prolific:     :class:`ProlificConfig` (:class:`ProlificStudy` with :class:`LaunchConfig`,
                  :class:`ProlificFilters`)
    invites:      :class:`InviteConfig`

Checks that compare sections (prefixes, Prolific against ``participants``, question and pair
counts) are :class:`~crowdpref.config.study.StudyConfig`'s. Field docstrings are the
reference documentation.
"""

from __future__ import annotations

import difflib
import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from crowdpref.config.base import (
    SLUG_RE,
    Bool,
    Float,
    Int,
    Str,
    _check_slug,
    _problem,
    _resolve_path,
    _Section,
    slugify,
)
from crowdpref.config.launch import LaunchConfig
from crowdpref.config.onboarding import Study1Onboarding, Study2Onboarding
from crowdpref.config.plan import Batches

REPO_PART_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
LICENSE_RE = re.compile(r"^[a-z0-9][a-z0-9.+-]*$")
#: The most answers per question (R) and ratings per pair a study may ask for. The method uses 4
#: and 3; beyond 20 the plan is almost surely a typo (100000 ratings per pair would plan
#: millions of ratings) and no agreement statistic here needs more.
MAX_PER_ITEM = 20
QUESTION_FILE_SUFFIXES = (".csv", ".jsonl")

#: The 19 sub-task categories of the published study: (slug, title, what it covers).
DEFAULT_CATEGORIES: tuple[tuple[str, str, str], ...] = (
    ("understanding-of-emotions", "Understanding of emotions",
     "recognising what someone feels and why"),
    ("intent-recognition", "Intent recognition",
     "working out what a person wants or means beyond their literal words"),
    ("social-norms", "Social norms", "the unwritten rules of behaviour in a setting"),
    ("social-responsibility", "Social responsibility",
     "duties towards other people, communities and society"),
    ("reading-social-cues", "Reading social cues",
     "tone, body language and other indirect signals"),
    ("perspective-taking", "Perspective taking", "seeing a situation from someone else's view"),
    ("conflict-resolution", "Conflict resolution", "calming and settling disagreements fairly"),
    ("ethics", "Ethics", "principles of right and wrong applied to everyday choices"),
    ("moral-judgement", "Moral judgement", "weighing competing values to decide what is right"),
    ("communication-skills", "Communication skills",
     "saying things clearly, kindly and at the right moment"),
    ("negotiation-strategies", "Negotiation strategies",
     "reaching agreements that both sides can accept"),
    ("empathy", "Empathy", "sharing in and responding to another person's feelings"),
    ("compassion", "Compassion", "wanting to ease someone's suffering, and acting on it"),
    ("trust", "Trust", "building, keeping and repairing trust between people"),
    ("humour", "Humour", "when and how jokes land, and when they hurt"),
    ("kindness", "Kindness", "small and large acts of consideration for others"),
    ("diversity-and-cultural-differences", "Diversity and cultural differences",
     "respecting people of other backgrounds, cultures and beliefs"),
    ("figurative-language", "Figurative language",
     "idioms, metaphors, sarcasm and other non-literal speech"),
    ("self-awareness", "Self-awareness",
     "understanding one's own feelings, biases and effect on others"),
)
_DEFAULT_CATEGORY_BY_SLUG = {slug: (title, about) for slug, title, about in DEFAULT_CATEGORIES}

#: Labels each detoxify model returns (used to check ``screening.thresholds``).
DETOXIFY_LABELS: dict[str, tuple[str, ...]] = {
    "original": ("toxicity", "severe_toxicity", "obscene", "threat", "insult", "identity_attack"),
    "unbiased": (
        "toxicity", "severe_toxicity", "obscene", "threat", "insult", "identity_attack",
        "sexual_explicit", "male", "female", "homosexual_gay_or_lesbian", "christian", "jewish",
        "muslim", "black", "white", "psychiatric_or_mental_illness",
    ),
}
DETOXIFY_LABELS["multilingual"] = DETOXIFY_LABELS["unbiased"]


# --- questions ---------------------------------------------------------------------------
class Category(_Section):
    """One sub-task category. In YAML a plain string is enough: ``- empathy`` (a slug of a
    default category) or ``- Table manners`` (a title; its slug is derived)."""

    slug: Str
    """Identifier used in question files and records (lowercase letters, digits, dashes)."""
    title: Str
    """Human-readable name shown to participants and in the dataset card."""
    description: Str = ""
    """What the category covers; given to the LLM when it writes new questions."""

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        if isinstance(data, str):
            slug = slugify(data)
            if slug in _DEFAULT_CATEGORY_BY_SLUG:
                title, about = _DEFAULT_CATEGORY_BY_SLUG[slug]
                return {"slug": slug, "title": title, "description": about}
            title = data.strip() if data != slug else slug.replace("-", " ").capitalize()
            return {"slug": slug, "title": title}
        if isinstance(data, dict) and "slug" not in data and isinstance(data.get("title"), str):
            return {**data, "slug": slugify(data["title"])}
        return data

    @field_validator("slug")
    @classmethod
    def _slug(cls, value: str) -> str:
        if not SLUG_RE.fullmatch(value):
            raise _problem("", f"must be lowercase letters, digits and dashes (got {value!r})",
                           f"use {slugify(value) or 'my-category'!r}")
        return value

    @model_validator(mode="after")
    def _known_or_described(self) -> Category:
        """A category outside the study's 19 must say what it covers: a bare unknown name is
        far more often a typo (``empthy``) or a wrong idea (``astrology``) than a new category,
        and nothing (bank, LLM, card) knows what it means."""
        if self.slug not in _DEFAULT_CATEGORY_BY_SLUG and not self.description.strip():
            close = difflib.get_close_matches(self.slug, list(_DEFAULT_CATEGORY_BY_SLUG), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise _problem("", f"unknown category {self.slug!r} (not one of the study's 19 and no description)",
                           f"{hint}use a built-in slug (`crowdpref validate` lists them in its docs), or add a "
                           f"new category with what it covers: {{title: {self.title}, description: ...}}")
        return self


def _default_categories() -> list[Category]:
    return [Category(slug=s, title=t, description=d) for s, t, d in DEFAULT_CATEGORIES]


class LLMExpansion(_Section):
    """Widening the question set with an LLM (an OpenAI-compatible endpoint from settings)."""

    enabled: Bool = False
    """Ask the LLM to write more questions per category."""
    model: Str | None = None
    """Model name; None: the ``openai_model`` setting."""
    temperature: Float = Field(0.9, ge=0, le=2)
    """Sampling temperature (0-2); higher gives more varied questions."""
    per_category: Int | None = Field(None, ge=1)
    """New questions to request per category; None: as many as ``questions.per_category`` needs."""
    timeout_s: Float = Field(60.0, gt=0)
    """Seconds to wait for one LLM call."""
    max_retries: Int = Field(2, ge=0)
    """Retries of a failed LLM call before the stage fails."""


class QuestionsConfig(_Section):
    """Where questions come from and how they are filtered."""

    categories: list[Category] = Field(default_factory=_default_categories, min_length=1)
    """Sub-task categories; only questions in these are used. Default: the study's 19."""
    bank: Bool = True
    """Use the curated question bank shipped with crowdpref."""
    files: list[Path] = Field(default_factory=list)
    """Extra question files (CSV or JSONL with ``question`` and ``category`` columns);
    relative paths are resolved against the study YAML's folder."""
    per_category: Int | None = Field(None, ge=1)
    """Target questions per category: sources are sampled down to it (seeded) and, with the
    LLM enabled, topped up to it. None: keep every available question."""
    llm: LLMExpansion = Field(default_factory=LLMExpansion)
    """LLM expansion of the question set."""
    min_chars: Int = Field(20, ge=1)
    """Questions shorter than this (characters) are dropped."""
    max_chars: Int = Field(600, ge=1)
    """Questions longer than this (characters) are dropped."""
    near_duplicate_threshold: Float = Field(90.0, ge=0, le=100)
    """Similarity score (0-100) at or above which two questions count as duplicates and only
    the first is kept; 100 drops only identical questions."""

    @field_validator("files", mode="before")
    @classmethod
    def _files(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return []
        if not isinstance(value, list):
            raise _problem("", f"must be a list of file paths (got {value!r})",
                           "write one `- path/to/questions.csv` line per file")
        out = []
        for i, item in enumerate(value):
            path = _resolve_path(item, info, f"[{i}]")
            if path.suffix.lower() not in QUESTION_FILE_SUFFIXES:
                raise _problem(f"[{i}]", f"unsupported file type {path.suffix or '(none)'!r} "
                               f"for {item!r}", "use a .csv or .jsonl file")
            if not path.is_file():
                raise _problem(f"[{i}]", f"file not found: {path}",
                               "fix the path (relative paths start at the study YAML's folder)")
            out.append(path)
        return out

    @model_validator(mode="after")
    def _check(self) -> QuestionsConfig:
        slugs = [c.slug for c in self.categories]
        dupes = sorted({s for s in slugs if slugs.count(s) > 1})
        if dupes:
            raise _problem("categories", f"duplicate categories: {', '.join(dupes)}",
                           "list each category once")
        if self.min_chars > self.max_chars:
            raise _problem("min_chars", f"min_chars {self.min_chars} is above max_chars "
                           f"{self.max_chars}", "make min_chars <= max_chars")
        if not (self.bank or self.files or self.llm.enabled):
            raise _problem("bank", "no question source: bank is false, no files and the LLM is "
                           "off", "set bank: true, list files, or set llm.enabled: true")
        if self.llm.enabled and self.per_category is None and self.llm.per_category is None:
            raise _problem("llm.per_category", "the LLM is enabled but nothing says how many "
                           "questions to write", "set questions.per_category (a target) or "
                           "questions.llm.per_category")
        return self

    @property
    def expected_questions(self) -> int | None:
        """Questions the study will have when a per-category target is set, else None."""
        return None if self.per_category is None else self.per_category * len(self.categories)

    @property
    def category_slugs(self) -> list[str]:
        return [c.slug for c in self.categories]


# --- study 1 -------------------------------------------------------------------------------
class QualityScale(_Section):
    """Range of the question-quality rating participants give in study 1."""

    min: Int = 1
    """Lowest rating (worst question)."""
    max: Int = 5
    """Highest rating (best question)."""

    @model_validator(mode="after")
    def _check(self) -> QualityScale:
        if not 0 <= self.min < self.max <= 10:
            raise _problem("max", f"needs 0 <= min < max <= 10 (got {self.min}..{self.max})",
                           "use a range inside 0-10 (Argilla rating questions), e.g. min: 1, max: 5")
        return self

    @property
    def values(self) -> list[int]:
        return list(range(self.min, self.max + 1))


OnFail = Literal["keep", "exclude"]


def _check_min_passed(min_passed: int | None, count: int) -> None:
    if min_passed is not None and min_passed > count:
        raise _problem("min_passed", f"{min_passed} is more than the {count} checks",
                       f"use at most {count}, or leave it out (all must be passed)")


class InstructedChecks(_Section):
    """Study 1's quality checks: instructed-response items mixed into every batch. Each one
    tells the participant exactly what to write and which rating to give (drawn per
    participant from a curated set shipped with crowdpref, :mod:`crowdpref.checks`), and is
    graded automatically when they have answered it.

    Where they go: among the participant's questions. Argilla shows every participant their
    queue in its own shuffled order, so no position inside the batch can be promised."""

    count: Int = Field(0, ge=0, le=5)
    """Instructed-response items per batch; 0 (the default, as in the published study): none."""
    min_passed: Int | None = Field(None, ge=0)
    """How many must be passed to pass; None: all of them."""
    on_fail: OnFail = "keep"
    """What follows a failed check: ``keep`` flags the participant (their answers count; the
    preregistered filters decide about the release); ``exclude`` takes their answers out of
    the count and returns those slots to the pool, so someone else answers them and every
    question still ends with R counted answers."""

    @model_validator(mode="after")
    def _check(self) -> InstructedChecks:
        _check_min_passed(self.min_passed, self.count)
        return self

    @property
    def needed(self) -> int:
        return self.count if self.min_passed is None else self.min_passed


class RatingChecks(_Section):
    """Study 2's quality checks, mixed into every batch: gold pairs - a clearly good and a
    clearly bad answer (off-topic, rude or empty of reasoning) to a question, from a curated
    set shipped with crowdpref (:mod:`crowdpref.checks`), passed by preferring the good one -
    and repeated pairs - one of the rater's own pairs shown again in the opposite A/B order,
    passed when the two ratings, turned to the same orientation, differ by at most
    ``repeat_tolerance`` points. Argilla shuffles every participant's queue, so the checks sit
    at a random place among the pairs."""

    gold_pairs: Int = Field(0, ge=0, le=5)
    """Gold pairs per batch; 0 (the default, as in the published study): none."""
    repeated_pairs: Int = Field(0, ge=0, le=5)
    """Pairs of the batch shown a second time, in the opposite order; 0 (the default): none."""
    repeat_tolerance: Int = Field(2, ge=0)
    """Largest difference (scale points, same orientation) between a pair's two ratings that
    still counts as consistent."""
    min_passed: Int | None = Field(None, ge=0)
    """How many checks must be passed to pass; None: all of them."""
    on_fail: OnFail = "keep"
    """``keep``: flag the rater (their ratings count; the preregistered filters decide about
    the release); ``exclude``: take their ratings out of the count and return those slots to
    the pool, so every pair still ends with its ratings from raters who passed."""

    @property
    def count(self) -> int:
        return self.gold_pairs + self.repeated_pairs

    @property
    def needed(self) -> int:
        return self.count if self.min_passed is None else self.min_passed

    @model_validator(mode="after")
    def _check(self) -> RatingChecks:
        _check_min_passed(self.min_passed, self.count)
        return self


def _no_attention_check(data: Any) -> Any:
    """``attention_check`` (an older config) gets its own message: it was replaced."""
    if isinstance(data, dict) and "attention_check" in data:
        raise _problem("attention_check", "was replaced by checks (automatically graded "
                       "instructed-response items drawn from crowdpref's curated set)",
                       "remove attention_check and write e.g. checks: {count: 1, on_fail: keep}")
    return data


class Study1Config(_Section):
    """Study 1: participants write answers to questions and rate each question's quality."""

    responses_per_question: Int = Field(4, ge=1, le=MAX_PER_ITEM)
    """R: written answers collected per question (from R different participants)."""
    questions_per_participant: Int = Field(10, ge=1)
    """Q: distinct questions in one participant's batch."""
    quality_scale: QualityScale = Field(default_factory=QualityScale)
    """Question-quality rating scale."""
    username_prefix: Str | None = None
    """Prefix of study-1 Argilla usernames/workspaces (``<prefix>-0001`` ...); None: ``<name>-s1``."""
    checks: InstructedChecks = Field(default_factory=InstructedChecks)
    """Instructed-response checks in every batch, graded automatically, and what a failure does."""
    inactive_after_minutes: Float = Field(60.0, gt=0)
    """A participant with no activity (a submitted answer or a saved draft) for this long after
    their claim counts as dropped out and their unanswered questions go back to the pool.
    On Prolific (``participants: prolific``) it is also the study's maximum allowed time there,
    so it must be at least Prolific's least for ``estimated_completion_minutes`` (2 + 2e + 2 sqrt(e);
    left out, it is raised to that; below it, the config is refused)."""
    backstop_minutes: Float = Field(30.0, gt=0)
    """Monitoring reads a participant's answers back from Argilla when Argilla's webhook (sent
    to the portal as they work) reports activity; one not read for this long is read anyway -
    the backstop for a lost webhook or a portal that was down. Without the portal's webhook,
    every monitoring pass reads every active participant."""
    pool_size: Int = Field(10, ge=0)
    """Warm accounts kept ready (Argilla user, workspace, empty dataset), so a participant who
    arrives gets their work in one call; refilled by every collection run. 0: each account is
    created when its participant arrives (slower)."""
    remainder: Literal["smaller_last", "error"] = "smaller_last"
    """When n_questions * R is not a multiple of Q: ``smaller_last`` gives the last
    participant fewer questions; ``error`` refuses to start."""
    too_fast_seconds: Float = Field(20.0, ge=0)
    """Time-on-task flag: a participant whose median time per answer is below this many
    seconds is marked too fast in the collection artifacts (writing an explained answer takes
    longer). The time per answer is the gap between consecutive submissions, the first counted
    from the claim (see :mod:`crowdpref.work_quality`). 0: no flag."""
    onboarding: Study1Onboarding | None = None
    """Onboarding before the work (:mod:`crowdpref.onboarding`): an introduction, worked
    examples (a question with a strong and a weak answer), practice with feedback and a
    qualification quiz, run by the portal before the claim. None (absent): off, as in the
    published study."""

    @model_validator(mode="after")
    def _check(self) -> Study1Config:
        if self.username_prefix is not None:
            _check_slug("username_prefix", self.username_prefix, "a prefix")
        return self

    _attention_check = model_validator(mode="before")(_no_attention_check)

    def batches(self, n_questions: int) -> Batches:
        """The split of ``n_questions * R`` answers into batches of Q."""
        return Batches(n_questions * self.responses_per_question, self.questions_per_participant)


# --- study 2 -------------------------------------------------------------------------------
_SCALE_WORDS = {
    1: ["preference"],
    2: ["strong", "slight"],
    3: ["strong", "moderate", "slight"],
    4: ["strong", "moderate", "weak", "slight"],
    5: ["very strong", "strong", "moderate", "weak", "slight"],
}


class Study2Config(_Section):
    """Study 2: other participants rate pairs of answers to the same question on an A/B scale."""

    ratings_per_pair: Int = Field(3, ge=1, le=MAX_PER_ITEM)
    """Ratings collected per answer pair (from different participants)."""
    pairs_per_participant: Int = Field(60, ge=1)
    """Pairs in one participant's batch."""
    scale_points: Int = 8
    """Points of the A/B scale: 1 = strong preference for A ... N = strong preference for B.
    Must be even (no neutral midpoint), 2-10."""
    pairs: Literal["all"] | Int = "all"
    """Pairs per question: ``all`` = every pair of its R answers (R*(R-1)/2), or a maximum
    number per question (sampled, seeded)."""
    exclude_study1_participants: Bool = True
    """Keep people who wrote answers in study 1 out of study 2."""
    checks: RatingChecks = Field(default_factory=RatingChecks)
    """Gold and repeated pairs in every batch, graded automatically, and what a failure does."""
    username_prefix: Str | None = None
    """Prefix of study-2 Argilla usernames/workspaces; None: ``<name>-s2``."""
    inactive_after_minutes: Float = Field(60.0, gt=0)
    """A rater with no activity (submission or draft) for this long after their claim counts
    as dropped out; their pairs return to the pool.
    On Prolific (``participants: prolific``) it is also the study's maximum allowed time there,
    so it must be at least Prolific's least for ``estimated_completion_minutes`` (2 + 2e + 2 sqrt(e);
    left out, it is raised to that; below it, the config is refused)."""
    backstop_minutes: Float = Field(30.0, gt=0)
    """Monitoring reads a participant's answers back from Argilla when Argilla's webhook (sent
    to the portal as they work) reports activity; one not read for this long is read anyway -
    the backstop for a lost webhook or a portal that was down. Without the portal's webhook,
    every monitoring pass reads every active participant."""
    pool_size: Int = Field(10, ge=0)
    """Warm accounts kept ready (Argilla user, workspace, empty dataset), so a participant who
    arrives gets their work in one call; refilled by every collection run. 0: each account is
    created when its participant arrives (slower)."""
    remainder: Literal["smaller_last", "error"] = "smaller_last"
    """When n_pairs * ratings_per_pair is not a multiple of pairs_per_participant:
    ``smaller_last`` gives the last participant fewer pairs; ``error`` refuses to start."""
    too_fast_seconds: Float = Field(4.0, ge=0)
    """Time-on-task flag: a rater whose median time per pair is below this many seconds is
    marked too fast in the collection artifacts (reading two answers takes longer). The time
    per pair is the gap between consecutive submissions, the first counted from the claim
    (see :mod:`crowdpref.work_quality`). 0: no flag."""
    onboarding: Study2Onboarding | None = None
    """Onboarding before the work (:mod:`crowdpref.onboarding`): an introduction, worked
    examples (a pair with the rating the team would give, and why), practice with feedback and
    a qualification quiz, run by the portal before the claim. None (absent): off, as in the
    published study."""

    @field_validator("pairs", mode="before")
    @classmethod
    def _pairs(cls, value: Any) -> Any:
        if value == "all" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        raise _problem("", f"must be 'all' or a whole number >= 1 (got {value!r})",
                       "write pairs: all, or a maximum number of pairs per question such as 3")

    @model_validator(mode="after")
    def _check(self) -> Study2Config:
        n = self.scale_points
        if n < 2 or n > 10 or n % 2:
            raise _problem("scale_points", f"must be an even number between 2 and 10 (got {n})",
                           "use an even number such as 8, so there is no neutral midpoint")
        if self.username_prefix is not None:
            _check_slug("username_prefix", self.username_prefix, "a prefix")
        for i, example in enumerate(self.onboarding.examples if self.onboarding is not None else ()):
            if not 1 <= example.rating <= n:
                raise _problem(f"onboarding.examples[{i}].rating", f"is {example.rating}, off the "
                               f"{n}-point scale", f"use 1 (strong preference for A) to {n} "
                               "(strong preference for B)")
        return self

    @property
    def midpoint(self) -> float:
        """Scale centre: a mean rating below it prefers A, above it prefers B, equal is a tie."""
        return (self.scale_points + 1) / 2

    @property
    def scale_labels(self) -> list[str]:
        """Label per scale point, 1..N (for 8: strong/moderate/weak/slight preference for A, B)."""
        words = _SCALE_WORDS[self.scale_points // 2]
        a = [f"{w} preference for A" if w != "preference" else "preference for A" for w in words]
        b = [f"{w} preference for B" if w != "preference" else "preference for B"
             for w in reversed(words)]
        return [s[0].upper() + s[1:] for s in a + b]

    def pairs_per_question(self, responses_per_question: int) -> int:
        every = responses_per_question * (responses_per_question - 1) // 2
        return every if self.pairs == "all" else min(self.pairs, every)

    def batches(self, n_pairs: int) -> Batches:
        """The split of ``n_pairs * ratings_per_pair`` ratings into batches."""
        return Batches(n_pairs * self.ratings_per_pair, self.pairs_per_participant)


# --- screening, aggregation, publish -------------------------------------------------------
def _default_thresholds() -> dict[str, float]:
    return {label: 0.5 for label in DETOXIFY_LABELS["original"]}


class ScreeningConfig(_Section):
    """Hate-speech screening of the written answers with detoxify."""

    enabled: Bool = True
    """Screen the answers (the published study did)."""
    model: Literal["original", "unbiased", "multilingual"] = "original"
    """Detoxify model."""
    checkpoint: Path | None = None
    """Local checkpoint file for the model (offline use); relative to the study YAML's folder.
    None: detoxify's download (needs network or a seeded cache)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where to run the classifier; ``auto`` uses CUDA when available."""
    batch_size: Int = Field(32, ge=1)
    """Texts per classifier batch."""
    thresholds: dict[str, Float] = Field(default_factory=_default_thresholds)
    """Score (0-1) per label at or above which an answer is flagged; labels not listed are
    recorded but never flag."""
    policy: Literal["flag", "drop"] = "flag"
    """``flag``: keep flagged answers, marked (the published study); ``drop``: remove them."""
    fallback: Literal["profanity-check"] | None = None
    """Screen with alt-profanity-check when detoxify cannot be loaded; None: fail instead."""
    runner: Literal["local", "dask"] = "local"
    """``dask``: score chunks of the answers in parallel on a Dask cluster (prefect-dask's
    DaskTaskRunner); ``local``: in the flow's own process."""
    dask_workers: Int = Field(2, ge=1)
    """Worker processes of the local Dask cluster started for screening (ignored with an address)."""
    dask_address: Str | None = None
    """Scheduler address of an existing Dask cluster (e.g. tcp://scheduler:8786); None: start a local one."""
    precision: Literal["float32", "bfloat16"] = "float32"
    """bfloat16 runs the model under autocast: several times faster on CPUs with AMX/AVX-512
    and on GPUs, but scores move by ~3e-3, so an answer right at a threshold can flip."""

    @field_validator("checkpoint", mode="before")
    @classmethod
    def _checkpoint(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        path = _resolve_path(value, info, "")
        if not path.is_file():
            raise _problem("", f"file not found: {path}",
                           "fix the path (relative paths start at the study YAML's folder) "
                           "or remove it")
        return path

    @model_validator(mode="after")
    def _check(self) -> ScreeningConfig:
        if not self.thresholds:
            raise _problem("thresholds", "no labels: nothing could ever be flagged",
                           "give at least one label, e.g. toxicity: 0.5")
        known = DETOXIFY_LABELS[self.model]
        for label, value in self.thresholds.items():
            if self.checkpoint is None and label not in known:
                close = difflib.get_close_matches(label, known, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise _problem(f"thresholds.{label}",
                               f"unknown label for the {self.model!r} model",
                               f"{hint}use one of {', '.join(known)}")
            if not 0 <= value <= 1:
                raise _problem(f"thresholds.{label}", f"must be between 0 and 1 (got {value})",
                               "use a score such as 0.5")
        return self


class AggregationConfig(_Section):
    """How the ratings of each pair become one chosen/rejected row."""

    incomplete_pairs: Literal["report_and_keep", "drop"] = "report_and_keep"
    """Pairs with fewer than ratings_per_pair ratings (but at least one): keep them and list
    them in the report, or drop them. Pairs with no rating are always left out."""
    ties: Literal["report_and_exclude"] = "report_and_exclude"
    """Pairs whose mean rating sits exactly on the midpoint: listed in the report and left
    out of the chosen/rejected data."""
    bradley_terry: Bool = False
    """Also fit a Bradley-Terry model per question and report each answer's strength (with a
    bootstrap interval, ``bt_score_low``/``bt_score_high``)."""
    method: Literal["mean", "reliability_weighted", "gold_anchored"] = "gold_anchored"
    """What decides chosen/rejected: ``mean`` - the plain mean of a pair's un-swapped ratings
    (what the published method did); ``reliability_weighted`` - each rating weighted by its
    rater's fitted reliability and corrected for the rater's A/B position bias
    (:mod:`crowdpref.aggregation.reliability`; needs a rater_key on every rating);
    ``gold_anchored`` (the default) - the same weights, each rater's slope scaled and signed by
    their record on study 2's gold pairs, so agreement with a biased majority cannot outweigh
    being right on gold; without gold outcomes, the plain mean. Chosen from
    ``benchmarks/aggregation_quality.py``: the only method never more than 1 point below the
    plain mean in any of its cells, off-model crowds included (agreement-only weighting fell 9
    to 15 points below it where 40% or more of the raters follow answer length). Rater
    reliability is fitted and written to raters.parquet under every method when rater keys are
    present."""
    bootstrap_samples: Int = Field(1000, ge=100, le=100_000)
    """Bootstrap resamples (seeded with the study seed) behind each preference row's
    ``p_chosen`` and ``mean_rating_low``/``mean_rating_high``, and the Bradley-Terry intervals."""
    interval_level: Float = Field(0.9, gt=0, lt=1)
    """Coverage of the bootstrap percentile intervals (0.9: the 5th to 95th percentile)."""


class FiltersConfig(_Section):
    """Preregistered filters: which participants' work the default release leaves out. Fixed
    before collection starts (recorded in the study store when study 1 begins; aggregation
    refuses rules changed since) and applied mechanically by :mod:`crowdpref.filters`. A
    removed study-1 participant takes their answers out, and with them every rating of a pair
    holding one of those answers; a removed study-2 participant takes their ratings out. The
    release keeps everything in its ``*_raw`` configurations, each row marked with the rules
    that removed it."""

    failed_checks: Bool = True
    """Leave out participants whose quality checks failed (``checks_verdict`` "failed" in
    participants.parquet)."""
    too_fast: Bool = True
    """Leave out participants flagged ``too_fast`` in participants.parquet (their median time
    per item below the study's ``too_fast_seconds``)."""
    incomplete: Bool = False
    """Leave out participants who did not finish (status "released": they returned, timed out
    or went quiet). Off by default: the answers and ratings they submitted are real work, and
    since their unanswered items went to other people, dropping them leaves their questions and
    pairs short of R."""
    min_reliability: Float | None = Field(None, ge=0, le=1)
    """Leave out study-2 raters whose fitted reliability (raters.parquet, 0-1) is below this;
    None: off. A rater without a reliability value is kept."""

    def active(self) -> list[str]:
        """The names of the rules that are on."""
        return [name for name in ("failed_checks", "too_fast", "incomplete")
                if getattr(self, name)] + (["min_reliability"] if self.min_reliability is not None
                                           else [])

    def describe(self) -> str:
        """One line for the summary."""
        on = [f"raters with reliability below {self.min_reliability:g}" if n == "min_reliability"
              else n.replace("_", " ") for n in self.active()]
        return "off (every participant kept)" if not on else "leave out " + ", ".join(on)


class RewardModelConfig(_Section):
    """The optional fine-tuning path of the ``evaluate`` stage (:mod:`crowdpref.evaluation.finetune`):
    TRL's ``RewardTrainer`` on a small causal LM, trained on the same training questions and
    scored on the same held-out ones as the cheap models, with its own shuffled-label control.
    Meant for a machine with a GPU (minutes there; hours on CPU at full size)."""

    model: Str
    """A Hugging Face model id (e.g. ``HuggingFaceTB/SmolLM2-135M``) or a local folder with the
    model's files; loaded with ``transformers`` (the Hub is reached unless HF_HUB_OFFLINE=1)."""
    random_weights: Bool = False
    """Smoke test only: build the model from its config with RANDOM weights when the folder has
    no weight files. Its numbers are then flagged "not a result" everywhere (evaluation.json,
    the artifact, the card). False: missing weights are an error."""
    epochs: Float = Field(1.0, gt=0, le=20)
    """Passes over the training pairs."""
    learning_rate: Float = Field(1e-5, gt=0, lt=1)
    """The optimiser's learning rate (TRL's AdamW)."""
    batch_size: Int = Field(8, ge=1, le=1024)
    """Pairs per training step (per device)."""
    max_length: Int = Field(512, ge=16, le=32768)
    """Tokens of prompt + answer; longer training pairs are left out (TRL's rule, counted in the
    report), longer held-out texts are cut from the left (the prompt's start)."""
    shuffles: Int = Field(1, ge=0, le=20)
    """Models trained on shuffled training labels (the control); 0: no control (the report
    says so)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto: the GPU when torch sees one, else the CPU."""


class EvaluationConfig(_Section):
    """The ``evaluate`` stage (:mod:`crowdpref.evaluation`): before anything big is trained,
    does a small reward model trained on part of the preferences beat "the longer answer wins"
    on held-out questions? Cheap (seconds at demo size, no weights downloaded)."""

    enabled: Bool = False
    """Run the stage after aggregation in the ``study`` flow (it can always be run alone:
    ``crowdpref run evaluate STUDY.yaml``)."""
    test_share: Float = Field(0.3, gt=0, lt=1)
    """Share of each category's questions held out for testing (at least one question per
    category with two or more). A question's pairs are all on one side of the split."""
    seed: Int | None = Field(None, ge=0, le=2**31 - 1)
    """Seed of the split, the shuffled-label control and the bootstrap; None: the study's seed."""
    bootstrap_samples: Int = Field(1000, ge=100, le=100_000)
    """Resamples of the held-out QUESTIONS behind every 95% interval."""
    embedding_model: Str | None = "sentence-transformers/all-MiniLM-L6-v2"
    """A sentence-transformers model for the frozen-embedding reward model, loaded from local
    files only (a folder or the Hugging Face cache: nothing is downloaded); None: off. When it
    or sentence-transformers is missing the model is skipped and the report says so."""
    reward_model: RewardModelConfig | None = None
    """Fine-tune a small causal LM as a reward model too (:class:`RewardModelConfig`); None (the
    default): off. Needs ``trl``, ``torch`` and ``transformers`` (``pip install crowdpref[test]``)."""


class PublishConfig(_Section):
    """The Hugging Face Hub release."""

    repo_id: Str | None = None
    """Dataset repo ``owner/name``; None: the ``hf_repo_id`` setting."""
    private: Bool = True
    """Create the repo private (make it public on the Hub after review)."""
    license: Str = "mit"
    """Licence id for the card (Hub licence identifiers, lowercase)."""
    citation: Str | None = None
    """BibTeX or text citation for the card."""
    pretty_name: Str | None = None
    """Dataset title on the Hub; None: the study title."""
    content_warning: Bool = True
    """Put a content warning on the card (flagged answers are kept)."""
    tags: list[Str] = Field(default_factory=lambda: ["human-feedback", "rlhf"])
    """Card tags."""
    timestamp_precision: Literal["day", "hour", "minute", "second", "microsecond"] = "day"
    """How precisely published timestamps (``submitted_at``) are kept: truncated in UTC to the
    day (default), hour, minute or second, or ``microsecond`` (as recorded). Coarse times make
    participants harder to re-identify from when they worked (crowdpref.release.privacy)."""
    ner_model: Str | None = None
    """The spaCy pipeline that finds names of people and places in answers before publication:
    an installed package (``en_core_web_lg``) or a folder written by ``nlp.to_disk``; None: the
    first installed of en_core_web_lg/md/sm, and without one names and places are not looked
    for - said loudly in the log, ``privacy.json`` and the card (crowdpref.release.recognisers)."""
    privacy_undecided: Literal["block", "mask"] = "block"
    """What the build does with a flagged answer nobody decided in the privacy review file:
    ``block`` (refuse to publish until each is decided) or ``mask`` - allowed only with
    ``participants: simulated``, so the demo publishes (crowdpref.release.review)."""

    @field_validator("repo_id")
    @classmethod
    def _repo_id(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = value.split("/")
        if len(parts) != 2 or not all(REPO_PART_RE.fullmatch(p) for p in parts) or len(parts[1]) > 96:
            raise _problem("", f"must be 'owner/name' (letters, digits, '-', '_', '.') "
                           f"(got {value!r})", "write it like my-org/social-reasoning-rlhf")
        return value

    @field_validator("license")
    @classmethod
    def _license(cls, value: str) -> str:
        if not LICENSE_RE.fullmatch(value):
            raise _problem("", f"must be a lowercase Hub licence id (got {value!r})",
                           "use e.g. mit, apache-2.0 or cc-by-4.0")
        return value


# --- participants ------------------------------------------------------------------------
class CrowdConfig(_Section):
    """Simulated participants (the demo and tests): how they behave."""

    dropout_rate: Float = Field(0.05, ge=0, le=1)
    """Share of participants who start and then abandon their batch."""
    low_effort_rate: Float = Field(0.05, ge=0, le=1)
    """Share of study-1 answers that are short and low-effort."""
    offensive_rate: Float = Field(0.02, ge=0, le=1)
    """Share of study-1 answers that are offensive (exercises screening)."""
    rater_noise: Float = Field(1.0, ge=0)
    """Standard deviation (scale points) of a rater's noise around the true preference."""
    position_bias: Float = Field(0.0, ge=-2, le=2)
    """Shift (scale points) of every rating: negative favours A, positive favours B."""
    random_clicker_rate: Float = Field(0.03, ge=0, le=1)
    """Share of study-2 raters who click uniformly at random."""
    careless_rate: Float = Field(0.05, ge=0, le=1)
    """Share of study-1 writers who never read instructions (they answer an
    instructed-response check like any question, and fail it)."""
    llm: Bool = False
    """Write simulated answers with the LLM endpoint; false: built-in templates."""
    arrivals_per_visit: Int = Field(4, ge=1)
    """New simulated participants who arrive (and claim work) at each crowd visit."""
    never_start_rate: Float = Field(0.05, ge=0, le=1)
    """Share of simulated participants who claim work and never start (released when their
    inactivity window ends, or at once when they time out on Prolific)."""
    arrive_via: Literal["direct", "prolific"] = "direct"
    """How simulated participants reach their work: ``direct`` claims from the collection (what
    the portal calls); ``prolific`` arrives as people do - the fake Prolific hands out their ids,
    they open the portal link, are sent into Argilla, return the study or time out there, and
    finish through the portal's completion page (needs the portal and the fake Prolific:
    ``crowdpref demo`` starts both)."""

    @model_validator(mode="after")
    def _check(self) -> CrowdConfig:
        if self.low_effort_rate + self.offensive_rate > 1:
            raise _problem("offensive_rate", "low_effort_rate + offensive_rate is above 1",
                           "lower one of them so they add up to at most 1")
        return self


class ProlificStudy(_Section):
    """One Prolific study (study 1 or study 2)."""

    reward: Int = Field(450, ge=1)
    """Payment per participant in minor units of the workspace currency (pence, cents)."""
    estimated_completion_minutes: Int = Field(30, ge=1)
    """Estimated minutes to finish a batch (Prolific shows it and checks the hourly rate)."""
    places: Int | None = Field(None, ge=1)
    """Places to open at first; None: one per participant batch. The sync raises them when
    returned or timed-out work waits in the pool."""
    max_places: Int | None = Field(None, ge=1)
    """Budget guard: the most places the sync may raise this study to; None: twice the first
    places. At the cap the sync stops raising and the collection artifact says so (raise the
    cap, or let the pool wait)."""
    launch: LaunchConfig = Field(default_factory=LaunchConfig)
    """How the places open once the study is published: paced in steps (the default) or all at
    once."""

    def initial_places(self, batches: int) -> int:
        """The places opened at first: ``places``, else one per participant batch."""
        return self.places or batches

    def places_cap(self, batches: int) -> int:
        """The most places this study may have (``max_places``, else twice the first places)."""
        return self.max_places if self.max_places is not None else 2 * self.initial_places(batches)

    @property
    def least_allowed_minutes(self) -> int:
        """The shortest ``maximum_allowed_time`` Prolific accepts for this study, in whole minutes:
        two minutes plus two times the estimated time plus two times its square root (Prolific's
        API document), rounded up. crowdpref sets the study's maximum allowed time to the
        study's ``inactive_after_minutes``, which must therefore be at least this."""
        e = self.estimated_completion_minutes
        return math.ceil(2 + 2 * e + 2 * math.sqrt(e))

    @property
    def hourly_rate(self) -> float:
        """Reward per hour, in major units."""
        return self.reward / 100 * 60 / self.estimated_completion_minutes


class ProlificFilters(_Section):
    """Eligibility filters for both studies."""

    approval_rate: Float = Field(100, ge=0, le=100)
    """Minimum approval rate (percent)."""
    min_completed: Int = Field(250, ge=0)
    """Minimum number of previously completed studies."""


class ProlificConfig(_Section):
    """Recruitment on Prolific (token and API URL come from settings)."""

    enabled: Bool | None = None
    """Publish the studies on Prolific and verify every arrival with its API (PROLIFIC_TOKEN);
    None (the default): true when ``participants: prolific``, as in the published study. False
    with ``participants: prolific`` (Prolific people without API access) needs ``verify: false``."""
    study1: ProlificStudy = Field(default_factory=ProlificStudy)
    """Study 1 (written answers)."""
    study2: ProlificStudy = Field(default_factory=ProlificStudy)
    """Study 2 (pairwise ratings)."""
    filters: ProlificFilters = Field(default_factory=ProlificFilters)
    """Eligibility filters."""
    verify: Bool = True
    """Check every arrival with Prolific's API (the submission named by SESSION_ID must belong to
    the PROLIFIC_PID and the study) before any work or account is given. ``participants:
    prolific`` needs ``enabled: true`` for that; a pilot without API access must say
    ``verify: false``: then anyone who forms a link with a made-up id gets work, and the data
    card marks the data as unverified."""
    fee_rate: Float = Field(0.333, ge=0, le=5)
    """Prolific's service fee as a share of the rewards (0.333 = 33.3%), used for the cost
    estimate in ``crowdpref validate``. The default is an assumption nothing here checks against
    Prolific: set your plan's rate (with VAT where it applies)."""
    auto_approve: Bool = False
    """Approve, through the API, the submissions crowdpref verified (work complete, checks
    passed under the config's rule, not flagged too fast): the sync does it; a completion code
    never approves by itself. False: list them for review (an artifact of the sync-prolific
    flow)."""
    auto_reject: Bool = False
    """Reject submissions that failed the quality checks automatically, with the proposed
    message and category (``FAILED_CHECK``); false (the default): list them for review with
    that proposal, and a person decides. Too-fast work is only ever listed for review (the time
    between submissions is indirect evidence)."""


class InviteConfig(_Section):
    """Invitation links (``participants: invite``)."""

    lifetime_days: Float = Field(14.0, gt=0, le=365)
    """Days an invitation link can be opened for the first time; after that it says it has
    expired. Once its participant has finished, a link only says that they are done."""
