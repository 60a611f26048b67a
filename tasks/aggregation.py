"""Prefect tasks over :mod:`crowdpref.aggregation`: read the study files, apply the
preregistered filters (:mod:`crowdpref.filters`), aggregate the ratings they keep, write
``preferences.parquet``, ``aggregation.json`` and the filters' files (``filters.json``,
``responses_raw.parquet``, ``ratings_raw.parquet``), and show the statistics as artifacts."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path

import pandas as pd
from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE

from crowdpref.aggregation import AggregationResult, aggregate, check_truth, describe_length_bias, truth_by_text
from crowdpref.config import StudyConfig
from crowdpref.filters import (
    FilterResult,
    apply_filters,
    check_preregistered,
    rater_reliabilities,
    report_markdown,
)
from crowdpref.runfolder import RunFolder, read_parquet, write_json, write_parquet
from crowdpref.screening import excluded_response_ids
from crowdpref.settings import load_settings
from crowdpref.store import open_store
from crowdpref.study1 import EXCLUDED_RESPONSES
from crowdpref.study2 import EXCLUDED_RATINGS, gold_outcomes
from crowdpref.withdrawals import leave_out_fields, withdrawn_in
from tasks.artifacts import artifact_key, which_rows

REPORT_ROWS = 200
RATERS_FILE = "raters.parquet"
TRUTH_RESPONSES = "crowd-truth-responses.parquet"
TRUTH_STUDY1 = "crowd-truth-study1.parquet"
PARTICIPANTS_FILE = "participants.parquet"
FILTER_FILES = ("filters.json", "responses_raw.parquet", "ratings_raw.parquet")
"""Written by the preregistered filters: the report, every answer and every rating with
``filtered_by``."""


@dataclass
class AggregationInputs:
    questions: pd.DataFrame
    responses: pd.DataFrame
    pairs: pd.DataFrame
    ratings: pd.DataFrame
    screening: pd.DataFrame | None
    truth: pd.DataFrame | None  # response_id, hidden_quality (simulated crowd only)
    truth_source: str | None
    participants: pd.DataFrame | None = None
    """participants.parquet (the study exports), None when absent (an older run folder)."""
    excluded_responses: pd.DataFrame | None = None
    """responses_excluded.parquet: answers excluded during collection (failed checks)."""
    excluded_ratings: pd.DataFrame | None = None
    """ratings_excluded.parquet: ratings excluded during collection (failed checks)."""
    withdrawn: int = 0
    """Participants who withdrew: every frame above leaves their rows out."""
    gold: pd.DataFrame | None = None
    """Study 2's graded gold pairs (rater_key, passed) from the store: the gold anchor."""


@dataclass
class FilteredAggregation(AggregationResult):
    """The aggregation of the data the preregistered filters kept, with what they removed."""

    filters: FilterResult | None = None


@task(name="read-aggregation-inputs", cache_policy=NONE, retries=2, retry_delay_seconds=1)
def read_inputs(run: RunFolder) -> AggregationInputs:
    """questions, responses, pairs and ratings (a missing one is a one-line error naming the
    stage to run first), plus screening.parquet and the simulated crowd's truth when present."""
    questions = read_parquet(run.questions, "run the generate-questions flow first")
    responses = read_parquet(run.responses, "run the collect-responses flow first (study 1)")
    pairs = read_parquet(run.pairs, "run the collect-ratings flow first (study 2 builds the pairs)")
    ratings = read_parquet(run.ratings, "run the collect-ratings flow first (study 2)")
    screening = pd.read_parquet(run.screening) if run.screening.exists() else None
    truth, source = None, None
    by_response = run.private_dir / TRUTH_RESPONSES
    by_user = run.private_dir / TRUTH_STUDY1
    if by_response.exists():
        truth, source = pd.read_parquet(by_response), TRUTH_RESPONSES
    elif by_user.exists():
        truth, source = truth_by_text(pd.read_parquet(by_user), responses), f"{TRUTH_STUDY1} (by text)"
    participants = (pd.read_parquet(run.file(PARTICIPANTS_FILE))
                    if run.file(PARTICIPANTS_FILE).exists() else None)
    excluded = [pd.read_parquet(run.file(name)) if run.file(name).exists() else None
                 for name in (EXCLUDED_RESPONSES, EXCLUDED_RATINGS)]
    inputs = AggregationInputs(questions, responses, pairs, ratings, screening, truth, source,
                               participants, *excluded)
    store = open_store(load_settings())
    try:  # people who withdrew: their answers, the pairs built from them and their ratings go
        gone = withdrawn_in(store, run.path.name, run.private_dir)
        gold = gold_outcomes(store, run.path.name, run.private_dir)
    finally:
        store.close()
    return replace(leave_out_fields(inputs, gone), withdrawn=gone.participants, gold=gold)


