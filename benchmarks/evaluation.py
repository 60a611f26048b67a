"""Benchmark: the evaluate stage (crowdpref.evaluation) at full size, on the CPU.

Runs by hand (not a test). The data, one of:

- a study's run folder (``preferences.parquet``, ``ratings.parquet`` and, for a simulated crowd,
  ``private/crowd-truth-responses.parquet``), e.g. the one ``benchmarks/full_scale.py --keep``
  leaves under ``<kept>/state/studies/social-reasoning``;
- a release folder or a Hub dataset id (``--release``);
- by default, a synthetic study of the full study's size built here in a few seconds
  (``--questions 1007``): 4 answers per question from the simulated crowd's own phrase banks
  (crowdpref.simulation.crowd.template_answer: a fuller, reasoned answer has a higher hidden
  quality; 10% low-effort, 5% offensive), every pair of a question's answers (6 per question),
  3 ratings per pair by raters who follow the simulated crowd's rule (hidden-quality difference
  x 6 scale points + Gaussian noise, sd 1.5; 5% random clickers; a position bias of 0.5 points
  towards A), with the A/B order counterbalanced per rating as study 2 does.

It runs the stage as the flow does (1,000 bootstrap resamples, 20 shuffled-label models, the
learning curve), then prints the table, the learning curve, the truth line, the wall time of
each part, and each part's time as a ratio of ONE TF-IDF model fitted and scored on the same
split in the same run (the baseline): the stage fits 25 TF-IDF models (1 + 20 shuffled + 4 on
the learning curve), so about 25x the baseline is what the design costs; much more means time
goes elsewhere.

    .venv/bin/python benchmarks/evaluation.py [RUN_FOLDER | --release FOLDER_OR_ID]
                                              [--questions 1007] [--seed 0] [--bootstrap 1000]

Target (issue 35): the CPU path under 5 minutes at full size (about 6,000 pairs) on this
2-core machine.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from crowdpref.config import CrowdConfig
from crowdpref.evaluation import (
    EvalData,
    evaluate,
    from_release,
    from_run_folder,
    markdown,
)
from crowdpref.evaluation import report as report_module
from crowdpref.evaluation.models import fit_tfidf, orient
from crowdpref.simulation.crowd import RATING_SPREAD, template_answer

TARGET_S = 300.0
FULL_ROWS = 6000
"""About the full study's preference rows (6,042): the size the target is for."""
CATEGORIES = ["empathy", "conflict", "ethics", "humour", "grief", "workplace", "family", "friendship",
              "culture", "boundaries"]
NOISE_SD = 1.5
CLICKERS = 0.05
POSITION_BIAS = 0.5


def synthetic(questions: int, seed: int) -> EvalData:
    """A full-size simulated study (see the module docstring), built without a stack."""
    rng = random.Random(seed)
    np_rng = np.random.default_rng(seed)
    crowd = CrowdConfig(low_effort_rate=0.1, offensive_rate=0.05)
    answers: list[dict[str, Any]] = []
    for q in range(questions):
        for a in range(4):
            written = template_answer(rng, crowd)
            answers.append({"response_id": f"r{q:05d}-{a}", "question_id": f"q{q:05d}",
                            "category": CATEGORIES[q % len(CATEGORIES)], "text": written.text,
                            "hidden_quality": written.hidden_quality})
    frame = pd.DataFrame(answers).set_index("response_id")
    prefs, ratings = [], []
    for q in range(questions):
        ids = [f"r{q:05d}-{a}" for a in range(4)]
        for k, (first, second) in enumerate(itertools.combinations(ids, 2)):
            pair_id = f"p{q:05d}-{k}"
            votes_first = 0
            for r in range(3):
                shown_a, shown_b = (first, second) if (r + k) % 2 == 0 else (second, first)
                if np_rng.random() < CLICKERS:
                    a_wins = bool(np_rng.random() < 0.5)
                else:
                    z = (RATING_SPREAD * (frame.at[shown_a, "hidden_quality"] - frame.at[shown_b, "hidden_quality"])
                         + POSITION_BIAS + np_rng.normal(0, NOISE_SD))
                    a_wins = bool(z > 0)
                votes_first += int((shown_a == first) == a_wins)
                ratings.append({"pair_id": pair_id, "response_a_id": shown_a})
            chosen, rejected = (first, second) if votes_first >= 2 else (second, first)
            share = max(votes_first, 3 - votes_first) / 3
            prefs.append({"pair_id": pair_id, "question_id": f"q{q:05d}", "category": frame.at[first, "category"],
                          "prompt": f"Question {q}: how would you respond?",
                          "chosen": frame.at[chosen, "text"], "rejected": frame.at[rejected, "text"],
                          "chosen_response_id": chosen, "rejected_response_id": rejected,
                          "p_chosen": share, "agreement": share})
    return EvalData(pd.DataFrame(prefs), f"synthetic ({questions} questions, seed {seed})",
                    pd.DataFrame(ratings), frame["hidden_quality"].astype(float))


