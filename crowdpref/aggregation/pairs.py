"""Aggregation: the ratings of study 2 become one chosen/rejected row per answer pair.

Every rating is first turned to the pair's FIXED orientation (see :mod:`crowdpref.contracts`):
a rating ``r`` on the 1..K A/B scale stays ``r`` when the rater saw the first response as A and
becomes ``K + 1 - r`` when the pair was shown swapped. Then, per pair (all vectorised with
``numpy.bincount`` over integer pair codes, no Python loop per rating):

- ``mean``           mean of the un-swapped ratings; below the midpoint ``M = (K + 1) / 2`` the
                     FIRST response is chosen, above it the second; exactly ``M`` is a tie;
- ``n_ratings``      how many ratings the pair got;
- ``rating_spread``  population standard deviation (ddof=0) of the un-swapped ratings, so a
                     pair with one rating has spread 0;
- ``agreement``      share of raters on the majority side of the midpoint:
                     ``max(#ratings < M, #ratings > M) / n_ratings``;
- ``margin``         ``|mean - M| / (M - 1)``: 0 at a tie, 1 when every rater gave the extreme
                     point; in (0, 1] for every preference row;
- ``mean_rating``    the mean in the CHOSEN-first orientation (``mean`` when the first response
                     is chosen, ``K + 1 - mean`` otherwise), so always below ``M``;
- ``n_swapped``      how many of the pair's ratings were given on the swapped display;
- ``order_balanced`` ``|n_swapped - (n_ratings - n_swapped)| <= 1``: the raters saw the two
                     orders equally often (one apart for an odd count), so position bias
                     cancels inside the pair (vacuously True for an unrated pair).

Under ``aggregation.method: reliability_weighted`` the decision is instead the
``weighted_mean`` of pair_stats: every un-swapped rating minus its rater's fitted position bias,
weighted by its rater's ``slope / noise variance`` (:mod:`crowdpref.reliability`, fitted over all
ratings of study 2), clipped to 1..K; ``tie``, chosen/rejected, ``mean_rating`` (chosen-first)
and ``margin`` then come from it, while ``mean``, ``rating_spread`` and ``agreement`` stay the
plain statistics of the ratings. With the default ``mean`` the rater model is still fitted (when
every rating has a rater_key) for ``raters.parquet`` and ``weighted_mean``, but decides nothing.
Each preference row also carries ``p_chosen`` and the ``mean_rating_low``/``mean_rating_high``
interval: a seeded bootstrap of the deciding statistic over the pair's own ratings
(:func:`crowdpref.uncertainty.bootstrap_pairs`).

Ties are reported and left out of the preference rows; pairs with fewer ratings than
``ratings_per_pair`` are reported and kept or dropped (``aggregation.incomplete_pairs``); pairs
with no rating are always left out. Bad input (ratings of unknown pairs, ratings outside 1..K,
empty answer texts, answers without screening scores, a ``source`` column missing or a value
outside :data:`crowdpref.contracts.SOURCES`, ...) raises a one-line
:class:`~crowdpref.errors.CrowdprefError`.

Study-level statistics: Krippendorff's alpha (ordinal) over the un-swapped ratings, the position
bias (raw vs un-swapped), the order balance (:func:`order_balance`: how many pairs were shown to
their raters in balanced A/B orders, so that position bias cancels inside the pair), the
provenance of answers and ratings (their ``source``, :data:`crowdpref.contracts.SOURCES`),
per-category counts, optionally Bradley-Terry strengths per answer (``choix``), and - for a
simulated crowd - :func:`agreement_with_truth`.

Why the order balance matters: an additive position bias ``b`` (raw ratings pushed ``b`` points
toward B) enters a pair's un-swapped mean as ``b * (n_not_swapped - n_swapped) / n``. With the
orders counterbalanced per rating (``|n_swapped - n_not_swapped| <= 1``) that is at most ``b / n``
(0 for an even ``n``); with every rater of the pair on the same order it is the whole ``b``, and
cancels only on average across pairs.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from crowdpref.config import AggregationConfig
from crowdpref.contracts import PAIRS, PREFERENCES, SOURCES
from crowdpref.errors import CrowdprefError
from crowdpref.reliability import ReliabilityFit, fit_raters
from crowdpref.uncertainty import TIE_TOLERANCE, bootstrap_pairs

__all__ = [
    "PAIR_STATS",
    "AggregationResult",
    "AggregationStats",
    "OrderBalance",
    "PositionBias",
    "RaterSummary",
    "TruthCheck",
    "agreement_with_truth",
    "aggregate",
    "bradley_terry",
    "bradley_terry_extremes",
    "check_truth",
    "krippendorff_alpha",
    "order_balance",
    "position_bias",
    "source_counts",
    "summarise_pairs",
    "truth_by_text",
    "unswap",
]

#: Columns of :func:`summarise_pairs` (one row per pair, fixed orientation unless noted).
PAIR_STATS = [
    "pair_id", "question_id", "category", "first_response_id", "second_response_id",
    "n_ratings", "mean", "rating_spread", "n_first", "n_second", "agreement", "tie",
    "chosen_response_id", "rejected_response_id", "mean_rating", "margin",
    "n_swapped", "order_balanced",
]

BT_ALPHA = 0.01
"""Regularisation of the Bradley-Terry fit (keeps an answer that never lost finite)."""

EXAMPLES = 3
"""How many ids an error message names."""


def _examples(ids: Collection[Any] | pd.Series | np.ndarray) -> str:
    shown = [str(x) for x in list(ids)[:EXAMPLES]]
    more = ", ..." if len(ids) > EXAMPLES else ""
    return ", ".join(shown) + more


def _require_columns(frame: pd.DataFrame, needed: Collection[str], file: str, fix: str) -> None:
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise CrowdprefError(f"{file} lacks columns {missing}: {fix}")


# --- per rating / per pair ----------------------------------------------------------------------
def unswap(ratings: np.ndarray, swapped: np.ndarray, scale_points: int) -> np.ndarray:
    """Ratings in the pair's fixed orientation: ``r`` if not swapped, else ``K + 1 - r``."""
    r = np.asarray(ratings, dtype=np.int64)
    return np.where(np.asarray(swapped, dtype=bool), scale_points + 1 - r, r)


