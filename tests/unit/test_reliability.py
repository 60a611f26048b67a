"""Rater reliability (crowdpref.aggregation.reliability), reliability-weighted aggregation, the
per-row bootstrap (p_chosen, mean_rating interval) and the Bradley-Terry intervals, on simulated
raters with known noise (tests/fakes/rater_simulation.py)."""

from __future__ import annotations

import time

import choix
import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from crowdpref.aggregation import aggregate, check_truth
from crowdpref.config import AggregationConfig
from crowdpref.contracts import PREFERENCES, RATERS
from crowdpref.errors import CrowdprefError
from crowdpref.aggregation.reliability import RATER_COLUMNS, fit_raters
from crowdpref.uncertainty import bootstrap_pairs, ilsr_batched
from tests.fakes.rater_simulation import SimulatedRatings, simulate
from tests.fakes.study_fixtures import make_study

WEIGHTED = AggregationConfig(method="reliability_weighted")


def run(sim: SimulatedRatings, config: AggregationConfig | None = None,
        ratings: pd.DataFrame | None = None, **kwargs):
    return aggregate(sim.ratings if ratings is None else ratings, sim.pairs, sim.responses,
                     sim.questions, scale_points=sim.scale_points,
                     ratings_per_pair=sim.ratings_per_pair, config=config, **kwargs)


@pytest.fixture(scope="module")
def clicky() -> SimulatedRatings:
    return simulate(n_pairs=2000, noise=1.0, clickers=0.25, position_bias=0.5, seed=5)


# --- the reliability model ----------------------------------------------------------------------
def test_reliability_ranks_honest_raters_by_their_true_noise():
    sim = simulate(n_pairs=2000, noise=1.0, noise_spread=0.6, clickers=0.0, seed=2)
    fit, _ = fit_raters(sim.ratings, sim.scale_points)
    got = fit.frame().merge(sim.raters, on="rater_key", suffixes=("", "_true"))
    rho = spearmanr(got["reliability"], -got["noise_sd_true"]).statistic
    print(f"Spearman(reliability, -true noise sd) over {len(got)} raters: {rho:.3f}")
    assert fit.converged
    assert rho > 0.8


def test_random_clickers_get_low_reliability(clicky):
    fit, _ = fit_raters(clicky.ratings, clicky.scale_points)
    got = fit.frame().merge(clicky.raters, on="rater_key")
    clickers, honest = got[got["clicker"]], got[~got["clicker"]]
    assert len(clickers) >= 15
    print(f"reliability: clickers median {clickers['reliability'].median():.3f} (max "
          f"{clickers['reliability'].max():.3f}), honest median {honest['reliability'].median():.3f}")
    assert clickers["reliability"].median() < 0.1
    assert honest["reliability"].median() > 0.5
    # almost every honest rater is above every clicker but the best one
    assert (honest["reliability"] > clickers["reliability"].quantile(0.9)).mean() > 0.9
    spearman = spearmanr(got["reliability"], -got["variance"]).statistic
    assert spearman > 0.7


def test_reliability_frame_has_the_contract_columns_in_0_1(clicky):
    fit, codes = fit_raters(clicky.ratings, clicky.scale_points)
    frame = fit.frame()
    assert list(frame.columns[:len(RATERS)]) == RATERS
    assert list(frame.columns) == RATER_COLUMNS
    assert frame["rater_key"].is_unique
    assert frame["reliability"].between(0, 1).all()
    assert frame["n_ratings"].sum() == len(clicky.ratings)
    assert (fit.weights(codes) > 0).all()


