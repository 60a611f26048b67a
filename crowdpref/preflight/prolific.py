"""Pre-flight checks of Prolific, for a study that recruits there: the token is valid, the
workspace exists, the webhook secret and subscription are what crowdpref expects, the study's
places, reward and completion codes on Prolific match the config and the store, and the
workspace's balance covers what ``crowdpref validate`` says the study costs.

Each check takes a :class:`~crowdpref.prolific.ProlificClient` (the tests give one pointed at
the contract-checked fake, crowdpref/simulation/prolific_server.py). The fake Prolific of a
simulation has no workspaces, subscription listing or balance: those lines say so (SKIP)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from crowdpref.errors import first_line
from crowdpref.preflight.report import Check, fail, ok, skip, warn

TOKEN_FIX = ("create an API token in Prolific (Workspace settings > API tokens) and export PROLIFIC_TOKEN=... "
             "for the services and the worker (then `crowdpref up`)")
WEBHOOK_FIX = "run `crowdpref prolific-webhooks STUDY.yaml --force` (a new secret and subscription)"


def token(client: Any) -> Check:
    """The token is accepted (one read: the workspace's studies)."""
    from crowdpref.prolific import ProlificAuthError

    name = "Prolific token valid"
    try:
        studies = client.list_studies()
    except ProlificAuthError as exc:
        return fail(name, f"refused by Prolific ({exc.status}): the token is wrong, deleted or of another "
                    "workspace", TOKEN_FIX)
    except Exception as exc:  # noqa: BLE001 - unreachable, 5xx: the finding
        return fail(name, f"Prolific cannot be read: {first_line(exc, 160)}",
                    "check the network and CROWDPREF_PROLIFIC_API_URL, then try again")
    return ok(name, f"accepted ({len(studies)} studies visible)")


def workspace(client: Any, workspace_id: str | None, fake: bool) -> Check:
    """The configured workspace exists and the token sees it."""
    from crowdpref.prolific import ProlificAuthError, ProlificNotFound

    name = "Prolific workspace exists"
    if fake:
        return skip(name, "the fake Prolific of a simulation has no workspaces")
    if not workspace_id:
        return fail(name, "prolific_workspace_id is not set (webhooks and participant groups need it)",
                    "export CROWDPREF_PROLIFIC_WORKSPACE_ID=<id> (Prolific: workspace settings)")
    try:
        found = client._request("GET", f"workspaces/{workspace_id}/")
    except ProlificNotFound:
        return fail(name, f"workspace {workspace_id} not found",
                    "set CROWDPREF_PROLIFIC_WORKSPACE_ID to a workspace of this token's account")
    except ProlificAuthError as exc:
        return fail(name, f"workspace {workspace_id} refused ({exc.status}): the token belongs to another workspace",
                    "use a token of this workspace, or set CROWDPREF_PROLIFIC_WORKSPACE_ID to the token's workspace")
    except Exception as exc:  # noqa: BLE001
        return fail(name, f"cannot be read: {first_line(exc, 160)}", "try again; check CROWDPREF_PROLIFIC_API_URL")
    return ok(name, f"workspace {workspace_id} ({str(found.get('title') or '?')[:60]})")


def webhooks(client: Any, workspace_id: str | None, fake: bool, secret_kept: bool, subscription_id: str | None,
             expected_url: str) -> Check:
    """The webhook secret is kept in the store (the portal verifies with it) and the recorded
    subscription is on Prolific, enabled, for ``submission.status.change``, to the portal's
    ``/hooks/prolific``."""
    name = "Prolific webhook subscription"
    if not secret_kept or not subscription_id:
        return fail(name, "no webhook secret or subscription is recorded in the store: returns and time-outs "
                    "would not reach the portal", "run `crowdpref prolific-webhooks STUDY.yaml`")
    if fake:
        return ok(name, "secret and subscription recorded (the fake Prolific lists no subscriptions)")
    try:
        listed = client._request("GET", "hooks/subscriptions/", params={"workspace_id": workspace_id or ""})
    except Exception as exc:  # noqa: BLE001
        return fail(name, f"the subscriptions cannot be read: {first_line(exc, 160)}", WEBHOOK_FIX)
    rows = listed.get("results", listed) if isinstance(listed, dict) else listed
    mine = next((s for s in rows or [] if isinstance(s, Mapping) and str(s.get("id")) == subscription_id), None)
    if mine is None:
        return fail(name, "the recorded subscription is not on Prolific (deleted, or of another workspace)", WEBHOOK_FIX)
    problems = []
    if mine.get("event_type") != "submission.status.change":
        problems.append(f"event {mine.get('event_type')!r}")
    if str(mine.get("target_url") or "").rstrip("/") != expected_url.rstrip("/"):
        problems.append(f"target {mine.get('target_url')!r}, not {expected_url}")
    if mine.get("is_enabled") is False:
        problems.append("not enabled (never confirmed)")
    if problems:
        return fail(name, "the subscription does not match: " + "; ".join(problems), WEBHOOK_FIX)
    return ok(name, f"submission.status.change -> {expected_url}, enabled")


def study_terms(config: Any, on_prolific: Sequence[tuple[str, str, str]], client: Any) -> Check:
    """The collections' Prolific studies match the config and the store: reward, completion
    code, places. ``on_prolific``: (key, Prolific study id, the store's completion code) of each
    collection that has one; none yet: what will be created is the config's."""
    name = "Prolific study matches the config"
    parts = {"study1": config.prolific.study1, "study2": config.prolific.study2}
    if not on_prolific:
        return ok(name, "not created yet: it will be created from the config (rewards "
                  f"{parts['study1'].reward} / {parts['study2'].reward}, places "
                  f"{parts['study1'].places or 'one per batch'} / {parts['study2'].places or 'one per batch'})")
    problems, seen = [], []
    for key, study_id, code in on_prolific:
        try:
            study = client.get_study(study_id)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{key}: cannot be read ({first_line(exc, 120)})")
            continue
        part = parts[key]
        reward = study.raw.get("reward")
        if reward is not None and int(reward) != int(part.reward):
            problems.append(f"{key}: reward {reward} on Prolific, {part.reward} in the config")
        codes = {str(c.get("code")) for c in study.completion_codes if c.get("code_type") == "COMPLETED"}
        if code not in codes:
            problems.append(f"{key}: its completion code is not the store's (participants could not finish)")
        if part.places and study.total_available_places < part.places:
            problems.append(f"{key}: {study.total_available_places} places on Prolific, {part.places} in the config")
        seen.append(f"{key} {study.status.lower()}, {study.total_available_places} places")
    if problems:
        return fail(name, "; ".join(problems), "fix the study on Prolific (or the config) so they agree; a study "
                    "not published yet can be deleted on Prolific, and is created again from the config")
    return ok(name, "; ".join(seen))


def balance(client: Any, workspace_id: str | None, fake: bool, cost: Any) -> Check:
    """The workspace's available balance covers the study's planned cost (``validate``'s
    ``Cost on Prolific``; WARN below the most it can reach with places raised to their caps)."""
    name = "Prolific balance covers the cost"
    if fake:
        return skip(name, "the fake Prolific of a simulation has no balance (nobody is paid)")
    if not workspace_id:
        return skip(name, "no workspace id set: the balance cannot be read (see the workspace line)")
    try:
        found = client._request("GET", f"workspaces/{workspace_id}/balance/")
        available = int(found["available_balance"])
    except Exception as exc:  # noqa: BLE001 - the API may not show it: say so
        return warn(name, f"the API did not show the balance ({first_line(exc, 120)})",
                    f"check it in Prolific: it must cover {cost.planned:,.2f} (at most {cost.at_cap:,.2f})")
    currency = str(found.get("currency_code") or "")
    have = available / 100
    if have < cost.planned:
        return fail(name, f"{have:,.2f} {currency} available, the study's first places cost {cost.planned:,.2f}",
                    "top up the workspace on Prolific (Workspace > Billing), or lower the places or rewards")
    if have < cost.at_cap:
        return warn(name, f"{have:,.2f} {currency} available: covers the first places ({cost.planned:,.2f}), not "
                    f"the places caps ({cost.at_cap:,.2f})", "top up before the places are raised, or lower max_places")
    return ok(name, f"{have:,.2f} {currency} available, the study costs at most {cost.at_cap:,.2f}")

