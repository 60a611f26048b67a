"""The aggregation stage: :func:`aggregate` turns the ratings of study 2 into one chosen/rejected
row per answer pair (contracts.PREFERENCES) and the study statistics.

By default a pair is decided by the mean of its un-swapped ratings
(:func:`crowdpref.aggregation.pairs.summarise_pairs`). Under
``aggregation.method: reliability_weighted`` the decision is instead the
``weighted_mean`` of pair_stats: every un-swapped rating minus its rater's fitted position bias,
weighted by its rater's ``slope / noise variance`` (:mod:`crowdpref.aggregation.reliability`,
fitted over all ratings of study 2), clipped to 1..K; ``tie``, chosen/rejected, ``mean_rating``
(chosen-first) and ``margin`` then come from it, while ``mean``, ``rating_spread`` and
``agreement`` stay the plain statistics of the ratings. With the default ``mean`` the rater model
is still fitted (when every rating has a rater_key) for ``raters.parquet`` and ``weighted_mean``,
but decides nothing. Each preference row also carries ``p_chosen`` and the
``mean_rating_low``/``mean_rating_high`` interval: a seeded bootstrap of the deciding statistic
over the pair's own ratings (:func:`crowdpref.uncertainty.bootstrap_pairs`).

Under ``aggregation.method: gold_anchored`` with gold-pair outcomes (``aggregate(gold=...)``)
the weights are anchored on gold (:mod:`crowdpref.aggregation.reliability`, "Gold anchor");
without them that method decides by the plain mean. Agreement-only weighting
(``reliability_weighted``) was tested in simulation only (``benchmarks/aggregation_quality.py``)
and is known to do worse than the plain mean when a large share of raters share a bias unrelated
to quality (e.g. answer length); the gold anchor held up there in simulation as long as the gold
pairs' good answer was not also the longer one.

Ties are reported and left out of the preference rows; pairs with fewer ratings than
``ratings_per_pair`` are reported and kept or dropped (``aggregation.incomplete_pairs``); pairs
with no rating are always left out. Bad input (ratings of unknown pairs, ratings outside 1..K,
empty answer texts, answers without screening scores, a ``source`` column missing or a value
outside :data:`crowdpref.contracts.SOURCES`, ...) raises a one-line
:class:`~crowdpref.errors.CrowdprefError` (:mod:`crowdpref.aggregation.inputs`).

Study-level statistics (:class:`~crowdpref.aggregation.result.AggregationStats`): Krippendorff's
alpha (ordinal) over the un-swapped ratings, the position bias (raw vs un-swapped), the length
bias (:mod:`crowdpref.aggregation.bias`), the order
balance (:func:`~crowdpref.aggregation.pairs.order_balance`: how many pairs were shown to their
raters in balanced A/B orders, so that position bias cancels inside the pair), the provenance of
answers and ratings (their ``source``, :data:`crowdpref.contracts.SOURCES`), per-category counts,
optionally Bradley-Terry strengths per answer (``choix``), and - for a simulated crowd -
:func:`~crowdpref.aggregation.truth.agreement_with_truth`.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from crowdpref.aggregation.agreement import krippendorff_alpha
from crowdpref.aggregation.bias import LengthBias, length_bias
from crowdpref.aggregation.bradley_terry import bradley_terry, bradley_terry_extremes
from crowdpref.aggregation.inputs import (
    _check_inputs,
    _Checked,
    _examples,
    _require_columns,
    source_counts,
)
from crowdpref.aggregation.pairs import (
    _codes,
    _pick,
    _summarise_codes,
    _take,
    order_balance,
    position_bias,
    unswap,
)
from crowdpref.aggregation.reliability import ReliabilityFit, fit_raters
from crowdpref.aggregation.result import AggregationResult, AggregationStats, RaterSummary
from crowdpref.config import AggregationConfig
from crowdpref.contracts import PREFERENCES
from crowdpref.errors import CrowdprefError
from crowdpref.uncertainty import TIE_TOLERANCE, bootstrap_pairs

__all__ = ["WEIGHTED_METHODS", "aggregate"]

WEIGHTED_METHODS = ("reliability_weighted", "gold_anchored")
"""``aggregation.method`` values decided by the rater model's weighted mean."""


