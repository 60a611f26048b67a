"""The build of the release: the run folder's results in Hugging Face Hub layout, with a
dataset card, written to a staging folder, scanned and swapped in as ``<run>/release/``.

``<run>/release/`` after :func:`build_release`::

    README.md                                      dataset card (YAML header from DatasetCardData)
    data/default/train-00000-of-00001.parquet      preferences: prompt, chosen, rejected, margin ...
    data/responses/train-00000-of-00001.parquet    study 1: the written answers (kept by the filters)
    data/ratings/train-00000-of-00001.parquet      study 2: the ratings (kept by the filters)
    data/responses_raw/train-00000-of-00001.parquet  every answer, with ``filtered_by``
    data/ratings_raw/train-00000-of-00001.parquet  every rating, with ``filtered_by``
    data/participants/train-00000-of-00001.parquet both studies' participants (when exported)
    data/raters/train-00000-of-00001.parquet       study 2: reliability per anonymous rater (when aggregated)
    data/questions/train-00000-of-00001.parquet    the questions
    data/screening/train-00000-of-00001.parquet    hate-speech screening (when it ran)

Filters: when the aggregation applied the preregistered filters (``filters.json`` in the run
folder, :mod:`crowdpref.filters`), ``responses`` and ``ratings`` hold what they kept - the data
the default configuration is built from - and the ``*_raw`` configurations hold everything
collected, each row's ``filtered_by`` naming the rules that removed it; the card's "Filters
(preregistered)" section states each rule and what it removed. A run folder without
``filters.json`` (aggregated before the filters existed) publishes every answer and rating in
``responses`` and ``ratings`` and no ``*_raw`` configurations.

``load_dataset(folder)`` gives the preferences; ``load_dataset(folder, "ratings")`` the others.

Each configuration's columns come from :func:`crowdpref.release.schema.release_subsets`;
participant keys are replaced by published ids (:mod:`crowdpref.release.ids`); personal details
in participant text are masked (:mod:`crowdpref.release.privacy`); the card is written by
:mod:`crowdpref.release.card`. Timestamps are truncated to ``publish.timestamp_precision``
(default: the day). The release is built in a staging folder and scanned
(:func:`crowdpref.release.scan.scan_for_secrets`) for usernames, passwords, keys and the
original participant keys before it replaces ``release/``; any hit refuses the build.

The swap (:func:`crowdpref.runfolder.swap_in_release`) marks the scanned staging folder ready,
moves the old release aside and the ready one in; every build, scan and push first repairs what
a killed swap left (:func:`crowdpref.runfolder.repair_release`), so a study always has a
complete ``release/`` once one was built.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from crowdpref.config import StudyConfig
from crowdpref.contracts import SCREENING_BASE, SOURCES
from crowdpref.errors import CrowdprefError, first_line
from crowdpref.filters import EXCLUDED, FILTERED_BY
from crowdpref.filters import RULES as FILTER_RULES
from crowdpref.preflight.gate import card_line, read_decisions
from crowdpref.release.card import dataset_card
from crowdpref.release.ids import PUBLISHED_IDS_FILE, published_ids
from crowdpref.release.privacy import PRIVACY_FILE, PrivacyReport, apply_privacy, check_card_text
from crowdpref.release.recognisers import Recognisers, load_recognisers
from crowdpref.release.review import review_release
from crowdpref.release.scan import needles_of, scan_for_secrets
from crowdpref.release.schema import (
    RATINGS_RAW,
    RESPONSES_RAW,
    SPLIT,
    Built,
    Subset,
    coarsen_timestamps,
    release_subsets,
)
from crowdpref.release.stats import measure, read_json
from crowdpref.runfolder import (
    RunFolder,
    new_release_staging,
    release_lock,
    repair_release,
    swap_in_release,
    write_json,
)
from crowdpref.withdrawals import Withdrawn, leave_out_all, stale

__all__ = ["FILTERS_FILE", "build_release", "release_folder", "release_summary"]

FILTERS_FILE = "filters.json"
"""The preregistered filters' report in the run folder (written by aggregate-ratings)."""


def _to_table(frame: pd.DataFrame, subset: Subset, source: Path,
              timestamp_precision: str = "microsecond") -> pa.Table:
    arrays = []
    for column in subset.columns:
        try:
            array = pa.Array.from_pandas(frame[column.source_name])
            if pa.types.is_timestamp(column.type):
                if pa.types.is_timestamp(array.type) and array.type.tz is None:
                    array = array.cast(pa.timestamp(array.type.unit, tz="UTC"))
                array = coarsen_timestamps(array.cast(column.type, safe=False),
                                           timestamp_precision)
            elif pa.types.is_null(array.type):
                array = pa.nulls(len(array), column.type)
            else:
                array = array.cast(column.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            detail = first_line(exc, 120)
            raise CrowdprefError(
                f"{source}: column '{column.source_name}' cannot be published as "
                f"{column.dtype} ({detail}): fix the stage that wrote it"
            ) from None
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=subset.schema)


