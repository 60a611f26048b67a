"""The evaluation: split by question, fit the models and controls, score the held-out pairs with
bootstrap intervals over questions, the learning curve, accuracy by category and by rater
agreement, agreement with a simulated crowd's hidden truth, and a one-line verdict.

Accuracy is the share of held-out pairs whose chosen answer the model scores higher; a pair
the model scores equal (a length tie, or a position control with balanced orders) counts half.
Every interval is a 95 % percentile bootstrap that resamples the held-out QUESTIONS (pairs of
one question are not independent)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from crowdpref.errors import first_line
from crowdpref.evaluation.data import EvalData, split_by_question
from crowdpref.evaluation.finetune import NOT_A_RESULT, FineTune, fit_reward_model
from crowdpref.evaluation.models import (
    Oriented,
    Scorer,
    fit_embedding,
    fit_length,
    fit_position,
    fit_tfidf,
    orient,
)

__all__ = ["CURVE_FRACTIONS", "Accuracy", "EvaluationResult", "evaluate", "load_encoder", "verdict_line"]

CURVE_FRACTIONS = (0.25, 0.5, 0.75, 1.0)
LEVEL = 0.95
SMALL_TEST = 100
"""Fewer held-out pairs than this: the verdict says the numbers are too few to be sure."""
SHUFFLES = 20
"""Models trained on shuffled labels, averaged in the shuffled-label control."""
CHANCE_TOLERANCE = 0.05
"""A control whose interval lies wholly more than this above or below 0.5 is off chance."""


@dataclass
class Accuracy:
    """Held-out accuracy of one model, with its 95 % interval (resampling questions)."""

    model: str
    kind: str
    """``model`` or ``control``."""
    accuracy: float
    low: float
    high: float
    pairs: int
    questions: int
    note: str = ""


@dataclass
class EvaluationResult:
    """What ``evaluation.json`` holds."""

    source: str
    seed: int
    test_share: float
    train_questions: int
    test_questions: int
    train_pairs: int
    test_pairs: int
    bootstrap_samples: int
    models: list[Accuracy]
    gain_over_length: dict[str, float] | None
    """tfidf minus length on the same held-out pairs: difference and its 95 % interval."""
    learning_curve: list[dict[str, Any]]
    by_category: list[dict[str, Any]]
    by_agreement: list[dict[str, Any]]
    agreement_column: str | None
    truth: dict[str, Any] | None
    skipped: list[str]
    warnings: list[str]
    verdict: str
    signal_beyond_length: bool | None
    """True: the gain's interval is above 0; False: it is not; None: too few pairs to say."""
    seconds: float = 0.0
    test_question_ids: list[str] = field(default_factory=list)
    fine_tuned: dict[str, Any] | None = None
    """The fine-tuned reward model (:mod:`crowdpref.evaluation.finetune`) when one was asked
    for: its held-out accuracy, controls and facts; ``result`` False (and ``status`` "NOT A
    RESULT: ...") when it ran without real weights."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def model(self, name: str) -> Accuracy | None:
        return next((m for m in self.models if m.model == name), None)


def _credit(score: np.ndarray, y: np.ndarray) -> np.ndarray:
    """1 when the score's sign picks the label, 0 when it picks the other, 0.5 on a tie."""
    tie = np.isclose(score, 0.0, atol=1e-12)
    right = (score > 0) == (y > 0.5)
    return np.where(tie, 0.5, right.astype(float))


class _Bootstrap:
    """Resamples of the held-out questions, shared by every model (paired comparisons)."""

    def __init__(self, questions: np.ndarray, samples: int, seed: int) -> None:
        self.codes, uniques = _codes(questions)
        self.n_questions = len(uniques)
        rng = np.random.default_rng([seed, 17])
        self.draws = np.stack([np.bincount(rng.integers(0, self.n_questions, self.n_questions),
                                           minlength=self.n_questions) for _ in range(samples)])

    def interval(self, values: np.ndarray, mask: np.ndarray | None = None) -> tuple[float, float, float]:
        """(mean, low, high) of per-pair ``values`` (over ``mask``), resampling questions."""
        keep = np.ones(len(values), dtype=bool) if mask is None else mask
        if not keep.any():
            return math.nan, math.nan, math.nan
        sums = np.bincount(self.codes[keep], weights=values[keep], minlength=self.n_questions)
        counts = np.bincount(self.codes[keep], minlength=self.n_questions).astype(float)
        total = self.draws @ counts
        with np.errstate(invalid="ignore", divide="ignore"):
            stats = (self.draws @ sums) / total
        stats = stats[total > 0]
        alpha = (1 - LEVEL) / 2
        return (float(values[keep].mean()), float(np.quantile(stats, alpha)),
                float(np.quantile(stats, 1 - alpha)))