def aggregate(
    ratings: pd.DataFrame,
    pairs: pd.DataFrame,
    responses: pd.DataFrame,
    questions: pd.DataFrame,
    *,
    scale_points: int = 8,
    ratings_per_pair: int = 3,
    config: AggregationConfig | None = None,
    screening: pd.DataFrame | None = None,
    excluded_response_ids: Collection[str] = (),
    seed: int = 0,
    withdrawn_participants: int = 0,
    gold: pd.DataFrame | None = None,
) -> AggregationResult:
    """Turn ratings into preference rows (contracts.PREFERENCES) and study statistics.

    ``screening`` (response_id, flagged) marks chosen_flagged/rejected_flagged; when given,
    every answer in a pair must have a score. Pairs with an answer in ``excluded_response_ids``
    (screening drop policy) are left out with their ratings. ``seed`` seeds the bootstraps
    (the same inputs and seed give the same rows, whatever the order of the ratings).
    ``withdrawn_participants``: how many withdrawals the inputs already leave out (recorded in
    the statistics; :func:`crowdpref.withdrawals.leave_out_all` removes their rows). Raises
    :class:`CrowdprefError` (one line) on bad input, including ratings without a rater_key
    under ``aggregation.method: reliability_weighted`` or ``gold_anchored``.

    ``gold``: study 2's gold-pair outcomes, one row per answered gold pair (``rater_key`` as in
    ratings.parquet, ``passed``). Under ``aggregation.method: gold_anchored`` they anchor each
    rater's slope and sign (:mod:`crowdpref.aggregation.reliability`, "Gold anchor"); without
    them (no gold pairs, or none by a rater of these ratings) that method decides by the PLAIN
    MEAN - weighting by agreement alone can make the data worse than the mean (issue 21) - and
    ``decided_by`` and an anomaly line say so. Ignored under the other methods.
    """
    config = config or AggregationConfig()
    k = scale_points
    midpoint = (k + 1) / 2
    anchored = config.method == "gold_anchored"
    has_gold = gold is not None and len(gold) > 0
    weighted = config.method == "reliability_weighted" or (anchored and has_gold)
    pairs = pairs.reset_index(drop=True)
    ratings = ratings.reset_index(drop=True)
    responses = responses.reset_index(drop=True)
    questions = questions.reset_index(drop=True)
    checked = _check_inputs(ratings, pairs, responses, questions, k)
    fit, rater_codes, rater_note = _fit_raters(ratings, k, weighted, gold if anchored else None)
    if anchored and fit is not None and not fit.anchored:
        weighted = False  # gold given, but no rater of these ratings answered any
    decided_by = ("mean" if not weighted else
                  "gold_anchored" if fit is not None and fit.anchored else "reliability_weighted")
    used = _used_ratings(ratings, responses, checked, excluded_response_ids, k)
    answer_flagged = _answer_flags(responses, checked, used.excluded_pair, screening)
    stats, values, weights = _decide_pairs(used, pairs, fit, rater_codes, k, weighted)
    status = _set_status(stats, used.excluded_pair, ratings_per_pair, config)

    rows = np.flatnonzero(status.kept)
    decision = stats["weighted_mean" if weighted else "mean"].to_numpy()
    first_chosen = (decision < midpoint)[rows]
    p_chosen, interval_low, interval_high = _bootstrap_rows(
        rows, first_chosen, used, values, weights, ratings["rating_id"], len(pairs), k, config, seed)
    preferences = _preference_frame(stats, rows, first_chosen, checked, responses, questions,
                                    answer_flagged, (p_chosen, interval_low, interval_high))

    u = used.unswapped
    result_stats = AggregationStats(
        scale_points=k,
        midpoint=midpoint,
        ratings_per_pair=ratings_per_pair,
        incomplete_policy=config.incomplete_pairs,
        pairs=len(pairs),
        ratings=int(len(u)),
        rated_pairs=int(status.rated.sum()),
        unrated_pairs=int((~status.rated & ~used.excluded_pair).sum()),
        excluded_pairs=int(used.excluded_pair.sum()),
        incomplete_pairs=int(status.incomplete.sum()),
        incomplete_dropped=int(status.dropped.sum()),
        over_rated=int(status.over.sum()),
        ties=int(status.tie.sum()),
        kept=int(status.kept.sum()),
        duplicate_rater_ratings=_duplicate_rater_ratings(ratings, used),
        alpha=krippendorff_alpha(used.codes, u, len(pairs), k),
        mean_agreement=float(preferences["agreement"].mean()) if len(preferences) else math.nan,
        mean_margin=float(preferences["margin"].mean()) if len(preferences) else math.nan,
        mean_spread=float(preferences["rating_spread"].mean()) if len(preferences) else math.nan,
        chosen_flagged=int(preferences["chosen_flagged"].sum()),
        rejected_flagged=int(preferences["rejected_flagged"].sum()),
        position_bias=position_bias(used.raw, u, used.swapped, k),
        length_bias=_length_bias(stats, status, checked, responses, decision, midpoint, config,
                                 seed),
        order_balance=order_balance(used.codes, used.swapped, len(pairs), measured=status.rated),
        answer_sources=source_counts(responses["source"]),
        rating_sources=source_counts(ratings["source"][used.use]),
        per_category=_per_category(stats, status, used.excluded_pair, preferences),
        method=config.method,
        decided_by=decided_by,
        bootstrap_samples=config.bootstrap_samples,
        interval_level=config.interval_level,
        mean_p_chosen=float(np.mean(p_chosen)) if len(rows) else math.nan,
        median_interval_width=(float(np.median(interval_high - interval_low)) if len(rows)
                               else math.nan),
        withdrawn_participants=withdrawn_participants,
    )
    raters = None
    if fit is not None:
        raters = fit.frame()
        result_stats.reliability = _rater_summary(fit, raters, stats, status.rated, midpoint)

    anomalies = _anomalies(stats, result_stats, config)
    if rater_note:
        anomalies.append(rater_note)
    if fit is not None and not fit.converged:
        anomalies.append(f"the rater reliability fit stopped after {fit.iterations} rounds "
                         "without converging: reliabilities are approximate")
    bt = extremes = None
    if config.bradley_terry:
        bt, problems = bradley_terry(stats, used.codes, u, k, samples=config.bootstrap_samples,
                                     level=config.interval_level, seed=seed)
        anomalies += problems
        extremes = bradley_terry_extremes(bt)
        result_stats.bradley_terry_questions = int(extremes["question_id"].nunique())
    return AggregationResult(preferences=preferences, pair_stats=stats, stats=result_stats,
                             anomalies=anomalies, bradley_terry=bt, bradley_terry_extremes=extremes,
                             raters=raters)


