"""Small, internally consistent study data for aggregation and publishing tests.

:func:`make_study` builds questions, responses, pairs (fixed orientation by id, a seeded default
order) and ratings with the columns of :mod:`crowdpref.contracts`. Every answer has a hidden
quality in [0, 1]; a rating is drawn in the pair's fixed orientation as

    midpoint + gain * (quality(second) - quality(first)) + noise

then shown on the A/B scale (mirrored when the rating is swapped), shifted by ``position_bias``
(negative favours A), rounded and clipped to 1..K. ``random_raters`` replaces every rating by a
uniform draw. The display order is chosen per rating: ``order="counterbalanced"`` (default, as
study 2 does it) alternates it over a pair's raters starting from the pair's default order (2
and 1 for R = 3); ``order="pair"`` shows every rater the pair's default order (the old way).
Every writer and rater has a ``source`` (default "simulated"; a sequence is cycled over the
participants). Everything is deterministic for a seed.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from crowdpref.contracts import PAIRS, PARTICIPANTS, QUESTIONS, RATINGS, RESPONSES, SCREENING_BASE
from crowdpref.ids import stable_id
from crowdpref.runfolder import write_parquet

CATEGORIES = ("empathy", "ethics", "humour", "trust")
BASE_TIME = pd.Timestamp("2025-01-01T00:00:00Z")


@dataclass
class StudyFixture:
    questions: pd.DataFrame
    responses: pd.DataFrame
    pairs: pd.DataFrame
    ratings: pd.DataFrame
    truth: pd.DataFrame  # response_id, hidden_quality
    screening: pd.DataFrame  # contracts.SCREENING_BASE + toxicity
    scale_points: int
    ratings_per_pair: int

    @property
    def midpoint(self) -> float:
        return (self.scale_points + 1) / 2

    def participants(self) -> pd.DataFrame:
        """participants.parquet as the study exports write it: every writer and rater finished,
        no checks, unhurried (60 s per item)."""
        rows = []
        for study, frame, column in (("study1", self.responses, "participant_key"), ("study2", self.ratings, "rater_key")):
            for key, n in frame.groupby(column).size().items():
                rows.append({"participant_key": key, "study": study, "source": "simulated", "status": "complete",
                             "items_assigned": int(n), "items_submitted": int(n), "checks_answered": 0,
                             "checks_passed": 0, "checks_verdict": "none", "median_seconds_per_item": 60.0,
                             "too_fast": False})
        return pd.DataFrame(rows, columns=PARTICIPANTS)

    def write(self, run_dir: Path, *, screening: bool = True, truth: bool = True) -> Path:
        """Write the stage files into ``run_dir`` (truth as private/crowd-truth-responses.parquet)."""
        write_parquet(self.questions, run_dir / "questions.parquet")
        write_parquet(self.responses, run_dir / "responses.parquet")
        write_parquet(self.pairs, run_dir / "pairs.parquet")
        write_parquet(self.ratings, run_dir / "ratings.parquet")
        write_parquet(self.participants(), run_dir / "participants.parquet")
        if screening:
            write_parquet(self.screening, run_dir / "screening.parquet")
        if truth:
            write_parquet(self.truth, run_dir / "private" / "crowd-truth-responses.parquet")
        return run_dir


def make_study(
    n_questions: int = 12,
    responses_per_question: int = 4,
    ratings_per_pair: int = 3,
    scale_points: int = 8,
    *,
    noise: float = 1.0,
    gain: float = 6.0,
    position_bias: float = 0.0,
    random_raters: bool = False,
    pairs_per_rater: int = 10,
    flagged_rate: float = 0.0,
    categories: tuple[str, ...] = CATEGORIES,
    order: Literal["counterbalanced", "pair"] = "counterbalanced",
    source: str | Sequence[str] = "simulated",
    seed: int = 0,
) -> StudyFixture:
    rng = np.random.default_rng(seed)
    sources = np.array([source] if isinstance(source, str) else list(source), dtype=object)
    k = scale_points
    midpoint = (k + 1) / 2

    q_rows, r_rows = [], []
    for qi in range(n_questions):
        text = f"Question {qi} (seed {seed}): how would you handle situation number {qi}?"
        question_id = stable_id("q_", text.lower())
        category = categories[qi % len(categories)]
        q_rows.append({"question_id": question_id, "question": text, "category": category,
                       "source": "bank", "metadata": json.dumps({"n": qi})})
        for ai in range(responses_per_question):
            participant = stable_id("p_", seed, qi, ai, length=12)
            r_rows.append({
                "response_id": stable_id("r_", question_id, participant),
                "question_id": question_id, "category": category,
                "participant_key": participant,
                "source": sources[(qi * responses_per_question + ai) % len(sources)],
                "text": f"Answer {ai} to question {qi}: I would listen first and then explain.",
                "quality": int(rng.integers(1, 6)),
                "submitted_at": BASE_TIME + pd.Timedelta(minutes=qi * 10 + ai),
            })
    questions = pd.DataFrame(q_rows, columns=QUESTIONS)
    responses = pd.DataFrame(r_rows, columns=RESPONSES)
    hidden = rng.uniform(0, 1, len(responses))
    truth = pd.DataFrame({"response_id": responses["response_id"], "hidden_quality": hidden})
    quality = dict(zip(truth["response_id"], hidden))

    p_rows = []
    for question_id, group in responses.groupby("question_id", sort=False):
        for first, second in itertools.combinations(sorted(group["response_id"]), 2):
            swapped = bool(rng.random() < 0.5)
            p_rows.append({
                "pair_id": stable_id("pr_", first, second),
                "question_id": question_id, "category": group["category"].iloc[0],
                "first_response_id": first, "second_response_id": second,
                "response_a_id": second if swapped else first,
                "response_b_id": first if swapped else second,
                "swapped": swapped,
            })
    pairs = pd.DataFrame(p_rows, columns=PAIRS)

    n_pairs, rpp = len(pairs), ratings_per_pair
    pair_idx = np.repeat(np.arange(n_pairs), rpp)
    slot = np.tile(np.arange(rpp), n_pairs)
    q_first = pairs["first_response_id"].map(quality).to_numpy()[pair_idx]
    q_second = pairs["second_response_id"].map(quality).to_numpy()[pair_idx]
    swapped = pairs["swapped"].to_numpy(dtype=bool)[pair_idx]
    if order == "counterbalanced":
        swapped = swapped ^ (slot % 2 == 1)
    latent = midpoint + gain * (q_second - q_first) + rng.normal(0, noise, len(pair_idx))
    shown = np.where(swapped, k + 1 - latent, latent) + position_bias
    rating = np.clip(np.rint(shown), 1, k).astype(np.int64)
    if random_raters:
        rating = rng.integers(1, k + 1, len(pair_idx))
    # slot j of every pair goes to its own block of raters, so no rater sees a pair twice
    rater_idx = (slot * n_pairs + pair_idx) // max(1, min(pairs_per_rater, n_pairs))
    rater_keys = np.array([stable_id("p_", "rater", seed, i, length=12) for i in range(rater_idx.max() + 1)]
                          if len(rater_idx) else [], dtype=object)
    ids = pairs["pair_id"].to_numpy()[pair_idx]
    raters = rater_keys[rater_idx] if len(rater_idx) else np.array([], dtype=object)
    first_ids = pairs["first_response_id"].to_numpy()[pair_idx]
    second_ids = pairs["second_response_id"].to_numpy()[pair_idx]
    ratings = pd.DataFrame({
        "rating_id": [stable_id("rt_", p, r) for p, r in zip(ids, raters)],
        "pair_id": ids,
        "question_id": pairs["question_id"].to_numpy()[pair_idx],
        "response_a_id": np.where(swapped, second_ids, first_ids),
        "response_b_id": np.where(swapped, first_ids, second_ids),
        "swapped": swapped.astype(bool),
        "rater_key": raters,
        "source": sources[rater_idx % len(sources)],
        "rating": rating,
        "submitted_at": BASE_TIME + pd.to_timedelta(np.arange(len(pair_idx)), unit="s"),
    }, columns=RATINGS)

    flagged = rng.random(len(responses)) < flagged_rate
    screening = pd.DataFrame({
        "response_id": responses["response_id"],
        "model": "original",
        "flagged": flagged,
        "flagged_labels": np.where(flagged, "toxicity", ""),
        "toxicity": np.where(flagged, 0.9, 0.01),
    }, columns=[*SCREENING_BASE, "toxicity"])
    return StudyFixture(questions, responses, pairs, ratings, truth, screening, k, rpp)


def ratings_for(fixture: StudyFixture, pair_id: str, values: list[int],
                swapped: Sequence[bool] | None = None, source: str = "simulated") -> pd.DataFrame:
    """Replace the ratings of one pair by ``values`` (on the DISPLAYED A/B scale), each shown in
    the order ``swapped`` gives (default: every rater on the pair's default order)."""
    pair = fixture.pairs.set_index("pair_id").loc[pair_id]
    shown = (np.full(len(values), bool(pair["swapped"])) if swapped is None
             else np.asarray(swapped, dtype=bool))
    first, second = pair["first_response_id"], pair["second_response_id"]
    rows = pd.DataFrame({
        "rating_id": [stable_id("rt_", pair_id, "set", i) for i in range(len(values))],
        "pair_id": pair_id, "question_id": pair["question_id"],
        "response_a_id": np.where(shown, second, first),
        "response_b_id": np.where(shown, first, second),
        "swapped": shown,
        "rater_key": [stable_id("p_", "set", i, length=12) for i in range(len(values))],
        "source": source,
        "rating": np.asarray(values, dtype=np.int64),
        "submitted_at": BASE_TIME,
    }, columns=RATINGS)
    others = fixture.ratings[fixture.ratings["pair_id"] != pair_id]
    return pd.concat([others, rows], ignore_index=True)
