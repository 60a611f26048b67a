"""The study config: every study-level choice of one RLHF data study, loaded from a YAML file.

A study YAML has these top-level sections (all but ``name`` optional; defaults reproduce the
published Prolific x Argilla social-reasoning study)::

    name / title / description / seed
    questions:    categories, the shipped bank, extra files, LLM expansion, filters
    study1:       written answers: R responses per question, Q questions per participant
    study2:       pairwise ratings: ratings per pair, pairs per participant, scale points
    screening:    hate-speech classifier (detoxify), thresholds, flag-or-drop policy
    aggregation:  how ratings become chosen/rejected
    filters:      preregistered rules: which participants the default release leaves out
    publish:      Hugging Face Hub repo, licence, card
    crowd:        simulated participants (demo and tests)
    prolific:     recruitment on Prolific (rewards, filters)

Machine-level connection info (URLs, tokens) is not here: see :mod:`crowdpref.settings`.

Use :func:`load_study` to read a file: every problem becomes a one-line
:class:`~crowdpref.errors.ConfigError` naming the file, the dotted field and the fix.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AllowInfNan,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    Strict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from crowdpref.errors import ConfigError

__all__ = [
    "DEFAULT_CATEGORIES",
    "DETOXIFY_LABELS",
    "AggregationConfig",
    "FiltersConfig",
    "InstructedChecks",
    "RatingChecks",
    "Batches",
    "Category",
    "CrowdConfig",
    "LLMExpansion",
    "ProlificConfig",
    "ProlificFilters",
    "ProlificStudy",
    "PublishConfig",
    "QualityScale",
    "QuestionsConfig",
    "ScreeningConfig",
    "Study1Config",
    "Study2Config",
    "StudyConfig",
    "StudyPlan",
    "load_study",
    "parse_study",
    "slugify",
]

# --- strict scalar types: YAML already gives typed values, so "10" or true is not a number --
Int = Annotated[int, Strict()]
Float = Annotated[float, Strict(), AllowInfNan(False)]  # ints are accepted as floats
Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict()]

SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
REPO_PART_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
LICENSE_RE = re.compile(r"^[a-z0-9][a-z0-9.+-]*$")
MAX_NAME_LEN = 40
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


def slugify(text: str) -> str:
    """``"Diversity and cultural differences"`` -> ``"diversity-and-cultural-differences"``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _problem(field: str, problem: str, fix: str) -> PydanticCustomError:
    """A validation error for ``field`` (dotted, relative to the model raising it)."""
    return PydanticCustomError(
        "crowdpref", "{problem}: {fix}", {"field": field, "problem": problem, "fix": fix}
    )


def _check_slug(field: str, value: str, what: str) -> str:
    if not SLUG_RE.fullmatch(value) or len(value) > MAX_NAME_LEN:
        suggestion = slugify(value)[:MAX_NAME_LEN].strip("-") or "my-study"
        raise _problem(
            field,
            f"must be a slug of lowercase letters, digits and single dashes, at most "
            f"{MAX_NAME_LEN} characters (got {value!r})",
            f"use {what} such as {suggestion!r}",
        )
    return value


def _resolve_path(value: Any, info: ValidationInfo, field: str) -> Path:
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise _problem(field, f"must be a file path (got {value!r})", "write the path as text")
    path = Path(value).expanduser()
    base = (info.context or {}).get("base_dir") if info.context else None
    if not path.is_absolute() and base is not None:
        path = Path(base) / path
    return path


class _Section(BaseModel):
    """Base for every config model: unknown keys are errors; field docstrings are the docs."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_default=True)


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


# --- allocation arithmetic ---------------------------------------------------------------
@dataclass(frozen=True)
class Batches:
    """How ``items`` work items split into participant batches of ``per_participant``."""

    items: int
    per_participant: int

    @property
    def remainder(self) -> int:
        """Items left over after the full batches (0: the split is even)."""
        return self.items % self.per_participant

    @property
    def participants(self) -> int:
        return math.ceil(self.items / self.per_participant)

    @property
    def last_batch(self) -> int:
        """Items in the last participant's batch (== per_participant when even)."""
        return self.remainder or min(self.per_participant, self.items)

    def describe(self) -> str:
        text = f"{self.participants} participants x {self.per_participant}"
        if self.remainder:
            text += f" (last gets {self.remainder})"
        return text


