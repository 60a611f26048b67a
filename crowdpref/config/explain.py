"""The study in plain words: the wording of the summary ``crowdpref validate`` prints.

Each function describes one section (or the plan) as the value of one summary row;
:meth:`~crowdpref.config.study.StudyConfig.summary_rows` chooses the rows and their labels.
"""

from __future__ import annotations

from typing import Any

from crowdpref.config.plan import ScreenOutCost, StudyPlan
from crowdpref.config.sections import (
    AggregationConfig,
    CrowdConfig,
    FiltersConfig,
    InstructedChecks,
    ProlificConfig,
    PublishConfig,
    QuestionsConfig,
    RatingChecks,
    ScreeningConfig,
    Study1Config,
    Study2Config,
)

__all__ = [
    "INVITED_PEOPLE",
    "MIN_REAL_DROPOUT_MINUTES",
    "UNVERIFIED_PILOT",
    "dropout_warnings",
    "real_people",
    "screen_out_cost",
    "validation_rows",
    "describe_aggregation",
    "describe_crowd",
    "describe_filters",
    "describe_plan",
    "describe_prolific",
    "describe_publish",
    "describe_questions",
    "describe_screening",
    "describe_study1",
    "describe_study2",
]

#: The Prolific row of a study with ``participants: prolific`` and ``prolific.verify: false``.
UNVERIFIED_PILOT = ("UNVERIFIED pilot (prolific.verify: false): arrivals are not checked with "
                    "Prolific, anyone who forms a link with a made-up id gets work, nothing is paid or "
                    "reviewed through the API, and the data card marks the data as unverified")


#: The participants row of a study with ``participants: invite``: real people, no simulated crowd.
INVITED_PEOPLE = "real people through invitation links (`crowdpref invite STUDY.yaml`)"

#: Real people get at least this long without activity before their work goes to someone else.
MIN_REAL_DROPOUT_MINUTES = 10.0


def real_people(config: Any) -> bool:
    """Whether the study's participants are real people (Prolific or invitation links)."""
    return config.participants in ("prolific", "invite")


def dropout_warnings(config: Any) -> list[str]:
    """One line per study whose drop-out window is too short for real people (a slow reader
    would lose their work to someone else); none for the simulated crowd."""
    if not real_people(config):
        return []
    source = config.source or "study config"
    lines = []
    for key in ("study1", "study2"):
        minutes = getattr(config, key).inactive_after_minutes
        if minutes < MIN_REAL_DROPOUT_MINUTES:
            lines.append(f"warning: {source}: {key}.inactive_after_minutes: {minutes:g} min is short for real people "
                         f"(participants: {config.participants}): a slow participant's work would go to someone "
                         f"else: use tens of minutes, e.g. 45")
    return lines


def screen_out_cost(config: Any, n_questions: int) -> ScreenOutCost | None:
    """The most the onboarding quizzes' screen-outs can cost on Prolific (see
    :class:`~crowdpref.config.plan.ScreenOutCost`); None when no study screens anyone out on
    Prolific. The slots are the places each Prolific study opens with
    (:func:`crowdpref.recruitment.screen_out_terms`)."""
    if not (config.participants == "prolific" and config.prolific.enabled):
        return None
    rewards: list[int | None] = []
    for key in ("study1", "study2"):
        onboarding = getattr(getattr(config, key), "onboarding", None)
        quiz = getattr(onboarding, "quiz", None) if onboarding is not None else None
        rewards.append(getattr(onboarding, "screen_out_reward", None) if quiz is not None else None)
    if not any(rewards):
        return None
    cost = config.prolific_cost(n_questions)
    return ScreenOutCost(slots=cost.places, rewards=(rewards[0], rewards[1]), fee_rate=cost.fee_rate)


def validation_rows(config: Any, n_questions: int | None = None) -> list[tuple[str, str]]:
    """The rows ``crowdpref validate`` prints: the config's summary, where a study of real
    people says nothing about the simulated crowd, and the money summary includes the most the
    onboarding quizzes' screen-outs can cost."""
    n = n_questions if n_questions is not None else config.questions.expected_questions
    rows: list[tuple[str, str]] = []
    for label, value in config.summary_rows(n):
        if real_people(config) and label == "Participants":  # the summary's simulated-crowd row
            value = INVITED_PEOPLE
        rows.append((label, value))
        if label == "Cost on Prolific" and n is not None:
            extra = screen_out_cost(config, n)
            if extra is not None:
                rows.append(("Screen-outs on Prolific", extra.describe()))
    return rows


def describe_questions(q: QuestionsConfig) -> str:
    """Categories, question sources, the per-category target and the filters."""
    sources = (["bank"] if q.bank else []) + [f"{len(q.files)} file(s)"] * bool(q.files)
    if q.llm.enabled:
        sources.append(f"LLM ({q.llm.model or 'settings model'})")
    target = "all available" if q.per_category is None else f"{q.per_category} per category"
    return (f"{len(q.categories)} categories; {' + '.join(sources)}; {target}; "
            f"{q.min_chars}-{q.max_chars} chars; duplicates at "
            f">= {q.near_duplicate_threshold:g}")


