"""The evaluate stage (crowdpref.evaluation): the split by question, the controls at chance on
data whose A/B orders come from study 2's own counterbalancing (and off chance without it),
TF-IDF beating length where the label depends on the words, and the stage on a published
release folder. Synthetic data, built here; a few seconds in all."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crowdpref.config import StudyConfig
from crowdpref.errors import CrowdprefError
from crowdpref.evaluation import (
    EVALUATION_FILE,
    EvalData,
    evaluate,
    from_release,
    from_run_folder,
    markdown,
    split_by_question,
    truth_line,
    write_outputs,
)
from crowdpref.ids import stable_id
from crowdpref.pairing import make_pairs
from crowdpref.release.markdown import fmt
from crowdpref.store import Full, Store
from crowdpref.study2 import Study2Spec
from tests.unit.test_publish import PlantedRun, build, small_config, write_study_run

GOOD = ["listen", "acknowledge", "gently", "understand", "respect", "support", "calmly", "kindly"]
BAD = ["whatever", "ignore", "mock", "blame", "dismiss", "shrug", "sneer", "rudely"]
FILLER = ["the", "situation", "is", "that", "a", "person", "might", "feel", "this", "way", "when",
          "it", "happens", "and", "so", "on"]


def _answers(n_questions: int, per_question: int, seed: int) -> tuple[pd.DataFrame, pd.Series]:
    """Answers whose hidden quality shows in their words (GOOD vs BAD) while their length is
    drawn independently of it; returns (responses, response_id -> quality)."""
    rng = np.random.default_rng(seed)
    rows, quality = [], {}
    for q in range(n_questions):
        qid = stable_id("q_", f"question {q}")
        for a in range(per_question):
            hq = float(rng.random())
            good = round(8 * hq)
            content = [GOOD[rng.integers(len(GOOD))] for _ in range(good)] + [
                BAD[rng.integers(len(BAD))] for _ in range(8 - good)]
            filler = [FILLER[rng.integers(len(FILLER))] for _ in range(int(rng.integers(3, 40)))]
            words = content + filler
            rng.shuffle(words)
            rid = stable_id("r_", qid, str(a))
            rows.append({"response_id": rid, "question_id": qid, "category": ["empathy", "ethics"][q % 2],
                         "text": " ".join(words)})
            quality[rid] = hq
    return pd.DataFrame(rows), pd.Series(quality)


def _preferences(pairs: pd.DataFrame, texts: pd.Series, first_wins: dict[str, float]) -> pd.DataFrame:
    """Preference rows from each pair's share of votes for its first answer (ties left out)."""
    rows = []
    for p in pairs.itertuples():
        share = first_wins[p.pair_id]
        if share == 0.5:
            continue
        chosen, rejected = ((p.first_response_id, p.second_response_id) if share > 0.5
                            else (p.second_response_id, p.first_response_id))
        rows.append({"pair_id": p.pair_id, "question_id": p.question_id, "category": p.category,
                     "prompt": "q", "chosen": texts[chosen], "rejected": texts[rejected],
                     "chosen_response_id": chosen, "rejected_response_id": rejected,
                     "p_chosen": max(share, 1 - share), "agreement": max(share, 1 - share)})
    return pd.DataFrame(rows)


