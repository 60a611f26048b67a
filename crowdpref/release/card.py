"""The dataset card: the release's README.md, a YAML header (``DatasetCardData``: configurations,
features, tags) and the text, written for this project in its own words.

The card states only what the data shows: where answers and ratings came from (their
``source``, :func:`provenance_text`; SIMULATED data is called so), whether the A/B display order
was counterbalanced inside each pair (:func:`display_order_text`, from the aggregation's
``order_balance`` or, when that is missing, measured on the published ratings), the quality
checks (:func:`quality_section`), the preregistered filters (:func:`filters_section`), the
screening, every configuration's columns (from :mod:`crowdpref.release.schema`) and what the
privacy pass masked (:func:`crowdpref.release.privacy.privacy_markdown`). A figure that is
missing is said to be "not available", never invented."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from crowdpref.config import StudyConfig
from crowdpref.contracts import SOURCES
from crowdpref.filters import EXCLUDED, RULE_TEXT
from crowdpref.release.ids import ID_LENGTH
from crowdpref.release.markdown import NA, cell, fmt, lower_first
from crowdpref.release.privacy import PrivacyReport, privacy_markdown
from crowdpref.release.schema import SPLIT, Built
from crowdpref.release.stats import Facts

__all__ = [
    "SOURCE_WHO",
    "UNVERIFIED_NOTE",
    "dataset_card",
    "display_order_text",
    "evaluation_facts",
    "filters_section",
    "provenance_text",
    "quality_section",
    "unverified_participants",
]

REQUIRED_TAGS = ("human-feedback", "rlhf")
FALLBACK_LIMITATION = (
    "The fallback classifier (alt-profanity-check, a TF-IDF + linear SVM model) recognises "
    "profanity but misses hateful or demeaning text written without swear words, so answers it "
    "did not flag may still be offensive."
)
SOURCE_WHO = {
    "simulated": "crowdpref's simulated crowd: a program, not a person",
    "prolific": "people recruited on Prolific",
    "invite": ("people who joined through the study team's invite link, e.g. a pilot or an own "
               "panel"),
}
"""What each participant source (:data:`crowdpref.contracts.SOURCES`) means, for the card."""
SIMULATED_TAG = "synthetic"
"""Hub tag added when any answer or rating is simulated."""


def _get(stats: Mapping[str, Any] | None, *names: str) -> Any:
    if not stats:
        return None
    for name in names:
        if name in stats and stats[name] is not None:
            return stats[name]
    return None


def _count(value: Any) -> Any:
    if isinstance(value, (list, tuple, set, dict)):
        return len(value)
    return value


def _balance_cell(balance: Mapping[str, Any] | None) -> str | None:
    balanced, rated = _get(balance, "balanced_pairs"), _get(balance, "rated_pairs")
    if not isinstance(balanced, int) or not isinstance(rated, int):
        return None
    return f"{balanced} of {rated}" + (f" ({balanced / rated:.0%})" if rated else "")


def _span_text(span: tuple[int, int]) -> str:
    lo, hi = span
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                         (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "n>1M"


UNVERIFIED_NOTE = (
    "> **Unverified participants.** This study ran as an unverified pilot (`prolific.verify: "
    "false`): the people who took part were not checked with Prolific's API when they arrived, "
    "so anyone holding the study's link with a made-up Prolific-style id could have taken part. "
    "Treat who the participants were as unknown.")


def unverified_participants(config: StudyConfig) -> bool:
    """Whether the study took Prolific-style arrivals without checking them with Prolific."""
    return config.participants == "prolific" and not config.prolific.verify


def provenance_text(answer_sources: Mapping[str, int], rating_sources: Mapping[str, int]) -> str:
    """Where the answers and ratings came from, from their counts per ``source``: one source ->
    "All answers and ratings come from `<source>` participants" (SIMULATED data said plainly);
    more than one -> the release MIXES sources, with the answers and ratings of each."""
    present = [s for s in SOURCES if answer_sources.get(s) or rating_sources.get(s)]
    present += sorted(s for s in {*answer_sources, *rating_sources}
                      if s not in SOURCES and (answer_sources.get(s) or rating_sources.get(s)))
    if not present:
        return "The release holds no answers or ratings, so it has no participants to describe."
    if len(present) == 1:
        source = present[0]
        if source == "simulated":
            return ("All answers and ratings come from `simulated` participants: this data is "
                    "SIMULATED. Every answer and every rating was produced by crowdpref's simulated "
                    "crowd (a program), not written or given by people, so it says nothing about "
                    "what people prefer. Use it to try out the pipeline and the data format, not as "
                    "human feedback.")
        who = SOURCE_WHO.get(source, "an unknown source")
        return f"All answers and ratings come from `{source}` participants ({who})."
    counts = [f"{answer_sources.get(s, 0)} answers and {rating_sources.get(s, 0)} ratings come "
              f"from `{s}` participants ({SOURCE_WHO.get(s, 'an unknown source')})" for s in present]
    text = ("This release MIXES sources: " + "; ".join(counts) + ". The `source` column of the "
            "`responses` and `ratings` configurations tells them apart; the preference rows of "
            "the default configuration average the ratings of a pair whatever their source.")
    if "simulated" in present:
        text += (" Answers and ratings with source `simulated` are SIMULATED: produced by a "
                 "program, not by people.")
    return text


def display_order_text(balance: Mapping[str, Any] | None,
                       swapped_share: float | None = None) -> str:
    """The card's sentence on the A/B display order, from an order balance
    (:class:`crowdpref.aggregation.OrderBalance` as a dict: ``rated_pairs``,
    ``unbalanced_pairs``). Claims that position bias cancels within each pair only when every
    rated pair was balanced; otherwise says how many were not."""
    rated = _get(balance, "rated_pairs")
    unbalanced = _get(balance, "unbalanced_pairs")
    if not isinstance(rated, int) or not isinstance(unbalanced, int):
        return "How the A/B display order was balanced is not available for this release."
    if rated == 0:
        return "No pair was rated, so there is no A/B display order to describe."
    if unbalanced == 0:
        return ("The A/B display order was counterbalanced per rating: the raters of each pair "
                "saw it in balanced orders (as many one way as the other, or one more for an odd "
                "number of raters), so position bias cancels within each pair - exactly for an "
                "even number of ratings; for an odd number R at most 1/R of it is left in the "
                "pair's mean (a third with 3 raters).")
    overall = (f", as far as the orders are balanced overall ({swapped_share:.0%} of all ratings "
               "were shown swapped)"
               if isinstance(swapped_share, float) and not math.isnan(swapped_share) else "")
    if unbalanced == rated:
        return (f"The A/B display order was not balanced for any of the {rated} rated pairs: more "
                "of each pair's raters saw one order than the other (by more than one rating), so "
                "position bias does not cancel within a pair and only averages out across pairs"
                f"{overall}.")
    return (f"The A/B display order was not balanced for {unbalanced} of the {rated} rated pairs: "
            "more of their raters saw one order than the other (by more than one rating). For "
            "those pairs position bias does not cancel within the pair and only averages out "
            f"across pairs{overall}. The other {rated - unbalanced} pairs were counterbalanced "
            "per rating, so position bias cancels within each of them.")


def _creators(sources: Mapping[str, int], extra: Sequence[str] = ()) -> list[str]:
    """The card's ``*_creators`` from counts per source: people -> "crowdsourced", the simulated
    crowd -> "machine-generated" (plus ``extra``)."""
    people = any(n for s, n in sources.items() if s != "simulated")
    made = (["crowdsourced"] if people else []) + (
        ["machine-generated"] if sources.get("simulated") else [])
    return list(dict.fromkeys([*made, *extra])) or ["no-annotation"]


def _yaml_header(config: StudyConfig, built: list[Built], facts: Facts) -> str:
    from huggingface_hub import DatasetCardData

    pb = config.publish
    simulated = "simulated" in facts.sources
    tags = list(dict.fromkeys([*REQUIRED_TAGS, *pb.tags, *([SIMULATED_TAG] if simulated else [])]))
    configs = []
    infos = []
    for item in built:
        entry: dict[str, Any] = {"config_name": item.subset.name,
                                 "data_files": [{"split": SPLIT, "path": item.subset.data_glob}]}
        if item.subset.name == "default":
            entry["default"] = True
        configs.append(entry)
        infos.append({
            "config_name": item.subset.name,
            "features": [{"name": c.name, "dtype": c.dtype} for c in item.subset.columns],
            "splits": [{"name": SPLIT, "num_bytes": int(item.table.nbytes),
                        "num_examples": item.table.num_rows}],
            "download_size": item.file_bytes,
            "dataset_size": int(item.table.nbytes),
        })
    questions_by = ["expert-generated"] + (["machine-generated"] if config.questions.llm.enabled
                                           else [])
    data = DatasetCardData(
        language=["en"],
        license=pb.license,
        pretty_name=pb.pretty_name or config.title,
        task_categories=["text-generation", "text-classification"],
        tags=tags,
        annotations_creators=_creators(facts.rating_sources),
        language_creators=_creators(facts.answer_sources, questions_by),
        multilinguality=["monolingual"],
        size_categories=[_size_category(facts.preference_rows)],
        source_datasets=["original"],
        configs=configs,
        dataset_info=infos,
    )
    return data.to_yaml()


_TEMPLATES = Environment(
    loader=PackageLoader("crowdpref.release", "templates"),
    # the card is Markdown: no HTML entities in it (an .html template would be escaped)
    autoescape=select_autoescape(enabled_extensions=("html", "html.j2"), default=False),
    undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
_TEMPLATES.filters.update(fmt=fmt, cell=cell, span=_span_text, g=lambda x: format(x, "g"))
_TEMPLATES.globals.update(get=_get)


def dataset_card(
    config: StudyConfig,
    built: list[Built],
    facts: Facts,
    *,
    aggregation: Mapping[str, Any] | None,
    screening: Mapping[str, Any] | None,
    collection: Mapping[str, Mapping[str, Any]] | None,
    repo_id: str | None,
    filters: Mapping[str, Any] | None = None,
    privacy: PrivacyReport | None = None,
    withdrawn: int = 0,
    preflight: str | None = None,
    evaluation: Mapping[str, Any] | None = None,
) -> str:
    """The README.md: YAML header + the card text (written for this project, in its own words;
    the template ``crowdpref/release/templates/dataset_card.md.j2``). ``filters``:
    ``filters.json`` (:class:`crowdpref.filters.FilterReport`), None when the preregistered
    filters did not run. ``withdrawn``: participants who withdrew (counted, their rows already
    left out). ``preflight``: the sentence of :func:`crowdpref.preflight.gate.card_line` (a
    pre-flight passed, and when, before publishing on Prolific; or that it was skipped).
    ``evaluation``: ``evaluation.json`` (:mod:`crowdpref.evaluation`), None: the card has no
    "Does the data carry signal?" section."""
    pb = config.publish
    s2 = config.study2
    sources = facts.sources
    if sources == ["simulated"]:
        opening = ("SIMULATED preference data on social reasoning: no person wrote or rated "
                   "anything in it. crowdpref's simulated crowd went through the two studies of a "
                   "human-preference study.")
    elif "simulated" in sources:
        opening = ("Preference data on social reasoning, collected in two studies partly with "
                   "people and partly with a simulated crowd (see \"Where the data comes from\").")
    else:
        opening = "Human preference data on social reasoning, collected with people in two studies."
    balance = _get(aggregation, "order_balance")
    balance_note = ""
    if not isinstance(balance, Mapping) or _get(balance, "unbalanced_pairs") is None:
        balance, balance_note = facts.order_balance, " (measured on the `ratings` configuration)"
    participants = next((b.table.to_pandas() for b in built if b.subset.name == "participants"), None)
    return _TEMPLATES.get_template("dataset_card.md.j2").render(
        yaml_header=_yaml_header(config, built, facts).rstrip(),
        title=pb.pretty_name or config.title,
        pb=pb, s1=config.study1, s2=s2, facts=facts, filters=filters, collection=collection,
        c1=(collection or {}).get("study1") or {}, c2=(collection or {}).get("study2") or {},
        opening=opening,
        unverified=unverified_participants(config), unverified_note=UNVERIFIED_NOTE,
        description=config.description.strip() if config.description else None,
        provenance=provenance_text(facts.answer_sources, facts.rating_sources),
        withdrawn=withdrawn,
        preflight=preflight,
        evaluation=evaluation_facts(evaluation, facts.preference_rows),
        people="participants" if "simulated" in sources else "people",
        scale=", ".join(f"{i} {lower_first(label)}" for i, label in enumerate(s2.scale_labels, start=1)),
        order_text=display_order_text(balance, facts.swapped_share),
        keep_incomplete=config.aggregation.incomplete_pairs == "report_and_keep",
        quality="\n".join(quality_section(config, participants, aggregation)),
        filters_text="\n".join(filters_section(filters)),
        agreement=_agreement_rows(aggregation, facts, balance, balance_note),
        aggregation=aggregation,
        per_category=_per_category(aggregation),
        truth=_truth(aggregation),
        screening=_screening_facts(config, screening, facts),
        na=NA, fallback_limitation=FALLBACK_LIMITATION,
        split=SPLIT, built=built, names=[item.subset.name for item in built],
        id_length=ID_LENGTH,
        privacy="\n".join(privacy_markdown(privacy or PrivacyReport(
            timestamp_precision=config.publish.timestamp_precision))),
        where=repo_id or pb.repo_id or "path/to/release",
        citation=pb.citation.strip() if pb.citation else None,
    )


def evaluation_facts(evaluation: Mapping[str, Any] | None, rows: int) -> dict[str, Any] | None:
    """What the card's "Does the data carry signal?" section shows from ``evaluation.json``;
    ``stale`` when it was computed on another number of preference rows than ``rows`` (the
    published ones); None when there is no evaluation."""
    if not isinstance(evaluation, Mapping) or not isinstance(evaluation.get("models"), list):
        return None
    evaluated = int(evaluation.get("train_pairs") or 0) + int(evaluation.get("test_pairs") or 0)
    if evaluated != rows:
        return {"stale": True, "rows": evaluated}
    return {**evaluation, "stale": False,
            "notes": [*(evaluation.get("skipped") or []), *(evaluation.get("warnings") or [])]}


def _agreement_rows(aggregation: Mapping[str, Any] | None, facts: Facts, balance: Any,
                    balance_note: str) -> list[tuple[str, Any]]:
    """The card's Agreement table: (measure, value) rows, a value None when not available."""
    mean_agreement = _get(aggregation, "mean_agreement")
    agreement_note = ""
    if mean_agreement is None and facts.mean_agreement is not None:
        mean_agreement, agreement_note = facts.mean_agreement, " (computed from the `agreement` column)"
    bias = _get(aggregation, "position_bias")
    return [
        ("Krippendorff's alpha (ordinal, over all ratings)", _get(aggregation, "alpha", "krippendorff_alpha")),
        (f"Mean agreement (share of raters on the majority side){agreement_note}", mean_agreement),
        ("Mean margin", facts.mean_margin),
        ("Mean rating spread", _get(aggregation, "mean_spread")),
        ("Pairs formed", _get(aggregation, "pairs")),
        ("Pairs with at least one rating", _get(aggregation, "rated_pairs")),
        ("Pairs without any rating", _count(_get(aggregation, "unrated_pairs"))),
        ("Ties (mean exactly on the midpoint; left out)", _count(_get(aggregation, "ties"))),
        ("Incomplete pairs (fewer ratings than planned)",
         _count(_get(aggregation, "incomplete_pairs"))),
        ("Incomplete pairs dropped", _get(aggregation, "incomplete_dropped")),
        ("Pairs left out because screening dropped an answer", _get(aggregation, "excluded_pairs")),
        ("Pairs with more ratings than planned (kept)", _get(aggregation, "over_rated")),
        ("Repeated ratings of a pair by the same rater", _get(aggregation, "duplicate_rater_ratings")),
        ("Position bias: mean shift of the ratings as displayed, in scale points "
         "(negative favours A)", _get(bias, "raw_shift") if isinstance(bias, Mapping) else None),
        ("Rated pairs shown in balanced A/B orders (position bias cancels within them)"
         + balance_note, _balance_cell(balance)),
        *_length_rows(_get(aggregation, "length_bias")),
    ]


