"""The pre-flight's gate before a study is published on Prolific (where people are paid).

:func:`before_publish` runs at the one moment a collection's Prolific study goes from
UNPUBLISHED to published (:func:`crowdpref.recruitment.ensure_prolific_study`, given it by the
recruit task). It refuses, with one line naming the failed checks, while the study's last
pre-flight report (``<run>/preflight.json``) has a FAIL, is older than :data:`MAX_AGE_S`, or
does not exist. An explicit skip (``--skip-preflight``) goes ahead and records who skipped it, and
why, as an event of the collection in the store's event log.

Only the real Prolific is gated: a simulation's fake Prolific pays nobody, so the demo and the
tests that publish there are not asked for a pre-flight (:func:`required`).

Every decision - passed, skipped - is also kept in the run folder (``publish-preflight.json``,
per collection) for the dataset card, which says that a pre-flight passed and when, or that it
was skipped (the card names nobody: who skipped it is in the event log)."""

from __future__ import annotations

import getpass
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crowdpref.errors import CrowdprefError
from crowdpref.preflight.report import read_report, utc

MAX_AGE_S = 24 * 3600.0
DECISIONS_FILE = "publish-preflight.json"
PASSED_EVENT = "preflight_passed"
SKIPPED_EVENT = "preflight_skipped"


class PreflightRefused(CrowdprefError):
    """Publishing is refused until a pre-flight passes (or is skipped explicitly)."""

    exit_code = 1


@dataclass(frozen=True)
class Skip:
    """An explicit skip: who (a name given, else the OS user) and why."""

    by: str
    reason: str = ""

    @classmethod
    def of(cls, by: str | None = None, reason: str | None = None) -> Skip:
        who = (by or "").strip() or f"{_os_user()} (OS user)"
        return cls(who[:80], (reason or "").strip()[:200])


def _os_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in this environment
        return "unknown"


def required(target: Any) -> bool:
    """Whether publishing on ``target`` (a :class:`~crowdpref.recruitment.ProlificTarget`)
    needs a pre-flight: the real Prolific, not a simulation's fake one."""
    return target is not None and not getattr(target, "fake", False)


def before_publish(runs_dir: Path, study: str, key: str, log_event: Any, *, skip: Skip | None = None,
                   now: float | None = None) -> str:
    """Refuse (:class:`PreflightRefused`) or let ``study``'s collection ``key`` be published;
    ``log_event(kind, **detail)`` appends an event to the collection's log. Returns the decision
    (``passed`` or ``skipped``)."""
    now = time.time() if now is None else now
    if skip is not None:
        log_event(SKIPPED_EVENT, by=skip.by, reason=skip.reason or "(none given)")
        _record(runs_dir, study, key, {"decision": "skipped", "at": now})
        return "skipped"
    report = read_report(runs_dir, study)
    again = ("run `crowdpref preflight STUDY.yaml` on this server and fix what it says (or publish with "
             "--skip-preflight, which records who skipped it)")
    if report is None:
        raise PreflightRefused(f"{study}: not publishing {key} on Prolific: no pre-flight was run for this study: {again}")
    if report.failed:
        names = ", ".join(c.name for c in report.failed)
        raise PreflightRefused(f"{study}: not publishing {key} on Prolific: the last pre-flight ({utc(report.ran_at)}) "
                               f"has {len(report.failed)} FAIL: {names}: {again}")
    age = now - report.ran_at
    if age > MAX_AGE_S:
        raise PreflightRefused(f"{study}: not publishing {key} on Prolific: the last pre-flight ({utc(report.ran_at)}) "
                               f"is {age / 3600:.0f} h old (more than {MAX_AGE_S / 3600:.0f} h): {again}")
    log_event(PASSED_EVENT, preflight_ran_at=report.ran_at, warnings=len(report.warned))
    _record(runs_dir, study, key, {"decision": "passed", "at": now, "preflight_ran_at": report.ran_at})
    return "passed"


def _record(runs_dir: Path, study: str, key: str, decision: dict[str, Any]) -> None:
    from crowdpref.runfolder import write_json

    decisions = read_decisions(Path(runs_dir) / study)
    decisions[key] = decision
    write_json(decisions, Path(runs_dir) / study / DECISIONS_FILE)


def read_decisions(run_path: Path) -> dict[str, Any]:
    """The gate's decisions per collection key; {} when none (or the file is unreadable: the
    card then says nothing of a pre-flight)."""
    try:
        data = json.loads((Path(run_path) / DECISIONS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def card_line(decisions: dict[str, Any]) -> str | None:
    """The dataset card's sentence about the pre-flight before each publication on Prolific;
    None when nothing was published on the real Prolific."""
    parts = []
    for key, label in (("study1", "study 1"), ("study2", "study 2")):
        decision = decisions.get(key)
        if not isinstance(decision, dict):
            continue
        if decision.get("decision") == "passed" and decision.get("preflight_ran_at"):
            parts.append(f"before {label} was published on Prolific, a pre-flight of the server passed "
                         f"({utc(float(decision['preflight_ran_at']))})")
        elif decision.get("decision") == "skipped":
            parts.append(f"{label} was published on Prolific with the pre-flight skipped by the operator "
                         f"({utc(float(decision.get('at') or 0))})")
    if not parts:
        return None
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def publish_guard(config: Any, settings: Any, collection: Any, skip: Skip | None = None) -> Any:
    """What :func:`crowdpref.recruitment.ensure_prolific_study` calls just before it publishes
    ``collection``'s Prolific study: :func:`before_publish` for the real Prolific, None (no gate)
    for a simulation's fake one."""
    from crowdpref.recruitment import prolific_target

    if not required(prolific_target(config, settings)):
        return None
    store, cid, key = collection.store, collection.info.id, collection.spec.key

    def guard() -> str:
        return before_publish(settings.runs_dir, config.name, key,
                              lambda kind, **detail: store.log_event(cid, kind, **detail), skip=skip)

    return guard