def test_a_rater_with_a_consistent_position_bias_is_not_penalised():
    sim = simulate(n_pairs=2000, noise=0.7, noise_spread=0.2, clickers=0.0, seed=9)
    before = fit_raters(sim.ratings, sim.scale_points)[0].frame().set_index("rater_key")
    biased_keys = sim.raters["rater_key"].iloc[:10].to_numpy()
    ratings = sim.ratings.copy()
    mine = ratings["rater_key"].isin(biased_keys)
    ratings.loc[mine, "rating"] = np.minimum(ratings.loc[mine, "rating"] + 1, 8)  # push toward B
    after_fit = fit_raters(ratings, sim.scale_points)[0]
    after = after_fit.frame().set_index("rater_key")
    drop = (before.loc[biased_keys, "reliability"] - after.loc[biased_keys, "reliability"]).mean()
    print(f"mean reliability drop of 10 raters pushed 1 point toward B: {drop:.3f}; their "
          f"fitted bias {after.loc[biased_keys, 'bias'].mean():.2f}")
    assert drop < 0.1
    assert after.loc[biased_keys, "bias"].mean() > 0.5


def test_fit_converges_at_the_size_of_the_full_study():
    sim = simulate(n_pairs=6000, noise=1.0, clickers=0.05, seed=3)  # 18k ratings, 300 raters
    start = time.perf_counter()
    fit, _ = fit_raters(sim.ratings, sim.scale_points)
    took = time.perf_counter() - start
    print(f"fit over {len(sim.ratings)} ratings, {len(fit.rater_keys)} raters: {took:.3f} s, "
          f"{fit.iterations} rounds")
    assert fit.converged  # (its time is printed, not asserted: speed belongs in benchmarks/)


# --- reliability-weighted aggregation -----------------------------------------------------------
def test_weighted_aggregation_beats_the_plain_mean_with_random_clickers(clicky):
    plain = check_truth(run(clicky).preferences, clicky.truth).share
    weighted_result = run(clicky, WEIGHTED)
    weighted = check_truth(weighted_result.preferences, clicky.truth).share
    print(f"share of pairs whose chosen answer is truly better, 25% random clickers: "
          f"plain mean {plain:.3f}, reliability-weighted {weighted:.3f}")
    assert weighted > plain + 0.03
    s = weighted_result.stats
    assert s.method == "reliability_weighted"
    assert s.reliability is not None and s.reliability.decisions_changed > 0


def test_default_stays_the_plain_mean_and_reports_raters(clicky):
    res = run(clicky)
    # the default (mean, or gold_anchored, which without gold outcomes falls back to the mean)
    assert res.stats.method in ("mean", "gold_anchored") and res.stats.decided_by == "mean"
    ps = res.pair_stats
    rated = ps["n_ratings"] > 0
    # the decision is the plain mean: chosen is the first response exactly when mean < midpoint
    first = ps.loc[rated & ~ps["tie"], "mean"] < 4.5
    chosen_first = (ps["chosen_response_id"] == ps["first_response_id"])[rated & ~ps["tie"]]
    assert (first == chosen_first).all()
    assert res.raters is not None and list(res.raters.columns[:3]) == RATERS
    assert res.stats.reliability is not None and res.stats.reliability.raters == len(res.raters)
    json_ready = res.stats.to_dict()
    assert json_ready["decided_by"] == "mean" and json_ready["reliability"]["raters"] == len(res.raters)


def test_weighted_rows_are_consistent_with_their_decision(clicky):
    res = run(clicky, WEIGHTED)
    prefs = res.preferences
    assert list(prefs.columns) == PREFERENCES
    assert (prefs["mean_rating"] < 4.5).all()
    assert prefs["margin"].between(0, 1, inclusive="right").all()
    ps = res.pair_stats.set_index("pair_id").loc[prefs["pair_id"]]
    wm = ps["weighted_mean"].to_numpy()
    first_chosen = (prefs["chosen_response_id"].to_numpy() == ps["first_response_id"].to_numpy())
    assert ((wm < 4.5) == first_chosen).all()
    assert np.allclose(prefs["mean_rating"], np.where(first_chosen, wm, 9 - wm))


