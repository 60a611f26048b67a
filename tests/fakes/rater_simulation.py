"""Simulated study-2 ratings with known raters (for tests/unit/test_reliability.py and
benchmarks/aggregation_quality.py), built with numpy in the contract layouts.

Like :meth:`crowdpref.simulation.crowd.SimulatedCrowd.rating`: an answer's hidden quality follows the
simulated crowd's phrase-bank mix (considered answers 0.3..1, low-effort and offensive ones
near 0); a rating on the displayed scale is ``z = (q_B - q_A) * 6 + Normal(0, noise_j) + bias``
mapped to 1..K with no neutral point (``z`` in [0, 1) is K/2 + 1, (-1, 0) is K/2, clipped);
random clickers pick uniformly. Each rater's noise sd is ``noise * exp(Normal(0, spread))``
(raters differ); every pair gets ``R`` ratings by different raters, each rater about
``per_rater`` of them, the display order counterbalanced per rating (e.g. 2 and 1 for R = 3).

Rater styles OUTSIDE the model that :mod:`crowdpref.aggregation.reliability` fits (``styles``:
share of raters per style; the rest are ``careful``, the rule above). With
``s = (q_B - q_A) * 6`` and ``e = Normal(0, 1) * noise_j``:

- ``heavy``: heavy-tailed noise, ``s + t_2 * noise_j`` (Student t, 2 degrees of freedom);
- ``extreme``: extreme responder, ``3 * (s + e)`` (nearly always 1 or K);
- ``central``: central tendency, ``0.25 * (s + e)`` (nearly always K/2 or K/2 + 1);
- ``length``: swayed by answer length, ``0.25 * s + LENGTH_GAIN * d + e`` with ``d`` the
  normalised length difference ``(len_B - len_A) / (len_B + len_A)``; answer lengths are drawn
  independently of quality, so length carries no information about quality here;
- ``backwards``: reads the A/B scale backwards, ``-(s + e)``;
- ``clicker``: uniform random (also what ``clickers`` adds).

``gold_pairs`` > 0 gives every rater that many gold pairs (a clearly good and a clearly bad
answer, quality difference :data:`GOLD_GAP`, the good one shown as A or B at random, lengths
independent of which is good unless ``gold_good_longer``), rated by the rater's own style and
graded like :func:`crowdpref.checks.grade_gold`: ``SimulatedRatings.gold`` (rater_key, passed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

RATING_SPREAD = 6.0
LENGTH_GAIN = 12.0
"""Scale points per unit of normalised length difference for a length-swayed rater."""
GOLD_GAP = 0.6
"""Hidden-quality difference between a gold pair's good and bad answer."""
STYLES = ("careful", "heavy", "extreme", "central", "length", "backwards", "clicker")


@dataclass
class SimulatedRatings:
    questions: pd.DataFrame
    responses: pd.DataFrame
    pairs: pd.DataFrame
    ratings: pd.DataFrame
    truth: pd.DataFrame
    """response_id, hidden_quality."""
    raters: pd.DataFrame
    """rater_key, noise_sd (the true one; NaN for a random clicker), clicker, variance (true
    variance of one rating around its expected value: noise_sd^2, or (K^2 - 1) / 12 for a
    clicker: the oracle's weights are its inverse)."""
    scale_points: int
    ratings_per_pair: int
    gold: pd.DataFrame | None = None
    """rater_key, passed: one row per gold pair a rater answered (None without gold)."""


def _style_z(style: np.ndarray, signal: np.ndarray, length_d: np.ndarray, noise_sd: np.ndarray,
             rng: np.random.Generator, position_bias: float) -> np.ndarray:
    """The latent response of each rating, by its rater's style (clickers handled outside)."""
    n = len(signal)
    e = rng.normal(0.0, 1.0, n) * noise_sd
    z = signal + e
    z = np.where(style == "heavy", signal + rng.standard_t(2.0, n) * noise_sd, z)
    z = np.where(style == "extreme", 3.0 * (signal + e), z)
    z = np.where(style == "central", 0.25 * (signal + e), z)
    z = np.where(style == "length", 0.25 * signal + LENGTH_GAIN * length_d + e, z)
    z = np.where(style == "backwards", -(signal + e), z)
    return z + position_bias


