"""The preregistered filters (``filters:`` of the study config): which participants' work the
default release leaves out, applied mechanically, and the record that the rules were fixed
before collection began.

Rules (:class:`crowdpref.config.FiltersConfig`), each naming participants:

- ``failed_checks``: participants.parquet ``checks_verdict`` is "failed" (both studies);
- ``too_fast``: participants.parquet ``too_fast`` is true (both studies);
- ``incomplete``: participants.parquet ``status`` is "released" (both studies);
- ``min_reliability``: study-2 raters whose ``reliability`` in raters.parquet is below it (a
  rater without a value is kept).

What a removed participant takes out: a study-1 participant, their answers (responses rows)
AND every rating of a pair that holds one of those answers (a pair missing an answer cannot
be judged); a study-2 participant, their ratings. A participant hit by several rules is counted
under each rule and once in the totals. Every answer and rating stays in the raw data with a
``filtered_by`` column: the rules that removed it, comma-separated in :data:`RULES` order, empty
when it is kept. For a rating the rules are those that hit its rater or the writer of one of its
two answers.

Preregistration: :func:`preregister` records the rules in the study store (meta
``filters:<study>``) when collection starts; :func:`check_preregistered` refuses rules that
differ from the record.

Plain Python, no Prefect: ``tasks/aggregation.py`` wraps it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np
import pandas as pd

from crowdpref.config import FiltersConfig
from crowdpref.errors import CrowdprefError

__all__ = [
    "FILTERED_BY",
    "PARTICIPANT_RULES",
    "RULES",
    "FilterReport",
    "FilterResult",
    "Preregistration",
    "RuleCount",
    "apply_filters",
    "canonical_rules",
    "check_preregistered",
    "meta_key",
    "preregister",
    "rater_reliabilities",
    "report_markdown",
]

RULES = ("failed_checks", "too_fast", "incomplete", "min_reliability")
"""Every rule, in the order ``filtered_by`` lists them."""
PARTICIPANT_RULES = ("failed_checks", "too_fast", "incomplete")
"""The rules read from participants.parquet."""
FILTERED_BY = "filtered_by"
"""The column of the raw data naming the rules that removed a row ("" when kept)."""
EXCLUDED = "excluded"
"""``filtered_by`` of work taken out of the count DURING collection (failed quality checks with
``on_fail: exclude``; its items were answered again by others): never one of the rules."""
RULE_TEXT = {
    "failed_checks": "participants whose quality checks failed (checks_verdict \"failed\")",
    "too_fast": "participants flagged too fast (median time per item below too_fast_seconds)",
    "incomplete": "participants who did not finish (status \"released\")",
    "min_reliability": "study-2 raters whose fitted reliability is below the threshold",
}
"""What each rule leaves out, for reports and the card."""


class MetaStore(Protocol):
    """What preregistration needs of :class:`crowdpref.store.Store`."""

    clock: Any

    def get_meta(self, name: str) -> str | None: ...

    def set_meta(self, name: str, value: str) -> None: ...


# --- the report ------------------------------------------------------------------------------
@dataclass(frozen=True)
class RuleCount:
    """What one rule (or, as ``rule="all rules"``, their union) removed."""

    rule: str
    on: bool
    setting: str
    """"on", "off", or the threshold ("below 0.4") for min_reliability."""
    participants: int
    """Participants the rule names (study 1 and study 2 together)."""
    participants_study1: int
    participants_study2: int
    answers: int
    """Study-1 answers removed (those of the named study-1 participants)."""
    ratings: int
    """Ratings removed: by a named rater, or of a pair holding a removed answer."""
    ratings_by_removed_raters: int
    ratings_of_removed_answers: int
    """Ratings of a pair holding a removed answer (may overlap the previous count)."""


@dataclass
class FilterReport:
    """What ``filters.json`` holds."""

    rules: dict[str, Any]
    """The rules applied (the config's ``filters:``)."""
    per_rule: list[RuleCount]
    total: RuleCount
    """The union: each participant, answer and rating counted once."""
    answers_before: int
    answers_after: int
    ratings_before: int
    ratings_after: int
    participants_file: bool
    """Whether participants.parquet was read."""
    raters_file: bool
    """Whether raters.parquet was read."""
    unlisted_writers: int = 0
    """Writers in responses.parquet without a study-1 row in participants.parquet (no
    participant rule can name them)."""
    unlisted_raters: int = 0
    """Raters in ratings.parquet without a study-2 row in participants.parquet."""
    preregistered: dict[str, Any] | None = None
    """The study store's record (``rules``, ``recorded_at``); None: the rules were not
    recorded before collection began."""
    excluded_answers: int = 0
    """Answers excluded during collection (failed checks), in the raw data as ``excluded``;
    not counted in ``answers_before`` or by any rule."""
    excluded_ratings: int = 0
    """Ratings excluded during collection, likewise."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class FilterResult:
    responses: pd.DataFrame
    """The kept answers (responses rows whose ``filtered_by`` is empty), without ``filtered_by``."""
    ratings: pd.DataFrame
    """The kept ratings, without ``filtered_by``."""
    responses_raw: pd.DataFrame
    """Every answer, plus ``filtered_by``."""
    ratings_raw: pd.DataFrame
    """Every rating, plus ``filtered_by``."""
    removed_response_ids: frozenset[str]
    report: FilterReport
    warnings: list[str] = field(default_factory=list)

    def with_excluded(self, responses: pd.DataFrame | None, ratings: pd.DataFrame | None) -> None:
        """Add the work excluded during collection (``responses_excluded.parquet``,
        ``ratings_excluded.parquet``) to the raw data, marked ``excluded``, so the raw
        configurations hold every answer and rating collected."""
        for frame, attr, count in ((responses, "responses_raw", "excluded_answers"),
                                   (ratings, "ratings_raw", "excluded_ratings")):
            if frame is None or frame.empty:
                continue
            raw = getattr(self, attr)
            extra = frame[[c for c in raw.columns if c != FILTERED_BY]].assign(**{FILTERED_BY: EXCLUDED})
            setattr(self, attr, pd.concat([raw, extra], ignore_index=True))
            setattr(self.report, count, len(extra))

    def kept_pairs(self, pairs: pd.DataFrame) -> pd.DataFrame:
        """``pairs`` without the pairs that hold a removed answer (``first_response_id`` /
        ``second_response_id``), so every pair left refers to kept answers only."""
        _require(pairs, ["first_response_id", "second_response_id"], "pairs.parquet",
                 "rerun collect-ratings")
        removed = list(self.removed_response_ids)
        holds = pairs["first_response_id"].isin(removed) | pairs["second_response_id"].isin(removed)
        return pairs.loc[~holds.to_numpy(dtype=bool)].reset_index(drop=True)


# --- applying the rules ----------------------------------------------------------------------
def _require(frame: pd.DataFrame, columns: Sequence[str], file: str, fix: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise CrowdprefError(f"{file}: missing column(s) {', '.join(missing)}: {fix}")


def _keys(values: pd.Series) -> set[str]:
    return {str(v) for v in values.dropna()}


def _participant_hits(rule: str, participants: pd.DataFrame) -> pd.Series:
    """Per participants row: does ``rule`` name it."""
    if rule == "failed_checks":
        return participants["checks_verdict"].astype("string").eq("failed").fillna(False)
    if rule == "too_fast":
        values = participants["too_fast"].to_numpy(dtype=object)
        bad = [v for v in values if not isinstance(v, (bool, np.bool_)) and not pd.isna(v)]
        if bad:
            raise CrowdprefError(
                f"participants.parquet: column too_fast holds {len(bad)} values that are not "
                f"true/false (e.g. {bad[0]!r}): re-export the studies")
        return pd.Series([bool(v) if not pd.isna(v) else False for v in values],
                         index=participants.index, dtype=bool)
    if rule == "incomplete":
        return participants["status"].astype("string").eq("released").fillna(False)
    raise ValueError(rule)


def _joined(masks: dict[str, pd.Series], index: pd.Index) -> pd.Series:
    out = pd.Series([""] * len(index), index=index, dtype=object)
    for rule in RULES:
        mask = masks.get(rule)
        if mask is None:
            continue
        hit = mask.to_numpy(dtype=bool)
        out[hit] = [f"{v},{rule}" if v else rule for v in out[hit]]
    return out


def apply_filters(
    rules: FiltersConfig,
    participants: pd.DataFrame | None,
    responses: pd.DataFrame,
    ratings: pd.DataFrame,
    raters: pd.DataFrame | None = None,
    *,
    source: str = "the study config",
) -> FilterResult:
    """Apply ``rules`` mechanically (see the module docstring) and count what each removed.

    ``participants`` (contracts.PARTICIPANTS) may be None for an older run folder only when
    every participant rule is off; ``raters`` (contracts.RATERS) is needed only when
    ``min_reliability`` is set. ``source`` names the config in error messages. Bad input is a
    one-line :class:`CrowdprefError` naming the file, the field and the fix; so are rules that
    would remove every rating (nothing would be left to publish)."""
    _require(responses, ["response_id", "participant_key"], "responses.parquet",
              "rerun collect-responses")
    _require(ratings, ["rating_id", "rater_key", "response_a_id", "response_b_id"],
             "ratings.parquet", "rerun collect-ratings")
    on = set(rules.active())
    needs_participants = [r for r in PARTICIPANT_RULES if r in on]
    if participants is None and needs_participants:
        names = ", ".join(f"filters.{r}" for r in needs_participants)
        raise CrowdprefError(
            f"participants.parquet not found, but {names} need it: re-export the studies "
            f"(rerun collect-responses and collect-ratings) to write it, or, for a run folder "
            f"from before participants.parquet existed, set {names} to false in {source}")
    if "min_reliability" in on and raters is None:
        raise CrowdprefError(
            f"raters.parquet not found, but filters.min_reliability is set "
            f"({rules.min_reliability:g}): rerun aggregate-ratings so it writes the rater "
            f"reliabilities, or remove filters.min_reliability from {source}")

    writers: dict[str, set[str]] = {}  # rule -> study-1 keys it names
    raters_hit: dict[str, set[str]] = {}  # rule -> study-2 keys it names
    unlisted_writers = unlisted_raters = 0
    if participants is not None:
        _require(participants, ["participant_key", "study"], "participants.parquet",
                 "re-export the studies (rerun collect-responses and collect-ratings)")
        needed = {"failed_checks": "checks_verdict", "too_fast": "too_fast", "incomplete": "status"}
        _require(participants, [needed[r] for r in needs_participants], "participants.parquet",
                 "re-export the studies (rerun collect-responses and collect-ratings), or set "
                 f"the filters that need the column to false in {source}")
        study = participants["study"].astype("string")
        bad = ~study.isin(["study1", "study2"]).fillna(False).to_numpy(dtype=bool)
        if bad.any():
            shown = sorted({str(v) for v in participants["study"][bad]})[:3]
            raise CrowdprefError(
                f"participants.parquet: {int(bad.sum())} rows whose study is not \"study1\" or "
                f"\"study2\" (e.g. {shown}): re-export the studies")
        in1 = study.eq("study1").to_numpy(dtype=bool)
        in2 = study.eq("study2").to_numpy(dtype=bool)
        keys = participants["participant_key"]
        for rule in needs_participants:
            hit = _participant_hits(rule, participants).to_numpy(dtype=bool)
            writers[rule] = _keys(keys[hit & in1])
            raters_hit[rule] = _keys(keys[hit & in2])
        unlisted_writers = len(_keys(responses["participant_key"]) - _keys(keys[in1]))
        unlisted_raters = len(_keys(ratings["rater_key"]) - _keys(keys[in2]))
    if "min_reliability" in on:
        assert raters is not None and rules.min_reliability is not None
        _require(raters, ["rater_key", "reliability"], "raters.parquet",
                 "rerun aggregate-ratings (it writes raters.parquet)")
        reliability = pd.to_numeric(raters["reliability"], errors="coerce")
        low = (reliability < rules.min_reliability).fillna(False).to_numpy(dtype=bool)
        writers["min_reliability"] = set()
        raters_hit["min_reliability"] = _keys(raters["rater_key"][low])

    answer_masks: dict[str, pd.Series] = {}
    rating_masks: dict[str, pd.Series] = {}
    counts: list[RuleCount] = []
    for rule in RULES:
        w, r = writers.get(rule, set()), raters_hit.get(rule, set())
        answers = responses["participant_key"].astype("string").isin(sorted(w)).fillna(False)
        removed_ids = list(_keys(responses["response_id"][answers.to_numpy(dtype=bool)]))
        by_rater = ratings["rater_key"].astype("string").isin(sorted(r)).fillna(False)
        of_answer = (ratings["response_a_id"].isin(removed_ids)
                     | ratings["response_b_id"].isin(removed_ids))
        rated = by_rater | of_answer
        if rule in on:
            answer_masks[rule], rating_masks[rule] = answers, rated
        setting = ("on" if rule in on else "off") if rule != "min_reliability" else (
            f"below {rules.min_reliability:g}" if rule in on else "off")
        counts.append(RuleCount(
            rule=rule, on=rule in on, setting=setting, participants=len(w) + len(r),
            participants_study1=len(w), participants_study2=len(r),
            answers=int(answers.sum()), ratings=int(rated.sum()),
            ratings_by_removed_raters=int(by_rater.sum()),
            ratings_of_removed_answers=int(of_answer.sum())))

    answers_by = _joined(answer_masks, responses.index)
    ratings_by = _joined(rating_masks, ratings.index)
    all_w = set().union(*writers.values()) if writers else set()
    all_r = set().union(*raters_hit.values()) if raters_hit else set()
    removed_answer = answers_by.ne("").to_numpy(dtype=bool)
    removed_rating = ratings_by.ne("").to_numpy(dtype=bool)
    removed_ids_all = frozenset(_keys(responses["response_id"][removed_answer]))
    by_rater_all = ratings["rater_key"].astype("string").isin(sorted(all_r)).fillna(False)
    of_answer_all = (ratings["response_a_id"].isin(list(removed_ids_all))
                     | ratings["response_b_id"].isin(list(removed_ids_all)))
    total = RuleCount(
        rule="all rules", on=bool(on), setting=", ".join(sorted(on, key=RULES.index)) or "off",
        participants=len(all_w) + len(all_r), participants_study1=len(all_w),
        participants_study2=len(all_r), answers=int(removed_answer.sum()),
        ratings=int(removed_rating.sum()), ratings_by_removed_raters=int(by_rater_all.sum()),
        ratings_of_removed_answers=int(of_answer_all.sum()))
    report = FilterReport(
        rules=rules.model_dump(mode="json"), per_rule=counts, total=total,
        answers_before=len(responses), answers_after=int((~removed_answer).sum()),
        ratings_before=len(ratings), ratings_after=int((~removed_rating).sum()),
        participants_file=participants is not None, raters_file=raters is not None,
        unlisted_writers=unlisted_writers, unlisted_raters=unlisted_raters)
    if len(ratings) and not (~removed_rating).any():
        worst = max((c for c in counts if c.on), key=lambda c: c.ratings)
        raise CrowdprefError(
            f"the preregistered filters remove every one of the {len(ratings)} ratings "
            f"(filters.{worst.rule} alone removes {worst.ratings}): nothing would be left to publish; "
            f"check the thresholds in {source} (a simulated crowd submits a batch in one call: set "
            "study1/study2 too_fast_seconds to 0 for it) and start a new study, since the rules "
            "are fixed once collection began")
    warnings = []
    if unlisted_writers or unlisted_raters:
        warnings.append(
            f"participants.parquet has no row for {unlisted_writers} writer(s) of "
            f"responses.parquet and {unlisted_raters} rater(s) of ratings.parquet: no "
            "participant rule can leave them out (re-export the studies to list everyone)")
    return FilterResult(
        responses=responses.loc[~removed_answer].reset_index(drop=True),
        ratings=ratings.loc[~removed_rating].reset_index(drop=True),
        responses_raw=responses.assign(**{FILTERED_BY: answers_by.to_numpy()}),
        ratings_raw=ratings.assign(**{FILTERED_BY: ratings_by.to_numpy()}),
        removed_response_ids=removed_ids_all, report=report, warnings=warnings)


# --- preregistration -------------------------------------------------------------------------
@dataclass(frozen=True)
class Preregistration:
    """The rules as the study store recorded them, and when."""

    rules: dict[str, Any]
    recorded_at: str
    """ISO 8601, UTC."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def meta_key(study_name: str) -> str:
    """The study store's meta entry holding a study's preregistered filters."""
    return f"filters:{study_name}"


def canonical_rules(rules: FiltersConfig | dict[str, Any]) -> str:
    """The rules as canonical JSON (sorted keys, no spaces): equal rules, equal text."""
    data = rules.model_dump(mode="json") if isinstance(rules, FiltersConfig) else rules
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _now(store: MetaStore) -> str:
    clock = getattr(store, "clock", None)
    at = clock() if callable(clock) else datetime.now(UTC).timestamp()
    return datetime.fromtimestamp(float(at), UTC).isoformat(timespec="seconds")


def preregister(store: MetaStore, study_name: str, rules: FiltersConfig) -> None:
    """Record ``rules`` (canonical JSON) and the time in the study store, when nothing is
    recorded for the study yet; an existing record is left as it is (the first one counts).
    Logs nothing else."""
    key = meta_key(study_name)
    if store.get_meta(key) is not None:
        return
    store.set_meta(key, json.dumps({"recorded_at": _now(store),
                                    "rules": json.loads(canonical_rules(rules))},
                                   sort_keys=True, separators=(",", ":")))


def _recorded(store: MetaStore, study_name: str) -> Preregistration | None:
    key = meta_key(study_name)
    raw = store.get_meta(key)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        rules, at = data["rules"], data["recorded_at"]
        if not isinstance(rules, dict) or not isinstance(at, str):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise CrowdprefError(
            f"study {study_name}: the study store's entry {key!r} is not a filters record "
            "(expected {\"rules\": {...}, \"recorded_at\": ...}): restore it from a backup of "
            "the store, or start a new study") from None
    return Preregistration(rules=rules, recorded_at=at)


def _shown(rules: dict[str, Any], names: Collection[str]) -> str:
    return ", ".join(f"{n}={json.dumps(rules.get(n)) if n in rules else '(absent)'}"
                     for n in names)


def check_preregistered(store: MetaStore, study_name: str, rules: FiltersConfig,
                        source: str | None = None) -> Preregistration | None:
    """The study's recorded rules when they equal ``rules``; None when nothing was recorded
    (the rules were not preregistered). Rules that differ are a one-line
    :class:`CrowdprefError` naming the changed fields. A field the record lacks (added to
    crowdpref after it was written) counts as its default value."""
    record = _recorded(store, study_name)
    if record is None:
        return None
    recorded = {**FiltersConfig().model_dump(mode="json"), **record.rules}
    now = json.loads(canonical_rules(rules))
    changed = sorted(n for n in {*recorded, *now}
                     if (n in recorded) != (n in now) or recorded.get(n) != now.get(n))
    if changed:
        when = record.recorded_at.replace("T", " ").replace("+00:00", " UTC")
        raise CrowdprefError(
            f"study {study_name}: filters changed after collection began (recorded {when}: "
            f"{_shown(recorded, changed)}; now {_shown(now, changed)}): restore the recorded "
            f"rules in {source or 'the study config'} (filters:) or start a new study")
    return record


# --- for the aggregation stage ----------------------------------------------------------------
def rater_reliabilities(ratings: pd.DataFrame, scale_points: int) -> pd.DataFrame | None:
    """raters.parquet rows (:mod:`crowdpref.aggregation.reliability`) fitted over EVERY rating,
    before any filter, so the ``min_reliability`` rule judges a rater on all their work; None when
    the ratings carry no usable rater keys (no reliability can be fitted)."""
    from crowdpref.aggregation.reliability import fit_raters

    if "rater_key" not in ratings.columns or ratings.empty:
        return None
    keys = ratings["rater_key"]
    if (keys.isna() | keys.astype(str).str.strip().eq("")).any():
        return None
    fit, _ = fit_raters(ratings, scale_points)
    return fit.frame()


def report_markdown(report: FilterReport) -> str:
    """The report as markdown: one row per rule, then the totals and the preregistration."""
    lines = ["# Preregistered filters", "",
             "| Rule | Setting | Participants (study 1 / study 2) | Answers removed | "
             "Ratings removed |", "|---|---|---|---|---|"]
    for c in [*report.per_rule, report.total]:
        name = f"`{c.rule}`" if c.rule in RULES else f"**{c.rule}**"
        lines.append(f"| {name} | {c.setting} | {c.participants} ({c.participants_study1} / "
                     f"{c.participants_study2}) | {c.answers} | {c.ratings} |")
    lines += ["", f"- answers: {report.answers_before} collected, {report.answers_after} kept",
              f"- ratings: {report.ratings_before} collected, {report.ratings_after} kept "
              f"({report.total.ratings_of_removed_answers} removed because their pair holds a "
              f"removed answer, {report.total.ratings_by_removed_raters} by removed raters)"]
    if not report.participants_file:
        lines.append("- participants.parquet was not found: the participant rules were off")
    if report.unlisted_writers or report.unlisted_raters:
        lines.append(f"- not in participants.parquet (no participant rule can remove them): "
                     f"{report.unlisted_writers} writers, {report.unlisted_raters} raters")
    pre = report.preregistered
    lines.append(f"- preregistered: recorded in the study store at {pre['recorded_at']}"
                 if pre else "- NOT preregistered: the study store holds no record of the rules "
                             "from before collection began")
    return "\n".join(lines)