def _arrow(values: pd.Series) -> Any:
    """The pyarrow array behind an Arrow-backed string column (pandas' default ``str`` dtype
    when pyarrow is installed; zero-copy), else None."""
    import pyarrow as pa

    dtype = values.dtype
    if not (isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow"):
        return None
    return pa.array(values.array)


def _codes(keys: pd.Series, index: pd.Series) -> np.ndarray:
    """Position in ``index`` of every value of ``keys`` (the first one, if an id repeats); -1
    when absent. Arrow-backed strings use one pyarrow hash lookup (``index_in``); anything else
    pandas' index lookup."""
    import pyarrow as pa
    import pyarrow.compute as pc

    k, i = _arrow(keys), _arrow(index)
    if k is not None and i is not None:
        value_set = i.combine_chunks() if isinstance(i, pa.ChunkedArray) else i
        if value_set.type != k.type:
            value_set = value_set.cast(k.type)
        found = pc.index_in(k, value_set=value_set)
        return pc.fill_null(found, -1).to_numpy().astype(np.int64, copy=False)
    idx = pd.Index(index)
    if idx.is_unique:
        return idx.get_indexer(keys).astype(np.int64, copy=False)
    first = ~idx.duplicated()
    found = idx[first].get_indexer(keys)
    return np.where(found >= 0, np.flatnonzero(first)[found], -1).astype(np.int64)


def _take(values: pd.Series, codes: np.ndarray) -> pd.Series:
    """``values`` at positions ``codes`` (all >= 0), as a new Series."""
    return pd.Series(values.array.take(codes), copy=False)


def _pair_codes(ratings: pd.DataFrame, pairs: pd.DataFrame) -> np.ndarray:
    """Row number in ``pairs`` of each rating's pair; -1 for an unknown pair."""
    return _codes(ratings["pair_id"], pairs["pair_id"])


def _pick(mask: np.ndarray, keep: np.ndarray, a: pd.Series, b: pd.Series) -> pd.Series:
    """``a`` where ``mask`` else ``b``, missing where not ``keep`` (vectorised, no copies of
    the strings into Python objects when the columns are Arrow-backed)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    pa_a, pa_b = _arrow(a), _arrow(b)
    if pa_a is not None and pa_b is not None and pa_a.type == pa_b.type:
        picked = pc.if_else(pa.array(mask), pa_a, pa_b)
        picked = pc.if_else(pa.array(keep), picked, pa.scalar(None, pa_a.type))
        return pd.Series(pd.array(picked, dtype=a.dtype))
    out = np.where(mask, a.to_numpy(dtype=object), b.to_numpy(dtype=object))
    return pd.Series(np.where(keep, out, None), dtype=object)


def summarise_pairs(ratings: pd.DataFrame, pairs: pd.DataFrame, scale_points: int) -> pd.DataFrame:
    """One row per pair of ``pairs`` (same order; :data:`PAIR_STATS` columns), from ratings
    that are already checked (known pairs, values in 1..K).

    Unrated pairs get ``n_ratings`` 0 and NaN statistics; ties have ``tie`` True and no
    chosen/rejected. Vectorised: the pairs' row numbers come from one hash lookup of the
    ratings' pair ids, then every statistic is a ``numpy.bincount`` over them.
    """
    codes = _pair_codes(ratings, pairs)
    if (codes < 0).any():
        raise CrowdprefError("ratings refer to pairs not in pairs.parquet: check them with aggregate()")
    swapped = ratings["swapped"].to_numpy(dtype=bool)
    u = unswap(ratings["rating"].to_numpy(), swapped, scale_points)
    return _summarise_codes(codes, u, swapped, pairs, scale_points)


def _summarise_codes(codes: np.ndarray, u: np.ndarray, swapped: np.ndarray, pairs: pd.DataFrame,
                     scale_points: int) -> pd.DataFrame:
    n_pairs = len(pairs)
    k1 = scale_points + 1  # 2 * midpoint
    twice_u = 2 * u
    n = np.bincount(codes, minlength=n_pairs)
    # sums of small integers: exact in float64, so the midpoint tests below are exact
    total = np.bincount(codes, weights=u, minlength=n_pairs)
    squares = np.bincount(codes, weights=u * u, minlength=n_pairs)
    n_first = np.bincount(codes[twice_u < k1], minlength=n_pairs)
    n_second = np.bincount(codes[twice_u > k1], minlength=n_pairs)
    n_swapped = np.bincount(codes[swapped], minlength=n_pairs)
    rated = n > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / n
        # population variance from exact integer sums: (n * sum(u^2) - sum(u)^2) / n^2
        var = np.maximum(n * squares - total * total, 0) / (n * n)
        agreement = np.maximum(n_first, n_second) / n
    twice_total = 2 * total
    tie = rated & (twice_total == k1 * n)
    first_chosen = rated & (twice_total < k1 * n)
    decided = rated & ~tie
    midpoint = k1 / 2
    first, second = pairs["first_response_id"], pairs["second_response_id"]
    return pd.DataFrame({
        "pair_id": pairs["pair_id"].array,
        "question_id": pairs["question_id"].array,
        "category": pairs["category"].array,
        "first_response_id": first.array,
        "second_response_id": second.array,
        "n_ratings": n.astype(np.int64),
        "mean": mean,
        "rating_spread": np.sqrt(var),
        "n_first": n_first.astype(np.int64),
        "n_second": n_second.astype(np.int64),
        "agreement": agreement,
        "tie": tie,
        "chosen_response_id": _pick(first_chosen, decided, first, second).array,
        "rejected_response_id": _pick(first_chosen, decided, second, first).array,
        "mean_rating": np.where(first_chosen | tie, mean, k1 - mean),
        "margin": np.abs(mean - midpoint) / (midpoint - 1),
        "n_swapped": n_swapped.astype(np.int64),
        "order_balanced": np.abs(2 * n_swapped - n) <= 1,
    }, copy=False)


# --- study-level statistics ---------------------------------------------------------------------
def krippendorff_alpha(codes: np.ndarray, unswapped: np.ndarray, n_pairs: int,
                       scale_points: int) -> float:
    """Krippendorff's alpha (ordinal) of the un-swapped ratings; NaN when it is undefined
    (no pair with two ratings, or a single value used throughout).

    Computed from the pairs x scale-points value-count matrix, which gives the same alpha as the
    raters x pairs matrix with NaN for missing ratings (the package turns that matrix into these
    counts itself) without building a matrix of (raters x pairs) cells. The package's own
    coincidence step allocates pairs x K x K floats: about 0.5 GB and a few seconds at a
    million ratings, milliseconds at the size of the published study.
    """
    import krippendorff

    if len(codes) == 0:
        return math.nan
    k = scale_points
    counts = np.bincount(codes * k + (np.asarray(unswapped) - 1), minlength=n_pairs * k)
    counts = counts.reshape(n_pairs, k)
    counts = counts[counts.sum(axis=1) >= 2]
    if len(counts) == 0 or np.count_nonzero(counts.sum(axis=0)) < 2:
        return math.nan
    try:
        value = krippendorff.alpha(value_counts=counts, value_domain=np.arange(1, k + 1),
                                   level_of_measurement="ordinal")
    except ValueError:
        return math.nan
    return float(value)


@dataclass(frozen=True)
class PositionBias:
    """Where the ratings sit, as given (A/B) and in the fixed orientation.

    With answers shown in counterbalanced (or random) orders, a rater population without position
    bias gives a raw mean near the midpoint; ``raw_shift`` (raw mean - midpoint) is the bias in
    scale points (negative: A favoured). Un-swapping turns the bias into shifts of both signs, so
    ``unswapped_shift`` stays near 0 whatever the bias; whether it also cancels inside each pair
    is :class:`OrderBalance`."""

    midpoint: float
    raw_mean: float
    unswapped_mean: float
    raw_shift: float
    unswapped_shift: float
    raw_share_a: float
    """Share of raw ratings below the midpoint (on the A side)."""
    unswapped_share_first: float
    """Share of un-swapped ratings below the midpoint (for the first response)."""
    swapped_share: float
    """Share of ratings given on a swapped display."""


def position_bias(raw: np.ndarray, unswapped: np.ndarray, swapped: np.ndarray,
                  scale_points: int) -> PositionBias:
    """Mean raw rating vs mean un-swapped rating, and the share of raw ratings on the A side."""
    midpoint = (scale_points + 1) / 2
    raw = np.asarray(raw, dtype=float)
    unswapped = np.asarray(unswapped, dtype=float)
    if len(raw) == 0:
        nan = math.nan
        return PositionBias(midpoint, nan, nan, nan, nan, nan, nan, nan)
    raw_mean, un_mean = float(raw.mean()), float(unswapped.mean())
    return PositionBias(
        midpoint=midpoint,
        raw_mean=raw_mean,
        unswapped_mean=un_mean,
        raw_shift=raw_mean - midpoint,
        unswapped_shift=un_mean - midpoint,
        raw_share_a=float((raw < midpoint).mean()),
        unswapped_share_first=float((unswapped < midpoint).mean()),
        swapped_share=float(np.asarray(swapped, dtype=bool).mean()),
    )


@dataclass(frozen=True)
class OrderBalance:
    """How evenly each rated pair's ratings were split between the two A/B display orders.

    A pair is balanced when ``|n_swapped - n_not_swapped| <= 1`` (R = 3: 2 and 1; R = 4: 2 and 2):
    then an additive position bias ``b`` moves the pair's un-swapped mean by at most ``b / R``
    (0 for an even R). An unbalanced pair (e.g. every rater on the same order) keeps up to the
    whole bias in its mean; across pairs it only averages out."""

    rated_pairs: int
    """Pairs measured: those with at least one (used) rating."""
    balanced_pairs: int
    unbalanced_pairs: int
    balanced_share: float
    """balanced_pairs / rated_pairs (NaN when no pair was rated)."""
    max_imbalance: int
    """Largest ``|n_swapped - n_not_swapped|`` of a pair (0 when no pair was rated)."""


def order_balance(codes: np.ndarray, swapped: np.ndarray, n_pairs: int,
                  measured: np.ndarray | None = None) -> OrderBalance:
    """Balanced pairs among the rated ones, from each rating's pair code and ``swapped`` (two
    ``numpy.bincount``). ``measured``: per pair, False to leave a pair out (default: all)."""
    codes = np.asarray(codes, dtype=np.int64)
    swapped = np.asarray(swapped, dtype=bool)
    n = np.bincount(codes, minlength=n_pairs)
    imbalance = np.abs(2 * np.bincount(codes[swapped], minlength=n_pairs) - n)
    rated = n > 0
    if measured is not None:
        rated &= np.asarray(measured, dtype=bool)
    n_rated = int(rated.sum())
    balanced = int((rated & (imbalance <= 1)).sum())
    return OrderBalance(
        rated_pairs=n_rated,
        balanced_pairs=balanced,
        unbalanced_pairs=n_rated - balanced,
        balanced_share=balanced / n_rated if n_rated else math.nan,
        max_imbalance=int(imbalance[rated].max()) if n_rated else 0,
    )


def source_counts(sources: pd.Series | np.ndarray) -> dict[str, int]:
    """``source -> count`` of the sources present, in :data:`crowdpref.contracts.SOURCES` order
    (values outside it, if any, after them by name)."""
    if not isinstance(sources, pd.Series):
        sources = pd.Series(np.asarray(sources, dtype=object))
    counts = sources.value_counts()
    order = [s for s in SOURCES if s in counts.index]
    order += sorted(str(s) for s in counts.index if s not in SOURCES)
    return {str(s): int(counts[s]) for s in order}


def bradley_terry(pair_stats: pd.DataFrame, codes: np.ndarray, unswapped: np.ndarray,
                  scale_points: int, alpha: float = BT_ALPHA, *, samples: int = 0,
                  level: float = 0.9, seed: int = 0) -> tuple[pd.DataFrame, list[str]]:
    """Bradley-Terry strengths per answer, fitted per question with ``choix.ilsr_pairwise`` on
    the binary outcome of every rating (below the midpoint: the first response wins; ratings are
    not reliability-weighted here).

    Returns (frame with question_id, response_id, bt_score, bt_rank (1 = best), wins,
    comparisons, bt_score_low, bt_score_high; a list of problems). One fit per question, not
    per rating. With ``samples`` > 0, ``bt_score_low``/``bt_score_high`` are the percentile
    interval at ``level`` of the strength over ``samples`` bootstrap resamples of the question's
    decided ratings (:func:`crowdpref.uncertainty.bradley_terry_bootstrap`, the same I-LSR fit,
    seeded); otherwise NaN.
    """
    import choix

    from crowdpref.uncertainty import bradley_terry_bootstrap

    k1 = scale_points + 1
    first_wins = 2 * np.asarray(unswapped) < k1
    second_wins = 2 * np.asarray(unswapped) > k1
    keep = first_wins | second_wins
    first = pair_stats["first_response_id"].to_numpy(dtype=object)[codes[keep]]
    second = pair_stats["second_response_id"].to_numpy(dtype=object)[codes[keep]]
    fw = first_wins[keep]
    outcomes = pd.DataFrame({
        "question_id": pair_stats["question_id"].to_numpy(dtype=object)[codes[keep]],
        "winner": np.where(fw, first, second),
        "loser": np.where(fw, second, first),
    })
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    boot_q: list[np.ndarray] = []
    boot_w: list[np.ndarray] = []
    boot_l: list[np.ndarray] = []
    boot_items: list[int] = []
    boot_rows: list[int] = []  # first row of each bootstrapped question in ``rows``
    for question_id, group in outcomes.groupby("question_id", sort=True):
        answers, inverse = np.unique(np.concatenate([group["winner"].to_numpy(dtype=str),
                                                     group["loser"].to_numpy(dtype=str)]),
                                     return_inverse=True)
        m = len(group)
        if samples > 0:
            boot_q.append(np.full(m, len(boot_items)))
            boot_w.append(inverse[:m])
            boot_l.append(inverse[m:])
            boot_items.append(len(answers))
            boot_rows.append(len(rows))
        data = list(zip(inverse[:m].tolist(), inverse[m:].tolist()))
        wins = np.bincount(inverse[:m], minlength=len(answers))
        games = np.bincount(inverse, minlength=len(answers))
        try:
            scores = choix.ilsr_pairwise(len(answers), data, alpha=alpha)
        except (RuntimeError, ValueError, np.linalg.LinAlgError) as exc:
            problems.append(f"Bradley-Terry fit failed for {question_id}: {exc}")
            scores = np.full(len(answers), np.nan)
        ranks = pd.Series(scores).rank(ascending=False, method="min").to_numpy()
        for i, answer in enumerate(answers):
            rows.append({"question_id": question_id, "response_id": str(answer),
                         "bt_score": float(scores[i]), "bt_rank": float(ranks[i]),
                         "wins": int(wins[i]), "comparisons": int(games[i]),
                         "bt_score_low": math.nan, "bt_score_high": math.nan})
    if boot_items:
        lows, highs = bradley_terry_bootstrap(
            np.concatenate(boot_q), np.concatenate(boot_w), np.concatenate(boot_l),
            np.asarray(boot_items), alpha, samples=samples, level=level, seed=seed)
        for first_row, low, high in zip(boot_rows, lows, highs):
            for i in range(len(low)):
                row = rows[first_row + i]
                if not math.isnan(row["bt_score"]):  # a failed fit keeps no interval
                    row["bt_score_low"] = min(float(low[i]), row["bt_score"])
                    row["bt_score_high"] = max(float(high[i]), row["bt_score"])
    frame = pd.DataFrame(rows, columns=["question_id", "response_id", "bt_score", "bt_rank",
                                        "wins", "comparisons", "bt_score_low", "bt_score_high"])
    return frame, problems


def bradley_terry_extremes(bt: pd.DataFrame) -> pd.DataFrame:
    """Best and worst answer per question by Bradley-Terry strength."""
    if bt.empty:
        return pd.DataFrame(columns=["question_id", "best_response_id", "worst_response_id",
                                     "best_score", "worst_score"])
    fitted = bt.dropna(subset=["bt_score"])
    best = fitted.loc[fitted.groupby("question_id")["bt_score"].idxmax()]
    worst = fitted.loc[fitted.groupby("question_id")["bt_score"].idxmin()]
    return pd.DataFrame({
        "question_id": best["question_id"].to_numpy(),
        "best_response_id": best["response_id"].to_numpy(),
        "worst_response_id": worst["response_id"].to_numpy(),
        "best_score": best["bt_score"].to_numpy(),
        "worst_score": worst["bt_score"].to_numpy(),
    })


# --- truth (simulated crowd) --------------------------------------------------------------------
@dataclass(frozen=True)
class TruthCheck:
    """How often the chosen answer is the one with the higher hidden quality."""

    share: float
    """Share of compared rows where chosen has the higher hidden quality (NaN if none)."""
    compared: int
    truth_ties: int
    """Rows left out: both answers have the same hidden quality."""
    unknown: int
    """Rows left out: an answer has no hidden quality."""


def _truth_series(truth: pd.DataFrame | pd.Series | Mapping[str, float]) -> pd.Series:
    if isinstance(truth, pd.DataFrame):
        _require_columns(truth, ["response_id", "hidden_quality"], "truth table",
                         "give response_id and hidden_quality columns")
        return truth.drop_duplicates("response_id").set_index("response_id")["hidden_quality"]
    if isinstance(truth, pd.Series):
        return truth
    return pd.Series(dict(truth), dtype=float)


def check_truth(preferences: pd.DataFrame,
                truth: pd.DataFrame | pd.Series | Mapping[str, float]) -> TruthCheck:
    """Compare preference rows with a hidden truth (``response_id -> hidden_quality``)."""
    hq = _truth_series(truth).astype(float)
    chosen = preferences["chosen_response_id"].map(hq).to_numpy(dtype=float)
    rejected = preferences["rejected_response_id"].map(hq).to_numpy(dtype=float)
    known = ~(np.isnan(chosen) | np.isnan(rejected))
    ties = known & (chosen == rejected)
    compared = known & ~ties
    n = int(compared.sum())
    share = float((chosen[compared] > rejected[compared]).mean()) if n else math.nan
    return TruthCheck(share=share, compared=n, truth_ties=int(ties.sum()),
                      unknown=int((~known).sum()))


def agreement_with_truth(preferences: pd.DataFrame,
                         truth: pd.DataFrame | pd.Series | Mapping[str, float]) -> float:
    """Share of preference rows whose chosen answer has the higher hidden quality; rows whose
    answers have equal (or unknown) hidden quality are left out. NaN when nothing is compared.
    ``truth``: a frame with response_id and hidden_quality, a Series or a mapping."""
    return check_truth(preferences, truth).share


def truth_by_text(study1_truth: pd.DataFrame, responses: pd.DataFrame) -> pd.DataFrame:
    """response_id -> hidden_quality from the crowd's study-1 truth file (keyed by username and
    question) by matching (question_id, answer text); ambiguous matches are left out."""
    truth = study1_truth.rename(columns={"item_id": "question_id"})
    truth = truth.drop_duplicates(["question_id", "text"], keep=False)
    merged = responses[["response_id", "question_id", "text"]].merge(
        truth[["question_id", "text", "hidden_quality"]], on=["question_id", "text"], how="inner")
    return merged.drop_duplicates("response_id", keep=False)[["response_id", "hidden_quality"]]


# --- the whole stage ----------------------------------------------------------------------------
@dataclass(frozen=True)
class RaterSummary:
    """The rater reliability fit in a few numbers (:mod:`crowdpref.reliability`)."""

    raters: int
    median_reliability: float
    below_half: int
    """Raters whose reliability is below 0.5 (more noise than signal in one rating)."""
    position_bias: float
    """The raters' mean A/B position bias (displayed scale points; positive: toward B)."""
    iterations: int
    converged: bool
    decisions_changed: int
    """Rated pairs whose side (first, second or tie) differs between the plain mean and the
    reliability-weighted mean, whichever method decided."""