def _check_batches(batches: Batches, remainder: str, field: str, what: str) -> None:
    if remainder == "error" and batches.remainder:
        raise _problem(
            field,
            f"{batches.items} {what} do not split into batches of {batches.per_participant} "
            f"({batches.remainder} left over) and remainder is 'error'",
            "change the numbers so they divide evenly, or set remainder: smaller_last",
        )


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
    their claim counts as dropped out and their unanswered questions go back to the pool."""
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

    @model_validator(mode="after")
    def _check(self) -> Study1Config:
        if self.username_prefix is not None:
            _check_slug("username_prefix", self.username_prefix, "a prefix")
        return self

    _attention_check = model_validator(mode="before")(_no_attention_check)

    def batches(self, n_questions: int) -> Batches:
        """The split of ``n_questions * R`` answers into batches of Q."""
        return Batches(n_questions * self.responses_per_question, self.questions_per_participant)

    def participants_needed(self, n_questions: int) -> int:
        """ceil(n_questions * R / Q)."""
        return self.batches(n_questions).participants


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
    as dropped out; their pairs return to the pool."""
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

    def participants_needed(self, n_pairs: int) -> int:
        """ceil(n_pairs * ratings_per_pair / pairs_per_participant)."""
        return self.batches(n_pairs).participants


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
    method: Literal["mean", "reliability_weighted"] = "mean"
    """What decides chosen/rejected: ``mean`` - the plain mean of a pair's un-swapped ratings
    (what the published method did); ``reliability_weighted`` - each rating weighted by its
    rater's fitted reliability and corrected for the rater's A/B position bias
    (:mod:`crowdpref.aggregation.reliability`; needs a rater_key on every rating). Rater
    reliability is fitted and written to raters.parquet under both methods when rater keys are
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
    participants harder to re-identify from when they worked (crowdpref.privacy)."""

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

    def initial_places(self, batches: int) -> int:
        """The places opened at first: ``places``, else one per participant batch."""
        return self.places or batches

    def places_cap(self, batches: int) -> int:
        """The most places this study may have (``max_places``, else twice the first places)."""
        return self.max_places if self.max_places is not None else 2 * self.initial_places(batches)

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


# --- the whole study -----------------------------------------------------------------------
@dataclass(frozen=True)
class StudyPlan:
    """Derived numbers for a given question count."""

    n_questions: int
    study1: Batches
    pairs_per_question: int
    n_pairs: int
    study2: Batches

    @property
    def n_responses(self) -> int:
        return self.study1.items

    @property
    def n_ratings(self) -> int:
        return self.study2.items


