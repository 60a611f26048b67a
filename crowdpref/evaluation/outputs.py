"""The evaluation's outputs: ``evaluation.json`` and the learning-curve plot in the run folder
(both written atomically), and the Markdown table with the verdict (the Prefect artifact)."""

from __future__ import annotations

import io
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from crowdpref.evaluation.report import EvaluationResult
from crowdpref.runfolder import write_json

__all__ = ["EVALUATION_FILE", "PLOT_FILE", "fine_tuned_line", "fine_tuned_lines", "markdown", "plot_learning_curve", "truth_line",
           "write_outputs"]

EVALUATION_FILE = "evaluation.json"
PLOT_FILE = "evaluation-learning-curve.png"


def _fmt(value: Any) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def markdown(result: EvaluationResult) -> str:
    """The table of models and controls, the learning curve, and the verdict."""
    split = (f"Split by question (seed {result.seed}): {result.train_questions} questions "
             f"({result.train_pairs} pairs) train, {result.test_questions} questions "
             f"({result.test_pairs} pairs) test; 95% intervals from {result.bootstrap_samples} "
             "resamples of the held-out questions.")
    truth = result.truth or {}
    lines = ["# Does the data carry signal?", "", f"**{result.verdict}**", "", split, ""]
    if truth:
        lines += [(f"Held-out accuracy against the crowd's labels, and (a simulated crowd) against the "
                  f"hidden truth on the {truth['pairs']} held-out pairs whose truth is known; the "
                  f"crowd's own labels match the truth in {_span(truth.get('crowd'))}."), "",
                  ("| Model | Kind | Vs the crowd's labels | 95% interval | Vs the hidden truth (95% interval) "
                  "| What it is |"), "|---|---|---|---|---|---|"]
    else:
        lines += ["| Model | Kind | Held-out accuracy | 95% interval | What it is |", "|---|---|---|---|---|"]
    for m in result.models:
        vs_truth = f" {_span(truth.get(m.model))} |" if truth else ""
        lines.append(f"| {m.model} | {m.kind} | {_fmt(m.accuracy)} | {_fmt(m.low)} to {_fmt(m.high)} |"
                     f"{vs_truth} {m.note} |")
    lines += fine_tuned_lines(result.fine_tuned)
    lines += ["", "Learning curve (share of the training questions):", "",
              "| Training questions | Pairs | length | tfidf |", "|---|---|---|---|"]
    for row in result.learning_curve:
        lines.append(f"| {row['fraction']:.0%} ({row['questions']}) | {row['pairs']} | "
                     f"{_fmt(row['length'])} | {_fmt(row['tfidf'])} ({_fmt(row['tfidf_low'])} to "
                     f"{_fmt(row['tfidf_high'])}) |")
    if truth:
        lines += ["", truth_line(truth)]
    lines += [""] + [f"- {line}" for line in [*result.skipped, *result.warnings]]
    return "\n".join(lines).rstrip() + "\n"


def _span(entry: Any) -> str:
    """``0.812 (0.780 to 0.840)`` from an accuracy dict; n/a when missing."""
    if not isinstance(entry, dict):
        return "n/a"
    return f"{_fmt(entry.get('accuracy'))} ({_fmt(entry.get('low'))} to {_fmt(entry.get('high'))})"


def truth_line(truth: dict[str, Any]) -> str:
    """One line: the crowd's labels and the models against a simulated crowd's hidden truth."""
    models = ", ".join(f"{name} {_fmt(truth[name]['accuracy'])}" for name in ("tfidf", "embedding", "length")
                       if isinstance(truth.get(name), dict))
    return (f"Against the simulated crowd's hidden truth ({truth['pairs']} held-out pairs): the crowd's "
            f"labels {_fmt(truth['crowd']['accuracy'])}; the models trained on them: {models}.")


