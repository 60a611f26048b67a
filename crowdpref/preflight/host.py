"""Pre-flight checks of this server and the study's config: the Hub token can write to the target
repository, the last backup is recent and a restore of it is readable, the disk has room for the
study, the clock agrees with the outside within the webhooks' tolerance, and the config passes
``crowdpref validate`` against this server's measured capacity."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crowdpref.errors import first_line
from crowdpref.preflight.report import Check, fail, ok, skip, warn

BACKUP_MAX_AGE_S = 26 * 3600.0  # a daily backup, with two hours of slack
CLOCK_WARN_S = 5.0
CLOCK_FAIL_S = 30.0  # a tenth of the webhooks' tolerance (300 s: crowdpref.prolific.verify_webhook)
CAPACITY_FILE = "capacity.json"
"""``<state>/capacity.json``: the arrivals per second this server takes at p95 < 1 s, written by
a measurement of the stack (the dress rehearsal); the paced launch reads it."""
DEFAULT_CAPACITY_PER_S = 1.0
"""Assumed without a measurement: 100 arrivals in 60 s gave p95 2.08 s on a 2-core machine
(docs/performance.md), so about one arrival a second is what such a server takes."""
MB_PER_PARTICIPANT = 0.5  # store rows, Argilla's records and the run folder's files, per participant
BASE_MB = 500.0  # the models the screening loads, a backup's staging copy, logs


# --- the Hub ----------------------------------------------------------------------------------------------
def hub(repo_id: str | None, token_set: bool, whoami: Callable[[], Mapping[str, Any]] | None) -> Check:
    """The Hub token can write to ``repo_id``: a write token of its owner (the user or one of
    their organisations). ``whoami``: the Hub's answer for the token (``HfApi.whoami``)."""
    name = "Hub token can write to the repository"
    if not repo_id:
        return skip(name, "no Hub repository configured (publish.repo_id / CROWDPREF_HF_REPO_ID): nothing is pushed")
    if not token_set or whoami is None:
        return fail(name, f"no Hub token to push to {repo_id}",
                    "export HF_TOKEN=<a write token> (huggingface.co: Settings > Access Tokens)")
    try:
        me = whoami()
    except Exception as exc:  # noqa: BLE001 - a 401 or the Hub unreachable: the finding
        return fail(name, f"the Hub refused or did not answer ({first_line(exc, 120)})",
                    "create a write token on huggingface.co and export HF_TOKEN=...")
    access = (me.get("auth") or {}).get("accessToken") or {}
    role = str(access.get("role") or "")
    owners = {str(me.get("name") or "")} | {str(o.get("name")) for o in me.get("orgs") or [] if isinstance(o, Mapping)}
    owner = repo_id.split("/", 1)[0]
    if role == "read":
        return fail(name, f"the token of {me.get('name')} is read-only: it cannot push to {repo_id}",
                    "create a token with the write role and export HF_TOKEN=...")
    if owner not in owners:
        return fail(name, f"{repo_id} belongs to {owner}, and the token's user {me.get('name')} is not it nor in "
                    "that organisation", f"use a token of {owner} (or a member with write access), or change the repo id")
    if role == "fineGrained":
        return warn(name, f"a fine-grained token of {me.get('name')}: its scopes cannot be read here",
                    f"make sure it may write to {repo_id} (repo.write), or use a write token")
    return ok(name, f"{role or 'a'} token of {me.get('name')}, owner {owner}")


# --- backups --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BackupState:
    """This state folder's newest backup snapshot (None: none), and whether its contents read
    back (the description and the databases it names); ``problem`` says why not."""

    latest_at: float | None
    snapshot: str = ""
    readable: bool = False
    problem: str | None = None


def backups(state: BackupState | None, now: float, why_unread: str | None = None,
            max_age_s: float = BACKUP_MAX_AGE_S) -> Check:
    name = "backup recent and readable"
    if state is None:
        return fail(name, f"the backup repository cannot be read ({why_unread or 'unknown'})",
                    "take one with `crowdpref backup` (check CROWDPREF_BACKUP_REPOSITORY and its password file)")
    if state.latest_at is None:
        return fail(name, "no backup of this state folder yet",
                    "take one with `crowdpref backup` and schedule it (the backup deployment or a cron job)")
    age = now - state.latest_at
    if age > max_age_s:
        return fail(name, f"the last backup ({state.snapshot}) is {age / 3600:.0f} h old (more than "
                    f"{max_age_s / 3600:.0f} h)", "take one now with `crowdpref backup`, and check that the "
                    "scheduled backup runs (its flow runs in the Prefect UI)")
    if not state.readable:
        return fail(name, f"the last backup ({state.snapshot}) does not read back: {state.problem}",
                    "take a new one with `crowdpref backup` and check the repository with `restic check`")
    return ok(name, f"{state.snapshot}, {age / 3600:.1f} h old, reads back")