def _study_with_crowd(tmp_path: Path, *, position_bias: float, quality_weight: float,
                      seed: int = 3) -> EvalData:
    """40 questions x 4 answers -> 240 pairs, rated R = 4 times each by raters who claim them
    from the study store under STUDY 2's own settings (Study2Spec: its counterbalancing), so
    the A/B order each rater sees is the one study 2 would show. A rater prefers A when
    quality_weight x (quality(A) - quality(B)) + position_bias + noise > 0."""
    config = StudyConfig.model_validate({
        "name": "eval-test", "participants": "simulated", "seed": seed,
        "questions": {"categories": ["empathy", "ethics"], "per_category": 20},
        "study1": {"responses_per_question": 4, "questions_per_participant": 5},
        "study2": {"ratings_per_pair": 4, "pairs_per_participant": 24},
    })
    responses, quality = _answers(40, 4, seed)
    pairs = make_pairs(responses, "all", seed).pairs
    questions = pd.DataFrame({"question_id": responses["question_id"].unique(), "question": "q"})
    spec = Study2Spec(config, pairs, responses, questions)
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    info = store.collection(config.name, spec.key, spec.item_ids(), copies=spec.copies,
                            per_participant=spec.per_participant, seed=spec.seed,
                            username_prefix=spec.username_prefix, counterbalance=spec.counterbalance)
    for n in range(len(pairs) * spec.copies + 1):
        if isinstance(store.claim(info, f"rater-{n}", "simulated"), Full):
            break
    shown = sorted((pair_id, -1 if swapped is None else int(swapped))
                   for participant in store.participants(info.id)
                   for pair_id, swapped in participant.swapped.items())
    store.close()
    rng = np.random.default_rng(seed + 1)  # drawn in a fixed order: the same data every run
    ratings, votes = [], {}
    for pair_id, order in shown:
        shown_a, shown_b = spec.display(pair_id, None if order < 0 else bool(order))
        a_wins = (quality_weight * (quality[shown_a] - quality[shown_b]) + position_bias
                  + rng.normal(0, 0.3)) > 0
        ratings.append({"pair_id": pair_id, "response_a_id": shown_a})
        first = spec._pairs.loc[pair_id, "first_response_id"]
        votes.setdefault(pair_id, []).append(float((shown_a == first) == a_wins))
    prefs = _preferences(pairs, responses.set_index("response_id")["text"],
                         {pair: float(np.mean(v)) for pair, v in votes.items()})
    return EvalData(prefs, "synthetic", pd.DataFrame(ratings), quality)


# --- the split ----------------------------------------------------------------------------------
def test_the_split_keeps_every_question_on_one_side_and_is_seeded() -> None:
    rng = np.random.default_rng(0)
    prefs = pd.DataFrame({"question_id": [f"q{i % 23}" for i in range(400)],
                          "category": [f"c{(i % 23) % 4}" for i in range(400)]}).sample(frac=1, random_state=1)
    split = split_by_question(prefs, 0.3, seed=11)
    assert not set(split.train) & set(split.test)
    assert set(split.train) | set(split.test) == set(prefs["question_id"])
    assert split == split_by_question(prefs.sample(frac=1, random_state=int(rng.integers(99))), 0.3, seed=11)
    assert split != split_by_question(prefs, 0.3, seed=12)
    for category, group in prefs.drop_duplicates("question_id").groupby("category"):
        assert set(group["question_id"]) & set(split.test), f"{category} has no held-out question"
    assert 0.2 <= len(split.test) / 23 <= 0.4


def test_a_split_that_cannot_be_made_is_a_one_line_error() -> None:
    prefs = pd.DataFrame({"question_id": ["q1", "q1"], "category": ["a", "a"]})
    with pytest.raises(CrowdprefError, match="cannot be split into train and test") as err:
        split_by_question(prefs, 0.3, seed=0)
    assert "\n" not in str(err.value)


# --- models and controls ------------------------------------------------------------------------
def test_controls_sit_at_chance_when_study2_counterbalances(tmp_path: Path) -> None:
    """Raters with a strong pull to A: with study 2's counterbalanced orders the position-only
    control learns nothing (each pair seen 2 and 2 ways); the words still carry the truth."""
    data = _study_with_crowd(tmp_path, position_bias=1.0, quality_weight=4.0)
    result = evaluate(data, seed=5, bootstrap_samples=300)
    position, shuffled = result.model("position-only"), result.model("shuffled-labels")
    assert position is not None and shuffled is not None
    assert abs(position.accuracy - 0.5) < 0.05 and position.low <= 0.5 <= position.high, position
    assert abs(shuffled.accuracy - 0.5) < 0.12 and shuffled.low <= 0.5 <= shuffled.high, shuffled
    assert not [w for w in result.warnings if w.startswith("control")], result.warnings