_SECTIONS = ("questions", "study1", "study2", "screening", "aggregation", "filters", "publish", "crowd",
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
    participants: Literal["prolific", "invite", "simulated"] = "prolific"
    """Who does the work: people recruited on Prolific (the method), people with invite links
    (pilots, an own panel), or the simulated crowd (demo, tests). The simulated crowd refuses to
    work on a study that takes real people."""
    questions: QuestionsConfig = Field(default_factory=QuestionsConfig)
    study1: Study1Config = Field(default_factory=Study1Config)
    study2: Study2Config = Field(default_factory=Study2Config)
    screening: ScreeningConfig = Field(default_factory=ScreeningConfig)
    aggregation: AggregationConfig = Field(default_factory=AggregationConfig)
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
        for key in ("study1", "study2"):
            part = getattr(self.prolific, key)
            if part.max_places is not None and part.places is not None and part.max_places < part.places:
                raise _problem(f"prolific.{key}.max_places", f"{part.max_places} is below the first places "
                               f"({part.places})", f"set max_places >= {part.places}, or remove it")
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
        """The YAML file this config came from (as given to :func:`load_study`), if any."""
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
        pairs, remainder policy); raise a one-line :class:`ConfigError` if it cannot work."""
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
        """The study's cost on Prolific for ``n_questions`` questions (see :class:`ProlificCost`)."""
        plan = self.plan(n_questions)
        pr = self.prolific
        batches = (plan.study1.participants, plan.study2.participants)
        parts = (pr.study1, pr.study2)
        return ProlificCost(places=tuple(p.initial_places(b) for p, b in zip(parts, batches)),  # type: ignore[arg-type]
                            caps=tuple(p.places_cap(b) for p, b in zip(parts, batches)),  # type: ignore[arg-type]
                            rewards=(pr.study1.reward, pr.study2.reward), fee_rate=pr.fee_rate)

    def summary_rows(self, n_questions: int | None = None) -> list[tuple[str, str]]:
        """(label, value) rows describing the study, for the CLI. ``n_questions`` defaults to
        the expected count (categories x per_category) when that is known."""
        q, s1, s2 = self.questions, self.study1, self.study2
        n = n_questions if n_questions is not None else q.expected_questions
        sources = (["bank"] if q.bank else []) + [f"{len(q.files)} file(s)"] * bool(q.files)
        if q.llm.enabled:
            sources.append(f"LLM ({q.llm.model or 'settings model'})")
        target = "all available" if q.per_category is None else f"{q.per_category} per category"
        rows = [
            ("Study", f"{self.name}: {self.title}"),
            ("Seed", str(self.seed)),
            ("Recruitment", self.participants + ("" if self.participants != "simulated"
                                                  else " (the simulated crowd: not real people)")),
            ("Questions", f"{len(q.categories)} categories; {' + '.join(sources)}; {target}; "
                          f"{q.min_chars}-{q.max_chars} chars; duplicates at "
                          f">= {q.near_duplicate_threshold:g}"),
            ("Study 1", f"R={s1.responses_per_question} answers per question, "
                        f"Q={s1.questions_per_participant} questions per participant, quality "
                        f"{s1.quality_scale.min}-{s1.quality_scale.max}, users "
                        f"{s1.username_prefix}-*, drop-out after {s1.inactive_after_minutes:g} min, "
                        f"too fast {_too_fast(s1.too_fast_seconds)}"
                        + f", {_checks_text(s1.checks.count, 'instructed item', s1.checks)}"),
            ("Study 2", f"{s2.ratings_per_pair} ratings per pair, {s2.pairs_per_participant} pairs "
                        f"per participant, {s2.scale_points}-point A/B scale, pairs: {s2.pairs}, "
                        f"study-1 participants "
                        f"{'excluded' if s2.exclude_study1_participants else 'allowed'}, users "
                        f"{s2.username_prefix}-*, too fast {_too_fast(s2.too_fast_seconds)}, "
                        f"{_checks_text(s2.checks.count, 'check pair', s2.checks)}"),
        ]
        if n is not None:
            plan = self.plan(n)
            rows += [
                ("Plan, study 1", f"{n} questions -> {plan.n_responses} answers; "
                                  f"{plan.study1.describe()}"),
                ("Plan, study 2", f"{plan.n_pairs} pairs ({plan.pairs_per_question} per question)"
                                  f" -> {plan.n_ratings} ratings; {plan.study2.describe()}"),
            ]
        sc = self.screening
        rows.append(("Screening", "off" if not sc.enabled else
                     f"detoxify {sc.model} on {sc.device}, {sc.policy} at "
                     + ", ".join(f"{k}>={v:g}" for k, v in sc.thresholds.items())
                     + (f", fallback {sc.fallback}" if sc.fallback else "")))
        ag = self.aggregation
        rows.append(("Aggregation", f"mean rating per pair; incomplete pairs: "
                     f"{ag.incomplete_pairs}; ties: {ag.ties}; Bradley-Terry "
                     f"{'on' if ag.bradley_terry else 'off'}"))
        rows.append(("Filters", f"{self.filters.describe()} (preregistered: fixed once "
                     "collection starts)"))
        pb = self.publish
        rows.append(("Publish", f"{pb.repo_id or '(hf_repo_id setting)'}, "
                     f"{'private' if pb.private else 'public'}, licence {pb.license}"
                     + (", content warning" if pb.content_warning else "")))
        if self.prolific.enabled:
            pr = self.prolific
            places = [f"{s.places} places" if s.places else "a place per batch" for s in (pr.study1, pr.study2)]
            rows.append(("Prolific", f"study 1: {pr.study1.reward} ({pr.study1.hourly_rate:.2f}/h), {places[0]}; "
                         f"study 2: {pr.study2.reward} ({pr.study2.hourly_rate:.2f}/h), {places[1]}; "
                         f"approval >= {pr.filters.approval_rate:g}%, completed >= "
                         f"{pr.filters.min_completed}; verified work "
                         f"{'approved by the sync' if pr.auto_approve else 'listed for review'}"))
            if n is not None:
                rows.append(("Cost on Prolific", self.prolific_cost(n).describe()))
        elif self.participants == "prolific":
            rows.append(("Prolific", "UNVERIFIED pilot (prolific.verify: false): arrivals are not checked with "
                         "Prolific, anyone who forms a link with a made-up id gets work, nothing is paid or "
                         "reviewed through the API, and the data card marks the data as unverified"))
        else:
            c = self.crowd
            rows.append(("Participants", f"simulated crowd: drop-out {c.dropout_rate:g}, low effort "
                         f"{c.low_effort_rate:g}, offensive {c.offensive_rate:g}, rater noise "
                         f"{c.rater_noise:g}, position bias {c.position_bias:g}, random clickers "
                         f"{c.random_clicker_rate:g}"))
        return rows