@dataclass
class AggregationStats:
    """What ``aggregation.json`` holds."""

    scale_points: int
    midpoint: float
    ratings_per_pair: int
    incomplete_policy: str
    pairs: int
    ratings: int
    rated_pairs: int
    unrated_pairs: int
    excluded_pairs: int
    """Pairs with an answer excluded by the screening drop policy (their ratings ignored)."""
    incomplete_pairs: int
    """Rated pairs with fewer than ratings_per_pair ratings (kept or dropped by policy)."""
    incomplete_dropped: int
    over_rated: int
    """Pairs with more ratings than ratings_per_pair (kept)."""
    ties: int
    kept: int
    """Preference rows written."""
    duplicate_rater_ratings: int
    """Ratings by a rater who already rated the same pair (kept, reported)."""
    alpha: float
    """Krippendorff's alpha, ordinal, un-swapped ratings of all non-excluded pairs."""
    mean_agreement: float
    mean_margin: float
    mean_spread: float
    chosen_flagged: int
    rejected_flagged: int
    position_bias: PositionBias
    order_balance: OrderBalance
    """Rated pairs whose raters saw balanced A/B orders (position bias cancels inside them)."""
    answer_sources: dict[str, int]
    """Answers of responses.parquet per writer ``source`` (contracts.SOURCES order)."""
    rating_sources: dict[str, int]
    """Ratings used per rater ``source``; sums to ``ratings``."""
    per_category: list[dict[str, Any]] = field(default_factory=list)
    bradley_terry_questions: int | None = None
    truth: TruthCheck | None = None
    method: str = "mean"
    """``aggregation.method``: what decided chosen/rejected (``mean`` or ``reliability_weighted``)."""
    reliability: RaterSummary | None = None
    """The rater reliability fit (None when the ratings carry no rater keys)."""
    bootstrap_samples: int = 0
    interval_level: float = math.nan
    mean_p_chosen: float = math.nan
    """Mean ``p_chosen`` over the preference rows (NaN when there are none)."""
    median_interval_width: float = math.nan
    """Median width of the rows' mean_rating interval (scale points)."""
    withdrawn_participants: int = 0
    """Participants who withdrew, whose rows the inputs left out (:mod:`crowdpref.withdrawals`);
    a release build refuses preferences computed before a later withdrawal."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN becomes None)."""
        return _json_ready(asdict(self))


