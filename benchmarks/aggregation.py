"""Benchmark: aggregating 1M ratings with a plain Python loop vs crowdpref's vectorised path.

    .venv/bin/python benchmarks/aggregation.py [--ratings 1000000] [--runs 3]

Both start from the same ratings and pairs DataFrames (contracts.RATINGS / PAIRS; 3 ratings per
pair, 8-point scale, the display order counterbalanced per rating as study 2 does it: 2 and 1)
and produce the same per-pair statistics: un-swapped mean, n_ratings, spread, agreement,
chosen/rejected, chosen-first mean, margin and n_swapped (the order balance).

- loop: the columns as Python lists, one dict update per rating, then one pass per pair;
- vectorised: :func:`crowdpref.aggregation.summarise_pairs` (pair codes + ``numpy.bincount``).

The results are compared pair by pair. Also shown: how much of the vectorised time is the
lookup of the ratings' string pair ids (one pyarrow hash lookup; the loop does the same work in
its dict lookups), and the whole :func:`crowdpref.aggregation.aggregate` (input checks,
Krippendorff's alpha, the preference rows with texts). Each time is the best of ``--runs``
(the loop: of ``--loop-runs``). Target: >= 50x.
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from crowdpref.aggregation import aggregate, summarise_pairs  # noqa: E402
from crowdpref.aggregation.pairs import _pair_codes  # noqa: E402

K, PER_PAIR, PER_QUESTION = 8, 3, 6


def make_inputs(n_ratings: int, seed: int = 0) -> tuple[pd.DataFrame, ...]:
    """questions, responses, pairs, ratings for ``n_ratings`` ratings (4 answers per question)."""
    rng = np.random.default_rng(seed)
    n_pairs = math.ceil(n_ratings / PER_PAIR)
    n_questions = math.ceil(n_pairs / PER_QUESTION)
    question_ids = np.array([f"q_{i:016x}" for i in range(n_questions)], dtype=object)
    response_ids = np.array([f"r_{i:016x}" for i in range(n_questions * 4)], dtype=object)
    questions = pd.DataFrame({"question_id": question_ids, "question": "How would you respond?",
                              "category": "empathy", "source": "bank", "metadata": "{}"})
    responses = pd.DataFrame({"response_id": response_ids,
                              "question_id": np.repeat(question_ids, 4),
                              "category": "empathy", "source": "simulated", "text": "An answer."})
    a_idx, b_idx = np.array([0, 0, 0, 1, 1, 2]), np.array([1, 2, 3, 2, 3, 3])
    q_of_pair = np.repeat(np.arange(n_questions), PER_QUESTION)[:n_pairs]
    slot = np.tile(np.arange(PER_QUESTION), n_questions)[:n_pairs]
    first = response_ids[q_of_pair * 4 + a_idx[slot]]
    second = response_ids[q_of_pair * 4 + b_idx[slot]]
    swapped = rng.random(n_pairs) < 0.5
    pairs = pd.DataFrame({
        "pair_id": np.array([f"pr_{i:016x}" for i in range(n_pairs)], dtype=object),
        "question_id": question_ids[q_of_pair], "category": "empathy",
        "first_response_id": first, "second_response_id": second,
        "response_a_id": np.where(swapped, second, first),
        "response_b_id": np.where(swapped, first, second),
        "swapped": swapped,
    })
    arrival = rng.permutation(n_ratings)  # ratings arrive in any order
    pair_of = np.repeat(np.arange(n_pairs), PER_PAIR)[:n_ratings][arrival]
    slot = np.tile(np.arange(PER_PAIR), n_pairs)[:n_ratings][arrival]
    shown = swapped[pair_of] ^ (slot % 2 == 1)  # counterbalanced per rating
    ratings = pd.DataFrame({
        "rating_id": np.array([f"rt_{i:016x}" for i in range(n_ratings)], dtype=object),
        "pair_id": pairs["pair_id"].to_numpy()[pair_of],
        "question_id": pairs["question_id"].to_numpy()[pair_of],
        "response_a_id": np.where(shown, second[pair_of], first[pair_of]),
        "response_b_id": np.where(shown, first[pair_of], second[pair_of]),
        "swapped": shown,
        "rater_key": np.array([f"p_{i:012x}" for i in range(n_ratings)], dtype=object),
        "source": "simulated",
        "rating": rng.integers(1, K + 1, n_ratings),
        "submitted_at": pd.Timestamp("2025-01-01", tz="UTC"),
    })
    return questions, responses, pairs, ratings


def loop_aggregate(ratings: pd.DataFrame, pairs: pd.DataFrame, k: int) -> dict[str, tuple]:
    """Plain Python, one rating at a time: pair_id -> (n, mean, spread, agreement, chosen,
    rejected, chosen-first mean, margin, n_swapped); ties get chosen None."""
    mid = (k + 1) / 2
    n: dict[str, int] = {}
    total: dict[str, int] = {}
    squares: dict[str, int] = {}
    low: dict[str, int] = {}
    shown_swapped: dict[str, int] = {}
    for pair_id, rating, swapped in zip(ratings["pair_id"].tolist(), ratings["rating"].tolist(),
                                        ratings["swapped"].tolist()):
        u = k + 1 - rating if swapped else rating
        n[pair_id] = n.get(pair_id, 0) + 1
        total[pair_id] = total.get(pair_id, 0) + u
        squares[pair_id] = squares.get(pair_id, 0) + u * u
        if u < mid:
            low[pair_id] = low.get(pair_id, 0) + 1
        if swapped:
            shown_swapped[pair_id] = shown_swapped.get(pair_id, 0) + 1
    out: dict[str, tuple] = {}
    for pair_id, first, second in zip(pairs["pair_id"].tolist(), pairs["first_response_id"].tolist(),
                                      pairs["second_response_id"].tolist()):
        count = n.get(pair_id, 0)
        if not count:
            continue
        mean = total[pair_id] / count
        spread = math.sqrt(max(squares[pair_id] / count - mean * mean, 0.0))
        lo = low.get(pair_id, 0)
        agreement = max(lo, count - lo) / count
        if mean < mid:
            chosen, rejected, chosen_mean = first, second, mean
        elif mean > mid:
            chosen, rejected, chosen_mean = second, first, k + 1 - mean
        else:
            chosen = rejected = None
            chosen_mean = mean
        out[pair_id] = (count, mean, spread, agreement, chosen, rejected, chosen_mean,
                        abs(mean - mid) / (mid - 1), shown_swapped.get(pair_id, 0))
    return out


def check_same(loop: dict[str, tuple], table: pd.DataFrame) -> None:
    rated = table[table["n_ratings"] > 0]
    assert len(rated) == len(loop), "different numbers of rated pairs"
    ref = pd.DataFrame.from_dict(loop, orient="index", columns=[
        "n_ratings", "mean", "rating_spread", "agreement", "chosen_response_id",
        "rejected_response_id", "mean_rating", "margin", "n_swapped"]).reindex(rated["pair_id"])
    for column in ("n_ratings", "mean", "rating_spread", "agreement", "mean_rating", "margin",
                   "n_swapped"):
        assert np.allclose(ref[column].to_numpy(dtype=float), rated[column].to_numpy(dtype=float),
                           atol=1e-9), column
    for column in ("chosen_response_id", "rejected_response_id"):
        assert (ref[column].fillna("").to_numpy() == rated[column].fillna("").to_numpy()).all(), column


def timed(fn: Callable[[], object], runs: int) -> tuple[float, object]:
    best, result = math.inf, None
    for _ in range(runs):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            result = fn()
            best = min(best, time.perf_counter() - start)
        finally:
            gc.enable()
    return best, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ratings", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--loop-runs", type=int, default=2)
    args = parser.parse_args(argv)

    questions, responses, pairs, ratings = make_inputs(args.ratings)
    print(f"{len(ratings):,} ratings, {len(pairs):,} pairs, {len(questions):,} questions, "
          f"{K}-point scale")
    t_loop, loop = timed(lambda: loop_aggregate(ratings, pairs, K), args.loop_runs)
    t_vec, table = timed(lambda: summarise_pairs(ratings, pairs, K), args.runs)
    t_ids, _ = timed(lambda: _pair_codes(ratings, pairs), args.runs)
    check_same(loop, table)  # type: ignore[arg-type]
    t_full, result = timed(lambda: aggregate(ratings, pairs, responses, questions,
                                             scale_points=K, ratings_per_pair=PER_PAIR), 1)
    ratio = t_loop / t_vec
    print(f"plain Python loop (dicts, per rating): {t_loop:8.3f} s")
    print(f"vectorised summarise_pairs:            {t_vec:8.3f} s")
    print(f"  of which pair-id lookup (pyarrow hash): {t_ids:6.3f} s; the rest (un-swap, "
          f"bincounts, frame): {max(t_vec - t_ids, 1e-9):.3f} s")
    print(f"speed-up:                              {ratio:8.1f}x  (target >= 50x: "
          f"{'met' if ratio >= 50 else 'NOT met'})")
    print(f"speed-up without the pair-id lookup:   {t_loop / max(t_vec - t_ids, 1e-9):8.1f}x")
    print(f"whole aggregate() (checks, alpha, rows): {t_full:6.3f} s -> "
          f"{result.stats.kept:,} preference rows, alpha {result.stats.alpha:.3f}, "  # type: ignore[union-attr]
          f"{result.stats.order_balance.balanced_share:.0%} of pairs order-balanced")  # type: ignore[union-attr]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