def _per_category(aggregation: Mapping[str, Any] | None) -> dict[str, list[Any]] | None:
    """The aggregation's per-category table (its scalar columns; cells ready), or None."""
    rows = _get(aggregation, "per_category")
    if not (isinstance(rows, list) and rows and all(isinstance(r, Mapping) for r in rows)):
        return None
    cols = [c for c in rows[0] if all(isinstance(r.get(c), (int, float, str, type(None))) for r in rows)]
    return {"header": [c.replace("_", " ") for c in cols],
            "rows": [[cell(fmt(r.get(c))) for c in cols] for r in rows]}


def _truth(aggregation: Mapping[str, Any] | None) -> dict[str, str] | None:
    """How often the aggregated preference matched a simulation's hidden one, or None."""
    truth = _get(aggregation, "truth")
    if not (isinstance(truth, Mapping) and truth.get("share") is not None):
        return None
    share = truth.get("share")
    return {"share": f"{share:.1%}" if isinstance(share, (int, float)) else fmt(share),
            "compared": fmt(truth.get("compared"))}


def _screening_facts(config: StudyConfig, screening: Mapping[str, Any] | None, facts: Facts) -> dict[str, Any]:
    """What the card's Screening section says: ``off`` (why there are no results) or the
    classifier, counts, policy, warnings, flags per label, thresholds and limitation."""
    enabled = _get(screening, "enabled")
    if (facts.screened is None and screening is None) or enabled is False:
        return {"off": ("screening was switched off for this study."
                        if not config.screening.enabled or enabled is False
                        else "no screening output was found.")}
    models = _get(screening, "model") or ", ".join(facts.screening_models) or None
    fallback = bool(_get(screening, "fallback_used")) or any(
        "profanity" in m for m in facts.screening_models) or "profanity" in str(models or "")
    screened = _get(screening, "n_responses", "screened", "n_screened")
    flagged = _count(_get(screening, "n_flagged", "flagged"))
    description = _get(screening, "description")
    per_label = _get(screening, "flagged_per_label") or facts.flagged_per_label
    thresholds = _get(screening, "thresholds")
    if not isinstance(thresholds, Mapping):
        thresholds = None if fallback else config.screening.thresholds
    limitation = _get(screening, "limitations")
    return {
        "off": None,
        "models": models,
        "fallback": fallback,
        "screened": screened if screened is not None else facts.screened,
        "flagged": flagged if flagged is not None else facts.flagged,
        "policy": _get(screening, "policy") or config.screening.policy,
        "warnings": _get(screening, "warnings") or [],
        "description": description.strip() if isinstance(description, str) else "",
        "per_label": (", ".join(f"{k} {fmt(v)}" for k, v in per_label.items())
                      if isinstance(per_label, Mapping) and per_label else ""),
        "thresholds": ", ".join(f"{k} {fmt(float(v))}" for k, v in thresholds.items()) if thresholds else "",
        "limitation": limitation.strip() if isinstance(limitation, str) else "",
    }


