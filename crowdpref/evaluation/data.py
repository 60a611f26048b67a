"""What the evaluation reads: the preference rows (one per decided pair), optionally the single
ratings (for the position control) and the simulated crowd's hidden truth, from a run folder, a
published release folder or a Hub dataset id - and the split of the rows by question."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from crowdpref.errors import CrowdprefError, first_line

__all__ = ["NEEDED", "EvalData", "Split", "from_release", "from_run_folder", "split_by_question"]

NEEDED = ("question_id", "category", "chosen", "rejected", "chosen_response_id",
          "rejected_response_id", "pair_id")
"""Columns of the preferences (the release's default configuration) the evaluation needs."""
RATING_COLUMNS = ("pair_id", "response_a_id")
TRUTH_FILE = "crowd-truth-responses.parquet"


@dataclass
class EvalData:
    """The rows an evaluation runs on."""

    preferences: pd.DataFrame
    """One row per decided pair (:data:`NEEDED` columns, plus ``p_chosen`` / ``agreement`` when
    present)."""
    source: str
    """Where they came from (a path or a Hub id), for the report."""
    ratings: pd.DataFrame | None = None
    """pair_id and response_a_id of every single rating (what each rater saw as A); None: the
    position control is skipped."""
    truth: pd.Series | None = None
    """response_id -> hidden quality (a simulated crowd only)."""


def _check(frame: pd.DataFrame, needed: tuple[str, ...], where: str) -> pd.DataFrame:
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise CrowdprefError(f"{where}: missing column(s) {', '.join(missing)}: evaluate needs "
                             "crowdpref's preference columns (rerun aggregate-ratings, or "
                             "publish the dataset again)")
    if frame.empty:
        raise CrowdprefError(f"{where}: no preference rows: nothing to evaluate (run the "
                             "aggregate-ratings flow on collected ratings first)")
    return frame


def from_run_folder(path: Path) -> EvalData:
    """A study's run folder: ``preferences.parquet`` (required), ``ratings.parquet`` and the
    simulated crowd's ``private/crowd-truth-responses.parquet`` when present."""
    prefs_path = path / "preferences.parquet"
    if not prefs_path.exists():
        raise CrowdprefError(f"{prefs_path}: not found: run the aggregate-ratings flow first")
    prefs = _check(pd.read_parquet(prefs_path), NEEDED, str(prefs_path))
    ratings = None
    if (path / "ratings.parquet").exists():
        frame = pd.read_parquet(path / "ratings.parquet")
        if all(c in frame.columns for c in RATING_COLUMNS):
            ratings = frame[list(RATING_COLUMNS)]
    truth = None
    truth_path = path / "private" / TRUTH_FILE
    if truth_path.exists():
        frame = pd.read_parquet(truth_path)
        if {"response_id", "hidden_quality"} <= set(frame.columns):
            truth = frame.drop_duplicates("response_id").set_index("response_id")["hidden_quality"].astype(float)
    return EvalData(prefs, str(path), ratings, truth)


def from_release(source: str | Path, cache_dir: Path | None = None) -> EvalData:
    """A published release: a folder in Hub layout or a Hub dataset id, loaded with
    ``datasets.load_dataset`` (the default configuration; ``ratings`` too when it has one).
    No truth: a release never carries it."""
    import datasets

    where = str(source)
    cache = None if cache_dir is None else str(cache_dir)
    try:
        prefs = datasets.load_dataset(where, split="train", cache_dir=cache).to_pandas()
    except Exception as exc:  # noqa: BLE001 - any loader failure is one line naming the source
        detail = first_line(exc, 160)
        raise CrowdprefError(f"{where}: cannot load the release ({detail}): give a release "
                             "folder (<run>/release) or a Hub dataset id") from None
    ratings = None
    try:
        names = datasets.get_dataset_config_names(where)
    except Exception:  # noqa: BLE001 - no config list: no position control
        names = []
    if "ratings" in names:
        frame = datasets.load_dataset(where, "ratings", split="train", cache_dir=cache).to_pandas()
        if all(c in frame.columns for c in RATING_COLUMNS):
            ratings = frame[list(RATING_COLUMNS)]
    return EvalData(_check(prefs, NEEDED, where), where, ratings)


@dataclass(frozen=True)
class Split:
    """Which questions train and which test; no question on both sides."""

    train: tuple[str, ...]
    test: tuple[str, ...]
    seed: int
    test_share: float


def split_by_question(prefs: pd.DataFrame, test_share: float, seed: int) -> Split:
    """Hold out ``test_share`` of each category's questions (rounded, at least one from a
    category with two or more questions; categories with one question each are pooled and
    split together), chosen by a
    generator seeded with ``seed``: the same rows and seed always give the same split, and a
    question's pairs all land on one side."""
    train: list[str] = []
    test: list[str] = []
    rng = np.random.default_rng(seed)
    questions = prefs.drop_duplicates("question_id")  # one category per question
    by_category = questions.groupby("category", sort=True)["question_id"].unique()
    groups = [sorted(str(q) for q in qs) for qs in by_category if len(qs) >= 2]
    singles = sorted(str(qs[0]) for qs in by_category if len(qs) == 1)
    if singles:  # categories with one question each are split together
        groups.append(singles)
    for ids in groups:
        order = [ids[i] for i in rng.permutation(len(ids))]
        n_test = 0 if len(ids) < 2 else min(len(ids) - 1, max(1, round(test_share * len(ids))))
        test += order[:n_test]
        train += order[n_test:]
    if not test or not train:
        raise CrowdprefError(f"evaluate: {prefs['question_id'].nunique()} question(s) in "
                             f"{len(by_category)} categor(ies) cannot be split into train and test "
                             "(a category needs two questions): collect more questions")
    return Split(tuple(sorted(train)), tuple(sorted(test)), seed, test_share)
