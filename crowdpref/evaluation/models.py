"""Small reward models, cheapest first, each a logistic regression WITHOUT intercept on the
difference of the two answers' features (so score(chosen) - score(rejected) decides, and
swapping the answers flips the prediction):

- ``length``: log answer length (characters) only - "the longer (or shorter) answer wins";
- ``tfidf``: TF-IDF of the answer's words and word pairs, plus the same length feature, so it
  can only beat ``length`` with something the words carry beyond length;
- ``embedding``: a frozen sentence-embedding model's vectors plus the length feature, where the
  model is available locally;
- ``position``: the share of the pair's raters who saw an answer as A (the position control).

Each pair is oriented by response id (``first`` = the smaller id, as in pairs.parquet), which
has nothing to do with content, and labelled 1 when the first answer was chosen; training uses
each pair both ways round."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import sparse
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

__all__ = ["Oriented", "Scorer", "fit_embedding", "fit_length", "fit_position", "fit_tfidf", "orient"]

Scorer = Callable[["Oriented"], np.ndarray]
"""A fitted model: oriented pairs -> score difference (positive: the first answer preferred)."""


@dataclass
class Oriented:
    """Pairs in the fixed first/second orientation."""

    first: np.ndarray
    second: np.ndarray
    y: np.ndarray
    """1.0 when the first answer was chosen, else 0.0."""
    question: np.ndarray
    category: np.ndarray
    position: np.ndarray | None
    """Share of the pair's raters who saw the FIRST answer as A, minus 0.5 (0: balanced)."""
    p_chosen: np.ndarray | None
    truth: np.ndarray | None
    """1.0 when the first answer has the higher hidden quality, 0.0 when lower, NaN when equal
    or unknown."""
    prompt: np.ndarray | None = None
    """The question's text (the release's ``prompt``), for the fine-tuned reward model."""

    def take(self, mask: np.ndarray) -> Oriented:
        def sub(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[mask]
        return Oriented(self.first[mask], self.second[mask], self.y[mask], self.question[mask],
                        self.category[mask], sub(self.position), sub(self.p_chosen), sub(self.truth),
                        sub(self.prompt))

    def __len__(self) -> int:
        return len(self.y)


def orient(prefs: pd.DataFrame, ratings: pd.DataFrame | None = None,
           truth: pd.Series | None = None) -> Oriented:
    """Preference rows -> :class:`Oriented`. ``ratings`` (pair_id, response_a_id): what each
    rater saw as A; ``truth``: response_id -> hidden quality."""
    chosen_id = prefs["chosen_response_id"].astype(str).to_numpy()
    rejected_id = prefs["rejected_response_id"].astype(str).to_numpy()
    first_is_chosen = chosen_id <= rejected_id
    chosen = prefs["chosen"].fillna("").astype(str).to_numpy()
    rejected = prefs["rejected"].fillna("").astype(str).to_numpy()
    first_id = np.where(first_is_chosen, chosen_id, rejected_id)
    position = None
    if ratings is not None and len(ratings):
        shown_first = ratings.assign(first=ratings["pair_id"].map(
            pd.Series(first_id, index=prefs["pair_id"].astype(str).to_numpy())))
        shown_first = (shown_first["response_a_id"].astype(str) == shown_first["first"]).astype(float)
        share = shown_first.groupby(ratings["pair_id"].astype(str)).mean()
        position = prefs["pair_id"].astype(str).map(share).fillna(0.5).to_numpy(dtype=float) - 0.5
    truth_first = None
    if truth is not None:
        q_chosen = prefs["chosen_response_id"].astype(str).map(truth).to_numpy(dtype=float)
        q_rejected = prefs["rejected_response_id"].astype(str).map(truth).to_numpy(dtype=float)
        q_first = np.where(first_is_chosen, q_chosen, q_rejected)
        q_second = np.where(first_is_chosen, q_rejected, q_chosen)
        truth_first = np.where(np.isnan(q_first) | np.isnan(q_second) | (q_first == q_second),
                               np.nan, (q_first > q_second).astype(float))
    p_chosen = None
    for column in ("p_chosen", "agreement"):
        if column in prefs.columns and prefs[column].notna().any():
            p_chosen = prefs[column].to_numpy(dtype=float)
            break
    return Oriented(
        first=np.where(first_is_chosen, chosen, rejected),
        second=np.where(first_is_chosen, rejected, chosen),
        y=first_is_chosen.astype(float),
        question=prefs["question_id"].astype(str).to_numpy(),
        category=prefs["category"].astype(str).to_numpy(),
        position=position, p_chosen=p_chosen, truth=truth_first,
        prompt=prefs["prompt"].fillna("").astype(str).to_numpy() if "prompt" in prefs.columns else None)


def _log_length(texts: Sequence[str] | np.ndarray) -> np.ndarray:
    return np.log1p(np.fromiter((len(t) for t in texts), dtype=float, count=len(texts)))


def _length_diff(pairs: Oriented) -> np.ndarray:
    return (_log_length(pairs.first) - _log_length(pairs.second)).reshape(-1, 1)


def _classifier(x: np.ndarray | sparse.spmatrix, y: np.ndarray) -> LogisticRegression:
    """Logistic regression, no intercept, on the pairs both ways round (x, y) and (-x, 1 - y)."""
    both = sparse.vstack([x, -x]).tocsr() if sparse.issparse(x) else np.vstack([x, -x])
    labels = np.concatenate([y, 1.0 - y])
    model = LogisticRegression(C=1.0, fit_intercept=False, max_iter=2000)
    if len(np.unique(labels)) < 2:  # cannot happen with both orientations, kept for safety
        raise ValueError("one class only")
    return model.fit(both, labels)


def _linear(model: LogisticRegression, features: Callable[[Oriented], np.ndarray | sparse.spmatrix]) -> Scorer:
    def score(pairs: Oriented) -> np.ndarray:
        return np.asarray(model.decision_function(features(pairs)), dtype=float)
    return score


def fit_length(train: Oriented, y: np.ndarray | None = None) -> Scorer:
    """Length only: the sign of the fitted weight says whether longer or shorter wins."""
    model = _classifier(_length_diff(train), train.y if y is None else y)
    return _linear(model, _length_diff)


def fit_tfidf(train: Oriented, y: np.ndarray | None = None) -> Scorer:
    """TF-IDF (words and word pairs, sublinear tf, fitted on the training answers only) plus
    the log-length feature."""
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=1, max_features=50_000)
    vectorizer.fit(np.concatenate([train.first, train.second]))

    def features(pairs: Oriented) -> sparse.spmatrix:
        diff = vectorizer.transform(pairs.first) - vectorizer.transform(pairs.second)
        return sparse.hstack([diff, sparse.csr_matrix(_length_diff(pairs))]).tocsr()

    return _linear(_classifier(features(train), train.y if y is None else y), features)


def fit_embedding(train: Oriented, encode: Callable[[list[str]], np.ndarray],
                  y: np.ndarray | None = None) -> Scorer:
    """Frozen sentence embeddings (``encode``: texts -> vectors) plus the log-length feature."""
    def features(pairs: Oriented) -> np.ndarray:
        a = encode(list(pairs.first))
        b = encode(list(pairs.second))
        return np.hstack([np.asarray(a) - np.asarray(b), _length_diff(pairs)])

    return _linear(_classifier(features(train), train.y if y is None else y), features)


def fit_position(train: Oriented, y: np.ndarray | None = None) -> Scorer:
    """Position only: the share of raters who saw the first answer as A (the control)."""
    if train.position is None:
        raise ValueError("no ratings: no position")

    def features(pairs: Oriented) -> np.ndarray:
        assert pairs.position is not None
        return pairs.position.reshape(-1, 1)

    return _linear(_classifier(features(train), train.y if y is None else y), features)