# --- per-row uncertainty ------------------------------------------------------------------------
def test_bootstrap_p_chosen_is_one_for_unanimous_and_near_half_for_split_pairs():
    # four pairs in the fixed orientation: unanimous strong, split 2-1, a near-tie, 1 vs 8 twice
    values = {0: [1, 1, 1], 1: [2, 3, 7], 2: [4, 5, 4, 5, 4], 3: [1, 8, 1, 8, 8, 1, 2]}
    groups = np.concatenate([[g] * len(v) for g, v in values.items()])
    flat = np.concatenate(list(values.values())).astype(float)
    means = np.array([np.mean(v) for v in values.values()])
    p, low, high = bootstrap_pairs(groups, flat, np.ones(len(flat)), 4, means < 4.5, 8,
                                   samples=4000, level=0.9, seed=1)
    print("p_chosen:", np.round(p, 3), "intervals:", np.round(low, 2), np.round(high, 2))
    assert p[0] == 1.0
    assert 0.6 < p[1] < 0.95
    assert 0.4 < p[2] < 0.8 and 0.4 < p[3] < 0.8
    assert p[0] > p[1] > max(p[2], p[3])
    chosen_first = np.where(means < 4.5, means, 9 - means)
    assert (low <= chosen_first).all() and (chosen_first <= high).all()
    assert low[0] == high[0] == 1.0
    assert (high - low)[3] > (high - low)[1] > 0
    # the same pairs mirrored (the second response chosen): same support, same chosen-first interval
    p2, low2, high2 = bootstrap_pairs(groups, 9 - flat, np.ones(len(flat)), 4, means > 4.5, 8,
                                      samples=4000, level=0.9, seed=1)
    assert np.allclose(p2, p) and np.allclose(low2, low) and np.allclose(high2, high)


def test_bootstrap_interval_is_widened_to_contain_the_statistic():
    # at a narrow level the resamples' middle band often misses the weighted mean itself
    rng = np.random.default_rng(0)
    n = rng.integers(2, 8, 500)
    groups = np.repeat(np.arange(500), n)
    values = rng.integers(1, 9, len(groups)).astype(float)
    weights = rng.choice([1.0, 5.0, 30.0], len(groups))
    point = np.bincount(groups, values * weights) / np.bincount(groups, weights)
    first = point < 4.5
    _, low, high = bootstrap_pairs(groups, values, weights, 500, first, 8, samples=400,
                                   level=0.02, seed=0)
    oriented = np.where(first, point, 9 - point)
    assert (low <= oriented + 1e-12).all() and (oriented <= high + 1e-12).all()


def test_p_chosen_tracks_how_often_the_chosen_answer_is_truly_better(clicky):
    prefs = run(clicky).preferences
    truth = clicky.truth.set_index("response_id")["hidden_quality"]
    correct = (prefs["chosen_response_id"].map(truth).to_numpy()
               > prefs["rejected_response_id"].map(truth).to_numpy())
    sure, unsure = prefs["p_chosen"] >= 0.99, prefs["p_chosen"] < 0.8
    print(f"truly better: {correct[sure].mean():.3f} of {sure.sum()} rows with p_chosen >= 0.99, "
          f"{correct[unsure].mean():.3f} of {unsure.sum()} rows below 0.8")
    assert sure.sum() > 100 and unsure.sum() > 100
    assert correct[sure].mean() > correct[unsure].mean() + 0.1
    assert prefs["p_chosen"].between(0, 1).all()
    assert (prefs["p_chosen"] >= 0.5).mean() > 0.95
    assert (prefs["mean_rating_low"] <= prefs["mean_rating"]).all()
    assert (prefs["mean_rating"] <= prefs["mean_rating_high"]).all()
    assert prefs["mean_rating_low"].ge(1).all() and prefs["mean_rating_high"].le(8).all()


@pytest.mark.parametrize("method", ["mean", "reliability_weighted"])
def test_same_seed_same_rows_whatever_the_rating_order(clicky, method):
    config = AggregationConfig(method=method, bootstrap_samples=200)
    a = run(clicky, config, seed=7).preferences
    shuffled = clicky.ratings.sample(frac=1.0, random_state=1).reset_index(drop=True)
    b = run(clicky, config, ratings=shuffled, seed=7).preferences
    pd.testing.assert_frame_equal(a, b)
    c = run(clicky, config, seed=8).preferences
    assert not np.array_equal(a["p_chosen"].to_numpy(), c["p_chosen"].to_numpy())


