"""Aggregation: un-swap, chosen/rejected by the mean, margin, ties, incomplete pairs, bad input,
agreement statistics, position bias and the A/B order balance, provenance (``source``), the hidden
truth, and the vectorised path against a plain reference loop."""

from __future__ import annotations

import json
import math
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crowdpref.aggregation import (
    agreement_with_truth,
    aggregate,
    check_truth,
    krippendorff_alpha,
    order_balance,
    summarise_pairs,
    truth_by_text,
    unswap,
)
from crowdpref.config import AggregationConfig
from crowdpref.contracts import PREFERENCES, RATINGS, RESPONSES
from crowdpref.errors import CrowdprefError
from tests.fakes.study_fixtures import StudyFixture, make_study, ratings_for


def run(f: StudyFixture, ratings: pd.DataFrame | None = None, **kwargs):
    kwargs.setdefault("scale_points", f.scale_points)
    kwargs.setdefault("ratings_per_pair", f.ratings_per_pair)
    return aggregate(f.ratings if ratings is None else ratings, f.pairs, f.responses, f.questions,
                     **kwargs)


def pair_with(f: StudyFixture, swapped: bool) -> pd.Series:
    return f.pairs[f.pairs["swapped"] == swapped].iloc[0]


@pytest.fixture(scope="module")
def study() -> StudyFixture:
    return make_study(n_questions=8, seed=3)


# --- orientation, chosen/rejected, margin ---------------------------------------------------
def test_unswap_mirrors_only_swapped_ratings():
    got = unswap(np.array([1, 2, 7, 8, 3]), np.array([False, True, False, True, True]), 8)
    assert got.tolist() == [1, 7, 7, 1, 6]


@pytest.mark.parametrize("swapped", [False, True])
def test_low_displayed_rating_prefers_the_answer_shown_as_a(study, swapped):
    pair = pair_with(study, swapped)
    res = run(study, ratings_for(study, pair.pair_id, [1, 2, 3]))
    row = res.preferences.set_index("pair_id").loc[pair.pair_id]
    assert row.chosen_response_id == pair.response_a_id
    assert row.rejected_response_id == pair.response_b_id
    texts = study.responses.set_index("response_id")["text"]
    assert row.chosen == texts[pair.response_a_id] and row.rejected == texts[pair.response_b_id]
    assert row.mean_rating == pytest.approx(2.0)
    assert row.prompt == study.questions.set_index("question_id").loc[pair.question_id, "question"]


@pytest.mark.parametrize("swapped", [False, True])
def test_high_displayed_rating_prefers_b_and_mean_is_chosen_first(study, swapped):
    pair = pair_with(study, swapped)
    res = run(study, ratings_for(study, pair.pair_id, [6, 7, 8]))
    row = res.preferences.set_index("pair_id").loc[pair.pair_id]
    assert row.chosen_response_id == pair.response_b_id
    assert row.mean_rating == pytest.approx(2.0)  # 9 - 7
    stats = res.pair_stats.set_index("pair_id").loc[pair.pair_id]
    expected_fixed_mean = 2.0 if swapped else 7.0
    assert stats["mean"] == pytest.approx(expected_fixed_mean)


@pytest.mark.parametrize(("values", "margin", "agreement", "spread"), [
    ([1, 1, 1], 1.0, 1.0, 0.0),
    ([2, 3, 4], 1.5 / 3.5, 1.0, math.sqrt(2 / 3)),
    ([1, 4, 6], (4.5 - 11 / 3) / 3.5, 2 / 3, np.std([1, 4, 6])),
    ([3, 5, 6], (14 / 3 - 4.5) / 3.5, 2 / 3, np.std([3, 5, 6])),
])
def test_margin_agreement_spread(study, values, margin, agreement, spread):
    pair = pair_with(study, False)
    res = run(study, ratings_for(study, pair.pair_id, values))
    row = res.preferences.set_index("pair_id").loc[pair.pair_id]
    assert row.margin == pytest.approx(margin)
    assert row.agreement == pytest.approx(agreement)
    assert row.rating_spread == pytest.approx(spread)
    assert row.n_ratings == 3


