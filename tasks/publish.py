"""Prefect tasks over :mod:`crowdpref.release`: build the release folder, scan it again right
before it leaves the machine, push it to the Hugging Face Hub, and show the result as artifacts.

Secrets never travel as task parameters: tasks receive the :class:`Settings` (``SecretStr``
fields) and read the token inside."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE

from crowdpref.account_passwords import AccountPasswords
from crowdpref.config import StudyConfig
from crowdpref.errors import CrowdprefError
from crowdpref.release import (
    PrivacyReport,
    PushError,
    PushResult,
    build_release,
    collection_stats,
    forbidden_strings,
    history_must_go,
    privacy_markdown,
    push_release,
    read_privacy_report,
    read_stats,
    release_folder,
    release_summary,
    scan_for_secrets,
)
from crowdpref.runfolder import RunFolder
from crowdpref.settings import Settings
from crowdpref.store import open_store
from crowdpref.withdrawals import Withdrawn, stale, withdrawn_in

AGGREGATION_STATS = "aggregation.json"
SCREENING_STATS = ("screening.json", "screening-stats.json", "screening-report.json")
"""Where the screening stage may leave its statistics (first one found is used)."""


def settings_secrets(settings: Settings) -> list[str]:
    """Every credential the settings know of: API keys/tokens and the embedded Argilla owner's
    key and password."""
    values = [s.get_secret_value() for s in (settings.argilla_api_key, settings.hf_token,
                                             settings.openai_api_key, settings.prolific_token)
              if s is not None]
    owner = read_stats(settings.owner_credentials_file)
    if owner:
        values += [str(owner[k]) for k in ("api_key", "password") if owner.get(k)]
    return values


def release_forbidden(run: RunFolder, settings: Settings, study_name: str) -> list[str]:
    """Every account's username and password from the study store, salts and Prolific ids from
    the run's private files, and the settings' credentials (the original participant keys are
    added by the build itself)."""
    passwords = AccountPasswords.from_secrets(settings.secrets_dir)  # the store keeps none: derived
    store = open_store(settings)
    try:
        accounts = [(a.username, passwords(a.username)) for key in ("study1", "study2")
                    if (info := store.find_collection(study_name, key)) is not None for a in store.accounts(info.id)]
    finally:
        store.close()
    return forbidden_strings(run, settings_secrets(settings), accounts)


def store_withdrawn(settings: Settings, study_name: str, run: RunFolder) -> Withdrawn:
    """Who withdrew from the study (:func:`crowdpref.withdrawals.withdrawn_in`)."""
    store = open_store(settings)
    try:
        return withdrawn_in(store, study_name, run.private_dir)
    finally:
        store.close()


def store_collection_stats(settings: Settings, study_name: str) -> dict[str, dict[str, int]]:
    store = open_store(settings)
    try:
        return collection_stats(store, study_name)
    finally:
        store.close()


# Deterministic and local: a retry would only repeat the failure. The run folder's release/
# is swapped in with renames that the next build repairs if they were cut short, so a rerun
# simply rebuilds it.
@task(name="build-release", cache_policy=NONE)
def build_dataset_release(cfg: StudyConfig, settings: Settings, run: RunFolder,
                          repo_id: str | None) -> Path:
    """Anonymise, mask personal details in participant text, coarsen timestamps, write
    ``<run>/release/`` in Hub layout with its card, and scan it (the build refuses if a
    forbidden string is found, or a personal detail in one of crowdpref's own columns).
    Artifact ``<study>-privacy``: what was masked, per pattern and column (counts only)."""
    logger = get_run_logger()
    aggregation = read_stats(run.file(AGGREGATION_STATS))
    withdrawn = store_withdrawn(settings, cfg.name, run)
    if stale(aggregation, withdrawn):  # people withdrew since: aggregate again without their rows
        from tasks.aggregation import read_inputs, run_aggregation, write_outputs

        logger.warning(f"{withdrawn.participants} participant(s) withdrew; aggregating again without their rows")
        write_outputs.fn(run_aggregation.fn(cfg, read_inputs.fn(run)), run)
        aggregation = read_stats(run.file(AGGREGATION_STATS))
    screening = next((s for s in (read_stats(run.file(n)) for n in SCREENING_STATS) if s), None)
    collection = store_collection_stats(settings, cfg.name)
    for name, value in (("aggregation", aggregation), ("screening", screening),
                        ("collection", collection)):
        if not value:
            logger.warning(f"no {name} statistics in {run.path}: the card says 'not available'")
    if aggregation and not isinstance(aggregation.get("order_balance"), dict):
        logger.warning(f"{AGGREGATION_STATS} in {run.path} has no order_balance (written by an "
                       "older aggregation): the card measures the A/B order balance on the "
                       "published ratings; rerun aggregate-ratings with force=True to align them")
    folder = build_release(run, cfg, aggregation=aggregation, screening=screening,
                           collection=collection or None,
                           forbidden=release_forbidden(run, settings, cfg.name), repo_id=repo_id,
                           withdrawn=withdrawn)
    logger.info(f"release built in {folder}")
    privacy_artifact(cfg.name, run)
    return folder


def privacy_artifact(study: str, run: RunFolder) -> None:
    """The build's privacy report (``privacy.json``: counts per pattern and column, never a
    value) as a markdown artifact ``<study>-privacy``, with a warning in the log when anything
    was masked or names and places were not looked for (no NER model), and the privacy review's
    decisions counted."""
    report = PrivacyReport.from_json(read_privacy_report(run))
    logger = get_run_logger()
    for warning in report.warnings:  # e.g. no NER model: names and places were not looked for
        logger.warning(warning)
    if report.flagged_rows:
        logger.info("privacy review: " + ", ".join(f"{n} {d}" for d, n in sorted(report.flagged_rows.items()))
                    + " (flagged answers/questions per decision; counts only)")
    if report.total:
        logger.warning(
            f"{report.total} personal detail(s) masked in participant text: "
            + ", ".join(f"{r['pattern']} {r['replaced']}" for r in report.rows())
            + f" (artifact {study}-privacy)")
    create_markdown_artifact(key=f"{study}-privacy",
                             markdown="\n".join(["## Privacy of the release", "",
                                                  *privacy_markdown(report)]),
                             description="Personal details masked in the release (counts only) "
                                         "and the timestamp precision.")


@task(name="scan-release", cache_policy=NONE)
def scan_release(folder: Path, run: RunFolder, settings: Settings, study_name: str) -> int:
    """Scan the release once more, right before it is pushed (it may have been edited since
    the build). Returns the number of forbidden strings checked."""
    folder = release_folder(run) if not folder.exists() else folder  # a swap cut short
    forbidden = release_forbidden(run, settings, study_name)
    keys_file = run.private_dir / "published-ids.json"
    ids = read_stats(keys_file) or {}
    forbidden += list((ids.get("ids") or {}).keys())  # the original participant keys
    hits = scan_for_secrets(folder, forbidden)
    if hits:
        raise CrowdprefError(f"refusing to push {folder}: {hits[0]}"
                             + (f" (and {len(hits) - 1} more)" if len(hits) > 1 else "")
                             + ": rebuild the release (publish-dataset) after fixing the data")
    return len(forbidden)


def _retry_push(task: Any, task_run: Any, state: Any) -> bool:
    """Retry only what a retry can fix (network, Hub 5xx/429), not credentials or offline mode."""
    exc = getattr(state, "data", None)
    if not isinstance(exc, BaseException):
        try:
            exc = state.result(raise_on_failure=False)
        except Exception:  # noqa: BLE001
            return False
    return isinstance(exc, PushError) and exc.retryable


# The push lists the repo and sends one commit that makes it equal to the release (unchanged
# files are skipped, nothing is committed when nothing changed), so a retry or a second push has
# the same effect as one (it costs an upload, hence at most two retries).
@task(name="push-release", cache_policy=NONE, retries=2, retry_delay_seconds=[5, 20],
      retry_condition_fn=_retry_push)
def push_dataset_release(folder: Path, repo_id: str | None, settings: Settings,
                         private: bool) -> PushResult:
    """Create the dataset repo (if needed) and make it equal to the release folder in one
    commit (files the release dropped are deleted on the Hub); when anyone withdrew from the
    study or the privacy review masked or dropped something, squash the repo's history so no
    earlier revision keeps it (:func:`~crowdpref.release.hub.history_must_go`)."""
    token = settings.hf_token.get_secret_value() if settings.hf_token is not None else None
    run = RunFolder(Path(folder).parent)  # the release is <run>/release
    withdrawals = store_withdrawn(settings, run.path.name, run).participants
    result = push_release(folder, repo_id, token, private=private, endpoint=settings.hf_endpoint,
                          squash_history=history_must_go(withdrawals, read_privacy_report(run)))
    get_run_logger().info(result.message)
    return result


@task(name="release-artifacts", cache_policy=NONE)
def release_artifacts(study: str, result: PushResult) -> None:
    """A link to the Hub repo (or the local folder), the card, and a table of configurations
    with their row counts (keys ``<study>-release...``)."""
    folder = result.folder
    if result.pushed and result.url:
        create_link_artifact(key=f"{study}-release", link=result.url,
                             link_text=f"{result.repo_id} on the Hub"
                             + (" (private)" if result.private else ""),
                             description=result.message)
    else:
        create_link_artifact(key=f"{study}-release", link=folder.resolve().as_uri(),
                             link_text=f"release folder {folder}", description=result.message)
    card = (folder / "README.md").read_text(encoding="utf-8")
    body = card.split("\n---\n", 1)[1] if card.startswith("---\n") and "\n---\n" in card else card
    create_markdown_artifact(key=f"{study}-dataset-card", markdown=body,
                             description="The dataset card (README.md) without its YAML header.")
    create_table_artifact(key=f"{study}-release-configs", table=release_summary(folder),
                          description="Configurations of the release: file and rows.")