def _preregistered(cfg: StudyConfig) -> dict[str, object] | None:
    """The study store's record of the filters (None: not preregistered); changed rules raise."""
    store = open_store(load_settings())
    try:
        record = check_preregistered(store, cfg.name, cfg.filters, source=cfg.source)
    finally:
        store.close()
    return record.to_dict() if record is not None else None


@task(name="aggregate-ratings", cache_policy=NONE)
def run_aggregation(cfg: StudyConfig, inputs: AggregationInputs) -> AggregationResult:
    """Un-swap, average per pair, decide chosen/rejected; statistics; check against the truth
    of a simulated crowd when there is one. Deterministic, so not retried."""
    logger = get_run_logger()
    excluded: set[str] = set()
    if inputs.screening is not None:
        excluded = excluded_response_ids(inputs.screening, cfg.screening.policy)
    # the preregistered filters, on reliabilities fitted over EVERY rating; the default
    # preferences are built from what they keep (raters.parquet keeps every rater)
    all_raters = rater_reliabilities(inputs.ratings, cfg.study2.scale_points)
    kept = apply_filters(cfg.filters, inputs.participants, inputs.responses, inputs.ratings,
                         all_raters, source=cfg.source or "the study config")
    kept.report.preregistered = _preregistered(cfg)
    kept.with_excluded(inputs.excluded_responses, inputs.excluded_ratings)  # the raw data holds them too
    for line in kept.warnings:
        logger.warning(line)
    if kept.report.preregistered is None:
        logger.warning(f"study {cfg.name}: the filters were not preregistered (no record in the "
                       "study store from before collection began); the report says so")
    result = aggregate(
        kept.ratings, kept.kept_pairs(inputs.pairs), kept.responses, inputs.questions,
        scale_points=cfg.study2.scale_points,
        ratings_per_pair=cfg.study2.ratings_per_pair,
        config=cfg.aggregation,
        screening=inputs.screening,
        excluded_response_ids=excluded,
        seed=cfg.seed,
        withdrawn_participants=inputs.withdrawn,
        gold=inputs.gold,
    )
    result = FilteredAggregation(**{f.name: getattr(result, f.name) for f in fields(result)},
                                 filters=kept)
    if all_raters is not None:
        result.raters = all_raters
    if inputs.truth is not None:
        result.stats.truth = check_truth(result.preferences, inputs.truth)
        logger.info("agreement with the hidden truth (%s): %.3f over %d rows", inputs.truth_source,
                    result.stats.truth.share, result.stats.truth.compared)
    if inputs.screening is None:
        logger.warning("no screening.parquet: chosen_flagged/rejected_flagged are all False "
                       "(run screen-responses first to mark flagged answers)")
    for line in result.anomalies:
        logger.warning(line)
    return result


