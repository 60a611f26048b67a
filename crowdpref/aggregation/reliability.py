"""Rater reliability for study 2: one reliability score in [0, 1] per anonymous rater.

The model
---------
Every rating is first un-swapped (:func:`crowdpref.aggregation.pairs.unswap`) and centred on the
midpoint ``M = (K + 1) / 2``: ``x = u - M``. With ``s = +1`` when the rater saw the pair in its
fixed order and ``s = -1`` when it was shown swapped, rating ``i`` by rater ``j`` on pair ``p`` is
modelled as

    x_i = a_j * t_p + s_i * b_j + e_i,     e_i ~ Normal(0, v_j),     t_p ~ Normal(0, tau^2)

- ``t_p``  the pair's latent preference (negative: the first response is better);
- ``a_j``  the rater's slope (discrimination): how strongly their ratings follow the latent
           preference; about 1 for a typical rater (the slopes are rescaled to an n-weighted mean
           of 1), 0 for a rater who clicks without reading;
- ``b_j``  the rater's position bias in scale points on the DISPLAYED scale (positive: pushed
           toward B), which un-swapping turns into ``+b`` or ``-b``;
- ``v_j``  the rater's noise variance.

It is fitted by expectation-maximisation: the E-step gives each pair's posterior mean and variance
of ``t_p`` from the current rater parameters; the M-step re-fits each rater's ``(a_j, b_j)`` by a
ridge regression of their ratings on ``E[t_p]`` and ``s`` (using ``E[t_p^2]``, so the pair's own
uncertainty counts) and their ``v_j`` from the expected squared residuals. Every step is a
``numpy.bincount`` over integer pair or rater codes; 18k ratings from 300 raters (the full study's
size) fit in about 0.04 s on the 2-core development machine (measured 2026-11-24;
``test_fit_is_fast_at_the_size_of_the_full_study`` prints it).
Shrinkage keeps raters with few ratings sensible (each prior is worth a few ratings, so a rater
with 60 ratings is mostly their own data):

- ``a_j ~ Normal(1, SLOPE_PRIOR_SD^2)``;
- ``b_j ~ Normal(b_0, BIAS_PRIOR_SD^2)`` with ``b_0`` the raters' (n-weighted) mean bias, i.e.
  the study's global position bias;
- ``v_j`` is ``(SS_j + PRIOR_RATINGS * v_pool) / (n_j + PRIOR_RATINGS)`` (a conjugate
  inverse-gamma prior at the pooled variance), never below ``VARIANCE_FLOOR = 1/12`` (the
  rounding variance of an integer scale: nobody rates more precisely than the scale allows);
- ``tau^2`` is re-estimated each round (mean ``E[t_p^2]``).

Reliability is the classical test-theory reliability of one rating: the share of a rating's
variance that is signal, ``a_j^2 tau^2 / (a_j^2 tau^2 + v_j)``, in [0, 1], decreasing in the
rater's noise ``sqrt(v_j) / a_j`` on the latent scale. A rater whose ratings do not follow the
consensus gets a slope near 0 and a reliability near 0, however narrow their ratings are; a rater
with a consistent position bias is not penalised (the bias is modelled, not counted as noise).
Without gold, slopes are kept at or above ``SLOPE_MIN`` (an anti-correlated rater is treated as
uninformative, never as a flipped signal: agreement alone cannot say who is backwards).

What it was tested on: simulated raters only (``benchmarks/aggregation_quality.py``, figures in
docs/performance.md), on the model's own assumptions and off them (heavy-tailed, extreme,
central-tendency, length-swayed, backwards and random raters). Weighting by agreement alone fell
below the plain mean wherever 40% or more of the raters followed answer length.

Gold anchor
-----------
Agreement alone cannot tell a careful majority from a majority that shares a bias unrelated to
quality (e.g. 40% of raters preferring the longer answer): weighting by agreement then rewards
the biased raters. Study 2's gold pairs (:mod:`crowdpref.checks`: a clearly good and a clearly
bad answer, graded pass/fail) have a known answer. Given each rater's gold outcomes, the fit
(``aggregation.method: gold_anchored``) computes an anchor per rater

    c_j = (passed_j - failed_j + GOLD_PRIOR * c_0) / (answered_j + GOLD_PRIOR)    in (-1, 1)

(``c_0``: the same over all raters' gold; a rater with no gold answered gets ``c_0``) and uses the
EFFECTIVE slope ``a_j * |c_j|`` when the agreement slope ``a_j`` and ``c_j`` have the same sign,
``SLOPE_MIN`` otherwise, in the E-step and in the weights. So the sign of a rater comes from gold
(slopes may go negative: a rater who reads the scale backwards and fails gold is flipped, not
just ignored), a rater at chance on gold (``c_j`` near 0) is down-weighted however well they
agree with the others, and the consensus the slopes are fitted against is driven by raters who
are right on gold. It is a heuristic blend, not a likelihood: with a few gold pairs per rater
``c_j`` is coarse (4 of 5 passed is ``c`` about 0.5). It cannot help where the gold pairs
themselves are easy for the biased raters (e.g. a length-swayed rater passes gold whose good
answer is also the longer one). Without gold outcomes the fit is the agreement-only model above.

Reliability-weighted aggregation (:func:`crowdpref.aggregation.stage.aggregate` with
``aggregation.method: reliability_weighted``) weights each bias-corrected rating ``u_i - s_i b_j``
by ``a_j / v_j`` (a negative weight, possible only under the gold anchor, flips the rating about
``M``): the sign of that weighted mean relative to ``M`` is the sign of the posterior mean of
``t_p``, i.e. the decision of the model.

Why this model and not crowd-kit or choix
-----------------------------------------
The ratings are ordinal 8-point A/B judgements of a pair, with strength, no neutral point and a
per-rating display order. crowd-kit 1.4.2's classification models (Dawid-Skene, MACE, GLAD,
Wawa, ...) treat the 8 points as unordered classes (a 7 would be as far from an 8 as a 1, and a
rater's confusion matrix would need 64 cells from ~60 ratings); its pairwise models
(``BradleyTerry``, ``NoisyBT``) take binary winner/loser outcomes and drop the strength, and
NoisyBT has no position bias; crowd-kit also requires ``transformers`` and ``nltk`` at install
time. choix fits Bradley-Terry/Luce strengths of ITEMS and has no notion of a rater at all (it is
used for the per-question answer strengths,
:func:`crowdpref.aggregation.bradley_terry.bradley_terry`). The one-factor model above keeps the
strength of every rating, models the A/B position bias per rater
and separates "no signal" (slope 0: random clickers) from "noisy signal" (large ``v_j``), which a
variance-only model cannot: a uniform clicker's rating variance (5.25 on 8 points) is close to
that of an honest rater with noise sd 2. Its known approximations: the 8 points are treated as
equally spaced and the clipping at 1 and K is not modelled (strong pairs look less noisy).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from crowdpref.aggregation.pairs import unswap
from crowdpref.contracts import RATERS
from crowdpref.errors import CrowdprefError

__all__ = [
    "RATER_COLUMNS",
    "ReliabilityFit",
    "fit_raters",
    "fit_reliability",
    "gold_anchor",
    "gold_frame",
    "gold_tally",
]

RATER_COLUMNS = [*RATERS, "noise_sd", "slope", "bias"]
"""raters.parquet: contracts.RATERS plus noise_sd (sqrt(v_j), scale points), slope (a_j) and
bias (b_j, displayed scale points, positive toward B)."""

VARIANCE_FLOOR = 1.0 / 12.0
"""Smallest rater noise variance: the rounding variance of an integer rating."""
PRIOR_RATINGS = 5.0
"""Weight, in ratings, of the prior that pulls a rater's variance toward the pooled variance."""
SLOPE_PRIOR_SD = 1.0
"""Prior sd of a rater's slope around 1."""
BIAS_PRIOR_SD = 0.5
"""Prior sd (scale points) of a rater's position bias around the study's mean bias."""
SLOPE_MIN = 1e-3
"""Smallest slope: a rater never gets a negative (flipped) or exactly zero weight."""
GOLD_PRIOR = 2.0
"""Weight, in gold pairs, of the prior that pulls a rater's gold anchor toward the study's."""
MAX_ITER = 300
TOL = 1e-6
"""Convergence: largest change of any slope, bias or log-variance between two rounds."""