def _length_rows(length: Any) -> list[tuple[str, Any]]:
    """The length-bias rows of the Agreement table (:mod:`crowdpref.aggregation.bias`), worded
    as measurements of this crowd; one row saying so when the aggregation predates them."""
    if not isinstance(length, Mapping):
        return [("Length preference of this crowd", "not measured (aggregation.json predates it)")]

    def interval(low: Any, high: Any) -> str:
        return "" if low is None or high is None else f" ({fmt(low)} to {fmt(high)})"

    level = length.get("interval_level")
    lvl = f"{level:.0%} bootstrap interval" if isinstance(level, (int, float)) else "bootstrap interval"
    return [
        (f"Length preference of this crowd: share of decided pairs (answers of different length) "
         f"whose chosen answer is the longer one, {lvl}; 0.5 = length did not predict the choice",
         None if length.get("longer_chosen_share") is None else
         f"{fmt(length.get('longer_chosen_share'))}{interval(length.get('longer_chosen_low'), length.get('longer_chosen_high'))}"
         f" of {length.get('decided_pairs')}"),
        ("Length preference of this crowd: change of a pair's mean rating, in scale points, per "
         "unit of normalised length difference (second minus first over their sum); 0 = no "
         "dependence",
         None if length.get("slope") is None else
         f"{fmt(length.get('slope'))}{interval(length.get('slope_low'), length.get('slope_high'))}"),
    ]