@task(name="write-preferences", cache_policy=NONE, retries=2, retry_delay_seconds=1)
def write_outputs(result: AggregationResult, run: RunFolder) -> Path:
    """``aggregation.json``, the filters' report and raw files, and ``raters.parquet`` (when the
    ratings carry rater keys) first, then ``preferences.parquet`` (the file that marks the stage
    done), all atomically: safe to retry."""
    write_json(result.stats.to_dict(), run.file("aggregation.json"))
    if isinstance(result, FilteredAggregation) and result.filters is not None:
        report, raw_responses, raw_ratings = FILTER_FILES
        write_json(result.filters.report.to_dict(), run.file(report))
        write_parquet(result.filters.responses_raw, run.file(raw_responses))
        write_parquet(result.filters.ratings_raw, run.file(raw_ratings))
    if result.raters is not None:
        write_parquet(result.raters, run.file(RATERS_FILE))
    return write_parquet(result.preferences, run.preferences)


@task(name="aggregation-artifacts", cache_policy=NONE)
def publish_aggregation_artifacts(study: str, result: AggregationResult) -> None:
    """Statistics (markdown), the preregistered filters per rule (markdown), per-category counts
    (table), ties and incomplete pairs (table), and the Bradley-Terry best/worst answers when
    fitted."""
    if isinstance(result, FilteredAggregation) and result.filters is not None:
        report = result.filters.report
        create_markdown_artifact(
            key=artifact_key(study, "aggregation-filters"),
            markdown=report_markdown(report),
            description=f"Preregistered filters: {report.total.participants} participants, "
                        f"{report.total.answers} answers and {report.total.ratings} ratings "
                        "left out of the default preferences.",
        )
    create_markdown_artifact(
        key=artifact_key(study, "aggregation-stats"),
        markdown=stats_markdown(result),
        description=f"{result.stats.kept} preference rows from {result.stats.pairs} pairs.",
    )
    create_table_artifact(
        key=artifact_key(study, "aggregation-per-category"),
        table=[{k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}
               for row in result.stats.per_category] or [{"category": "(none)"}],
        description="Per category: pairs, rated, kept, ties, incomplete, excluded, mean agreement.",
    )
    report = result.pair_stats[(result.pair_stats["status"] != "kept") | result.pair_stats["incomplete"]]
    shown = report.head(REPORT_ROWS)
    rows = [{"pair_id": r.pair_id, "question_id": r.question_id, "status": r.status,
             "incomplete": bool(r.incomplete), "n_ratings": int(r.n_ratings),
             "mean": None if pd.isna(r.mean) else round(float(r.mean), 3)}
            for r in shown.itertuples()]
    create_table_artifact(
        key=artifact_key(study, "aggregation-ties-incomplete"),
        table=rows or [{"pair_id": "(none)", "status": "every pair complete and decided"}],
        description=f"Ties, incomplete, unrated and excluded pairs ({which_rows(REPORT_ROWS, len(report))}).",
    )
    if result.raters is not None:
        create_table_artifact(
            key=artifact_key(study, "aggregation-rater-reliability"),
            table=rater_table(result.raters) or [{"rater_key": "(none)"}],
            description=rater_table_description(result.raters),
        )
    if result.bradley_terry_extremes is not None:
        create_table_artifact(
            key=artifact_key(study, "aggregation-bradley-terry"),
            table=result.bradley_terry_extremes.head(REPORT_ROWS).round(3).to_dict(orient="records"),
            description="Bradley-Terry: best and worst answer per question.",
        )


def rater_table(raters: pd.DataFrame) -> list[dict[str, object]]:
    """The least reliable raters first (anonymous rater keys only), at most REPORT_ROWS."""
    shown = raters.sort_values(["reliability", "rater_key"], kind="stable").head(REPORT_ROWS)
    return [{"rater_key": str(r.rater_key), "n_ratings": int(r.n_ratings),
             "reliability": round(float(r.reliability), 3), "noise_sd": round(float(r.noise_sd), 3),
             "slope": round(float(r.slope), 3), "bias": round(float(r.bias), 3)}
            for r in shown.itertuples()]


def rater_table_description(raters: pd.DataFrame) -> str:
    n = len(raters)
    return (f"Rater reliability, least reliable first ({which_rows(REPORT_ROWS, n)} raters; anonymous keys): share "
            "of a rating's variance that follows the consensus, 0 to 1.")


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{value:.{digits}f}"