# --- the steps of aggregate() --------------------------------------------------------------------
@dataclass
class _Used:
    """The ratings that count: those of pairs without an answer excluded by screening."""

    excluded_pair: np.ndarray  # per pair: holds an answer excluded by the screening drop policy
    use: np.ndarray  # per rating (all of ratings.parquet): counts
    codes: np.ndarray  # per used rating: row in pairs
    raw: np.ndarray  # per used rating: as displayed (int64)
    swapped: np.ndarray  # per used rating
    unswapped: np.ndarray  # per used rating: in the pair's fixed orientation


def _used_ratings(ratings: pd.DataFrame, responses: pd.DataFrame, checked: _Checked,
                  excluded_response_ids: Collection[str], scale_points: int) -> _Used:
    """Pairs holding an answer excluded by the screening drop policy are left out, their ratings
    too; the others' ratings are un-swapped."""
    excluded = pd.Series(sorted(set(excluded_response_ids)), dtype=responses["response_id"].dtype)
    excluded_answer = _codes(responses["response_id"], excluded) >= 0
    excluded_pair = excluded_answer[checked.first] | excluded_answer[checked.second]
    use = ~excluded_pair[checked.codes]
    raw = ratings["rating"].to_numpy()[use].astype(np.int64)
    swapped = ratings["swapped"].to_numpy(dtype=bool)[use]
    return _Used(excluded_pair=excluded_pair, use=use, codes=checked.codes[use], raw=raw,
                 swapped=swapped, unswapped=unswap(raw, swapped, scale_points))


