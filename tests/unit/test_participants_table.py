"""participants.parquet: one row per participant per study, from the store's states (how they
ended, their checks, their time on task); each study's export replaces only its own rows."""

from __future__ import annotations

import math

import pandas as pd

from crowdpref.contracts import PARTICIPANTS
from crowdpref.participants import participants_frame, write_participants
from crowdpref.store import Assignment, OnboardingState, ParticipantState


def _state(username: str, status: str, items: list[tuple[str, str, float | None]], **extra) -> ParticipantState:
    return ParticipantState(
        id=1, username=username, account_id=1, account_state="bound", source="simulated", status=status,
        claimed_at=1000.0, last_activity_at=1000.0, records_logged=True, drop_requested=False,
        assignments=tuple(Assignment(item, n, st, None, at) for n, (item, st, at) in enumerate(items)), **extra)


def test_rows_say_how_each_participant_ended_with_checks_and_time():
    people = [
        _state("s-0002", "complete", [("q1", "submitted", 1030.0), ("q2", "submitted", 1060.0),
                                      ("check-i-ab", "submitted", 1070.0)],
               checks_answered=1, checks_passed=1, check_verdict="passed"),
        _state("s-0001", "complete", [("q1", "excluded", 1001.0), ("q2", "excluded", 1002.0),
                                      ("check-i-cd", "submitted", 1003.0)],
               checks_answered=1, checks_passed=0, check_verdict="failed", excluded_at=1100.0),
        _state("s-0003", "released", [("q3", "released", None), ("check-i-ef", "released", None)]),
    ]
    frame = participants_frame("study1", people, lambda u: "p_" + u[-4:], too_fast_seconds=20, has_checks=True)
    assert list(frame.columns) == PARTICIPANTS
    rows = frame.set_index("participant_key")
    assert list(rows.index) == ["p_0001", "p_0002", "p_0003"]
    assert rows.loc["p_0001", "status"] == "excluded" and rows.loc["p_0001", "checks_verdict"] == "failed"
    assert rows.loc["p_0001", "items_assigned"] == 2 and rows.loc["p_0001", "items_submitted"] == 2
    assert bool(rows.loc["p_0001", "too_fast"]) and not bool(rows.loc["p_0002", "too_fast"])
    assert rows.loc["p_0002", "median_seconds_per_item"] == 30.0  # 30 s, 30 s (the check is not an item)
    assert rows.loc["p_0003", "status"] == "released" and rows.loc["p_0003", "checks_verdict"] == "unanswered"
    assert rows.loc["p_0003", "items_submitted"] == 0 and math.isnan(rows.loc["p_0003", "median_seconds_per_item"])
    none = participants_frame("study2", people[:1], lambda u: u, too_fast_seconds=0, has_checks=False)
    assert none["checks_verdict"].tolist() == ["none"] and not none["too_fast"].any()


def test_each_study_replaces_only_its_own_rows(tmp_path):
    one = participants_frame("study1", [_state("a", "complete", [("q1", "submitted", 1050.0)])], str, 20, False)
    two = participants_frame("study2", [_state("b", "complete", [("pr1", "submitted", 1050.0)])], str, 4, False)
    write_participants(tmp_path, "study1", one)
    write_participants(tmp_path, "study2", two)
    again = participants_frame("study1", [_state("c", "complete", [("q1", "submitted", 1050.0)])], str, 20, False)
    write_participants(tmp_path, "study1", again)
    saved = pd.read_parquet(tmp_path / "participants.parquet")
    assert saved[["study", "participant_key"]].values.tolist() == [["study1", "c"], ["study2", "b"]]


def _onboarded(key_hash: str, status: str, attempts: int, best: int | None, seconds: float) -> OnboardingState:
    return OnboardingState(key_hash=key_hash, source="prolific", status=status, step="done", practice_answered=3,
                           practice_correct=2, attempts_used=attempts, last_score=best, best_score=best,
                           started_at=900.0, finished_at=990.0, seconds_spent=seconds)


def test_onboarding_attempts_scores_and_time_and_a_row_for_each_person_screened_out():
    people = [_state("s-0001", "complete", [("q1", "submitted", 1030.0)])]
    onboarding = [_onboarded("h-passed", "passed", 2, 3, 240.0), _onboarded("h-out", "screened_out", 2, 1, 300.0),
                  _onboarded("h-busy", "in_progress", 0, None, 20.0)]
    frame = participants_frame("study1", people, lambda u: "p_" + u[-4:].replace("\x1f", "_"), 20, True,
                               onboarding, {"s-0001": "h-passed"})
    assert list(frame.columns) == PARTICIPANTS
    rows = frame.set_index("status")
    assert sorted(frame["status"]) == ["complete", "screened_out"]  # someone still in onboarding has no row yet
    assert rows.loc["complete", "onboarding_attempts"] == 2 and rows.loc["complete", "onboarding_score"] == 3.0
    assert rows.loc["complete", "onboarding_seconds"] == 240.0
    out = rows.loc["screened_out"]
    assert out["items_assigned"] == 0 and out["onboarding_attempts"] == 2 and out["onboarding_score"] == 1.0
    assert "h-out" not in out["participant_key"] and out["checks_verdict"] == "unanswered"
    plain = participants_frame("study1", people, str, 20, True)  # no onboarding: zero attempts, no score
    assert plain["onboarding_attempts"].tolist() == [0] and math.isnan(plain["onboarding_score"][0])