def test_preferences_follow_the_contract(study):
    res = run(study, screening=study.screening)
    prefs = res.preferences
    assert list(prefs.columns) == PREFERENCES
    assert len(prefs) == len(study.pairs) - res.stats.ties
    assert (prefs["mean_rating"] < study.midpoint).all()
    assert ((prefs["margin"] > 0) & (prefs["margin"] <= 1)).all()
    assert prefs["chosen_flagged"].dtype == bool and prefs["rejected_flagged"].dtype == bool
    assert (prefs["chosen"] != prefs["rejected"]).all()
    assert prefs["pair_id"].tolist() == [p for p in study.pairs["pair_id"] if p in set(prefs["pair_id"])]
    json.dumps(res.stats.to_dict())  # JSON-ready, NaN-free


def test_flags_come_from_screening():
    f = make_study(n_questions=6, flagged_rate=0.4, seed=5)
    res = run(f, screening=f.screening)
    flagged = set(f.screening.loc[f.screening["flagged"], "response_id"])
    prefs = res.preferences
    assert prefs["chosen_flagged"].tolist() == prefs["chosen_response_id"].isin(flagged).tolist()
    assert prefs["rejected_flagged"].tolist() == prefs["rejected_response_id"].isin(flagged).tolist()
    assert prefs["chosen_flagged"].any() or prefs["rejected_flagged"].any()
    assert not run(f).preferences[["chosen_flagged", "rejected_flagged"]].any().any()


def test_drop_policy_excludes_pairs_of_excluded_answers(study):
    gone = study.responses["response_id"].iloc[0]
    res = run(study, excluded_response_ids={gone})
    prefs = res.preferences
    assert gone not in set(prefs["chosen_response_id"]) | set(prefs["rejected_response_id"])
    assert res.stats.excluded_pairs == 3  # 4 answers per question: 3 pairs hold it
    assert res.stats.ratings == len(study.ratings) - 3 * study.ratings_per_pair


# --- ties and incomplete pairs ----------------------------------------------------------------
def test_ties_are_reported_and_left_out(study):
    pair = pair_with(study, True)
    res = run(study, ratings_for(study, pair.pair_id, [4, 5, 3, 6]))
    assert pair.pair_id not in set(res.preferences["pair_id"])
    assert res.ties["pair_id"].tolist() == [pair.pair_id]
    assert res.stats.ties == 1 and res.stats.kept == len(study.pairs) - 1
    assert any("midpoint" in a and pair.pair_id in a for a in res.anomalies)


@pytest.mark.parametrize("policy", ["report_and_keep", "drop"])
def test_incomplete_pairs_follow_the_policy(study, policy):
    pair = pair_with(study, False)
    res = run(study, ratings_for(study, pair.pair_id, [2]), config=AggregationConfig(incomplete_pairs=policy))
    assert res.incomplete["pair_id"].tolist() == [pair.pair_id]
    assert res.stats.incomplete_pairs == 1
    assert any("fewer than 3 ratings" in a for a in res.anomalies)
    prefs = res.preferences.set_index("pair_id")
    if policy == "report_and_keep":
        assert prefs.loc[pair.pair_id, "n_ratings"] == 1
        assert prefs.loc[pair.pair_id, "rating_spread"] == 0
        assert res.stats.kept == len(study.pairs)
    else:
        assert pair.pair_id not in prefs.index
        assert res.stats.incomplete_dropped == 1 and res.stats.kept == len(study.pairs) - 1


def test_unrated_pairs_are_left_out_and_counted(study):
    pair = pair_with(study, False)
    ratings = study.ratings[study.ratings["pair_id"] != pair.pair_id]
    res = run(study, ratings)
    assert pair.pair_id not in set(res.preferences["pair_id"])
    assert res.stats.unrated_pairs == 1 and res.stats.incomplete_pairs == 0
    assert any("no rating" in a for a in res.anomalies)