def weighting_text(method: str, reliability: Any, gold_pairs: int) -> str:
    """What the rater weights rest on, and what the aggregation was tested on (issue 21)."""
    basis = reliability.get("weighting") if isinstance(reliability, Mapping) else None
    if method == "gold_anchored" and basis == "gold":
        flipped = reliability.get("flipped", 0) if isinstance(reliability, Mapping) else 0
        text = ("Each rater's weight and sign were anchored on their gold pairs (known answers): "
                "a rater at chance on gold counts little however well they agree with others, and "
                f"{flipped} rater(s) who rated gold backwards were counted mirrored. ")
    else:
        why = ("study 2 had no gold pairs" if gold_pairs == 0 else
               "no gold-pair outcomes reached the aggregation" if method == "gold_anchored" else
               "this method does not use the gold pairs")
        text = (f"The weighting rests on agreement between raters alone ({why}): if many raters "
                "share a preference unrelated to quality (answer length, for example), agreement "
                "rewards it. ")
    return (text + "In simulations (benchmarks/aggregation_quality.py: simulated raters, including "
            "heavy-tailed, extreme, central-tendency, length-swayed, backwards and random ones) "
            "weighting by agreement alone fell below the plain mean where a large share of raters "
            "followed length; the gold anchor held up there only because the simulated gold "
            "pairs' good answers were not systematically the longer ones. ")