def test_position_only_leaves_chance_without_counterbalancing(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The same crowd when every rater sees each pair in its stored order: position now
    predicts the label, and the stage says the control is off chance."""
    original = Study2Spec.__post_init__

    def no_counterbalancing(self: Study2Spec) -> None:
        original(self)
        self.counterbalance = False

    monkeypatch.setattr(Study2Spec, "__post_init__", no_counterbalancing)
    data = _study_with_crowd(tmp_path, position_bias=1.0, quality_weight=4.0)
    result = evaluate(data, seed=5, bootstrap_samples=300, shuffles=3)
    position = result.model("position-only")
    assert position is not None and position.low > 0.6, position
    assert any(w.startswith("control position-only is off chance") for w in result.warnings)
    assert "CONTROLS OFF CHANCE" in result.verdict


def test_tfidf_beats_length_when_the_words_decide(tmp_path: Path) -> None:
    data = _study_with_crowd(tmp_path, position_bias=0.0, quality_weight=4.0)
    result = evaluate(data, seed=5, bootstrap_samples=300, shuffles=3)
    length, tfidf = result.model("length"), result.model("tfidf")
    assert length is not None and tfidf is not None
    assert tfidf.low > length.accuracy + 0.1, (tfidf, length)
    assert result.signal_beyond_length is True and result.verdict.startswith("Signal beyond length")
    assert result.truth is not None and result.truth["tfidf"]["accuracy"] > 0.7
    # the shuffled-label control (a share of 3 shuffled models per pair) agrees with the truth
    # no more than chance, and the artifact shows every model against the truth too
    assert abs(result.truth["shuffled-labels"]["accuracy"] - 0.5) < 0.1, result.truth["shuffled-labels"]
    report = markdown(result)
    assert "| Vs the hidden truth (95% interval) |" in report
    assert truth_line(result.truth) in report  # the line the flow prints after the verdict
    assert f"the crowd's labels {result.truth['crowd']['accuracy']:.3f}; " in truth_line(result.truth)
    assert f"| tfidf | model | {tfidf.accuracy:.3f} |" in report
    assert f"{result.truth['tfidf']['accuracy']:.3f} (" in report.split("| tfidf | model |", 1)[1].split("\n")[0]
    curve = result.learning_curve
    assert [row["fraction"] for row in curve] == [0.25, 0.5, 0.75, 1.0]
    assert curve[0]["pairs"] < curve[-1]["pairs"] == result.train_pairs
    assert {row["category"] for row in result.by_category} == {"empathy", "ethics"}
    assert [row["group"] for row in result.by_agreement] == ["high", "low"]


def test_no_signal_beyond_length_when_length_decides() -> None:
    """Labels that follow length alone: TF-IDF (which has the length feature too) does not
    beat it, and the verdict says so."""
    rng = np.random.default_rng(2)
    rows = []
    for q in range(100):
        for k in range(5):
            a = " ".join(rng.choice(FILLER + GOOD + BAD, size=int(rng.integers(3, 60))))
            b = " ".join(rng.choice(FILLER + GOOD + BAD, size=int(rng.integers(3, 60))))
            if len(a) == len(b):
                continue
            chosen, rejected = (a, b) if len(a) > len(b) else (b, a)
            rows.append({"pair_id": f"p{q}-{k}", "question_id": f"q{q}", "category": f"c{q % 3}",
                         "chosen": chosen, "rejected": rejected,
                         "chosen_response_id": f"r{q}-{k}-{int(rng.integers(2))}",
                         "rejected_response_id": f"r{q}-{k}-x"})
    result = evaluate(EvalData(pd.DataFrame(rows), "synthetic"), seed=1, bootstrap_samples=300, shuffles=3)
    length = result.model("length")
    assert length is not None and length.accuracy > 0.95
    assert result.signal_beyond_length is False and result.verdict.startswith("No signal beyond length")
    assert any(line.startswith("position-only: skipped") for line in result.skipped)


# --- the stage on a published release -----------------------------------------------------------
@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> tuple[PlantedRun, Path]:
    """A small study run (tests/unit/test_publish.py) and its release, built once."""
    planted = write_study_run(tmp_path_factory.mktemp("eval") / "runs" / "pub-test", small_config())
    return planted, build(planted)


def test_the_stage_runs_on_a_published_release_folder(published: tuple[PlantedRun, Path],
                                                      tmp_path: Path) -> None:
    planted, folder = published
    data = from_release(folder, cache_dir=tmp_path / "hf-cache")
    assert data.ratings is not None and data.truth is None
    result = evaluate(data, seed=0, bootstrap_samples=200)
    assert result.test_pairs + result.train_pairs == len(data.preferences)
    assert result.model("position-only") is not None
    assert result.signal_beyond_length is None and "Too few held-out pairs" in result.verdict
    out = tmp_path / "out"
    path, _plot = write_outputs(result, out)
    saved = json.loads(path.read_text())
    assert path.name == EVALUATION_FILE and saved["verdict"] == result.verdict
    assert {m["model"] for m in saved["models"]} >= {"length", "tfidf", "shuffled-labels", "position-only"}
    assert not list(out.glob(".*.tmp"))
    assert result.verdict in markdown(result)
    # the same rows from the run folder give the same split and numbers
    again = evaluate(from_run_folder(planted.run.path), seed=0, bootstrap_samples=200)
    assert again.test_question_ids == result.test_question_ids
    assert math.isclose(again.model("length").accuracy, result.model("length").accuracy)  # type: ignore[union-attr]


def test_a_release_without_the_columns_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(CrowdprefError, match="preferences.parquet: not found"):
        from_run_folder(tmp_path)
    pd.DataFrame({"prompt": ["q"], "chosen": ["a"], "rejected": ["b"]}).to_parquet(
        tmp_path / "preferences.parquet")
    with pytest.raises(CrowdprefError, match="missing column.*question_id"):
        from_run_folder(tmp_path)


def test_the_card_shows_the_evaluation_only_when_there_is_one(published: tuple[PlantedRun, Path],
                                                              tmp_path: Path) -> None:
    planted, folder = published
    before = (folder / "README.md").read_text(encoding="utf-8")
    assert "Does the data carry signal?" not in before  # no evaluation.json: the card as it was
    result = evaluate(from_run_folder(planted.run.path), seed=0, bootstrap_samples=200)
    write_outputs(result, planted.run.path)
    try:
        card = (build(planted) / "README.md").read_text(encoding="utf-8")
        section = card.split("## Does the data carry signal?", 1)[1].split("\n## ", 1)[0]
        assert f"**Verdict:** {result.verdict}" in section
        length = result.model("length")
        assert length is not None and f"| `length` | model | {fmt(length.accuracy)} |" in section
        assert "What it does not show" in section
        if (planted.run.path / "evaluation-learning-curve.png").exists():
            assert "](images/evaluation-learning-curve.png)" in section
            assert (folder / "images" / "evaluation-learning-curve.png").exists()
        # a fine-tuned reward model without real weights: flagged, its numbers left out; the
        # hidden truth (a simulated crowd's) is a column of the table
        saved = json.loads((planted.run.path / EVALUATION_FILE).read_text())
        fake_tuned = {"model": "tiny-random", "result": False, "status": "NOT A RESULT: random weights",
                      "epochs": 1.0, "train_pairs": 4, "train_pairs_used": 4, "device": "cpu (2 cores)",
                      "accuracy": 0.987654, "low": 0.9, "high": 1.0, "truth": None,
                      "shuffled_labels": {"accuracy": 0.123456, "low": 0.0, "high": 0.3}}
        saved["fine_tuned"] = fake_tuned
        saved["truth"] = {"pairs": saved["test_pairs"], "crowd": {"accuracy": 0.9, "low": 0.8, "high": 1.0},
                          "length": {"accuracy": 0.876543, "low": 0.8, "high": 0.95},
                          "tfidf": {"accuracy": 0.8, "low": 0.7, "high": 0.9}}
        (planted.run.path / EVALUATION_FILE).write_text(json.dumps(saved))
        section = (build(planted) / "README.md").read_text(encoding="utf-8").split(
            "## Does the data carry signal?", 1)[1].split("\n## ", 1)[0]
        assert "was run without real weights: its numbers are not a result" in section
        assert fmt(0.987654) not in section and fmt(0.123456) not in section
        assert "| Vs the hidden truth (95% interval) |" in section
        assert f"| `length` | model | {fmt(length.accuracy)} | {fmt(length.low)} to {fmt(length.high)} | " \
               f"{fmt(0.876543)} (" in section
        saved["fine_tuned"] = {**fake_tuned, "result": True, "status": "result"}  # real weights: shown
        (planted.run.path / EVALUATION_FILE).write_text(json.dumps(saved))
        section = (build(planted) / "README.md").read_text(encoding="utf-8").split(
            "## Does the data carry signal?", 1)[1].split("\n## ", 1)[0]
        assert f"| fine-tuned `tiny-random` | {fmt(0.987654)} | {fmt(0.9)} to {fmt(1.0)} |" in section
        assert "not a result" not in section
        # an evaluation of other rows is not shown as if it were this release's
        stale = json.loads((planted.run.path / EVALUATION_FILE).read_text())
        stale["test_pairs"] += 1
        (planted.run.path / EVALUATION_FILE).write_text(json.dumps(stale))
        card = (build(planted) / "README.md").read_text(encoding="utf-8")
        assert "so its numbers are left out" in card and "**Verdict:**" not in card
    finally:
        (planted.run.path / EVALUATION_FILE).unlink(missing_ok=True)
        (planted.run.path / "evaluation-learning-curve.png").unlink(missing_ok=True)