# --- disk, clock ------------------------------------------------------------------------------------------
def expected_mb(participants: int) -> float:
    return BASE_MB + MB_PER_PARTICIPANT * participants


def disk(path: Path, free_bytes: int, participants: int) -> Check:
    """Free space where the state folder is, against the study's expected size (see
    :data:`MB_PER_PARTICIPANT`, :data:`BASE_MB`), twice over for backups' staging copies."""
    name = "disk space for the study"
    need = expected_mb(participants) * 2
    have = free_bytes / 1e6
    if have < need:
        return fail(name, f"{have:,.0f} MB free at {path}, the study needs about {need:,.0f} MB",
                    "free space (old run folders, logs, Prefect results) or move CROWDPREF_HOME to a larger disk")
    return ok(name, f"{have:,.0f} MB free at {path}, about {need:,.0f} MB needed")


def clock(offset_s: float | None, against: str) -> Check:
    """This machine's clock against ``against``'s (``offset_s``: ours minus theirs), within the
    webhooks' timestamp tolerance with room to spare."""
    name = "clock in time"
    if offset_s is None:
        return warn(name, f"no clock to compare with ({against})", "make sure NTP runs: `timedatectl` says "
                    "'System clock synchronized: yes'")
    seen = f"{offset_s:+.1f} s against {against}"
    if abs(offset_s) > CLOCK_FAIL_S:
        return fail(name, f"{seen}: signed webhooks are refused beyond 300 s, and deliveries take time",
                    "synchronise the clock (`timedatectl set-ntp true`, or chrony/systemd-timesyncd)")
    if abs(offset_s) > CLOCK_WARN_S:
        return warn(name, seen, "synchronise the clock with NTP (`timedatectl set-ntp true`)")
    return ok(name, seen)


def http_date_offset(date_header: str | None, sent_at: float, received_at: float) -> float | None:
    """Our clock minus the server's, from its ``Date`` header (whole seconds) and the midpoint of
    the request; None without a usable header."""
    from email.utils import parsedate_to_datetime

    if not date_header:
        return None
    try:
        theirs = parsedate_to_datetime(date_header).timestamp()
    except (TypeError, ValueError):
        return None
    return (sent_at + received_at) / 2 - theirs


# --- the study config -------------------------------------------------------------------------------------
def read_capacity(state_dir: Path) -> Mapping[str, Any] | None:
    path = Path(state_dir) / CAPACITY_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        float(data["arrivals_per_s"])
        return data
    except (OSError, ValueError, KeyError, TypeError):
        return None


def config_valid(study_path: Path, load: Callable[[Path], Any], capacity: Mapping[str, Any] | None,
                 arrival_rates: Sequence[tuple[str, float]] | Callable[[Any], Sequence[tuple[str, float]]] = ()
                 ) -> tuple[Check, Any]:
    """The config passes ``crowdpref validate`` (``load`` is :func:`crowdpref.config.load_study`)
    and the arrivals it plans (``arrival_rates``: (what, per second), or a function of the loaded
    config giving them - the paced launch's rate per study) stay within the measured capacity.
    Returns the check and the config (None when it is invalid)."""
    name = "study config valid for this server"
    try:
        config = load(study_path)
    except Exception as exc:  # noqa: BLE001 - ConfigError: the one line of `validate`
        return fail(name, first_line(exc, 300), f"fix {study_path} and check it with `crowdpref validate`"), None
    if callable(arrival_rates):
        arrival_rates = arrival_rates(config)
    if capacity is None:
        return warn(name, f"{study_path} is valid; no capacity measured on this server, the default "
                    f"{DEFAULT_CAPACITY_PER_S:g} arrival/s (p95 < 1 s) is assumed",
                    "measure it with a dress rehearsal on this server (it writes <state>/capacity.json)"), config
    per_s = float(capacity["arrivals_per_s"])
    when = capacity.get("measured_at")
    on = f" {time.strftime('%Y-%m-%d', time.gmtime(float(when)))}" if when else ""
    if per_s <= 0:  # the rehearsal's slowest wave already missed p95 < 1 s: no rate below it was tried
        return warn(name, f"{study_path} is valid; but the capacity measured{on} is below the slowest rate the "
                    "rehearsal tried: no arrival rate kept the first item under 1 s at p95",
                    "give the server more CPU or warm accounts (pool_size), pace the launch slowly, and rehearse "
                    "again"), config
    over = [f"{what} {rate:g}/s" for what, rate in arrival_rates if rate > per_s]
    if over:
        return fail(name, f"planned arrivals above the measured capacity {per_s:g}/s: {', '.join(over)}",
                    "pace the launch below the capacity (fewer places at a time)"), config
    return ok(name, f"{study_path} is valid; capacity {per_s:g} arrival/s measured{on}"), config