def _sources(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {source}" for source, n in counts.items()) or "none"


def stats_markdown(result: AggregationResult) -> str:
    s = result.stats
    pb, ob = s.position_bias, s.order_balance
    lines = [
        "# Aggregation", "",
        f"- pairs: {s.pairs} ({s.rated_pairs} rated, {s.unrated_pairs} unrated, "
        f"{s.excluded_pairs} excluded by screening)",
        f"- ratings used: {s.ratings} on a {s.scale_points}-point scale (midpoint {s.midpoint:g})",
        f"- preference rows: **{s.kept}**; ties left out: {s.ties}; incomplete: {s.incomplete_pairs} "
        f"({s.incomplete_policy}, {s.incomplete_dropped} dropped)",
        f"- Krippendorff's alpha (ordinal): **{_fmt(s.alpha)}**",
        f"- mean agreement (share on the majority side): {_fmt(s.mean_agreement)}; "
        f"mean margin: {_fmt(s.mean_margin)}; mean spread: {_fmt(s.mean_spread)}",
        f"- flagged answers among preference rows: {s.chosen_flagged} chosen, "
        f"{s.rejected_flagged} rejected",
        f"- position bias: raw mean {_fmt(pb.raw_mean)} (shift {_fmt(pb.raw_shift)}, "
        f"{_fmt(100 * pb.raw_share_a, 1)}% on the A side) vs un-swapped mean "
        f"{_fmt(pb.unswapped_mean)} (shift {_fmt(pb.unswapped_shift)})",
        f"- A/B order balance: {ob.balanced_pairs} of {ob.rated_pairs} rated pairs balanced "
        f"({_fmt(100 * ob.balanced_share, 1)}%; position bias cancels inside them), "
        f"{ob.unbalanced_pairs} not (largest imbalance {ob.max_imbalance})",
        f"- {describe_length_bias(s.length_bias)}",
        f"- sources: answers {_sources(s.answer_sources)}; ratings used {_sources(s.rating_sources)}",
    ]
    method = {"reliability_weighted": "reliability-weighted mean (each rating weighted by its rater's reliability, "
                                      "position bias corrected)",
              "gold_anchored": "gold-anchored weighted mean (reliability weights signed and scaled by each "
                               "rater's record on the gold pairs, position bias corrected)"}.get(s.method, "plain mean")
    if getattr(s, "decided_by", s.method) != s.method:
        method += f"; decided by the {s.decided_by.replace('_', ' ')} here"
    lines.append(f"- decided by: **{method}** (aggregation.method: {s.method})")
    rs = s.reliability
    if rs is not None:
        lines.append(f"- rater reliability: {rs.raters} raters, median {_fmt(rs.median_reliability)}, "
                     f"{rs.below_half} below 0.5; mean position bias {_fmt(rs.position_bias)} "
                     f"points; {rs.decisions_changed} pairs decided differently by the plain and "
                     "the weighted mean")
    lines.append(f"- uncertainty ({s.bootstrap_samples} bootstrap resamples per pair): mean "
                 f"p_chosen {_fmt(s.mean_p_chosen)}; median width of the "
                 f"{_fmt(100 * s.interval_level, 0)}% mean_rating interval "
                 f"{_fmt(s.median_interval_width)} points")
    if s.bradley_terry_questions is not None:
        lines.append(f"- Bradley-Terry fitted for {s.bradley_terry_questions} questions "
                     f"({_fmt(100 * s.interval_level, 0)}% bootstrap intervals)")
    if s.truth is not None:
        lines.append(f"- agreement with the simulated crowd's hidden quality: "
                     f"**{_fmt(s.truth.share)}** over {s.truth.compared} rows "
                     f"({s.truth.truth_ties} truth ties, {s.truth.unknown} unknown)")
    lines += ["", "## Reported", ""] + ([f"- {a}" for a in result.anomalies] or ["nothing"])
    return "\n".join(lines)