def _codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    uniques, codes = np.unique(values, return_inverse=True)
    return codes, uniques


def load_encoder(name: str | None) -> tuple[Callable[[list[str]], np.ndarray] | None, str]:
    """A frozen sentence-embedding encoder from LOCAL files only (never a download), or None
    and the line that says why it is skipped."""
    if not name:
        return None, "embedding: skipped (evaluation.embedding_model is off)"
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return None, (f"embedding: skipped ({name} not run: sentence-transformers is not "
                      "installed; TF-IDF stands in for it)")
    try:
        model = SentenceTransformer(name, device="cpu", local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any load failure skips the model, with the reason
        reason = first_line(exc, 160)
        return None, f"embedding: skipped ({name} is not available locally: {reason})"

    def encode(texts: list[str]) -> np.ndarray:
        return np.asarray(model.encode(texts, batch_size=64, show_progress_bar=False,
                                       normalize_embeddings=True))
    return encode, ""


def evaluate(data: EvalData, *, seed: int, test_share: float = 0.3, bootstrap_samples: int = 1000,
             encoder: Callable[[list[str]], np.ndarray] | None = None,
             encoder_skipped: str = "embedding: skipped (no embedding model given)",
             shuffles: int = SHUFFLES, fine_tune: FineTune | None = None) -> EvaluationResult:
    """Run the whole evaluation on ``data`` (see the module docstring). ``shuffles``: models
    trained on shuffled labels in that control. ``fine_tune``: also fine-tune a small causal
    LM as a reward model (TRL; same split, its own shuffled-label control)."""
    started = time.perf_counter()
    split = split_by_question(data.preferences, test_share, seed)
    pairs = orient(data.preferences, data.ratings, data.truth)
    in_test = np.isin(pairs.question, np.array(split.test))
    train, test = pairs.take(~in_test), pairs.take(in_test)
    boot = _Bootstrap(test.question, bootstrap_samples, seed)
    skipped: list[str] = []
    warnings: list[str] = []
    credits: dict[str, np.ndarray] = {}
    scorers: dict[str, Scorer] = {}
    models: list[Accuracy] = []

    def score(name: str, kind: str, scorer: Scorer, note: str = "") -> None:
        scorers[name] = scorer
        credits[name] = _credit(scorer(test), test.y)
        acc, low, high = boot.interval(credits[name])
        models.append(Accuracy(name, kind, acc, low, high, len(test), boot.n_questions, note))

    score("length", "model", fit_length(train), "log answer length only")
    score("tfidf", "model", fit_tfidf(train), "TF-IDF words and word pairs + log length")
    if encoder is not None:
        score("embedding", "model", fit_embedding(train, encoder), "frozen sentence embeddings + log length")
    else:
        skipped.append(encoder_skipped)
    # the permutation null: models trained on shuffled training labels. One shuffle is one
    # random direction, which can land far from 0.5 on a small test set, so the control is the
    # mean over ``shuffles`` of them and its interval the middle 95 % of their accuracies
    rng = np.random.default_rng([seed, 23])
    shuffled = np.array([_credit(fit_tfidf(train, rng.permutation(train.y))(test), test.y)
                         for _ in range(shuffles)])
    credits["shuffled-labels"] = shuffled.mean(axis=0)
    per_shuffle = shuffled.mean(axis=1)
    alpha = (1 - LEVEL) / 2
    models.append(Accuracy("shuffled-labels", "control", float(per_shuffle.mean()),
                           float(np.quantile(per_shuffle, alpha)), float(np.quantile(per_shuffle, 1 - alpha)),
                           len(test), boot.n_questions,
                           f"tfidf trained on shuffled training labels ({shuffles} shuffles; the "
                           "interval: the middle 95% of their accuracies): should sit at chance"))
    if train.position is not None and test.position is not None:
        score("position-only", "control", fit_position(train),
              "share of raters who saw an answer as A: at chance when the A/B order is counterbalanced")
    else:
        skipped.append("position-only: skipped (no single ratings with their A/B order: the "
                       "release has no `ratings` configuration)")

    gain = None
    if "tfidf" in credits:
        diff = credits["tfidf"] - credits["length"]
        d, lo, hi = boot.interval(diff)
        gain = {"model": "tfidf", "baseline": "length", "difference": d, "low": lo, "high": hi}

    curve = _learning_curve(train, test, boot, seed)
    by_category = [
        {"category": str(c), "pairs": int((test.category == c).sum()),
         **{name: float(credits[name][test.category == c].mean()) for name in ("length", "tfidf")}}
        for c in sorted(set(test.category))]
    by_agreement, column = _by_agreement(test, credits, boot, data)
    truth = _truth(test, credits, boot)
    fine_tuned = None
    if fine_tune is not None:
        fine_tuned = _fine_tuned(train, test, boot, fine_tune, seed, credits, models)
        if not fine_tuned["result"]:
            warnings.append(f"fine-tuned reward model {fine_tune.model}: RAN WITHOUT REAL WEIGHTS "
                            f"({fine_tuned['why_not_real']}): its numbers are {NOT_A_RESULT}, only a "
                            "smoke test of the pipeline")
        elif fine_tuned["shuffled_labels"] is not None:
            control = fine_tuned["shuffled_labels"]
            if control["low"] > 0.5 + CHANCE_TOLERANCE or control["high"] < 0.5 - CHANCE_TOLERANCE:
                warnings.append(f"control reward-model shuffled-labels is off chance: "
                                f"{control['accuracy']:.3f} ({control['low']:.3f} to {control['high']:.3f}); "
                                "the split or the inputs leak the labels")
    for m in models:
        if m.kind == "control" and not math.isnan(m.low) and (
                m.low > 0.5 + CHANCE_TOLERANCE or m.high < 0.5 - CHANCE_TOLERANCE):
            warnings.append(f"control {m.model} is off chance: {m.accuracy:.3f} ({m.low:.3f} to "
                            f"{m.high:.3f}); " + ("check that the A/B display order was "
                                                  "counterbalanced" if m.model == "position-only"
                                                  else "the split or the features leak the labels"))
    if len(test) < SMALL_TEST:
        warnings.append(f"only {len(test)} held-out pairs from {boot.n_questions} questions: the "
                        "intervals are wide; collect more before trusting a verdict")
    result = EvaluationResult(
        source=data.source, seed=seed, test_share=test_share,
        train_questions=len(split.train), test_questions=len(split.test),
        train_pairs=len(train), test_pairs=len(test), bootstrap_samples=bootstrap_samples,
        models=models, gain_over_length=gain, learning_curve=curve, by_category=by_category,
        by_agreement=by_agreement, agreement_column=column, truth=truth, skipped=skipped,
        warnings=warnings, verdict="", signal_beyond_length=None,
        test_question_ids=list(split.test), fine_tuned=fine_tuned)
    result.verdict, result.signal_beyond_length = verdict_line(result)
    result.seconds = time.perf_counter() - started
    return result


def _learning_curve(train: Oriented, test: Oriented, boot: _Bootstrap, seed: int) -> list[dict[str, Any]]:
    """length and tfidf trained on 25/50/75/100 % of the training QUESTIONS (a seeded order)."""
    questions = np.array(sorted(set(train.question)))
    order = questions[np.random.default_rng([seed, 29]).permutation(len(questions))]
    rows = []
    for fraction in CURVE_FRACTIONS:
        n = max(1, math.ceil(fraction * len(order)))
        part = train.take(np.isin(train.question, order[:n]))
        row: dict[str, Any] = {"fraction": fraction, "questions": n, "pairs": len(part)}
        for name, fit in (("length", fit_length), ("tfidf", fit_tfidf)):
            acc, low, high = boot.interval(_credit(fit(part)(test), test.y))
            row.update({name: acc, f"{name}_low": low, f"{name}_high": high})
        rows.append(row)
    return rows


def _by_agreement(test: Oriented, credits: dict[str, np.ndarray], boot: _Bootstrap,
                  data: EvalData) -> tuple[list[dict[str, Any]], str | None]:
    """Accuracy on the held-out pairs whose raters agreed more (``p_chosen`` at or above its
    median) and less (below it)."""
    if test.p_chosen is None:
        return [], None
    column = "p_chosen" if "p_chosen" in data.preferences.columns else "agreement"
    threshold = float(np.nanmedian(test.p_chosen))
    rows = []
    for group, mask in (("high", test.p_chosen >= threshold), ("low", test.p_chosen < threshold)):
        row: dict[str, Any] = {"group": group, "rule": f"{column} {'>=' if group == 'high' else '<'} "
                               f"{threshold:.3f}", "pairs": int(mask.sum())}
        for name in ("length", "tfidf"):
            acc, low, high = boot.interval(credits[name], mask)
            row.update({name: acc, f"{name}_low": low, f"{name}_high": high})
        rows.append(row)
    return rows, column


def _against_truth(test: Oriented, credit: np.ndarray, boot: _Bootstrap) -> dict[str, float] | None:
    """How often a model's pick (``credit`` against the crowd's labels) matches the hidden truth,
    over the held-out pairs whose truth is known (a tie stays half)."""
    if test.truth is None or not (known := ~np.isnan(test.truth)).any():
        return None
    truth = np.where(known, test.truth, 0.0)
    # ``credit``: how far the model agrees with the crowd's label (1, 0, a tie 0.5, or a share
    # of shuffled models); where the crowd's label is the truth it agrees with the truth as much,
    # elsewhere the rest
    against = np.where(test.y == truth, credit, 1.0 - credit)
    acc, low, high = boot.interval(against, known)
    return {"accuracy": acc, "low": low, "high": high}


def _truth(test: Oriented, credits: dict[str, np.ndarray], boot: _Bootstrap) -> dict[str, Any] | None:
    """Against the simulated crowd's hidden truth: the crowd's labels and each model."""
    if test.truth is None:
        return None
    known = ~np.isnan(test.truth)
    if not known.any():
        return None
    out: dict[str, Any] = {"pairs": int(known.sum())}
    out["crowd"] = _against_truth(test, np.ones(len(test)), boot)  # the crowd agrees with itself
    for name, credit in credits.items():
        out[name] = _against_truth(test, credit, boot)
    return out


def _fine_tuned(train: Oriented, test: Oriented, boot: _Bootstrap, spec: FineTune, seed: int,
                credits: dict[str, np.ndarray], models: list[Accuracy]) -> dict[str, Any]:
    """The fine-tuned reward model on the same split: held-out accuracy, gain over length, its
    own shuffled-label control, the (shared) position-only control, the hidden truth."""
    scorer, facts = fit_reward_model(train, spec, seed)
    credit = _credit(scorer(test), test.y)
    acc, low, high = boot.interval(credit)
    d, lo, hi = boot.interval(credit - credits["length"])
    rng = np.random.default_rng([seed, 31])
    shuffled = None
    if spec.shuffles:
        runs = np.array([_credit(fit_reward_model(train, spec, seed + 1 + k, rng.permutation(train.y))[0](test),
                                 test.y) for k in range(spec.shuffles)])
        if spec.shuffles == 1:
            s_acc, s_low, s_high = boot.interval(runs[0])
            how = "1 shuffle; the interval resamples the held-out questions"
        else:
            per = runs.mean(axis=1)
            alpha = (1 - LEVEL) / 2
            s_acc, s_low, s_high = (float(per.mean()), float(np.quantile(per, alpha)),
                                    float(np.quantile(per, 1 - alpha)))
            how = f"{spec.shuffles} shuffles; the interval: the middle 95% of their accuracies"
        shuffled = {"accuracy": s_acc, "low": s_low, "high": s_high, "shuffles": spec.shuffles,
                    "note": f"the same model trained on shuffled training labels ({how}): should sit at chance"}
    position = next((m for m in models if m.model == "position-only"), None)
    real = bool(facts["real_weights"])
    return {
        "model": spec.model, "result": real,
        "status": "result" if real else (f"{NOT_A_RESULT}: {facts['why_not_real']}; a smoke test of the "
                                         "pipeline, these numbers say nothing about the data"),
        **facts, "epochs": spec.epochs, "learning_rate": spec.learning_rate, "batch_size": spec.batch_size,
        "max_length": spec.max_length, "test_pairs": len(test), "questions": boot.n_questions,
        "accuracy": acc, "low": low, "high": high,
        "gain_over_length": {"difference": d, "low": lo, "high": hi},
        "shuffled_labels": shuffled,
        "position_only": None if position is None else {
            "accuracy": position.accuracy, "low": position.low, "high": position.high,
            "note": "the shared control: it reads no text, so it is the same for every model"},
        "truth": _against_truth(test, credit, boot),
    }


def verdict_line(result: EvaluationResult) -> tuple[str, bool | None]:
    """One line: whether the data carries signal beyond length, and how sure."""
    length, tfidf, gain = result.model("length"), result.model("tfidf"), result.gain_over_length
    if length is None or tfidf is None or gain is None:
        return "No verdict: the length and TF-IDF models did not both run.", None
    pct = f"{LEVEL:.0%}"
    numbers = (f"TF-IDF {tfidf.accuracy:.3f} vs length-only {length.accuracy:.3f} on "
               f"{result.test_pairs} held-out pairs from {result.test_questions} questions; gain "
               f"{gain['difference']:+.3f} ({pct} interval {gain['low']:+.3f} to {gain['high']:+.3f})")
    controls = [w for w in result.warnings if w.startswith("control ")]
    caveat = " CONTROLS OFF CHANCE - distrust this: " + "; ".join(controls) if controls else ""
    if gain["low"] > 0:
        line, signal = f"Signal beyond length: {numbers}, above zero.", True
    elif gain["high"] < 0:
        line, signal = (f"No signal beyond length: the words do worse than length alone ({numbers}).",
                        False)
    else:
        line, signal = f"No signal beyond length shown: {numbers} includes zero.", False
    if result.test_pairs < SMALL_TEST and signal is not True:
        line += f" Too few held-out pairs (under {SMALL_TEST}) to rule it out."
        signal = None
    return line + caveat, signal
