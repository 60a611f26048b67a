"""The simulation's truth check: how often the chosen answer is the one the simulated crowd
gave the higher hidden quality (:mod:`crowdpref.simulation.crowd`). Only a simulated study has
a truth."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from crowdpref.aggregation.inputs import _require_columns

__all__ = ["TruthCheck", "agreement_with_truth", "check_truth", "truth_by_text"]


@dataclass(frozen=True)
class TruthCheck:
    """How often the chosen answer is the one with the higher hidden quality."""

    share: float
    """Share of compared rows where chosen has the higher hidden quality (NaN if none)."""
    compared: int
    truth_ties: int
    """Rows left out: both answers have the same hidden quality."""
    unknown: int
    """Rows left out: an answer has no hidden quality."""


def _truth_series(truth: pd.DataFrame | pd.Series | Mapping[str, float]) -> pd.Series:
    if isinstance(truth, pd.DataFrame):
        _require_columns(truth, ["response_id", "hidden_quality"], "truth table",
                         "give response_id and hidden_quality columns")
        return truth.drop_duplicates("response_id").set_index("response_id")["hidden_quality"]
    if isinstance(truth, pd.Series):
        return truth
    return pd.Series(dict(truth), dtype=float)


def check_truth(preferences: pd.DataFrame,
                truth: pd.DataFrame | pd.Series | Mapping[str, float]) -> TruthCheck:
    """Compare preference rows with a hidden truth (``response_id -> hidden_quality``)."""
    hq = _truth_series(truth).astype(float)
    chosen = preferences["chosen_response_id"].map(hq).to_numpy(dtype=float)
    rejected = preferences["rejected_response_id"].map(hq).to_numpy(dtype=float)
    known = ~(np.isnan(chosen) | np.isnan(rejected))
    ties = known & (chosen == rejected)
    compared = known & ~ties
    n = int(compared.sum())
    share = float((chosen[compared] > rejected[compared]).mean()) if n else math.nan
    return TruthCheck(share=share, compared=n, truth_ties=int(ties.sum()),
                      unknown=int((~known).sum()))


def agreement_with_truth(preferences: pd.DataFrame,
                         truth: pd.DataFrame | pd.Series | Mapping[str, float]) -> float:
    """Share of preference rows whose chosen answer has the higher hidden quality; rows whose
    answers have equal (or unknown) hidden quality are left out. NaN when nothing is compared.
    ``truth``: a frame with response_id and hidden_quality, a Series or a mapping."""
    return check_truth(preferences, truth).share


def truth_by_text(study1_truth: pd.DataFrame, responses: pd.DataFrame) -> pd.DataFrame:
    """response_id -> hidden_quality from the crowd's study-1 truth file (keyed by username and
    question) by matching (question_id, answer text); ambiguous matches are left out."""
    truth = study1_truth.rename(columns={"item_id": "question_id"})
    truth = truth.drop_duplicates(["question_id", "text"], keep=False)
    merged = responses[["response_id", "question_id", "text"]].merge(
        truth[["question_id", "text", "hidden_quality"]], on=["question_id", "text"], how="inner")
    return merged.drop_duplicates("response_id", keep=False)[["response_id", "hidden_quality"]]
