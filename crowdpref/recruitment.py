"""Recruitment on Prolific: which Prolific a study talks to, its Prolific study (created once,
published, places raised), and the reconciliation of submissions with the study store.

A study with ``participants: prolific`` and ``prolific.enabled`` talks to the real API
(``prolific_api_url``, ``PROLIFIC_TOKEN``). A ``participants: simulated`` study talks to the
FAKE Prolific that ``crowdpref demo`` starts (``crowdpref/simulation/prolific_server.py`` on
``fake_prolific_port``), never to the real one, so a simulation cannot reach real people.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crowdpref.config import StudyConfig
from crowdpref.errors import first_line

FAKE_PROLIFIC_TOKEN = "fake-prolific-token"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProlificTarget:
    """The Prolific a study uses: API base URL, where participants finish, the token."""

    api_url: str
    app_url: str
    token: str = ""
    fake: bool = False

    def __repr__(self) -> str:  # the token never prints
        return f"ProlificTarget({self.api_url!r}, fake={self.fake})"


def prolific_target(config: StudyConfig, settings: Any) -> ProlificTarget | None:
    """The Prolific this study verifies visitors against and recruits on; None when it has none
    (invite links, or Prolific people without API access: ``prolific.enabled: false``)."""
    if config.participants == "simulated":
        base = f"http://{settings.host}:{settings.fake_prolific_port}"
        return ProlificTarget(f"{base}/api/v1/", base, FAKE_PROLIFIC_TOKEN, fake=True)
    if config.participants == "prolific" and config.prolific.enabled:
        token = settings.prolific_token.get_secret_value() if settings.prolific_token else ""
        return ProlificTarget(settings.prolific_api_url, settings.prolific_app_url, token)
    return None


def prolific_client(config: StudyConfig, settings: Any, **options: Any) -> Any:
    """A :class:`~crowdpref.prolific.ProlificClient` for the study's Prolific (see
    :func:`prolific_target`); ConfigError when the study has none or no token is set."""
    from crowdpref.errors import ConfigError
    from crowdpref.prolific import ProlificClient

    target = prolific_target(config, settings)
    if target is None:
        raise ConfigError(f"study '{config.name}' does not recruit on Prolific (participants: "
                          f"{config.participants}, prolific.enabled: {config.prolific.enabled}): set both to use it")
    if not target.token:
        raise ConfigError("PROLIFIC_TOKEN is not set: create an API token in Prolific (Settings > API tokens) "
                          "and export PROLIFIC_TOKEN=...")
    return ProlificClient(target.api_url, target.token, **options)


def recruits_on_prolific(config: StudyConfig) -> bool:
    """Whether the study's collections publish a Prolific study and reconcile its submissions:
    real recruitment (``participants: prolific`` with ``prolific.enabled``), or a simulation whose
    crowd arrives through the fake Prolific (``crowd.arrive_via: prolific``)."""
    if config.participants == "simulated":
        return config.crowd.arrive_via == "prolific"
    return config.participants == "prolific" and config.prolific.enabled


# --- the Prolific study ------------------------------------------------------------------------------
PARTS = {"study1": "part 1: writing answers", "study2": "part 2: comparing answers"}
GROUP_META = "prolific-group:{study}"  # study 1's completers (study 2 blocklists them)
GROUP_INTENT_META = "prolific-group-creating:{study}"  # set before the group's creation is sent


def internal_name(study: str, key: str) -> str:
    """The idempotency key of a collection's Prolific study."""
    return f"crowdpref:{study}:{key}"


def default_places(collection: Any) -> int:
    """One place per participant batch (the study's remainder batch included)."""
    return int(collection.spec.batches.participants)


