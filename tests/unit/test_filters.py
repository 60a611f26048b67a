"""The preregistered filters (crowdpref.filters): each rule leaves out exactly the participants it
names, with their answers, the ratings of pairs holding those answers and the ratings of removed
raters; overlaps are counted per rule and once in the totals; the rules are recorded once in
the study store and changed rules are refused.

The hand-made study: one question, five writers (one answer each), four pairs, five raters, 12
ratings. Who is who:

    writers  w_ok   ok                  raters  r_ok   ok (reliability 0.9)
             w_fail failed checks               r_fail failed checks (0.6)
             w_fast too fast                    r_fast too fast AND released (0.7)
             w_both failed AND too fast         r_low  ok, reliability 0.2
             w_gone released (returned)         r_ok2  ok, no reliability value

    pairs    p1 = a_ok / a_gone   rated by r_ok, r_fail, r_low
             p2 = a_ok / a_fail   rated by r_ok, r_ok2, r_fast
             p3 = a_fast / a_gone rated by r_ok2, r_ok, r_low
             p4 = a_both / a_ok   rated by r_ok, r_ok2, r_fail
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crowdpref import contracts
from crowdpref.participants import NO_ONBOARDING
from crowdpref.aggregation import aggregate
from crowdpref.config import FiltersConfig, parse_study
from crowdpref.errors import CrowdprefError
from crowdpref.filters import (
    FILTERED_BY,
    apply_filters,
    canonical_rules,
    check_preregistered,
    meta_key,
    preregister,
)
from crowdpref.store import Store

T0 = 1_767_607_200.0  # 2026-01-05 10:00:00 UTC

WRITERS = {  # key: (status, checks_verdict, too_fast)
    "w_ok": ("complete", "passed", False),
    "w_fail": ("complete", "failed", False),
    "w_fast": ("complete", "passed", True),
    "w_both": ("complete", "failed", True),
    "w_gone": ("released", "unanswered", False),
}
RATERS = {
    "r_ok": ("complete", "passed", False),
    "r_fail": ("complete", "failed", False),
    "r_fast": ("released", "passed", True),
    "r_low": ("complete", "passed", False),
    "r_ok2": ("complete", "none", None),  # too_fast unknown (nothing timed): not too fast
}
RELIABILITY = {"r_ok": 0.9, "r_fail": 0.6, "r_fast": 0.7, "r_low": 0.2, "r_ok2": float("nan")}
PAIRS = {"p1": ("a_ok", "a_gone", ["r_ok", "r_fail", "r_low"]),
         "p2": ("a_ok", "a_fail", ["r_ok", "r_ok2", "r_fast"]),
         "p3": ("a_fast", "a_gone", ["r_ok2", "r_ok", "r_low"]),
         "p4": ("a_both", "a_ok", ["r_ok", "r_ok2", "r_fail"])}


def participants() -> pd.DataFrame:
    rows = []
    for study, group in (("study1", WRITERS), ("study2", RATERS)):
        for key, (status, verdict, fast) in group.items():
            rows.append({"participant_key": key, "study": study, "source": "simulated",
                         "status": status, "items_assigned": 4, "items_submitted": 4,
                         "checks_answered": 1, "checks_passed": int(verdict == "passed"),
                         "checks_verdict": verdict, "median_seconds_per_item": 30.0,
                         "too_fast": fast, **NO_ONBOARDING})
    return pd.DataFrame(rows)[contracts.PARTICIPANTS]


def responses() -> pd.DataFrame:
    return pd.DataFrame([{
        "response_id": "a_" + w.removeprefix("w_"), "question_id": "q1", "category": "empathy",
        "participant_key": w, "source": "simulated", "text": f"answer of {w}", "quality": 4,
        "submitted_at": pd.Timestamp("2026-01-05", tz="UTC")} for w in WRITERS])[contracts.RESPONSES]


def pairs() -> pd.DataFrame:
    return pd.DataFrame([{
        "pair_id": p, "question_id": "q1", "category": "empathy", "first_response_id": a,
        "second_response_id": b, "response_a_id": a, "response_b_id": b, "swapped": False}
        for p, (a, b, _) in PAIRS.items()])[contracts.PAIRS]


def ratings() -> pd.DataFrame:
    rows = []
    for p, (a, b, raters) in PAIRS.items():
        for i, r in enumerate(raters):
            swapped = i == 1
            rows.append({"rating_id": f"{p}-{r}", "pair_id": p, "question_id": "q1",
                         "response_a_id": b if swapped else a, "response_b_id": a if swapped else b,
                         "swapped": swapped, "rater_key": r, "source": "simulated",
                         "rating": 7 if swapped else 2,
                         "submitted_at": pd.Timestamp("2026-01-06", tz="UTC")})
    return pd.DataFrame(rows)[contracts.RATINGS]


def raters() -> pd.DataFrame:
    return pd.DataFrame([{"rater_key": r, "n_ratings": 2, "reliability": v}
                         for r, v in RELIABILITY.items()])[contracts.RATERS]


def run(rules: FiltersConfig, **kwargs: object):
    args = {"participants": participants(), "responses": responses(), "ratings": ratings(),
            "raters": raters(), **kwargs}
    return apply_filters(rules, args["participants"], args["responses"], args["ratings"],
                         args["raters"])


def only(rule: str, **value: object) -> FiltersConfig:
    off = {"failed_checks": False, "too_fast": False, "incomplete": False, "min_reliability": None}
    return FiltersConfig(**{**off, rule: value.get("value", True)})


def removed_ratings(result) -> set[str]:
    raw = result.ratings_raw
    return set(raw.loc[raw[FILTERED_BY] != "", "rating_id"])


def removed_answers(result) -> set[str]:
    raw = result.responses_raw
    return set(raw.loc[raw[FILTERED_BY] != "", "response_id"])


def counts(result, rule: str) -> tuple[int, int, int, int]:
    row = next(c for c in result.report.per_rule if c.rule == rule)
    return row.participants_study1, row.participants_study2, row.answers, row.ratings


# --- each rule alone ---------------------------------------------------------------------------
def test_failed_checks_removes_its_writers_answers_the_pairs_ratings_and_its_raters() -> None:
    result = run(only("failed_checks"))
    assert removed_answers(result) == {"a_fail", "a_both"}
    # r_fail's own ratings, plus every rating of p2 (a_fail) and p4 (a_both)
    assert removed_ratings(result) == {"p1-r_fail", "p2-r_ok", "p2-r_ok2", "p2-r_fast",
                                       "p4-r_ok", "p4-r_ok2", "p4-r_fail"}
    assert counts(result, "failed_checks") == (2, 1, 2, 7)
    row = result.report.per_rule[0]
    assert (row.ratings_by_removed_raters, row.ratings_of_removed_answers) == (2, 6)
    assert set(result.ratings["rating_id"]) == {f"{p}-{r}" for p, (_, _, rs) in PAIRS.items()
                                                for r in rs} - removed_ratings(result)
    assert set(result.responses["response_id"]) == {"a_ok", "a_fast", "a_gone"}
    assert FILTERED_BY not in result.ratings.columns and FILTERED_BY not in result.responses.columns


def test_too_fast_removes_only_the_participants_flagged_too_fast() -> None:
    result = run(only("too_fast"))
    assert removed_answers(result) == {"a_fast", "a_both"}
    assert removed_ratings(result) == {"p2-r_fast", "p3-r_ok2", "p3-r_ok", "p3-r_low",
                                       "p4-r_ok", "p4-r_ok2", "p4-r_fail"}
    assert counts(result, "too_fast") == (2, 1, 2, 7)  # r_ok2 (too_fast unknown) is kept


def test_incomplete_removes_released_participants() -> None:
    result = run(only("incomplete"))
    assert removed_answers(result) == {"a_gone"}
    assert removed_ratings(result) == {"p1-r_ok", "p1-r_fail", "p1-r_low", "p2-r_fast",
                                       "p3-r_ok2", "p3-r_ok", "p3-r_low"}
    assert counts(result, "incomplete") == (1, 1, 1, 7)


def test_min_reliability_removes_raters_strictly_below_and_keeps_unscored_raters() -> None:
    result = run(only("min_reliability", value=0.5))
    assert removed_answers(result) == set()
    assert removed_ratings(result) == {"p1-r_low", "p3-r_low"}
    assert counts(result, "min_reliability") == (0, 1, 0, 2)
    assert next(c for c in result.report.per_rule if c.rule == "min_reliability").setting == "below 0.5"
    at_threshold = run(only("min_reliability", value=0.2))  # 0.2 is not below 0.2
    assert removed_ratings(at_threshold) == set()
    everyone_but_best = run(only("min_reliability", value=0.95))
    assert {r.split("-")[1] for r in removed_ratings(everyone_but_best)} == {
        "r_ok", "r_fail", "r_fast", "r_low"}  # r_ok2 has no value: kept


def test_rules_off_remove_nothing_even_without_participants_file() -> None:
    off = FiltersConfig(failed_checks=False, too_fast=False, incomplete=False)
    for result in (run(off), run(off, participants=None, raters=None)):
        assert (result.responses_raw[FILTERED_BY] == "").all()
        assert (result.ratings_raw[FILTERED_BY] == "").all()
        assert len(result.responses) == 5 and len(result.ratings) == 12
        assert all(c.participants == c.answers == c.ratings == 0 and not c.on
                   for c in [*result.report.per_rule, result.report.total])
    assert run(off, participants=None, raters=None).report.participants_file is False


# --- several rules: overlap and union ---------------------------------------------------------
def test_overlapping_rules_count_per_rule_and_once_in_the_total() -> None:
    result = run(FiltersConfig())  # the defaults: failed_checks and too_fast
    assert counts(result, "failed_checks") == (2, 1, 2, 7)
    assert counts(result, "too_fast") == (2, 1, 2, 7)
    assert counts(result, "incomplete") == (0, 0, 0, 0)  # off: counts nothing
    total = result.report.total
    # w_both is named by both rules but counted once: w_fail, w_fast, w_both + r_fail, r_fast
    assert (total.participants_study1, total.participants_study2, total.participants) == (3, 2, 5)
    assert (total.answers, total.ratings) == (3, 10)
    assert removed_ratings(result) == {"p1-r_fail"} | {f"{p}-{r}" for p in ("p2", "p3", "p4")
                                                       for r in PAIRS[p][2]}
    assert result.report.answers_before == 5 and result.report.answers_after == 2
    assert result.report.ratings_before == 12 and result.report.ratings_after == 2
    by = result.ratings_raw.set_index("rating_id")[FILTERED_BY]
    assert by["p4-r_fail"] == "failed_checks,too_fast"  # a_both and r_fail
    assert by["p2-r_fast"] == "failed_checks,too_fast"  # a_fail (failed) and r_fast (too fast)
    assert by["p1-r_fail"] == "failed_checks" and by["p1-r_ok"] == ""
    answers = result.responses_raw.set_index("response_id")[FILTERED_BY]
    assert answers.to_dict() == {"a_ok": "", "a_fail": "failed_checks", "a_fast": "too_fast",
                                 "a_both": "failed_checks,too_fast", "a_gone": ""}
    assert len(result.ratings_raw) == 12 and len(result.responses_raw) == 5


def test_kept_pairs_and_aggregation_on_the_filtered_data() -> None:
    with pytest.raises(CrowdprefError, match="remove every one of the 12 ratings"):
        run(FiltersConfig(incomplete=True, min_reliability=0.5))  # every pair holds a removed answer
    result = run(FiltersConfig())
    kept = result.kept_pairs(pairs())
    assert kept["pair_id"].tolist() == ["p1"]
    questions = pd.DataFrame({"question_id": ["q1"], "question": ["How?"], "category": ["empathy"],
                              "source": ["bank"], "metadata": ["{}"]})
    out = aggregate(result.ratings, kept, result.responses, questions, scale_points=8,
                    ratings_per_pair=3)
    assert out.preferences["pair_id"].tolist() == ["p1"]
    assert out.preferences["n_ratings"].tolist() == [2]  # p1-r_fail left out
    assert out.stats.ratings == 2


def test_report_is_json_ready() -> None:
    data = json.loads(json.dumps(run(FiltersConfig(min_reliability=0.5)).report.to_dict()))
    assert data["rules"] == {"failed_checks": True, "too_fast": True, "incomplete": False,
                             "min_reliability": 0.5}
    assert [r["rule"] for r in data["per_rule"]] == ["failed_checks", "too_fast", "incomplete",
                                                     "min_reliability"]
    assert data["total"]["ratings"] == 11 and data["preregistered"] is None  # + p1-r_low


def test_unlisted_participants_are_reported() -> None:
    people = participants()
    result = run(FiltersConfig(), participants=people[people["participant_key"] != "w_ok"])
    assert result.report.unlisted_writers == 1 and result.report.unlisted_raters == 0
    assert result.warnings and "\n" not in result.warnings[0]


# --- bad input -------------------------------------------------------------------------------
def test_missing_participants_file_with_rules_on_is_a_one_line_error() -> None:
    with pytest.raises(CrowdprefError) as info:
        run(FiltersConfig(), participants=None)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("participants.parquet not found")
    assert "filters.failed_checks, filters.too_fast" in msg and "set" in msg
    assert "filters.incomplete" not in msg


def test_min_reliability_without_raters_file_is_a_one_line_error() -> None:
    with pytest.raises(CrowdprefError, match=r"^raters\.parquet not found.*filters\.min_reliability") as info:
        run(only("min_reliability", value=0.5), raters=None)
    assert "\n" not in str(info.value)
    run(FiltersConfig(), raters=None)  # not needed when min_reliability is off


@pytest.mark.parametrize(("frame", "drop", "rules", "needle"), [
    ("participants", "checks_verdict", FiltersConfig(), "participants.parquet: missing column(s) checks_verdict"),
    ("participants", "too_fast", FiltersConfig(), "participants.parquet: missing column(s) too_fast"),
    ("participants", "status", FiltersConfig(incomplete=True), "participants.parquet: missing column(s) status"),
    ("participants", "study", FiltersConfig(), "participants.parquet: missing column(s) study"),
    ("responses", "participant_key", FiltersConfig(), "responses.parquet: missing column(s) participant_key"),
    ("ratings", "rater_key", FiltersConfig(), "ratings.parquet: missing column(s) rater_key"),
    ("raters", "reliability", FiltersConfig(min_reliability=0.5), "raters.parquet: missing column(s) reliability"),
])
def test_missing_columns_are_one_line_errors(frame: str, drop: str, rules: FiltersConfig,
                                             needle: str) -> None:
    frames = {"participants": participants(), "responses": responses(), "ratings": ratings(),
              "raters": raters()}
    frames[frame] = frames[frame].drop(columns=[drop])
    with pytest.raises(CrowdprefError) as info:
        run(rules, **frames)
    assert str(info.value).startswith(needle) and "\n" not in str(info.value)
    assert ": re" in str(info.value)  # a fix follows


def test_a_column_a_rule_that_is_off_does_not_need_may_be_missing() -> None:
    result = run(FiltersConfig(), participants=participants().drop(columns=["status"]))
    assert result.report.total.participants == 5


def test_bad_values_are_one_line_errors() -> None:
    people = participants()
    people.loc[0, "study"] = "study3"
    with pytest.raises(CrowdprefError, match=r"participants\.parquet: 1 rows whose study"):
        run(FiltersConfig(), participants=people)
    people = participants().astype({"too_fast": object})
    people.loc[0, "too_fast"] = "yes"
    with pytest.raises(CrowdprefError, match=r"participants\.parquet: column too_fast holds 1 values"):
        run(FiltersConfig(), participants=people)


# --- preregistration ---------------------------------------------------------------------------
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'store.sqlite'}", clock=lambda: T0)


def test_preregister_records_the_rules_once(tmp_path: Path) -> None:
    s = store(tmp_path)
    rules = FiltersConfig(min_reliability=0.4)
    assert check_preregistered(s, "demo", rules) is None  # nothing recorded: not preregistered
    preregister(s, "demo", rules)
    raw = json.loads(s.get_meta(meta_key("demo")))
    assert raw == {"recorded_at": "2026-01-05T10:00:00+00:00",
                   "rules": json.loads(canonical_rules(rules))}
    later = Store(s.url, clock=lambda: T0 + 86_400)
    preregister(later, "demo", FiltersConfig(incomplete=True))  # the first record stays
    assert json.loads(later.get_meta(meta_key("demo"))) == raw
    record = check_preregistered(later, "demo", FiltersConfig(min_reliability=0.4))
    assert record is not None and record.recorded_at == "2026-01-05T10:00:00+00:00"
    assert record.rules == {"failed_checks": True, "too_fast": True, "incomplete": False,
                            "min_reliability": 0.4}
    assert check_preregistered(later, "other-study", rules) is None  # per study
    assert not any(s.get_meta(f"filters:{n}") for n in ("other-study",))


def test_changed_rules_are_refused_with_one_line(tmp_path: Path) -> None:
    s = store(tmp_path)
    preregister(s, "demo", FiltersConfig())
    with pytest.raises(CrowdprefError) as info:
        check_preregistered(s, "demo", FiltersConfig(too_fast=False, min_reliability=0.3),
                            source="studies/demo.yaml")
    msg = str(info.value)
    assert "\n" not in msg
    assert msg == ("study demo: filters changed after collection began (recorded 2026-01-05 "
                   "10:00:00 UTC: min_reliability=null, too_fast=true; now min_reliability=0.3, "
                   "too_fast=false): restore the recorded rules in studies/demo.yaml (filters:) "
                   "or start a new study")


def test_a_field_missing_from_an_old_record_counts_as_its_default(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.set_meta(meta_key("demo"), json.dumps({"recorded_at": "2026-01-01T00:00:00+00:00",
                                             "rules": {"failed_checks": True, "too_fast": True,
                                                       "incomplete": False}}))
    assert check_preregistered(s, "demo", FiltersConfig()) is not None
    with pytest.raises(CrowdprefError, match="min_reliability=null; now min_reliability=0.5"):
        check_preregistered(s, "demo", FiltersConfig(min_reliability=0.5))


def test_a_damaged_record_is_a_one_line_error(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.set_meta(meta_key("demo"), "not json")
    with pytest.raises(CrowdprefError, match=r"'filters:demo' is not a filters record") as info:
        check_preregistered(s, "demo", FiltersConfig())
    assert "\n" not in str(info.value)


def test_filters_config_section_and_summary() -> None:
    cfg = parse_study({"name": "f-test", "filters": {"incomplete": True, "min_reliability": 0.25}})
    assert cfg.filters.active() == ["failed_checks", "too_fast", "incomplete", "min_reliability"]
    rows = dict(cfg.summary_rows())
    assert rows["Filters"].startswith("leave out failed checks, too fast, incomplete, raters with "
                                      "reliability below 0.25")
    assert parse_study({"name": "f-test", "filters": None}).filters == FiltersConfig()
    off = parse_study({"name": "f-test", "filters": {"failed_checks": False, "too_fast": False}})
    assert off.filters.active() == [] and "off" in dict(off.summary_rows())["Filters"]
    assert np.isclose(cfg.filters.min_reliability, 0.25)


def test_rules_that_remove_every_rating_are_refused_in_one_line():
    """The simulated crowd submits in bulk: with a too-fast threshold every rater is flagged and
    nothing would be left to publish - a clear error, not an empty release."""
    from crowdpref.config import FiltersConfig
    from crowdpref.contracts import PARTICIPANTS
    from crowdpref.errors import CrowdprefError
    from crowdpref.filters import apply_filters

    responses = pd.DataFrame({"response_id": ["r1", "r2"], "participant_key": ["w1", "w2"]})
    ratings = pd.DataFrame({"rating_id": ["x1", "x2"], "rater_key": ["a", "b"],
                            "response_a_id": ["r1", "r2"], "response_b_id": ["r2", "r1"]})
    people = pd.DataFrame([{"participant_key": k, "study": s, "source": "simulated", "status": "complete",
                            "items_assigned": 1, "items_submitted": 1, "checks_answered": 0, "checks_passed": 0,
                            "checks_verdict": "none", "median_seconds_per_item": 0.0, "too_fast": s == "study2"}
                           for k, s in (("w1", "study1"), ("w2", "study1"), ("a", "study2"), ("b", "study2"))],
                          columns=PARTICIPANTS)
    with pytest.raises(CrowdprefError, match=r"remove every one of the 2 ratings \(filters.too_fast alone") as err:
        apply_filters(FiltersConfig(), people, responses, ratings, source="s.yaml")
    assert "\n" not in str(err.value) and "too_fast_seconds to 0" in str(err.value)
    kept = apply_filters(FiltersConfig(too_fast=False), people, responses, ratings, source="s.yaml")
    assert len(kept.ratings) == 2
