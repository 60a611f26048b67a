"""Questions: the shipped bank, importing question files, normalisation, validation,
de-duplication, per-category capping, and LLM expansion through the REAL openai client against
a local fake OpenAI-compatible server (tests/fakes/openai_server.py)."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

import crowdpref.questions as questions_module
from crowdpref.config import DEFAULT_CATEGORIES, StudyConfig, parse_study
from crowdpref.errors import ConfigError, CrowdprefError
from crowdpref.questions import (
    QUESTION_COLUMNS,
    REJECTED_COLUMNS,
    Candidate,
    QuestionPool,
    build_questions,
    extract_questions,
    load_bank,
    normalise_question,
    question_id,
    question_problem,
    read_question_file,
)
from crowdpref.settings import Settings, load_settings
from tests.fakes.openai_server import QUESTION_POOL, REFUSAL, FakeOpenAIServer
from tests.ports import free_port

DEFAULT_SLUGS = [slug for slug, _, _ in DEFAULT_CATEGORIES]
WH_WORDS = {"how", "what", "why", "which", "when", "where", "who", "whose", "whom"}
YES_NO_OPENERS = {"is", "are", "was", "were", "do", "does", "did", "can", "could", "should",
                  "would", "will", "have", "has", "had", "may", "might", "must", "shall"}
EMPATHY_BANK = [c.text for c in load_bank(["empathy"])]


# --- helpers -----------------------------------------------------------------------------------
def study(tmp_path: Path, **questions: Any) -> StudyConfig:
    """A study config with the given ``questions`` section (files relative to tmp_path)."""
    data = {"name": "t", "seed": questions.pop("seed", 0), "questions": questions,
            "study1": {"questions_per_participant": 1}, "study2": {"pairs_per_participant": 1}}
    return parse_study(data, base_dir=tmp_path)


def settings_for(tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = dict(home=tmp_path / "home", openai_base_url=None,
                                  openai_api_key=None, openai_model=None)
    values.update(overrides)
    return load_settings(**values)


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def assert_one_line(message: str, *parts: str) -> None:
    assert "\n" not in message
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"


# --- the bank ------------------------------------------------------------------------------------
def test_bank_has_at_least_ten_questions_in_each_of_the_19_categories() -> None:
    counts = Counter(c.category for c in load_bank())
    assert sorted(counts) == sorted(DEFAULT_SLUGS)
    assert min(counts.values()) >= 10, counts


def test_every_bank_question_is_stored_normalised_and_passes_validation() -> None:
    for candidate in load_bank():
        text = candidate.text
        assert normalise_question(text) == text
        assert question_problem(text, min_chars=20, max_chars=600) is None, text
        assert len(re.findall(r"[.;?!](?:\s|$)", text)) <= 3, f"too long-winded: {text}"


def test_bank_questions_are_open_not_yes_no() -> None:
    for candidate in load_bank():
        words = re.findall(r"[a-z']+", candidate.text.lower())
        assert words[0] not in YES_NO_OPENERS, candidate.text
        assert WH_WORDS & set(words), f"no how/what/why...: {candidate.text}"


def test_bank_has_no_duplicates_or_near_duplicates_at_the_default_threshold() -> None:
    pool = QuestionPool(DEFAULT_SLUGS, min_chars=20, max_chars=600, near_duplicate_threshold=90)
    for candidate in load_bank():
        pool.offer(candidate)
    assert [r.reason for r in pool.rejections] == []
    assert len({k.question_id for k in pool.kept}) == len(pool.kept)


def test_load_bank_keeps_only_the_given_categories_in_file_order() -> None:
    picked = load_bank(["humour", "trust"])
    assert {c.category for c in picked} == {"humour", "trust"}
    assert {c.source for c in picked} == {"bank"}
    assert [c.text for c in picked if c.category == "trust"] == [
        c.text for c in load_bank() if c.category == "trust"]


# --- question files --------------------------------------------------------------------------------
def test_csv_import_keeps_extra_columns_as_metadata_and_accepts_titles(tmp_path: Path) -> None:
    path = write(tmp_path, "extra.csv",
                 "\ufeffQuestion , category,author,difficulty\n"
                 '"How would you welcome a new neighbour, who speaks little English?",Kindness,ana,2\n'
                 "\n"
                 "What might a quiet guest at a loud party be feeling right now?,empathy,,\n")
    rows = read_question_file(path, ["kindness", "empathy"])
    assert [(c.category, c.source, c.where) for c in rows] == [
        ("kindness", "file:extra.csv", "line 2"), ("empathy", "file:extra.csv", "line 4")]
    assert rows[0].metadata == {"author": "ana", "difficulty": "2"}
    assert rows[1].metadata == {}
    assert rows[0].text.startswith("How would you welcome a new neighbour, who")


def test_jsonl_import_keeps_extra_fields_as_metadata(tmp_path: Path) -> None:
    path = write(tmp_path, "extra.jsonl",
                 json.dumps({"question": "Why might a child hide a bad school report from her parents?",
                             "category": "trust", "tags": ["school"], "origin": {"team": "b"}}) + "\n\n"
                 + json.dumps({"question": "How could a waiter calm a customer whose order is very late?",
                               "category": "conflict-resolution"}) + "\n")
    rows = read_question_file(path, ["trust", "conflict-resolution"])
    assert [c.where for c in rows] == ["line 1", "line 3"]
    assert rows[0].metadata == {"tags": ["school"], "origin": {"team": "b"}}


def test_file_questions_reach_the_output_with_source_and_metadata(tmp_path: Path) -> None:
    write(tmp_path, "mine.csv", "question,category,author\n"
          "How could you tell a friend that her jokes about your job hurt you?,humour,kim\n")
    result = build_questions(study(tmp_path, categories=["humour"], bank=False, files=["mine.csv"]),
                             settings_for(tmp_path))
    row = result.questions.iloc[0]
    assert (row.source, row.category) == ("file:mine.csv", "humour")
    assert json.loads(row.metadata) == {"author": "kim"}
    assert row.question_id == question_id(row.question)


def test_rows_of_a_default_category_the_study_does_not_use_are_rejected_not_errors(tmp_path: Path) -> None:
    write(tmp_path, "all.csv", "question,category\n"
          "How could you tell a friend that her jokes about your job hurt you?,humour\n"
          "What makes people trust a mechanic they have never used before?,trust\n")
    result = build_questions(study(tmp_path, categories=["humour"], bank=False, files=["all.csv"]),
                             settings_for(tmp_path))
    assert result.questions["category"].tolist() == ["humour"]
    assert result.rejected["kind"].tolist() == ["other-category"]


BAD_FILES: list[tuple[str, str | bytes, list[str]]] = [
    ("empty.csv", "", ["the file is empty", "question,category"]),
    ("blank.jsonl", "\n  \n", ["the file is empty", "one JSON object per line"]),
    ("header-only.csv", "question,category\n", ["no questions"]),
    ("columns.csv", "text,topic\nHow are you today, really?,empathy\n",
     ["missing required column(s) question, category", "required columns are question, category",
      "found: text, topic"]),
    ("columns.jsonl", '{"question": "What would you say to a crying child?"}\n',
     ["missing required column(s) category", "found: question"]),
    ("latin1.csv", "question,category\nWhat would you say to a caf\xe9 owner?,empathy\n".encode("latin-1"),
     ["not UTF-8", "line 2", "byte 0xe9", "byte offset 45"]),
    ("unknown.csv", "question,category\nWhat would you say to a crying child?,empaty\n",
     ["line 2", "unknown category 'empaty'", "did you mean 'empathy'", "empathy, humour"]),
    ("nocat.csv", "question,category\nWhat would you say to a crying child?,\n",
     ["line 2", "unknown category (empty)"]),
    ("broken.jsonl", '{"question": "What now?", "category": "empathy"\n',
     ["line 1", "not valid JSON"]),
    ("list.jsonl", '["What would you say to a crying child?", "empathy"]\n',
     ["line 1", "expected a JSON object"]),
    ("number.jsonl", '{"question": 42, "category": "empathy"}\n', ["line 1", "'question' is not text"]),
    ("cells.csv", "question,category\nWhat would you say, honestly, to a child?,empathy\n",
     ["line 2", "4 cells but the header has 2 columns"]),
]


@pytest.mark.parametrize(("name", "content", "expected"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_question_files_give_a_one_line_error_naming_the_file(
        tmp_path: Path, name: str, content: str | bytes, expected: list[str]) -> None:
    path = write(tmp_path, name, content)
    with pytest.raises(CrowdprefError) as caught:
        read_question_file(path, ["empathy", "humour"])
    assert_one_line(str(caught.value), str(path), *expected)


def test_missing_question_file_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(CrowdprefError) as caught:
        read_question_file(tmp_path / "gone.csv", ["empathy"])
    assert_one_line(str(caught.value), str(tmp_path / "gone.csv"), "not found", "questions.files")


def test_a_file_of_only_duplicates_is_an_error(tmp_path: Path) -> None:
    lines = "".join(f'"{q.upper()}",empathy\n' for q in EMPATHY_BANK[:3])
    path = write(tmp_path, "copy.csv", "question,category\n" + lines)
    with pytest.raises(CrowdprefError) as caught:
        build_questions(study(tmp_path, categories=["empathy"], files=["copy.csv"]), settings_for(tmp_path))
    assert_one_line(str(caught.value), str(path), "all 3 questions duplicate questions already loaded")


def test_a_file_without_usable_questions_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.csv", "question,category\nWhy?,empathy\nTell me about your feelings.,empathy\n")
    with pytest.raises(CrowdprefError) as caught:
        build_questions(study(tmp_path, categories=["empathy"], files=["bad.csv"]), settings_for(tmp_path))
    assert_one_line(str(caught.value), str(path), "none of its 2 questions can be used",
                    "1 too-short", "1 not-a-question", "first: line 2: too short")


# --- normalisation, validation, ids ----------------------------------------------------------------
@pytest.mark.parametrize(("raw", "clean"), [
    ("  How   would\tyou\nreact ?  ", "How would you react?"),
    ("\uff37\uff48\uff59 would a friend say \u201cfine\u201d when she isn\u2019t\uff1f",
     "Why would a friend say \"fine\" when she isn't?"),
    ("What now??  ?", "What now?"),
    ('"How would you answer?"', "How would you answer?"),
    ("How\u200b would you answer?", "How would you answer?"),
    ("No question mark here", "No question mark here"),
])
def test_normalise_question(raw: str, clean: str) -> None:
    assert normalise_question(raw) == clean


@given(st.text(max_size=80))
def test_normalising_twice_changes_nothing(text: str) -> None:
    once = normalise_question(text)
    assert normalise_question(once) == once


@given(st.lists(st.sampled_from(["how", "Would", "YOU", "answer", "a", "friend"]), min_size=1, max_size=8))
def test_question_id_ignores_case_and_spacing(words: list[str]) -> None:
    text = " ".join(words) + "?"
    variant = "  " + "\t".join(w.swapcase() for w in words) + " ?"
    assert question_id(variant) == question_id(text)
    assert re.fullmatch(r"q_[0-9a-f]{16}", question_id(text))


def test_question_ids_are_stable_across_runs() -> None:
    assert question_id("How would you answer?") == "q_" + __import__("hashlib").sha256(
        b"how would you answer?").hexdigest()[:16]


@pytest.mark.parametrize(("text", "kind"), [
    ("", "empty"),
    ("Why so sad?", "too-short"),
    ("How " + "very " * 200 + "sad?", "too-long"),
    ("Describe how you would comfort a friend.", "not-a-question"),
    ("Whyyyyyyyyyyyyyyyyyyyyy tho?", "too-few-words"),
    ("How would you comfort a friend?", None),
])
def test_question_problem(text: str, kind: str | None) -> None:
    problem = question_problem(text, min_chars=20, max_chars=600)
    assert (problem[0] if problem else None) == kind


# --- de-duplication -------------------------------------------------------------------------------
def pool_for(threshold: float = 90) -> QuestionPool:
    return QuestionPool(["empathy"], min_chars=20, max_chars=600, near_duplicate_threshold=threshold)


def test_exact_duplicates_keep_the_first_source(tmp_path: Path) -> None:
    bank_text = EMPATHY_BANK[0]
    write(tmp_path, "mine.csv", f'question,category\n"  {bank_text.upper()} ",empathy\n'
          "How could you support a friend whose father has just been diagnosed with cancer?,empathy\n")
    result = build_questions(study(tmp_path, categories=["empathy"], files=["mine.csv"]), settings_for(tmp_path))
    kept = result.questions.set_index("question_id")
    assert kept.loc[question_id(bank_text), "source"] == "bank"
    [rejected] = result.rejected.to_dict(orient="records")
    assert rejected["kind"] == "duplicate" and rejected["source"] == "file:mine.csv"
    assert rejected["where"] == "line 2" and question_id(bank_text) in rejected["reason"]
    assert result.source_counts.set_index("source").loc["file:mine.csv"].to_dict() == {
        "offered": 2, "rejected": 1, "sampled_out": 0, "kept": 1}


def test_near_duplicates_are_dropped_with_the_kept_question_named() -> None:
    pool = pool_for()
    first = pool.offer(Candidate("How can you tell that a friend is upset even when she says she is fine?",
                                 "empathy", "bank"))
    assert first is not None
    assert pool.offer(Candidate("How can you tell that a friend is upset, even if she says she's fine?",
                                "empathy", "llm:m")) is None
    assert pool.offer(Candidate("Even when she says she is fine, how can you tell that a friend is upset?",
                                "empathy", "llm:m")) is None  # reordered clauses
    assert [r.kind for r in pool.rejections] == ["near-duplicate", "near-duplicate"]
    assert first.question_id in pool.rejections[0].reason


def test_questions_across_categories_are_compared_too() -> None:
    pool = QuestionPool(["empathy", "trust"], 20, 600, 90)
    pool.offer(Candidate("How would you comfort a friend who just lost her job?", "empathy", "bank"))
    assert pool.offer(Candidate("How would you comfort a friend who just lost her job?", "trust", "file:x")) is None


def test_threshold_100_drops_only_identical_questions() -> None:
    pool = pool_for(threshold=100)
    pool.offer(Candidate("How would you comfort a friend who just lost her job?", "empathy", "bank"))
    assert pool.offer(Candidate("How would you comfort a friend who has just lost her job?", "empathy", "x"))
    assert pool.offer(Candidate("How would you comfort a friend, who just lost her job?", "empathy", "x")) is None


def test_a_short_question_inside_a_longer_one_is_not_a_duplicate() -> None:
    pool = pool_for()
    pool.offer(Candidate("How would you comfort a grieving friend?", "empathy", "bank"))
    longer = "How would you comfort a grieving friend who refuses to talk about the loss at all?"
    shorter = default_process("How would you comfort a grieving friend?")
    assert max(fuzz.ratio(shorter, default_process(longer)),
               fuzz.token_sort_ratio(shorter, default_process(longer))) < 90
    assert pool.offer(Candidate(longer, "empathy", "bank")) is not None


# --- per-category cap and the output contract ------------------------------------------------------
def test_per_category_cap_is_a_seeded_sample(tmp_path: Path) -> None:
    def sample(seed: int) -> list[str]:
        cfg = study(tmp_path, categories=["empathy", "trust", "ethics"], per_category=4, seed=seed)
        return build_questions(cfg, settings_for(tmp_path)).questions["question_id"].tolist()

    first = sample(1)
    assert sample(1) == first
    assert len(first) == 12
    assert any(sample(seed) != first for seed in (2, 3, 4))


def test_cap_reports_sampled_out_questions(tmp_path: Path) -> None:
    result = build_questions(study(tmp_path, categories=["empathy"], per_category=3), settings_for(tmp_path))
    assert result.per_category() == {"empathy": 3}
    assert set(result.rejected["kind"]) == {"sampled-out"}
    assert len(result.rejected) == len(EMPATHY_BANK) - 3
    assert result.warnings == []


def test_output_follows_the_questions_parquet_contract(tmp_path: Path) -> None:
    cfg = study(tmp_path, categories=["trust", "empathy"])
    result = build_questions(cfg, settings_for(tmp_path))
    frame = result.questions
    assert tuple(frame.columns) == QUESTION_COLUMNS
    assert tuple(result.rejected.columns) == REJECTED_COLUMNS
    assert all(pd.api.types.is_string_dtype(frame[c]) for c in QUESTION_COLUMNS)
    assert frame["question_id"].is_unique
    assert frame["category"].drop_duplicates().tolist() == ["trust", "empathy"]  # config order
    assert all(json.loads(m) == {} for m in frame["metadata"])
    path = tmp_path / "questions.parquet"
    frame.to_parquet(path, index=False)
    assert pd.read_parquet(path).equals(frame)


def test_nothing_usable_from_any_source_is_an_error(tmp_path: Path) -> None:
    # a custom category: the bank has none
    cfg = study(tmp_path, categories=[{"title": "Table manners", "description": "behaving at a shared meal"}])
    with pytest.raises(CrowdprefError, match="no usable questions from any source"):
        build_questions(cfg, settings_for(tmp_path))


# --- parsing LLM replies --------------------------------------------------------------------------
Q1, Q2 = "How might a shy pupil ask for help?", 'What does "fine" mean here?'


@pytest.mark.parametrize(("reply", "expected"), [
    (json.dumps({"questions": [Q1, Q2]}), [Q1, Q2]),
    ("```json\n" + json.dumps({"questions": [Q1]}) + "\n```", [Q1]),
    ("Sure!\n" + json.dumps({"questions": [Q1, Q2]}) + "\nEnjoy.", [Q1, Q2]),
    (json.dumps([Q1, Q2]), [Q1, Q2]),
    (json.dumps([{"question": Q1}, {"question": Q2, "why": "x"}]), [Q1, Q2]),
    (json.dumps({"items": [Q1]}), [Q1]),
    ('{"questions": [' + json.dumps(Q1) + ", " + json.dumps(Q2) + ',', [Q1, Q2]),
    (f"Here you go:\n1. {Q1}\n2) {Q2}\n- Why not?\n", [Q1, Q2, "Why not?"]),
    (REFUSAL, []),
    ("", []),
    (json.dumps({"questions": []}), []),
])
def test_extract_questions(reply: str, expected: list[str]) -> None:
    assert extract_questions(reply) == expected


# --- LLM expansion against the fake server ---------------------------------------------------------
@pytest.fixture()
def fake_llm():
    with FakeOpenAIServer() as server:
        yield server


def llm_study(tmp_path: Path, **llm: Any) -> StudyConfig:
    """Empathy and humour from the bank (12 each), topped up to 14 each by the LLM."""
    return study(tmp_path, categories=["empathy", "humour"], per_category=14,
                 llm={"enabled": True, "timeout_s": 5, "max_retries": 0, **llm})


def llm_settings(tmp_path: Path, server: FakeOpenAIServer, **overrides: Any) -> Settings:
    values = dict(openai_base_url=server.base_url, openai_api_key=server.api_key,
                  openai_model="fake-model")
    values.update(overrides)
    return settings_for(tmp_path, **values)


def llm_rows(result) -> pd.DataFrame:
    return result.questions[result.questions["source"] == "llm:fake-model"]


def test_llm_tops_each_category_up_to_per_category(tmp_path: Path, fake_llm: FakeOpenAIServer) -> None:
    fake_llm.questions_per_reply = 2
    result = build_questions(llm_study(tmp_path, temperature=0.4), llm_settings(tmp_path, fake_llm))
    assert result.per_category() == {"empathy": 14, "humour": 14}
    rows = llm_rows(result)
    assert rows["question"].tolist() == list(QUESTION_POOL[:4])
    assert json.loads(rows["metadata"].iloc[0]) == {"prompt_version": "questions-v1", "temperature": 0.4}
    assert result.warnings == []
    # what the client sent: model, temperature, system + user prompt naming the category
    assert len(fake_llm.requests) == 2
    body = fake_llm.requests[0]
    assert body["model"] == "fake-model" and body["temperature"] == 0.4
    system, user = body["messages"]
    assert (system["role"], user["role"]) == ("system", "user")
    assert '{"questions"' in system["content"]
    assert "Category: Empathy (sharing in" in user["content"] and "Write 2 new questions" in user["content"]
    assert EMPATHY_BANK[-1] in user["content"]  # existing questions shown, to be avoided
    assert fake_llm.request_headers[0]["authorization"] == f"Bearer {fake_llm.api_key}"


@pytest.mark.parametrize("mode", ["fenced", "malformed", "numbered"])
def test_llm_replies_in_other_shapes_are_salvaged(tmp_path: Path, fake_llm: FakeOpenAIServer, mode: str) -> None:
    fake_llm.mode, fake_llm.questions_per_reply = mode, 2
    result = build_questions(llm_study(tmp_path), llm_settings(tmp_path, fake_llm))
    assert llm_rows(result)["question"].tolist() == list(QUESTION_POOL[:4])
    assert result.warnings == []


def test_llm_answers_with_more_than_asked_are_trimmed(tmp_path: Path, fake_llm: FakeOpenAIServer) -> None:
    fake_llm.questions_per_reply = 5
    result = build_questions(llm_study(tmp_path), llm_settings(tmp_path, fake_llm))
    assert len(llm_rows(result)) == 4 and len(fake_llm.requests) == 2


def test_partial_llm_answers_get_one_more_request_then_a_warning(tmp_path: Path, fake_llm: FakeOpenAIServer) -> None:
    fake_llm.mode, fake_llm.partial_count = "partial", 1
    result = build_questions(llm_study(tmp_path, per_category=3), llm_settings(tmp_path, fake_llm))
    assert result.per_category() == {"empathy": 14, "humour": 14}  # 12 bank + 2 of 3 requested
    assert len(fake_llm.requests) == 4
    assert "empathy: the LLM (fake-model) wrote 2 of 3 usable new questions in 2 requests" in result.warnings
    users = [r["messages"][1]["content"] for r in fake_llm.requests[:2]]
    assert "Write 3 new" in users[0] and "Write 2 new" in users[1]
    assert QUESTION_POOL[0] in users[1]  # the first answer is now an example to avoid


def test_llm_duplicates_of_the_bank_are_dropped_and_asked_again(tmp_path: Path, fake_llm: FakeOpenAIServer) -> None:
    answers = iter([[EMPATHY_BANK[0].lower(), QUESTION_POOL[0]], [QUESTION_POOL[1]]])
    fake_llm.reply = lambda body: json.dumps({"questions": next(answers)})
    result = build_questions(study(tmp_path, categories=["empathy"], per_category=14,
                                   llm={"enabled": True, "max_retries": 0}),
                             llm_settings(tmp_path, fake_llm))
    assert llm_rows(result)["question"].tolist() == list(QUESTION_POOL[:2])
    assert result.rejected[["source", "kind", "where"]].values.tolist() == [
        ["llm:fake-model", "duplicate", "request 1"]]


def test_large_needs_are_split_into_several_requests(tmp_path: Path, fake_llm: FakeOpenAIServer,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(questions_module, "MAX_QUESTIONS_PER_REQUEST", 2)
    fake_llm.questions_per_reply = 2
    cfg = study(tmp_path, categories=["empathy"], bank=False, llm={"enabled": True, "per_category": 5})
    result = build_questions(cfg, llm_settings(tmp_path, fake_llm))
    assert len(result.questions) == 5
    asked = [re.search(r"Write (\d+) new", r["messages"][1]["content"]).group(1) for r in fake_llm.requests]
    assert asked == ["2", "2", "1"]


def test_a_refusal_records_zero_with_a_warning(tmp_path: Path, fake_llm: FakeOpenAIServer) -> None:
    fake_llm.mode = "refusal"
    result = build_questions(llm_study(tmp_path), llm_settings(tmp_path, fake_llm))
    assert result.per_category() == {"empathy": 12, "humour": 12}
    assert set(result.questions["source"]) == {"bank"}
    assert len(fake_llm.requests) == 2  # one per category: a refusal is not retried
    assert any(w.startswith("empathy: the LLM (fake-model) gave no usable questions (reply began: \"I'm sorry")
               for w in result.warnings)
    assert "humour: 12 of 14 questions (per_category)" in result.warnings


def test_the_llm_is_not_contacted_when_the_bank_covers_the_target(tmp_path: Path) -> None:
    cfg = study(tmp_path, categories=["empathy"], per_category=5, llm={"enabled": True})
    unreachable = settings_for(tmp_path, openai_base_url=f"http://127.0.0.1:{free_port()}/v1")
    assert len(build_questions(cfg, unreachable).questions) == 5


def assert_clean_llm_error(message: str, base_url: str, *parts: str, secret: str = "") -> None:
    assert_one_line(message, f"LLM endpoint {base_url}", *parts)
    if secret:
        assert secret not in message


def test_slow_endpoint_gives_a_clear_timeout_error(tmp_path: Path, fake_llm: FakeOpenAIServer) -> None:
    fake_llm.mode = "slow"
    fake_llm.slow_seconds = 30.0  # the bound below separates the 0.2-s timeout from waiting it out
    started = time.monotonic()
    with pytest.raises(CrowdprefError) as caught:
        build_questions(llm_study(tmp_path, timeout_s=0.2), llm_settings(tmp_path, fake_llm))
    assert time.monotonic() - started < 10
    assert_clean_llm_error(str(caught.value), fake_llm.base_url, "no answer within 0.2 s",
                           "questions.llm.timeout_s", secret=fake_llm.api_key)


def test_wrong_key_gives_a_clear_error_without_the_key(tmp_path: Path, fake_llm: FakeOpenAIServer) -> None:
    wrong_key = "sk-wrong-key-that-must-not-leak-42"
    with pytest.raises(CrowdprefError) as caught:
        build_questions(llm_study(tmp_path), llm_settings(tmp_path, fake_llm, openai_api_key=wrong_key))
    assert fake_llm.requests  # the server did answer 401 (echoing the key)
    assert_clean_llm_error(str(caught.value), fake_llm.base_url, "HTTP 401", "openai_api_key",
                           secret=wrong_key)


def test_server_errors_name_the_status(tmp_path: Path, fake_llm: FakeOpenAIServer) -> None:
    fake_llm.mode = "server_error"
    with pytest.raises(CrowdprefError) as caught:
        build_questions(llm_study(tmp_path), llm_settings(tmp_path, fake_llm))
    assert_clean_llm_error(str(caught.value), fake_llm.base_url, "HTTP 500", "processing your request",
                           secret=fake_llm.api_key)


def test_unreachable_endpoint_gives_a_clear_error(tmp_path: Path) -> None:
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    key = "sk-local-secret-7"
    with pytest.raises(CrowdprefError) as caught:
        build_questions(llm_study(tmp_path), settings_for(tmp_path, openai_base_url=base_url,
                                                          openai_api_key=key, openai_model="m"))
    assert_clean_llm_error(str(caught.value), base_url, "cannot connect", "openai_base_url", secret=key)


def test_missing_model_is_a_config_error(tmp_path: Path, fake_llm: FakeOpenAIServer) -> None:
    with pytest.raises(ConfigError) as caught:
        build_questions(llm_study(tmp_path), llm_settings(tmp_path, fake_llm, openai_model=None))
    assert_one_line(str(caught.value), "questions.llm.model", "openai_model")
    assert fake_llm.requests == []


def test_missing_key_for_the_default_endpoint_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        build_questions(llm_study(tmp_path), settings_for(tmp_path, openai_model="gpt-x"))
    assert_one_line(str(caught.value), "https://api.openai.com/v1", "openai_api_key")


def test_a_client_factory_receives_the_configured_limits(tmp_path: Path, fake_llm: FakeOpenAIServer) -> None:
    import openai

    seen: dict[str, Any] = {}

    def factory(**kwargs: Any) -> openai.OpenAI:
        seen.update(kwargs)
        return openai.OpenAI(**kwargs)

    fake_llm.questions_per_reply = 2
    build_questions(llm_study(tmp_path, timeout_s=7, max_retries=1), llm_settings(tmp_path, fake_llm),
                    llm_client_factory=factory)
    assert seen == {"base_url": fake_llm.base_url, "api_key": fake_llm.api_key, "timeout": 7, "max_retries": 1}