def _json_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


@dataclass
class AggregationResult:
    preferences: pd.DataFrame
    """contracts.PREFERENCES, one row per kept pair, in pairs.parquet order."""
    pair_stats: pd.DataFrame
    """Every pair (PAIR_STATS plus status, incomplete, excluded)."""
    stats: AggregationStats
    anomalies: list[str] = field(default_factory=list)
    """One line per thing reported (ties, incomplete pairs, ...)."""
    bradley_terry: pd.DataFrame | None = None
    """Per answer strengths (when asked for)."""
    bradley_terry_extremes: pd.DataFrame | None = None
    """Best and worst answer per question (when asked for)."""
    raters: pd.DataFrame | None = None
    """raters.parquet (:data:`crowdpref.reliability.RATER_COLUMNS`), one row per rater; None when
    the ratings carry no rater keys (and the method is ``mean``)."""

    @property
    def ties(self) -> pd.DataFrame:
        return self.pair_stats[self.pair_stats["status"] == "tie"]

    @property
    def incomplete(self) -> pd.DataFrame:
        return self.pair_stats[self.pair_stats["incomplete"]]


@dataclass
class _Checked:
    codes: np.ndarray  # per rating: row in pairs
    first: np.ndarray  # per pair: row in responses of the first answer
    second: np.ndarray  # per pair: row in responses of the second answer
    question: np.ndarray  # per pair: row in questions


