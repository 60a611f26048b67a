"""Pairs of answers to the same question, for study 2.

From each question's answers: all unordered pairs (4 answers -> 6 pairs) or a seeded sample of
at most ``pairs`` per question. A pair has a fixed orientation (first/second by response id)
and a stable ``pair_id``. ``swapped`` here is only the pair's seeded default order: study 2
chooses the order each RATER sees when they claim the pair, counterbalanced across the pair's
raters (:meth:`crowdpref.store.Store.claim`), and records it per rating in ratings.parquet.
Answers excluded by the screening policy never enter pairs.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Literal

import pandas as pd

from crowdpref.contracts import PAIRS
from crowdpref.errors import CrowdprefError
from crowdpref.ids import stable_id


def _seeded(seed: int, *parts: str) -> random.Random:
    digest = hashlib.sha256("\x1f".join([str(seed), *parts]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


@dataclass
class PairingResult:
    pairs: pd.DataFrame  # contracts.PAIRS
    skipped_questions: dict[str, int] = field(default_factory=dict)  # question_id -> answers available
    excluded_responses: int = 0

    def per_question(self) -> pd.Series:
        return self.pairs.groupby("question_id").size()


def make_pairs(
    responses: pd.DataFrame,
    pairs_per_question: Literal["all"] | int,
    seed: int,
    excluded_response_ids: Collection[str] = (),
) -> PairingResult:
    """Build ``pairs.parquet`` rows from ``responses.parquet`` rows."""
    missing = {"response_id", "question_id", "category", "text"} - set(responses.columns)
    if missing:
        raise CrowdprefError(f"responses.parquet lacks columns {sorted(missing)}: rerun collect-responses")
    empty = responses.loc[responses["text"].fillna("").str.strip() == "", "response_id"].tolist()
    if empty:
        raise CrowdprefError(
            f"responses.parquet has {len(empty)} empty answer texts (e.g. {empty[0]}): "
            "fix or re-collect those answers before pairing"
        )
    kept = responses[~responses["response_id"].isin(set(excluded_response_ids))]
    rows = []
    skipped: dict[str, int] = {}
    for question_id, group in kept.sort_values("response_id").groupby("question_id", sort=True):
        ids = group["response_id"].tolist()
        if len(ids) < 2:
            skipped[str(question_id)] = len(ids)
            continue
        combos = list(itertools.combinations(ids, 2))  # ids sorted: (first, second) is the fixed orientation
        if pairs_per_question != "all" and len(combos) > pairs_per_question:
            combos = sorted(_seeded(seed, "sample", str(question_id)).sample(combos, pairs_per_question))
        category = group["category"].iloc[0]
        for first, second in combos:
            pair_id = stable_id("pr_", first, second)
            swapped = _seeded(seed, "swap", pair_id).random() < 0.5
            rows.append({
                "pair_id": pair_id,
                "question_id": question_id,
                "category": category,
                "first_response_id": first,
                "second_response_id": second,
                "response_a_id": second if swapped else first,
                "response_b_id": first if swapped else second,
                "swapped": swapped,
            })
    for question_id in set(responses["question_id"]) - set(kept["question_id"]):
        skipped.setdefault(str(question_id), 0)
    pairs = pd.DataFrame(rows, columns=PAIRS)
    return PairingResult(pairs, skipped, excluded_responses=len(responses) - len(kept))
