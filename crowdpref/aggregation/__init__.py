"""Aggregation: the ratings of study 2 become one chosen/rejected row per answer pair.

Its modules, from the lowest (each imports only those above it):

- :mod:`~crowdpref.aggregation.pairs`: primitives on rated pairs: :func:`unswap` (a rating in the
  pair's fixed orientation), the per-pair summary :func:`summarise_pairs` (:data:`PAIR_STATS`),
  the position bias (:func:`position_bias`) and the A/B order balance (:func:`order_balance`);
- :mod:`~crowdpref.aggregation.bias`: how much the ratings follow answer length
  (:func:`length_bias`, :class:`LengthBias`);
- :mod:`~crowdpref.aggregation.agreement`: Krippendorff's alpha (:func:`krippendorff_alpha`);
- :mod:`~crowdpref.aggregation.inputs`: the stage's input checks and their one-line errors, and
  the provenance counts (:func:`source_counts`);
- :mod:`~crowdpref.aggregation.reliability`: the rater reliability model (:func:`fit_raters`,
  :class:`ReliabilityFit`, ``raters.parquet``'s :data:`RATER_COLUMNS`), optionally anchored on
  study 2's gold pairs (:func:`crowdpref.checks.gold_frame`);
- :mod:`~crowdpref.aggregation.bradley_terry`: Bradley-Terry strengths per answer
  (:func:`bradley_terry`, :func:`bradley_terry_extremes`);
- :mod:`~crowdpref.aggregation.truth`: the simulation's truth check (:func:`check_truth`,
  :func:`agreement_with_truth`, :func:`truth_by_text`);
- :mod:`~crowdpref.aggregation.result`: what the stage returns (:class:`AggregationResult`,
  :class:`AggregationStats`, :class:`RaterSummary`);
- :mod:`~crowdpref.aggregation.stage`: the stage itself, :func:`aggregate`.

Every name below is importable from ``crowdpref.aggregation`` itself.
"""

from crowdpref.aggregation.agreement import krippendorff_alpha
from crowdpref.aggregation.bias import LengthBias, describe_length_bias, length_bias
from crowdpref.aggregation.bradley_terry import BT_ALPHA, bradley_terry, bradley_terry_extremes
from crowdpref.aggregation.inputs import source_counts
from crowdpref.aggregation.pairs import (
    PAIR_STATS,
    OrderBalance,
    PositionBias,
    order_balance,
    position_bias,
    summarise_pairs,
    unswap,
)
from crowdpref.aggregation.reliability import (
    RATER_COLUMNS,
    ReliabilityFit,
    fit_raters,
    fit_reliability,
)
from crowdpref.aggregation.result import AggregationResult, AggregationStats, RaterSummary
from crowdpref.aggregation.stage import aggregate
from crowdpref.aggregation.truth import (
    TruthCheck,
    agreement_with_truth,
    check_truth,
    truth_by_text,
)

__all__ = [
    "BT_ALPHA",
    "PAIR_STATS",
    "RATER_COLUMNS",
    "AggregationResult",
    "AggregationStats",
    "LengthBias",
    "OrderBalance",
    "PositionBias",
    "RaterSummary",
    "ReliabilityFit",
    "TruthCheck",
    "agreement_with_truth",
    "aggregate",
    "bradley_terry",
    "bradley_terry_extremes",
    "describe_length_bias",
    "check_truth",
    "fit_raters",
    "fit_reliability",
    "krippendorff_alpha",
    "length_bias",
    "order_balance",
    "position_bias",
    "source_counts",
    "summarise_pairs",
    "truth_by_text",
    "unswap",
]
