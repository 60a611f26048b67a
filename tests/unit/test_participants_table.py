"""participants.parquet: one row per participant per study, from the store's states (how they
ended, their checks, their time on task); each study's export replaces only its own rows."""

from __future__ import annotations

import math

import pandas as pd

from crowdpref.contracts import PARTICIPANTS
from crowdpref.participants import participants_frame, write_participants
from crowdpref.store import Assignment, ParticipantState


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
