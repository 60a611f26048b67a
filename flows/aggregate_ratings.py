"""Aggregation flow: study 2's ratings become the preference dataset (``preferences.parquet``)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from crowdpref.config import load_study
from crowdpref.runfolder import RunFolder
from crowdpref.settings import load_settings
from tasks.aggregation import publish_aggregation_artifacts, read_inputs, run_aggregation, write_outputs


@flow(name="aggregate-ratings", log_prints=True)
def aggregate_ratings(study: str = "studies/demo.yaml", force: bool = False) -> Path:
    """Average the ratings of every answer pair and decide chosen/rejected.

    Reads questions, responses, pairs and ratings (and screening.parquet when present) from the
    study's run folder; un-swaps each rating to the pair's fixed orientation; fits every rater's
    reliability (when the ratings carry rater keys); per pair the mean - plain, or
    reliability-weighted with ``aggregation.method: reliability_weighted`` - decides the chosen
    answer, with margin, agreement, spread and a bootstrap ``p_chosen`` and mean_rating
    interval. Ties are reported and left out; incomplete pairs are kept or dropped as
    ``aggregation.incomplete_pairs`` says. Writes ``preferences.parquet`` (prompt/chosen/rejected
    + margin ...), ``raters.parquet`` (rater reliability) and ``aggregation.json``
    (Krippendorff's alpha, position bias, the method and a reliability summary, per-category
    counts and, for a simulated crowd, the agreement with its hidden truth); publishes them as
    artifacts.

    An existing ``preferences.parquet`` is kept (the stage is done) unless ``force`` is true.
    Returns the path of ``preferences.parquet``.
    """
    cfg = load_study(study)
    run = RunFolder.for_study(load_settings().runs_dir, cfg.name)
    if run.preferences.exists() and not force:
        print(f"{run.preferences} already exists: skipping aggregation (run with force=True to redo it)")
        return run.preferences
    inputs = read_inputs(run)
    result = run_aggregation(cfg, inputs)
    path = write_outputs(result, run)
    publish_aggregation_artifacts(cfg.name, result)
    s = result.stats
    truth = f", agreement with truth {s.truth.share:.3f}" if s.truth and s.truth.compared else ""
    raters = (f", {s.reliability.raters} raters (median reliability "
              f"{s.reliability.median_reliability:.2f})" if s.reliability else "")
    print(f"{s.kept} preference rows from {s.pairs} pairs ({s.ties} ties, {s.incomplete_pairs} incomplete), "
          f"method {s.method}, alpha {s.alpha:.3f}{raters}{truth} -> {path}")
    return path