def describe_study1(s1: Study1Config) -> str:
    """R, Q, the quality scale, usernames, drop-out, the too-fast flag and the checks."""
    return (f"R={s1.responses_per_question} answers per question, "
            f"Q={s1.questions_per_participant} questions per participant, quality "
            f"{s1.quality_scale.min}-{s1.quality_scale.max}, users "
            f"{s1.username_prefix}-*, drop-out after {s1.inactive_after_minutes:g} min, "
            f"too fast {_too_fast(s1.too_fast_seconds)}"
            + f", {_checks_text(s1.checks.count, 'instructed item', s1.checks)}")


def describe_study2(s2: Study2Config) -> str:
    """Ratings per pair, batch size, the scale, pairs, exclusion, usernames, too-fast, checks."""
    return (f"{s2.ratings_per_pair} ratings per pair, {s2.pairs_per_participant} pairs "
            f"per participant, {s2.scale_points}-point A/B scale, pairs: {s2.pairs}, "
            f"study-1 participants "
            f"{'excluded' if s2.exclude_study1_participants else 'allowed'}, users "
            f"{s2.username_prefix}-*, too fast {_too_fast(s2.too_fast_seconds)}, "
            f"{_checks_text(s2.checks.count, 'check pair', s2.checks)}")


def describe_plan(plan: StudyPlan) -> list[tuple[str, str]]:
    """The two plan rows: answers and batches of study 1, pairs, ratings and batches of study 2."""
    return [
        ("Plan, study 1", f"{plan.n_questions} questions -> {plan.n_responses} answers; "
                          f"{plan.study1.describe()}"),
        ("Plan, study 2", f"{plan.n_pairs} pairs ({plan.pairs_per_question} per question)"
                          f" -> {plan.n_ratings} ratings; {plan.study2.describe()}"),
    ]


def describe_screening(sc: ScreeningConfig) -> str:
    """The classifier, device, policy and thresholds, or ``off``."""
    return ("off" if not sc.enabled else
            f"detoxify {sc.model} on {sc.device}, {sc.policy} at "
            + ", ".join(f"{k}>={v:g}" for k, v in sc.thresholds.items())
            + (f", fallback {sc.fallback}" if sc.fallback else ""))


def describe_aggregation(ag: AggregationConfig) -> str:
    """Incomplete pairs, ties and Bradley-Terry."""
    return (f"mean rating per pair; incomplete pairs: "
            f"{ag.incomplete_pairs}; ties: {ag.ties}; Bradley-Terry "
            f"{'on' if ag.bradley_terry else 'off'}")


def describe_filters(filters: FiltersConfig) -> str:
    """The preregistered rules that are on."""
    return f"{filters.describe()} (preregistered: fixed once collection starts)"


def describe_publish(pb: PublishConfig) -> str:
    """The Hub repo, its visibility, the licence and the content warning."""
    return (f"{pb.repo_id or '(hf_repo_id setting)'}, "
            f"{'private' if pb.private else 'public'}, licence {pb.license}"
            + (", content warning" if pb.content_warning else ""))


def describe_prolific(pr: ProlificConfig) -> str:
    """Rewards, hourly rates and places of both studies, the filters and what verified work gets."""
    places = [f"{s.places} places" if s.places else "a place per batch" for s in (pr.study1, pr.study2)]
    return (f"study 1: {pr.study1.reward} ({pr.study1.hourly_rate:.2f}/h), {places[0]}; "
            f"study 2: {pr.study2.reward} ({pr.study2.hourly_rate:.2f}/h), {places[1]}; "
            f"approval >= {pr.filters.approval_rate:g}%, completed >= "
            f"{pr.filters.min_completed}; verified work "
            f"{'approved by the sync' if pr.auto_approve else 'listed for review'}")


def describe_crowd(c: CrowdConfig) -> str:
    """How the simulated crowd behaves."""
    return (f"simulated crowd: drop-out {c.dropout_rate:g}, low effort "
            f"{c.low_effort_rate:g}, offensive {c.offensive_rate:g}, rater noise "
            f"{c.rater_noise:g}, position bias {c.position_bias:g}, random clickers "
            f"{c.random_clicker_rate:g}")


def _checks_text(count: int, what: str, checks: InstructedChecks | RatingChecks) -> str:
    """The summary's words for a study's checks."""
    if count == 0:
        return "no checks"
    rule = "all" if checks.min_passed is None else f"{checks.min_passed} of {count}"
    return f"{count} {what}{'s' if count != 1 else ''} per batch (pass: {rule}; on fail: {checks.on_fail})"


def _too_fast(seconds: float) -> str:
    """The summary's words for a ``too_fast_seconds`` setting."""
    return f"below {seconds:g} s per item (median)" if seconds > 0 else "off"