@dataclass(frozen=True)
class ReliabilityFit:
    """Fitted rater parameters (arrays indexed by rater code) and the pairs' posteriors."""

    rater_keys: np.ndarray
    n_ratings: np.ndarray
    slope: np.ndarray
    bias: np.ndarray
    variance: np.ndarray
    signal_variance: float
    """tau^2: variance of the pairs' latent preferences (scale points squared)."""
    position_bias: float
    """b_0: the raters' n-weighted mean position bias (displayed scale points, + toward B)."""
    iterations: int
    converged: bool
    anchor: np.ndarray | None = None
    """Per rater: the gold anchor ``c_j`` (None: fitted on agreement alone). ``slope`` is then the
    effective, gold-anchored slope (negative: flipped by gold)."""
    gold_answered: np.ndarray | None = None
    gold_passed: np.ndarray | None = None

    @property
    def anchored(self) -> bool:
        """True when gold outcomes anchored the fit."""
        return self.anchor is not None

    @property
    def reliability(self) -> np.ndarray:
        """Per rater: ``a^2 tau^2 / (a^2 tau^2 + v)`` in [0, 1]."""
        signal = self.slope**2 * self.signal_variance
        return signal / (signal + self.variance)

    def weights(self, rater_codes: np.ndarray) -> np.ndarray:
        """Per rating: the aggregation weight ``a_j / v_j`` of its rater (> 0, except for a
        rater the gold anchor flipped: < 0)."""
        return (self.slope / self.variance)[np.asarray(rater_codes, dtype=np.int64)]

    def corrected(self, unswapped: np.ndarray, swapped: np.ndarray,
                  rater_codes: np.ndarray) -> np.ndarray:
        """Per rating: the un-swapped rating minus its rater's position bias (``u - s * b_j``)."""
        s = np.where(np.asarray(swapped, dtype=bool), -1.0, 1.0)
        return np.asarray(unswapped, dtype=float) - s * self.bias[np.asarray(rater_codes, dtype=np.int64)]

    def frame(self) -> pd.DataFrame:
        """:data:`RATER_COLUMNS`, one row per rater (in rater-code order)."""
        return pd.DataFrame({
            "rater_key": pd.array(self.rater_keys.astype(str), dtype="string"),
            "n_ratings": self.n_ratings.astype(np.int64),
            "reliability": self.reliability,
            "noise_sd": np.sqrt(self.variance),
            "slope": self.slope,
            "bias": self.bias,
        })[RATER_COLUMNS]


