"""Pairs for study 2: all pairs or a seeded sample per question, stable ids, a seeded and
recorded A/B order, screened-out answers never paired; plus the simulated raters' position
bias showing up in raw ratings and cancelling once ratings are un-swapped."""

from __future__ import annotations

import statistics

import pandas as pd
import pytest

from crowdpref.config import CrowdConfig
from crowdpref.errors import CrowdprefError
from crowdpref.pairing import make_pairs
from crowdpref.simulation.crowd import SimulatedCrowd


def _responses(per_question: dict[str, int]) -> pd.DataFrame:
    rows = [
        {"response_id": f"r_{q}_{i}", "question_id": q, "category": "empathy", "text": f"answer {i} to {q}"}
        for q, n in per_question.items() for i in range(n)
    ]
    return pd.DataFrame(rows)


def test_all_pairs_stable_ids_and_recorded_orientation():
    result = make_pairs(_responses({"q1": 4, "q2": 4}), "all", seed=3)
    pairs = result.pairs
    assert result.per_question().to_dict() == {"q1": 6, "q2": 6}
    assert pairs["pair_id"].is_unique
    assert (pairs["first_response_id"] < pairs["second_response_id"]).all()
    shown = pairs.apply(lambda p: (p.response_a_id, p.response_b_id), axis=1).tolist()
    fixed = pairs.apply(lambda p: (p.first_response_id, p.second_response_id), axis=1).tolist()
    assert [s if not w else s[::-1] for s, w in zip(shown, pairs["swapped"])] == fixed
    assert 0 < pairs["swapped"].sum() < len(pairs)  # both orders occur
    again = make_pairs(_responses({"q1": 4, "q2": 4}), "all", seed=3).pairs
    pd.testing.assert_frame_equal(pairs, again)  # reproducible
    other = make_pairs(_responses({"q1": 4, "q2": 4}), "all", seed=4).pairs
    assert list(other["pair_id"]) == list(pairs["pair_id"])  # ids do not depend on the seed
    assert list(other["swapped"]) != list(pairs["swapped"])  # the A/B order does


def test_sample_excluded_and_skipped():
    responses = _responses({"q1": 4, "q2": 2, "q3": 1})
    result = make_pairs(responses, 3, seed=1, excluded_response_ids={"r_q2_0"})
    assert result.per_question().to_dict() == {"q1": 3}
    assert result.skipped_questions == {"q2": 1, "q3": 1}
    assert result.excluded_responses == 1
    used = set(result.pairs["first_response_id"]) | set(result.pairs["second_response_id"])
    assert "r_q2_0" not in used


def test_empty_answer_text_is_a_clear_error():
    responses = _responses({"q1": 3})
    responses.loc[1, "text"] = "   "
    with pytest.raises(CrowdprefError, match="1 empty answer texts.*r_q1_1"):
        make_pairs(responses, "all", seed=1)


def test_position_bias_shows_in_raw_ratings_and_cancels_after_unswapping():
    crowd = SimulatedCrowd(CrowdConfig(position_bias=1.5, rater_noise=1.0, random_clicker_rate=0), seed=9)
    pairs = make_pairs(_responses({f"q{i}": 4 for i in range(60)}), "all", seed=2).pairs
    raw, unswapped = [], []
    for pair in pairs.itertuples():
        rating = crowd.rating("rater-1", pair.pair_id, 0.5, 0.5, 8)  # equal quality: only bias + noise
        raw.append(rating)
        unswapped.append(9 - rating if pair.swapped else rating)
    assert statistics.mean(raw) > 5.5  # pushed towards B by the bias
    assert abs(statistics.mean(unswapped) - 4.5) < 0.4  # the seeded A/B order cancels it


def test_ratings_follow_hidden_quality():
    crowd = SimulatedCrowd(CrowdConfig(rater_noise=1.0, random_clicker_rate=0), seed=1)
    better_b = [crowd.rating("r", f"p{i}", 0.2, 0.9, 8) for i in range(300)]
    better_a = [crowd.rating("r", f"p{i}", 0.9, 0.2, 8) for i in range(300)]
    assert statistics.mean(better_b) > 6.5 and statistics.mean(better_a) < 2.5
    assert set(better_a + better_b) <= set(range(1, 9))


def test_pair_count_checks_are_the_configs_one_line_errors():
    from crowdpref.config import parse_study
    from crowdpref.errors import ConfigError

    config = parse_study({"name": "t", "study1": {"questions_per_participant": 2},
                          "study2": {"pairs_per_participant": 5, "remainder": "error"}}, source="t.yaml")
    with pytest.raises(ConfigError, match=r"^t.yaml: study2.pairs_per_participant: 5 distinct pairs per participant, "
                                          r"but only 3 pairs \(in pairs.parquet\)"):
        config.check_pair_count(3)
    with pytest.raises(ConfigError, match=r"^t.yaml: study2.remainder: 21 ratings \(7 pairs x 3\) do not split"):
        config.check_pair_count(7)
    assert config.check_pair_count(5).participants == 3
