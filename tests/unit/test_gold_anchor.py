"""The gold anchor of the rater model (crowdpref.aggregation.reliability, "Gold anchor"): gold
pairs with a known answer decide each rater's sign and scale their slope, so agreement with a
biased majority cannot outweigh being right on gold."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdpref.aggregation import aggregate, fit_raters
from crowdpref.aggregation.reliability import SLOPE_MIN, gold_anchor
from crowdpref.config import AggregationConfig
from crowdpref.errors import CrowdprefError
from tests.fakes.rater_simulation import SimulatedRatings, simulate

GOLD = AggregationConfig(bootstrap_samples=100).model_copy(update={"method": "gold_anchored"})
WEIGHTED = AggregationConfig(method="reliability_weighted", bootstrap_samples=100)


def style_of(sim: SimulatedRatings, raters: pd.DataFrame) -> np.ndarray:
    return raters["rater_key"].astype(object).map(sim.raters.set_index("rater_key")["style"]).to_numpy()


def share_correct(sim: SimulatedRatings, config: AggregationConfig, gold: pd.DataFrame | None) -> float:
    res = aggregate(sim.ratings, sim.pairs, sim.responses, sim.questions, scale_points=8,
                    ratings_per_pair=sim.ratings_per_pair, config=config, gold=gold)
    hq = sim.truth.set_index("response_id")["hidden_quality"]
    ps = res.pair_stats
    q1 = ps["first_response_id"].map(hq).to_numpy(dtype=float)
    q2 = ps["second_response_id"].map(hq).to_numpy(dtype=float)
    first = (ps["chosen_response_id"] == ps["first_response_id"]).fillna(False).to_numpy(dtype=bool)
    right = np.where(first, q1 > q2, q2 > q1).astype(float)
    right = np.where(ps["tie"].to_numpy(dtype=bool), 0.5, right)
    return float(right[q1 != q2].mean())


@pytest.fixture(scope="module")
def backwards() -> SimulatedRatings:
    return simulate(n_pairs=600, ratings_per_pair=3, styles={"backwards": 0.2}, gold_pairs=5, seed=5)


@pytest.fixture(scope="module")
def length_majority() -> SimulatedRatings:
    # more than half the raters follow answer length, which says nothing about quality here
    return simulate(n_pairs=600, ratings_per_pair=5, styles={"length": 0.55}, gold_pairs=5, seed=6)


def test_anchor_is_the_shrunk_net_gold_score():
    c = gold_anchor(np.array([5, 5, 0]), np.array([5, 0, 0]))
    assert c is not None
    assert c[0] > 0.5 and c[1] < -0.5  # right on gold vs wrong on gold
    assert c[2] == pytest.approx(0.0)  # no gold answered: the study's (here net 0) value
    assert gold_anchor(np.zeros(3), np.zeros(3)) is None


def test_anchor_flips_a_backwards_rater(backwards):
    anchored, _ = fit_raters(backwards.ratings, 8, gold=backwards.gold)
    style = style_of(backwards, anchored.frame())
    assert anchored.anchored
    assert (anchored.slope[style == "backwards"] < 0).all()  # flipped: counted mirrored
    assert (anchored.slope[style == "careful"] > 0).all()
    agreement, _ = fit_raters(backwards.ratings, 8)  # anchor disabled: never flipped
    assert not agreement.anchored
    assert (agreement.slope >= SLOPE_MIN).all()
    # flipping uses their ratings instead of discarding them
    assert share_correct(backwards, GOLD, backwards.gold) > share_correct(backwards, WEIGHTED, None)


def test_anchor_down_weights_a_length_swayed_majority(length_majority):
    sim = length_majority
    anchored, _ = fit_raters(sim.ratings, 8, gold=sim.gold)
    style = style_of(sim, anchored.frame())
    w = anchored.slope / anchored.variance
    assert np.median(w[style == "length"]) < 0.3 * np.median(w[style == "careful"])
    # agreement alone rewards the biased majority ...
    agreement, _ = fit_raters(sim.ratings, 8)
    w0 = agreement.slope / agreement.variance
    assert np.median(w0[style == "length"]) > np.median(w0[style == "careful"])
    # ... and makes the data worse than the plain mean; the anchor makes it better
    mean = share_correct(sim, AggregationConfig(bootstrap_samples=100), None)
    assert share_correct(sim, WEIGHTED, None) < mean
    assert share_correct(sim, GOLD, sim.gold) > mean + 0.05


def test_without_gold_the_statistics_say_weighting_rests_on_agreement(backwards):
    res = aggregate(backwards.ratings, backwards.pairs, backwards.responses, backwards.questions,
                    scale_points=8, ratings_per_pair=3, config=GOLD)
    assert res.stats.reliability is not None
    assert res.stats.reliability.weighting == "agreement"
    assert res.stats.decided_by == "mean"  # agreement alone can do worse than the mean
    plain = aggregate(backwards.ratings, backwards.pairs, backwards.responses, backwards.questions,
                      scale_points=8, ratings_per_pair=3, config=AggregationConfig(bootstrap_samples=100))
    pd.testing.assert_frame_equal(res.preferences, plain.preferences)
    assert any("decided by the plain mean" in line for line in res.anomalies)
    with_gold = aggregate(backwards.ratings, backwards.pairs, backwards.responses,
                          backwards.questions, scale_points=8, ratings_per_pair=3, config=GOLD,
                          gold=backwards.gold)
    assert with_gold.stats.reliability.weighting == "gold"
    assert with_gold.stats.decided_by == "gold_anchored"
    assert with_gold.stats.reliability.flipped > 0
    assert with_gold.stats.to_dict()["reliability"]["weighting"] == "gold"


def test_gold_without_its_columns_is_a_one_line_error(backwards):
    with pytest.raises(CrowdprefError, match=r"lacks columns \['passed'\]") as err:
        fit_raters(backwards.ratings, 8, gold=pd.DataFrame({"rater_key": ["x"]}))
    assert "\n" not in str(err.value)


def test_card_says_when_weighting_rests_on_agreement_alone():
    from crowdpref.release.card import weighting_text

    assert "agreement between raters alone (study 2 had no gold pairs)" in weighting_text(
        "gold_anchored", {"weighting": "agreement"}, 0)
    assert "no gold-pair outcomes reached" in weighting_text("gold_anchored", {"weighting": "agreement"}, 3)
    assert "agreement between raters alone" in weighting_text("reliability_weighted", None, 3)
    anchored = weighting_text("gold_anchored", {"weighting": "gold", "flipped": 2}, 3)
    assert "anchored on their gold pairs" in anchored and "2 rater(s)" in anchored


def test_gold_frame_keeps_only_gold_checks():
    from crowdpref.checks import gold_frame

    frame = gold_frame([("p1", "check-g-aaaa", True), ("p1", "check-r-pr_1", False),
                        ("p2", "check-i-bbbb", False), ("p2", "check-g-cccc", False),
                        ("p2", "pr_2", True)])
    assert frame.to_dict("records") == [{"rater_key": "p1", "passed": True},
                                        {"rater_key": "p2", "passed": False}]


def test_the_shipped_gold_pairs_do_not_tie_quality_to_length():
    """A length-swayed rater must fail some shipped gold pairs, or the anchor cannot tell length
    from quality on real data: at least a quarter of them have the good answer as the shorter."""
    from crowdpref.checks import GOLD_PAIRS

    shorter = [g for g in GOLD_PAIRS if len(g.good) < len(g.bad)]
    longer = [g for g in GOLD_PAIRS if len(g.good) > len(g.bad)]
    assert len(shorter) >= len(GOLD_PAIRS) / 4 and longer
