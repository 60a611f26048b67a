"""What the aggregation stage returns: the preference rows, every pair's statistics and the
study statistics that ``aggregation.json`` holds."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from crowdpref.aggregation.bias import LengthBias
from crowdpref.aggregation.pairs import OrderBalance, PositionBias
from crowdpref.aggregation.truth import TruthCheck

__all__ = ["AggregationResult", "AggregationStats", "RaterSummary"]


@dataclass(frozen=True)
class RaterSummary:
    """The rater reliability fit in a few numbers (:mod:`crowdpref.aggregation.reliability`)."""

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
    weighting: str = "agreement"
    """What the rater weights rest on: ``agreement`` (between raters alone) or ``gold`` (anchored
    on study 2's gold pairs, :mod:`crowdpref.aggregation.reliability`)."""
    gold_raters: int = 0
    """Raters with at least one answered gold pair behind the anchor."""
    flipped: int = 0
    """Raters the gold anchor flipped (they rated gold pairs backwards: negative slope)."""


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
    """``aggregation.method``: what decided chosen/rejected (``mean``, ``reliability_weighted`` or
    ``gold_anchored``)."""
    decided_by: str = "mean"
    """What actually decided: ``mean``, ``reliability_weighted`` (agreement alone) or
    ``gold_anchored``; ``gold_anchored`` without gold outcomes falls back to ``mean``."""
    reliability: RaterSummary | None = None
    """The rater reliability fit (None when the ratings carry no rater keys)."""
    bootstrap_samples: int = 0
    interval_level: float = math.nan
    mean_p_chosen: float = math.nan
    """Mean ``p_chosen`` over the preference rows (NaN when there are none)."""
    median_interval_width: float = math.nan
    """Median width of the rows' mean_rating interval (scale points)."""
    length_bias: LengthBias | None = None
    """How much this crowd's choices and ratings follow answer length (a measurement of the
    crowd, reported next to ``position_bias``; :mod:`crowdpref.aggregation.bias`)."""
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
    """raters.parquet (:data:`crowdpref.aggregation.reliability.RATER_COLUMNS`), one row per rater; None when
    the ratings carry no rater keys (and the method is ``mean``)."""

    @property
    def ties(self) -> pd.DataFrame:
        return self.pair_stats[self.pair_stats["status"] == "tie"]

    @property
    def incomplete(self) -> pd.DataFrame:
        return self.pair_stats[self.pair_stats["incomplete"]]
