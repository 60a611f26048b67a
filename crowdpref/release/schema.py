"""The release's columns, declared once: every configuration of the release (a Hub "config":
one Parquet file, one ``train`` split) and every column in it, with its Arrow type, its allowed
values and its meaning. The same :class:`Column` objects select and type the data
(:mod:`crowdpref.release.build`) and write the card's column tables
(:mod:`crowdpref.release.card`), so the two cannot drift.

Published timestamps are truncated to ``publish.timestamp_precision``
(:data:`TIMESTAMP_PRECISIONS`, default the day; :func:`coarsen_timestamps`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from crowdpref.config import StudyConfig
from crowdpref.contracts import SOURCES
from crowdpref.errors import ConfigError
from crowdpref.filters import EXCLUDED, FILTERED_BY
from crowdpref.filters import RULES as FILTER_RULES
from crowdpref.release.ids import ID_LENGTH
from crowdpref.release.markdown import lower_first

__all__ = [
    "PARTICIPANTS_FILE",
    "RATERS_FILE",
    "RATINGS_RAW",
    "RESPONSES_RAW",
    "SPLIT",
    "TIMESTAMP",
    "TIMESTAMP_PRECISIONS",
    "Built",
    "Column",
    "Subset",
    "coarsen_timestamps",
    "release_subsets",
    "timestamp_allowed",
]

SPLIT = "train"
"""The one split of every configuration."""
RESPONSES_RAW = "responses_raw.parquet"
RATINGS_RAW = "ratings_raw.parquet"
PARTICIPANTS_FILE = "participants.parquet"
RATERS_FILE = "raters.parquet"
"""Run-folder files some configurations are read from (the others name theirs in place)."""

TIMESTAMP_PRECISIONS = ("day", "hour", "minute", "second", "microsecond")
"""How precisely published timestamps are kept (``publish.timestamp_precision``): truncated
(floored, in UTC) to the start of the day, hour, minute or second, or as recorded."""


@dataclass(frozen=True)
class Column:
    """One published column: its name, Arrow type, allowed values and meaning (for the card),
    and the run-folder column it comes from (``source``; default: the same name)."""

    name: str
    type: pa.DataType
    allowed: str
    meaning: str
    source: str | None = None
    free_text: bool = False
    """Text people wrote (answers, questions): personal details found in it by
    :mod:`crowdpref.release.privacy` are masked. Every other text column is crowdpref's own (ids,
    labels, metadata): a hit there stops the build."""

    @property
    def source_name(self) -> str:
        return self.source or self.name

    @property
    def dtype(self) -> str:
        """The ``datasets`` feature dtype (as in the card's ``dataset_info.features``)."""
        if pa.types.is_timestamp(self.type):
            tz = f", tz={self.type.tz}" if self.type.tz else ""
            return f"timestamp[{self.type.unit}{tz}]"
        return {pa.string(): "string", pa.int64(): "int64", pa.float64(): "float64",
                pa.bool_(): "bool"}[self.type]


@dataclass(frozen=True)
class Subset:
    """One configuration of the release (a Hub "config"): one Parquet file, one ``train`` split."""

    name: str
    title: str
    source_file: str
    """File in the run folder it is read from."""
    needed_by: str
    """What to run when the source file is missing."""
    description: str
    columns: tuple[Column, ...]
    required: bool = True
    kept_only: bool = False
    """Publish only the source rows whose ``filtered_by`` is empty (what the preregistered
    filters kept)."""

    @property
    def data_path(self) -> str:
        return f"data/{self.name}/{SPLIT}-00000-of-00001.parquet"

    @property
    def data_glob(self) -> str:
        return f"data/{self.name}/{SPLIT}-*"

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.type) for c in self.columns])


TIMESTAMP = pa.timestamp("us", tz="UTC")


def timestamp_allowed(precision: str) -> str:
    """The card's "allowed values" of a published timestamp at ``precision``."""
    if precision == "microsecond":
        return "UTC date and time (as recorded, to the microsecond)"
    if precision == "day":
        return "UTC date (the time is always 00:00: published to the day)"
    return f"UTC date and time, truncated to the {precision}"


def coarsen_timestamps(array: pa.Array, precision: str) -> pa.Array:
    """``array`` (a timestamp array) truncated to the start of its ``precision``'s unit in UTC
    (``publish.timestamp_precision``); ``microsecond`` leaves it as recorded."""
    if precision == "microsecond":
        return array
    if precision not in TIMESTAMP_PRECISIONS:
        raise ConfigError(f"publish.timestamp_precision: must be one of "
                          f"{', '.join(TIMESTAMP_PRECISIONS)} (got {precision!r}): fix the study "
                          "config")
    return pc.floor_temporal(array, unit=precision)


