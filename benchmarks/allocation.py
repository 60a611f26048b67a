"""Benchmark: crowdpref.allocation against the method's own allocation loop.

    .venv/bin/python benchmarks/allocation.py [--sizes 1000 20000] [--sample 400]

1. Full allocation, R=4 copies, Q=10 per participant, at 1k and 20k items: ``allocate``
   against the method's loop written out here (per participant: sort ALL items by copies
   left, ties random; take the first Q with copies left). Where the loop would need more
   than ``--sample`` participants it is timed on its first ``--sample`` participants and
   extrapolated linearly (every participant re-sorts all N items, so each costs about the
   same); the table says which rows are extrapolated. At 1k it also runs in full, which
   shows how good the extrapolation is.
2. Re-allocation: 10% of the participants drop out and release their whole batch. Timed
   two ways against a full ``allocate`` of the same study: ``AllocationPool.hand_out`` on
   the ledger's pool (the ledger counts released slots as drop-outs happen, so counting is
   not part of the hand-out), and ``reallocate`` on the raw list of released slots (counting
   them included).

``allocate`` and ``reallocate`` times are the best of several runs; the loop runs once.
Targets: speed-up >= 50x at 20k; re-allocating 10% of the slots < 1/10 of a full allocation.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from crowdpref.allocation import AllocationPool, allocate, reallocate  # noqa: E402

COPIES, PER_PARTICIPANT, DROPOUT = 4, 10, 0.10


def method_loop(items: list[str], copies: int, q: int, seed: int,
                max_participants: int | None = None) -> list[list[str]]:
    """The published method, literally: O(P * N log N)."""
    rng = random.Random(seed)
    left = dict.fromkeys(items, copies)
    to_hand_out = len(items) * copies
    batches: list[list[str]] = []
    while to_hand_out and (max_participants is None or len(batches) < max_participants):
        order = sorted(items, key=lambda x: (-left[x], rng.random()))
        batch = []
        for x in order:
            if len(batch) == q:
                break
            if left[x] > 0:
                batch.append(x)
        for x in batch:
            left[x] -= 1
        to_hand_out -= len(batch)
        batches.append(batch)
    return batches


def best_times(fns: Sequence[Callable[[], object]], runs: int,
               min_total: float = 0.5) -> list[float]:
    """Fastest time of each function over at least ``runs`` rounds (more, until each has
    had ``min_total`` seconds, for sub-millisecond calls). The functions take turns within
    a round, so they see the same load on a shared machine; one warm-up call each; garbage
    collection paused, as timeit does."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    gc.collect()
    gc.disable()
    try:
        rounds = 0
        while rounds < runs or (min(map(sum, times)) < min_total and rounds < 10_000):
            for fn, spent in zip(fns, times):
                start = time.perf_counter()
                fn()
                spent.append(time.perf_counter() - start)
            rounds += 1
    finally:
        gc.enable()
    return [min(t) for t in times]


def fmt_s(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:,.0f} µs"
    return f"{seconds * 1000:,.1f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def judged(ok: bool, text: str) -> str:
    return f"[green]{text}[/]" if ok else f"[red]{text} missed[/]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 20000])
    parser.add_argument("--sample", type=int, default=400,
                        help="time at most this many participants of the method's loop")
    parser.add_argument("--runs", type=int, default=15, help="runs of allocate/reallocate")
    args = parser.parse_args()
    console = Console()
    if not console.is_terminal:
        console = Console(width=130)
    console.print(f"[bold]Allocation benchmark[/]: R={COPIES} copies, Q={PER_PARTICIPANT} per "
                  f"participant, Python {sys.version.split()[0]}")

    alloc_table = Table(title="Full allocation: allocate() vs the method's loop")
    for col in ("items", "participants", "method's loop", "allocate()", "speed-up", "target"):
        alloc_table.add_column(col, justify="right")
    realloc_table = Table(title=f"Re-allocation after {DROPOUT:.0%} drop-outs (whole batches "
                                "released) vs a full allocation")
    for col in ("items", "released", "new batches", "pool.hand_out()", "ratio",
                "reallocate(slots)", "ratio", "allocate()", "target"):
        realloc_table.add_column(col, justify="right")
    notes: list[str] = []
    started = time.perf_counter()

    for n in args.sizes:
        items = [f"q{i:06d}" for i in range(n)]
        alloc = allocate(items, COPIES, PER_PARTICIPANT, seed=1)
        assert alloc.counts() == Counter(dict.fromkeys(items, COPIES))
        participants = len(alloc)

        # 10% drop out and release their whole batch; time allocate and both hand-outs
        rng = random.Random(2)
        dropped = rng.sample(range(participants), round(participants * DROPOUT))
        released = [x for p in dropped for x in alloc[p]]
        kept = [x for p in set(range(participants)) - set(dropped) for x in alloc[p]]
        pool = AllocationPool.of(released)
        fast, hand_out, from_slots = best_times(
            [lambda: allocate(items, COPIES, PER_PARTICIPANT, seed=1),
             lambda: pool.hand_out(PER_PARTICIPANT, seed=3),
             lambda: reallocate(released, PER_PARTICIPANT, seed=3)], args.runs)

        sample = min(participants, args.sample)
        start = time.perf_counter()
        partial = method_loop(items, COPIES, PER_PARTICIPANT, seed=1, max_participants=sample)
        loop = (time.perf_counter() - start) * participants / len(partial)
        loop_label = fmt_s(loop)
        if len(partial) < participants:
            loop_label += " *"
            notes.append(f"* {n:,} items: the method's loop was timed on its first {sample} of "
                         f"{participants:,} participants and extrapolated linearly.")
        elif n <= 5000 and participants > 50:
            # a full run: how far off would the linear extrapolation from 50 have been?
            start = time.perf_counter()
            method_loop(items, COPIES, PER_PARTICIPANT, seed=1, max_participants=50)
            estimate = (time.perf_counter() - start) * participants / 50
            notes.append(f"{n:,} items: full loop {fmt_s(loop)}; extrapolated from its first 50 "
                         f"participants it would read {fmt_s(estimate)} "
                         f"({estimate / loop - 1:+.0%}).")
        speedup = loop / fast
        judge = n >= 20000
        alloc_table.add_row(f"{n:,}", f"{participants:,}", loop_label, fmt_s(fast),
                            judged(speedup >= 50, f"{speedup:,.0f}x") if judge
                            else f"{speedup:,.0f}x", ">= 50x" if judge else "")

        result = reallocate(released, PER_PARTICIPANT, seed=3)
        assert pool.hand_out(PER_PARTICIPANT, seed=3) == result
        assert Counter(kept) + result.counts() == Counter(dict.fromkeys(items, COPIES))
        ratios = (hand_out / fast, from_slots / fast)
        realloc_table.add_row(
            f"{n:,}", f"{len(released):,}/{alloc.n_slots:,}", f"{len(result.batches):,}",
            fmt_s(hand_out), judged(ratios[0] < 0.1, f"{ratios[0]:.3f}"),
            fmt_s(from_slots), judged(ratios[1] < 0.1, f"{ratios[1]:.3f}"), fmt_s(fast),
            "< 0.100",
        )

    console.print(alloc_table)
    console.print(realloc_table)
    for note in notes:
        console.print(note)
    console.print(f"allocate/reallocate: best of >= {args.runs} runs, garbage collection paused; the "
                  f"method's loop: one run. "
                  f"Total {time.perf_counter() - started:.1f} s.")


if __name__ == "__main__":
    main()