def _answer_flags(responses: pd.DataFrame, checked: _Checked, excluded_pair: np.ndarray,
                  screening: pd.DataFrame | None) -> np.ndarray:
    """Per answer: flagged by screening. Every answer of a pair that stays needs a text (and a
    screening score, when screening is given); raises otherwise."""
    in_use = np.zeros(len(responses), dtype=bool)
    in_use[checked.first[~excluded_pair]] = True
    in_use[checked.second[~excluded_pair]] = True
    blank = responses["text"].fillna("").astype(str).str.strip().eq("").to_numpy(dtype=bool)
    empty = responses["response_id"].to_numpy()[blank & in_use]
    if len(empty):
        raise CrowdprefError(f"responses.parquet has {len(empty)} empty answer texts in pairs "
                             f"(e.g. {_examples(empty)}): fix or re-collect those answers")
    answer_flagged = np.zeros(len(responses), dtype=bool)
    if screening is not None:
        _require_columns(screening, ["response_id", "flagged"], "screening.parquet",
                         "run screen-responses again")
        at = _codes(responses["response_id"], screening["response_id"])
        flags = screening["flagged"].to_numpy(dtype=object)
        scored = at >= 0
        scored[scored] = ~pd.isna(flags[at[scored]])
        missing = responses["response_id"].to_numpy()[in_use & ~scored]
        if len(missing):
            raise CrowdprefError(f"screening.parquet has no scores for {len(missing)} answers in "
                                 f"pairs (e.g. {_examples(missing)}): run screen-responses again")
        answer_flagged[scored] = flags[at[scored]] == True  # noqa: E712 - numpy elementwise
    return answer_flagged


def _decide_pairs(used: _Used, pairs: pd.DataFrame, fit: ReliabilityFit | None,
                  rater_codes: np.ndarray | None, scale_points: int,
                  weighted: bool) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Every pair's statistics (PAIR_STATS plus ``weighted_mean``, NaN without a rater fit),
    decided by the plain mean or, under ``reliability_weighted``, by the weighted mean; and per
    used rating its value and weight in the deciding statistic (for the bootstrap)."""
    k = scale_points
    u = used.unswapped
    stats = _summarise_codes(used.codes, u, used.swapped, pairs, k)
    values, weights = u.astype(float), np.ones(len(u))
    weighted_mean = np.full(len(pairs), np.nan)
    if fit is not None and rater_codes is not None:
        used_raters = rater_codes[used.use]
        signed = fit.weights(used_raters)
        # a rater flipped by the gold anchor (negative weight) counts mirrored about the midpoint
        rating_weights = np.abs(signed)
        midpoint = (k + 1) / 2
        corrected = midpoint + np.sign(signed) * (fit.corrected(u, used.swapped, used_raters) - midpoint)
        with np.errstate(invalid="ignore", divide="ignore"):
            weighted_mean = np.clip(
                np.bincount(used.codes, weights=rating_weights * corrected, minlength=len(pairs))
                / np.bincount(used.codes, weights=rating_weights, minlength=len(pairs)), 1, k)
        if weighted:
            values, weights = corrected, rating_weights
    stats["weighted_mean"] = weighted_mean
    if weighted:
        _decide_by(stats, weighted_mean, pairs, k)
    return stats, values, weights


@dataclass
class _Status:
    """Per pair, what became of it (all False for an excluded pair)."""

    rated: np.ndarray  # has a used rating
    incomplete: np.ndarray  # rated, fewer ratings than ratings_per_pair
    dropped: np.ndarray  # incomplete and dropped by aggregation.incomplete_pairs
    over: np.ndarray  # rated, more ratings than ratings_per_pair
    tie: np.ndarray  # rated, decided on the midpoint
    kept: np.ndarray  # a preference row


def _set_status(stats: pd.DataFrame, excluded_pair: np.ndarray, ratings_per_pair: int,
                config: AggregationConfig) -> _Status:
    """Sort the pairs into kept, tie, incomplete_dropped, unrated and excluded; write the
    ``status``, ``incomplete`` and ``excluded`` columns of ``stats``."""
    n = stats["n_ratings"].to_numpy()
    rated = (n > 0) & ~excluded_pair
    incomplete = rated & (n < ratings_per_pair)
    dropped = incomplete & (config.incomplete_pairs == "drop")
    tie = stats["tie"].to_numpy() & rated
    kept = rated & ~tie & ~dropped
    stats["status"] = np.select(
        [excluded_pair, ~rated, dropped, tie],
        ["excluded", "unrated", "incomplete_dropped", "tie"], default="kept")
    stats["incomplete"] = incomplete
    stats["excluded"] = excluded_pair
    return _Status(rated=rated, incomplete=incomplete, dropped=dropped,
                   over=rated & (n > ratings_per_pair), tie=tie, kept=kept)


def _bootstrap_rows(rows: np.ndarray, first_chosen: np.ndarray, used: _Used, values: np.ndarray,
                    weights: np.ndarray, rating_ids: pd.Series, n_pairs: int, scale_points: int,
                    config: AggregationConfig,
                    seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``p_chosen`` and the mean_rating interval of every preference row (pair ``rows[i]``): the
    seeded bootstrap over the row's own ratings, taken in rating_id order so that the result does
    not depend on the order of the ratings."""
    row_of_pair = np.full(n_pairs, -1, dtype=np.int64)
    row_of_pair[rows] = np.arange(len(rows))
    row_of_rating = row_of_pair[used.codes]
    in_row = row_of_rating >= 0
    by_id = np.argsort(rating_ids.to_numpy(dtype=str)[used.use][in_row], kind="stable")
    return bootstrap_pairs(
        row_of_rating[in_row][by_id], values[in_row][by_id], weights[in_row][by_id], len(rows),
        first_chosen, scale_points, samples=config.bootstrap_samples, level=config.interval_level,
        seed=seed)