def _check_sources(frame: pd.DataFrame, id_column: str, file: str, what: str, fix: str) -> None:
    """Every row's ``source`` is one of contracts.SOURCES (a missing one is an error too)."""
    bad = ~frame["source"].isin(SOURCES).to_numpy(dtype=bool)
    if bad.any():
        ids = frame[id_column].to_numpy()[bad]
        shown = sorted({str(v) for v in pd.unique(frame["source"].to_numpy(dtype=object)[bad])})
        raise CrowdprefError(
            f"{file} has {int(bad.sum())} {what} whose source is missing or not one of "
            f"{', '.join(SOURCES)} (e.g. {_examples(ids)}: {shown[:EXAMPLES]}): {fix}")


def _check_inputs(ratings: pd.DataFrame, pairs: pd.DataFrame, responses: pd.DataFrame,
                  questions: pd.DataFrame, scale_points: int) -> _Checked:
    """Raise on bad input; return the row lookups every later step needs."""
    _require_columns(questions, ["question_id", "question"], "questions.parquet",
                     "rerun generate-questions")
    _require_columns(responses, ["response_id", "question_id", "source", "text"],
                     "responses.parquet", "rerun collect-responses")
    _require_columns(pairs, PAIRS, "pairs.parquet", "rerun collect-ratings")
    _require_columns(ratings, ["rating_id", "pair_id", "response_a_id", "swapped", "source",
                               "rating"], "ratings.parquet", "rerun collect-ratings")
    _check_sources(responses, "response_id", "responses.parquet", "answers",
                   "re-export the answers (rerun collect-responses)")
    _check_sources(ratings, "rating_id", "ratings.parquet", "ratings",
                   "re-export the ratings (rerun collect-ratings)")
    dup_pairs = pairs["pair_id"][pairs["pair_id"].duplicated()]
    if len(dup_pairs):
        raise CrowdprefError(f"pairs.parquet has {len(dup_pairs)} duplicate pair ids "
                             f"(e.g. {_examples(dup_pairs)}): rebuild the pairs")
    if not ratings["rating_id"].is_unique:
        dup_ratings = ratings["rating_id"][ratings["rating_id"].duplicated()]
        raise CrowdprefError(f"ratings.parquet has {len(dup_ratings)} duplicate rating ids "
                             f"(e.g. {_examples(dup_ratings.unique())}): re-export the ratings")
    codes = _pair_codes(ratings, pairs)
    unknown = codes < 0
    if unknown.any():
        ids = pd.unique(ratings["pair_id"].to_numpy()[unknown])
        raise CrowdprefError(
            f"ratings.parquet has {int(unknown.sum())} ratings for {len(ids)} pairs not in "
            f"pairs.parquet (e.g. {_examples(ids)}): export ratings and pairs from the same study")
    values = pd.to_numeric(ratings["rating"], errors="coerce").to_numpy(dtype=float)
    bad = ~(np.isfinite(values) & (values == np.round(values)) & (values >= 1) & (values <= scale_points))
    if bad.any():
        ids = ratings["rating_id"].to_numpy()[bad]
        shown = ratings["rating"].to_numpy()[bad][:EXAMPLES].tolist()
        raise CrowdprefError(
            f"ratings.parquet has {int(bad.sum())} ratings outside 1..{scale_points} "
            f"(e.g. {_examples(ids)}: {shown}): check study2.scale_points or the export")
    swapped = ratings["swapped"]
    if swapped.isna().any():
        ids = ratings["rating_id"][swapped.isna()]
        raise CrowdprefError(f"ratings.parquet has {len(ids)} ratings without 'swapped' "
                             f"(e.g. {_examples(ids)}): re-export the ratings")
    shown_first = _take(pairs["first_response_id"], codes)
    shown_second = _take(pairs["second_response_id"], codes)
    expected_a = _pick(swapped.to_numpy(dtype=bool), np.ones(len(codes), dtype=bool),
                       shown_second, shown_first)
    wrong = (ratings["response_a_id"].reset_index(drop=True) != expected_a).to_numpy(dtype=bool)
    if wrong.any():
        ids = ratings["rating_id"].to_numpy()[wrong]
        raise CrowdprefError(
            f"ratings.parquet has {int(wrong.sum())} ratings whose response_a_id/swapped do not "
            f"match their pair (e.g. {_examples(ids)}): re-export ratings and pairs together")
    first = _codes(pairs["first_response_id"], responses["response_id"])
    second = _codes(pairs["second_response_id"], responses["response_id"])
    if (first < 0).any() or (second < 0).any():
        absent = pd.unique(np.concatenate([
            pairs["first_response_id"].to_numpy(dtype=object)[first < 0],
            pairs["second_response_id"].to_numpy(dtype=object)[second < 0]]))
        raise CrowdprefError(f"pairs.parquet refers to {len(absent)} answers not in "
                             f"responses.parquet (e.g. {_examples(absent)}): rebuild the pairs")
    question = _codes(pairs["question_id"], questions["question_id"])
    if (question < 0).any():
        absent_q = pd.unique(pairs["question_id"].to_numpy(dtype=object)[question < 0])
        raise CrowdprefError(f"pairs.parquet refers to {len(absent_q)} questions not in "
                             f"questions.parquet (e.g. {_examples(absent_q)}): rebuild the pairs")
    return _Checked(codes, first, second, question)


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
) -> AggregationResult:
    """Turn ratings into preference rows (contracts.PREFERENCES) and study statistics.

    ``screening`` (response_id, flagged) marks chosen_flagged/rejected_flagged; when given,
    every answer in a pair must have a score. Pairs with an answer in ``excluded_response_ids``
    (screening drop policy) are left out with their ratings. ``seed`` seeds the bootstraps
    (the same inputs and seed give the same rows, whatever the order of the ratings).
    ``withdrawn_participants``: how many withdrawals the inputs already leave out (recorded in
    the statistics; :func:`crowdpref.withdrawals.leave_out_all` removes their rows). Raises
    :class:`CrowdprefError` (one line) on bad input, including ratings without a rater_key
    under ``aggregation.method: reliability_weighted``.
    """
    config = config or AggregationConfig()
    k = scale_points
    midpoint = (k + 1) / 2
    weighted = config.method == "reliability_weighted"
    pairs = pairs.reset_index(drop=True)
    ratings = ratings.reset_index(drop=True)
    responses = responses.reset_index(drop=True)
    questions = questions.reset_index(drop=True)
    checked = _check_inputs(ratings, pairs, responses, questions, k)
    codes = checked.codes
    fit, rater_codes, rater_note = _fit_raters(ratings, k, weighted)

    # pairs holding an answer excluded by the screening drop policy: left out, ratings too
    excluded = pd.Series(sorted(set(excluded_response_ids)), dtype=responses["response_id"].dtype)
    excluded_answer = _codes(responses["response_id"], excluded) >= 0
    excluded_pair = excluded_answer[checked.first] | excluded_answer[checked.second]
    use = ~excluded_pair[codes]
    codes_used = codes[use]
    raw = ratings["rating"].to_numpy()[use].astype(np.int64)
    swapped = ratings["swapped"].to_numpy(dtype=bool)[use]
    u = unswap(raw, swapped, k)
    rating_sources = source_counts(ratings["source"][use])

    # every answer of a pair that stays: needs a text (and a screening score, when screening)
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

    stats = _summarise_codes(codes_used, u, swapped, pairs, k)
    values, weights = u.astype(float), np.ones(len(u))
    weighted_mean = np.full(len(pairs), np.nan)
    if fit is not None and rater_codes is not None:
        used_raters = rater_codes[use]
        rating_weights = fit.weights(used_raters)
        corrected = fit.corrected(u, swapped, used_raters)
        with np.errstate(invalid="ignore", divide="ignore"):
            weighted_mean = np.clip(
                np.bincount(codes_used, weights=rating_weights * corrected, minlength=len(pairs))
                / np.bincount(codes_used, weights=rating_weights, minlength=len(pairs)), 1, k)
        if weighted:
            values, weights = corrected, rating_weights
    stats["weighted_mean"] = weighted_mean
    plain_side = _side(stats["mean"].to_numpy(), midpoint)
    if weighted:
        _decide_by(stats, weighted_mean, pairs, k)
    decision = weighted_mean if weighted else stats["mean"].to_numpy()
    n = stats["n_ratings"].to_numpy()
    rated = (n > 0) & ~excluded_pair
    incomplete = rated & (n < ratings_per_pair)
    over = rated & (n > ratings_per_pair)
    tie = stats["tie"].to_numpy() & rated
    drop_incomplete = config.incomplete_pairs == "drop"
    kept = rated & ~tie & ~(incomplete & drop_incomplete)
    status = np.select(
        [excluded_pair, ~rated, incomplete & drop_incomplete, tie],
        ["excluded", "unrated", "incomplete_dropped", "tie"], default="kept")
    stats["status"] = status
    stats["incomplete"] = incomplete
    stats["excluded"] = excluded_pair

    rows = np.flatnonzero(kept)
    first_chosen = (decision < midpoint)[rows]
    row_of_pair = np.full(len(pairs), -1, dtype=np.int64)
    row_of_pair[rows] = np.arange(len(rows))
    row_of_rating = row_of_pair[codes_used]
    in_row = row_of_rating >= 0
    by_id = np.argsort(ratings["rating_id"].to_numpy(dtype=str)[use][in_row], kind="stable")
    p_chosen, interval_low, interval_high = bootstrap_pairs(
        row_of_rating[in_row][by_id], values[in_row][by_id], weights[in_row][by_id], len(rows),
        first_chosen, k, samples=config.bootstrap_samples, level=config.interval_level, seed=seed)
    chosen_at = np.where(first_chosen, checked.first[rows], checked.second[rows])
    rejected_at = np.where(first_chosen, checked.second[rows], checked.first[rows])
    kept_stats = stats.take(rows)
    preferences = pd.DataFrame({
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

    dup_rater = 0
    if "rater_key" in ratings.columns and len(codes_used):
        rater = pd.factorize(ratings["rater_key"])[0][use] + 1  # 0: no rater key
        pair_rater = codes_used * (int(rater.max()) + 1) + rater
        dup_rater = int(pd.Series(pair_rater).duplicated().sum())

    per_category = (
        pd.DataFrame({"category": stats["category"].to_numpy(), "pairs": 1,
                      "rated": rated.astype(int), "kept": kept.astype(int), "ties": tie.astype(int),
                      "incomplete": incomplete.astype(int), "excluded": excluded_pair.astype(int)})
        .groupby("category", sort=True).sum().reset_index()
    )
    ag_by_cat = preferences.groupby("category")["agreement"].mean()
    per_category["mean_agreement"] = per_category["category"].map(ag_by_cat).astype(float)
    result_stats = AggregationStats(
        scale_points=k,
        midpoint=midpoint,
        ratings_per_pair=ratings_per_pair,
        incomplete_policy=config.incomplete_pairs,
        pairs=len(pairs),
        ratings=int(len(u)),
        rated_pairs=int(rated.sum()),
        unrated_pairs=int((~rated & ~excluded_pair).sum()),
        excluded_pairs=int(excluded_pair.sum()),
        incomplete_pairs=int(incomplete.sum()),
        incomplete_dropped=int((incomplete & drop_incomplete).sum()),
        over_rated=int(over.sum()),
        ties=int(tie.sum()),
        kept=int(kept.sum()),
        duplicate_rater_ratings=dup_rater,
        alpha=krippendorff_alpha(codes_used, u, len(pairs), k),
        mean_agreement=float(preferences["agreement"].mean()) if len(preferences) else math.nan,
        mean_margin=float(preferences["margin"].mean()) if len(preferences) else math.nan,
        mean_spread=float(preferences["rating_spread"].mean()) if len(preferences) else math.nan,
        chosen_flagged=int(preferences["chosen_flagged"].sum()),
        rejected_flagged=int(preferences["rejected_flagged"].sum()),
        position_bias=position_bias(raw, u, swapped, k),
        order_balance=order_balance(codes_used, swapped, len(pairs), measured=rated),
        answer_sources=source_counts(responses["source"]),
        rating_sources=rating_sources,
        per_category=per_category.to_dict(orient="records"),
        method=config.method,
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
        reliability = raters["reliability"].to_numpy()
        measured = rated & ~excluded_pair
        result_stats.reliability = RaterSummary(
            raters=len(raters),
            median_reliability=float(np.median(reliability)) if len(raters) else math.nan,
            below_half=int((reliability < 0.5).sum()),
            position_bias=fit.position_bias,
            iterations=fit.iterations,
            converged=fit.converged,
            decisions_changed=int((measured & (plain_side != _side(weighted_mean, midpoint))).sum()),
        )

    anomalies = _anomalies(stats, result_stats, config)
    if rater_note:
        anomalies.append(rater_note)
    if fit is not None and not fit.converged:
        anomalies.append(f"the rater reliability fit stopped after {fit.iterations} rounds "
                         "without converging: reliabilities are approximate")
    bt = extremes = None
    if config.bradley_terry:
        bt, problems = bradley_terry(stats, codes_used, u, k, samples=config.bootstrap_samples,
                                     level=config.interval_level, seed=seed)
        anomalies += problems
        extremes = bradley_terry_extremes(bt)
        result_stats.bradley_terry_questions = int(extremes["question_id"].nunique())
    return AggregationResult(preferences=preferences, pair_stats=stats, stats=result_stats,
                             anomalies=anomalies, bradley_terry=bt, bradley_terry_extremes=extremes,
                             raters=raters)


def _fit_raters(ratings: pd.DataFrame, scale_points: int,
                weighted: bool) -> tuple[ReliabilityFit | None, np.ndarray | None, str | None]:
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
                             "reliability_weighted needs the rater of every rating (re-export the "
                             "ratings, or set aggregation.method: mean)")
    fit, rater_codes = fit_raters(ratings, scale_points)
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
    what = "mean rating" if s.method == "mean" else "reliability-weighted mean rating"
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