def fine_tuned_line(fine_tuned: dict[str, Any]) -> str:
    """One line: the fine-tuned reward model's held-out accuracy and controls, or that it is not
    a result (then without its numbers)."""
    if not fine_tuned.get("result"):
        return f"fine-tuned reward model {fine_tuned['model']}: {fine_tuned['status']}"
    control = fine_tuned.get("shuffled_labels")
    gain = fine_tuned["gain_over_length"]
    return (f"fine-tuned reward model {fine_tuned['model']} ({fine_tuned['device']}, {fine_tuned['seconds']:.0f} s): "
            f"held-out {_span(fine_tuned)}, gain over length {gain['difference']:+.3f} ({gain['low']:+.3f} to "
            f"{gain['high']:+.3f}), shuffled-label control {_span(control) if control else 'not run'}"
            + (f", against the hidden truth {_span(fine_tuned['truth'])}" if fine_tuned.get("truth") else ""))


def fine_tuned_lines(fine_tuned: dict[str, Any] | None) -> list[str]:
    """The fine-tuned reward model: its numbers when its weights were real; otherwise one loud
    line and NO numbers (a smoke test is not a result)."""
    if not fine_tuned:
        return []
    if not fine_tuned.get("result"):
        return ["", (f"**Fine-tuned reward model `{fine_tuned['model']}`: {fine_tuned['status']}.** Its "
                    "numbers are in evaluation.json under `fine_tuned` for checking the pipeline only.")]
    lines = ["", (f"Fine-tuned reward model `{fine_tuned['model']}` (TRL RewardTrainer, {fine_tuned['epochs']:g} "
                 f"epoch(s), {fine_tuned['train_pairs_used']} of {fine_tuned['train_pairs']} training pairs, "
                 f"{fine_tuned['device']}, {fine_tuned['seconds']:.0f} s), on the same split:"), "",
             "| Model | Held-out accuracy (95% interval) | Vs the hidden truth |", "|---|---|---|",
             f"| fine-tuned | {_span(fine_tuned)} | {_span(fine_tuned.get('truth'))} |"]
    for key, name in (("shuffled_labels", "fine-tuned, shuffled labels (control)"),
                      ("position_only", "position-only (control, shared)")):
        if fine_tuned.get(key):
            lines.append(f"| {name} | {_span(fine_tuned[key])} | |")
    gain = fine_tuned["gain_over_length"]
    lines += ["", f"Gain over length: {gain['difference']:+.3f} ({gain['low']:+.3f} to {gain['high']:+.3f})."]
    return lines


def plot_learning_curve(result: EvaluationResult, path: Path) -> Path | None:
    """The learning curve as a PNG (matplotlib, written atomically); None when matplotlib is
    not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    curve = result.learning_curve
    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=100)
    x = [row["pairs"] for row in curve]
    for name, colour in (("tfidf", "tab:blue"), ("length", "tab:orange")):
        ax.plot(x, [row[name] for row in curve], marker="o", color=colour, label=name)
        ax.fill_between(x, [row[f"{name}_low"] for row in curve], [row[f"{name}_high"] for row in curve],
                        color=colour, alpha=0.15)
    ax.axhline(0.5, color="grey", linestyle="--", linewidth=1, label="chance")
    ax.set_xlabel("training pairs (25/50/75/100 % of the training questions)")
    ax.set_ylabel("held-out accuracy")
    ax.set_ylim(0, 1)
    ax.set_title(f"Learning curve ({result.test_pairs} held-out pairs, 95 % intervals)", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(buffer.getvalue())
        os.chmod(tmp, 0o644)
        Path(tmp).replace(path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def write_outputs(result: EvaluationResult, folder: Path) -> tuple[Path, Path | None]:
    """The plot (when matplotlib is there), then ``evaluation.json`` (the file that marks the
    stage done); both atomic."""
    plot = plot_learning_curve(result, folder / PLOT_FILE)
    data = result.to_dict()
    data["plot"] = plot.name if plot is not None else None
    return write_json(data, folder / EVALUATION_FILE), plot
