"""Prefect tasks over :mod:`crowdpref.collection` (shared by both studies): provisioning,
monitoring, and the artifacts a study team watches in the UI. Tasks take the study config
path, not live clients, so their inputs are plain values Prefect can hash and persist."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, create_table_artifact

from crowdpref.checks import is_check
from crowdpref.collection import Collection, Progress
from crowdpref.config import load_study
from crowdpref.pseudonyms import Pseudonyms
from crowdpref.reopen import ItemsReopened
from crowdpref.studies import StudyKey, open_collection
from crowdpref.work_quality import describe_time_on_task, time_on_task, time_on_task_rows
from tasks.artifacts import artifact_key
from tasks.prolific import prolific_monitor_state, sync_prolific_submissions
from tasks.retries import NETWORK


@task(name="refill-account-pool", **NETWORK)
def refill_account_pool(study: str, key: StudyKey) -> int:
    """Keep K warm accounts (annotator, workspace, empty dataset) ready for arriving
    participants, and finish accounts a killed run left half-created. Idempotent: a retry
    completes what a failed attempt started, creating nothing twice."""
    collection = open_collection(study, key)
    made = collection.refill_pool()
    accounts = collection.store.accounts(collection.info.id)
    states = Counter(a.state for a in accounts)
    create_markdown_artifact(
        key=artifact_key(collection.spec.study_name, f"{collection.spec.key}-account-pool"),
        markdown=(f"# {collection.spec.key}: account pool\n\n"
                  f"- ready (waiting for a participant): {states['ready']} (target {collection.spec.pool_size})\n"
                  f"- bound to participants: {states['bound']}\n- being created: {states['creating']}\n"
                  f"- made ready in this run: {made}\n\n"
                  f"Work is allocated when a participant arrives (claim), never ahead. Initial plan: "
                  f"{collection.spec.batches.describe()}. Passwords are in the study store only."),
        description=f"{collection.spec.key}: warm accounts for arriving participants",
    )
    return made


@task(name="monitor-collection", **NETWORK)
def monitor_collection(study: str, key: StudyKey) -> Progress:
    """Repair what a killed run left, read answers back, complete or release participants
    (their unanswered items return to the pool), refill the account pool; publish the progress,
    the participants and their time on task. With the portal receiving Argilla's webhooks, only
    participants with reported activity (or due for the backstop or a release) are read."""
    collection = open_collection(study, key)
    progress = collection.monitor()
    publish_time_on_task(study, collection)
    # on Prolific: one read of its submission counts (None without a Prolific study; never raises)
    prolific = prolific_monitor_state(study, collection)
    on_prolific = f"; {prolific.describe()}" if prolific is not None else ""
    study, key = collection.spec.study_name, collection.spec.key
    create_progress_artifact(
        progress=round(100 * progress.share, 1),
        key=artifact_key(study, f"{key}-progress"),
        description=f"{key}: {progress.submitted}/{progress.needed} submitted{on_prolific}",
    )
    create_table_artifact(
        key=artifact_key(study, f"{key}-participants"),
        table=[vars(p) for p in progress.participants],
        description=(
            f"{key}: {progress.submitted}/{progress.needed} submitted, {progress.outstanding} held by active "
            f"participants, {progress.unclaimed} waiting for the next claims; {progress.pool_ready} warm accounts; "
            f"released now: {len(progress.released_now)}; read from Argilla now: {progress.read_now} "
            f"({'reported activity, backstop and releases: Argilla webhooks' if progress.webhooks else 'every active participant: no Argilla webhooks'})"
            f"{on_prolific}"
        ),
    )
    return progress


def publish_time_on_task(study: str, collection: Collection) -> None:
    """The time-on-task table (see :mod:`crowdpref.work_quality`): per participant, by
    pseudonymous key only, items submitted, median and shortest seconds per item, and the
    too-fast flag of the study's ``too_fast_seconds``."""
    config = load_study(study)
    key = collection.spec.key
    threshold = (config.study1 if key == "study1" else config.study2).too_fast_seconds
    frame = time_on_task(collection.store.participants(collection.info.id), threshold,
                         is_check=is_check)
    ids = Pseudonyms(collection.folder.parent / "private")
    create_table_artifact(
        key=artifact_key(collection.spec.study_name, f"{key}-time-on-task"),
        table=time_on_task_rows(frame, ids.participant_key),
        description=(f"{key}: time on task - {describe_time_on_task(frame, threshold)}. Seconds per item are "
                     f"the gaps between a participant's submissions (the first from their claim): Argilla "
                     f"does not record when a record was opened, so items submitted together show ~0 s"),
    )


@task(name="wait-for-drop-out-release")
def wait_for_release(study: str, key: StudyKey, max_wait_s: float, visit: int) -> bool:
    """Sleep until the next quiet participant's inactivity window ends, when that is due within
    ``max_wait_s``; False (no sleep) otherwise. ``visit`` numbers the waits of one run, so each
    is its own step and a retried run replays it from cache instead of sleeping again."""
    wait = open_collection(study, key).next_release_in()
    if wait is None or wait > max_wait_s:
        return False
    time.sleep(wait + 1.0)
    return True


def advance_collection(study: str, key: StudyKey, output: Path, export: Callable[[str], str], noun: str) -> str:
    """The collection sequence both study flows run: skip when ``output`` exists; refill the
    account pool; monitor; export when complete. Returns "complete" or "waiting" (never waits
    for people)."""
    if output.exists():
        print(f"{output} exists: {key} is complete, nothing to do")
        return "complete"
    refill_account_pool(study, key)
    progress = monitor_collection(study, key)
    print(f"{key}: {progress.submitted}/{progress.needed} {noun} submitted, {progress.outstanding} held, "
          f"{progress.unclaimed} unclaimed, {len(progress.released_now)} participants released, "
          f"{progress.pool_ready} warm accounts; {progress.read_now} participants read from Argilla "
          f"({'webhooks on' if progress.webhooks else 'no webhooks: every active participant'})")
    _sync_prolific(study, key)
    if not progress.complete:
        return "waiting"
    try:
        exported = export(study)
    except ItemsReopened as exc:  # unusable answers went back to the pool: not complete after all
        print(f"{key}: {exc}")
        return "waiting"
    print(f"{key} complete: {exported}")
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


def _sync_prolific(study: str, key: StudyKey) -> None:
    """On Prolific: reconcile its submissions (approvals, the backstop for lost webhooks, places)
    and show their state. A Prolific failure is reported, never fails the collection run."""
    from crowdpref.config import load_study
    from crowdpref.recruitment import recruits_on_prolific
    from crowdpref.settings import load_settings
    from crowdpref.store import open_store

    config = load_study(study)
    if not recruits_on_prolific(config):
        return
    store = open_store(load_settings())
    try:
        info = store.find_collection(config.name, key)
        published = info is not None and store.platform_study(info.id) is not None
    finally:
        store.close()
    if not published:
        return
    state = sync_prolific_submissions(study, key, return_state=True)
    if state.is_completed():
        row = state.result()
        print(f"{key} on Prolific: {row['places']} places, {row['active']} active, {row['returned']} returned, "
              f"{row['timed out']} timed out, {row['awaiting review']} awaiting review, {row['approved']} approved")
    else:
        print(f"{key}: reading Prolific failed ({state.message}); the collection goes on, the next run retries")