def quality_section(config: StudyConfig, participants: pd.DataFrame | None,
                    aggregation: Mapping[str, Any] | None) -> list[str]:
    """The card's "Quality checks, reliability and uncertainty" section: what each study's
    checks were and how participants did (from the ``participants`` configuration), how the
    pairs were decided, and what the uncertainty columns mean."""
    s1, s2 = config.study1.checks, config.study2.checks
    out = ["## Quality checks, reliability and uncertainty", ""]
    for study, checks, what in (
            ("study1", s1, f"{s1.count} instructed-response item(s) (the text told the "
                           "participant exactly which word to write and which rating to give)"),
            ("study2", s2, f"{s2.gold_pairs} gold pair(s) (a clearly good and a clearly bad answer) "
                           f"and {s2.repeated_pairs} repeated pair(s) (one of the rater's own pairs "
                           f"again, in the other A/B order; consistent within {s2.repeat_tolerance} "
                           "points)")):
        name = "Study 1" if study == "study1" else "Study 2"
        if checks.count == 0:
            out += [f"{name} had no quality checks.", ""]
            continue
        rule = "all" if checks.min_passed is None else f"at least {checks.min_passed}"
        action = ("their counted work was excluded and given to other participants, so every item "
                  "still has its planned number of answers from people who passed" if checks.on_fail == "exclude"
                  else "they were flagged and their work kept (the filters below decide about it)")
        line = (f"{name} mixed {what} into every batch, graded automatically; passing needed {rule}. "
                f"Participants who failed: {action}.")
        if participants is not None and "checks_verdict" in participants:
            rows = participants[participants["study"] == study]
            counts = rows["checks_verdict"].value_counts()
            line += (f" Of {len(rows)} participants, {int(counts.get('passed', 0))} passed, "
                     f"{int(counts.get('failed', 0))} failed and {int(counts.get('unanswered', 0))} "
                     f"left before answering them; {int((rows['status'] == 'excluded').sum())} had "
                     "their work excluded.")
        out += [line, ""]
    out += onboarding_lines(config, participants)
    method = (aggregation or {}).get("method", "mean")
    decided_by = (aggregation or {}).get("decided_by", method)
    out += [("Each pair was decided by the plain mean of its ratings, as in the published method. "
             + ("The method was gold_anchored, but no gold-pair outcomes reached the aggregation, "
                "so it fell back to the plain mean rather than weight raters by agreement alone. "
                if method == "gold_anchored" else "")
             if decided_by == "mean" else
             "Each pair was decided by the reliability-weighted mean of its ratings, each rating "
             "corrected for its rater's A/B position bias. "
             + weighting_text(method, (aggregation or {}).get("reliability"), s2.gold_pairs))
            + "Rater reliability (the `raters` configuration) comes from a one-factor model fitted "
            "over every counted rating (before the preregistered filters); `p_chosen` is the share of bootstrap resamples of a pair's own "
            "ratings that land on the chosen side, and `mean_rating_low` / `mean_rating_high` "
            f"bound its mean rating ({config.aggregation.interval_level:.0%} interval). With only "
            f"{config.study2.ratings_per_pair} ratings per pair these describe how one-sided the "
            "ratings were, not a calibrated probability.", ""]
    return out