def _preference_frame(stats: pd.DataFrame, rows: np.ndarray, first_chosen: np.ndarray,
                      checked: _Checked, responses: pd.DataFrame, questions: pd.DataFrame,
                      answer_flagged: np.ndarray,
                      bootstrap: tuple[np.ndarray, np.ndarray, np.ndarray]) -> pd.DataFrame:
    """The preference rows (contracts.PREFERENCES) of pairs ``rows``: the prompt, the chosen and
    rejected texts, the pair's statistics and the ``bootstrap`` (:func:`_bootstrap_rows`)."""
    p_chosen, interval_low, interval_high = bootstrap
    chosen_at = np.where(first_chosen, checked.first[rows], checked.second[rows])
    rejected_at = np.where(first_chosen, checked.second[rows], checked.first[rows])
    kept_stats = stats.take(rows)
    return pd.DataFrame({
        "pair_id": kept_stats["pair_id"].array,
        "question_id": kept_stats["question_id"].array,
        "category": kept_stats["category"].array,
        "prompt": _take(questions["question"], checked.question[rows]).array,
        "chosen": _take(responses["text"], chosen_at).array,
        "rejected": _take(responses["text"], rejected_at).array,
        "chosen_response_id": kept_stats["chosen_response_id"].array,
        "rejected_response_id": kept_stats["rejected_response_id"].array,
        "mean_rating": kept_stats["mean_rating"].to_numpy(dtype=float),
        "margin": kept_stats["margin"].to_numpy(dtype=float),
        "n_ratings": kept_stats["n_ratings"].to_numpy(dtype=np.int64),
        "agreement": kept_stats["agreement"].to_numpy(dtype=float),
        "rating_spread": kept_stats["rating_spread"].to_numpy(dtype=float),
        "chosen_flagged": answer_flagged[chosen_at],
        "rejected_flagged": answer_flagged[rejected_at],
        "p_chosen": p_chosen,
        "mean_rating_low": interval_low,
        "mean_rating_high": interval_high,
    }, copy=False)[PREFERENCES]


