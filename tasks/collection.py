"""Prefect tasks over :mod:`crowdpref.collection` (shared by both studies): provisioning,
monitoring, and the artifacts a study team watches in the UI. Tasks take the study config
path, not live clients, so their inputs are plain values Prefect can hash and persist."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, create_table_artifact

from crowdpref.collection import Progress
from crowdpref.studies import StudyKey, open_collection
from tasks.retries import NETWORK


def artifact_key(study_name: str, what: str) -> str:
    """Artifact keys: lowercase letters, digits and dashes, per study so history is kept."""
    return f"{study_name}-{what}".lower().replace("_", "-")


@task(name="provision-participants", **NETWORK)
def provision_participants(study: str, key: StudyKey) -> list[str]:
    """Accounts, workspaces, datasets and records for every participant not provisioned yet.
    Idempotent: a retry completes what a failed attempt started, creating nothing twice."""
    collection = open_collection(study, key)
    ledger = collection.ledger()
    created = collection.provision(ledger)
    create_table_artifact(
        key=artifact_key(collection.spec.study_name, f"{collection.spec.key}-provisioning"),
        table=[{"username": p.username, "items": len(p.items), "status": p.status, "origin": p.origin}
               for p in ledger.participants],
        description=f"{collection.spec.key}: {collection.spec.batches.describe()} initially; "
                    f"{len(created)} participants provisioned in this run, {len(ledger.participants)} in the "
                    "ledger. Passwords are in the private roster file only.",
    )
    return created


@task(name="monitor-collection", **NETWORK)
def monitor_collection(study: str, key: StudyKey) -> Progress:
    """Read answers back; complete, release and re-allocate; provision new participants."""
    collection = open_collection(study, key)
    progress = collection.monitor(collection.ledger())
    study, key = collection.spec.study_name, collection.spec.key
    create_progress_artifact(
        progress=round(100 * progress.share, 1),
        key=artifact_key(study, f"{key}-progress"),
        description=f"{key}: {progress.submitted}/{progress.needed} submitted",
    )
    create_table_artifact(
        key=artifact_key(study, f"{key}-participants"),
        table=[vars(p) for p in progress.participants],
        description=(
            f"{key}: {progress.submitted}/{progress.needed} submitted, {progress.outstanding} outstanding; "
            f"released now: {len(progress.released_now)}, new accounts now: {len(progress.created_now)}"
        ),
    )
    return progress


@task(name="wait-for-drop-out-release")
def wait_for_release(study: str, key: StudyKey, max_wait_s: float, visit: int) -> bool:
    """Sleep until the next quiet participant's inactivity window ends, when that is due within
    ``max_wait_s``; False (no sleep) otherwise. ``visit`` numbers the waits of one run, so each
    is its own step and a retried run replays it from cache instead of sleeping again."""
    collection = open_collection(study, key)
    wait = collection.next_release_in(collection.ledger())
    if wait is None or wait > max_wait_s:
        return False
    time.sleep(wait + 1.0)
    return True


def advance_collection(study: str, key: StudyKey, output: Path, export: Callable[[str], str], noun: str) -> str:
    """The collection sequence both study flows run: skip when ``output`` exists; provision;
    monitor; export when complete. Returns "complete" or "waiting" (never waits for people)."""
    if output.exists():
        print(f"{output} exists: {key} is complete, nothing to do")
        return "complete"
    provision_participants(study, key)
    progress = monitor_collection(study, key)
    print(f"{key}: {progress.submitted}/{progress.needed} {noun} submitted, {progress.outstanding} outstanding, "
          f"{len(progress.released_now)} participants released, {len(progress.created_now)} new accounts")
    if not progress.complete:
        return "waiting"
    print(f"{key} complete: {export(study)}")
    return "complete"


def report_markdown(title: str, report: dict) -> str:
    lines = [f"# {title}", "", f"**valid: {report['valid']}**", ""]
    lines += [f"- {k.replace('_', ' ')}: {v}" for k, v in report.items() if k not in ("anomalies", "valid")]
    lines += ["", "## Anomalies", ""] + ([f"- {a}" for a in report["anomalies"]] or ["none"])
    return "\n".join(lines)


def publish_validation(study_name: str, key: str, report: dict) -> None:
    create_markdown_artifact(
        key=artifact_key(study_name, f"{key}-validation"),
        markdown=report_markdown(f"{key} validation", report),
        description=f"{key}: every item has its answers; every workspace held exactly its allocation",
    )
