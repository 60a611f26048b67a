"""Length bias (crowdpref.aggregation.bias): the figures on constructed data with a known answer."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from crowdpref.aggregation import aggregate, describe_length_bias, length_bias
from tests.fakes.study_fixtures import make_study

M = 4.5  # midpoint of the 8-point scale


def test_share_of_longer_chosen_counts_decided_pairs_whose_lengths_differ():
    # 10 decided pairs with different lengths: the longer answer chosen in 7 of them;
    # one pair of equal lengths and one undecided pair are left out
    first = np.array([10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 50, 10], dtype=float)
    second = np.array([20, 10, 40, 30, 60, 50, 80, 70, 100, 90, 50, 30], dtype=float)
    longer_first = first > second
    chosen_longer = np.array([1, 1, 1, 1, 1, 1, 1, 0, 0, 0], dtype=bool)
    first_chosen = np.concatenate([np.where(chosen_longer, longer_first[:10], ~longer_first[:10]),
                                   [True, True]])
    decided = np.array([True] * 11 + [False])
    mean = np.where(first_chosen, 3.0, 6.0)
    lb = length_bias(first, second, mean, decided, first_chosen, M, seed=1)
    assert lb.decided_pairs == 10
    assert lb.longer_chosen == 7
    assert lb.longer_chosen_share == pytest.approx(0.7)
    assert lb.longer_chosen_low <= 0.7 <= lb.longer_chosen_high
    assert lb.longer_chosen_low < lb.longer_chosen_high
    again = length_bias(first, second, mean, decided, first_chosen, M, seed=1)
    assert again == lb  # seeded: the same interval every time


def test_slope_of_the_mean_rating_on_the_length_difference_is_recovered():
    rng = np.random.default_rng(0)
    first = rng.integers(50, 500, 400).astype(float)
    second = rng.integers(50, 500, 400).astype(float)
    d = (second - first) / (second + first)
    mean = M + 2.0 * d + rng.normal(0, 0.3, 400)  # 2 points per unit of d, plus noise
    decided = np.ones(400, dtype=bool)
    lb = length_bias(first, second, mean, decided, mean < M, M, seed=0)
    assert lb.slope == pytest.approx(2.0, abs=0.15)
    assert lb.slope_low < 2.0 < lb.slope_high
    assert lb.longer_chosen_share > 0.8
    flat = length_bias(first, second, M + rng.normal(0, 0.3, 400), decided, mean < M, M, seed=0)
    assert flat.slope_low < 0 < flat.slope_high  # no dependence: the interval holds 0


def test_no_pairs_gives_nan_not_an_error():
    empty = np.array([], dtype=float)
    lb = length_bias(empty, empty, empty, empty.astype(bool), empty.astype(bool), M)
    assert lb.decided_pairs == 0 and math.isnan(lb.longer_chosen_share) and math.isnan(lb.slope)
    assert "n/a" in describe_length_bias(lb)


@pytest.mark.parametrize("pad", ["chosen", "rejected"])
def test_aggregate_reports_length_bias_in_aggregation_json(pad):
    f = make_study(n_questions=8, seed=3)
    first = aggregate(f.ratings, f.pairs, f.responses, f.questions, scale_points=8,
                      ratings_per_pair=f.ratings_per_pair)
    prefs = first.preferences
    # every answer gets the same base length; one side of each preference row is made longer.
    # Answers shared by several pairs may be chosen in one and rejected in another, so measure
    # on pairs whose padded answer is padded consistently
    side = set(prefs[f"{pad}_response_id"]) - set(prefs["rejected_response_id" if pad == "chosen"
                                                          else "chosen_response_id"])
    responses = f.responses.copy()
    responses["text"] = ["x" * 100 + ("y" * 100 if rid in side else "")
                         for rid in responses["response_id"]]
    result = aggregate(f.ratings, f.pairs, responses, f.questions, scale_points=8,
                       ratings_per_pair=f.ratings_per_pair)
    lb = result.stats.length_bias
    assert lb is not None and lb.decided_pairs > 0
    assert lb.longer_chosen_share == (1.0 if pad == "chosen" else 0.0)
    assert (lb.slope > 0) == (pad == "chosen")
    stored = json.loads(json.dumps(result.stats.to_dict()))["length_bias"]
    assert stored["longer_chosen_share"] == lb.longer_chosen_share
    assert "position_bias" in result.stats.to_dict()  # reported next to it


def test_card_rows_word_length_as_a_measurement_of_the_crowd():
    from crowdpref.release.card import _length_rows

    rows = _length_rows({"longer_chosen_share": 0.61, "longer_chosen_low": 0.58,
                         "longer_chosen_high": 0.64, "decided_pairs": 900, "slope": 1.2,
                         "slope_low": 0.9, "slope_high": 1.5, "interval_level": 0.9})
    assert len(rows) == 2
    assert all("of this crowd" in label for label, _ in rows)
    assert rows[0][1] == "0.61 (0.58 to 0.64) of 900"
    assert rows[1][1] == "1.2 (0.9 to 1.5)"
    assert "not measured" in _length_rows(None)[0][1]
