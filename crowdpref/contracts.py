"""The data contracts between stages: the columns of every Parquet file in a run folder.

Each stage reads the files of the stages before it and writes its own; ids are stable hashes
(:func:`crowdpref.ids.stable_id`), so a rerun produces the same ids and never duplicates.

Orientation of a pair: every pair has a FIXED orientation (``first_response_id`` <
``second_response_id``, by id). What participants saw as A/B is recorded separately
(``response_a_id``/``response_b_id``) and ``swapped`` is True when A is the second response.
A rating r on the 1..K scale (1 = strong preference for A, K = strong for B) becomes, in the
fixed orientation, ``r`` when not swapped and ``K + 1 - r`` when swapped; a mean below the
midpoint (K + 1) / 2 means the FIRST response is preferred. The display order is chosen PER
RATING (counterbalanced across a pair's raters), so ``swapped`` of ratings.parquet is the one that
counts; ``swapped`` of pairs.parquet is only the pair's default order.

Provenance: every answer and rating carries the ``source`` of its participant (:data:`SOURCES`).
"""

from __future__ import annotations

SOURCES = ("simulated", "prolific", "invite")
"""Where a participant came from (the ``source`` column of responses and ratings):
"simulated" - crowdpref's simulated crowd, a program, not a person; "prolific" - recruited on
Prolific; "invite" - a person who joined through the study team's invite link (a pilot, an own
panel). Nothing else is allowed: the study store refuses any other at a claim
(:meth:`crowdpref.store.Store.claim`; its type is :data:`crowdpref.store.Source`)."""

QUESTIONS = ["question_id", "question", "category", "source", "metadata"]
"""questions.parquet - question_id "q_<16 hex>" (hash of the normalised text), source
"bank" | "file:<name>" | "llm:<model>", metadata a JSON string."""

RESPONSES = [
    "response_id", "question_id", "category", "participant_key", "source", "text", "quality",
    "submitted_at",
]
"""responses.parquet (study 1) - response_id "r_<16 hex>"; participant_key pseudonymous "p_<12 hex>";
source the writer's provenance, one of :data:`SOURCES` (never missing); quality 1..5 (the
writer's rating of the question); submitted_at UTC timestamp."""

PAIRS = [
    "pair_id", "question_id", "category",
    "first_response_id", "second_response_id",
    "response_a_id", "response_b_id", "swapped",
]
"""pairs.parquet (study 2) - pair_id "pr_<16 hex>" (hash of the two response ids in fixed order);
swapped: bool, the pair's seeded DEFAULT order (True: A is the second response); what each rater
saw is recorded per rating in ratings.parquet."""

RATINGS = [
    "rating_id", "pair_id", "question_id", "response_a_id", "response_b_id", "swapped",
    "rater_key", "source", "rating", "submitted_at",
]
"""ratings.parquet (study 2) - swapped/response_a_id/response_b_id: the order THIS rater saw (chosen
per rating; a pair's R raters see balanced orders, e.g. 2 and 1 for R = 3); rater_key
pseudonymous like participant_key; source the rater's provenance, one of :data:`SOURCES` (never
missing); rating 1..K as given on the displayed A/B scale (not un-swapped)."""

SCREENING_BASE = ["response_id", "model", "flagged", "flagged_labels"]
"""screening.parquet - plus one float column per label score (e.g. toxicity, insult ...);
flagged_labels a comma-separated string of the labels at or above their threshold."""

PREFERENCES = [
    "pair_id", "question_id", "category", "prompt", "chosen", "rejected",
    "chosen_response_id", "rejected_response_id", "mean_rating", "margin", "n_ratings",
    "agreement", "rating_spread", "chosen_flagged", "rejected_flagged",
    "p_chosen", "mean_rating_low", "mean_rating_high",
]
"""preferences.parquet - mean_rating in the CHOSEN-first orientation (always below the midpoint):
the statistic that decided the row, the plain mean of the pair's ratings under
``aggregation.method: mean``, the reliability-weighted, position-bias-corrected mean under
``reliability_weighted`` (:mod:`crowdpref.aggregation`); margin = |mean_rating - midpoint| /
(midpoint - 1), in (0, 1]; agreement = share of raters on the majority side; rating_spread =
standard deviation of the un-swapped ratings; p_chosen = bootstrap support of the decision: the
share of resamples of the pair's own ratings (with replacement, ``aggregation.bootstrap_samples``,
seeded) whose statistic falls on the chosen side (a tie counts half): 1 when every rating is on
the chosen side, near 0.5 for a pair the ratings barely decide - a support, not a calibrated
probability with 3 ratings; mean_rating_low / mean_rating_high = the
bootstrap percentile interval of mean_rating at ``aggregation.interval_level`` (0.9 by default),
widened where needed to contain mean_rating."""

PARTICIPANTS = [
    "participant_key", "study", "source", "status", "items_assigned", "items_submitted",
    "checks_answered", "checks_passed", "checks_verdict", "median_seconds_per_item", "too_fast",
    "onboarding_attempts", "onboarding_score", "onboarding_seconds",
]
"""participants.parquet (written by the study exports, one row per participant per study) -
participant_key pseudonymous like responses/ratings ("p_<12 hex>"); study "study1" | "study2";
source one of :data:`SOURCES`; status the store's final status ("complete", "released" - they
returned, timed out or went quiet -, "excluded" - failed the checks with ``on_fail: exclude`` -,
"active"); items_assigned / items_submitted count study items (never the checks);
checks_answered / checks_passed count the quality checks in their batch (instructed-response
items in study 1, gold and repeated pairs in study 2); checks_verdict "passed" | "failed" |
"none" (no checks configured) | "unanswered" (they left before answering them);
median_seconds_per_item the median time between their consecutive submissions (the first
counted from their claim; NaN when nothing was submitted); too_fast True when it is below the
study's ``too_fast_seconds``. Onboarding (a study with an ``onboarding:`` section): one row too
for each person its quiz screened out (status "screened_out", nothing assigned);
onboarding_attempts their quiz attempts (0: no quiz, or no onboarding), onboarding_score the best
score of those attempts (NaN without one), onboarding_seconds their time in onboarding (NaN
without onboarding)."""

RATERS = ["rater_key", "n_ratings", "reliability"]
"""raters.parquet (written by aggregation) - one row per study-2 rater: rater_key as in
ratings.parquet; n_ratings counted ratings; reliability in [0, 1], the fitted rater reliability
(see :mod:`crowdpref.aggregation.reliability`)."""

ANSWER_FLAGS = [
    "response_id", "question_id", "participant_key", "content_words", "empty_of_content",
    "copied", "copy_of", "near_duplicate_of", "near_duplicate_score", "flagged",
]
"""answer_flags.parquet (written by the study-1 export task, one row per response of
responses.parquet; not published) - content_words the words that can carry an answer;
empty_of_content True when there are none ("idk", "...", "n/a"); copied True when another
answer has the same normalised text (another participant's, or the same participant's to
another question) and copy_of those response ids, comma-separated (null otherwise);
near_duplicate_of the most similar other participant's answer to the same question when
near-identical but not the same (null otherwise) and near_duplicate_score its similarity 0-100
(NaN otherwise); flagged any of the three. Rules in :mod:`crowdpref.work_quality`."""