def gold_anchor(answered: np.ndarray, passed: np.ndarray) -> np.ndarray | None:
    """Per rater: ``c_j`` of the module (None when nobody answered a gold pair)."""
    answered = np.asarray(answered, dtype=float)
    passed = np.asarray(passed, dtype=float)
    if answered.sum() <= 0:
        return None
    net = 2 * passed - answered  # passed - failed
    c0 = float(net.sum() / answered.sum())
    return (net + GOLD_PRIOR * c0) / (answered + GOLD_PRIOR)


def _effective(slope: np.ndarray, anchor: np.ndarray | None) -> np.ndarray:
    if anchor is None:
        return slope
    return np.where(slope * anchor > 0, slope * np.abs(anchor), SLOPE_MIN)


def fit_reliability(pair_codes: np.ndarray, unswapped: np.ndarray, swapped: np.ndarray,
                    rater_codes: np.ndarray, rater_keys: np.ndarray, scale_points: int,
                    *, gold_answered: np.ndarray | None = None,
                    gold_passed: np.ndarray | None = None,
                    max_iter: int = MAX_ITER, tol: float = TOL) -> ReliabilityFit:
    """Fit the model of this module from integer codes (pair and rater per rating, both >= 0)
    and the un-swapped ratings. ``rater_keys[c]`` names rater code ``c``. With
    ``gold_answered``/``gold_passed`` (per rater code: gold pairs answered and passed) the fit
    is gold-anchored (see the module); without them, or when nobody answered gold, it rests on
    agreement alone."""
    p = np.asarray(pair_codes, dtype=np.int64)
    r = np.asarray(rater_codes, dtype=np.int64)
    n_raters = len(rater_keys)
    n_pairs = int(p.max()) + 1 if len(p) else 0
    x = np.asarray(unswapped, dtype=float) - (scale_points + 1) / 2
    s = np.where(np.asarray(swapped, dtype=bool), -1.0, 1.0)
    n = np.bincount(r, minlength=n_raters).astype(float)
    slope, bias = np.ones(n_raters), np.zeros(n_raters)
    anchor = None
    if gold_answered is not None and gold_passed is not None:
        gold_answered = np.asarray(gold_answered, dtype=np.int64)
        gold_passed = np.asarray(gold_passed, dtype=np.int64)
        anchor = gold_anchor(gold_answered, gold_passed)
    if anchor is None:
        gold_answered = gold_passed = None
    slope_min = -np.inf if anchor is not None else SLOPE_MIN
    eff = _effective(slope, anchor)
    if len(x) == 0:
        return ReliabilityFit(np.asarray(rater_keys, dtype=object), n.astype(np.int64), slope,
                              bias, np.ones(n_raters), 1.0, 0.0, 0, True, anchor,
                              gold_answered, gold_passed)
    rated = np.bincount(p, minlength=n_pairs) > 0
    # start: every rater alike, the pair means as latent preferences
    pair_mean = np.bincount(p, weights=x, minlength=n_pairs) / np.maximum(
        np.bincount(p, minlength=n_pairs), 1)
    pooled = max(float(np.mean((x - pair_mean[p]) ** 2)), VARIANCE_FLOOR)
    variance = np.full(n_raters, pooled)
    tau2 = max(float(np.mean(pair_mean[rated] ** 2)), 1e-3)
    b0 = 0.0
    converged, iterations = False, 0
    for iterations in range(1, max_iter + 1):
        # E-step: posterior of each pair's latent preference
        a_i, v_i, b_i = eff[r], variance[r], bias[r]
        precision = 1.0 / tau2 + np.bincount(p, weights=a_i * a_i / v_i, minlength=n_pairs)
        post_mean = np.bincount(p, weights=a_i * (x - s * b_i) / v_i, minlength=n_pairs) / precision
        post_var = 1.0 / precision
        et, vt = post_mean[p], post_var[p]
        et2 = et * et + vt
        # M-step: slope and bias per rater (2x2 ridge regression, closed form)
        s_tt = np.bincount(r, weights=et2, minlength=n_raters)
        s_ts = np.bincount(r, weights=s * et, minlength=n_raters)
        s_xt = np.bincount(r, weights=x * et, minlength=n_raters)
        s_xs = np.bincount(r, weights=s * x, minlength=n_raters)
        ridge_a = variance / SLOPE_PRIOR_SD**2
        ridge_b = variance / BIAS_PRIOR_SD**2
        a11, a22 = s_tt + ridge_a, n + ridge_b
        r1, r2 = s_xt + ridge_a * 1.0, s_xs + ridge_b * b0
        det = a11 * a22 - s_ts * s_ts
        new_slope = (r1 * a22 - s_ts * r2) / det
        new_bias = (a11 * r2 - s_ts * r1) / det
        low = new_slope < slope_min
        new_slope[low] = SLOPE_MIN
        new_bias[low] = (r2[low] - s_ts[low] * SLOPE_MIN) / a22[low]
        # noise variance per rater: expected squared residuals, shrunk toward the pooled value
        a_i, b_i = new_slope[r], new_bias[r]
        resid2 = (x - a_i * et - s * b_i) ** 2 + a_i * a_i * vt
        ss = np.bincount(r, weights=resid2, minlength=n_raters)
        pooled = float(ss.sum() / n.sum())
        new_variance = np.maximum((ss + PRIOR_RATINGS * pooled) / (n + PRIOR_RATINGS), VARIANCE_FLOOR)
        # study-level: latent variance, mean bias; slopes rescaled to an n-weighted mean of 1
        tau2 = max(float(np.mean((post_mean**2 + post_var)[rated])), 1e-6)
        new_eff = _effective(new_slope, anchor)
        scale = max(float(np.sum(n * np.abs(new_eff)) / n.sum()), 1e-6)
        new_slope = new_slope / scale
        if anchor is None:
            new_slope = np.maximum(new_slope, SLOPE_MIN)
        new_eff = _effective(new_slope, anchor)
        tau2 *= scale * scale
        b0 = float(np.sum(n * new_bias) / n.sum())
        change = max(float(np.max(np.abs(new_slope - slope))), float(np.max(np.abs(new_bias - bias))),
                     float(np.max(np.abs(np.log(new_variance) - np.log(variance)))))
        slope, bias, variance, eff = new_slope, new_bias, new_variance, new_eff
        if change < tol:
            converged = True
            break
    return ReliabilityFit(np.asarray(rater_keys, dtype=object), n.astype(np.int64), eff, bias,
                          variance, tau2, b0, iterations, converged, anchor, gold_answered,
                          gold_passed)


