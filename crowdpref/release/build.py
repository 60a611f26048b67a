"""The dataset release: the run folder's results in Hugging Face Hub layout, with a dataset card,
a scan for secrets, and the push to the Hub.

``<run>/release/`` after :func:`build_release`::

    README.md                                      dataset card (YAML header from DatasetCardData)
    data/default/train-00000-of-00001.parquet      preferences: prompt, chosen, rejected, margin ...
    data/responses/train-00000-of-00001.parquet    study 1: the written answers (kept by the filters)
    data/ratings/train-00000-of-00001.parquet      study 2: the ratings (kept by the filters)
    data/responses_raw/train-00000-of-00001.parquet  every answer, with ``filtered_by``
    data/ratings_raw/train-00000-of-00001.parquet  every rating, with ``filtered_by``
    data/participants/train-00000-of-00001.parquet both studies' participants (when exported)
    data/raters/train-00000-of-00001.parquet       study 2: reliability per anonymous rater (when aggregated)
    data/questions/train-00000-of-00001.parquet    the questions
    data/screening/train-00000-of-00001.parquet    hate-speech screening (when it ran)

Filters: when the aggregation applied the preregistered filters (``filters.json`` in the run
folder, :mod:`crowdpref.filters`), ``responses`` and ``ratings`` hold what they kept - the data
the default configuration is built from - and the ``*_raw`` configurations hold everything
collected, each row's ``filtered_by`` naming the rules that removed it; the card's "Filters
(preregistered)" section states each rule and what it removed. A run folder without
``filters.json`` (aggregated before the filters existed) publishes every answer and rating in
``responses`` and ``ratings`` and no ``*_raw`` configurations.

``load_dataset(folder)`` gives the preferences; ``load_dataset(folder, "ratings")`` the others.

Every published column is declared once (:func:`release_subsets`): the same :class:`Column`
objects select and type the data and write the card's column tables, so the two cannot drift.

The card states only what the data shows: where answers and ratings came from (their ``source``,
:func:`provenance_text`; SIMULATED data is called so) and whether the A/B display order was
counterbalanced inside each pair (:func:`display_order_text`, from the aggregation's
``order_balance`` or, when that is missing, measured on the published ratings).

Privacy: participant keys (``participant_key``, ``rater_key``) are replaced by random
10-character ids (:func:`published_ids`); the mapping stays in ``<run>/private/published-ids.json``
(mode 0600) and is reused, so ids are stable across re-publishing. Personal details recognised
by their form (:mod:`crowdpref.privacy`: Prolific ids, e-mail addresses, tokens and keys) are
masked in the columns people wrote (``Column.free_text``: answers and questions) and counted in
the card's "Privacy" section and ``<run>/privacy.json``; one in any other column (crowdpref's
own ids, labels, metadata) stops the build, as does a token, key or Prolific-style id in the
card's own text (the config's description or citation; an e-mail address there is allowed).
Timestamps are truncated to ``publish.timestamp_precision`` (default: the day). The release is
built in a staging folder and scanned (:func:`scan_for_secrets`) for usernames, passwords,
keys and the original participant keys before it replaces ``release/``; any hit refuses the
build.

The swap (:func:`crowdpref.runfolder.swap_in_release`) marks the scanned staging folder ready,
moves the old release aside and the ready one in; every build, scan and push first repairs what
a killed swap left (:func:`crowdpref.runfolder.repair_release`), so a study always has a
complete ``release/`` once one was built. :func:`push_release` makes the Hub repo equal to the
release in one commit: files the release no longer has are deleted there.

No Prefect imports: ``tasks/publish.py`` wraps this module.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from crowdpref.aggregation import order_balance, source_counts
from crowdpref.config import REPO_PART_RE, StudyConfig
from crowdpref.contracts import SCREENING_BASE, SOURCES
from crowdpref.errors import ConfigError, CrowdprefError
from crowdpref.filters import EXCLUDED, FILTERED_BY, RULE_TEXT
from crowdpref.filters import RULES as FILTER_RULES
from crowdpref.release.privacy import PATTERNS as PRIVACY_PATTERNS
from crowdpref.release.privacy import BY_NAME as PRIVACY_BY_NAME
from crowdpref.release.privacy import TIMESTAMP_PRECISIONS, first_hit, mask_all
from crowdpref.release.privacy import find as find_private
from crowdpref.pseudonyms import SALT_FILE
from crowdpref.runfolder import (
    RELEASE_DIR,
    RunFolder,
    new_release_staging,
    release_lock,
    repair_release,
    swap_in_release,
    write_json,
)
from crowdpref.store import Store
from crowdpref.withdrawals import Withdrawn, leave_out_all, stale

__all__ = [
    "ID_LENGTH",
    "PUBLISHED_IDS_FILE",
    "Column",
    "PushError",
    "PushResult",
    "Subset",
    "build_release",
    "collection_stats",
    "display_order_text",
    "forbidden_strings",
    "hub_dataset_url",
    "provenance_text",
    "push_release",
    "HUB_KEEP",
    "PRIVACY_FILE",
    "PrivacyError",
    "PrivacyReport",
    "coarsen_timestamps",
    "privacy_markdown",
    "read_privacy_report",
    "release_files",
    "release_folder",
    "read_stats",
    "release_subsets",
    "release_summary",
    "scan_for_secrets",
    "published_ids",
    "validate_repo_id",
]

SPLIT = "train"
PUBLISHED_IDS_FILE = "published-ids.json"
ID_LENGTH = 10
ID_ALPHABET = string.ascii_letters + string.digits
MIN_SECRET_LENGTH = 4
"""Forbidden strings shorter than this are ignored by the scan (they would match anywhere)."""
DEFAULT_ENDPOINT = "https://huggingface.co"
REQUIRED_TAGS = ("human-feedback", "rlhf")
FALLBACK_LIMITATION = (
    "The fallback classifier (alt-profanity-check, a TF-IDF + linear SVM model) recognises "
    "profanity but misses hateful or demeaning text written without swear words, so answers it "
    "did not flag may still be offensive."
)
SOURCE_WHO = {
    "simulated": "crowdpref's simulated crowd: a program, not a person",
    "prolific": "people recruited on Prolific",
    "invite": ("people who joined through the study team's invite link, e.g. a pilot or an own "
               "panel"),
}
"""What each participant source (:data:`crowdpref.contracts.SOURCES`) means, for the card."""
SIMULATED_TAG = "synthetic"
FILTERS_FILE = "filters.json"
"""The preregistered filters' report in the run folder (written by aggregate-ratings)."""
RESPONSES_RAW = "responses_raw.parquet"
RATINGS_RAW = "ratings_raw.parquet"
PARTICIPANTS_FILE = "participants.parquet"
RATERS_FILE = "raters.parquet"
"""Hub tag added when any answer or rating is simulated."""


# --- the one definition of every published column -----------------------------------------
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
    :mod:`crowdpref.privacy` are masked. Every other text column is crowdpref's own (ids,
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
                   + "; ".join(f"{i} = {_lower_first(label)}" for i, label in enumerate(labels, start=1))
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
            Column("status", pa.string(), "`complete`, `released`, `excluded` or `active`",
                   "How their participation ended: `complete` finished their batch; `released` "
                   "returned the study, timed out or went quiet (their unanswered items went to "
                   "other people); `excluded` failed the quality checks under a study that "
                   "excludes on failure; `active` was still working when the data was exported."),
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


# --- anonymous participant ids -------------------------------------------------------------
def _random_id() -> str:
    return "".join(secrets.choice(ID_ALPHABET) for _ in range(ID_LENGTH))


def published_ids(path: Path, keys: Iterable[str]) -> dict[str, str]:
    """Participant key -> random 10-character id. Existing entries of the private mapping file
    ``path`` are reused (ids stay stable across re-publishing); new keys get new ids and the
    file is rewritten atomically with mode 0600."""
    mapping: dict[str, str] = {}
    if path.exists():
        try:
            mapping = dict(json.loads(path.read_text(encoding="utf-8"))["ids"])
        except (ValueError, KeyError, TypeError):
            raise CrowdprefError(
                f"{path}: not a published-ids file (expected {{\"ids\": {{key: id}}}}): restore it "
                "from a backup, or delete it to give every participant a new id"
            ) from None
    used = set(mapping.values())
    changed = not path.exists()
    for key in sorted({str(k) for k in keys}):
        if key in mapping:
            continue
        new = _random_id()
        while new in used:
            new = _random_id()
        mapping[key] = new
        used.add(new)
        changed = True
    if changed:
        write_json({"about": "participant/rater key -> published id; private, never publish",
                    "ids": mapping}, path, private=True)
    elif path.stat().st_mode & 0o077:
        os.chmod(path, 0o600)
    return mapping


# --- the secrets scan ------------------------------------------------------------------------
@dataclass(frozen=True)
class _Needle:
    number: int
    text: str

    @property
    def data(self) -> bytes:
        return self.text.encode("utf-8")


def _needles(forbidden: Iterable[str]) -> list[_Needle]:
    return [_Needle(number, value) for number, value in enumerate(forbidden, start=1)
            if isinstance(value, str) and len(value.strip()) >= MIN_SECRET_LENGTH]


def _describe(needle: _Needle) -> str:
    return f"forbidden string #{needle.number} ({len(needle.text)} characters)"


def _text(value: Any) -> str:
    return "" if value is None else (value if isinstance(value, str) else str(value))


_HASH_BITS = 22


def _hash(words: np.ndarray) -> np.ndarray:
    """Multiplicative hash of 32-bit words to :data:`_HASH_BITS` bits."""
    return (words * np.uint32(2654435761)) >> np.uint32(32 - _HASH_BITS)