def test_interval_level_widens_the_interval(clicky):
    narrow = run(clicky, AggregationConfig(interval_level=0.5, bootstrap_samples=400)).preferences
    wide = run(clicky, AggregationConfig(interval_level=0.95, bootstrap_samples=400)).preferences
    w_narrow = (narrow["mean_rating_high"] - narrow["mean_rating_low"]).mean()
    w_wide = (wide["mean_rating_high"] - wide["mean_rating_low"]).mean()
    assert w_wide > w_narrow


# --- Bradley-Terry intervals --------------------------------------------------------------------
def test_batched_ilsr_matches_choix():
    rng = np.random.default_rng(0)
    wins = rng.integers(0, 4, size=(20, 4, 4)) * (1 - np.eye(4, dtype=np.int64))
    got = ilsr_batched(wins, alpha=0.01)
    for b in range(len(wins)):
        data = [(i, j) for i in range(4) for j in range(4) for _ in range(int(wins[b, i, j]))]
        want = choix.ilsr_pairwise(4, data, alpha=0.01)
        assert np.allclose(got[b], want, atol=1e-6)


def test_bradley_terry_intervals_contain_the_score_and_are_seeded():
    f = make_study(n_questions=12, seed=4)  # 4 answers per question, 6 pairs each
    config = AggregationConfig(bradley_terry=True, bootstrap_samples=300)
    res = aggregate(f.ratings, f.pairs, f.responses, f.questions, scale_points=f.scale_points,
                    ratings_per_pair=f.ratings_per_pair, config=config, seed=3)
    bt = res.bradley_terry
    assert bt is not None and bt["question_id"].nunique() == 12
    fitted = bt.dropna(subset=["bt_score"])
    assert len(fitted) == len(bt)
    assert (fitted["bt_score_low"] <= fitted["bt_score"]).all()
    assert (fitted["bt_score"] <= fitted["bt_score_high"]).all()
    width = fitted["bt_score_high"] - fitted["bt_score_low"]
    assert (width > 0.1).mean() > 0.9
    centre = (fitted["bt_score_high"] + fitted["bt_score_low"]) / 2
    assert np.corrcoef(centre, fitted["bt_score"])[0, 1] > 0.9
    # four times the ratings (each repeated): narrower intervals
    more = pd.concat([f.ratings.assign(rating_id=f.ratings["rating_id"] + f"_{i}") for i in range(4)])
    res4 = aggregate(more, f.pairs, f.responses, f.questions, scale_points=f.scale_points,
                     ratings_per_pair=4 * f.ratings_per_pair, config=config, seed=3)
    assert res4.bradley_terry is not None
    width4 = res4.bradley_terry["bt_score_high"] - res4.bradley_terry["bt_score_low"]
    assert width4.median() < 0.75 * width.median()
    again = aggregate(f.ratings, f.pairs, f.responses, f.questions, scale_points=f.scale_points,
                      ratings_per_pair=f.ratings_per_pair, config=config, seed=3).bradley_terry
    pd.testing.assert_frame_equal(bt, again)


# --- bad input ----------------------------------------------------------------------------------
def test_weighted_without_rater_keys_is_a_one_line_error(clicky):
    with pytest.raises(CrowdprefError) as err:
        run(clicky, WEIGHTED, ratings=clicky.ratings.drop(columns=["rater_key"]))
    message = str(err.value)
    assert "\n" not in message and "rater_key" in message and "aggregation.method: mean" in message


def test_weighted_with_an_empty_rater_key_is_a_one_line_error(clicky):
    ratings = clicky.ratings.copy()
    ratings.loc[[3, 5], "rater_key"] = None
    with pytest.raises(CrowdprefError) as err:
        run(clicky, WEIGHTED, ratings=ratings)
    message = str(err.value)
    assert "\n" not in message and "2 ratings without a rater_key" in message


def test_mean_without_rater_keys_still_aggregates_and_says_why_no_raters(clicky):
    res = run(clicky, ratings=clicky.ratings.drop(columns=["rater_key"]))
    assert res.raters is None and res.stats.reliability is None
    assert any("no rater reliability" in a for a in res.anomalies)
    assert len(res.preferences) > 0