def screen_out_terms(config: StudyConfig, key: str, places: int) -> tuple[int, int] | None:
    """(fixed screen-out reward, slots) of study ``key``'s Prolific screen-out completion code;
    None when nobody can be screened out (no onboarding quiz). The reward is the onboarding's
    ``screen_out_reward`` (pence/cents); a simulated study without one pays the onboarding's
    share of the study's time (the figure ``crowdpref validate`` suggests). Slots (how many
    screen-outs Prolific pays before it pauses the study): the study's ``places`` - at most one
    screen-out per place it opens with (raise them on Prolific to go on).
    ConfigError (one line) when the reward is not below the study's reward (Prolific refuses it)."""
    from crowdpref.errors import ConfigError

    onboarding = getattr(getattr(config, key), "onboarding", None)
    if onboarding is None or getattr(onboarding, "quiz", None) is None:
        return None
    part = config.prolific.study1 if key == "study1" else config.prolific.study2
    reward = getattr(onboarding, "screen_out_reward", None)
    if reward is None:
        minutes = max(1, part.estimated_completion_minutes)
        reward = max(1, min(part.reward - 1, part.reward * onboarding.minutes // minutes))
    if not 0 < reward < part.reward:
        raise ConfigError(f"{key}.onboarding.screen_out_reward: {reward} is not below the study reward "
                          f"(prolific.{key}.reward: {part.reward}); Prolific requires it to be less: lower it")
    return reward, max(1, int(places))


def study_payload(config: StudyConfig, key: str, settings: Any, completion_code: str, *, places: int,
                  completers_group: str | None = None, blocklist_group: str | None = None,
                  screen_out_code: str | None = None, open_places: int | None = None) -> dict[str, Any]:
    """The body of ``POST /studies/`` for one collection. With an onboarding quiz and a
    ``screen_out_code`` (:meth:`~crowdpref.store.Store.screen_out_code`), a second completion code
    (``SCREENED_OUT``, action ``FIXED_SCREEN_OUT_PAYMENT``: :func:`screen_out_terms`) pays the
    people the quiz turns away; its actor is ``researcher``, so only crowdpref can give it, through
    the API (:func:`pay_screen_out`). ``maximum_allowed_time`` is the study's
    ``inactive_after_minutes`` (at least Prolific's least for the estimated time): crowdpref never
    releases for inactivity someone whom Prolific still gives time. ``places``: the planned first
    places (the screen-out slots follow them); ``open_places``: the places it opens with (a paced
    launch's first step, :mod:`crowdpref.launch_pacing`; default ``places``).
    ``launch.max_concurrent_submissions``, when set, goes into ``submissions_config``."""
    from crowdpref.portal.links import prolific_entry_url

    part = config.prolific.study1 if key == "study1" else config.prolific.study2
    section = config.study1 if key == "study1" else config.study2
    # the config refuses a real study whose inactive_after_minutes is below Prolific's least (a
    # simulation's short window gets Prolific's least: its releases are asked to return, never rejected)
    max_minutes = math.floor(max(float(section.inactive_after_minutes), float(part.least_allowed_minutes)))
    # the code never approves by itself (anyone who learns it could report it without the work):
    # the sync approves what crowdpref verified (prolific.auto_approve), or a person does
    actions: list[dict[str, Any]] = [{"action": "MANUALLY_REVIEW"}]
    if key == "study1" and completers_group:
        actions.append({"action": "ADD_TO_PARTICIPANT_GROUP", "participant_group": completers_group})
    filters: list[dict[str, Any]] = [
        {"filter_id": "approval_rate", "selected_range": {"lower": config.prolific.filters.approval_rate, "upper": 100}},
        {"filter_id": "approval_numbers", "selected_range": {"lower": config.prolific.filters.min_completed}},
    ]
    if key == "study2" and blocklist_group:
        filters.append({"filter_id": "participant_group_blocklist", "selected_values": [blocklist_group]})
    codes: list[dict[str, Any]] = [{"code": completion_code, "code_type": "COMPLETED", "actions": actions}]
    terms = screen_out_terms(config, key, places)
    if terms is not None and screen_out_code:
        reward, slots = terms
        # actor researcher: no participant can enter it (it is never shown to anyone); crowdpref
        # gives it through the API to exactly the submissions its quiz screened out
        codes.append({"code": screen_out_code, "code_type": "SCREENED_OUT", "actor": "researcher", "actions": [
            {"action": "FIXED_SCREEN_OUT_PAYMENT", "fixed_screen_out_reward": reward, "slots": slots}]})
    submissions_config: dict[str, Any] = {"max_submissions_per_participant": 1}
    if part.launch.max_concurrent_submissions is not None:
        submissions_config["max_concurrent_submissions"] = part.launch.max_concurrent_submissions
    what = ("write short answers to questions about everyday social situations" if key == "study1"
            else "compare pairs of answers to questions about everyday social situations")
    return {
        "name": f"{config.title} - {PARTS[key]}",
        "internal_name": internal_name(config.name, key),
        "description": f"You will {what}, in a web tool called Argilla that opens from this study. "
                       f"{config.description}".strip(),
        "external_study_url": prolific_entry_url(settings, config.name, key),
        "prolific_id_option": "url_parameters",
        "completion_codes": codes,
        "total_available_places": places if open_places is None else open_places,
        "estimated_completion_time": part.estimated_completion_minutes,
        "maximum_allowed_time": max_minutes,
        "reward": part.reward,
        "filters": filters,
        "submissions_config": submissions_config,
    }


def _record_first_step(store: Any, cid: int, pace: Any, opened: int, planned: int, cap: int) -> None:
    """What ``crowdpref progress`` shows before the first sync: the places the study opened with."""
    import json

    from crowdpref.launch_pacing import PACING_META

    left = planned - opened
    store.set_meta(PACING_META.format(cid=cid), json.dumps({
        "open": opened, "needed": planned, "cap": cap, "pace": pace.describe(), "at": store.clock(),
        "next": f"+{min(pace.step, left)} as people take these and claim their work" if left > 0
        else f"none: all {planned} first places are open"}))


def last_pacing(store: Any, cid: int) -> dict[str, Any] | None:
    """The last pacing decision the store keeps for collection ``cid`` (the JSON meta value that
    the publish and every :func:`raise_places` write: open, needed, target, pace, next, ...);
    None when there is none or it cannot be read."""
    import json

    from crowdpref.launch_pacing import PACING_META

    raw = store.get_meta(PACING_META.format(cid=cid))
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def group_name(config: StudyConfig) -> str:
    """The name of study 1's completers' group on Prolific (how a lost creation is found again)."""
    return f"{config.name}: completed part 1"


def _find_group(client: Any, name: str, workspace_id: str | None) -> str | None:
    """The id of the workspace's (not deleted) participant group called ``name``; None when
    there is none, or no workspace to look in."""
    if not workspace_id:
        return None
    found = [g for g in client.list_participant_groups(workspace_id)
             if g.get("name") == name and not g.get("is_deleted")]
    return str(found[0]["id"]) if found else None


def _completers_group(config: StudyConfig, store: Any, client: Any, settings: Any) -> str:
    """Study 1's completers' participant group: created once, its id kept in the store before
    anything uses it. The intent is recorded before the creation: a creation whose reply was
    lost (:class:`~crowdpref.prolific.ProlificAmbiguous`), or a run killed before the id was
    kept, is found by name on Prolific (this run, else the next) instead of created twice."""
    from crowdpref.errors import ConfigError
    from crowdpref.prolific import ProlificAmbiguous, ProlificError

    meta = GROUP_META.format(study=config.name)
    group = store.get_meta(meta)
    if group:
        return group
    name, workspace = group_name(config), settings.prolific_workspace_id
    intent = GROUP_INTENT_META.format(study=config.name)
    group = _find_group(client, name, workspace) if store.get_meta(intent) else None
    if group is None:
        store.set_meta(intent, name)
        try:
            group = client.create_participant_group(name, workspace)
        except ProlificAmbiguous:
            group = _find_group(client, name, workspace)
            if group is None:
                if not workspace:
                    raise ConfigError(f"Prolific: creating the participant group '{name}' got no reply and without "
                                      "prolific_workspace_id it cannot be looked up: check Prolific for it, set "
                                      "CROWDPREF_PROLIFIC_WORKSPACE_ID, and run again") from None
                raise ProlificError(f"Prolific: creating the participant group '{name}' got no reply and it is not "
                                    "on Prolific: nothing was created; run again (it is looked up by name first)",
                                    transient=False) from None
            log.info("Prolific: the participant group's creation got no reply; found it by name")
    store.set_meta(meta, group)
    return group


def ensure_prolific_study(collection: Any, config: StudyConfig, settings: Any, client: Any, *,
                          publish: bool = True, before_publish: Any = None, pace: Any = None) -> Any:
    """The collection's Prolific study, created at most once and published. Idempotent: the
    store's record first; else a Prolific study with our internal name (a run killed between
    creating and recording adopts it); else a new one (a creation whose reply was lost is looked
    up again and adopted; not there: a one-line error, run again). Study 1's completion code adds its
    completers to a participant group (created once, its id kept in the store before any use)
    that study 2 blocklists; study 2 creates that group when study 1 was not recruited yet.
    Publishing is a transition only from UNPUBLISHED, and ``before_publish`` (the pre-flight's
    gate, :func:`crowdpref.preflight.gate.publish_guard`) is called just before it: it may refuse.
    ``pace`` (:class:`crowdpref.launch_pacing.Pace`, what the recruit task passes): a paced
    launch's new study opens only its first step (:func:`~crowdpref.launch_pacing.first_places`);
    None opens every planned place at once (for callers that drive arrivals themselves).
    Returns the store's PlatformStudy."""
    from crowdpref.prolific import ProlificAmbiguous, ProlificError

    store, cid, key = collection.store, collection.info.id, collection.spec.key
    platform = store.platform_study(cid)
    if platform is None:
        wanted = internal_name(config.name, key)
        study = next((s for s in client.list_studies() if s.internal_name == wanted), None)
        group = store.get_meta(GROUP_META.format(study=config.name))
        if study is None:
            from crowdpref.launch_pacing import UNPACED, first_places

            group = _completers_group(config, store, client, settings)
            part = config.prolific.study1 if key == "study1" else config.prolific.study2
            planned = part.initial_places(default_places(collection))
            opening = first_places(planned, part.places_cap(default_places(collection)), pace or UNPACED)
            payload = study_payload(config, key, settings, store.completion_code(cid), places=planned,
                                    completers_group=group if key == "study1" else None,
                                    blocklist_group=group if key == "study2" else None,
                                    screen_out_code=store.screen_out_code(cid), open_places=opening)
            try:
                study = client.create_study(payload)
            except ProlificAmbiguous:  # sent, reply lost: it may exist - adopt it, never create twice
                study = next((s for s in client.list_studies() if s.internal_name == wanted), None)
                if study is None:
                    raise ProlificError(f"Prolific: creating the study {wanted} got no reply and it is not on "
                                        "Prolific: nothing was created; run again (it is looked up by name first)",
                                        transient=False) from None
                store.log_event(cid, "platform_study_adopted", platform="prolific", status=study.status,
                                after="a lost reply")
            else:
                store.log_event(cid, "platform_study_created", platform="prolific",
                                places=study.total_available_places, planned=planned)
            _record_first_step(store, cid, pace or UNPACED, study.total_available_places, planned,
                               part.places_cap(default_places(collection)))
        else:
            store.log_event(cid, "platform_study_adopted", platform="prolific", status=study.status)
        platform = store.save_platform_study(cid, "prolific", study.id, study.status.lower() or "unpublished",
                                             group_id=group, places=study.total_available_places)
    if publish and platform.state in ("draft", "unpublished"):
        study = client.get_study(platform.external_id)
        if study.status == "UNPUBLISHED":
            if before_publish is not None:
                before_publish()
            study = client.publish_study(platform.external_id)
            store.log_event(cid, "platform_study_published", platform="prolific", places=study.total_available_places)
        platform = store.save_platform_study(cid, "prolific", platform.external_id, study.status.lower(),
                                             places=study.total_available_places)
    return platform


# --- webhooks ---------------------------------------------------------------------------------------------
WEBHOOK_SECRET_META = "prolific_webhook_secret"  # the portal reads it under this name
WEBHOOK_SUBSCRIPTION_META = "prolific_webhook_subscription"


def setup_webhooks(settings: Any, store: Any, client: Any, workspace_id: str | None, *, force: bool = False) -> str:
    """Create the workspace's webhook secret (kept in the owner-only store, where the portal
    reads it), subscribe the portal's ``/hooks/prolific`` to ``submission.status.change`` and
    confirm the subscription. Returns the subscription id; with one already recorded and no
    ``force``, does nothing and returns it."""
    from crowdpref.errors import ConfigError
    from crowdpref.portal.links import webhook_url

    existing = store.get_meta(WEBHOOK_SUBSCRIPTION_META)
    if existing and not force:
        log.info("Prolific webhooks: already subscribed (%s); nothing done (force makes a new secret and "
                 "subscription)", existing)
        return existing
    if not workspace_id:
        raise ConfigError("prolific_workspace_id is not set: export CROWDPREF_PROLIFIC_WORKSPACE_ID=<the Prolific "
                          "workspace id> (Prolific: workspace settings)")
    secret = client.create_webhook_secret(workspace_id)
    store.set_meta(WEBHOOK_SECRET_META, secret)
    subscription, hook_secret = client.subscribe_webhook(workspace_id, "submission.status.change", webhook_url(settings))
    client.confirm_webhook(subscription, hook_secret)
    store.set_meta(WEBHOOK_SUBSCRIPTION_META, subscription)
    return subscription


# --- reconciliation ----------------------------------------------------------------------------------------
# statuses that give the place back: the participant's unfinished work returns to the pool
FREEING = ("RETURNED", "TIMED-OUT", "REJECTED")


@dataclass
class SyncReport:
    """One reconciliation of a collection with its Prolific study (no Prolific ids in it)."""

    key: str
    places: int = 0
    active: int = 0
    returned: int = 0
    timed_out: int = 0
    rejected: int = 0
    awaiting_review: int = 0
    approved: int = 0
    released_now: int = 0
    withdrawn_now: int = 0  # completed participants whose submission was returned / rejected / timed out
    approved_now: int = 0
    rejected_now: int = 0
    places_raised_to: int | None = None
    review: list[tuple[str, str]] | None = None  # (username, reason)
    approvals_unconfirmed: int = 0  # approvals sent whose reply was lost (the next sync reads them back)
    places_capped_at: int | None = None  # the budget cap (prolific.studyN.max_places) stopped the raise
    places_short: int = 0  # ... and this many more places would be needed
    screened_out: int = 0  # SCREENED OUT on Prolific AND screened out by crowdpref's quiz (paid the fixed reward)
    screened_out_now: int = 0  # the quiz screened them out; this sync gave their submission the screen-out code
    screen_outs_unrecorded: int = 0  # SCREENED OUT on Prolific with no screen-out recorded here (listed for review)
    returns_requested_now: int = 0  # released by crowdpref while Prolific still counted them: asked to return

    def budget_note(self) -> str | None:
        """In words, when the budget cap stops the places from rising; None otherwise."""
        if self.places_capped_at is None:
            return None
        return cap_note(self.key, self.places_capped_at, self.places_short)

    def row(self) -> dict[str, Any]:
        return {"study": self.key, "places": self.places, "active": self.active, "returned": self.returned,
                "timed out": self.timed_out, "rejected": self.rejected, "awaiting review": self.awaiting_review,
                "approved": self.approved, "released now": self.released_now, "withdrawn now": self.withdrawn_now,
                "approved now": self.approved_now,
                "rejected now": self.rejected_now,
                "places raised to": self.places_raised_to or "", "to review": len(self.review or []),
                "approvals unconfirmed": self.approvals_unconfirmed,
                "places capped at": self.places_capped_at or "", "places short": self.places_short,
                "screened out": self.screened_out, "screened out now": self.screened_out_now,
                "screen-outs not recorded here": self.screen_outs_unrecorded,
                "returns requested now": self.returns_requested_now}


CAP_META = "prolific-places-capped:{cid}"  # the last sync's budget-cap note ("" when not capped)


def cap_note(key: str, cap: int, short: int) -> str:
    """The words for a study whose places reached the budget cap."""
    return (f"places are at the budget cap {cap} (prolific.{key}.max_places): {short} more would be needed; "
            "raise the cap or let the pool wait")


# --- review decisions ------------------------------------------------------------------------------------
FAILED_CHECK_MESSAGE = (
    "Thank you for taking part. Your batch contained {total} attention check item(s) ({what}), "
    "and {failed} of them were not answered as the study's rules require, so we cannot approve "
    "this submission. If you think this is a mistake, please message us through Prolific."
)
CHECK_KINDS = {
    "study1": "items whose text told you exactly which word to write and which rating to give",
    "study2": "pairs with one clearly better answer, and a pair shown twice in swapped order that "
              "should get a consistent rating",
}
NO_WORK_MESSAGE = (
    "Thank you for your interest. This study's work is done in a web tool that opens from the "
    "study link, and we have no record of any work from you there, so we cannot approve this "
    "submission. If you think this is a mistake, please message us through Prolific."
)
TOO_QUICK_MESSAGE = (
    "Thank you for taking part. Your answers were submitted faster than the task can be done "
    "with care (a median of {median:.0f} seconds per item, where the study expects at least "
    "{threshold:g}), so this submission is held for review against the study's stated rules."
)
RETURN_REASONS = (
    "Didn't finish the study",
    "Your work in the study's web tool was given to someone else after {minutes:g} minutes without "
    "activity, so the study cannot be completed any more. Please return the study: it will not be "
    "rejected, and this does not count against you.",
)
"""What a participant crowdpref released for inactivity is asked (``request_return_reasons``;
Prolific builds its message around them)."""
RETURN_REASON_DROPPED = (
    "The researchers gave your work in the study's web tool back, so the study cannot be completed any "
    "more. Please return the study: it will not be rejected, and this does not count against you."
)
"""... and one the operator dropped (:func:`return_reasons`)."""
NO_DATA_RULE = "the study's instruction: the work is done in the study's web tool (none was claimed there)"


@dataclass(frozen=True)
class ReviewDecision:
    """What to do with a submission: ``approve``, ``review`` (a person decides; ``category``,
    ``message`` and ``rule`` a proposed rejection, if any), ``reject`` (automatically, with
    ``category``/``message``/``rule``; only with ``prolific.auto_reject`` and failed checks) or
    ``return`` (crowdpref released their work itself: they are asked to return the study, never
    rejected; ``message`` is what they are asked). A proposed or automatic rejection always
    cites ``rule``: the config rule or study instruction it relies on."""

    action: str
    reason: str
    category: str | None = None
    message: str | None = None
    rule: str | None = None


def released_by_crowdpref(participant: Any) -> bool:
    """Whether crowdpref itself gave the participant's work back (no activity for
    ``inactive_after_minutes``, or dropped by the operator), as opposed to a Prolific status
    (returned, timed out, rejected: the release reason ends "on Prolific")."""
    from crowdpref.store import RELEASED, RELEASING

    if participant is None or participant.status not in (RELEASED, RELEASING):
        return False
    if getattr(participant, "withdrawn_at", None) is not None:  # a withdrawal is not our release
        return False
    return "on Prolific" not in str(getattr(participant, "release_reason", None) or "")


def return_reasons(participant: Any, minutes: float) -> list[str]:
    """The ``request_return_reasons`` for a participant crowdpref released: the inactivity text
    (:data:`RETURN_REASONS`) when the release was for inactivity, else the operator's drop's."""
    inactive = str(getattr(participant, "release_reason", None) or "").startswith("no activity")
    return [RETURN_REASONS[0], RETURN_REASONS[1].format(minutes=minutes) if inactive else RETURN_REASON_DROPPED]


def _checks_rule(config: StudyConfig, key: str) -> str:
    checks = (config.study1 if key == "study1" else config.study2).checks
    need = "all" if checks.min_passed is None else f"{checks.min_passed} of {checks.count}"
    return f"{key}.checks: pass {need} attention checks, as the instructions say"


def review_decision(participant: Any | None, config: StudyConfig, key: str, auto_approve: bool) -> ReviewDecision:
    """The decision for one submission from what the store knows of its participant. Only
    VERIFIED work is ever approved: the participant's status is complete (not released,
    withdrawn or any other), every item submitted, the quality checks passed under the
    config's rule (a batch with checks not graded yet waits), the work not excluded, and not
    flagged too fast. Reporting the completion code proves nothing (it can be learned).

    Proposed rejections are rule violations only, each citing its rule: no work claimed through
    the portal (the code without any work) -> ``NO_DATA``; failed checks -> ``FAILED_CHECK``
    (rejected at once only with ``prolific.auto_reject`` and finished work); too fast ->
    ``TOO_QUICKLY`` (never automatic). Work crowdpref released itself (:func:`released_by_crowdpref`:
    inactivity, the operator's drop) -> ``return``: they are asked to return the study, never
    rejected. Unfinished work of someone still active, a withdrawal, work released after a
    Prolific status or excluded, or another status -> review with no proposal. Proposed
    messages meet Prolific's rule (at least 100 characters)."""
    from crowdpref.checks import is_check
    from crowdpref.store import COMPLETE, FAILED, PASSED, RELEASED
    from crowdpref.work_quality import time_on_task

    if participant is None:
        return ReviewDecision("review", "no work claimed through the portal (the code without any work)", "NO_DATA",
                              NO_WORK_MESSAGE, NO_DATA_RULE)
    if getattr(participant, "withdrawn_at", None) is not None:  # their status stays as it was
        return ReviewDecision("review", "withdrew from the study: a person decides (never approved or rejected "
                                        "automatically)")
    if released_by_crowdpref(participant):  # our own release: Prolific's rules allow no rejection for it
        minutes = (config.study1 if key == "study1" else config.study2).inactive_after_minutes
        return ReviewDecision("return", f"work released by crowdpref ({participant.release_reason or 'released'}): "
                                        "asked to return the study, never rejected",
                              message=return_reasons(participant, minutes)[1])
    finished = participant.status == COMPLETE
    if participant.check_verdict == FAILED and (finished or participant.status == RELEASED):
        checks_total = max(participant.checks_answered, sum(is_check(a.item_id) for a in participant.assignments))
        message = FAILED_CHECK_MESSAGE.format(total=checks_total, what=CHECK_KINDS[key],
                                              failed=participant.checks_answered - participant.checks_passed)
        action = "reject" if config.prolific.auto_reject and finished else "review"
        return ReviewDecision(action, "failed the quality checks", "FAILED_CHECK", message, _checks_rule(config, key))
    if not finished:
        total, done = len(participant.assignments), len(participant.submitted)
        if participant.status == RELEASED:
            return ReviewDecision("review", f"work released after a Prolific status ({done} of {total} items "
                                            "submitted): a person decides")
        return ReviewDecision("review", f"not finished ({participant.status}, {done} of {total} items submitted): "
                                        "a person decides (no rejection proposed)")
    if participant.excluded_at is not None:
        return ReviewDecision("review", "work excluded from the count: a person decides")
    has_checks = any(is_check(a.item_id) for a in participant.assignments)
    if has_checks and participant.check_verdict != PASSED:
        return ReviewDecision("review", "quality checks not graded yet (the next sync decides)")
    threshold = (config.study1 if key == "study1" else config.study2).too_fast_seconds
    pace = time_on_task([participant], threshold, is_check).iloc[0]
    if pace["too_fast"]:
        median = float(pace["median_seconds_per_item"])
        return ReviewDecision("review", f"too fast ({median:.0f} s per item, below {threshold:g} s)",
                              "TOO_QUICKLY", TOO_QUICK_MESSAGE.format(median=median, threshold=threshold),
                              f"{key}.too_fast_seconds: at least {threshold:g} s per item (median)")
    if auto_approve:
        return ReviewDecision("approve", "complete")
    return ReviewDecision("review", "complete: approve")


def holding(submissions: list[Any]) -> list[Any]:
    """The submissions that hold a place: not RETURNED, TIMED-OUT or REJECTED (they gave it back)
    nor SCREENED OUT (paid the screen-out reward; its place is free again). Pure."""
    return [s for s in submissions if s.status not in FREEING + ("SCREENED OUT",)]


def _started_s_ago(started_at: str | None, now: float) -> float | None:
    """Seconds since a submission's ``started_at`` (ISO 8601, Z or an offset); None when it is
    missing or not a time."""
    from datetime import UTC, datetime

    if not started_at:
        return None
    try:
        when = datetime.fromisoformat(str(started_at))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return now - when.timestamp()


def places_state(collection: Any, config: StudyConfig, study: Any, submissions: list[Any], unclaimed: int) -> Any:
    """What the pace decides from (:class:`crowdpref.launch_pacing.PlacesNow`), read now from
    Prolific's study and submissions and the store - never from a counter kept in memory: the
    places needed are the people holding a place who claimed work, plus those who submitted on
    Prolific without ever claiming any (their place is used up), plus one person per
    ``per_participant`` slots nobody holds (``unclaimed``; at least the config's first places
    while work waits); someone still ACTIVE who never came is not counted (a place is paid for:
    better one raise late than one too many); ``arriving``: people who took a place in the last
    :data:`~crowdpref.launch_pacing.ARRIVING_FOR_S` s and are not in the portal yet (neither
    claimed nor began the onboarding), and people the portal admitted whose work is not in Argilla
    yet (claimed, records not logged: the server is still preparing them - a step opens as the
    last one's people reach their work, not merely the portal); the time since the last raise
    (or the publish) from the store's event log."""
    from crowdpref.launch_pacing import (
        ARRIVING_FOR_S,
        PUBLISH_EVENT,
        RAISE_EVENT,
        PlacesNow,
    )

    store, cid, key = collection.store, collection.info.id, collection.spec.key
    part = config.prolific.study1 if key == "study1" else config.prolific.study2
    batches = default_places(collection)
    holders = holding(submissions)
    claimed = store.key_hashes(cid)
    preparing = store.preparing(cid)
    seen = claimed | {o.key_hash for o in store.onboarding_records(cid)}
    now = store.clock()
    holders_with_work, arriving, spent = 0, 0, 0
    for submission in holders:
        person = store.key_hash(submission.participant_id.lower())  # as the portal hashes the entry's id
        if person in claimed:
            holders_with_work += 1
            arriving += person in preparing  # admitted, their workspace still being prepared: not in yet
        elif person not in seen:
            if str(submission.status).upper() != "ACTIVE":  # submitted without any work: the place is used up
                spent += 1
                continue
            ago = _started_s_ago(submission.started_at, now)
            arriving += ago is not None and ago < ARRIVING_FOR_S
    needed = study.total_available_places
    if unclaimed > 0:
        people = math.ceil(unclaimed / max(1, collection.info.per_participant))
        needed = max(holders_with_work + spent + people, part.initial_places(batches))
    raises = store.events(cid, kinds=[RAISE_EVENT, PUBLISH_EVENT])
    since = now - float(raises[-1]["at"]) if raises else None
    return PlacesNow(needed=needed, cap=part.places_cap(batches), open=study.total_available_places,
                     taken=len(holders), arriving=arriving, since_last_raise_s=since)


def raise_places(collection: Any, config: StudyConfig, client: Any, study: Any, submissions: list[Any],
                 pace: Any = None) -> Any:
    """Apply the pace (:func:`crowdpref.launch_pacing.places_now`) to the collection's Prolific
    study, read just now (``study``, ``submissions``): raise its places through the API when
    the decision says so, record the raise (``places_raised`` event, the store's places) and
    keep the decision for ``crowdpref progress`` (store meta). None, nothing sent, when nothing
    may be raised: the work is complete, or the study's status forbids it
    (:func:`~crowdpref.launch_pacing.may_raise`). ``pace`` None: all at once."""
    import json

    from crowdpref.launch_pacing import (
        PACING_META,
        RAISE_EVENT,
        UNPACED,
        may_raise,
        places_now,
    )

    store, cid = collection.store, collection.info.id
    pace = pace or UNPACED
    taken = len(holding(submissions))
    meta = PACING_META.format(cid=cid)
    progress = collection.progress()
    if progress.complete:
        if store.get_meta(meta):
            store.set_meta(meta, "")
        return None
    if not may_raise(study.status, study.total_available_places, taken):
        stopped = " with places open: a person stopped it, and crowdpref does not reopen it (raise its places " \
                  "on Prolific to)" if study.status == "COMPLETED" else ""
        store.set_meta(meta, json.dumps({"status": study.status, "open": study.total_available_places,
                                         "taken": taken, "pace": pace.describe(), "at": store.clock(),
                                         "next": f"none while the study is {study.status.lower()}{stopped}"}))
        return None
    now = places_state(collection, config, study, submissions, progress.unclaimed)
    decision = places_now(now, pace)
    state = study.status.lower()
    if decision.raise_to is not None:
        raised = client.increase_places(study.id, decision.total)
        state = raised.status.lower() or state
        store.save_platform_study(cid, "prolific", study.id, state, places=decision.total)
        store.log_event(cid, RAISE_EVENT, places=decision.total, before=decision.open, in_flight=decision.in_flight,
                        needed=decision.needed, paced=pace.paced, status=study.status)
    store.set_meta(meta, json.dumps({
        "status": state.upper(), "open": decision.total, "taken": now.taken, "arriving": now.arriving,
        "needed": decision.needed, "cap": decision.cap, "target": decision.target, "in_flight": decision.in_flight,
        "pace": pace.describe(), "reason": decision.reason, "next": decision.next_step, "at": store.clock()}))
    return decision


# --- screen-outs and return requests ------------------------------------------------------------------------
SCREEN_OUT_SENT, SCREEN_OUT_PAID = "screen_out_sent", "screen_out_paid"
RETURN_REQUESTED = "return_requested"


def people_with(store: Any, cid: int, kind: str) -> set[str]:
    """The key hashes (``person`` in the detail) of the collection's events of ``kind``
    (e.g. :data:`SCREEN_OUT_PAID`: whose screen-out was paid)."""
    import json

    return {str(json.loads(e["detail"] or "{}").get("person")) for e in store.events(cid, kinds=[kind])}


def pay_screen_out(store: Any, cid: int, client: Any, submission_id: str, person: str, via: str) -> None:
    """Give the submission of ``person`` (a key hash the store recorded as screened out by the
    onboarding quiz) the collection's screen-out code through the API (``COMPLETE`` with the
    researcher-actor code: Prolific screens it out and pays the fixed reward). Recorded before it
    is sent (``screen_out_sent``) and after (``screen_out_paid``); the transition is idempotent,
    so a repeat (the portal's and the sync's at once) pays nothing twice. Raises the client's
    :class:`~crowdpref.prolific.ProlificError` (the sync repeats it later)."""
    store.log_event(cid, SCREEN_OUT_SENT, person=person, via=via)
    client.complete_submission(submission_id, store.screen_out_code(cid))
    store.log_event(cid, SCREEN_OUT_PAID, person=person, via=via)


def ask_to_return(store: Any, cid: int, client: Any, submission_id: str, participant: Any, minutes: float,
                  asked: set[int] | None = None) -> str:
    """Ask a participant whose work crowdpref released to return the study (Prolific's
    request-return, with :func:`return_reasons`). Recorded as a ``return_requested`` event
    BEFORE it is sent, and never sent twice: with one recorded, nothing is sent. Returns
    ``sent``, ``sent before``, ``refused`` (Prolific said no: nothing reached them) or
    ``unconfirmed`` (no reply: it may have been sent). ``asked``: the participant ids already
    asked (read from the events when not given; updated here)."""
    from crowdpref.prolific import ProlificAmbiguous, ProlificError

    if asked is None:
        asked = {e["participant_id"] for e in store.events(cid, kinds=[RETURN_REQUESTED])}
    if participant.id in asked:
        return "sent before"
    store.log_event(cid, RETURN_REQUESTED, participant.id, reason=participant.release_reason or "released")
    asked.add(participant.id)
    try:
        client.request_return(submission_id, return_reasons(participant, minutes))
    except ProlificAmbiguous:
        store.log_event(cid, "return_request_unconfirmed", participant.id)
        return "unconfirmed"
    except ProlificError as exc:
        store.log_event(cid, "return_request_failed", participant.id, status=exc.status)
        return "refused"
    return "sent"


def sync_prolific(collection: Any, config: StudyConfig, client: Any, *, auto_approve: bool | None = None,
                  private_dir: Path | str | None = None, pace: Any = None) -> SyncReport:
    """Reconcile the collection's Prolific submissions with the store: release the work of
    RETURNED / TIMED-OUT / REJECTED participants still active here (the backstop for lost
    webhooks); approve AWAITING REVIEW submissions whose work crowdpref verified
    (:func:`review_decision`; ``auto_approve``, default ``prolific.auto_approve``; one bulk call,
    recorded as sent before it is sent and never repeated: a lost reply is read back by the next
    sync) or list them for review; raise places when work waits that nobody can claim, up to the
    budget cap (``prolific.studyN.max_places``; the report says when it stops there), at the
    ``pace`` (:class:`crowdpref.launch_pacing.Pace`: steps as the people who took the last ones
    arrive; None: all at once) - :func:`raise_places`.

    Screen-outs: a submission still RESERVED / ACTIVE whose person the store recorded as screened
    out by the onboarding quiz gets the researcher-actor screen-out code (:func:`pay_screen_out`:
    the backstop for the portal's payment); only SCREENED OUT submissions the quiz screened out
    count as screened out, any other is listed for review with the reason and never counted.
    Work crowdpref released itself (:func:`released_by_crowdpref`) under an ACTIVE or AWAITING
    REVIEW submission: the participant is asked to return the study (:func:`ask_to_return`, once)
    and never proposed for rejection. Every decision is an event in the store. The report names
    participants by username only; the submission ids for review go to
    ``private_dir/prolific-review-<key>.json`` (owner-only, rewritten on every sync)."""
    from crowdpref.prolific import ProlificAmbiguous, ProlificError
    from crowdpref.store import ACTIVE
    from crowdpref.store.onboarding import SCREENED_OUT

    store, cid, key = collection.store, collection.info.id, collection.spec.key
    auto = config.prolific.auto_approve if auto_approve is None else auto_approve
    report = SyncReport(key=key, review=[])
    platform = store.platform_study(cid)
    if platform is None:
        return report
    study = client.get_study(platform.external_id)
    submissions = client.list_submissions(platform.external_id)
    reviewed = {e["participant_id"] for e in store.events(cid, kinds=["review"])}
    # approvals sent before (their outcome read back here, never sent blindly again) and confirmed
    sent = {e["participant_id"] for e in store.events(cid, kinds=["approve_sent"])}
    confirmed = {e["participant_id"] for e in store.events(cid, kinds=["approved"])}
    to_approve: list[tuple[str, Any]] = []
    private: list[dict[str, str]] = []
    # who crowdpref's quiz screened out (by key hash), whose screen-out was paid, who was listed
    screened = {o.key_hash for o in store.onboarding_records(cid) if o.status == SCREENED_OUT}
    paid, unrecorded = people_with(store, cid, SCREEN_OUT_PAID), people_with(store, cid, "screen_out_unrecorded")
    minutes = (config.study1 if key == "study1" else config.study2).inactive_after_minutes
    asked_to_return = {e["participant_id"] for e in store.events(cid, kinds=[RETURN_REQUESTED])}

    def listed(who: str, submission_id: str, reason: str, **extra: str) -> None:
        report.review.append((who, reason))  # type: ignore[union-attr]
        private.append({"username": who, "submission_id": submission_id, "reason": reason, **extra})

    for submission in submissions:
        status = submission.status
        person = store.key_hash(submission.participant_id.lower())  # as the portal hashes the entry's id
        if status == "SCREENED OUT":
            if person in screened:  # screened out by the quiz: counted (and its payment confirmed)
                report.screened_out += 1
                if person not in paid:
                    store.log_event(cid, SCREEN_OUT_PAID, person=person, via="read back")
                    paid.add(person)
            else:  # nobody here screened them out: a person looks, it is not counted
                listed("(no screen-out recorded)", submission.id, "SCREENED OUT on Prolific, but crowdpref's quiz "
                       "never screened this person out: not counted as screened out; check the submission on Prolific")
                report.screen_outs_unrecorded += 1
                if person not in unrecorded:
                    store.log_event(cid, "screen_out_unrecorded", person=person)
                    unrecorded.add(person)
            continue
        if status in ("ACTIVE", "RESERVED") and person in screened:
            # the quiz screened them out and Prolific still has them working: the portal's
            # payment did not land (or never ran): give the screen-out code now (idempotent)
            try:
                pay_screen_out(store, cid, client, submission.id, person, via="sync")
            except ProlificError as exc:
                if exc.transient:
                    raise  # idempotent: the task's retry may repeat it
                listed("(screened out by the quiz)", submission.id, f"screened out by the quiz, but Prolific refused "
                       f"the screen-out payment ({exc.status}): pay it on Prolific")
            else:
                report.screened_out_now += 1
                report.screened_out += 1
            continue
        report.active += status in ("ACTIVE", "RESERVED")
        report.returned += status == "RETURNED"
        report.timed_out += status == "TIMED-OUT"
        report.rejected += status == "REJECTED"
        report.approved += status == "APPROVED"
        participant = store.participant_by_key(cid, submission.participant_id)
        if status == "APPROVED" and participant is not None and participant.id in sent - confirmed:
            # an approval whose reply was lost (or a run killed after sending): done - counted
            store.log_event(cid, "approved", participant.id, read_back=True)
            confirmed.add(participant.id)
        if status in FREEING:
            if participant is not None and participant.status == ACTIVE:
                if collection.release(participant, f"{status} on Prolific (sync)"):
                    report.released_now += 1
                    store.log_event(cid, "released_by_sync", participant.id, status=status)
            elif participant is not None and participant.withdrawn_at is None:  # finished, then returned /
                from crowdpref.withdrawals import withdraw_on_platform  # rejected / timed out: they withdrew

                withdrawal = withdraw_on_platform(collection, participant, status, via=" (sync)")
                report.withdrawn_now += bool(withdrawal is not None and withdrawal.now)
            continue
        asked = None
        if status in ("ACTIVE", "AWAITING REVIEW") and released_by_crowdpref(participant):
            # crowdpref released them while Prolific still counts them: asked to return, never rejected
            asked = ask_to_return(store, cid, client, submission.id, participant, minutes, asked_to_return)
            report.returns_requested_now += asked == "sent"
        if status != "AWAITING REVIEW":
            continue
        report.awaiting_review += 1
        decision = review_decision(participant, config, key, auto)
        if decision.action == "return":
            listed(participant.username, submission.id, f"{decision.reason} (return request: {asked})")
            continue
        if decision.action == "approve":
            if participant.id not in sent:
                to_approve.append((submission.id, participant))
                continue
            # sent before and still awaiting review (a lost reply, or Prolific's bulk approval
            # not applied yet): never re-sent in bulk; one idempotent approve of the status just
            # read (the client reads the submission back when Prolific refuses it)
            try:
                client.approve_submission(submission.id)
            except ProlificError as exc:
                if exc.transient:
                    raise  # idempotent: the task's retry may repeat it
                # (the error's text names the submission: only its status goes in the report)
                decision = ReviewDecision("review", f"verified, but Prolific refused the approval ({exc.status}): "
                                                    "a person decides")
            else:
                store.log_event(cid, "approved", participant.id, read_back=True)
                report.approved_now += 1
                report.approved += 1
                report.awaiting_review -= 1
                continue
        if decision.action == "reject":
            client.reject_submission(submission.id, str(decision.message), str(decision.category))
            store.log_event(cid, "rejected", participant.id, reason=decision.reason, category=decision.category,
                            rule=decision.rule)
            report.rejected_now += 1
            report.rejected += 1
            report.awaiting_review -= 1
            continue
        username = participant.username if participant is not None else "(unknown)"
        shown = decision.reason + (f" (proposed rejection: {decision.category}; rule: {decision.rule})"
                                   if decision.category else "")
        report.review.append((username, shown))  # type: ignore[union-attr]
        entry = {"username": username, "submission_id": submission.id, "reason": decision.reason}
        if decision.category:
            entry.update(proposed_category=decision.category, proposed_message=str(decision.message),
                         rule=str(decision.rule))
        private.append(entry)
        if participant is not None and participant.id not in reviewed:
            store.log_event(cid, "review", participant.id, reason=decision.reason,
                            **({"proposed_category": decision.category} if decision.category else {}))
            reviewed.add(participant.id)
    if to_approve:
        # money: recorded as sent BEFORE sending, and never repeated (the client does not retry
        # it, and its ProlificAmbiguous is not transient, so no task retry repeats it either);
        # the next sync reads the statuses back
        for _, participant in to_approve:
            store.log_event(cid, "approve_sent", participant.id)
        try:
            client.bulk_approve([sid for sid, _ in to_approve])
        except ProlificAmbiguous:
            report.approvals_unconfirmed = len(to_approve)
            store.log_event(cid, "approve_unconfirmed", count=len(to_approve))
            log.warning("Prolific: the bulk approval of %d submission(s) got no reply; not repeated - the next "
                        "sync reads their status back", len(to_approve))
        else:
            for _, participant in to_approve:
                store.log_event(cid, "approved", participant.id)
            report.approved_now += len(to_approve)
            report.approved += len(to_approve)
            report.awaiting_review -= len(to_approve)
    # places: work nobody holds needs someone to take it (a finished study takes nobody), at the
    # launch's pace, up to the budget cap (prolific.studyN.max_places)
    report.places = study.total_available_places
    note = ""
    decision = raise_places(collection, config, client, study, submissions, pace)
    if decision is not None:
        report.places = max(report.places, decision.total)
        if decision.raise_to is not None:
            report.places_raised_to = decision.total
        if decision.short:
            report.places_capped_at, report.places_short = decision.cap, decision.short
            note = cap_note(key, decision.cap, decision.short)
            log.warning("%s: %s", key, note)
    if note or store.get_meta(CAP_META.format(cid=cid)):
        store.set_meta(CAP_META.format(cid=cid), note)  # what the collection's monitoring shows
    if private_dir is not None:
        from crowdpref.runfolder import write_json

        write_json(private, Path(private_dir) / f"prolific-review-{key}.json", private=True)
    return report


# --- the state a collection run shows ------------------------------------------------------------------
@dataclass(frozen=True)
class ProlificState:
    """A collection's Prolific study as a monitoring pass sees it: its places (as last recorded)
    and one read of the submission counts; ``error`` when Prolific could not be read."""

    places: int | None
    active: int = 0
    returned: int = 0
    timed_out: int = 0
    awaiting_review: int = 0
    approved: int = 0
    error: str | None = None
    capped: str | None = None  # the last sync's budget-cap note (see :func:`cap_note`)

    def describe(self) -> str:
        if self.error is not None:
            return f"Prolific: not read ({self.error}); the collection goes on, the next run reads it again"
        return (f"Prolific: {self.places if self.places is not None else '?'} places, {self.active} active, "
                f"{self.returned} returned, {self.timed_out} timed out, {self.awaiting_review} awaiting review, "
                f"{self.approved} approved" + (f"; {self.capped}" if self.capped else ""))

    def row(self) -> dict[str, Any]:
        return {"places": self.places, "active": self.active, "returned": self.returned, "timed out": self.timed_out,
                "awaiting review": self.awaiting_review, "approved": self.approved, "error": self.error or ""}


def prolific_state(config: StudyConfig, settings: Any, store: Any, cid: int, *,
                   client: Any = None) -> ProlificState | None:
    """The collection's Prolific state for monitoring: None (nothing read, no client made) when
    the study does not recruit on Prolific or the collection has no Prolific study yet. One API
    call (the submission counts). Never raises: a failure comes back as ``error`` (monitoring
    must go on when Prolific is down or the token is wrong)."""
    if not recruits_on_prolific(config):
        return None
    platform = store.platform_study(cid)
    if platform is None or platform.platform != "prolific":
        return None
    try:
        if client is None:
            with prolific_client(config, settings) as own:
                counts = own.submission_counts(platform.external_id)
        else:
            counts = client.submission_counts(platform.external_id)
    except Exception as exc:  # noqa: BLE001 - reported in the artifact, never fails the monitoring
        return ProlificState(platform.places, error=first_line(exc, with_type=True))
    return ProlificState(platform.places, active=counts.get("ACTIVE", 0) + counts.get("RESERVED", 0),
                         returned=counts.get("RETURNED", 0), timed_out=counts.get("TIMED-OUT", 0),
                         awaiting_review=counts.get("AWAITING REVIEW", 0), approved=counts.get("APPROVED", 0),
                         capped=store.get_meta(CAP_META.format(cid=cid)) or None)


def auto_key(run: Any) -> str:
    """Which collection ``recruit`` with ``key: auto`` publishes: study 2 once its pairs exist,
    study 1 while its answers are not all in; in between (answers exported, pairs not built
    yet) there is nothing to recruit for: a one-line ConfigError says what to run."""
    from crowdpref.errors import ConfigError

    if run.pairs.exists():
        return "study2"
    if not run.responses.exists():
        return "study1"
    raise ConfigError(f"{run.path.name}: study 1 is complete and study 2's pairs are not built yet: run the "
                      "collect-ratings flow (it builds them), then recruit study 2 (key: study2)")
