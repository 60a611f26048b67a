"""Length bias of a crowd: how much its ratings follow answer length.

Preference for the longer answer is the best-known bias of human preference data. Length is
measured here, never corrected: the figures describe THIS crowd's ratings on THESE pairs, and a
longer answer may also be the better one, so a length preference is not by itself a defect of
the data. Two figures, both with a seeded bootstrap interval over the pairs:

- ``longer_chosen_share``: among decided pairs whose two answers differ in length, the share
  whose chosen answer is the longer one (0.5: length does not predict the choice);
- ``slope``: the least-squares slope of a pair's signed mean rating ``mean - M`` (fixed
  orientation; positive: the second answer preferred) on its normalised length difference
  ``d = (len_second - len_first) / (len_second + len_first)`` in [-1, 1], over the rated pairs:
  scale points per unit of ``d`` (0: the ratings do not move with length; e.g. 2.0: an answer
  twice as long as the other, ``d = 1/3``, moves the mean by about 0.67 points toward it).

Length is the answer text's length in characters. Position bias (A/B) is measured by
:func:`crowdpref.aggregation.pairs.position_bias` and reported next to these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["LengthBias", "describe_length_bias", "length_bias"]

LENGTH_BOOTSTRAP = 1000
"""Bootstrap resamples (of pairs) behind the length-bias intervals."""
CHUNK_DRAWS = 2_000_000
"""Bootstrap draws held in memory at once."""


def _boot(rng: np.random.Generator, n: int, samples: int, stat) -> np.ndarray:  # type: ignore[no-untyped-def]
    """``stat`` of ``samples`` resamples (with replacement) of ``n`` rows, in chunks."""
    per_chunk = max(1, CHUNK_DRAWS // max(n, 1))
    out = []
    for start in range(0, samples, per_chunk):
        draws = rng.integers(0, n, size=(min(per_chunk, samples - start), n))
        out.append(stat(draws))
    return np.concatenate(out) if out else np.empty(0)


@dataclass(frozen=True)
class LengthBias:
    """How much the crowd's ratings follow answer length (see the module)."""

    decided_pairs: int
    """Decided pairs whose two answers differ in length (the share's denominator)."""
    longer_chosen: int
    longer_chosen_share: float
    longer_chosen_low: float
    longer_chosen_high: float
    rated_pairs: int
    """Rated pairs in the slope's regression."""
    slope: float
    """Scale points of the pair mean per unit of normalised length difference (+: toward the
    longer answer)."""
    slope_low: float
    slope_high: float
    interval_level: float
    bootstrap_samples: int
    mean_abs_length_difference: float
    """Mean ``|d|`` over the rated pairs (how different the lengths were at all)."""


def _slopes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares slope with intercept of each row of ``y`` on the same row of ``x``."""
    xc = x - x.mean(axis=-1, keepdims=True)
    yc = y - y.mean(axis=-1, keepdims=True)
    sxx = (xc * xc).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sxx > 0, (xc * yc).sum(axis=-1) / sxx, np.nan)


def length_bias(first_length: np.ndarray, second_length: np.ndarray, pair_mean: np.ndarray,
                decided: np.ndarray, first_chosen: np.ndarray, midpoint: float, *,
                samples: int = LENGTH_BOOTSTRAP, level: float = 0.9,
                seed: int = 0) -> LengthBias:
    """Length bias from per-pair arrays: the two answers' lengths, the pair's mean rating (fixed
    orientation, NaN when unrated), whether the pair was decided and whether its first answer
    was chosen. Intervals: percentile bootstrap over the pairs at ``level`` (``samples``
    resamples, seeded by ``seed``)."""
    first_length = np.asarray(first_length, dtype=float)
    second_length = np.asarray(second_length, dtype=float)
    mean = np.asarray(pair_mean, dtype=float)
    decided = np.asarray(decided, dtype=bool)
    first_chosen = np.asarray(first_chosen, dtype=bool)
    rng = np.random.default_rng([seed, 21])
    tail = (1 - level) / 2
    nan = math.nan

    differ = decided & (first_length != second_length)
    longer = np.where(first_chosen, first_length > second_length, second_length > first_length)[differ]
    n_dec = int(differ.sum())
    share = float(longer.mean()) if n_dec else nan
    share_low = share_high = nan
    if n_dec and samples > 0:
        shares = _boot(rng, n_dec, samples, lambda idx: longer[idx].mean(axis=1))
        share_low, share_high = (float(v) for v in np.quantile(shares, [tail, 1 - tail]))

    total = first_length + second_length
    rated = np.isfinite(mean) & (total > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        d = ((second_length - first_length) / total)[rated]
    y = (mean - midpoint)[rated]
    n_rated = int(rated.sum())
    slope = float(_slopes(d, y)) if n_rated >= 2 else nan
    slope_low = slope_high = nan
    if n_rated >= 2 and samples > 0 and math.isfinite(slope):
        boot = _boot(rng, n_rated, samples, lambda idx: _slopes(d[idx], y[idx]))
        boot = boot[np.isfinite(boot)]
        if len(boot):
            slope_low, slope_high = (float(v) for v in np.quantile(boot, [tail, 1 - tail]))
    return LengthBias(
        decided_pairs=n_dec, longer_chosen=int(longer.sum()), longer_chosen_share=share,
        longer_chosen_low=share_low, longer_chosen_high=share_high, rated_pairs=n_rated,
        slope=slope, slope_low=slope_low, slope_high=slope_high, interval_level=level,
        bootstrap_samples=samples if (n_dec or n_rated) else 0,
        mean_abs_length_difference=float(np.abs(d).mean()) if n_rated else nan)


def _pct(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{100 * value:.1f}%"


def _num(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:+.2f}"


def describe_length_bias(bias: LengthBias | dict | None) -> str:  # type: ignore[type-arg]
    """One line for a report or the card: the two figures with their intervals, worded as a
    measurement of the crowd (``bias`` a :class:`LengthBias` or its ``aggregation.json`` dict)."""
    if bias is None:
        return "length bias: not measured"
    get = (lambda k: bias.get(k)) if isinstance(bias, dict) else (lambda k: getattr(bias, k))

    def val(k: str) -> float:
        v = get(k)
        return math.nan if v is None else float(v)

    level = val("interval_level")
    lvl = f"{level:.0%}" if math.isfinite(level) else "bootstrap"
    return (f"length: the longer answer was chosen in {_pct(val('longer_chosen_share'))} of "
            f"{get('decided_pairs')} decided pairs whose answers differ in length ({lvl} interval "
            f"{_pct(val('longer_chosen_low'))} to {_pct(val('longer_chosen_high'))}; 50% = length "
            f"does not predict the choice); the mean rating moved {_num(val('slope'))} scale "
            f"points per unit of normalised length difference ({_num(val('slope_low'))} to "
            f"{_num(val('slope_high'))}; 0 = no dependence)")