# --- bad input ----------------------------------------------------------------------------------
def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_ratings_for_unknown_pairs(study):
    ratings = study.ratings.copy()
    ratings.loc[ratings.index[:4], "pair_id"] = "pr_doesnotexist0000"
    with pytest.raises(CrowdprefError) as exc:
        run(study, ratings)
    text = one_line(exc)
    assert "4 ratings" in text and "pr_doesnotexist0000" in text


@pytest.mark.parametrize("bad", [0, 9, 2.5, -1, float("nan")])
def test_ratings_outside_the_scale(study, bad):
    ratings = study.ratings.copy()
    ratings["rating"] = ratings["rating"].astype(float)
    ratings.loc[ratings.index[1], "rating"] = bad
    with pytest.raises(CrowdprefError) as exc:
        run(study, ratings)
    text = one_line(exc)
    assert "outside 1..8" in text and ratings["rating_id"].iloc[1] in text


def test_empty_answer_text_names_the_answer(study):
    responses = study.responses.copy()
    responses.loc[2, "text"] = "   "
    with pytest.raises(CrowdprefError) as exc:
        aggregate(study.ratings, study.pairs, responses, study.questions)
    text = one_line(exc)
    assert "empty answer texts" in text and responses.loc[2, "response_id"] in text


def test_missing_screening_scores_name_the_answers(study):
    screening = study.screening.iloc[1:]
    with pytest.raises(CrowdprefError) as exc:
        run(study, screening=screening)
    text = one_line(exc)
    assert study.screening["response_id"].iloc[0] in text
    assert "run screen-responses again" in text


def test_rating_that_disagrees_with_its_pair_orientation(study):
    ratings = study.ratings.copy()
    ratings.loc[ratings.index[0], "swapped"] = not ratings["swapped"].iloc[0]
    with pytest.raises(CrowdprefError) as exc:
        run(study, ratings)
    assert "do not match their pair" in one_line(exc)


def test_duplicate_rating_ids(study):
    ratings = pd.concat([study.ratings, study.ratings.iloc[:2]], ignore_index=True)
    with pytest.raises(CrowdprefError) as exc:
        run(study, ratings)
    assert "2 duplicate rating ids" in one_line(exc)


def test_pairs_with_unknown_answers_or_questions(study):
    with pytest.raises(CrowdprefError) as exc:
        aggregate(study.ratings, study.pairs, study.responses.iloc[1:], study.questions)
    assert "not in responses.parquet" in one_line(exc)
    with pytest.raises(CrowdprefError) as exc:
        aggregate(study.ratings, study.pairs, study.responses, study.questions.iloc[1:])
    assert "not in questions.parquet" in one_line(exc)


def test_missing_columns(study):
    with pytest.raises(CrowdprefError) as exc:
        aggregate(study.ratings.drop(columns="swapped"), study.pairs, study.responses, study.questions)
    assert "ratings.parquet lacks columns ['swapped']" in one_line(exc)


def test_fixture_frames_follow_the_contracts(study):
    assert list(study.responses.columns) == RESPONSES
    assert list(study.ratings.columns) == RATINGS
    assert set(study.responses["source"]) == set(study.ratings["source"]) == {"simulated"}


@pytest.mark.parametrize(("frame", "fix"), [("ratings", "rerun collect-ratings"),
                                            ("responses", "rerun collect-responses")])
def test_missing_source_column_is_the_contract_error(study, frame, fix):
    """No tolerance for older run folders: ``source`` is part of the contract."""
    frames = {"ratings": study.ratings, "responses": study.responses}
    frames[frame] = frames[frame].drop(columns="source")
    with pytest.raises(CrowdprefError) as exc:
        aggregate(frames["ratings"], study.pairs, frames["responses"], study.questions)
    assert one_line(exc) == f"{frame}.parquet lacks columns ['source']: {fix}"


