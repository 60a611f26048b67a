"""Study config: shipped YAMLs load, defaults equal the published method, every broken file
gives a one-line ConfigError naming the file and the dotted field."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from crowdpref.config import (
    DEFAULT_CATEGORIES,
    StudyConfig,
    load_study,
    parse_study,
)
from crowdpref.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
STUDIES = ROOT / "studies"

PUBLISHED_CATEGORIES = [
    "understanding of emotions", "intent recognition", "social norms", "social responsibility",
    "reading social cues", "perspective taking", "conflict resolution", "ethics",
    "moral judgement", "communication skills", "negotiation strategies", "empathy",
    "compassion", "trust", "humour", "kindness", "diversity and cultural differences",
    "figurative language", "self-awareness",
]
ORIGINAL_LABELS = {"toxicity", "severe_toxicity", "obscene", "threat", "insult", "identity_attack"}


def assert_published_method(cfg: StudyConfig) -> None:
    q, s1, s2 = cfg.questions, cfg.study1, cfg.study2
    assert len(q.categories) == 19
    assert [c.title.lower() for c in q.categories] == PUBLISHED_CATEGORIES
    assert s1.responses_per_question == 4
    assert s1.questions_per_participant == 10
    assert s1.quality_scale.values == [1, 2, 3, 4, 5]
    assert s2.ratings_per_pair == 3
    assert s2.pairs_per_participant == 60
    assert s2.scale_points == 8
    assert s2.pairs == "all"
    assert s2.exclude_study1_participants is True
    assert cfg.screening.policy == "flag"
    assert cfg.screening.model == "original"
    assert set(cfg.screening.thresholds) == ORIGINAL_LABELS
    assert all(v == 0.5 for v in cfg.screening.thresholds.values())
    assert cfg.publish.license == "mit"
    assert cfg.publish.content_warning is True
    assert cfg.prolific.filters.approval_rate == 100
    assert cfg.prolific.filters.min_completed == 250


# --- shipped files and defaults ------------------------------------------------------------
@pytest.mark.parametrize("name", ["social-reasoning.yaml", "demo.yaml"])
def test_shipped_studies_load(name: str) -> None:
    cfg = load_study(STUDIES / name)
    assert cfg.name == name.removesuffix(".yaml")
    assert cfg.source == str(STUDIES / name)
    rows = cfg.summary_rows()
    assert rows and all(isinstance(k, str) and isinstance(v, str) and v for k, v in rows)


def test_defaults_equal_published_numbers() -> None:
    cfg = parse_study({"name": "x"})
    assert_published_method(cfg)
    assert cfg.study1.remainder == "smaller_last"
    assert cfg.aggregation.ties == "report_and_exclude"
    assert cfg.aggregation.incomplete_pairs == "report_and_keep"
    assert cfg.screening.fallback is None
    assert cfg.publish.private is True
    # the method recruits on Prolific: a default study talks to its API and verifies every arrival
    assert cfg.participants == "prolific" and cfg.prolific.enabled is True and cfg.prolific.verify is True
    assert [c[0] for c in DEFAULT_CATEGORIES] == [c.slug for c in cfg.questions.categories]


def test_social_reasoning_file_reproduces_published_study() -> None:
    cfg = load_study(STUDIES / "social-reasoning.yaml")
    assert_published_method(cfg)
    n = cfg.questions.expected_questions
    assert n is not None and 950 <= n <= 1050  # "about 1000 questions"
    plan = cfg.plan(n)
    assert plan.study1.participants == math.ceil(n * 4 / 10)  # ~400
    assert plan.pairs_per_question == 6


def test_demo_is_small_and_keeps_the_methods_r() -> None:
    cfg = load_study(STUDIES / "demo.yaml")
    n = cfg.questions.expected_questions
    assert n is not None and n <= 30
    plan = cfg.plan(n)
    assert plan.pairs_per_question == 6
    assert plan.n_responses + plan.n_ratings <= 600
    assert cfg.crowd.dropout_rate > 0
    assert cfg.prolific.enabled is False


def test_default_titles_come_from_slugs_and_strings() -> None:
    cfg = parse_study({"name": "x", "questions": {"categories": [
        "self-awareness", {"title": "Table manners", "description": "behaving at a shared meal"},
        {"title": "Small talk", "description": "chatting with people one barely knows"}]}})
    cats = cfg.questions.categories
    assert [(c.slug, c.title) for c in cats] == [
        ("self-awareness", "Self-awareness"), ("table-manners", "Table manners"),
        ("small-talk", "Small talk")]
    assert cats[0].description  # built-in description of a default category


def test_derived_names_and_scale() -> None:
    cfg = parse_study({"name": "pilot-1"})
    assert cfg.title == "Pilot 1"
    assert cfg.publish.pretty_name == "Pilot 1"
    assert cfg.study1.username_prefix == "pilot-1-s1"
    assert cfg.study2.username_prefix == "pilot-1-s2"
    labels = cfg.study2.scale_labels
    assert len(labels) == 8
    assert labels[0] == "Strong preference for A" and labels[3] == "Slight preference for A"
    assert labels[4] == "Slight preference for B" and labels[7] == "Strong preference for B"
    assert cfg.study2.midpoint == 4.5


@pytest.mark.parametrize(
    ("n", "participants", "last"),
    [(1000, 400, 10), (1007, 403, 8), (5, 2, 10), (3, 2, 2)],
)
def test_participants_needed(n: int, participants: int, last: int) -> None:
    batches = parse_study({"name": "x"}).study1.batches(n)
    assert batches.participants == participants == math.ceil(n * 4 / 10)
    assert (batches.remainder or batches.per_participant) == last


def test_plan_for_pairs_limit() -> None:
    cfg = parse_study({"name": "x", "study2": {"pairs": 2, "pairs_per_participant": 4}})
    plan = cfg.plan(10)
    assert plan.pairs_per_question == 2 and plan.n_pairs == 20
    assert plan.n_ratings == 60 and plan.study2.participants == 15


def test_check_question_count_at_runtime() -> None:
    cfg = parse_study({"name": "x"}, source="studies/x.yaml")
    assert cfg.check_question_count(100).study1.participants == 40
    with pytest.raises(ConfigError) as info:
        cfg.check_question_count(5)
    msg = str(info.value)
    assert msg.startswith("studies/x.yaml: study1.questions_per_participant:") and "\n" not in msg


def test_relative_question_files_resolve_against_yaml_folder(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "studies"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "extra.csv").write_text("question,category\nWhy?,empathy\n")
    (folder / "data" / "more.jsonl").write_text('{"question": "How?", "category": "trust"}\n')
    study = folder / "s.yaml"
    study.write_text("name: s\nquestions:\n  files: [data/extra.csv, data/more.jsonl]\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # resolution must not depend on the working folder
    cfg = load_study(study)
    assert cfg.questions.files == [folder / "data" / "extra.csv", folder / "data" / "more.jsonl"]
    assert all(p.is_absolute() and p.is_file() for p in cfg.questions.files)


def test_empty_section_means_defaults(tmp_path: Path) -> None:
    study = tmp_path / "s.yaml"
    study.write_text("name: s\nstudy1:\nstudy2:\n")
    cfg = load_study(study)
    assert cfg.study1.questions_per_participant == 10 and cfg.study2.scale_points == 8


def test_library_does_not_import_prefect() -> None:
    names: set[str] = set()
    for path in (ROOT / "crowdpref" / "config").glob("*.py"):
        tree = ast.parse(path.read_text())
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "crowdpref.config.load" in names  # the package's modules were read
    assert not any(name.split(".")[0] == "prefect" for name in names)


# --- broken files --------------------------------------------------------------------------
BROKEN: list[tuple[str, str | bytes, str, str]] = [
    # (id, file content, expected dotted field or location, expected text in message)
    ("not-utf8", b"name: caf\xe9\n", "(file)", "UTF-8"),
    ("invalid-yaml", "name: x\nstudy1: [1, 2\n", "line", "not valid YAML"),
    ("bad-indent", "name: x\nstudy1:\n  responses_per_question: 4\n questions_per_participant: 3\n",
     "line", "not valid YAML"),
    ("duplicate-key", "name: x\nseed: 1\nseed: 2\n", "line 3", "duplicate key 'seed'"),
    ("yaml-python-tag", "name: !!python/name:os.system x\n", "line 1", "not valid YAML"),
    ("list-top-level", "- name: x\n", "(top level)", "mapping"),
    ("scalar-top-level", "just text\n", "(top level)", "mapping"),
    ("missing-name", "seed: 1\n", "name", "is required"),
    ("unknown-top", "name: x\nstudy_1: {}\n", "study_1", "did you mean 'study1'"),
    ("unknown-nested", "name: x\nstudy1:\n  questions_per_participnt: 5\n",
     "study1.questions_per_participnt", "did you mean 'questions_per_participant'"),
    ("unknown-typo-of-required", "nmae: x\n", "nmae", "did you mean 'name'"),
    ("unknown-no-match", "name: x\nscreening:\n  zzz: 1\n", "screening.zzz", "allowed here"),
    ("wrong-type-int", "name: x\nstudy1:\n  questions_per_participant: ten\n",
     "study1.questions_per_participant", "whole number"),
    ("wrong-type-quoted-int", "name: x\nseed: '7'\n", "seed", "remove the quotes"),
    ("wrong-type-bool", "name: x\nstudy2:\n  exclude_study1_participants: maybe\n",
     "study2.exclude_study1_participants", "true or false"),
    ("wrong-type-float", "name: x\ncrowd:\n  dropout_rate: lots\n", "crowd.dropout_rate", "number"),
    ("wrong-type-section", "name: x\nstudy1: 5\n", "study1", "mapping"),
    ("wrong-type-name", "name: 12\n", "name", "text"),
    ("zero-q", "name: x\nstudy1:\n  questions_per_participant: 0\n",
     "study1.questions_per_participant", ">= 1"),
    ("zero-r", "name: x\nstudy1:\n  responses_per_question: 0\n",
     "study1.responses_per_question", ">= 1"),
    ("one-r", "name: x\nstudy1:\n  responses_per_question: 1\n",
     "study1.responses_per_question", "at least 2"),
    ("negative-ratings", "name: x\nstudy2:\n  ratings_per_pair: -3\n",
     "study2.ratings_per_pair", ">= 1"),
    ("zero-pairs-per-participant", "name: x\nstudy2:\n  pairs_per_participant: 0\n",
     "study2.pairs_per_participant", ">= 1"),
    ("zero-batch", "name: x\nscreening:\n  batch_size: 0\n", "screening.batch_size", ">= 1"),
    ("zero-inactive", "name: x\nstudy1:\n  inactive_after_minutes: 0\n",
     "study1.inactive_after_minutes", "> 0"),
    ("odd-scale", "name: x\nstudy2:\n  scale_points: 7\n", "study2.scale_points", "even"),
    ("huge-scale", "name: x\nstudy2:\n  scale_points: 12\n", "study2.scale_points", "even"),
    ("bad-quality-scale", "name: x\nstudy1:\n  quality_scale: {min: 5, max: 1}\n",
     "study1.quality_scale", "min < max"),
    ("threshold-above-1", "name: x\nscreening:\n  thresholds: {toxicity: 1.5}\n",
     "screening.thresholds.toxicity", "between 0 and 1"),
    ("threshold-unknown-label", "name: x\nscreening:\n  thresholds: {toxic: 0.5}\n",
     "screening.thresholds.toxic", "did you mean 'toxicity'"),
    ("threshold-not-number", "name: x\nscreening:\n  thresholds: {toxicity: high}\n",
     "screening.thresholds.toxicity", "number"),
    ("bad-repo-id", "name: x\npublish:\n  repo_id: just-a-name\n", "publish.repo_id", "owner/name"),
    ("bad-repo-id-3-parts", "name: x\npublish:\n  repo_id: a/b/c\n", "publish.repo_id", "owner/name"),
    ("bad-license", "name: x\npublish:\n  license: MIT License\n", "publish.license", "licence"),
    ("bad-name-slug", "name: My Study\n", "name", "'my-study'"),
    ("bad-name-underscore", "name: my_study\n", "name", "slug"),
    ("bad-prefix", "name: x\nstudy1:\n  username_prefix: Team A\n", "study1.username_prefix", "slug"),
    ("same-prefixes", "name: x\nstudy1: {username_prefix: p}\nstudy2: {username_prefix: p}\n",
     "study2.username_prefix", "different"),
    ("bad-policy", "name: x\nscreening:\n  policy: dorp\n", "screening.policy", "did you mean 'drop'"),
    ("bad-model", "name: x\nscreening:\n  model: multilingul\n", "screening.model",
     "did you mean 'multilingual'"),
    ("bad-device", "name: x\nscreening:\n  device: gpu\n", "screening.device", "auto"),
    ("bad-fallback", "name: x\nscreening:\n  fallback: regex\n", "screening.fallback",
     "profanity-check (or null)"),
    ("bad-remainder", "name: x\nstudy1:\n  remainder: pad\n", "study1.remainder", "smaller_last"),
    ("bad-incomplete", "name: x\naggregation:\n  incomplete_pairs: keep\n",
     "aggregation.incomplete_pairs", "report_and_keep"),
    ("bad-pairs", "name: x\nstudy2:\n  pairs: some\n", "study2.pairs", "'all'"),
    ("too-many-pairs", "name: x\nstudy2:\n  pairs: 10\n", "study2.pairs", "at most 6"),
    ("q-above-questions", "name: x\nquestions:\n  categories: [empathy]\n  per_category: 3\n",
     "study1.questions_per_participant", "at most 3"),
    ("p-above-pairs", "name: x\nquestions:\n  per_category: 1\nstudy2:\n  pairs_per_participant: 200\n",
     "study2.pairs_per_participant", "at most 114"),
    ("remainder-error", "name: x\nquestions:\n  per_category: 1\nstudy1:\n  remainder: error\n",
     "study1.remainder", "left over"),
    ("attention-check-replaced", "name: x\nstudy1:\n  attention_check: {position: 2, text: Say blue}\n",
     "study1.attention_check", "write e.g. checks: {count: 1"),
    ("checks-min-passed", "name: x\nstudy1:\n  checks: {count: 1, min_passed: 2}\n",
     "study1.checks.min_passed", "use at most 1"),
    ("checks-on-fail", "name: x\nstudy2:\n  checks: {on_fail: reject}\n",
     "study2.checks.on_fail", "keep"),
    ("checks-study2-min-passed", "name: x\nstudy2:\n  checks: {gold_pairs: 1, repeated_pairs: 0, min_passed: 2}\n",
     "study2.checks.min_passed", "use at most 1"),
    ("rate-above-1", "name: x\ncrowd:\n  dropout_rate: 1.5\n", "crowd.dropout_rate", "<= 1"),
    ("duplicate-category", "name: x\nquestions:\n  categories: [empathy, Empathy]\n",
     "questions.categories", "duplicate"),
    ("bad-category-entry", "name: x\nquestions:\n  categories: [empathy, {slug: x, titel: X}]\n",
     "questions.categories[1].titel", "did you mean 'title'"),
    ("no-categories", "name: x\nquestions:\n  categories: []\n", "questions.categories", "too short"),
    ("no-question-source", "name: x\nquestions:\n  bank: false\n", "questions.bank",
     "no question source"),
    ("llm-without-count", "name: x\nquestions:\n  llm: {enabled: true}\n",
     "questions.llm.per_category", "how many"),
    ("min-above-max", "name: x\nquestions:\n  min_chars: 500\n  max_chars: 100\n",
     "questions.min_chars", "<= max_chars"),
    ("dup-threshold-range", "name: x\nquestions:\n  near_duplicate_threshold: 150\n",
     "questions.near_duplicate_threshold", "<= 100"),
    ("missing-question-file", "name: x\nquestions:\n  files: [nope.csv]\n", "questions.files[0]",
     "file not found"),
    ("question-file-type", "name: x\nquestions:\n  files: [q.txt]\n", "questions.files[0]",
     ".csv or .jsonl"),
    ("files-not-list", "name: x\nquestions:\n  files: q.csv\n", "questions.files", "list"),
    ("missing-checkpoint", "name: x\nscreening:\n  checkpoint: model.ckpt\n",
     "screening.checkpoint", "file not found"),
    ("zero-reward", "name: x\nprolific:\n  study1: {reward: 0}\n", "prolific.study1.reward", ">= 1"),
    ("approval-over-100", "name: x\nprolific:\n  filters: {approval_rate: 101}\n",
     "prolific.filters.approval_rate", "<= 100"),
    ("unknown-category", "name: x\nquestions:\n  categories: [empathy, astrology]\n",
     "questions.categories[1]", "unknown category 'astrology'"),
    ("category-typo", "name: x\nquestions:\n  categories: [empthy]\n",
     "questions.categories[0]", "did you mean 'empathy'"),
    ("absurd-ratings-per-pair", "name: x\nstudy2:\n  ratings_per_pair: 100000\n",
     "study2.ratings_per_pair", "<= 20"),
    ("absurd-answers-per-question", "name: x\nstudy1:\n  responses_per_question: 500\n",
     "study1.responses_per_question", "<= 20"),
    ("prolific-unverified", "name: x\nparticipants: prolific\nprolific:\n  enabled: false\n",
     "prolific.enabled", "prolific.verify: false"),
    ("verify-off-with-api", "name: x\nprolific:\n  enabled: true\n  verify: false\n",
     "prolific.verify", "remove prolific.verify"),
    ("cap-below-places", "name: x\nprolific:\n  study1: {places: 10, max_places: 5}\n",
     "prolific.study1.max_places", ">= 10"),
    ("invite-lifetime", "name: x\ninvites:\n  lifetime_days: 0\n", "invites.lifetime_days", "> 0"),
    ("nan-threshold", "name: x\nscreening:\n  thresholds: {toxicity: .nan}\n",
     "screening.thresholds.toxicity", "finite"),
]


def assert_one_line(msg: str, filename: str, field: str) -> None:
    assert "\n" not in msg, msg
    assert msg.startswith(filename + ": "), msg
    assert field in msg, msg
    assert "Traceback" not in msg and "pydantic" not in msg and "errors.pydantic.dev" not in msg, msg
    assert "For further information" not in msg and "validation error" not in msg, msg


@pytest.mark.parametrize(("content", "field", "text"), [b[1:] for b in BROKEN],
                         ids=[b[0] for b in BROKEN])
def test_broken_yaml_gives_one_line_error(tmp_path: Path, content: str | bytes, field: str,
                                          text: str) -> None:
    path = tmp_path / "broken.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_study(path)
    msg = str(info.value)
    assert_one_line(msg, str(path), field)
    assert text in msg, msg
    # the field comes right after the file name
    assert msg[len(str(path)) + 2:].startswith(field), msg
    assert info.value.exit_code == 2


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_study(path)
    assert_one_line(str(info.value), str(path), "(file)")
    assert "not found" in str(info.value)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_study(tmp_path)
    assert_one_line(str(info.value), str(tmp_path), "not a file")


def test_error_uses_the_path_as_given(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "x.yaml").write_text("name: x\nstudy1:\n  questions_per_participant: 0\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_study("studies/x.yaml")
    assert str(info.value).startswith(
        "studies/x.yaml: study1.questions_per_participant: must be >= 1 (got 0): ")


def test_multiple_problems_are_counted_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: x\nstudy1:\n  questions_per_participant: 0\n  responses_per_question: 0\n")
    with pytest.raises(ConfigError) as info:
        load_study(path)
    msg = str(info.value)
    assert "\n" not in msg and "(and 1 more problem)" in msg


def test_utf8_bom_and_empty_sections_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(b"\xef\xbb\xbfname: s\ntitle: \xc3\xa9tude\n")
    assert load_study(path).title == "\u00e9tude"


def test_thresholds_accept_custom_labels_with_local_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "tiny.ckpt").write_bytes(b"x")
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nscreening:\n  checkpoint: tiny.ckpt\n  thresholds: {hate: 0.7}\n")
    cfg = load_study(path)
    assert cfg.screening.checkpoint == tmp_path / "tiny.ckpt"
    assert cfg.screening.thresholds == {"hate": 0.7}


def test_no_traceback_chained(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: x\nstudy2:\n  scale_points: 7\n")
    with pytest.raises(ConfigError) as info:
        load_study(path)
    # raised "from None": the CLI can print str(err) and nothing else leaks
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_int_keys_rejected() -> None:
    with pytest.raises(ConfigError) as info:
        parse_study({1: "x", "name": "x"}, source="s.yaml")
    assert_one_line(str(info.value), "s.yaml", "1")



@pytest.mark.parametrize("name", ["social-reasoning.yaml", "demo.yaml"])
def test_dump_round_trips(name: str) -> None:
    """A run folder can store ``model_dump(mode="json")`` and load it back unchanged."""
    cfg = load_study(STUDIES / name)
    again = parse_study(cfg.model_dump(mode="json"), source="snapshot")
    assert again.model_dump() == cfg.model_dump()


def test_seed_must_fit_the_study_store(tmp_path):
    """The store keeps the seed as a 32-bit integer (PostgreSQL INTEGER): a larger one is a
    one-line config error, not a database error mid-study."""
    import pytest

    from crowdpref.config import parse_study
    from crowdpref.errors import ConfigError

    assert parse_study({"name": "s", "seed": 2**31 - 1}, source="t").seed == 2**31 - 1
    for bad in (2**31, -1):
        with pytest.raises(ConfigError, match="seed"):
            parse_study({"name": "s", "seed": bad}, source="t")


def test_a_new_category_with_a_description_is_accepted() -> None:
    cfg = parse_study({"name": "x", "questions": {"categories": [
        {"title": "Astrology", "description": "what people read into horoscopes"}]}})
    assert cfg.questions.category_slugs == ["astrology"]


def test_an_unverified_pilot_says_so_in_the_summary() -> None:
    cfg = parse_study({"name": "x", "participants": "prolific", "prolific": {"enabled": False, "verify": False}})
    assert cfg.prolific.enabled is False
    row = dict(cfg.summary_rows())["Prolific"]
    assert "UNVERIFIED" in row and "made-up id" in row


def test_invite_and_simulated_studies_do_not_talk_to_prolific() -> None:
    assert parse_study({"name": "x", "participants": "invite"}).prolific.enabled is False
    assert parse_study({"name": "x", "participants": "simulated"}).prolific.enabled is False


def test_the_summary_prints_the_cost_on_prolific_beside_the_plan() -> None:
    cfg = parse_study({"name": "x", "questions": {"categories": ["empathy"], "per_category": 10},
                       "prolific": {"fee_rate": 0.5, "study1": {"reward": 300, "max_places": 6},
                                    "study2": {"reward": 200, "places": 2}}})
    plan = cfg.plan(10)  # 40 answers / 10 -> 4 writers; 60 pairs x 3 / 60 -> 3 raters
    assert (plan.study1.participants, plan.study2.participants) == (4, 3)
    cost = cfg.prolific_cost(10)
    assert cost.places == (4, 2) and cost.caps == (6, 4)
    assert cost.planned == pytest.approx((4 * 3.00 + 2 * 2.00) * 1.5)
    assert cost.at_cap == pytest.approx((6 * 3.00 + 4 * 2.00) * 1.5)
    row = dict(cfg.summary_rows())["Cost on Prolific"]
    assert "24.00" in row and "39.00" in row and "50.0%" in row
