"""Primitives on rated pairs: un-swapping, the per-pair summary, the position bias and the A/B
order balance. The lowest module of :mod:`crowdpref.aggregation` (it imports nothing else of it).

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

Why the order balance matters: an additive position bias ``b`` (raw ratings pushed ``b`` points
toward B) enters a pair's un-swapped mean as ``b * (n_not_swapped - n_swapped) / n``. With the
orders counterbalanced per rating (``|n_swapped - n_not_swapped| <= 1``) that is at most ``b / n``
(0 for an even ``n``); with every rater of the pair on the same order it is the whole ``b``, and
cancels only on average across pairs.

The row lookups (``_codes``, ``_take``, ``_pick``) are shared by the package's other modules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from crowdpref.errors import CrowdprefError

__all__ = [
    "PAIR_STATS",
    "OrderBalance",
    "PositionBias",
    "order_balance",
    "position_bias",
    "summarise_pairs",
    "unswap",
]

#: Columns of :func:`summarise_pairs` (one row per pair, fixed orientation unless noted).
PAIR_STATS = [
    "pair_id", "question_id", "category", "first_response_id", "second_response_id",
    "n_ratings", "mean", "rating_spread", "n_first", "n_second", "agreement", "tie",
    "chosen_response_id", "rejected_response_id", "mean_rating", "margin",
    "n_swapped", "order_balanced",
]


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



# --- position bias and order balance ----------------------------------------------------------
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