@pytest.mark.parametrize("bad", ["mturk", None, ""])
def test_source_outside_the_allowed_values(study, bad):
    ratings = study.ratings.astype({"source": object})
    ratings.loc[ratings.index[4], "source"] = bad
    with pytest.raises(CrowdprefError) as exc:
        run(study, ratings)
    text = one_line(exc)
    assert "ratings.parquet has 1 ratings whose source is missing or not one of" in text
    assert "simulated, prolific, invite" in text and ratings["rating_id"].iloc[4] in text
    responses = study.responses.astype({"source": object})
    responses.loc[responses.index[0], "source"] = bad
    with pytest.raises(CrowdprefError) as exc:
        aggregate(study.ratings, study.pairs, responses, study.questions)
    assert responses["response_id"].iloc[0] in one_line(exc)


def test_sources_are_counted_per_answer_and_rating():
    f = make_study(n_questions=6, source=("prolific", "invite", "simulated"), seed=7)
    gone = f.responses["response_id"].iloc[0]
    res = run(f, excluded_response_ids={gone})
    s = res.stats
    assert s.answer_sources == f.responses["source"].value_counts().to_dict()
    assert list(s.answer_sources) == ["simulated", "prolific", "invite"]  # contracts.SOURCES order
    used = f.ratings[~f.ratings["pair_id"].isin(res.pair_stats.loc[res.pair_stats["excluded"], "pair_id"])]
    assert s.rating_sources == used["source"].value_counts().to_dict()
    assert sum(s.rating_sources.values()) == s.ratings < len(f.ratings)
    saved = json.loads(json.dumps(s.to_dict()))
    assert saved["answer_sources"] == s.answer_sources and saved["rating_sources"] == s.rating_sources
    assert run(make_study(n_questions=2, seed=1)).stats.rating_sources == {"simulated": 36}


# --- agreement, position bias, truth --------------------------------------------------------------
def test_alpha_high_for_consistent_raters_and_near_zero_for_random_ones():
    consistent = run(make_study(n_questions=40, noise=0.4, seed=1)).stats.alpha
    random = run(make_study(n_questions=40, random_raters=True, seed=1)).stats.alpha
    assert consistent > 0.85
    assert abs(random) < 0.1


def test_alpha_equals_the_raters_by_pairs_matrix():
    import krippendorff

    f = make_study(n_questions=10, noise=1.5, seed=9)
    ratings = f.ratings.iloc[:-5]  # some pairs with 2 ratings, NaN cells
    u = unswap(ratings["rating"].to_numpy(), ratings["swapped"].to_numpy(), 8)
    matrix = (ratings.assign(u=u).pivot(index="rater_key", columns="pair_id", values="u")
              .to_numpy(dtype=float))
    expected = krippendorff.alpha(reliability_data=matrix, level_of_measurement="ordinal")
    codes = pd.Index(f.pairs["pair_id"]).get_indexer(ratings["pair_id"])
    assert krippendorff_alpha(codes, u, len(f.pairs), 8) == pytest.approx(expected)
    assert run(f, ratings).stats.alpha == pytest.approx(expected)


def test_alpha_undefined_is_nan():
    assert math.isnan(krippendorff_alpha(np.array([0, 1]), np.array([2, 3]), 2, 8))


def test_position_bias_visible_raw_and_cancelled_after_unswapping():
    biased = run(make_study(n_questions=60, position_bias=-1.5, seed=2)).stats.position_bias
    assert biased.raw_shift < -1.0
    assert biased.raw_share_a > 0.6
    assert abs(biased.unswapped_shift) < 0.3
    assert abs(biased.unswapped_share_first - 0.5) < 0.1
    fair = run(make_study(n_questions=60, position_bias=0.0, seed=2)).stats.position_bias
    assert abs(fair.raw_shift) < 0.3