@dataclass(frozen=True)
class ProlificCost:
    """What a study costs on Prolific, in major units of the workspace currency: the rewards
    of the first places, Prolific's fee on them, and the most the budget guard lets it reach."""

    places: tuple[int, int]
    caps: tuple[int, int]
    rewards: tuple[int, int]  # minor units per place
    fee_rate: float

    def _total(self, places: tuple[int, int]) -> float:
        return sum(p * r for p, r in zip(places, self.rewards)) / 100 * (1 + self.fee_rate)

    @property
    def planned(self) -> float:
        """Rewards of the first places plus the fee."""
        return self._total(self.places)

    @property
    def at_cap(self) -> float:
        """The same with every study raised to its ``max_places``."""
        return self._total(self.caps)

    def describe(self) -> str:
        parts = [f"study {i + 1}: {p} places x {r / 100:.2f}" for i, (p, r) in enumerate(zip(self.places, self.rewards))]
        return (f"{'; '.join(parts)}; + fee {self.fee_rate:.1%} = {self.planned:,.2f} (workspace currency); "
                f"at most {self.at_cap:,.2f} if places are raised to their caps ({self.caps[0]}, {self.caps[1]})")


def _checks_text(count: int, what: str, checks: InstructedChecks | RatingChecks) -> str:
    """The summary's words for a study's checks."""
    if count == 0:
        return "no checks"
    rule = "all" if checks.min_passed is None else f"{checks.min_passed} of {count}"
    return f"{count} {what}{'s' if count != 1 else ''} per batch (pass: {rule}; on fail: {checks.on_fail})"


def _too_fast(seconds: float) -> str:
    """The summary's words for a ``too_fast_seconds`` setting."""
    return f"below {seconds:g} s per item (median)" if seconds > 0 else "off"


