"""Benchmark: how often the chosen answer is truly the better one - plain mean vs
reliability-weighted aggregation vs an oracle that knows every rater's true noise.

    .venv/bin/python benchmarks/aggregation_quality.py [--pairs 2000] [--seeds 3] [--per-rater 60]

Simulated studies (tests/fakes/rater_simulation.py, the simulated crowd's rating rule: hidden
quality difference x 6 + Gaussian noise + position bias, mapped to the 8-point A/B scale with no
neutral point; random clickers pick uniformly) over a grid: rater noise 0.5 / 1 / 2 scale points
(each rater's own sd is that level x exp(Normal(0, 0.5)), so raters differ), share of random
clickers 0 / 0.1 / 0.3, position bias 0 / 0.5 points, R = 3 and 5 ratings per pair; ``--pairs``
pairs per study, raters doing ``--per-rater`` pairs each, display orders counterbalanced per
rating, ``--seeds`` studies per cell. Each study is aggregated with

- mean:     :func:`crowdpref.aggregation.aggregate`, ``aggregation.method: mean``;
- weighted: the same with ``aggregation.method: reliability_weighted`` (the rater model of
            :mod:`crowdpref.aggregation.reliability`, fitted on the study's own ratings, no
            truth);
- oracle:   each un-swapped rating weighted by 1 / its rater's TRUE variance (noise sd squared;
            a random clicker: (K^2 - 1) / 12, the variance of a uniform rating).

Printed per cell: the share of pairs whose chosen answer has the higher hidden quality (a tie
counts half; pairs of two equally good answers left out), averaged over the seeds. Targets:
weighted within 2 points of the oracle in every cell (above it counts as within), and never
more than 1 point below the plain mean.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from crowdpref.aggregation import aggregate, unswap  # noqa: E402
from crowdpref.config import AggregationConfig  # noqa: E402
from tests.fakes.rater_simulation import SimulatedRatings, simulate  # noqa: E402

NOISE = (0.5, 1.0, 2.0)
CLICKERS = (0.0, 0.1, 0.3)
BIAS = (0.0, 0.5)
RATINGS_PER_PAIR = (3, 5)
ORACLE_GAP = 0.02
MEAN_GAP = 0.01


def share_correct(first_chosen: np.ndarray, tie: np.ndarray, q_first: np.ndarray,
                  q_second: np.ndarray) -> float:
    """Share of pairs (truth ties left out) whose chosen answer is truly better; a tie is half."""
    known = q_first != q_second
    right = np.where(first_chosen, q_first > q_second, q_second > q_first).astype(float)
    right = np.where(tie, 0.5, right)
    return float(right[known].mean())


def method_share(sim: SimulatedRatings, method: str, q_first: np.ndarray,
                 q_second: np.ndarray) -> float:
    config = AggregationConfig(method=method, bootstrap_samples=100)  # type: ignore[arg-type]
    res = aggregate(sim.ratings, sim.pairs, sim.responses, sim.questions,
                    scale_points=sim.scale_points, ratings_per_pair=sim.ratings_per_pair,
                    config=config)
    ps = res.pair_stats
    first_chosen = (ps["chosen_response_id"] == ps["first_response_id"]).fillna(False).to_numpy(dtype=bool)
    return share_correct(first_chosen, ps["tie"].to_numpy(dtype=bool), q_first, q_second)


def oracle_share(sim: SimulatedRatings, q_first: np.ndarray, q_second: np.ndarray) -> float:
    k = sim.scale_points
    codes = pd.Index(sim.pairs["pair_id"]).get_indexer(sim.ratings["pair_id"])
    u = unswap(sim.ratings["rating"].to_numpy(), sim.ratings["swapped"].to_numpy(dtype=bool), k)
    variance = sim.raters.set_index("rater_key")["variance"]
    w = 1.0 / sim.ratings["rater_key"].map(variance).to_numpy(dtype=float)
    n = len(sim.pairs)
    mean = np.bincount(codes, weights=w * u, minlength=n) / np.bincount(codes, weights=w, minlength=n)
    midpoint = (k + 1) / 2
    return share_correct(mean < midpoint, mean == midpoint, q_first, q_second)


def run_cell(noise: float, clickers: float, bias: float, r: int, args: argparse.Namespace,
             seed: int) -> dict[str, float]:
    sim = simulate(n_pairs=args.pairs, ratings_per_pair=r, per_rater=args.per_rater, noise=noise,
                   clickers=clickers, position_bias=bias, seed=seed)
    hq = sim.truth.set_index("response_id")["hidden_quality"]
    q_first = sim.pairs["first_response_id"].map(hq).to_numpy(dtype=float)
    q_second = sim.pairs["second_response_id"].map(hq).to_numpy(dtype=float)
    return {"mean": method_share(sim, "mean", q_first, q_second),
            "weighted": method_share(sim, "reliability_weighted", q_first, q_second),
            "oracle": oracle_share(sim, q_first, q_second)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--per-rater", type=int, default=60)
    args = parser.parse_args(argv)
    console = Console(width=150)
    cells = list(itertools.product(RATINGS_PER_PAIR, NOISE, CLICKERS, BIAS))
    rows: list[dict[str, float]] = []
    start = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("simulated studies", total=len(cells) * args.seeds)
        for r, noise, clickers, bias in cells:
            runs = []
            for seed in range(args.seeds):
                runs.append(run_cell(noise, clickers, bias, r, args, 1000 * seed + 17))
                progress.advance(task)
            rows.append({"R": r, "noise": noise, "clickers": clickers, "bias": bias,
                         **{m: float(np.mean([x[m] for x in runs])) for m in runs[0]}})
    table = Table(title=f"Share of pairs whose chosen answer is truly better ({args.pairs} pairs, "
                        f"{args.per_rater} per rater, mean of {args.seeds} seeds)")
    for name in ("R", "noise", "clickers", "bias", "mean", "weighted", "oracle",
                 "weighted - oracle", "weighted - mean", "targets"):
        table.add_column(name, justify="right")
    misses = 0
    for row in rows:
        d_oracle, d_mean = row["weighted"] - row["oracle"], row["weighted"] - row["mean"]
        ok = d_oracle >= -ORACLE_GAP and d_mean >= -MEAN_GAP
        misses += not ok
        table.add_row(str(row["R"]), f"{row['noise']:g}", f"{row['clickers']:g}", f"{row['bias']:g}",
                      f"{row['mean']:.3f}", f"{row['weighted']:.3f}", f"{row['oracle']:.3f}",
                      f"{100 * d_oracle:+.1f} pt", f"{100 * d_mean:+.1f} pt",
                      "met" if ok else "[red]MISSED[/red]")
    console.print(table)
    console.print(f"{len(rows) - misses} of {len(rows)} cells meet both targets (weighted >= oracle "
                  f"- {100 * ORACLE_GAP:g} pt, weighted >= mean - {100 * MEAN_GAP:g} pt); "
                  f"{time.perf_counter() - start:.0f} s")
    return 0 if misses == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