# --- A/B order balance -----------------------------------------------------------------------------
@pytest.mark.parametrize("per_pair", [1, 2, 3, 4, 5])
def test_counterbalanced_study_has_every_pair_balanced(per_pair):
    f = make_study(n_questions=6, ratings_per_pair=per_pair, seed=5)
    res = run(f)
    ob = res.stats.order_balance
    assert (ob.rated_pairs, ob.balanced_pairs, ob.unbalanced_pairs) == (len(f.pairs), len(f.pairs), 0)
    assert ob.balanced_share == 1.0 and ob.max_imbalance == per_pair % 2
    per_pair_swapped = f.ratings.groupby("pair_id")["swapped"].sum()
    assert set(per_pair_swapped) <= {per_pair // 2, (per_pair + 1) // 2}
    assert res.pair_stats["order_balanced"].all()
    assert not any("unbalanced" in a for a in res.anomalies)
    saved = res.stats.to_dict()["order_balance"]
    assert saved == {"rated_pairs": len(f.pairs), "balanced_pairs": len(f.pairs),
                     "unbalanced_pairs": 0, "balanced_share": 1.0, "max_imbalance": per_pair % 2}


def test_same_order_for_every_rater_is_not_balanced():
    same = run(make_study(n_questions=6, order="pair", seed=5))
    ob = same.stats.order_balance
    assert ob.balanced_pairs == 0 and ob.unbalanced_pairs == ob.rated_pairs == 36
    assert ob.balanced_share == 0.0 and ob.max_imbalance == 3
    assert any("36 pairs were shown to their raters in unbalanced A/B orders" in a
               for a in same.anomalies)


def test_one_pair_on_a_single_order_is_named(study):
    pair = pair_with(study, False)
    res = run(study, ratings_for(study, pair.pair_id, [2, 3, 2]))  # all three on one order
    ob = res.stats.order_balance
    assert (ob.unbalanced_pairs, ob.balanced_pairs) == (1, len(study.pairs) - 1)
    stats = res.pair_stats.set_index("pair_id")
    assert stats.loc[pair.pair_id, "n_swapped"] == 0 and not stats.loc[pair.pair_id, "order_balanced"]
    assert any("1 pairs" in a and pair.pair_id in a and "unbalanced" in a for a in res.anomalies)
    fixed = run(study, ratings_for(study, pair.pair_id, [2, 6, 2], swapped=[False, True, False]))
    assert fixed.stats.order_balance.unbalanced_pairs == 0
    assert fixed.pair_stats.set_index("pair_id").loc[pair.pair_id, "mean"] == pytest.approx(7 / 3)


def test_order_balance_leaves_out_unrated_and_unmeasured_pairs():
    codes = np.array([0, 0, 0, 1, 1, 3])
    swapped = np.array([True, True, True, False, True, False])
    ob = order_balance(codes, swapped, 4)
    assert (ob.rated_pairs, ob.balanced_pairs, ob.unbalanced_pairs, ob.max_imbalance) == (3, 2, 1, 3)
    assert ob.balanced_share == pytest.approx(2 / 3)
    assert order_balance(codes, swapped, 4, measured=np.array([False, True, True, True])).unbalanced_pairs == 0
    assert math.isnan(order_balance(np.array([], dtype=int), np.array([], dtype=bool), 2).balanced_share)


@pytest.mark.parametrize("per_pair", [2, 3, 4, 5])
def test_counterbalancing_cancels_an_additive_position_bias_within_each_pair(per_pair):
    """A rater population that pushes every raw rating ``bias`` points toward B: with balanced
    orders each pair's un-swapped mean moves by at most bias / R (0 for an even R); with every
    rater on the same order it moves by the whole bias - only the average over pairs is spared."""
    k, bias = 8, 1
    rng = np.random.default_rng(per_pair)
    shifts = {}
    for order in ("counterbalanced", "pair"):
        f = make_study(n_questions=5, ratings_per_pair=per_pair, order=order, seed=per_pair)
        swapped = f.ratings["swapped"].to_numpy(dtype=bool)
        truth = rng.integers(2, k, len(f.ratings))  # un-swapped, 2..7: the bias never clips
        raw = np.where(swapped, k + 1 - truth, truth)
        fair = summarise_pairs(f.ratings.assign(rating=raw), f.pairs, k)
        biased = summarise_pairs(f.ratings.assign(rating=raw + bias), f.pairs, k)
        shift = biased["mean"].to_numpy() - fair["mean"].to_numpy()
        n, n_swapped = biased["n_ratings"].to_numpy(), biased["n_swapped"].to_numpy()
        assert shift == pytest.approx(bias * (n - 2 * n_swapped) / n)  # the formula
        shifts[order] = shift
    balanced = np.abs(shifts["counterbalanced"])
    assert (balanced <= bias / per_pair + 1e-12).all()
    if per_pair % 2 == 0:
        assert (balanced == 0).all()
    else:
        assert balanced == pytest.approx(np.full(len(balanced), bias / per_pair))
    assert np.abs(shifts["pair"]) == pytest.approx(np.full(len(balanced), bias))


def test_agreement_with_truth_above_chance_with_moderate_noise():
    f = make_study(n_questions=60, noise=1.5, seed=4)
    assert agreement_with_truth(run(f).preferences, f.truth) > 0.75
    r = make_study(n_questions=60, random_raters=True, seed=4)
    assert 0.35 < agreement_with_truth(run(r).preferences, r.truth) < 0.65


def test_agreement_with_truth_leaves_out_ties_and_unknowns():
    prefs = pd.DataFrame({"chosen_response_id": ["a", "b", "c", "d"],
                          "rejected_response_id": ["x", "y", "z", "w"]})
    truth = {"a": 0.9, "x": 0.1, "b": 0.2, "y": 0.8, "c": 0.5, "z": 0.5, "d": 0.3}
    check = check_truth(prefs, truth)
    assert (check.share, check.compared, check.truth_ties, check.unknown) == (0.5, 2, 1, 1)
    frame = pd.DataFrame({"response_id": list(truth), "hidden_quality": list(truth.values())})
    assert agreement_with_truth(prefs, frame) == 0.5
    assert math.isnan(agreement_with_truth(prefs.iloc[2:3], truth))


def test_truth_by_text_maps_study1_truth_to_responses(study):
    study1 = study.responses[["question_id", "text"]].rename(columns={"question_id": "item_id"}).assign(
        username="u", kind="considered", hidden_quality=study.truth["hidden_quality"].to_numpy())
    mapped = truth_by_text(study1, study.responses).set_index("response_id")["hidden_quality"]
    expected = study.truth.set_index("response_id")["hidden_quality"]
    assert mapped.sort_index().equals(expected.sort_index())


def test_bradley_terry_finds_the_best_answer():
    f = make_study(n_questions=20, noise=0.5, seed=6)
    res = run(f, config=AggregationConfig(bradley_terry=True))
    ext = res.bradley_terry_extremes.set_index("question_id")
    truth = f.truth.merge(f.responses[["response_id", "question_id"]])
    best = truth.loc[truth.groupby("question_id")["hidden_quality"].idxmax()].set_index("question_id")
    hits = (ext["best_response_id"] == best["response_id"].reindex(ext.index)).mean()
    assert hits > 0.8
    assert res.stats.bradley_terry_questions == 20
    assert set(res.bradley_terry.groupby("question_id").size()) == {4}
    assert (ext["best_score"] > ext["worst_score"]).all()


# --- vectorised == reference loop -----------------------------------------------------------------
def reference(pairs: pd.DataFrame, ratings: pd.DataFrame, k: int, per_pair: int) -> dict[str, dict]:
    """Plain Python: one rating at a time, then one pair at a time."""
    mid = (k + 1) / 2
    by_pair: dict[str, list[int]] = defaultdict(list)
    for row in ratings.itertuples():
        by_pair[row.pair_id].append(k + 1 - int(row.rating) if row.swapped else int(row.rating))
    out = {}
    for row in pairs.itertuples():
        values = by_pair.get(row.pair_id, [])
        if not values:
            continue
        n = len(values)
        mean = sum(values) / n
        if mean == mid:
            continue
        first = mean < mid
        low = sum(v < mid for v in values)
        out[row.pair_id] = {
            "chosen_response_id": row.first_response_id if first else row.second_response_id,
            "rejected_response_id": row.second_response_id if first else row.first_response_id,
            "mean_rating": mean if first else k + 1 - mean,
            "margin": abs(mean - mid) / (mid - 1),
            "n_ratings": n,
            "agreement": max(low, n - low) / n,
            "rating_spread": math.sqrt(sum((v - mean) ** 2 for v in values) / n),
        }
    return out


def tiny_study(n_pairs: int) -> StudyFixture:
    return make_study(n_questions=max(1, math.ceil(n_pairs / 6)), seed=11)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    k=st.sampled_from([2, 4, 6, 8, 10]),
    per_pair=st.integers(1, 4),
    data=st.data(),
)
def test_vectorised_equals_reference_loop(k, per_pair, data):
    f = tiny_study(12)
    pairs = f.pairs
    n = data.draw(st.integers(0, 40))
    idx = data.draw(st.lists(st.integers(0, len(pairs) - 1), min_size=n, max_size=n))
    values = data.draw(st.lists(st.integers(1, k), min_size=n, max_size=n))
    flip = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    chosen = pairs.iloc[idx].reset_index(drop=True)
    swapped = chosen["swapped"].to_numpy(dtype=bool) ^ np.asarray(flip, dtype=bool)
    ratings = pd.DataFrame({
        "rating_id": [f"rt_{i}" for i in range(n)],
        "pair_id": chosen["pair_id"].to_numpy(),
        "response_a_id": np.where(swapped, chosen["second_response_id"], chosen["first_response_id"]),
        "swapped": swapped,
        "source": "simulated",
        "rating": np.asarray(values, dtype=np.int64),
    })
    res = aggregate(ratings, pairs, f.responses, f.questions, scale_points=k, ratings_per_pair=per_pair)
    want = reference(pairs, ratings, k, per_pair)
    got = res.preferences.set_index("pair_id")
    assert set(got.index) == set(want)
    for pair_id, row in want.items():
        for column, value in row.items():
            if isinstance(value, float):
                assert got.loc[pair_id, column] == pytest.approx(value, abs=1e-12), column
            else:
                assert got.loc[pair_id, column] == value, column
    if len(ratings):
        table = summarise_pairs(ratings, pairs, k).set_index("pair_id")
        assert table["n_ratings"].sum() == n
        n_swapped = ratings.groupby("pair_id")["swapped"].sum()
        assert table["n_swapped"].to_dict() == n_swapped.reindex(table.index, fill_value=0).to_dict()
        balanced = (2 * table["n_swapped"] - table["n_ratings"]).abs() <= 1
        assert table["order_balanced"].tolist() == balanced.tolist()
        measured = res.stats.order_balance
        assert measured.rated_pairs == int((table["n_ratings"] > 0).sum())
        assert measured.balanced_pairs == int((balanced & (table["n_ratings"] > 0)).sum())


def test_object_string_columns_give_the_same_result():
    """pandas' Arrow-backed strings take the pyarrow lookups; plain object columns the pandas
    fallback; both give the same rows and statistics."""
    f = make_study(n_questions=10, flagged_rate=0.3, seed=12)
    as_object = [frame.astype({c: object for c in frame.columns if frame[c].dtype == "str"})
                 for frame in (f.ratings, f.pairs, f.responses, f.questions, f.screening)]
    assert (as_object[0]["pair_id"].dtype == object) and (f.ratings["pair_id"].dtype == "str")
    ratings, pairs, responses, questions, screening = as_object
    excluded = {f.responses["response_id"].iloc[5]}
    arrow = run(f, screening=f.screening, excluded_response_ids=excluded)
    plain = aggregate(ratings, pairs, responses, questions, screening=screening,
                      excluded_response_ids=excluded)
    pd.testing.assert_frame_equal(arrow.preferences.astype(object), plain.preferences.astype(object))
    assert arrow.stats.to_dict() == plain.stats.to_dict()