def onboarding_lines(config: StudyConfig, participants: pd.DataFrame | None) -> list[str]:
    """What each study's onboarding was and whom its quiz screened out (counts only, no ids),
    or that a study had none."""
    out = []
    for study, section in (("study1", config.study1), ("study2", config.study2)):
        name = "Study 1" if study == "study1" else "Study 2"
        onboarding = section.onboarding
        if onboarding is None:
            out += [f"{name} had no onboarding: participants read the guidelines and started, "
                    "as in the published method.", ""]
            continue
        quiz = onboarding.quiz
        line = (f"{name} began with onboarding before any work was given: {len(onboarding.examples)} worked "
                f"example(s) and {len(onboarding.practice)} practice question(s) with feedback (never counted)")
        if quiz is None:
            out += [line + ", and no quiz: everyone who finished it went on to the work.", ""]
            continue
        line += (f", then a quiz of {len(quiz.items)} question(s): {quiz.pass_mark} right answers to pass, "
                 f"{quiz.attempts} attempt(s). Whoever did not pass was screened out before any work was "
                 "allocated to them" + (" (paid a fixed screen-out reward on Prolific)"
                                        if config.participants == "prolific" else "") + ".")
        if participants is not None and "onboarding_attempts" in participants:
            rows = participants[participants["study"] == study]
            screened = int((rows["status"] == "screened_out").sum())
            took = int((rows["onboarding_attempts"] > 0).sum())
            line += f" Of {took} people who took the quiz, {took - screened} passed and {screened} {'was' if screened == 1 else 'were'} screened out."
        out += [line, ""]
    return out