# --- loading -------------------------------------------------------------------------------
class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False):
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            continue  # SafeLoader reports unhashable keys itself
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first on line {seen[key]})", key_node.start_mark
            )
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _fmt_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith("["):
            out += str(part)
        elif part != "":
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The config model that holds the field at ``loc`` (for allowed-field lists)."""
    model: Any = StudyConfig
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        model = _inner_model(field.annotation)
        if model is None:
            return None
    return model


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _field_at(loc: tuple[Any, ...]) -> Any:
    """The pydantic FieldInfo at ``loc``, or None (list items, dict values, unknown)."""
    model = _model_at(loc[:-1]) if loc else None
    if model is None or not isinstance(loc[-1], str):
        return None
    return model.model_fields.get(loc[-1])


def _default_of(loc: tuple[Any, ...]) -> Any:
    field = _field_at(loc)
    if field is None or field.default_factory is not None:
        return None
    default = field.default
    return default if isinstance(default, (int, float, str)) and not isinstance(default, bool) else None


_TYPE_NAMES = {
    "int_type": "a whole number", "int_parsing": "a whole number", "int_from_float": "a whole number",
    "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "text", "list_type": "a list", "dict_type": "a mapping",
    "model_type": "a mapping", "model_attributes_type": "a mapping",
}


def _describe(err: dict[str, Any]) -> tuple[str, str]:
    """(problem, fix) for one pydantic error."""
    kind, ctx, loc = err["type"], err.get("ctx") or {}, err["loc"]
    value = err.get("input")
    last = str(loc[-1]) if loc else "field"
    if kind == "crowdpref":
        return ctx["problem"], ctx["fix"]
    if kind == "missing":
        return "is required", f"add `{last}:` with a value"
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        allowed = sorted(model.model_fields) if model else []
        close = difflib.get_close_matches(str(last), allowed, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else "remove it or rename it;"
        return "unknown field", f"{hint} allowed here: {', '.join(allowed)}"
    if kind in _TYPE_NAMES:
        want = _TYPE_NAMES[kind]
        example = _default_of(loc)
        if want == "a mapping":
            fix = f"write `key: value` lines indented under `{last}:`"
        elif want == "a list":
            fix = f"write one `- item` line per entry under `{last}:`"
        elif want == "text":
            fix = "quote the value, e.g. \"...\""
        elif isinstance(value, str) and _looks_numeric(value) and want != "true or false":
            fix = f"remove the quotes around {value}"
        elif example is not None:
            fix = f"write {want}, e.g. {example}"
        else:
            fix = f"write {want}"
        return f"must be {want} (got {_short(value)})", fix
    if kind == "literal_error":
        expected = ctx.get("expected", "")
        options = re.findall(r"'([^']*)'", expected)
        close = difflib.get_close_matches(str(value), options, n=1) if options else []
        hint = f"did you mean {close[0]!r}? " if close else ""
        field = _field_at(loc)
        nullable = " (or null)" if field is not None and field.default is None else ""
        return (f"must be one of {expected}{nullable} (got {_short(value)})",
                f"{hint}use one of {', '.join(options)}{nullable}")
    bounds = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"),
              "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}
    if kind in bounds:
        op, key = bounds[kind]
        limit = ctx.get(key)
        example = _default_of(loc)
        fix = f"use a value {op} {limit}" + (f" (default {example})" if example is not None else "")
        return f"must be {op} {limit} (got {_short(value)})", fix
    if kind in ("too_short", "string_too_short"):
        return f"is too short (got {_short(value)})", "give at least one entry / some text"
    if kind in ("too_long", "string_too_long"):
        return f"is too long (got {_short(value)})", "shorten it"
    msg = str(err.get("msg", "invalid value")).replace("\n", " ")
    return f"{msg} (got {_short(value)})", "fix the value"


def _format_error(exc: ValidationError, source: str) -> str:
    # unknown fields first: a typo also makes the intended field look missing
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    err = errors[0]
    loc = tuple(err["loc"])
    field_ = (err.get("ctx") or {}).get("field", "") if err["type"] == "crowdpref" else ""
    if field_:
        loc = loc + tuple(p for p in re.split(r"\.", field_) if p)
    problem, fix = _describe(err)
    more = f" (and {len(errors) - 1} more problem{'s' * (len(errors) > 2)})" if len(errors) > 1 else ""
    line = f"{source}: {_fmt_loc(loc)}: {problem}: {fix}{more}"
    return " ".join(line.split())  # one line, always


def parse_study(data: Any, source: str = "study config", base_dir: str | Path | None = None) -> StudyConfig:
    """Validate an already-parsed mapping; relative paths resolve against ``base_dir``.
    Raises :class:`ConfigError` with a one-line message starting with ``source``."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: (top level): must be a mapping of fields (got {type(data).__name__}): "
            "write `name: my-study` and the sections (questions:, study1:, ...) as top-level keys"
        )
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise ConfigError(f"{source}: {_short(bad[0])}: field names must be text: "
                          "use names such as study1 or seed")
    context = {"base_dir": Path(base_dir) if base_dir is not None else None}
    try:
        config = StudyConfig.model_validate(data, context=context)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc, source)) from None
    config._source = source
    return config


def load_study(path: str | Path) -> StudyConfig:
    """Read and validate a study YAML file.

    Every problem (missing or unreadable file, not UTF-8, not YAML, wrong shape, unknown
    field, wrong type, out-of-range value, inconsistent numbers) raises
    :class:`ConfigError` whose message is one line: ``FILE: FIELD: PROBLEM: FIX``.
    """
    shown = str(path)
    p = Path(path).expanduser()
    if not p.exists():
        raise ConfigError(f"{shown}: (file): study file not found: check the path "
                          f"(relative to {Path.cwd()})")
    if not p.is_file():
        raise ConfigError(f"{shown}: (file): not a file: give the path of a study .yaml file")
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{shown}: (file): cannot read ({exc.strerror}): check its permissions") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{shown}: (file): not UTF-8 text (byte 0x{raw[exc.start]:02x} on line "
                          f"{line}): save the file as UTF-8") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(file)"
        what = getattr(exc, "problem", None) or exc.__class__.__name__
        fix = ("keep only one of them" if "duplicate key" in what
               else "fix the syntax there (indentation, colons, quotes)")
        raise ConfigError(" ".join(f"{shown}: {where}: not valid YAML ({what}): {fix}".split())) from None
    return parse_study(data, source=shown, base_dir=p.parent)