def _read_source(run: RunFolder, subset: Subset) -> pd.DataFrame | None:
    path = run.file(subset.source_file)
    if not path.exists():
        if subset.required:
            raise CrowdprefError(f"{path}: not found: {subset.needed_by}")
        return None
    frame = pd.read_parquet(path)
    missing = [c.source_name for c in subset.columns if c.source_name not in frame.columns]
    if missing:
        raise CrowdprefError(
            f"{path}: missing column(s) {', '.join(missing)}: rerun the stage that writes it "
            f"({subset.needed_by.removeprefix('run ').removesuffix(' first')})"
        )
    if subset.kept_only:
        if FILTERED_BY not in frame.columns:
            raise CrowdprefError(f"{path}: missing column(s) {FILTERED_BY}: {subset.needed_by}")
        kept = frame[FILTERED_BY].fillna("").astype(str).eq("").to_numpy(dtype=bool)
        frame = frame.loc[kept].reset_index(drop=True)
    return frame


def _read_filters(run: RunFolder) -> dict[str, Any] | None:
    """``filters.json`` of the run folder; None when the filters did not run (an older run)."""
    path = run.file(FILTERS_FILE)
    if not path.exists():
        return None
    data = read_json(path)
    if not (isinstance(data, dict) and isinstance(data.get("per_rule"), list)
            and isinstance(data.get("total"), dict)):
        raise CrowdprefError(f"{path}: not a filters report (no per_rule/total): rerun the "
                             "aggregate-ratings flow with force=True")
    return data


def _check_filters(filters: Mapping[str, Any], frames: Mapping[str, pd.DataFrame],
                   path: Path) -> None:
    """The report's numbers must be those of the raw files it came with: answers and ratings
    before and after, and each rule's removals counted from ``filtered_by``."""
    def hits(frame: pd.DataFrame, rule: str | None) -> int:
        by = frame[FILTERED_BY].fillna("").astype(str)
        return int(by.ne("").sum() if rule is None else by.str.split(",").map(
            lambda names: rule in names).sum())

    checks: list[tuple[str, Any, int]] = []
    for what, raw in (("answers", "responses_raw"), ("ratings", "ratings_raw")):
        excluded = frames[raw][FILTERED_BY].fillna("").astype(str).eq(EXCLUDED)  # before the rules ran
        checks.append((f"excluded_{what}", filters.get(f"excluded_{what}", 0), int(excluded.sum())))
        frame = frames[raw][~excluded.to_numpy(dtype=bool)]
        checks += [(f"{what}_before", filters.get(f"{what}_before"), len(frame)),
                   (f"{what}_after", filters.get(f"{what}_after"), len(frame) - hits(frame, None)),
                   (f"total.{what}", (filters.get("total") or {}).get(what), hits(frame, None))]
        for row in filters.get("per_rule") or []:
            if isinstance(row, Mapping) and row.get("rule") in FILTER_RULES:
                checks.append((f"{row['rule']}.{what}", row.get(what), hits(frame, row["rule"])))
    wrong = [(name, stated, measured) for name, stated, measured in checks if stated != measured]
    if wrong:
        name, stated, measured = wrong[0]
        raise CrowdprefError(
            f"{path}: {name} is {stated} but {RESPONSES_RAW}/{RATINGS_RAW} show {measured}: the "
            "report and the raw files are from different runs; rerun the aggregate-ratings flow "
            "with force=True")


def _subset(subsets: Sequence[Subset], name: str) -> Subset:
    return next(s for s in subsets if s.name == name)


def _check_sources(frame: pd.DataFrame, path: Path, what: str) -> None:
    """Every ``source`` is one of contracts.SOURCES: the card's provenance must be true."""
    bad = ~frame["source"].isin(SOURCES).to_numpy(dtype=bool)
    if bad.any():
        shown = sorted({str(v) for v in pd.unique(frame["source"].to_numpy(dtype=object)[bad])})
        raise CrowdprefError(
            f"{path}: {int(bad.sum())} {what} have a source that is missing or not one of "
            f"{', '.join(SOURCES)} (e.g. {shown[:3]}): fix the stage that wrote it")


