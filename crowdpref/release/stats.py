"""The numbers the dataset card reports: the stats files other stages left in the run folder
(:func:`read_stats`), counts from the study store (:func:`collection_stats`) and the figures
measured on the data being published (:class:`Facts`, :func:`measure`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from crowdpref.aggregation import order_balance, source_counts
from crowdpref.contracts import SOURCES
from crowdpref.store import Store

__all__ = ["Facts", "collection_stats", "measure", "read_json", "read_stats"]


def read_json(path: Path) -> Any:
    """The JSON value in ``path``; None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_stats(path: Path) -> dict[str, Any] | None:
    """A stats JSON file of the run folder, or None when it is missing or unreadable."""
    data = read_json(path) if path.exists() else None
    return data if isinstance(data, dict) else None


def collection_stats(store: Store, study_name: str) -> dict[str, dict[str, int]]:
    """Counts from the study store per study: participants, drop-outs (participants whose
    unsubmitted work was released), released slots and how many of them later participants
    claimed. Counts only: no username leaves this function."""
    out: dict[str, dict[str, int]] = {}
    for study in ("study1", "study2"):
        info = store.find_collection(study_name, study)
        if info is not None:
            out[study] = store.summary(info.id)
    return out


@dataclass
class Facts:
    """Numbers of this run, measured on the data (never invented)."""

    rows: dict[str, int] = field(default_factory=dict)
    questions: int = 0
    categories: int = 0
    writers: int = 0
    answers: int = 0
    answers_per_question: tuple[int, int] = (0, 0)
    answers_per_writer: tuple[int, int] = (0, 0)
    rated_pairs: int = 0
    raters: int = 0
    ratings: int = 0
    ratings_per_pair: tuple[int, int] = (0, 0)
    ratings_per_rater: tuple[int, int] = (0, 0)
    preference_rows: int = 0
    mean_agreement: float | None = None
    mean_margin: float | None = None
    flagged_chosen: int | None = None
    flagged_rejected: int | None = None
    screened: int | None = None
    flagged: int | None = None
    screening_models: list[str] = field(default_factory=list)
    flagged_per_label: dict[str, int] = field(default_factory=dict)
    answer_sources: dict[str, int] = field(default_factory=dict)
    """Published answers per writer source."""
    rating_sources: dict[str, int] = field(default_factory=dict)
    """Published ratings per rater source."""
    order_balance: dict[str, Any] = field(default_factory=dict)
    """:class:`crowdpref.aggregation.OrderBalance` of the published ratings, as a dict."""
    swapped_share: float | None = None
    """Share of published ratings shown swapped."""

    @property
    def sources(self) -> list[str]:
        """Every source present among answers or ratings (contracts.SOURCES order)."""
        return [s for s in SOURCES if self.answer_sources.get(s) or self.rating_sources.get(s)]


def _span(counts: pd.Series) -> tuple[int, int]:
    return (int(counts.min()), int(counts.max())) if len(counts) else (0, 0)


def measure(frames: dict[str, pd.DataFrame]) -> Facts:
    """The :class:`Facts` of the configurations about to be published (``frames``: name ->
    rows, participant keys not yet replaced by published ids)."""
    f = Facts(rows={name: len(df) for name, df in frames.items()})
    questions, responses = frames["questions"], frames["responses"]
    ratings, prefs = frames["ratings"], frames["default"]
    f.questions = questions["question_id"].nunique()
    f.categories = questions["category"].nunique()
    f.writers = responses["participant_key"].nunique()
    f.answers = len(responses)
    f.answers_per_question = _span(responses.groupby("question_id").size())
    f.answers_per_writer = _span(responses.groupby("participant_key").size())
    f.rated_pairs = ratings["pair_id"].nunique()
    f.raters = ratings["rater_key"].nunique()
    f.ratings = len(ratings)
    f.ratings_per_pair = _span(ratings.groupby("pair_id").size())
    f.ratings_per_rater = _span(ratings.groupby("rater_key").size())
    f.answer_sources = source_counts(responses["source"])
    f.rating_sources = source_counts(ratings["source"])
    codes = pd.factorize(ratings["pair_id"])[0]
    swapped = ratings["swapped"].fillna(False).to_numpy(dtype=bool)
    n_pairs = int(codes.max()) + 1 if len(codes) else 0
    f.order_balance = asdict(order_balance(codes, swapped, n_pairs))
    f.swapped_share = float(swapped.mean()) if len(swapped) else None
    f.preference_rows = len(prefs)
    if len(prefs):
        agreement = pd.to_numeric(prefs["agreement"], errors="coerce").dropna()
        f.mean_agreement = float(agreement.mean()) if len(agreement) else None
        f.mean_margin = float(pd.to_numeric(prefs["margin"], errors="coerce").mean())
        if prefs["chosen_flagged"].notna().any():
            f.flagged_chosen = int(prefs["chosen_flagged"].fillna(False).astype(bool).sum())
            f.flagged_rejected = int(prefs["rejected_flagged"].fillna(False).astype(bool).sum())
    screening = frames.get("screening")
    if screening is not None:
        f.screened = len(screening)
        f.flagged = int(screening["flagged"].fillna(False).astype(bool).sum())
        f.screening_models = sorted({str(m) for m in screening["model"].dropna()})
        labels = (screening.loc[screening["flagged"].fillna(False).astype(bool), "flagged_labels"]
                  .fillna("").astype(str).str.split(","))
        for label in (x.strip() for row in labels for x in row):
            if label:
                f.flagged_per_label[label] = f.flagged_per_label.get(label, 0) + 1
    return f