class Timer:
    """Wall time of the evaluation's parts: wraps module-level functions of crowdpref.evaluation.report."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - started
                self.calls[label] += 1

        setattr(owner, name, timed)
        self._undo.append(lambda: setattr(owner, name, original))

    def undo(self) -> None:
        for step in reversed(self._undo):
            step()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_folder", nargs="?", type=Path, help="a study's run folder (default: synthetic)")
    parser.add_argument("--release", help="a release folder or a Hub dataset id instead")
    parser.add_argument("--questions", type=int, default=1007, help="size of the synthetic study")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bootstrap", type=int, default=1000)
    args = parser.parse_args(argv)

    started = time.perf_counter()
    if args.release:
        data = from_release(args.release)
    elif args.run_folder:
        data = from_run_folder(args.run_folder)
    else:
        data = synthetic(args.questions, args.seed)
    load_s = time.perf_counter() - started
    prefs = data.preferences
    print(f"data: {data.source}: {len(prefs)} preference rows, {prefs['question_id'].nunique()} questions, "
          f"{0 if data.ratings is None else len(data.ratings)} ratings, truth "
          f"{'yes' if data.truth is not None else 'no'} (read/built in {load_s:.1f} s)")

    # the baseline, in this run: one TF-IDF model fitted and scored on the stage's own split
    split = report_module.split_by_question(prefs, 0.3, args.seed)
    pairs = orient(prefs, data.ratings, data.truth)
    in_test = np.isin(pairs.question, np.array(split.test))
    started = time.perf_counter()
    fit_tfidf(pairs.take(~in_test))(pairs.take(in_test))
    baseline_s = time.perf_counter() - started

    timer = Timer()
    timer.wrap(report_module, "fit_tfidf", "TF-IDF fits + scoring")
    timer.wrap(report_module, "fit_length", "length fits + scoring")
    timer.wrap(report_module, "fit_position", "position fit + scoring")
    timer.wrap(report_module, "_learning_curve", "learning curve (its fits included)")
    timer.wrap(report_module._Bootstrap, "interval", "bootstrap intervals")
    timer.wrap(report_module, "orient", "orient the pairs")
    try:
        started = time.perf_counter()
        result = evaluate(data, seed=args.seed, bootstrap_samples=args.bootstrap)
        total_s = time.perf_counter() - started
    finally:
        timer.undo()

    print(markdown(result))
    print(f"baseline: one TF-IDF model fitted and scored on {result.train_pairs} + {result.test_pairs} "
          f"pairs: {baseline_s:.2f} s")
    print(f"{'part':42} {'calls':>6} {'seconds':>8} {'x baseline':>11}")
    for label, seconds in sorted(timer.seconds.items(), key=lambda x: -x[1]):
        print(f"{label:42} {timer.calls[label]:6d} {seconds:8.2f} {seconds / baseline_s:10.1f}x")
    print(f"{'whole stage (evaluate())':42} {'':6} {total_s:8.2f} {total_s / baseline_s:10.1f}x")
    met = total_s < TARGET_S
    size = "" if len(prefs) >= FULL_ROWS else f"; NOT full size (under {FULL_ROWS:,} rows): scale it up to compare"
    print(f"target: the CPU path under {TARGET_S / 60:.0f} min at full size: {'MET' if met else 'MISSED'} "
          f"({total_s:.0f} s for {len(prefs)} rows{size})")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