def _present(data: bytes, needles: list[_Needle]) -> list[_Needle]:
    """The needles occurring in ``data``, in one vectorised pass: every 4-byte window of the
    data is looked up among the needles' first 4 bytes, and only those candidate positions are
    compared in full (thousands of needles over megabytes take well under a second, where one
    ``find`` per needle would take tens of seconds)."""
    if len(data) < MIN_SECRET_LENGTH:
        return []
    by_prefix: dict[int, list[_Needle]] = {}
    for needle in needles:
        by_prefix.setdefault(int.from_bytes(needle.data[:4], "little"), []).append(needle)
    arr = np.frombuffer(data, dtype=np.uint8).astype(np.uint32)
    windows = arr[:-3] | (arr[1:-2] << 8) | (arr[2:-1] << 16) | (arr[3:] << 24)
    keys = np.fromiter(by_prefix, dtype=np.uint32, count=len(by_prefix))
    table = np.zeros(1 << _HASH_BITS, dtype=bool)  # a hashed bitmap of the prefixes
    table[_hash(keys)] = True
    found: dict[int, _Needle] = {}
    for pos in np.flatnonzero(table[_hash(windows)]).tolist():
        for needle in by_prefix.get(int(windows[pos]), ()):
            if needle.number not in found and data.startswith(needle.data, pos):
                found[needle.number] = needle
    return sorted(found.values(), key=lambda n: n.number)


def _scan_values(values: list[str], needles: list[_Needle], where: str,
                 rows: Callable[[], list[str]] | None = None) -> list[tuple[_Needle, str]]:
    """The needles found in ``values`` with the first row holding each. ``values`` may be a
    column's distinct values; ``rows`` (giving the full column) then locates the row."""
    if not values:
        return []
    blob = "\n".join(values)
    present = _present(blob.encode("utf-8"), needles)
    if not present:
        return []
    full = rows() if rows is not None else values
    out = []
    for needle in present:
        row = next((i for i, v in enumerate(full) if needle.text in v), 0)
        out.append((needle, f"{where} row {row}"))
    return out


def scan_for_secrets(folder: Path, forbidden: Iterable[str]) -> list[str]:
    """Read every file under ``folder`` and report each forbidden string found, as
    ``"<file>: column 'c' row n: forbidden string #i (n characters)"`` (or ``line n`` for text
    files) - the string itself is never repeated; ``#i`` is its 1-based position in
    ``forbidden``. Parquet files are decoded (their pages are compressed) and every value, column
    name and metadata entry is searched, then the raw bytes; other files as text and as raw
    bytes. Strings shorter than :data:`MIN_SECRET_LENGTH` characters are ignored."""
    folder = Path(folder)
    needles = _needles(forbidden)
    hits: list[str] = []
    if not needles:
        return hits
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        reported: set[int] = set()

        def report(found: list[tuple[_Needle, str]]) -> None:
            for needle, where in found:
                if needle.number not in reported:
                    reported.add(needle.number)
                    hits.append(f"{where}: {_describe(needle)}")

        if path.suffix == ".parquet":
            try:
                table = pq.read_table(path)
            except Exception:  # noqa: BLE001 - an unreadable file is still scanned as bytes
                table = None
            if table is not None:
                meta = table.schema.metadata or {}
                header = [*table.column_names,
                          *(b.decode("utf-8", "replace") for kv in meta.items() for b in kv)]
                report([(n, w.replace(" row ", " entry ", 1)) for n, w in
                        _scan_values(header, needles, f"{rel}: column names/metadata")])
                for name in table.column_names:
                    column = table.column(name)
                    try:
                        distinct = column.unique().to_pylist()  # ids and labels repeat a lot
                    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
                        distinct = column.to_pylist()
                    report(_scan_values(
                        [_text(v) for v in distinct], needles, f"{rel}: column '{name}'",
                        rows=lambda column=column: [_text(v) for v in column.to_pylist()]))
        raw = path.read_bytes()
        lines = raw.split(b"\n")
        for needle in _present(raw, [n for n in needles if n.number not in reported]):
            line = next((i for i, ln in enumerate(lines, start=1) if needle.data in ln), None)
            report([(needle, f"{rel}: line {line}" if line and path.suffix != ".parquet"
                     else f"{rel}: (bytes)")])
    return hits


def forbidden_strings(run_folder: RunFolder | Path, secrets_: Iterable[str | None] = (),
                      accounts: Iterable[tuple[str, str]] = ()) -> list[str]:
    """What must never be published: every participant account's username and password
    (``accounts``, from the study store), the participant-key salt and every string of
    ``private/*prolific*.json`` in the run folder, plus ``secrets_`` (API keys and tokens from
    settings; None entries are skipped)."""
    run = run_folder if isinstance(run_folder, RunFolder) else RunFolder(Path(run_folder))
    out: list[str] = [s for s in secrets_ if s]
    for username, password in accounts:
        out += [str(username), str(password)]
    private = run.private_dir
    if not private.is_dir():
        return out
    salt = _read_json(private / SALT_FILE)
    if isinstance(salt, dict) and salt.get("salt"):
        out.append(str(salt["salt"]))
    for path in sorted(private.glob("*prolific*.json")):
        data = _read_json(path)
        if path.name.startswith(REVIEW_FILE_PREFIX) and isinstance(data, list):
            # the sync's review list: who and which submission; its field names and crowdpref's own
            # reasons ("complete: approve", proposed messages) are not secrets and appear in the card
            data = [[entry.get(field) for field in REVIEW_FILE_SECRETS] for entry in data if isinstance(entry, dict)]
        out += [s for s in _strings(data) if len(s) >= 8]
    return out