def filters_section(filters: Mapping[str, Any] | None) -> list[str]:
    """The card's "Filters (preregistered)" section (markdown lines) from ``filters.json``."""
    out = ["## Filters (preregistered)", ""]
    if not filters:
        return out + ["No preregistered filters were applied to this release (it was aggregated "
                      "before crowdpref applied them): `responses` and `ratings` hold every "
                      "answer and rating collected, and the default configuration is built from "
                      "all of them.", ""]
    pre = filters.get("preregistered")
    recorded = pre.get("recorded_at") if isinstance(pre, Mapping) else None
    out += ["The rules below decide which participants' work the default configuration leaves "
            "out. They are part of the study's configuration and were applied mechanically: "
            "`responses` and `ratings` hold what they kept, and the default configuration is "
            "built from those; `responses_raw` and `ratings_raw` hold every answer and rating "
            "collected, with `filtered_by` naming the rules that removed each row. Removing a "
            "study-1 participant removes their answers and every rating of a pair that holds one "
            "of them; removing a study-2 participant removes their ratings. A participant hit "
            "by several rules is counted under each rule and once in the last row.", ""]
    if recorded:
        out += [f"The rules were recorded in the study's store on "
                f"{str(recorded).replace('T', ' ').replace('+00:00', ' UTC')}, when collection "
                "began, and the aggregation checked that they had not changed since.", ""]
    else:
        out += ["**These rules were not recorded before collection began** (the study store "
                "holds no record of them), so this release cannot show that they were fixed in "
                "advance.", ""]
    out += ["| Rule | What it leaves out | Setting | Participants removed (study 1 / study 2) | "
            "Answers removed | Ratings removed |", "|---|---|---|---|---|---|"]
    rows = [r for r in filters.get("per_rule") or [] if isinstance(r, Mapping)]
    total = filters.get("total") if isinstance(filters.get("total"), Mapping) else {}
    for row in [*rows, {**total, "rule": None}]:
        name = f"`{row.get('rule')}`" if row.get("rule") else "**Any rule** (each counted once)"
        what = RULE_TEXT.get(str(row.get("rule")), "") if row.get("rule") else ""
        setting = row.get("setting") if row.get("rule") else ""
        out.append(f"| {name} | {cell(what)} | {cell(fmt(setting))} | "
                   f"{fmt(row.get('participants'))} ({fmt(row.get('participants_study1'))} / "
                   f"{fmt(row.get('participants_study2'))}) | {fmt(row.get('answers'))} | "
                   f"{fmt(row.get('ratings'))} |")
    out += ["", f"Answers: {fmt(filters.get('answers_before'))} collected, "
            f"{fmt(filters.get('answers_after'))} kept. Ratings: "
            f"{fmt(filters.get('ratings_before'))} collected, {fmt(filters.get('ratings_after'))} "
            f"kept ({fmt(total.get('ratings_of_removed_answers'))} of those removed belong to a "
            f"pair holding a removed answer, {fmt(total.get('ratings_by_removed_raters'))} were "
            "given by a removed rater; a rating can be both).", ""]
    excluded = (filters.get("excluded_answers") or 0, filters.get("excluded_ratings") or 0)
    if any(excluded):
        out += [f"Before these rules, {excluded[0]} answers and {excluded[1]} ratings were taken out "
                "of the count during collection because their authors failed the quality checks "
                f"(see above); other participants answered those items again. They are in "
                f"`responses_raw` / `ratings_raw` with `filtered_by` `{EXCLUDED}` and not in the "
                "numbers above.", ""]
    if filters.get("participants_file") is False:
        out += ["The participants file was not available, so the rules that read it were off.", ""]
    unlisted = (filters.get("unlisted_writers") or 0, filters.get("unlisted_raters") or 0)
    if any(unlisted):
        out += [f"{unlisted[0]} writers and {unlisted[1]} raters were not listed in the "
                "participants file, so no participant rule could remove them.", ""]
    return out
