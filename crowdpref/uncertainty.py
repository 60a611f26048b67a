"""How sure each aggregated result is: bootstraps over the ratings, vectorised and seeded.

- :func:`bootstrap_pairs` - per preference row, resample the pair's own ratings with replacement
  ``B`` times (each resample has as many ratings as the pair) and recompute the statistic that
  decided it (the plain mean, or the reliability-weighted mean with the weights kept fixed):
  ``p_chosen`` is the share of resamples on the chosen side of the midpoint (a resample exactly
  on it counts half), and the percentile interval of the chosen-first statistic at ``level``,
  widened where needed to contain the statistic itself. All resamples of all pairs are drawn
  at once per chunk of resamples (one ``numpy`` index array), no loop per pair.
- :func:`ilsr_batched` - choix's I-LSR Bradley-Terry fit (same algorithm, same ``alpha``
  regularisation, same centred log-strengths) for a stack of win-count matrices at once.
- :func:`bradley_terry_bootstrap` - per question, resample its decided ratings (winner/loser
  outcomes) with replacement and refit with :func:`ilsr_batched`: percentile intervals of each
  answer's strength.

With 3 ratings per pair the pair bootstrap sees only those 3 ratings: a pair whose 3 ratings
are all on one side gets ``p_chosen`` 1.0, though three noisy raters can all be wrong. It is a
measure of how one-sided the pair's ratings are, not a calibrated probability.
"""

from __future__ import annotations

import numpy as np

__all__ = ["bootstrap_pairs", "bradley_terry_bootstrap", "ilsr_batched"]

CHUNK_DRAWS = 4_000_000
"""Bootstrap draws held in memory at once (resamples per chunk x ratings)."""
TIE_TOLERANCE = 1e-9
"""A statistic this close to the midpoint counts as on it."""