def _length_bias(stats: pd.DataFrame, status: _Status, checked: _Checked,
                 responses: pd.DataFrame, decision: np.ndarray, midpoint: float,
                 config: AggregationConfig, seed: int) -> LengthBias:
    """The crowd's length bias (:func:`crowdpref.aggregation.bias.length_bias`): the choice of
    every preference row, and the plain mean of every rated pair, against the answers' lengths."""
    lengths = responses["text"].fillna("").astype(str).str.len().to_numpy(dtype=float)
    mean = np.where(status.rated, stats["mean"].to_numpy(dtype=float), np.nan)
    return length_bias(lengths[checked.first], lengths[checked.second], mean, status.kept,
                       decision < midpoint, midpoint, level=config.interval_level, seed=seed)


def _duplicate_rater_ratings(ratings: pd.DataFrame, used: _Used) -> int:
    """Used ratings by a rater who already rated the same pair (0 without rater keys)."""
    if "rater_key" not in ratings.columns or not len(used.codes):
        return 0
    rater = pd.factorize(ratings["rater_key"])[0][used.use] + 1  # 0: no rater key
    pair_rater = used.codes * (int(rater.max()) + 1) + rater
    return int(pd.Series(pair_rater).duplicated().sum())


def _per_category(stats: pd.DataFrame, status: _Status, excluded_pair: np.ndarray,
                  preferences: pd.DataFrame) -> list[dict[str, Any]]:
    """Pair counts and the preference rows' mean agreement, per category."""
    per_category = (
        pd.DataFrame({"category": stats["category"].to_numpy(), "pairs": 1,
                      "rated": status.rated.astype(int), "kept": status.kept.astype(int),
                      "ties": status.tie.astype(int), "incomplete": status.incomplete.astype(int),
                      "excluded": excluded_pair.astype(int)})
        .groupby("category", sort=True).sum().reset_index()
    )
    ag_by_cat = preferences.groupby("category")["agreement"].mean()
    per_category["mean_agreement"] = per_category["category"].map(ag_by_cat).astype(float)
    return per_category.to_dict(orient="records")


def _rater_summary(fit: ReliabilityFit, raters: pd.DataFrame, stats: pd.DataFrame,
                   rated: np.ndarray, midpoint: float) -> RaterSummary:
    """The rater fit in a few numbers; ``decisions_changed`` compares the sides of the plain and
    the weighted mean over the rated pairs."""
    reliability = raters["reliability"].to_numpy()
    plain_side = _side(stats["mean"].to_numpy(), midpoint)
    weighted_side = _side(stats["weighted_mean"].to_numpy(), midpoint)
    return RaterSummary(
        raters=len(raters),
        median_reliability=float(np.median(reliability)) if len(raters) else math.nan,
        below_half=int((reliability < 0.5).sum()),
        position_bias=fit.position_bias,
        iterations=fit.iterations,
        converged=fit.converged,
        decisions_changed=int((rated & (plain_side != weighted_side)).sum()),
        weighting="gold" if fit.anchored else "agreement",
        gold_raters=0 if fit.gold_answered is None else int((fit.gold_answered > 0).sum()),
        flipped=int((fit.slope < 0).sum()),
    )


def _fit_raters(ratings: pd.DataFrame, scale_points: int, weighted: bool,
                gold: pd.DataFrame | None = None,
                ) -> tuple[ReliabilityFit | None, np.ndarray | None, str | None]:
    """The rater reliability fit over ALL ratings of study 2 (excluded pairs' too: they say as
    much about the rater), its rater code per rating, and a note when it is skipped. Under
    ``reliability_weighted`` missing rater keys are an error; under ``mean`` a note."""
    if not weighted:
        if "rater_key" not in ratings.columns:
            return None, None, "ratings.parquet has no rater_key column: no rater reliability fitted"
        keys = ratings["rater_key"]
        blank = keys.isna() | keys.astype(str).str.strip().eq("")
        if blank.any():
            return None, None, (f"{int(blank.sum())} ratings have no rater_key: no rater "
                                "reliability fitted (raters.parquet not written)")
    elif "rater_key" not in ratings.columns:
        raise CrowdprefError("ratings.parquet lacks columns ['rater_key']: aggregation.method "
                             "reliability_weighted/gold_anchored needs the rater of every rating "
                             "(re-export the ratings, or set aggregation.method: mean)")
    fit, rater_codes = fit_raters(ratings, scale_points, gold=gold)
    return fit, rater_codes, None


