"""Does the data help? Before anything big is trained, small reward models trained on part of
the preferences (split by question) are scored on the held-out questions against a length-only
baseline and two controls that must sit at chance (shuffled labels; position only, at chance
because the A/B order is counterbalanced), with bootstrap intervals over questions, a learning
curve, accuracy by category and by rater agreement, and a one-line verdict.

- :mod:`crowdpref.evaluation.data`: the inputs (run folder, release folder, Hub id) and the split;
- :mod:`crowdpref.evaluation.models`: the models (length, TF-IDF, frozen embeddings, position);
- :mod:`crowdpref.evaluation.report`: :func:`evaluate` and the verdict;
- :mod:`crowdpref.evaluation.outputs`: ``evaluation.json``, the plot, the Markdown report;
- :mod:`crowdpref.evaluation.finetune`: the optional fine-tuned reward model (TRL, for a GPU).
"""

from crowdpref.evaluation.data import (
    EvalData,
    Split,
    from_release,
    from_run_folder,
    split_by_question,
)
from crowdpref.evaluation.outputs import (
    EVALUATION_FILE,
    PLOT_FILE,
    fine_tuned_line,
    fine_tuned_lines,
    markdown,
    plot_learning_curve,
    truth_line,
    write_outputs,
)
from crowdpref.evaluation.report import (
    Accuracy,
    EvaluationResult,
    evaluate,
    load_encoder,
    verdict_line,
)

__all__ = [
    "EVALUATION_FILE",
    "PLOT_FILE",
    "Accuracy",
    "EvalData",
    "EvaluationResult",
    "Split",
    "evaluate",
    "fine_tuned_line",
    "fine_tuned_lines",
    "from_release",
    "from_run_folder",
    "load_encoder",
    "markdown",
    "plot_learning_curve",
    "split_by_question",
    "truth_line",
    "verdict_line",
    "write_outputs",
]