def _segments(groups: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For values already sorted by group: stable order, per-group counts and start offsets."""
    counts = np.bincount(groups, minlength=n_groups)
    starts = np.cumsum(counts) - counts
    return counts, starts, groups


def bootstrap_pairs(groups: np.ndarray, values: np.ndarray, weights: np.ndarray, n_groups: int,
                    first_chosen: np.ndarray, scale_points: int, *, samples: int, level: float,
                    seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group (a preference row): ``(p_chosen, low, high)``.

    ``groups`` (row number of each rating, every row with at least one rating), ``values`` (the
    ratings in the pair's fixed orientation, possibly bias-corrected) and ``weights`` (> 0) are
    per rating, in a fixed order (the caller's order decides the draws: sort by rating id for
    results that do not depend on the input order). ``first_chosen`` per row: the orientation.
    The statistic is ``sum(w * v) / sum(w)`` clipped to 1..K, in the chosen-first orientation.
    """
    k1 = scale_points + 1
    midpoint = k1 / 2
    groups = np.asarray(groups, dtype=np.int64)
    order = np.argsort(groups, kind="stable")
    groups = groups[order]
    values = np.asarray(values, dtype=float)[order]
    weights = np.asarray(weights, dtype=float)[order]
    counts, starts, _ = _segments(groups, n_groups)
    if n_groups == 0:
        empty = np.empty(0)
        return empty, empty, empty
    if (counts == 0).any():
        raise ValueError("every group needs at least one rating")
    first_chosen = np.asarray(first_chosen, dtype=bool)
    wv = weights * values
    point = np.clip(np.bincount(groups, weights=wv, minlength=n_groups)
                    / np.bincount(groups, weights=weights, minlength=n_groups), 1, scale_points)
    point = np.where(first_chosen, point, k1 - point)
    slot_start, slot_n = starts[groups], counts[groups]
    rng = np.random.default_rng(seed)
    stats = np.empty((samples, n_groups))
    chunk = max(1, CHUNK_DRAWS // max(len(groups), 1))
    for begin in range(0, samples, chunk):
        size = min(chunk, samples - begin)
        draw = slot_start + (rng.random((size, len(groups))) * slot_n).astype(np.int64)
        num = np.add.reduceat(wv[draw], starts, axis=1)
        den = np.add.reduceat(weights[draw], starts, axis=1)
        stats[begin:begin + size] = np.clip(num / den, 1, scale_points)
    stats = np.where(first_chosen, stats, k1 - stats)
    on_mid = np.abs(stats - midpoint) <= TIE_TOLERANCE
    p_chosen = ((stats < midpoint) & ~on_mid).mean(axis=0) + 0.5 * on_mid.mean(axis=0)
    low, high = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return p_chosen, np.minimum(low, point), np.maximum(high, point)


def ilsr_batched(wins: np.ndarray, alpha: float, max_iter: int = 100,
                 tol: float = 1e-8) -> np.ndarray:
    """Bradley-Terry log-strengths (centred) for a stack of win-count matrices
    ``wins[b, i, j]`` = times item i beat item j: choix's ``ilsr_pairwise`` (iterated Luce
    spectral ranking, chain rates initialised at ``alpha``) on every matrix at once. Stops when
    every matrix's L1 change is below ``tol`` (choix's test) or after ``max_iter`` rounds."""
    wins = np.asarray(wins, dtype=float)
    batch, m, _ = wins.shape
    params = np.zeros((batch, m))
    eye = np.eye(m, dtype=bool)
    rhs = np.zeros((batch, m, 1))
    rhs[:, -1, 0] = 1.0
    for _ in range(max_iter):
        w = np.exp(params - params.mean(axis=1, keepdims=True))
        w = w * (m / w.sum(axis=1, keepdims=True))
        # chain[loser, winner] = alpha + wins[winner, loser] / (w_winner + w_loser)
        chain = alpha + np.swapaxes(wins, 1, 2) / (w[:, :, None] + w[:, None, :])
        chain[:, eye] = 0.0
        chain[:, eye] = -chain.sum(axis=2)
        system = np.swapaxes(chain, 1, 2).copy()  # stationary pi: chain^T pi = 0, sum(pi) = 1
        system[:, -1, :] = 1.0
        pi = np.linalg.solve(system, rhs)[:, :, 0]
        new = np.log(np.maximum(pi, 1e-300))
        new -= new.mean(axis=1, keepdims=True)
        done = np.abs(new - params).sum(axis=1).max() < tol
        params = new
        if done:
            break
    return params


def bradley_terry_bootstrap(question: np.ndarray, winner: np.ndarray, loser: np.ndarray,
                            n_items: np.ndarray, alpha: float, *, samples: int, level: float,
                            seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per question ``q`` (codes 0..Q-1, each with ``n_items[q]`` answers and >= 1 outcome):
    resample its outcomes (winner/loser item numbers within the question) with replacement,
    refit, and return the ``(low, high)`` percentile bounds of each answer's strength as two
    lists of arrays (one per question). Questions of the same size are fitted together."""
    question = np.asarray(question, dtype=np.int64)
    winner = np.asarray(winner, dtype=np.int64)
    loser = np.asarray(loser, dtype=np.int64)
    n_items = np.asarray(n_items, dtype=np.int64)
    n_q = len(n_items)
    lows: list[np.ndarray] = [np.empty(0)] * n_q
    highs: list[np.ndarray] = [np.empty(0)] * n_q
    rng = np.random.default_rng(seed)
    q_lo, q_hi = (1 - level) / 2, (1 + level) / 2
    for m in np.unique(n_items):
        qs = np.flatnonzero(n_items == m)
        local = np.full(n_q, -1, dtype=np.int64)
        local[qs] = np.arange(len(qs))
        keep = local[question] >= 0
        g = local[question[keep]]
        order = np.argsort(g, kind="stable")
        g, win, lose = g[order], winner[keep][order], loser[keep][order]
        counts = np.bincount(g, minlength=len(qs))
        starts = np.cumsum(counts) - counts
        fits = np.empty((samples, len(qs), m))
        chunk = max(1, min(CHUNK_DRAWS // max(len(g), 1), 200_000 // max(len(qs), 1)))
        for begin in range(0, samples, chunk):
            size = min(chunk, samples - begin)
            draw = starts[g] + (rng.random((size, len(g))) * counts[g]).astype(np.int64)
            sample = np.repeat(np.arange(size), len(g))
            flat = ((sample * len(qs) + np.tile(g, size)) * m + win[draw].ravel()) * m + lose[draw].ravel()
            wins = np.bincount(flat, minlength=size * len(qs) * m * m).reshape(size * len(qs), m, m)
            fits[begin:begin + size] = ilsr_batched(wins, alpha).reshape(size, len(qs), m)
        lo, hi = np.quantile(fits, [q_lo, q_hi], axis=0)
        for i, q in enumerate(qs):
            lows[q], highs[q] = lo[i], hi[i]
    return lows, highs