def hidden_qualities(rng: np.random.Generator, n: int) -> np.ndarray:
    kind = rng.random(n)
    considered = (0.35 + 0.25 * (rng.random(n) < 0.75) + 0.15 * (rng.random(n) < 0.6)
                  + 0.15 * (rng.random(n) < 0.5) + rng.uniform(-0.05, 0.1, n))
    quality = np.minimum(considered, 1.0)
    quality = np.where(kind < 0.05, rng.uniform(0.05, 0.25, n), quality)
    return np.where(kind < 0.02, rng.uniform(0.0, 0.1, n), quality)


def to_scale(z: np.ndarray, scale_points: int) -> np.ndarray:
    half = scale_points // 2
    up = np.minimum(scale_points, half + 1 + np.floor(z).astype(np.int64))
    down = np.maximum(1, half - np.floor(-z).astype(np.int64))
    return np.where(z >= 0, up, down)


def simulate(*, n_pairs: int = 2000, ratings_per_pair: int = 3, per_rater: int = 60,
             noise: float = 1.0, noise_spread: float = 0.5, clickers: float = 0.0,
             position_bias: float = 0.0, scale_points: int = 8, seed: int = 0,
             styles: dict[str, float] | None = None, gold_pairs: int = 0,
             gold_good_longer: bool = False) -> SimulatedRatings:
    rng = np.random.default_rng(seed)
    k, r = scale_points, ratings_per_pair
    n_ratings = n_pairs * r
    n_raters = max(r, int(round(n_ratings / per_rater)))
    rater_keys = np.array([f"p_{seed:04x}{i:08x}" for i in range(n_raters)], dtype=object)
    clicker = rng.random(n_raters) < clickers
    noise_sd = noise * np.exp(rng.normal(0.0, noise_spread, n_raters))
    style = np.full(n_raters, "careful", dtype=object)
    if styles:
        unknown = sorted(set(styles) - set(STYLES))
        if unknown:
            raise ValueError(f"unknown rater styles {unknown}: use {STYLES}")
        style_rng = np.random.default_rng([seed, 99])
        order = style_rng.permutation(n_raters)
        start = 0
        for name, share in styles.items():
            count = int(round(share * n_raters))
            style[order[start:start + count]] = name
            start += count
    clicker |= style == "clicker"
    style[clicker] = "clicker"
    length_rng = np.random.default_rng([seed, 7])
    variance = np.where(clicker, (k * k - 1) / 12, noise_sd**2)
    # answers: 2 per pair, each pair its own question
    quality = hidden_qualities(rng, 2 * n_pairs)
    lengths = np.round(np.exp(length_rng.normal(np.log(400), 0.5, 2 * n_pairs))).astype(np.int64) + 1
    question_ids = np.array([f"q_{seed:04x}{i:012x}" for i in range(n_pairs)], dtype=object)
    response_ids = np.array([f"r_{seed:04x}{i:012x}" for i in range(2 * n_pairs)], dtype=object)
    first, second = response_ids[0::2], response_ids[1::2]
    default_swapped = rng.random(n_pairs) < 0.5
    pairs = pd.DataFrame({
        "pair_id": np.array([f"pr_{seed:04x}{i:012x}" for i in range(n_pairs)], dtype=object),
        "question_id": question_ids, "category": "empathy",
        "first_response_id": first, "second_response_id": second,
        "response_a_id": np.where(default_swapped, second, first),
        "response_b_id": np.where(default_swapped, first, second),
        "swapped": default_swapped,
    })
    # raters: each rater's slots shuffled over the pairs, R different raters per pair
    grid = rng.permutation(np.arange(n_ratings) % n_raters).reshape(n_pairs, r)
    for _ in range(1000):
        sorted_grid = np.sort(grid, axis=1)
        dup = np.flatnonzero((sorted_grid[:, 1:] == sorted_grid[:, :-1]).any(axis=1))
        if not len(dup):
            break
        other = rng.integers(0, n_pairs, len(dup))  # swap a random slot with a random pair's
        col = rng.integers(0, r, len(dup))
        grid[dup, col], grid[other, col] = grid[other, col], grid[dup, col].copy()
    slots = np.arange(n_ratings)
    pair_of = slots % n_pairs
    slot_in_pair = slots // n_pairs
    rater_of = grid[pair_of, slot_in_pair]
    shown_swapped = default_swapped[pair_of] ^ (slot_in_pair % 2 == 1)
    q_first, q_second = quality[0::2][pair_of], quality[1::2][pair_of]
    q_a = np.where(shown_swapped, q_second, q_first)
    q_b = np.where(shown_swapped, q_first, q_second)
    if styles:
        len_first, len_second = lengths[0::2][pair_of], lengths[1::2][pair_of]
        len_a = np.where(shown_swapped, len_second, len_first)
        len_b = np.where(shown_swapped, len_first, len_second)
        z = _style_z(style[rater_of], (q_b - q_a) * RATING_SPREAD, (len_b - len_a) / (len_a + len_b),
                     noise_sd[rater_of], rng, position_bias)
    else:  # the original rule, draw for draw
        z = (q_b - q_a) * RATING_SPREAD + rng.normal(0.0, 1.0, n_ratings) * noise_sd[rater_of] + position_bias
    rating = np.where(clicker[rater_of], rng.integers(1, k + 1, n_ratings), to_scale(z, k))
    arrival = rng.permutation(n_ratings)
    ratings = pd.DataFrame({
        "rating_id": np.array([f"rt_{seed:04x}{i:012x}" for i in range(n_ratings)], dtype=object),
        "pair_id": pairs["pair_id"].to_numpy()[pair_of],
        "question_id": question_ids[pair_of],
        "response_a_id": np.where(shown_swapped, second[pair_of], first[pair_of]),
        "response_b_id": np.where(shown_swapped, first[pair_of], second[pair_of]),
        "swapped": shown_swapped,
        "rater_key": rater_keys[rater_of],
        "source": "simulated",
        "rating": rating.astype(np.int64),
        "submitted_at": pd.Timestamp("2025-01-01", tz="UTC"),
    }).iloc[arrival].reset_index(drop=True)
    questions = pd.DataFrame({"question_id": question_ids, "question": "How would you respond?",
                              "category": "empathy", "source": "bank", "metadata": "{}"})
    responses = pd.DataFrame({"response_id": response_ids,
                              "question_id": np.repeat(question_ids, 2), "category": "empathy",
                              "participant_key": "p_000000000000", "source": "simulated",
                              "text": (["a" * int(n) for n in lengths] if styles else "An answer."),
                              "quality": 4,
                              "submitted_at": pd.Timestamp("2025-01-01", tz="UTC")})
    truth = pd.DataFrame({"response_id": response_ids, "hidden_quality": quality})
    raters = pd.DataFrame({"rater_key": rater_keys, "noise_sd": np.where(clicker, np.nan, noise_sd),
                           "clicker": clicker, "variance": variance, "style": style})
    gold = None
    if gold_pairs > 0:
        gold_rng = np.random.default_rng([seed, 3])
        g_rater = np.repeat(np.arange(n_raters), gold_pairs)
        m = len(g_rater)
        good_is_a = gold_rng.random(m) < 0.5
        signal = np.where(good_is_a, -GOLD_GAP, GOLD_GAP) * RATING_SPREAD
        len_good = np.exp(gold_rng.normal(np.log(400), 0.5, m))
        len_bad = np.exp(gold_rng.normal(np.log(400), 0.5, m))
        if gold_good_longer:
            len_good, len_bad = np.maximum(len_good, len_bad), np.minimum(len_good, len_bad)
        len_a, len_b = np.where(good_is_a, len_good, len_bad), np.where(good_is_a, len_bad, len_good)
        gz = _style_z(style[g_rater], signal, (len_b - len_a) / (len_a + len_b), noise_sd[g_rater],
                      gold_rng, position_bias)
        g_rating = np.where(clicker[g_rater], gold_rng.integers(1, k + 1, m), to_scale(gz, k))
        passed = (2 * g_rating < k + 1) == good_is_a
        gold = pd.DataFrame({"rater_key": rater_keys[g_rater], "passed": passed})
    return SimulatedRatings(questions, responses, pairs, ratings, truth, raters, k, r, gold)