def gold_tally(gold: pd.DataFrame | None, rater_keys: np.ndarray,
               file: str = "gold checks") -> tuple[np.ndarray, np.ndarray] | None:
    """Per rater of ``rater_keys``: gold pairs answered and passed, from ``gold`` (one row per
    answered gold pair: ``rater_key``, ``passed``). Rows of raters without ratings are ignored.
    None when ``gold`` is None or empty."""
    if gold is None or len(gold) == 0:
        return None
    missing = [c for c in ("rater_key", "passed") if c not in gold.columns]
    if missing:
        raise CrowdprefError(f"{file} lacks columns {missing}: the gold anchor needs one row per "
                             "answered gold pair (rater_key, passed)")
    at = pd.Index(np.asarray(rater_keys, dtype=object)).get_indexer(gold["rater_key"].astype(object))
    known = at >= 0
    passed = gold["passed"].fillna(False).to_numpy(dtype=bool)
    answered = np.bincount(at[known], minlength=len(rater_keys))
    ok = np.bincount(at[known], weights=passed[known].astype(float), minlength=len(rater_keys))
    return answered.astype(np.int64), ok.astype(np.int64)


def fit_raters(ratings: pd.DataFrame, scale_points: int, file: str = "ratings.parquet",
               gold: pd.DataFrame | None = None) -> tuple[ReliabilityFit, np.ndarray]:
    """Fit the model over a ratings frame (pair_id, rater_key, rating as displayed, swapped);
    gold-anchored when ``gold`` (rater_key, passed; one row per answered gold pair) is given.

    Returns the fit and each rating's rater code. Raises a one-line :class:`CrowdprefError` when
    a column is missing, a rater_key is empty or a rating is outside 1..K.
    """
    missing = [c for c in ("pair_id", "rater_key", "rating", "swapped") if c not in ratings.columns]
    if missing:
        raise CrowdprefError(f"{file} lacks columns {missing}: rater reliability needs them "
                             "(re-export the ratings, or set aggregation.method: mean)")
    keys = ratings["rater_key"]
    blank = keys.isna().to_numpy(dtype=bool) | keys.astype(str).str.strip().eq("").to_numpy(dtype=bool)
    if blank.any():
        raise CrowdprefError(f"{file} has {int(blank.sum())} ratings without a rater_key: rater "
                             "reliability needs one per rating (re-export the ratings, or set "
                             "aggregation.method: mean)")
    values = pd.to_numeric(ratings["rating"], errors="coerce").to_numpy(dtype=float)
    bad = ~(np.isfinite(values) & (values == np.round(values)) & (values >= 1) & (values <= scale_points))
    if bad.any():
        raise CrowdprefError(f"{file} has {int(bad.sum())} ratings outside 1..{scale_points}: "
                             "check study2.scale_points or the export")
    if ratings["swapped"].isna().any():
        raise CrowdprefError(f"{file} has ratings without 'swapped': re-export the ratings")
    rater_codes, rater_keys = pd.factorize(keys, sort=True)
    pair_codes = pd.factorize(ratings["pair_id"], sort=True)[0]
    swapped = ratings["swapped"].to_numpy(dtype=bool)
    u = unswap(values.astype(np.int64), swapped, scale_points)
    keys_arr = np.asarray(rater_keys, dtype=object)
    tally = gold_tally(gold, keys_arr)
    fit = fit_reliability(pair_codes, u, swapped, rater_codes, keys_arr, scale_points,
                          gold_answered=None if tally is None else tally[0],
                          gold_passed=None if tally is None else tally[1])
    return fit, rater_codes.astype(np.int64)