def _side(decision: np.ndarray, midpoint: float) -> np.ndarray:
    """-1 (first chosen), 0 (tie or unrated), +1 (second chosen) per pair."""
    d = np.nan_to_num(np.asarray(decision, dtype=float) - midpoint, nan=0.0)
    return np.where(np.abs(d) <= TIE_TOLERANCE, 0, np.sign(d)).astype(np.int64)


def _decide_by(stats: pd.DataFrame, decision: np.ndarray, pairs: pd.DataFrame,
               scale_points: int) -> None:
    """Re-decide every pair of ``stats`` by ``decision`` (per pair, fixed orientation): tie,
    chosen/rejected, mean_rating (chosen-first) and margin."""
    k1 = scale_points + 1
    midpoint = k1 / 2
    rated = stats["n_ratings"].to_numpy() > 0
    side = _side(decision, midpoint)
    tie = rated & (side == 0)
    first_chosen = rated & (side < 0)
    decided = rated & ~tie
    first, second = pairs["first_response_id"], pairs["second_response_id"]
    stats["tie"] = tie
    stats["chosen_response_id"] = _pick(first_chosen, decided, first, second).array
    stats["rejected_response_id"] = _pick(first_chosen, decided, second, first).array
    stats["mean_rating"] = np.where(first_chosen | tie, decision, k1 - decision)
    stats["margin"] = np.abs(decision - midpoint) / (midpoint - 1)


def _anomalies(stats: pd.DataFrame, s: AggregationStats, config: AggregationConfig) -> list[str]:
    out: list[str] = []
    ties = stats.loc[stats["status"] == "tie", "pair_id"]
    what = "mean rating" if s.decided_by == "mean" else "reliability-weighted mean rating"
    if s.method == "gold_anchored" and s.decided_by == "mean":
        out.append("aggregation.method is gold_anchored but no gold-pair outcomes of these raters "
                   "reached the aggregation: pairs were decided by the plain mean (weighting by "
                   "agreement alone is aggregation.method: reliability_weighted)")
    if len(ties):
        out.append(f"{len(ties)} pairs have a {what} exactly on the midpoint {s.midpoint:g} "
                   f"(e.g. {_examples(ties)}): reported as ties, left out of the preferences")
    inc = stats.loc[stats["incomplete"], "pair_id"]
    if len(inc):
        action = ("dropped (aggregation.incomplete_pairs: drop)" if config.incomplete_pairs == "drop"
                  else "kept with their n_ratings (aggregation.incomplete_pairs: report_and_keep)")
        out.append(f"{len(inc)} pairs have fewer than {s.ratings_per_pair} ratings "
                   f"(e.g. {_examples(inc)}): {action}")
    unrated = stats.loc[stats["status"] == "unrated", "pair_id"]
    if len(unrated):
        out.append(f"{len(unrated)} pairs have no rating (e.g. {_examples(unrated)}): left out")
    if s.excluded_pairs:
        out.append(f"{s.excluded_pairs} pairs contain an answer excluded by screening: left out")
    if s.over_rated:
        out.append(f"{s.over_rated} pairs have more than {s.ratings_per_pair} ratings: all used")
    unbalanced = stats.loc[(stats["status"] != "excluded") & (stats["n_ratings"] > 0)
                           & ~stats["order_balanced"], "pair_id"]
    if len(unbalanced):
        out.append(f"{len(unbalanced)} pairs were shown to their raters in unbalanced A/B orders "
                   f"(more than one rating more in one order; e.g. {_examples(unbalanced)}): "
                   "position bias does not cancel inside them, only across pairs")
    if s.duplicate_rater_ratings:
        out.append(f"{s.duplicate_rater_ratings} ratings come from a rater who already rated "
                   "the same pair: all used")
    return out

