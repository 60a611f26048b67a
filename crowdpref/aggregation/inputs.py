"""The aggregation stage's inputs: the checks that turn bad input into a one-line
:class:`~crowdpref.errors.CrowdprefError` (missing columns, a ``source`` outside
:data:`crowdpref.contracts.SOURCES`, duplicate ids, ratings of unknown pairs or outside 1..K,
pairs of unknown answers or questions, ...), the row lookups they return, and the provenance
counts of the ``source`` column (:func:`source_counts`)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from crowdpref.aggregation.pairs import _codes, _pair_codes, _pick, _take
from crowdpref.contracts import PAIRS, SOURCES
from crowdpref.errors import CrowdprefError

__all__ = ["EXAMPLES", "source_counts"]

EXAMPLES = 3
"""How many ids an error message names."""


def _examples(ids: Collection[Any] | pd.Series | np.ndarray) -> str:
    shown = [str(x) for x in list(ids)[:EXAMPLES]]
    more = ", ..." if len(ids) > EXAMPLES else ""
    return ", ".join(shown) + more


def _require_columns(frame: pd.DataFrame, needed: Collection[str], file: str, fix: str) -> None:
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise CrowdprefError(f"{file} lacks columns {missing}: {fix}")


def source_counts(sources: pd.Series | np.ndarray) -> dict[str, int]:
    """``source -> count`` of the sources present, in :data:`crowdpref.contracts.SOURCES` order
    (values outside it, if any, after them by name)."""
    if not isinstance(sources, pd.Series):
        sources = pd.Series(np.asarray(sources, dtype=object))
    counts = sources.value_counts()
    order = [s for s in SOURCES if s in counts.index]
    order += sorted(str(s) for s in counts.index if s not in SOURCES)
    return {str(s): int(counts[s]) for s in order}


@dataclass
class _Checked:
    codes: np.ndarray  # per rating: row in pairs
    first: np.ndarray  # per pair: row in responses of the first answer
    second: np.ndarray  # per pair: row in responses of the second answer
    question: np.ndarray  # per pair: row in questions


def _check_sources(frame: pd.DataFrame, id_column: str, file: str, what: str, fix: str) -> None:
    """Every row's ``source`` is one of contracts.SOURCES (a missing one is an error too)."""
    bad = ~frame["source"].isin(SOURCES).to_numpy(dtype=bool)
    if bad.any():
        ids = frame[id_column].to_numpy()[bad]
        shown = sorted({str(v) for v in pd.unique(frame["source"].to_numpy(dtype=object)[bad])})
        raise CrowdprefError(
            f"{file} has {int(bad.sum())} {what} whose source is missing or not one of "
            f"{', '.join(SOURCES)} (e.g. {_examples(ids)}: {shown[:EXAMPLES]}): {fix}")


def _check_inputs(ratings: pd.DataFrame, pairs: pd.DataFrame, responses: pd.DataFrame,
                  questions: pd.DataFrame, scale_points: int) -> _Checked:
    """Raise on bad input; return the row lookups every later step needs."""
    _require_columns(questions, ["question_id", "question"], "questions.parquet",
                     "rerun generate-questions")
    _require_columns(responses, ["response_id", "question_id", "source", "text"],
                     "responses.parquet", "rerun collect-responses")
    _require_columns(pairs, PAIRS, "pairs.parquet", "rerun collect-ratings")
    _require_columns(ratings, ["rating_id", "pair_id", "response_a_id", "swapped", "source",
                               "rating"], "ratings.parquet", "rerun collect-ratings")
    _check_sources(responses, "response_id", "responses.parquet", "answers",
                   "re-export the answers (rerun collect-responses)")
    _check_sources(ratings, "rating_id", "ratings.parquet", "ratings",
                   "re-export the ratings (rerun collect-ratings)")
    dup_pairs = pairs["pair_id"][pairs["pair_id"].duplicated()]
    if len(dup_pairs):
        raise CrowdprefError(f"pairs.parquet has {len(dup_pairs)} duplicate pair ids "
                             f"(e.g. {_examples(dup_pairs)}): rebuild the pairs")
    if not ratings["rating_id"].is_unique:
        dup_ratings = ratings["rating_id"][ratings["rating_id"].duplicated()]
        raise CrowdprefError(f"ratings.parquet has {len(dup_ratings)} duplicate rating ids "
                             f"(e.g. {_examples(dup_ratings.unique())}): re-export the ratings")
    codes = _pair_codes(ratings, pairs)
    unknown = codes < 0
    if unknown.any():
        ids = pd.unique(ratings["pair_id"].to_numpy()[unknown])
        raise CrowdprefError(
            f"ratings.parquet has {int(unknown.sum())} ratings for {len(ids)} pairs not in "
            f"pairs.parquet (e.g. {_examples(ids)}): export ratings and pairs from the same study")
    values = pd.to_numeric(ratings["rating"], errors="coerce").to_numpy(dtype=float)
    bad = ~(np.isfinite(values) & (values == np.round(values)) & (values >= 1) & (values <= scale_points))
    if bad.any():
        ids = ratings["rating_id"].to_numpy()[bad]
        shown = ratings["rating"].to_numpy()[bad][:EXAMPLES].tolist()
        raise CrowdprefError(
            f"ratings.parquet has {int(bad.sum())} ratings outside 1..{scale_points} "
            f"(e.g. {_examples(ids)}: {shown}): check study2.scale_points or the export")
    swapped = ratings["swapped"]
    if swapped.isna().any():
        ids = ratings["rating_id"][swapped.isna()]
        raise CrowdprefError(f"ratings.parquet has {len(ids)} ratings without 'swapped' "
                             f"(e.g. {_examples(ids)}): re-export the ratings")
    shown_first = _take(pairs["first_response_id"], codes)
    shown_second = _take(pairs["second_response_id"], codes)
    expected_a = _pick(swapped.to_numpy(dtype=bool), np.ones(len(codes), dtype=bool),
                       shown_second, shown_first)
    wrong = (ratings["response_a_id"].reset_index(drop=True) != expected_a).to_numpy(dtype=bool)
    if wrong.any():
        ids = ratings["rating_id"].to_numpy()[wrong]
        raise CrowdprefError(
            f"ratings.parquet has {int(wrong.sum())} ratings whose response_a_id/swapped do not "
            f"match their pair (e.g. {_examples(ids)}): re-export ratings and pairs together")
    first = _codes(pairs["first_response_id"], responses["response_id"])
    second = _codes(pairs["second_response_id"], responses["response_id"])
    if (first < 0).any() or (second < 0).any():
        absent = pd.unique(np.concatenate([
            pairs["first_response_id"].to_numpy(dtype=object)[first < 0],
            pairs["second_response_id"].to_numpy(dtype=object)[second < 0]]))
        raise CrowdprefError(f"pairs.parquet refers to {len(absent)} answers not in "
                             f"responses.parquet (e.g. {_examples(absent)}): rebuild the pairs")
    question = _codes(pairs["question_id"], questions["question_id"])
    if (question < 0).any():
        absent_q = pd.unique(pairs["question_id"].to_numpy(dtype=object)[question < 0])
        raise CrowdprefError(f"pairs.parquet refers to {len(absent_q)} questions not in "
                             f"questions.parquet (e.g. {_examples(absent_q)}): rebuild the pairs")
    return _Checked(codes, first, second, question)