def release_subsets(config: StudyConfig, screening_scores: Sequence[str] = (), *,
                    filtered: bool = False) -> list[Subset]:
    """Every configuration of the release and its columns, in card order. ``screening_scores``:
    the score columns of ``screening.parquet`` beyond :data:`crowdpref.contracts.SCREENING_BASE`.
    ``filtered``: the preregistered filters ran (``filters.json``): ``responses`` and ``ratings``
    are read from the ``*_raw`` files keeping only unfiltered rows, and ``responses_raw`` /
    ``ratings_raw`` publish every row with ``filtered_by``."""
    k = config.study2.scale_points
    mid = config.study2.midpoint
    q = config.study1.quality_scale
    categories = ", ".join(c.slug for c in config.questions.categories)
    qid = '`q_` + 16 hex digits'
    rid = '`r_` + 16 hex digits'
    prid = '`pr_` + 16 hex digits'
    anon = f"{ID_LENGTH} random letters and digits"
    flag_note = ("true or false; empty (null) when the answer was not screened")
    sources = ", ".join(f"`{x}`" for x in SOURCES[:-1]) + f" or `{SOURCES[-1]}`"
    when = timestamp_allowed(config.publish.timestamp_precision)

    def source_meaning(who: str, did: str) -> str:
        return (f"Where the {who} came from: `simulated` - {did} by crowdpref's simulated crowd "
                "(a program), NOT by a person; `prolific` - a person recruited on Prolific; "
                "`invite` - a person who joined through the study team's invite link (a pilot or "
                "an own panel).")

    preferences = Subset(
        name="default",
        title="Preferences (default)",
        source_file="preferences.parquet",
        needed_by="run the aggregate-ratings flow first",
        description=(
            "One row per rated pair of answers whose mean rating is not a tie: the question, "
            "the answer raters preferred on average (`chosen`) and the other one (`rejected`). "
            "The first four columns are what preference trainers such as TRL expect; the rest "
            "link each row to the other configurations and describe how clear the preference was."
        ),
        columns=(
            Column("prompt", pa.string(), "non-empty text",
                   "The question both answers reply to (the same text as `question` in the "
                   "`questions` configuration).", free_text=True),
            Column("chosen", pa.string(), "non-empty text",
                   "The answer the raters preferred on average.", free_text=True),
            Column("rejected", pa.string(), "non-empty text",
                   "The other answer of the pair.", free_text=True),
            Column("margin", pa.float64(), "above 0, at most 1",
                   f"How strong the preference is: the distance of the mean rating from the "
                   f"scale midpoint ({mid:g}), divided by its largest possible value ({mid - 1:g}). "
                   "1 means every rater gave the strongest possible preference. TRL's "
                   "RewardTrainer reads an optional `margin` column."),
            Column("pair_id", pa.string(), prid,
                   "Id of the pair; the `ratings` configuration holds its single ratings."),
            Column("question_id", pa.string(), qid, "Id of the question (see `questions`)."),
            Column("category", pa.string(), categories, "The question's social-reasoning category."),
            Column("chosen_response_id", pa.string(), rid,
                   "Id of the chosen answer (see `responses`)."),
            Column("rejected_response_id", pa.string(), rid,
                   "Id of the rejected answer (see `responses`)."),
            Column("mean_rating", pa.float64(), f"from 1 up to (not including) {mid:g}",
                   ("Mean" if config.aggregation.method == "mean" else
                    "Reliability-weighted mean (each rating weighted by its rater's fitted "
                    "reliability and corrected for the rater's A/B position bias)")
                   + f" of the pair's ratings on the 1-{k} scale, turned so that the chosen "
                   f"answer is A: 1 is a strong preference for the chosen answer, {mid:g} would "
                   "be no preference."),
            Column("n_ratings", pa.int64(), f"1 to {config.study2.ratings_per_pair}",
                   f"Ratings the pair received (the study asked for "
                   f"{config.study2.ratings_per_pair}; fewer when a rater's work was never "
                   "returned)."),
            Column("agreement", pa.float64(), "0.5 to 1",
                   "Share of the pair's raters who were on the majority side (preferred the "
                   "same answer)."),
            Column("rating_spread", pa.float64(), "0 or more; empty when only one rating",
                   "Standard deviation of the pair's ratings once all are turned to the same "
                   "orientation; 0 when every rater gave the same point."),
            Column("chosen_flagged", pa.bool_(), flag_note,
                   "True when the hate-speech screening flagged the chosen answer. Flagged "
                   "answers are kept on purpose, so models can learn what to avoid."),
            Column("rejected_flagged", pa.bool_(), flag_note,
                   "True when the screening flagged the rejected answer."),
            Column("p_chosen", pa.float64(), "0 to 1",
                   f"How one-sided the pair's ratings are: the share of "
                   f"{config.aggregation.bootstrap_samples} bootstrap resamples of the pair's "
                   "own ratings whose mean lands on the chosen side (1: every rating preferred "
                   "the chosen answer; near 0.5: the ratings barely decide). With only a few "
                   "ratings per pair this is not a calibrated probability that the chosen "
                   "answer is better."),
            Column("mean_rating_low", pa.float64(), f"1 to {k}",
                   f"Lower end of the {config.aggregation.interval_level:.0%} bootstrap interval "
                   "of `mean_rating` (resampling the pair's ratings)."),
            Column("mean_rating_high", pa.float64(), f"1 to {k}",
                   f"Upper end of the {config.aggregation.interval_level:.0%} bootstrap interval "
                   "of `mean_rating`."),
        ),
    )
    responses = Subset(
        name="responses",
        title="Responses (study 1)",
        source_file="responses.parquet",
        needed_by="run the collect-responses flow first",
        description="Every written answer collected in study 1, one row per answer.",
        columns=(
            Column("response_id", pa.string(), rid, "Id of the answer."),
            Column("question_id", pa.string(), qid, "The question answered (see `questions`)."),
            Column("category", pa.string(), categories, "The question's category."),
            Column("participant_id", pa.string(), anon,
                   "Anonymous id of the writer: the same person always has the same id in "
                   "this release, and it cannot be traced back to a Prolific or Argilla account.",
                   source="participant_key"),
            Column("source", pa.string(), sources,
                   source_meaning("writer", "the answer was written")),
            Column("text", pa.string(), "non-empty text",
                   "The answer as the participant wrote it (personal details and credentials "
                   "recognised by their form replaced by a placeholder; see \"Privacy\").",
                   free_text=True),
            Column("quality", pa.int64(), f"{q.min} to {q.max}",
                   f"The writer's rating of the question's quality ({q.min} = poor, "
                   f"{q.max} = excellent)."),
            Column("submitted_at", TIMESTAMP, when, "When the answer was submitted."),
        ),
    )
    labels = config.study2.scale_labels
    ratings = Subset(
        name="ratings",
        title="Ratings (study 2)",
        source_file="ratings.parquet",
        needed_by="run the collect-ratings flow first",
        description=(
            "Every single rating collected in study 2: a rater saw a question and two answers, "
            f"shown as A and B, and picked one point of the {k}-point scale, which has no "
            "neutral middle."
        ),
        columns=(
            Column("rating_id", pa.string(), "text id", "Id of the rating."),
            Column("pair_id", pa.string(), prid, "The pair rated (see the default configuration)."),
            Column("question_id", pa.string(), qid, "The question (see `questions`)."),
            Column("response_a_id", pa.string(), rid, "The answer shown as A."),
            Column("response_b_id", pa.string(), rid, "The answer shown as B."),
            Column("swapped", pa.bool_(), "true or false",
                   "True when the answer shown as A was the pair's second answer (by id order). "
                   "The order is recorded per rating: raters of the same pair may have seen "
                   "different orders (\"Study 2: pairwise ratings\" above says how balanced "
                   "they were)."),
            Column("rater_id", pa.string(), anon,
                   "Anonymous id of the rater (same scheme as `participant_id`).",
                   source="rater_key"),
            Column("source", pa.string(), sources, source_meaning("rater", "the rating was given")),
            Column("rating", pa.int64(), f"1 to {k}",
                   "The point picked, on the A/B scale as displayed: "
                   + "; ".join(f"{i} = {lower_first(label)}" for i, label in enumerate(labels, start=1))
                   + "."),
            Column("submitted_at", TIMESTAMP, when, "When the rating was submitted."),
        ),
    )
    questions = Subset(
        name="questions",
        title="Questions",
        source_file="questions.parquet",
        needed_by="run the generate-questions flow first",
        description="The questions of the study, one row per question.",
        columns=(
            Column("question_id", pa.string(), qid, "Id of the question (a hash of its text)."),
            Column("question", pa.string(), "non-empty text", "The question shown to participants.",
                   free_text=True),
            Column("category", pa.string(), categories, "The social-reasoning category."),
            Column("source", pa.string(), "`bank`, `file:<name>` or `llm:<model>`",
                   "Where the question came from: the curated bank shipped with crowdpref, a "
                   "question file, or a language model asked to write more."),
            Column("metadata", pa.string(), "JSON object as text",
                   "Any extra fields the question came with (empty object when none)."),
        ),
    )
    score_columns = tuple(
        Column(label, pa.float64(), "0 to 1",
               f"The classifier's score for `{label}`" + (
                   f"; the answer is flagged at {config.screening.thresholds[label]:g} or above."
                   if label in config.screening.thresholds else "; recorded, never flags."))
        for label in screening_scores
    )
    screening = Subset(
        name="screening",
        title="Screening",
        source_file="screening.parquet",
        needed_by="run the screen-responses flow first",
        description=(
            "The hate-speech screening of every answer, one row per answer: the classifier "
            "used, whether it flagged the answer, and its scores."
        ),
        columns=(
            Column("response_id", pa.string(), rid, "The answer screened (see `responses`)."),
            Column("model", pa.string(), "classifier name",
                   "The classifier that produced the scores (a detoxify model, or the "
                   "profanity-check fallback)."),
            Column("flagged", pa.bool_(), "true or false",
                   "True when at least one score reached its threshold."),
            Column("flagged_labels", pa.string(), "comma-separated labels, or empty",
                   "The labels whose score reached the threshold."),
            *score_columns,
        ),
        required=False,
    )
    participants = Subset(
        name="participants",
        title="Participants (both studies)",
        source_file=PARTICIPANTS_FILE,
        needed_by="re-export the studies (collect-responses and collect-ratings)",
        description=(
            "One row per participant per study: how far they got, their quality checks and "
            "their pace. Anonymous ids only; no Prolific id or account name."
        ),
        columns=(
            Column("participant_id", pa.string(), anon,
                   "Anonymous id of the participant: the same id as `participant_id` of their "
                   "answers (study 1) or `rater_id` of their ratings (study 2).",
                   source="participant_key"),
            Column("study", pa.string(), "`study1` or `study2`",
                   "The study: `study1` wrote answers, `study2` rated pairs."),
            Column("source", pa.string(), sources, source_meaning("participant", "the work was done")),
            Column("status", pa.string(), "`complete`, `released`, `excluded`, `active` or `screened_out`",
                   "How their participation ended: `complete` finished their batch; `released` "
                   "returned the study, timed out or went quiet (their unanswered items went to "
                   "other people); `excluded` failed the quality checks under a study that "
                   "excludes on failure; `active` was still working when the data was exported; "
                   "`screened_out` did not pass the onboarding quiz, so no work was given to them."),
            Column("items_assigned", pa.int64(), "0 or more",
                   "Study items (questions or pairs) they were given, quality checks not counted."),
            Column("items_submitted", pa.int64(), "0 or more",
                   "Study items they submitted, quality checks not counted."),
            Column("checks_answered", pa.int64(), "0 or more",
                   "Quality checks in their batch that they answered (instructed-response items "
                   "in study 1; gold and repeated pairs in study 2)."),
            Column("checks_passed", pa.int64(), "0 to `checks_answered`",
                   "Quality checks they passed."),
            Column("checks_verdict", pa.string(), "`passed`, `failed`, `none` or `unanswered`",
                   "The verdict of their checks: `none` when the study had no checks, "
                   "`unanswered` when they left before answering them."),
            Column("median_seconds_per_item", pa.float64(), "0 or more; empty when nothing was submitted",
                   "Median seconds between their consecutive submissions (the first counted from "
                   "when they took their batch). Items submitted together count as near 0 s."),
            Column("too_fast", pa.bool_(), "true or false",
                   "True when `median_seconds_per_item` is below the study's too-fast threshold "
                   f"({config.study1.too_fast_seconds:g} s in study 1, "
                   f"{config.study2.too_fast_seconds:g} s in study 2; 0 = not checked)."),
            Column("onboarding_attempts", pa.int64(), "0 or more",
                   "Attempts at the onboarding quiz before any work (0: the study had no quiz)."),
            Column("onboarding_score", pa.float64(), "0 to the number of quiz questions; empty without a quiz",
                   "The best score of their quiz attempts (questions answered right)."),
            Column("onboarding_seconds", pa.float64(), "0 or more; empty without onboarding",
                   "Seconds spent in onboarding (introduction, practice and quiz; a pause over 30 "
                   "minutes counts as 30 minutes)."),
        ),
        required=False,
    )
    raters = Subset(
        name="raters",
        title="Raters (study 2)",
        source_file=RATERS_FILE,
        needed_by="rerun the aggregate-ratings flow (force=True)",
        description=(
            "One row per study-2 rater whose ratings counted: how reliable their ratings were, "
            "fitted over every counted rating, before the preregistered filters (a one-factor "
            "model: each un-swapped rating follows the pair's latent "
            "preference times the rater's slope, plus the rater's own A/B position bias and "
            "noise). Anonymous ids only."
        ),
        columns=(
            Column("rater_id", pa.string(), anon,
                   "Anonymous id of the rater (the same id as `rater_id` in the ratings).",
                   source="rater_key"),
            Column("n_ratings", pa.int64(), "1 or more", "Ratings the rater gave."),
            Column("reliability", pa.float64(), "0 to 1",
                   "Share of a rating's variance that is signal: near 0 for a rater whose ratings "
                   "do not follow the other raters (e.g. clicking at random), near 1 for a careful, "
                   "consistent rater."),
            Column("noise_sd", pa.float64(), "above 0", "The rater's noise, in scale points."),
            Column("slope", pa.float64(), "0 or more",
                   "How strongly the rater's ratings follow the pair's latent preference (about 1 "
                   "for a typical rater, 0 for one who does not follow it)."),
            Column("bias", pa.float64(), "scale points",
                   "The rater's A/B position bias on the displayed scale (positive: pushed "
                   "towards B)."),
        ),
        required=False,
    )
    if not filtered:
        return [preferences, responses, ratings, participants, raters, questions, screening]
    rules = "`" + "`, `".join(FILTER_RULES) + "`"
    filtered_by = Column(
        FILTERED_BY, pa.string(), f"empty, `{EXCLUDED}`, or comma-separated rule names: {rules}",
        "The preregistered filter rules that removed the row (see \"Filters (preregistered)\"); "
        f"`{EXCLUDED}` when the row was taken out of the count during collection (its author "
        "failed the quality checks and the study excludes on failure; the item was answered "
        "again by someone else); empty when it was kept.")
    kept_responses = replace(
        responses, source_file=RESPONSES_RAW, kept_only=True,
        needed_by="rerun the aggregate-ratings flow (force=True)",
        description=("The written answers of study 1 that the preregistered filters kept, one "
                     "row per answer: the answers the default configuration is built from. "
                     "`responses_raw` holds every answer collected."))
    raw_responses = replace(
        responses, name="responses_raw", title="Responses, raw (study 1)",
        source_file=RESPONSES_RAW, needed_by="rerun the aggregate-ratings flow (force=True)",
        description=("Every written answer collected in study 1, including those the "
                     "preregistered filters removed (`filtered_by` says which rules did)."),
        columns=(*responses.columns, filtered_by))
    kept_ratings = replace(
        ratings, source_file=RATINGS_RAW, kept_only=True,
        needed_by="rerun the aggregate-ratings flow (force=True)",
        description=("The ratings of study 2 that the preregistered filters kept: the ratings "
                     "the default configuration is built from. A rater saw a question and two "
                     f"answers, shown as A and B, and picked one point of the {k}-point scale, "
                     "which has no neutral middle. `ratings_raw` holds every rating collected."))
    raw_ratings = replace(
        ratings, name="ratings_raw", title="Ratings, raw (study 2)",
        source_file=RATINGS_RAW, needed_by="rerun the aggregate-ratings flow (force=True)",
        description=("Every rating collected in study 2, including those the preregistered "
                     "filters removed (`filtered_by` says which rules did): a rating goes when "
                     "its rater is removed or when one of the two answers it compares is."),
        columns=(*ratings.columns, filtered_by))
    return [preferences, kept_responses, kept_ratings, raw_responses, raw_ratings, participants,
            raters, questions, screening]


@dataclass
class Built:
    """One configuration as built: its table and, once written, its file's size (for the card)."""

    subset: Subset
    table: pa.Table
    file_bytes: int = 0
