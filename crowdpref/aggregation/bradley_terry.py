"""Bradley-Terry strengths per answer (``choix``), fitted per question on the binary outcome of
every rating, with a seeded bootstrap interval (:mod:`crowdpref.uncertainty`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["BT_ALPHA", "bradley_terry", "bradley_terry_extremes"]

BT_ALPHA = 0.01
"""Regularisation of the Bradley-Terry fit (keeps an answer that never lost finite)."""


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