def review_privacy(frames: dict[str, pd.DataFrame], subsets: Sequence[Subset], run: RunFolder,
                   config: StudyConfig, target: Path, report: PrivacyReport,
                   recognisers: Recognisers | None = None) -> None:
    """The recognisers' pass and the review's decisions (:func:`review_release`), applied to
    ``frames`` in place and recorded in ``report`` (counts only)."""
    recognisers = recognisers or load_recognisers(config.publish.ner_model)
    outcome = review_release(frames, subsets, run, recognisers, target=target,
                             undecided=config.publish.privacy_undecided,
                             study=config.source if Path(config.source or "").suffix in (".yaml", ".yml")
                             else None)
    report.reviewed = True
    report.kinds_checked = [k.name for k in recognisers.kinds]
    report.ner_model = recognisers.ner_model
    report.warnings = [recognisers.warning] if recognisers.warning else []
    report.flagged, report.flagged_rows = outcome.findings, outcome.rows
    report.dropped, report.decided_by_config = outcome.dropped, outcome.by_config


def build_release(
    run_folder: RunFolder | Path,
    config: StudyConfig,
    *,
    aggregation: Mapping[str, Any] | None = None,
    screening: Mapping[str, Any] | None = None,
    collection: Mapping[str, Mapping[str, Any]] | None = None,
    forbidden: Iterable[str] = (),
    repo_id: str | None = None,
    withdrawn: Withdrawn | None = None,
    recognisers: Recognisers | None = None,
) -> Path:
    """Write ``<run>/release/`` in Hub layout (see the module docstring) and return its path.

    ``aggregation`` (``aggregation.json``), ``screening`` (screening stats) and ``collection``
    (:func:`crowdpref.release.stats.collection_stats`) feed the card; a missing one is reported
    there as "not available". ``forbidden``: strings that must not appear in any published file
    (usernames, passwords, API keys, Prolific ids); the original participant keys are always
    added. Personal details in participant text are masked and reported (card,
    ``privacy.json``); one in crowdpref's own columns raises
    :class:`crowdpref.release.privacy.PrivacyError`. The release is built in a staging folder
    and scanned; any hit raises a one-line :class:`crowdpref.errors.CrowdprefError` and leaves the
    previous ``release/`` untouched. Leftovers of a killed build are cleaned (and a missing
    ``release/`` put back) before anything is written. ``repo_id`` is only used in the card's
    loading examples. ``withdrawn`` (:func:`crowdpref.withdrawals.withdrawn_in`): the rows of
    people who withdrew are left out of every configuration and the card counts them; an
    ``aggregation`` computed before a withdrawal is refused (aggregate again first).
    ``recognisers``: :func:`crowdpref.release.recognisers.load_recognisers` (loaded here for
    ``publish.ner_model`` when None); an answer or question they flag must be decided in the
    privacy review file first (:mod:`crowdpref.release.review`), or the build raises
    :class:`crowdpref.release.privacy.PrivacyError`."""
    run = run_folder if isinstance(run_folder, RunFolder) else RunFolder(Path(run_folder))
    filters = _read_filters(run)
    subsets = release_subsets(config, filtered=filters is not None)
    frames: dict[str, pd.DataFrame] = {}
    for subset in subsets:
        frame = _read_source(run, subset) if subset.name != "screening" else None
        if frame is not None:
            frames[subset.name] = frame
    screening_path = run.screening
    if screening_path.exists():
        base = set(SCREENING_BASE)
        raw = pd.read_parquet(screening_path)
        scores = [c for c in raw.columns if c not in base and pd.api.types.is_numeric_dtype(raw[c])
                  and not pd.api.types.is_bool_dtype(raw[c])]
        subsets = release_subsets(config, scores, filtered=filters is not None)
        frame = _read_source(run, _subset(subsets, "screening"))
        if frame is not None:
            frames["screening"] = frame
    subsets = [s for s in subsets if s.name in frames]
    withdrawn = withdrawn or Withdrawn()
    if withdrawn.keys:
        if stale(aggregation, withdrawn):
            raise CrowdprefError(
                f"{withdrawn.participants} participant(s) withdrew but {run.file('aggregation.json')} left out "
                f"{int((aggregation or {}).get('withdrawn_participants') or 0)}: rerun the aggregate-ratings flow "
                "with force=True before building the release")
        extra = [pd.read_parquet(path) for path in (run.responses, run.pairs) if path.exists()]
        frames = leave_out_all(frames, withdrawn, extra)  # type: ignore[assignment]
    for name, what in (("responses", "answers"), ("ratings", "ratings"),
                       ("responses_raw", "answers"), ("ratings_raw", "ratings")):
        if name in frames:
            _check_sources(frames[name], run.file(_subset(subsets, name).source_file), what)
    if filters is not None:
        _check_filters(filters, frames, run.file(FILTERS_FILE))
    target = run.release
    precision = config.publish.timestamp_precision
    privacy = PrivacyReport(timestamp_precision=precision)
    review_privacy(frames, subsets, run, config, target, privacy, recognisers)
    facts = measure(frames)

    key_columns = {"responses": "participant_key", "responses_raw": "participant_key",
                   "participants": "participant_key", "ratings": "rater_key",
                   "ratings_raw": "rater_key", "raters": "rater_key"}
    keys = {str(k) for name, column in key_columns.items() if name in frames
            for k in frames[name][column].dropna()}
    ids = published_ids(run.private_dir / PUBLISHED_IDS_FILE, keys)
    for name, column in key_columns.items():
        if name in frames:
            frames[name] = frames[name].assign(**{column: frames[name][column].map(ids)})

    forbidden = [*forbidden, *sorted(keys)]
    apply_privacy(frames, subsets, run, target, needles_of(forbidden), privacy)
    built = [Built(s, _to_table(frames[s.name], s, run.file(s.source_file), precision))
             for s in subsets]
    run.path.mkdir(parents=True, exist_ok=True)
    with release_lock(run.path):
        repair_release(run.path)  # a killed build's leftovers; a missing release/ put back
        staging = new_release_staging(run.path)
        try:
            for item in built:
                path = staging / item.subset.data_path
                path.parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(item.table, path)
                item.file_bytes = path.stat().st_size
            evaluation = _evaluation(run, staging, facts.preference_rows)
            card = dataset_card(config, built, facts, aggregation=aggregation, screening=screening,
                                collection=collection, repo_id=repo_id, filters=filters,
                                privacy=privacy, withdrawn=withdrawn.participants,
                                preflight=card_line(read_decisions(run.path)),
                                evaluation=evaluation)
            check_card_text(card, config.source)
            (staging / "README.md").write_text(card, encoding="utf-8")
            hits = scan_for_secrets(staging, forbidden)
            if hits:
                more = f" (and {len(hits) - 1} more)" if len(hits) > 1 else ""
                raise CrowdprefError(
                    f"refusing to publish {target}: {hits[0]}{more}: remove it from the run "
                    "folder's data (or the stats passed in) and build again; nothing was written"
                )
            swap_in_release(run.path, staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    write_json(privacy.to_json(), run.file(PRIVACY_FILE))
    return target


EVALUATION_FILE = "evaluation.json"
EVALUATION_PLOT = "evaluation-learning-curve.png"
"""The evaluate stage's outputs in the run folder (:mod:`crowdpref.evaluation`)."""


def _evaluation(run: RunFolder, staging: Path, rows: int) -> dict[str, Any] | None:
    """``evaluation.json`` for the card (None when the stage did not run), its learning-curve
    plot copied into the release as ``images/`` and linked from the card - unless the
    evaluation covered another number of preference rows than the ``rows`` published (the card
    then says it is out of date)."""
    path = run.file(EVALUATION_FILE)
    if not path.exists():
        return None
    data = read_json(path)
    if not isinstance(data, dict):
        raise CrowdprefError(f"{path}: not an evaluation report: rerun the evaluate flow with force=True")
    plot = run.file(EVALUATION_PLOT)
    data["plot"] = None
    evaluated = int(data.get("train_pairs") or 0) + int(data.get("test_pairs") or 0)
    if plot.exists() and evaluated == rows:
        (staging / "images").mkdir(exist_ok=True)
        shutil.copyfile(plot, staging / "images" / EVALUATION_PLOT)
        data["plot"] = f"images/{EVALUATION_PLOT}"
    return data


def release_folder(run_folder: RunFolder | Path) -> Path:
    """``<run>/release/`` after repairing what a killed build or swap left (see
    :func:`crowdpref.runfolder.repair_release`); a one-line error when nothing was built."""
    run = run_folder if isinstance(run_folder, RunFolder) else RunFolder(Path(run_folder))
    with release_lock(run.path):
        folder = repair_release(run.path)
    if folder is None:
        raise CrowdprefError(f"{run.release}: not found: run the publish-dataset flow to build "
                             "the release")
    return folder


def release_summary(folder: Path) -> list[dict[str, Any]]:
    """One row per configuration of a built release: name, file, rows, bytes."""
    rows = []
    for path in sorted(Path(folder).glob(f"data/*/{SPLIT}-*.parquet")):
        rows.append({"config": path.parent.name, "file": path.relative_to(folder).as_posix(),
                     "rows": pq.ParquetFile(path).metadata.num_rows, "bytes": path.stat().st_size})
    rows.sort(key=lambda r: (r["config"] != "default", r["config"]))
    return rows
