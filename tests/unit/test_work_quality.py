"""crowdpref.work_quality: time on task from hand-built store states (gaps between submissions,
the first from the claim; nothing submitted; bulk submissions; the threshold boundary; checks
left out) and the study-1 answer flags (empty of content, exact copies across participants
and across one participant's questions, near-duplicates to the same question), plus the
config fields and the artifact rows (pseudonymous keys only)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from crowdpref.config import parse_study
from crowdpref.contracts import ANSWER_FLAGS
from crowdpref.errors import ConfigError, CrowdprefError
from crowdpref.pseudonyms import Pseudonyms
from crowdpref.store import HELD, RELEASED, SUBMITTED, Assignment, ParticipantState
from crowdpref.work_quality import (
    MIN_SHARED_WORDS,
    NEAR_DUPLICATE_SCORE,
    TIME_ON_TASK,
    answer_flags,
    content_words,
    describe_flags,
    describe_time_on_task,
    flag_counts,
    flagged_rows,
    item_seconds,
    normalise,
    time_on_task,
    time_on_task_rows,
)

CLAIM = 1_000.0


def person(username: str, submitted: dict[str, float | None], held: tuple[str, ...] = (),
           released: tuple[str, ...] = (), claimed_at: float = CLAIM, status: str = "active") -> ParticipantState:
    """A participant as the store returns one; ``submitted`` maps item -> submission time."""
    rows = [(item, SUBMITTED, at) for item, at in submitted.items()]
    rows += [(item, HELD, None) for item in held] + [(item, RELEASED, None) for item in released]
    assignments = tuple(Assignment(item_id=item, position=i, status=st, swapped=None, submitted_at=at)
                        for i, (item, st, at) in enumerate(rows))
    return ParticipantState(
        id=abs(hash(username)) % 10_000, username=username, account_id=1, account_state="bound",
        source="simulated", status=status, claimed_at=claimed_at, last_activity_at=claimed_at,
        records_logged=True, drop_requested=False, assignments=assignments,
    )


def row(frame: pd.DataFrame, username: str) -> pd.Series:
    return frame.set_index("username").loc[username]


# --- time on task ------------------------------------------------------------------------------
def test_gaps_between_sorted_submissions_first_from_claim() -> None:
    # held in position order q3, q1, q2 but submitted q1, q2, q3: sorted by time, not position
    p = person("u1", {"q3": CLAIM + 100, "q1": CLAIM + 30, "q2": CLAIM + 50})
    assert item_seconds(p) == [30.0, 20.0, 50.0]
    r = row(time_on_task([p], too_fast_seconds=20), "u1")
    assert r["items_submitted"] == 3
    assert r["median_seconds_per_item"] == 30.0
    assert r["min_seconds"] == 20.0
    assert not r["too_fast"]


def test_nothing_submitted_gives_nan_and_not_too_fast() -> None:
    p = person("u1", {}, held=("q1", "q2"), released=("q3",))
    r = row(time_on_task([p], too_fast_seconds=20), "u1")
    assert r["items_submitted"] == 0
    assert math.isnan(r["median_seconds_per_item"]) and math.isnan(r["min_seconds"])
    assert not r["too_fast"]


def test_held_and_released_items_are_not_timed() -> None:
    p = person("u1", {"q1": CLAIM + 40}, held=("q2",), released=("q3",))
    r = row(time_on_task([p], too_fast_seconds=20), "u1")
    assert r["items_submitted"] == 1 and r["median_seconds_per_item"] == 40.0


def test_bulk_submission_gives_zero_gaps_and_is_too_fast() -> None:
    # four answers filled in over 200 s and sent in one bulk call: gaps 200, 0, 0, 0.5
    p = person("bulk", {"q1": CLAIM + 200, "q2": CLAIM + 200, "q3": CLAIM + 200, "q4": CLAIM + 200.5})
    assert sorted(item_seconds(p)) == [0.0, 0.0, 0.5, 200.0]
    r = row(time_on_task([p], too_fast_seconds=20), "bulk")
    assert r["median_seconds_per_item"] == 0.25 and r["min_seconds"] == 0.0
    assert r["too_fast"]


@pytest.mark.parametrize(("median", "threshold", "too_fast"), [
    (20.0, 20.0, False),  # at the threshold: not below it
    (19.9, 20.0, True),
    (20.1, 20.0, False),
    (0.0, 0.0, False),  # 0 switches the flag off, even for all-zero gaps
    (0.0, 0.1, True),
])
def test_too_fast_threshold_boundary(median: float, threshold: float, too_fast: bool) -> None:
    p = person("u1", {"q1": CLAIM + median, "q2": CLAIM + 2 * median, "q3": CLAIM + 3 * median})
    r = row(time_on_task([p], too_fast_seconds=threshold), "u1")
    assert r["median_seconds_per_item"] == pytest.approx(median)
    assert bool(r["too_fast"]) is too_fast


def test_check_items_excluded_but_their_time_not_given_to_the_next_item() -> None:
    # q1 after 10 s, the check took 90 s, q2 10 s after the check
    p = person("u1", {"q1": CLAIM + 10, "check": CLAIM + 100, "q2": CLAIM + 110})
    assert item_seconds(p) == [10.0, 90.0, 10.0]
    assert item_seconds(p, is_check=lambda i: i == "check") == [10.0, 10.0]
    r = row(time_on_task([p], too_fast_seconds=20, is_check=lambda i: i == "check"), "u1")
    assert r["items_submitted"] == 2
    assert r["median_seconds_per_item"] == 10.0 and r["too_fast"]
    # without is_check the check counts as an item
    assert row(time_on_task([p], too_fast_seconds=20), "u1")["items_submitted"] == 3


def test_submission_before_the_claim_counts_as_zero_and_untimed_items_are_left_out() -> None:
    p = person("u1", {"q1": CLAIM - 5, "q2": CLAIM + 30, "q3": None})
    assert item_seconds(p) == [0.0, 30.0]  # the next gap starts from the claim, the later of the two


def test_one_row_per_participant_sorted_by_username_with_types() -> None:
    frame = time_on_task([person("b", {"q1": CLAIM + 5}), person("a", {}), person("c", {"q2": CLAIM + 60})],
                         too_fast_seconds=20)
    assert list(frame.columns) == TIME_ON_TASK
    assert list(frame["username"]) == ["a", "b", "c"]
    assert list(frame["too_fast"]) == [False, True, False]
    assert frame["items_submitted"].dtype == "int64" and frame["too_fast"].dtype == bool
    assert time_on_task([], too_fast_seconds=20).columns.tolist() == TIME_ON_TASK


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_bad_threshold_is_a_one_line_error(bad: float) -> None:
    with pytest.raises(CrowdprefError, match="too_fast_seconds") as info:
        time_on_task([person("a", {})], too_fast_seconds=bad)
    assert "\n" not in str(info.value)


def test_artifact_rows_use_pseudonymous_keys_only(tmp_path: Path) -> None:
    ids = Pseudonyms(tmp_path / "private")
    people = [person("demo-s1-0001", {"q1": CLAIM + 60}), person("demo-s1-0002", {"q1": CLAIM + 2}),
              person("demo-s1-0003", {})]
    frame = time_on_task(people, too_fast_seconds=20)
    rows = time_on_task_rows(frame, ids.participant_key)
    assert "demo-s1" not in repr(rows) and all("username" not in r for r in rows)
    assert rows[0]["participant_key"] == ids.participant_key("demo-s1-0002") and rows[0]["too_fast"] is True
    assert [r["participant_key"] for r in rows[1:]] == sorted(
        [ids.participant_key("demo-s1-0001"), ids.participant_key("demo-s1-0003")])
    by_key = {r["participant_key"]: r for r in rows}
    assert by_key[ids.participant_key("demo-s1-0003")]["median_seconds_per_item"] is None
    assert by_key[ids.participant_key("demo-s1-0001")]["median_seconds_per_item"] == 60.0
    # too-fast participants first, then by key (here keys sort against the usernames)
    key_of = {"demo-s1-0001": "p_c", "demo-s1-0002": "p_b", "demo-s1-0003": "p_a"}.__getitem__
    slow_first = [person("demo-s1-0001", {"q1": CLAIM + 1}), person("demo-s1-0002", {}),
                  person("demo-s1-0003", {"q1": CLAIM + 99})]
    assert [r["participant_key"] for r in time_on_task_rows(time_on_task(slow_first, 20), key_of)] == [
        "p_c", "p_a", "p_b"]
    assert describe_time_on_task(frame, 20) == (
        "1 of 2 participants with submissions below 20 s per item (median); 1 without submissions yet")
    assert "flag off" in describe_time_on_task(time_on_task(people, 0), 0)


def test_config_thresholds_default_and_validate() -> None:
    cfg = parse_study({"name": "x"})
    assert cfg.study1.too_fast_seconds == 20.0 and cfg.study2.too_fast_seconds == 4.0
    rows = dict(cfg.summary_rows(100))
    assert "too fast below 20 s per item" in rows["Study 1"] and "too fast below 4 s per item" in rows["Study 2"]
    off = parse_study({"name": "x", "study1": {"too_fast_seconds": 0}, "study2": {"too_fast_seconds": 0}})
    assert "too fast off" in dict(off.summary_rows(100))["Study 1"]
    with pytest.raises(ConfigError, match=r"study2\.too_fast_seconds"):
        parse_study({"name": "x", "study2": {"too_fast_seconds": -1}})


# --- answer flags ------------------------------------------------------------------------------
LONG = "I would talk to my friend calmly and explain why I felt hurt by what happened."


def responses(*answers: tuple[str, str, str, str]) -> pd.DataFrame:
    """(response_id, question_id, participant_key, text) rows, plus the other responses.parquet columns."""
    frame = pd.DataFrame(answers, columns=["response_id", "question_id", "participant_key", "text"])
    frame["category"], frame["source"], frame["quality"] = "empathy", "simulated", 4
    return frame


def flags_of(frame: pd.DataFrame) -> pd.DataFrame:
    return answer_flags(frame).set_index("response_id")


@pytest.mark.parametrize("text", ["idk", "IDK!!", "...", "n/a", "N/A", "asdf", "sdfghj", "xxxx", "  ", "?", "12 34",
                                  "I don't know", "i dont know.", "No idea", "lol", "blah blah", "-"])
def test_empty_of_content(text: str) -> None:
    assert content_words(text) == 0
    assert flags_of(responses(("r1", "q1", "p1", text)))["empty_of_content"].item()


@pytest.mark.parametrize("text", ["No.", "Yes", "Apologise.", "Tell her the truth.", "I'd say no",
                                  "Nothing, it is not my business.", "Ask him!", "Oké, je lui dirais."])
def test_short_real_answers_are_not_empty(text: str) -> None:
    assert content_words(text) >= 1
    assert not flags_of(responses(("r1", "q1", "p1", text)))["flagged"].item()


def test_normalise() -> None:
    assert normalise("  I'd  SAY:\tno!! ") == "i d say no"
    assert normalise("Ｆｕｌｌ width") == "full width"


def test_exact_copies_across_participants_after_normalisation() -> None:
    flags = flags_of(responses(
        ("r1", "q1", "p1", LONG),
        ("r2", "q1", "p2", LONG.upper().replace(".", "!!")),
        ("r3", "q2", "p3", "  " + LONG),  # the same text pasted as an answer to another question
        ("r4", "q1", "p4", "A different answer: I would leave the room and think about it first."),
    ))
    assert flags.loc["r1", "copy_of"] == "r2,r3"
    assert flags.loc["r2", "copy_of"] == "r1,r3"
    assert flags.loc["r3", "copy_of"] == "r1,r2"
    assert flags.loc[["r1", "r2", "r3"], "copied"].all()
    assert not flags.loc["r4", "copied"] and pd.isna(flags.loc["r4", "copy_of"])
    assert not flags.loc["r4", "flagged"]


def test_one_participant_pasting_one_text_into_several_questions() -> None:
    flags = flags_of(responses(
        ("r1", "q1", "p1", "Be kind."),  # short: a person repeating it is not chance
        ("r2", "q2", "p1", "be kind"),
        ("r3", "q3", "p1", "Be kind!"),
        ("r4", "q4", "p1", "Be honest."),
    ))
    assert flags.loc["r1", "copy_of"] == "r2,r3"
    assert flags.loc["r2", "copy_of"] == "r1,r3"
    assert not flags.loc["r4", "copied"]


def test_short_or_empty_answers_shared_by_people_are_not_copies() -> None:
    short = "Be kind to her."  # fewer than MIN_SHARED_WORDS content words
    assert content_words(short) < MIN_SHARED_WORDS
    flags = flags_of(responses(
        ("r1", "q1", "p1", short), ("r2", "q1", "p2", short),
        ("r3", "q1", "p3", "idk"), ("r4", "q1", "p4", "idk"),
        ("r5", "q2", "p3", "idk"),  # the same participant's "idk" twice: empty, not a copy
    ))
    assert not flags["copied"].any()
    assert list(flags["flagged"]) == [False, False, True, True, True]


def test_near_duplicates_to_the_same_question() -> None:
    edited = LONG.replace("calmly", "calmy").replace("hurt", "hurt a lot")
    other = "I would probably let it go, since friendships matter more than one bad evening."
    flags = flags_of(responses(
        ("r1", "q1", "p1", LONG),
        ("r2", "q1", "p2", edited),
        ("r3", "q1", "p3", other),
        ("r4", "q2", "p4", edited),  # near the same text, but another question: not compared
    ))
    assert flags.loc["r1", "near_duplicate_of"] == "r2" and flags.loc["r2", "near_duplicate_of"] == "r1"
    assert flags.loc["r1", "near_duplicate_score"] >= NEAR_DUPLICATE_SCORE
    assert pd.isna(flags.loc["r3", "near_duplicate_of"]) and math.isnan(flags.loc["r3", "near_duplicate_score"])
    assert not flags.loc["r3", "flagged"]
    assert flags.loc["r1", "flagged"]  # a near-duplicate only is flagged
    # r4 is an exact copy of r2 (another participant), not a near-duplicate of anything
    assert pd.isna(flags.loc["r4", "near_duplicate_of"]) and flags.loc["r4", "copy_of"] == "r2"
    assert not flags.loc["r1", "copied"]


def test_near_duplicate_names_the_most_similar_and_reordered_words_count() -> None:
    reordered = "Calmly I would talk to my friend and explain why what happened hurt me."
    close = LONG.replace("friend", "friends")
    flags = flags_of(responses(("r1", "q1", "p1", LONG), ("r2", "q1", "p2", reordered), ("r3", "q1", "p3", close)))
    assert flags.loc["r1", "near_duplicate_of"] == "r3"  # r3 is one letter away, r2 further
    assert flags.loc["r1", "near_duplicate_score"] > 95
    # the same clauses in another order (character ratio about 52, token_sort_ratio 100)
    swapped = "Explain why I felt hurt by what happened, and I would talk to my friend calmly."
    flags = flags_of(responses(("r1", "q1", "p1", LONG), ("r2", "q1", "p2", swapped)))
    assert flags.loc["r1", "near_duplicate_of"] == "r2" and flags.loc["r1", "near_duplicate_score"] == 100


def test_one_participant_is_never_their_own_near_duplicate() -> None:
    # the store gives one answer per question and participant; should two arrive, no self-match
    flags = flags_of(responses(("r1", "q1", "p1", LONG), ("r2", "q1", "p1", LONG.replace("calmly", "calmy"))))
    assert flags["near_duplicate_of"].isna().all()


def test_different_answers_to_the_same_question_are_not_flagged() -> None:
    flags = flags_of(responses(
        ("r1", "q1", "p1", "I would tell my friend the truth, even if it hurts, because honesty builds trust."),
        ("r2", "q1", "p2", "I would tell my friend the truth gently, because lying would hurt them later."),
        ("r3", "q1", "p3", "Stay out of it: it is their relationship and they have to sort it out."),
        ("r4", "q1", "p4", "I would ask my friend how they feel first and then decide what to say."),
        # all words of r6 are in r5 (token_set_ratio 100), but r5 says much more
        ("r5", "q1", "p5", LONG + " Then I would give them time to think and answer."),
        ("r6", "q1", "p6", "I would talk to my friend calmly."),
    ))
    assert not flags["flagged"].any()


def test_output_is_deterministic_and_sorted() -> None:
    frame = responses(
        ("r9", "q2", "p1", LONG), ("r1", "q2", "p2", LONG + " Really."), ("r5", "q1", "p3", "idk"),
        ("r3", "q1", "p4", "Apologise."), ("r7", "q1", "p1", LONG),
    )
    first = answer_flags(frame)
    assert list(first.columns) == ANSWER_FLAGS
    assert list(first["response_id"]) == ["r3", "r5", "r7", "r1", "r9"]  # by question, then response id
    for seed in range(5):
        shuffled = frame.sample(frac=1, random_state=seed).reset_index(drop=True)
        pd.testing.assert_frame_equal(answer_flags(shuffled), first)


@pytest.mark.parametrize(("frame", "needle"), [
    (pd.DataFrame({"response_id": ["r1"], "question_id": ["q1"], "participant_key": ["p1"]}), "['text']"),
    (responses(("r1", "q1", "p1", "a b"), ("r1", "q2", "p2", "c d")), "response_id r1 twice"),
    (responses(("r1", "q1", "p1", None)), "text of r1"),  # type: ignore[arg-type]
])
def test_bad_responses_are_one_line_errors(frame: pd.DataFrame, needle: str) -> None:
    with pytest.raises(CrowdprefError) as info:
        answer_flags(frame)
    msg = str(info.value)
    assert msg.startswith("responses.parquet") and needle in msg and "re-export" in msg and "\n" not in msg


def test_counts_and_flagged_rows() -> None:
    long_text = LONG + " " + "And then I would wait for them to answer before saying anything else at all."
    frame = responses(("r1", "q1", "p1", long_text), ("r2", "q1", "p2", long_text), ("r3", "q1", "p3", "idk"),
                      ("r4", "q1", "p4", "Apologise."))
    flags = answer_flags(frame)
    counts = flag_counts(flags)
    assert counts == {"answers": 4, "empty_of_content": 1, "copied": 2, "near_duplicate": 0, "flagged": 3}
    assert describe_flags(counts) == "3 of 4 answers flagged: 1 empty of content, 2 copied, 0 near-duplicate"
    rows = flagged_rows(flags, frame)
    assert [r["response_id"] for r in rows] == ["r1", "r2", "r3"]
    assert rows[0]["flags"] == "copied" and rows[0]["copy_of"] == "r2" and rows[2]["flags"] == "empty of content"
    assert len(rows[0]["text"]) == 80 and rows[0]["text"].endswith("...")  # type: ignore[arg-type]
    assert rows[2]["text"] == "idk" and rows[2]["near_duplicate_score"] is None


# --- the task layer (artifact calls recorded, no Prefect server) --------------------------------
def test_flag_answers_task_writes_parquet_and_a_table_without_usernames(tmp_path: Path, monkeypatch) -> None:
    import tasks.study1
    from crowdpref.runfolder import RunFolder

    made: list[dict] = []
    monkeypatch.setattr(tasks.study1, "create_table_artifact", lambda **kw: made.append(kw))
    frame = responses(("r1", "q1", "p_1", LONG), ("r2", "q1", "p_2", LONG), ("r3", "q2", "p_3", "Apologise."))
    tasks.study1.flag_answers(frame, RunFolder(tmp_path), "demo")
    written = pd.read_parquet(tmp_path / "answer_flags.parquet")
    assert list(written.columns) == ANSWER_FLAGS and list(written["copied"]) == [True, True, False]
    (artifact,) = made
    assert artifact["key"] == "demo-study1-answer-flags"
    assert [r["response_id"] for r in artifact["table"]] == ["r1", "r2"]
    assert artifact["description"].startswith("study1: 2 of 3 answers flagged")


def test_time_on_task_artifact_shows_keys_not_usernames(tmp_path: Path, monkeypatch) -> None:
    from types import SimpleNamespace

    import tasks.collection

    made: list[dict] = []
    monkeypatch.setattr(tasks.collection, "create_table_artifact", lambda **kw: made.append(kw))
    people = [person("demo-s2-0001", {"p1": CLAIM + 1, "p2": CLAIM + 2}), person("demo-s2-0002", {"p3": CLAIM + 30})]
    collection = SimpleNamespace(
        spec=SimpleNamespace(key="study2", study_name="demo"), info=SimpleNamespace(id=7),
        store=SimpleNamespace(participants=lambda cid: people if cid == 7 else []), folder=tmp_path / "study2",
    )
    study = tmp_path / "s.yaml"
    study.write_text("name: demo\nstudy2:\n  too_fast_seconds: 5\n")
    tasks.collection.publish_time_on_task(str(study), collection)  # type: ignore[arg-type]
    (artifact,) = made
    ids = Pseudonyms(tmp_path / "private")
    assert artifact["key"] == "demo-study2-time-on-task"
    assert "demo-s2" not in repr(artifact)
    assert [(r["participant_key"], r["too_fast"]) for r in artifact["table"]] == [
        (ids.participant_key("demo-s2-0001"), True), (ids.participant_key("demo-s2-0002"), False)]
    assert "1 of 2 participants with submissions below 5 s per item" in artifact["description"]