REVIEW_FILE_PREFIX = "prolific-review-"
"""``private/prolific-review-<key>.json`` (:func:`crowdpref.recruitment.sync_prolific`)."""
REVIEW_FILE_SECRETS = ("username", "submission_id")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _strings(data: Any) -> list[str]:
    if isinstance(data, str):
        return [data]
    if isinstance(data, dict):
        return [s for k, v in data.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(data, list):
        return [s for item in data for s in _strings(item)]
    return []


# --- personal details found by their form (crowdpref.privacy) -------------------------------
PRIVACY_FILE = "privacy.json"
"""What the privacy pass of the last build masked (counts only, never a value), in the run folder."""


class PrivacyError(CrowdprefError):
    """A personal detail or credential in one of crowdpref's own columns, or a credential or
    Prolific-style id in the card's own text: the build stops."""


CARD_ALLOWED_PATTERNS = frozenset({"email"})
"""Pattern kinds the card's own text may hold: the study team's contact address is theirs to
publish (participants' text is masked before any of it reaches the card)."""


def _check_card_text(card: str, source: str | None) -> None:
    """The card's text comes from the study config (title, description, citation, category
    descriptions) and from crowdpref: a token, key or Prolific-style id in it stops the build,
    with the line and the kind, never the value."""
    hits = find_private(card, [p for p in PRIVACY_PATTERNS if p.name not in CARD_ALLOWED_PATTERNS])
    if hits:
        line = card.count("\n", 0, hits[0].start) + 1
        label = PRIVACY_BY_NAME[hits[0].pattern].label
        raise PrivacyError(
            f"refusing to publish: the dataset card (README.md line {line}) would contain a "
            f"{label}, from the study config's text ({source or 'the study config'}: title, description, "
            "publish.citation or a category description): remove it and build again; "
            "nothing was written")


@dataclass
class PrivacyReport:
    """What the build masked in participant text, per pattern and published column (counts
    only), and how precisely timestamps were published."""

    timestamp_precision: str = "microsecond"
    masked: dict[str, dict[str, int]] = field(default_factory=dict)
    """Pattern name -> {"<configuration>.<column>": values replaced}."""

    def add(self, pattern: str, where: str, count: int) -> None:
        if count:
            cell = self.masked.setdefault(pattern, {})
            cell[where] = cell.get(where, 0) + count

    @property
    def total(self) -> int:
        return sum(n for cells in self.masked.values() for n in cells.values())

    def rows(self) -> list[dict[str, Any]]:
        """One row per pattern that hit (in :data:`crowdpref.privacy.PATTERNS` order)."""
        return [{"pattern": p.name, "what": p.label, "placeholder": p.placeholder,
                 "replaced": sum(self.masked[p.name].values()),
                 "columns": ", ".join(f"{w} ({n})" for w, n in sorted(self.masked[p.name].items()))}
                for p in PRIVACY_PATTERNS if p.name in self.masked]

    def to_json(self) -> dict[str, Any]:
        return {"about": "personal details masked in the release (counts only)",
                "timestamp_precision": self.timestamp_precision, "total": self.total,
                "masked": self.masked, "patterns": self.rows()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> PrivacyReport:
        """The report :meth:`to_json` wrote (an empty one for None or a malformed file)."""
        data = data or {}
        precision = data.get("timestamp_precision")
        report = cls(timestamp_precision=precision if precision in TIMESTAMP_PRECISIONS
                     else "microsecond")
        masked = data.get("masked")
        for pattern, cells in (masked.items() if isinstance(masked, Mapping) else ()):
            for where, count in (cells.items() if isinstance(cells, Mapping) else ()):
                if isinstance(count, int):
                    report.add(str(pattern), str(where), count)
        return report


def privacy_markdown(report: PrivacyReport) -> list[str]:
    """The card's (and the artifact's) lines on what the pattern scan masked and on timestamps."""
    kinds = ", ".join(p.label for p in PRIVACY_PATTERNS)
    out = [f"Answer and question texts were scanned for personal details and credentials "
           f"recognised by their form ({kinds}). "]
    if report.total:
        out[0] += (f"{report.total} were found and replaced by a placeholder such as "
                   "`[email removed]` (the values themselves are not kept in the release):")
        out += ["", "| What | Placeholder | Replaced | In (configuration.column: values) |",
                "|---|---|---|---|"]
        out += [f"| {r['what']} | `{r['placeholder']}` | {r['replaced']} | {_cell(r['columns'])} |"
                for r in report.rows()]
        out += ["", "The same answer appears in several configurations (e.g. `responses.text` "
                "and `default.chosen`), so one typed value can be counted more than once."]
    else:
        out[0] += "None was found."
    out += ["", "Other personal details (names, places, stories) cannot be recognised this way: "
            "answer texts are otherwise published as written, not edited."]
    precision = report.timestamp_precision
    out += ["", "Timestamps (`submitted_at`) are published "
            + ("as recorded, to the microsecond." if precision == "microsecond" else
               f"to the {precision}: truncated in UTC to the start of the {precision}"
               + (" (the time of day is always 00:00)" if precision == "day" else "")
               + ", so the moment a participant worked cannot be read from them.")]
    return out


def _apply_privacy(frames: dict[str, pd.DataFrame], subsets: Sequence[Subset], run: RunFolder,
                   target: Path, needles: list[_Needle], report: PrivacyReport) -> None:
    """Mask personal details in every free-text column of ``frames`` (in place, recording what
    in ``report``); refuse one in any other text column (crowdpref's own). A known secret
    (``needles``) in a free-text column refuses the build before masking could hide it."""
    for subset in subsets:
        frame = frames[subset.name]
        where_file = subset.data_path
        for column in subset.columns:
            if not pa.types.is_string(column.type):
                continue
            values = frame[column.source_name].tolist()
            where = f"{where_file}: column '{column.name}'"
            if column.free_text:
                texts = [_text(v) for v in values]
                found = _scan_values(sorted(set(texts)), needles, where, rows=lambda t=texts: t)
                if found:
                    needle, at = found[0]
                    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
                    raise CrowdprefError(
                        f"refusing to publish {target}: {at}: {_describe(needle)}{more}: remove "
                        "it from the run folder's data and build again; nothing was written")
                masked, counts = mask_all(values)
                for pattern, count in counts.items():
                    report.add(pattern, f"{subset.name}.{column.name}", count)
                if counts:
                    frames[subset.name] = frame = frame.assign(
                        **{column.source_name: pd.Series(masked, index=frame.index, dtype=object)})
                continue
            hit = first_hit(values)
            if hit is not None:
                row, pattern = hit
                raise PrivacyError(
                    f"refusing to publish {target}: {where} row {row} holds what looks like "
                    f"{_pattern_label(pattern)} ({pattern}); this column is written by crowdpref "
                    f"(from {run.file(subset.source_file).name}), not typed by participants: fix "
                    "the data or the stage that wrote it and build again; nothing was written")


def _pattern_label(name: str) -> str:
    label = next(p.label for p in PRIVACY_PATTERNS if p.name == name)
    return ("an " if label[0].lower() in "aeiou" else "a ") + label


# --- statistics the card reports ------------------------------------------------------------
def read_stats(path: Path) -> dict[str, Any] | None:
    """A stats JSON file of the run folder, or None when it is missing or unreadable."""
    data = _read_json(path) if path.exists() else None
    return data if isinstance(data, dict) else None


def collection_stats(store: Store, study_name: str) -> dict[str, dict[str, int]]:
    """Counts from the study store per study: participants, drop-outs (participants whose
    unsubmitted work was released), released slots and how many of them later participants
    claimed. Counts only: no username leaves this function."""
    out: dict[str, dict[str, int]] = {}
    for study in ("study1", "study2"):
        info = store.find_collection(study_name, study)
        if info is not None:
            out[study] = store.summary(info.id)
    return out


# --- building the release --------------------------------------------------------------------
def _to_table(frame: pd.DataFrame, subset: Subset, source: Path,
              timestamp_precision: str = "microsecond") -> pa.Table:
    arrays = []
    for column in subset.columns:
        try:
            array = pa.Array.from_pandas(frame[column.source_name])
            if pa.types.is_timestamp(column.type):
                if pa.types.is_timestamp(array.type) and array.type.tz is None:
                    array = array.cast(pa.timestamp(array.type.unit, tz="UTC"))
                array = coarsen_timestamps(array.cast(column.type, safe=False),
                                           timestamp_precision)
            elif pa.types.is_null(array.type):
                array = pa.nulls(len(array), column.type)
            else:
                array = array.cast(column.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            detail = str(exc).splitlines()[0][:120]
            raise CrowdprefError(
                f"{source}: column '{column.source_name}' cannot be published as "
                f"{column.dtype} ({detail}): fix the stage that wrote it"
            ) from None
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=subset.schema)


def _read_source(run: RunFolder, subset: Subset) -> pd.DataFrame | None:
    path = run.file(subset.source_file)
    if not path.exists():
        if subset.required:
            raise CrowdprefError(f"{path}: not found: {subset.needed_by}")
        return None
    frame = pd.read_parquet(path)
    missing = [c.source_name for c in subset.columns if c.source_name not in frame.columns]
    if missing:
        raise CrowdprefError(
            f"{path}: missing column(s) {', '.join(missing)}: rerun the stage that writes it "
            f"({subset.needed_by.removeprefix('run ').removesuffix(' first')})"
        )
    if subset.kept_only:
        if FILTERED_BY not in frame.columns:
            raise CrowdprefError(f"{path}: missing column(s) {FILTERED_BY}: {subset.needed_by}")
        kept = frame[FILTERED_BY].fillna("").astype(str).eq("").to_numpy(dtype=bool)
        frame = frame.loc[kept].reset_index(drop=True)
    return frame


def _read_filters(run: RunFolder) -> dict[str, Any] | None:
    """``filters.json`` of the run folder; None when the filters did not run (an older run)."""
    path = run.file(FILTERS_FILE)
    if not path.exists():
        return None
    data = _read_json(path)
    if not (isinstance(data, dict) and isinstance(data.get("per_rule"), list)
            and isinstance(data.get("total"), dict)):
        raise CrowdprefError(f"{path}: not a filters report (no per_rule/total): rerun the "
                             "aggregate-ratings flow with force=True")
    return data


def _check_filters(filters: Mapping[str, Any], frames: Mapping[str, pd.DataFrame],
                   path: Path) -> None:
    """The report's numbers must be those of the raw files it came with: answers and ratings
    before and after, and each rule's removals counted from ``filtered_by``."""
    def hits(frame: pd.DataFrame, rule: str | None) -> int:
        by = frame[FILTERED_BY].fillna("").astype(str)
        return int(by.ne("").sum() if rule is None else by.str.split(",").map(
            lambda names: rule in names).sum())

    checks: list[tuple[str, Any, int]] = []
    for what, raw in (("answers", "responses_raw"), ("ratings", "ratings_raw")):
        excluded = frames[raw][FILTERED_BY].fillna("").astype(str).eq(EXCLUDED)  # before the rules ran
        checks.append((f"excluded_{what}", filters.get(f"excluded_{what}", 0), int(excluded.sum())))
        frame = frames[raw][~excluded.to_numpy(dtype=bool)]
        checks += [(f"{what}_before", filters.get(f"{what}_before"), len(frame)),
                   (f"{what}_after", filters.get(f"{what}_after"), len(frame) - hits(frame, None)),
                   (f"total.{what}", (filters.get("total") or {}).get(what), hits(frame, None))]
        for row in filters.get("per_rule") or []:
            if isinstance(row, Mapping) and row.get("rule") in FILTER_RULES:
                checks.append((f"{row['rule']}.{what}", row.get(what), hits(frame, row["rule"])))
    wrong = [(name, stated, measured) for name, stated, measured in checks if stated != measured]
    if wrong:
        name, stated, measured = wrong[0]
        raise CrowdprefError(
            f"{path}: {name} is {stated} but {RESPONSES_RAW}/{RATINGS_RAW} show {measured}: the "
            "report and the raw files are from different runs; rerun the aggregate-ratings flow "
            "with force=True")


def quality_section(config: StudyConfig, participants: pd.DataFrame | None,
                    aggregation: Mapping[str, Any] | None) -> list[str]:
    """The card's "Quality checks, reliability and uncertainty" section: what each study's
    checks were and how participants did (from the ``participants`` configuration), how the
    pairs were decided, and what the uncertainty columns mean."""
    s1, s2 = config.study1.checks, config.study2.checks
    out = ["## Quality checks, reliability and uncertainty", ""]
    for study, checks, what in (
            ("study1", s1, f"{s1.count} instructed-response item(s) (the text told the "
                           "participant exactly which word to write and which rating to give)"),
            ("study2", s2, f"{s2.gold_pairs} gold pair(s) (a clearly good and a clearly bad answer) "
                           f"and {s2.repeated_pairs} repeated pair(s) (one of the rater's own pairs "
                           f"again, in the other A/B order; consistent within {s2.repeat_tolerance} "
                           "points)")):
        name = "Study 1" if study == "study1" else "Study 2"
        if checks.count == 0:
            out += [f"{name} had no quality checks.", ""]
            continue
        rule = "all" if checks.min_passed is None else f"at least {checks.min_passed}"
        action = ("their counted work was excluded and given to other participants, so every item "
                  "still has its planned number of answers from people who passed" if checks.on_fail == "exclude"
                  else "they were flagged and their work kept (the filters below decide about it)")
        line = (f"{name} mixed {what} into every batch, graded automatically; passing needed {rule}. "
                f"Participants who failed: {action}.")
        if participants is not None and "checks_verdict" in participants:
            rows = participants[participants["study"] == study]
            counts = rows["checks_verdict"].value_counts()
            line += (f" Of {len(rows)} participants, {int(counts.get('passed', 0))} passed, "
                     f"{int(counts.get('failed', 0))} failed and {int(counts.get('unanswered', 0))} "
                     f"left before answering them; {int((rows['status'] == 'excluded').sum())} had "
                     "their work excluded.")
        out += [line, ""]
    method = (aggregation or {}).get("method", "mean")
    out += [("Each pair was decided by the plain mean of its ratings, as in the published method. "
             if method == "mean" else
             "Each pair was decided by the reliability-weighted mean of its ratings, each rating "
             "corrected for its rater's A/B position bias. ")
            + "Rater reliability (the `raters` configuration) comes from a one-factor model fitted "
            "over every counted rating (before the preregistered filters); `p_chosen` is the share of bootstrap resamples of a pair's own "
            "ratings that land on the chosen side, and `mean_rating_low` / `mean_rating_high` "
            f"bound its mean rating ({config.aggregation.interval_level:.0%} interval). With only "
            f"{config.study2.ratings_per_pair} ratings per pair these describe how one-sided the "
            "ratings were, not a calibrated probability.", ""]
    return out


def filters_section(filters: Mapping[str, Any] | None) -> list[str]:
    """The card's "Filters (preregistered)" section (markdown lines) from ``filters.json``."""
    out = ["## Filters (preregistered)", ""]
    if not filters:
        return out + ["No preregistered filters were applied to this release (it was aggregated "
                      "before crowdpref applied them): `responses` and `ratings` hold every "
                      "answer and rating collected, and the default configuration is built from "
                      "all of them.", ""]
    pre = filters.get("preregistered")
    recorded = pre.get("recorded_at") if isinstance(pre, Mapping) else None
    out += ["The rules below decide which participants' work the default configuration leaves "
            "out. They are part of the study's configuration and were applied mechanically: "
            "`responses` and `ratings` hold what they kept, and the default configuration is "
            "built from those; `responses_raw` and `ratings_raw` hold every answer and rating "
            "collected, with `filtered_by` naming the rules that removed each row. Removing a "
            "study-1 participant removes their answers and every rating of a pair that holds one "
            "of them; removing a study-2 participant removes their ratings. A participant hit "
            "by several rules is counted under each rule and once in the last row.", ""]
    if recorded:
        out += [f"The rules were recorded in the study's store on "
                f"{str(recorded).replace('T', ' ').replace('+00:00', ' UTC')}, when collection "
                "began, and the aggregation checked that they had not changed since.", ""]
    else:
        out += ["**These rules were not recorded before collection began** (the study store "
                "holds no record of them), so this release cannot show that they were fixed in "
                "advance.", ""]
    out += ["| Rule | What it leaves out | Setting | Participants removed (study 1 / study 2) | "
            "Answers removed | Ratings removed |", "|---|---|---|---|---|---|"]
    rows = [r for r in filters.get("per_rule") or [] if isinstance(r, Mapping)]
    total = filters.get("total") if isinstance(filters.get("total"), Mapping) else {}
    for row in [*rows, {**total, "rule": None}]:
        name = f"`{row.get('rule')}`" if row.get("rule") else "**Any rule** (each counted once)"
        what = RULE_TEXT.get(str(row.get("rule")), "") if row.get("rule") else ""
        setting = row.get("setting") if row.get("rule") else ""
        out.append(f"| {name} | {_cell(what)} | {_cell(_fmt(setting))} | "
                   f"{_fmt(row.get('participants'))} ({_fmt(row.get('participants_study1'))} / "
                   f"{_fmt(row.get('participants_study2'))}) | {_fmt(row.get('answers'))} | "
                   f"{_fmt(row.get('ratings'))} |")
    out += ["", f"Answers: {_fmt(filters.get('answers_before'))} collected, "
            f"{_fmt(filters.get('answers_after'))} kept. Ratings: "
            f"{_fmt(filters.get('ratings_before'))} collected, {_fmt(filters.get('ratings_after'))} "
            f"kept ({_fmt(total.get('ratings_of_removed_answers'))} of those removed belong to a "
            f"pair holding a removed answer, {_fmt(total.get('ratings_by_removed_raters'))} were "
            "given by a removed rater; a rating can be both).", ""]
    excluded = (filters.get("excluded_answers") or 0, filters.get("excluded_ratings") or 0)
    if any(excluded):
        out += [f"Before these rules, {excluded[0]} answers and {excluded[1]} ratings were taken out "
                "of the count during collection because their authors failed the quality checks "
                f"(see above); other participants answered those items again. They are in "
                f"`responses_raw` / `ratings_raw` with `filtered_by` `{EXCLUDED}` and not in the "
                "numbers above.", ""]
    if filters.get("participants_file") is False:
        out += ["The participants file was not available, so the rules that read it were off.", ""]
    unlisted = (filters.get("unlisted_writers") or 0, filters.get("unlisted_raters") or 0)
    if any(unlisted):
        out += [f"{unlisted[0]} writers and {unlisted[1]} raters were not listed in the "
                "participants file, so no participant rule could remove them.", ""]
    return out


def _subset(subsets: Sequence[Subset], name: str) -> Subset:
    return next(s for s in subsets if s.name == name)


def _check_sources(frame: pd.DataFrame, path: Path, what: str) -> None:
    """Every ``source`` is one of contracts.SOURCES: the card's provenance must be true."""
    bad = ~frame["source"].isin(SOURCES).to_numpy(dtype=bool)
    if bad.any():
        shown = sorted({str(v) for v in pd.unique(frame["source"].to_numpy(dtype=object)[bad])})
        raise CrowdprefError(
            f"{path}: {int(bad.sum())} {what} have a source that is missing or not one of "
            f"{', '.join(SOURCES)} (e.g. {shown[:3]}): fix the stage that wrote it")


@dataclass
class _Built:
    subset: Subset
    table: pa.Table
    file_bytes: int = 0


@dataclass
class _Facts:
    """Numbers of this run, measured on the data (never invented)."""

    rows: dict[str, int] = field(default_factory=dict)
    questions: int = 0
    categories: int = 0
    writers: int = 0
    answers: int = 0
    answers_per_question: tuple[int, int] = (0, 0)
    answers_per_writer: tuple[int, int] = (0, 0)
    rated_pairs: int = 0
    raters: int = 0
    ratings: int = 0
    ratings_per_pair: tuple[int, int] = (0, 0)
    ratings_per_rater: tuple[int, int] = (0, 0)
    preference_rows: int = 0
    mean_agreement: float | None = None
    mean_margin: float | None = None
    flagged_chosen: int | None = None
    flagged_rejected: int | None = None
    screened: int | None = None
    flagged: int | None = None
    screening_models: list[str] = field(default_factory=list)
    flagged_per_label: dict[str, int] = field(default_factory=dict)
    answer_sources: dict[str, int] = field(default_factory=dict)
    """Published answers per writer source."""
    rating_sources: dict[str, int] = field(default_factory=dict)
    """Published ratings per rater source."""
    order_balance: dict[str, Any] = field(default_factory=dict)
    """:class:`crowdpref.aggregation.OrderBalance` of the published ratings, as a dict."""
    swapped_share: float | None = None
    """Share of published ratings shown swapped."""

    @property
    def sources(self) -> list[str]:
        """Every source present among answers or ratings (contracts.SOURCES order)."""
        return [s for s in SOURCES if self.answer_sources.get(s) or self.rating_sources.get(s)]


def _span(counts: pd.Series) -> tuple[int, int]:
    return (int(counts.min()), int(counts.max())) if len(counts) else (0, 0)


def _facts(frames: dict[str, pd.DataFrame]) -> _Facts:
    f = _Facts(rows={name: len(df) for name, df in frames.items()})
    questions, responses = frames["questions"], frames["responses"]
    ratings, prefs = frames["ratings"], frames["default"]
    f.questions = questions["question_id"].nunique()
    f.categories = questions["category"].nunique()
    f.writers = responses["participant_key"].nunique()
    f.answers = len(responses)
    f.answers_per_question = _span(responses.groupby("question_id").size())
    f.answers_per_writer = _span(responses.groupby("participant_key").size())
    f.rated_pairs = ratings["pair_id"].nunique()
    f.raters = ratings["rater_key"].nunique()
    f.ratings = len(ratings)
    f.ratings_per_pair = _span(ratings.groupby("pair_id").size())
    f.ratings_per_rater = _span(ratings.groupby("rater_key").size())
    f.answer_sources = source_counts(responses["source"])
    f.rating_sources = source_counts(ratings["source"])
    codes = pd.factorize(ratings["pair_id"])[0]
    swapped = ratings["swapped"].fillna(False).to_numpy(dtype=bool)
    n_pairs = int(codes.max()) + 1 if len(codes) else 0
    f.order_balance = asdict(order_balance(codes, swapped, n_pairs))
    f.swapped_share = float(swapped.mean()) if len(swapped) else None
    f.preference_rows = len(prefs)
    if len(prefs):
        agreement = pd.to_numeric(prefs["agreement"], errors="coerce").dropna()
        f.mean_agreement = float(agreement.mean()) if len(agreement) else None
        f.mean_margin = float(pd.to_numeric(prefs["margin"], errors="coerce").mean())
        if prefs["chosen_flagged"].notna().any():
            f.flagged_chosen = int(prefs["chosen_flagged"].fillna(False).astype(bool).sum())
            f.flagged_rejected = int(prefs["rejected_flagged"].fillna(False).astype(bool).sum())
    screening = frames.get("screening")
    if screening is not None:
        f.screened = len(screening)
        f.flagged = int(screening["flagged"].fillna(False).astype(bool).sum())
        f.screening_models = sorted({str(m) for m in screening["model"].dropna()})
        labels = (screening.loc[screening["flagged"].fillna(False).astype(bool), "flagged_labels"]
                  .fillna("").astype(str).str.split(","))
        for label in (x.strip() for row in labels for x in row):
            if label:
                f.flagged_per_label[label] = f.flagged_per_label.get(label, 0) + 1
    return f


def build_release(
    run_folder: RunFolder | Path,
    config: StudyConfig,
    *,
    aggregation: Mapping[str, Any] | None = None,
    screening: Mapping[str, Any] | None = None,
    collection: Mapping[str, Mapping[str, Any]] | None = None,
    forbidden: Iterable[str] = (),
    repo_id: str | None = None,
    withdrawn: Withdrawn | None = None,
) -> Path:
    """Write ``<run>/release/`` in Hub layout (see the module docstring) and return its path.

    ``aggregation`` (``aggregation.json``), ``screening`` (screening stats) and ``collection``
    (:func:`collection_stats`) feed the card; a missing one is reported there as "not
    available". ``forbidden``: strings that must not appear in any published file (usernames,
    passwords, API keys, Prolific ids); the original participant keys are always added.
    Personal details in participant text are masked and reported (card, ``privacy.json``); one
    in crowdpref's own columns raises :class:`PrivacyError`. The release is built in a staging
    folder and scanned; any hit raises a one-line :class:`CrowdprefError` and leaves the
    previous ``release/`` untouched. Leftovers of a killed build are cleaned (and a missing
    ``release/`` put back) before anything is written. ``repo_id`` is only used in the card's
    loading examples. ``withdrawn`` (:func:`crowdpref.withdrawals.withdrawn_in`): the rows of
    people who withdrew are left out of every configuration and the card counts them; an
    ``aggregation`` computed before a withdrawal is refused (aggregate again first)."""
    run = run_folder if isinstance(run_folder, RunFolder) else RunFolder(Path(run_folder))
    filters = _read_filters(run)
    subsets = release_subsets(config, filtered=filters is not None)
    frames: dict[str, pd.DataFrame] = {}
    for subset in subsets:
        frame = _read_source(run, subset) if subset.name != "screening" else None
        if frame is not None:
            frames[subset.name] = frame
    screening_path = run.screening
    if screening_path.exists():
        base = set(SCREENING_BASE)
        raw = pd.read_parquet(screening_path)
        scores = [c for c in raw.columns if c not in base and pd.api.types.is_numeric_dtype(raw[c])
                  and not pd.api.types.is_bool_dtype(raw[c])]
        subsets = release_subsets(config, scores, filtered=filters is not None)
        frame = _read_source(run, _subset(subsets, "screening"))
        if frame is not None:
            frames["screening"] = frame
    subsets = [s for s in subsets if s.name in frames]
    withdrawn = withdrawn or Withdrawn()
    if withdrawn.keys:
        if stale(aggregation, withdrawn):
            raise CrowdprefError(
                f"{withdrawn.participants} participant(s) withdrew but {run.file('aggregation.json')} left out "
                f"{int((aggregation or {}).get('withdrawn_participants') or 0)}: rerun the aggregate-ratings flow "
                "with force=True before building the release")
        extra = [pd.read_parquet(path) for path in (run.responses, run.pairs) if path.exists()]
        frames = leave_out_all(frames, withdrawn, extra)  # type: ignore[assignment]
    for name, what in (("responses", "answers"), ("ratings", "ratings"),
                       ("responses_raw", "answers"), ("ratings_raw", "ratings")):
        if name in frames:
            _check_sources(frames[name], run.file(_subset(subsets, name).source_file), what)
    if filters is not None:
        _check_filters(filters, frames, run.file(FILTERS_FILE))
    facts = _facts(frames)

    key_columns = {"responses": "participant_key", "responses_raw": "participant_key",
                   "participants": "participant_key", "ratings": "rater_key",
                   "ratings_raw": "rater_key", "raters": "rater_key"}
    keys = {str(k) for name, column in key_columns.items() if name in frames
            for k in frames[name][column].dropna()}
    ids = published_ids(run.private_dir / PUBLISHED_IDS_FILE, keys)
    for name, column in key_columns.items():
        if name in frames:
            frames[name] = frames[name].assign(**{column: frames[name][column].map(ids)})

    target = run.release
    forbidden = [*forbidden, *sorted(keys)]
    precision = config.publish.timestamp_precision
    privacy = PrivacyReport(timestamp_precision=precision)
    _apply_privacy(frames, subsets, run, target, _needles(forbidden), privacy)
    built = [_Built(s, _to_table(frames[s.name], s, run.file(s.source_file), precision))
             for s in subsets]
    run.path.mkdir(parents=True, exist_ok=True)
    with release_lock(run.path):
        repair_release(run.path)  # a killed build's leftovers; a missing release/ put back
        staging = new_release_staging(run.path)
        try:
            for item in built:
                path = staging / item.subset.data_path
                path.parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(item.table, path)
                item.file_bytes = path.stat().st_size
            card = dataset_card(config, built, facts, aggregation=aggregation, screening=screening,
                                collection=collection, repo_id=repo_id, filters=filters,
                                privacy=privacy, withdrawn=withdrawn.participants)
            _check_card_text(card, config.source)
            (staging / "README.md").write_text(card, encoding="utf-8")
            hits = scan_for_secrets(staging, forbidden)
            if hits:
                more = f" (and {len(hits) - 1} more)" if len(hits) > 1 else ""
                raise CrowdprefError(
                    f"refusing to publish {target}: {hits[0]}{more}: remove it from the run "
                    "folder's data (or the stats passed in) and build again; nothing was written"
                )
            swap_in_release(run.path, staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    write_json(privacy.to_json(), run.file(PRIVACY_FILE))
    return target


def release_folder(run_folder: RunFolder | Path) -> Path:
    """``<run>/release/`` after repairing what a killed build or swap left (see
    :func:`crowdpref.runfolder.repair_release`); a one-line error when nothing was built."""
    run = run_folder if isinstance(run_folder, RunFolder) else RunFolder(Path(run_folder))
    with release_lock(run.path):
        folder = repair_release(run.path)
    if folder is None:
        raise CrowdprefError(f"{run.release}: not found: run the publish-dataset flow to build "
                             "the release")
    return folder


def read_privacy_report(run_folder: RunFolder | Path) -> dict[str, Any] | None:
    """The last build's :data:`PRIVACY_FILE` (counts only), or None."""
    run = run_folder if isinstance(run_folder, RunFolder) else RunFolder(Path(run_folder))
    return read_stats(run.file(PRIVACY_FILE))


def release_summary(folder: Path) -> list[dict[str, Any]]:
    """One row per configuration of a built release: name, file, rows, bytes."""
    rows = []
    for path in sorted(Path(folder).glob(f"data/*/{SPLIT}-*.parquet")):
        rows.append({"config": path.parent.name, "file": path.relative_to(folder).as_posix(),
                     "rows": pq.ParquetFile(path).metadata.num_rows, "bytes": path.stat().st_size})
    rows.sort(key=lambda r: (r["config"] != "default", r["config"]))
    return rows


# --- the dataset card -------------------------------------------------------------------------
NA = "not available"


def _fmt(value: Any) -> str:
    if value is None:
        return NA
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return NA
        return f"{value:.3f}".rstrip("0").rstrip(".") if value % 1 else f"{value:.0f}"
    if isinstance(value, (list, tuple, set)):
        return str(len(value))
    return str(value)


def _get(stats: Mapping[str, Any] | None, *names: str) -> Any:
    if not stats:
        return None
    for name in names:
        if name in stats and stats[name] is not None:
            return stats[name]
    return None


def _count(value: Any) -> Any:
    if isinstance(value, (list, tuple, set, dict)):
        return len(value)
    return value


def _balance_cell(balance: Mapping[str, Any] | None) -> str | None:
    balanced, rated = _get(balance, "balanced_pairs"), _get(balance, "rated_pairs")
    if not isinstance(balanced, int) or not isinstance(rated, int):
        return None
    return f"{balanced} of {rated}" + (f" ({balanced / rated:.0%})" if rated else "")


def _span_text(span: tuple[int, int]) -> str:
    lo, hi = span
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                         (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "n>1M"


UNVERIFIED_NOTE = (
    "> **Unverified participants.** This study ran as an unverified pilot (`prolific.verify: "
    "false`): the people who took part were not checked with Prolific's API when they arrived, "
    "so anyone holding the study's link with a made-up Prolific-style id could have taken part. "
    "Treat who the participants were as unknown.")


def unverified_participants(config: StudyConfig) -> bool:
    """Whether the study took Prolific-style arrivals without checking them with Prolific."""
    return config.participants == "prolific" and not config.prolific.verify


def provenance_text(answer_sources: Mapping[str, int], rating_sources: Mapping[str, int]) -> str:
    """Where the answers and ratings came from, from their counts per ``source``: one source ->
    "All answers and ratings come from `<source>` participants" (SIMULATED data said plainly);
    more than one -> the release MIXES sources, with the answers and ratings of each."""
    present = [s for s in SOURCES if answer_sources.get(s) or rating_sources.get(s)]
    present += sorted(s for s in {*answer_sources, *rating_sources}
                      if s not in SOURCES and (answer_sources.get(s) or rating_sources.get(s)))
    if not present:
        return "The release holds no answers or ratings, so it has no participants to describe."
    if len(present) == 1:
        source = present[0]
        if source == "simulated":
            return ("All answers and ratings come from `simulated` participants: this data is "
                    "SIMULATED. Every answer and every rating was produced by crowdpref's simulated "
                    "crowd (a program), not written or given by people, so it says nothing about "
                    "what people prefer. Use it to try out the pipeline and the data format, not as "
                    "human feedback.")
        who = SOURCE_WHO.get(source, "an unknown source")
        return f"All answers and ratings come from `{source}` participants ({who})."
    counts = [f"{answer_sources.get(s, 0)} answers and {rating_sources.get(s, 0)} ratings come "
              f"from `{s}` participants ({SOURCE_WHO.get(s, 'an unknown source')})" for s in present]
    text = ("This release MIXES sources: " + "; ".join(counts) + ". The `source` column of the "
            "`responses` and `ratings` configurations tells them apart; the preference rows of "
            "the default configuration average the ratings of a pair whatever their source.")
    if "simulated" in present:
        text += (" Answers and ratings with source `simulated` are SIMULATED: produced by a "
                 "program, not by people.")
    return text


def display_order_text(balance: Mapping[str, Any] | None,
                       swapped_share: float | None = None) -> str:
    """The card's sentence on the A/B display order, from an order balance
    (:class:`crowdpref.aggregation.OrderBalance` as a dict: ``rated_pairs``,
    ``unbalanced_pairs``). Claims that position bias cancels within each pair only when every
    rated pair was balanced; otherwise says how many were not."""
    rated = _get(balance, "rated_pairs")
    unbalanced = _get(balance, "unbalanced_pairs")
    if not isinstance(rated, int) or not isinstance(unbalanced, int):
        return "How the A/B display order was balanced is not available for this release."
    if rated == 0:
        return "No pair was rated, so there is no A/B display order to describe."
    if unbalanced == 0:
        return ("The A/B display order was counterbalanced per rating: the raters of each pair "
                "saw it in balanced orders (as many one way as the other, or one more for an odd "
                "number of raters), so position bias cancels within each pair - exactly for an "
                "even number of ratings; for an odd number R at most 1/R of it is left in the "
                "pair's mean (a third with 3 raters).")
    overall = (f", as far as the orders are balanced overall ({swapped_share:.0%} of all ratings "
               "were shown swapped)"
               if isinstance(swapped_share, float) and not math.isnan(swapped_share) else "")
    if unbalanced == rated:
        return (f"The A/B display order was not balanced for any of the {rated} rated pairs: more "
                "of each pair's raters saw one order than the other (by more than one rating), so "
                "position bias does not cancel within a pair and only averages out across pairs"
                f"{overall}.")
    return (f"The A/B display order was not balanced for {unbalanced} of the {rated} rated pairs: "
            "more of their raters saw one order than the other (by more than one rating). For "
            "those pairs position bias does not cancel within the pair and only averages out "
            f"across pairs{overall}. The other {rated - unbalanced} pairs were counterbalanced "
            "per rating, so position bias cancels within each of them.")


def _creators(sources: Mapping[str, int], extra: Sequence[str] = ()) -> list[str]:
    """The card's ``*_creators`` from counts per source: people -> "crowdsourced", the simulated
    crowd -> "machine-generated" (plus ``extra``)."""
    people = any(n for s, n in sources.items() if s != "simulated")
    made = (["crowdsourced"] if people else []) + (
        ["machine-generated"] if sources.get("simulated") else [])
    return list(dict.fromkeys([*made, *extra])) or ["no-annotation"]


def _yaml_header(config: StudyConfig, built: list[_Built], facts: _Facts) -> str:
    from huggingface_hub import DatasetCardData

    pb = config.publish
    simulated = "simulated" in facts.sources
    tags = list(dict.fromkeys([*REQUIRED_TAGS, *pb.tags, *([SIMULATED_TAG] if simulated else [])]))
    configs = []
    infos = []
    for item in built:
        entry: dict[str, Any] = {"config_name": item.subset.name,
                                 "data_files": [{"split": SPLIT, "path": item.subset.data_glob}]}
        if item.subset.name == "default":
            entry["default"] = True
        configs.append(entry)
        infos.append({
            "config_name": item.subset.name,
            "features": [{"name": c.name, "dtype": c.dtype} for c in item.subset.columns],
            "splits": [{"name": SPLIT, "num_bytes": int(item.table.nbytes),
                        "num_examples": item.table.num_rows}],
            "download_size": item.file_bytes,
            "dataset_size": int(item.table.nbytes),
        })
    questions_by = ["expert-generated"] + (["machine-generated"] if config.questions.llm.enabled
                                           else [])
    data = DatasetCardData(
        language=["en"],
        license=pb.license,
        pretty_name=pb.pretty_name or config.title,
        task_categories=["text-generation", "text-classification"],
        tags=tags,
        annotations_creators=_creators(facts.rating_sources),
        language_creators=_creators(facts.answer_sources, questions_by),
        multilinguality=["monolingual"],
        size_categories=[_size_category(facts.preference_rows)],
        source_datasets=["original"],
        configs=configs,
        dataset_info=infos,
    )
    return data.to_yaml()


def dataset_card(
    config: StudyConfig,
    built: list[_Built],
    facts: _Facts,
    *,
    aggregation: Mapping[str, Any] | None,
    screening: Mapping[str, Any] | None,
    collection: Mapping[str, Mapping[str, Any]] | None,
    repo_id: str | None,
    filters: Mapping[str, Any] | None = None,
    privacy: PrivacyReport | None = None,
    withdrawn: int = 0,
) -> str:
    """The README.md: YAML header + the card text (written for this project, in its own words).
    ``filters``: ``filters.json`` (:class:`crowdpref.filters.FilterReport`), None when the
    preregistered filters did not run. ``withdrawn``: participants who withdrew (counted, their
    rows already left out)."""
    pb = config.publish
    s1, s2 = config.study1, config.study2
    title = pb.pretty_name or config.title
    where = repo_id or pb.repo_id or "path/to/release"
    names = [item.subset.name for item in built]
    out: list[str] = ["---", _yaml_header(config, built, facts).rstrip(), "---", "", f"# {title}", ""]

    if pb.content_warning:
        out += ["> **Content warning.** Participants wrote these answers freely and some may be "
                "rude, offensive or upsetting. Answers flagged by the hate-speech screening were "
                "kept on purpose (see the `*_flagged` columns and the `screening` configuration) "
                "so that models can learn what not to say.", ""]

    out += ["## Summary", ""]
    sources = facts.sources
    if sources == ["simulated"]:
        opening = ("SIMULATED preference data on social reasoning: no person wrote or rated "
                   "anything in it. crowdpref's simulated crowd went through the two studies of a "
                   "human-preference study.")
    elif "simulated" in sources:
        opening = ("Preference data on social reasoning, collected in two studies partly with "
                   "people and partly with a simulated crowd (see \"Where the data comes from\").")
    else:
        opening = "Human preference data on social reasoning, collected with people in two studies."
    summary = (
        f"{opening} In the first, participants wrote their own answers to {facts.questions} "
        f"questions on social reasoning ({facts.categories} categories). In the second, other "
        f"participants compared two answers to the same question and said which one they "
        f"preferred and how strongly. Averaging those judgements gives {facts.preference_rows} `prompt` / `chosen` / "
        f"`rejected` rows, ready for reward modelling and preference optimisation (DPO and "
        f"similar). The raw answers, every single rating and the questions are released too."
    )
    out += [summary, ""]
    if unverified_participants(config):
        out += [UNVERIFIED_NOTE, ""]
    if config.description:
        out += [config.description.strip(), ""]
    out += ["## Where the data comes from", "", provenance_text(facts.answer_sources,
                                                                facts.rating_sources), ""]

    # method
    out += ["## How the data was made", "",
            "The figures below are those of this release, measured on the published data unless "
            "said otherwise" + (" - the answers and ratings the preregistered filters kept (see "
                                "\"Filters (preregistered)\")." if filters else "."), ""]
    c1 = (collection or {}).get("study1") or {}
    c2 = (collection or {}).get("study2") or {}
    out += [
        "| | Value |", "|---|---|",
        f"| Questions | {facts.questions} |",
        f"| Categories | {facts.categories} |",
        f"| Study 1 participants (wrote at least one answer) | {facts.writers} |",
        f"| Written answers | {facts.answers} |",
        f"| Study 1: answers per question, R (planned / observed) | {s1.responses_per_question} / "
        f"{_span_text(facts.answers_per_question)} |",
        f"| Study 1: questions per participant, Q (planned / observed) | "
        f"{s1.questions_per_participant} / {_span_text(facts.answers_per_writer)} |",
        f"| Study 1 drop-outs (their unanswered work returned to the pool) | {_fmt(_get(c1, 'dropped_out'))} |",
        f"| Study 1 released slots / claimed again by later participants | "
        f"{_fmt(_get(c1, 'released_items'))} / {_fmt(_get(c1, 'reclaimed_items'))} |",
        f"| Study 2 participants (gave at least one rating) | {facts.raters} |",
        f"| Rated pairs | {facts.rated_pairs} |",
        f"| Ratings | {facts.ratings} |",
        f"| Study 2: ratings per pair, R (planned / observed) | {s2.ratings_per_pair} / "
        f"{_span_text(facts.ratings_per_pair)} |",
        f"| Study 2: pairs per participant, Q (planned / observed) | {s2.pairs_per_participant} / "
        f"{_span_text(facts.ratings_per_rater)} |",
        f"| Study 2 drop-outs (their unanswered work returned to the pool) | {_fmt(_get(c2, 'dropped_out'))} |",
        f"| Study 2 released slots / claimed again by later participants | "
        f"{_fmt(_get(c2, 'released_items'))} / {_fmt(_get(c2, 'reclaimed_items'))} |",
        f"| Preference rows (default configuration) | {facts.preference_rows} |",
        "",
    ]
    if not collection:
        out += ["Drop-out and release figures are not available for this release.", ""]
    if withdrawn:
        out += [f"{withdrawn} participant{'s' if withdrawn != 1 else ''} withdrew; their answers and ratings "
                "are not in this release (nor the pairs built from their answers, nor those pairs' ratings).", ""]
    q = s1.quality_scale
    balance = _get(aggregation, "order_balance")
    balance_note = ""
    if not isinstance(balance, Mapping) or _get(balance, "unbalanced_pairs") is None:
        balance, balance_note = facts.order_balance, " (measured on the `ratings` configuration)"
    order_text = display_order_text(balance, facts.swapped_share)
    people = "participants" if "simulated" in sources else "people"
    pairs_rule = ("every pair of a question's answers" if s2.pairs == "all"
                  else f"at most {s2.pairs} pairs of answers per question (a seeded sample)")
    labels = s2.scale_labels
    out += [
        "### Questions", "",
        "Questions were taken from a hand-written bank, question files and, where enabled, a "
        "language model asked for more; near-duplicates and questions that were too short or too "
        "long were removed. The `source` column of the `questions` configuration says where each "
        "came from.", "",
        "### Study 1: written answers", "",
        f"Each participant received a batch of up to {s1.questions_per_participant} different "
        f"questions and, for each, wrote an answer in their own words and rated the question's "
        f"quality from {q.min} to {q.max}. Every question was given to "
        f"{s1.responses_per_question} different {people}. Questions were handed out so that those "
        "with the most copies still unassigned went first, which keeps coverage even. "
        "Participants were asked to be respectful, honest and authentic, to show empathy and "
        "stay inclusive, to keep a neutral tone, and to explain their reasoning. When someone "
        "stopped working, the questions they had not answered went back to a pool and were given "
        "to a new participant.", "",
        "### Study 2: pairwise ratings", "",
        f"Pairs were formed from {pairs_rule}. Each rater saw a question with two answers, shown "
        f"as A and B, and picked one of {s2.scale_points} points: "
        + ", ".join(f"{i} {_lower_first(label)}" for i, label in enumerate(labels, start=1))
        + ". There is no neutral point. "
        + f"Each pair was rated by {s2.ratings_per_pair} different {people}"
        + (" (none of whom had written answers in study 1)" if s2.exclude_study1_participants else "")
        + f" and each rater received up to {s2.pairs_per_participant} pairs. "
        "Raters judged which answer was more respectful, honest, empathetic, inclusive, "
        "neutral in its language and better reasoned, weighing one weakness against other "
        "strengths.", "",
        order_text, "",
        "### From ratings to preferences", "",
        f"The ratings of a pair are turned to the same orientation and averaged. A mean below the "
        f"midpoint ({s2.midpoint:g}) prefers one answer, above it the other; that answer becomes "
        "`chosen` and the other `rejected`. Pairs whose mean sits exactly on the midpoint (ties) "
        "are left out of the default configuration; their ratings remain in `ratings`. "
        + ("Pairs with fewer ratings than planned are kept and counted below." if
           config.aggregation.incomplete_pairs == "report_and_keep"
           else "Pairs with fewer ratings than planned were dropped."), "",
    ]

    out += quality_section(config, next((b.table.to_pandas() for b in built
                                         if b.subset.name == "participants"), None), aggregation)
    out += filters_section(filters)

    # agreement
    out += ["## Agreement", ""]
    alpha = _get(aggregation, "alpha", "krippendorff_alpha")
    mean_agreement = _get(aggregation, "mean_agreement")
    agreement_note = ""
    if mean_agreement is None and facts.mean_agreement is not None:
        mean_agreement, agreement_note = facts.mean_agreement, " (computed from the `agreement` column)"
    bias = _get(aggregation, "position_bias")
    rows = [
        ("Krippendorff's alpha (ordinal, over all ratings)", alpha),
        (f"Mean agreement (share of raters on the majority side){agreement_note}", mean_agreement),
        ("Mean margin", facts.mean_margin),
        ("Mean rating spread", _get(aggregation, "mean_spread")),
        ("Pairs formed", _get(aggregation, "pairs")),
        ("Pairs with at least one rating", _get(aggregation, "rated_pairs")),
        ("Pairs without any rating", _count(_get(aggregation, "unrated_pairs"))),
        ("Ties (mean exactly on the midpoint; left out)", _count(_get(aggregation, "ties"))),
        ("Incomplete pairs (fewer ratings than planned)",
         _count(_get(aggregation, "incomplete_pairs"))),
        ("Incomplete pairs dropped", _get(aggregation, "incomplete_dropped")),
        ("Pairs left out because screening dropped an answer", _get(aggregation, "excluded_pairs")),
        ("Pairs with more ratings than planned (kept)", _get(aggregation, "over_rated")),
        ("Repeated ratings of a pair by the same rater", _get(aggregation, "duplicate_rater_ratings")),
        ("Position bias: mean shift of the ratings as displayed, in scale points "
         "(negative favours A)", _get(bias, "raw_shift") if isinstance(bias, Mapping) else None),
        ("Rated pairs shown in balanced A/B orders (position bias cancels within them)"
         + balance_note, _balance_cell(balance)),
    ]
    out += ["| Measure | Value |", "|---|---|"]
    out += [f"| {label} | {_fmt(value)} |" for label, value in rows]
    out.append("")
    if aggregation is None:
        out += ["The aggregation statistics are not available for this release; the figures that "
                "come from them say so.", ""]
    per_category = _get(aggregation, "per_category")
    if isinstance(per_category, list) and per_category and all(isinstance(r, Mapping)
                                                                 for r in per_category):
        cols = [c for c in per_category[0] if all(
            isinstance(r.get(c), (int, float, str, type(None))) for r in per_category)]
        out += ["Per category:", "", "| " + " | ".join(c.replace("_", " ") for c in cols) + " |",
                "|" + "---|" * len(cols)]
        out += ["| " + " | ".join(_cell(_fmt(r.get(c))) for c in cols) + " |" for r in per_category]
        out.append("")
    truth = _get(aggregation, "truth")
    if isinstance(truth, Mapping) and truth.get("share") is not None:
        share = truth.get("share")
        share_text = f"{share:.1%}" if isinstance(share, (int, float)) else _fmt(share)
        out += [f"The participants of this run were simulated: the aggregated preference matched "
                f"the simulation's hidden preference in {share_text} of the "
                f"{_fmt(truth.get('compared'))} pairs compared.", ""]
    out += ["Alpha near 1 means raters agree almost perfectly; near 0, no better than chance. "
            "Preferences about social behaviour are partly a matter of taste, so moderate values "
            "are expected; `margin` and `agreement` let users keep only the clearer pairs.", ""]

    # screening
    out += ["## Screening", ""]
    enabled = _get(screening, "enabled")
    if (facts.screened is None and screening is None) or enabled is False:
        out += [f"Screening results are {NA}: "
                + ("screening was switched off for this study."
                   if not config.screening.enabled or enabled is False
                   else "no screening output was found."), ""]
    else:
        models = _get(screening, "model") or ", ".join(facts.screening_models) or None
        fallback = bool(_get(screening, "fallback_used")) or any(
            "profanity" in m for m in facts.screening_models) or "profanity" in str(models or "")
        screened = _get(screening, "n_responses", "screened", "n_screened")
        screened = screened if screened is not None else facts.screened
        flagged = _count(_get(screening, "n_flagged", "flagged"))
        flagged = flagged if flagged is not None else facts.flagged
        policy = _get(screening, "policy") or config.screening.policy
        description = _get(screening, "description")
        out += [
            "Every written answer was passed through a hate-speech classifier. "
            + ("Flagged answers were kept and marked, not removed." if policy == "flag"
               else "Flagged answers were removed before pairing."), "",
        ]
        for warning in _get(screening, "warnings") or []:
            out += [f"> **Warning:** {warning}", ""]
        out += [
            "| | Value |", "|---|---|",
            f"| Classifier | {_fmt(models)}{' (fallback)' if fallback else ''} |",
            f"| Answers screened | {_fmt(screened)} |",
            f"| Answers flagged | {_fmt(flagged)} |",
            f"| Preference rows whose chosen / rejected answer is flagged | "
            f"{_fmt(facts.flagged_chosen)} / {_fmt(facts.flagged_rejected)} |",
            f"| Policy | {policy} |",
            "",
        ]
        if isinstance(description, str) and description.strip():
            out += [_cell(description.strip()), ""]
        per_label = _get(screening, "flagged_per_label") or facts.flagged_per_label
        if isinstance(per_label, Mapping) and per_label:
            out += ["Flags per label: " + ", ".join(f"{k} {_fmt(v)}" for k, v in per_label.items())
                    + ".", ""]
        thresholds = _get(screening, "thresholds")
        if not isinstance(thresholds, Mapping):
            thresholds = None if fallback else config.screening.thresholds
        if thresholds:
            out += ["A label flags an answer at or above its threshold: "
                    + ", ".join(f"{k} {_fmt(float(v))}" for k, v in thresholds.items()) + ".", ""]
        limitation = _get(screening, "limitations")
        if isinstance(limitation, str) and limitation.strip():
            out += [f"**Limitations.** {_cell(limitation.strip())}", ""]
        elif fallback:
            out += ["**Limitations.** The main classifier (detoxify) could not be loaded, so the "
                    "answers were screened with the fallback. " + FALLBACK_LIMITATION, ""]
        else:
            out += ["**Limitations.** Not available (the screening stage left no statistics).", ""]
        out += ["An automatic classifier makes mistakes both ways: treat the flags as a hint, "
                "not a verdict.", ""]

    # configurations and columns
    out += ["## Configurations and columns", "",
            f"Each configuration has one `{SPLIT}` split stored as one Parquet file.", "",
            "| Configuration | File | Rows |", "|---|---|---|"]
    out += [f"| `{item.subset.name}` | `{item.subset.data_path}` | {item.table.num_rows} |"
            for item in built]
    out.append("")
    for item in built:
        subset = item.subset
        out += [f"### `{subset.name}`: {subset.title}", "", subset.description, "",
                "| Column | Type | Allowed values | Meaning |", "|---|---|---|---|"]
        out += [f"| `{c.name}` | {c.dtype} | {_cell(c.allowed)} | {_cell(c.meaning)} |"
                for c in subset.columns]
        out.append("")

    # privacy
    out += [
        "## Privacy", "",
        f"Participants are identified only by random {ID_LENGTH}-character ids "
        "(`participant_id`, `rater_id`), drawn at random for this dataset and unrelated to any "
        "Prolific id, Argilla username or internal key; the table linking them stays with the "
        "study team. The release contains no usernames, passwords or API keys: every file is "
        "scanned for them before it is published.", "",
        *privacy_markdown(privacy or PrivacyReport(
            timestamp_precision=config.publish.timestamp_precision)), "",
    ]

    # loading
    out += [
        "## How to load it", "",
        "```python",
        "from datasets import load_dataset",
        "",
        f'prefs = load_dataset("{where}", split="{SPLIT}")  # default configuration',
        *[f'{n} = load_dataset("{where}", "{n}", split="{SPLIT}")' for n in names if n != "default"],
        "```", "",
        "With TRL (reward modelling or DPO), keep the standard preference columns; the "
        "reward trainer also uses `margin`:", "",
        "```python",
        "from datasets import load_dataset",
        "from trl import RewardConfig, RewardTrainer",
        "",
        f'train = load_dataset("{where}", split="{SPLIT}")',
        'train = train.select_columns(["prompt", "chosen", "rejected", "margin"])',
        "trainer = RewardTrainer(model=model, args=RewardConfig(output_dir=\"rm\"),",
        "                        train_dataset=train, processing_class=tokenizer)",
        "```", "",
        "To keep only clear preferences, filter first, e.g. "
        "`train.filter(lambda row: row[\"agreement\"] == 1.0)`.", "",
    ]

    # licence and citation
    out += ["## Licence", "", f"Released under the `{pb.license}` licence.", ""]
    out += ["## Citation", ""]
    if pb.citation:
        out += ["```", pb.citation.strip(), "```", ""]
    else:
        out += ["No citation has been given for this dataset yet.", ""]
    return "\n".join(out)


# --- pushing to the Hub -----------------------------------------------------------------------
class PushError(CrowdprefError):
    """The Hub refused or could not be reached. ``retryable`` is False for problems a retry
    cannot fix (credentials, permissions, offline mode)."""

    def __init__(self, message: str, retryable: bool = False):
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True)
class PushResult:
    """Where the release is: always the local folder; the Hub URL when it was pushed."""

    folder: Path
    pushed: bool
    repo_id: str | None = None
    url: str | None = None
    commit_url: str | None = None
    private: bool | None = None
    message: str = ""


def validate_repo_id(repo_id: str) -> str:
    """``owner/name`` as the Hub accepts it; a one-line :class:`ConfigError` otherwise."""
    parts = repo_id.split("/") if isinstance(repo_id, str) else []
    ok = (len(parts) == 2 and all(REPO_PART_RE.fullmatch(p) for p in parts)
          and len(parts[1]) <= 96 and "--" not in repo_id and ".." not in repo_id)
    if not ok:
        raise ConfigError(
            f"Hub repo id {repo_id!r} is malformed: it must be 'owner/name' (letters, digits, "
            "'-', '_', '.'; no '--' or '..'): set CROWDPREF_HF_REPO_ID or publish.repo_id to "
            "e.g. my-org/social-reasoning-rlhf"
        )
    return repo_id


def hub_dataset_url(repo_id: str, endpoint: str | None = None) -> str:
    return f"{(endpoint or DEFAULT_ENDPOINT).rstrip('/')}/datasets/{repo_id}"


def _offline_now() -> bool:
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return bool(constants.HF_HUB_OFFLINE) or env.strip().upper() in {"1", "ON", "YES", "TRUE"}


def _clean(text: str, token: str) -> str:
    text = " ".join(str(text).split())
    if token:
        text = text.replace(token, "***")
    return re.sub(r"hf_[A-Za-z0-9]{8,}", "hf_***", text)[:160]


HUB_KEEP = frozenset({".gitattributes"})
"""Remote files a push never deletes: the Hub creates ``.gitattributes`` with a repo (its LFS
rules) and needs it; a release that has its own replaces it."""


def release_files(folder: Path) -> dict[str, Path]:
    """Path in the repo (POSIX) -> local file, for every file of a built release."""
    return {p.relative_to(folder).as_posix(): p for p in sorted(Path(folder).rglob("*"))
            if p.is_file()}


def _mirror(api: Any, repo_id: str, folder: Path) -> Any:
    """One commit that makes the repo's main branch equal to ``folder`` (see push_release)."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    from huggingface_hub.errors import RevisionNotFoundError

    local = release_files(folder)
    head = getattr(api.repo_info(repo_id, repo_type="dataset"), "sha", None)
    try:  # the listing is of the head commit, and the commit below is made on top of it only
        remote = set(api.list_repo_files(repo_id, repo_type="dataset", revision=head)) if head else set()
    except RevisionNotFoundError:  # a repo without any commit yet
        remote = set()
    stale = sorted(p for p in remote - set(local) if p not in HUB_KEEP)
    operations: list[Any] = [CommitOperationAdd(path_in_repo=path, path_or_fileobj=str(file))
                              for path, file in local.items()]
    operations += [CommitOperationDelete(path_in_repo=path) for path in stale]
    summary = "Publish dataset release (crowdpref)"
    if stale:
        summary += f": {len(stale)} file(s) no longer in the release deleted"
    return api.create_commit(repo_id=repo_id, repo_type="dataset", operations=operations,
                             commit_message=summary, parent_commit=head)


def push_release(
    folder: Path,
    repo_id: str | None,
    token: str | None,
    private: bool = True,
    endpoint: str | None = None,
) -> PushResult:
    """Make the Hub dataset repo equal to a built release, in one commit:
    ``create_repo(exist_ok=True)``, ``list_repo_files``, then one ``create_commit`` that adds
    every file of the release and deletes every remote file the release does not have (a
    configuration dropped from the release disappears from the Hub), except the files the Hub
    itself keeps a repo working with (:data:`HUB_KEEP`, e.g. ``.gitattributes``) unless the
    release has its own. Unchanged files are not uploaded again and nothing at all is committed
    when nothing changed, so pushing again (or a retry) is safe. The commit names the head it
    was computed from (``parent_commit``): when another commit reached the repo in between (a
    second push, an edit on the Hub), the Hub refuses it (412) and the push fails, retryable,
    instead of committing deletions computed from a listing that is no longer true.

    Without ``repo_id`` or ``token`` nothing is pushed and the result says where the folder is.
    Every failure is a one-line :class:`PushError` naming the repo, the endpoint and the setting
    to fix; it never contains the token."""
    folder = Path(folder)
    if folder.name == RELEASE_DIR and not folder.exists():
        folder = release_folder(folder.parent)  # a swap killed between its renames
    if not (folder / "README.md").is_file():
        raise CrowdprefError(f"{folder}: not a built release (no README.md): build it first")
    if not repo_id or not token:
        missing = " and ".join(n for n, v in (("CROWDPREF_HF_REPO_ID (or publish.repo_id)", repo_id),
                                              ("HF_TOKEN (or CROWDPREF_HF_TOKEN)", token)) if not v)
        return PushResult(folder=folder, pushed=False, repo_id=repo_id or None,
                          message=f"not pushed ({missing} not set): the release is in {folder}")
    validate_repo_id(repo_id)
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError, HfUriError, OfflineModeIsEnabled

    shown_endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
    where = f"{repo_id} at {shown_endpoint}"
    if _offline_now():
        raise PushError(f"cannot push {where}: offline mode is on (HF_HUB_OFFLINE is set): unset "
                        f"HF_HUB_OFFLINE to push, or unset CROWDPREF_HF_REPO_ID to keep the release "
                        f"in {folder}")
    api = HfApi(endpoint=shown_endpoint, token=token)
    try:
        try:
            repo_url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        except HfUriError:
            # huggingface_hub 2.4: after a 401/403 on create, create_repo(exist_ok=True) finds the
            # repo (repo_info succeeded) but cannot build its URL for a non-huggingface.co
            # endpoint. The repo exists; the upload below reports what the token may do.
            repo_url = None
        info = _mirror(api, repo_id, folder)
    except OfflineModeIsEnabled:
        raise PushError(f"cannot push {where}: offline mode is on (HF_HUB_OFFLINE is set): unset "
                        "HF_HUB_OFFLINE to push, or unset CROWDPREF_HF_REPO_ID") from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        detail = _clean(getattr(exc, "server_message", None) or str(exc).splitlines()[0], token)
        if status == 401:
            msg = (f"the Hub refused the token for {where} (401 unauthorized): set HF_TOKEN "
                   "(or CROWDPREF_HF_TOKEN) to a valid write token")
            raise PushError(msg) from None
        if status == 403:
            msg = (f"the token may not write to {where} (403 forbidden: {detail}): use a token "
                   "with write access (HF_TOKEN / CROWDPREF_HF_TOKEN) or a repo you own "
                   "(CROWDPREF_HF_REPO_ID)")
            raise PushError(msg) from None
        if status == 404:
            msg = (f"{where}: not found (404): check CROWDPREF_HF_REPO_ID and "
                   "CROWDPREF_HF_ENDPOINT, and that the token (HF_TOKEN) can see the owner")
            raise PushError(msg) from None
        if status == 412:
            raise PushError(f"another commit reached {where} while this push was computing its "
                            "changes (412 precondition failed): push again; the next push lists "
                            "the repo afresh", retryable=True) from None
        retry = status is None or status >= 500 or status == 429
        raise PushError(f"pushing {where} failed (HTTP {status}: {detail}): "
                        + ("try again later" if retry else "check CROWDPREF_HF_REPO_ID / HF_TOKEN"),
                        retryable=retry) from None
    except (OSError, ConnectionError) as exc:  # httpx transport errors, refused connections
        raise PushError(f"cannot reach the Hub for {where} ({type(exc).__name__}: "
                        f"{_clean(str(exc), token)}): check the network and "
                        "CROWDPREF_HF_ENDPOINT", retryable=True) from None
    except Exception as exc:  # noqa: BLE001 - e.g. httpx errors that are not OSError
        if type(exc).__module__.startswith(("httpx", "httpcore")):
            raise PushError(f"cannot reach the Hub for {where} ({type(exc).__name__}: "
                            f"{_clean(str(exc), token)}): check the network and "
                            "CROWDPREF_HF_ENDPOINT", retryable=True) from None
        raise
    url = str(repo_url) if repo_url else hub_dataset_url(repo_id, shown_endpoint)
    return PushResult(folder=folder, pushed=True, repo_id=repo_id, url=url,
                      commit_url=getattr(info, "commit_url", None), private=private,
                      message=f"pushed {folder} to {url}")
