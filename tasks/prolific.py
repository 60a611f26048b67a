"""Prefect tasks over :mod:`crowdpref.recruitment`: publish a collection's Prolific study
(once), reconcile its submissions, and the artifacts a study team looks at (a link to the
Prolific study, the state of its submissions - never a Prolific id)."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.artifacts import create_link_artifact, create_table_artifact

from crowdpref.config import load_study
from crowdpref.pacer import launch_pace
from crowdpref.recruitment import (
    ProlificState,
    ensure_prolific_study,
    prolific_client,
    prolific_state,
    prolific_target,
    sync_prolific,
)
from crowdpref.runfolder import RunFolder
from crowdpref.settings import load_settings
from crowdpref.studies import StudyKey, open_collection
from tasks.artifacts import artifact_key
from tasks.retries import NETWORK


def prolific_study_link(target: Any, study_id: str) -> str:
    """Where a person sees the study: Prolific's researcher app, or the fake Prolific of a
    simulation (it has no researcher pages: its address)."""
    if target.fake:
        return target.app_url
    return f"https://app.prolific.com/researcher/workspaces/studies/{study_id}"


@task(name="publish-prolific-study", **NETWORK)
def publish_prolific_study(study: str, key: StudyKey, skip_preflight: bool = False,
                           skipped_by: str | None = None) -> dict[str, Any]:
    """Create (at most once) and publish the collection's Prolific study; returns its id,
    state and places. On the real Prolific, publishing waits for a passed pre-flight less than a
    day old (:mod:`crowdpref.preflight.gate`); ``skip_preflight`` goes ahead and records
    ``skipped_by`` (default: the OS user) in the study's events. A paced launch opens its first
    step only (:func:`launch_pace`); the collection runs and the sync open the rest."""
    from crowdpref.preflight.gate import Skip, publish_guard

    config, settings = load_study(study), load_settings()
    collection = open_collection(study, key)
    guard = publish_guard(config, settings, collection, Skip.of(skipped_by) if skip_preflight else None)
    with prolific_client(config, settings) as client:
        platform = ensure_prolific_study(collection, config, settings, client, before_publish=guard,
                                         pace=launch_pace(config, key, settings))
    target = prolific_target(config, settings)  # not None: prolific_client refused a study without one
    create_link_artifact(
        key=artifact_key(config.name, f"{key}-prolific-study"),
        link=prolific_study_link(target, platform.external_id),
        link_text=f"{key} on {'the FAKE ' if target.fake else ''}Prolific ({platform.state}, {platform.places} places)",
        description=f"{key}: the Prolific study participants arrive from",
    )
    return {"key": key, "prolific_study": platform.external_id, "state": platform.state, "places": platform.places}


@task(name="sync-prolific-submissions", **NETWORK)
def sync_prolific_submissions(study: str, key: StudyKey) -> dict[str, Any]:
    """Reconcile one collection's Prolific submissions with the store (see
    :func:`crowdpref.recruitment.sync_prolific`), places raised at the launch's pace
    (:func:`launch_pace`); a table artifact with the counts."""
    config, settings = load_study(study), load_settings()
    collection = open_collection(study, key)
    run = RunFolder.for_study(settings.runs_dir, config.name)
    with prolific_client(config, settings) as client:
        report = sync_prolific(collection, config, client, auto_approve=config.prolific.auto_approve,
                               private_dir=run.private_dir, pace=launch_pace(config, key, settings))
    notes = [note for note in (
        report.budget_note(),
        f"the approval of {report.approvals_unconfirmed} submission(s) was sent and got no reply: not repeated, "
        "the next sync reads their status back" if report.approvals_unconfirmed else None) if note]
    create_table_artifact(
        key=artifact_key(config.name, f"{key}-prolific"),
        table=[report.row()] + [{"study": key, "to review": f"{user}: {reason}"} for user, reason in report.review or []],
        description=(f"{key} on Prolific: {report.places} places, {report.active} active, {report.returned} returned, "
                     f"{report.timed_out} timed out, {report.awaiting_review} awaiting review, {report.approved} "
                     f"approved ({report.approved_now} now); submission ids for review are in the run folder's "
                     "private part" + "".join(f"; {note}" for note in notes)),
    )
    return report.row()


def prolific_monitor_state(study: str, collection: Any) -> ProlificState | None:
    """The collection's Prolific state for the monitoring artifacts (not a task: it runs inside
    monitor-collection): None when the study has no Prolific study; a failure is in ``error``."""
    return prolific_state(load_study(study), load_settings(), collection.store, collection.info.id)
