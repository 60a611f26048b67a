"""Publish-dataset flow: the last stage of a study. Turns the run folder's results into a dataset
release in Hugging Face Hub layout and pushes it to the Hub when a repo and a token are set."""

from __future__ import annotations

from prefect import flow

from crowdpref.config import load_study
from crowdpref.errors import CrowdprefError
from crowdpref.release import PushResult, validate_repo_id
from crowdpref.runfolder import RunFolder
from crowdpref.settings import load_settings
from tasks.publish import build_dataset_release, push_dataset_release, release_artifacts, scan_release


@flow(name="publish-dataset", log_prints=True)
def publish_dataset(study: str = "studies/demo.yaml", push: bool = True) -> PushResult:
    """Build ``<runs>/<study>/release/`` from ``preferences.parquet`` (the default
    configuration: prompt/chosen/rejected/margin + metadata), ``responses``, ``ratings``,
    ``questions`` and, when present, ``screening``; write a dataset card from the run's
    numbers and the statistics in ``aggregation.json``, the screening stats and the study
    store's collection counts; replace participant keys by random 10-character ids (kept in
    ``private/``); mask e-mail addresses, Prolific ids, tokens and keys typed into answers and
    questions (counted in the card); list answers and questions in which Presidio's recognisers
    find a phone number, payment card, IBAN, IP address or URL (names and places too with a
    spaCy NER model) in ``private/privacy-review.json`` and refuse to build until each is decided
    keep, mask or drop (``crowdpref privacy-review``); truncate timestamps to ``publish.timestamp_precision``
    (default: the day); scan every file for usernames, passwords, Prolific ids and API keys (a
    hit stops the flow, as does a personal detail in one of crowdpref's own columns).

    With ``push`` and both a repo (``CROWDPREF_HF_REPO_ID`` or ``publish.repo_id``) and a
    token (``HF_TOKEN`` / ``CROWDPREF_HF_TOKEN``) set, the dataset repo (private unless
    ``publish.private`` is false) on ``CROWDPREF_HF_ENDPOINT`` or the Hub is made equal to
    the folder in one commit (files the release dropped are deleted there); otherwise it stays
    local. Artifacts: a link to the repo or folder, the card, a table of configurations with
    their row counts, and what the privacy pass masked. Returns where the release is.
    """
    cfg = load_study(study)
    settings = load_settings()
    run = RunFolder.for_study(settings.runs_dir, cfg.name)
    if not run.preferences.exists():
        raise CrowdprefError(f"{run.preferences}: not found: run the aggregate-ratings flow first")
    repo_id = settings.hf_repo_id or cfg.publish.repo_id
    if push and repo_id:
        validate_repo_id(repo_id)  # fail before building, not after
    folder = build_dataset_release(cfg, settings, run, repo_id)
    if push:
        scan_release(folder, run, settings, cfg.name)
        result = push_dataset_release(folder, repo_id, settings, cfg.publish.private)
    else:
        result = PushResult(folder=folder, pushed=False, repo_id=repo_id,
                            message=f"not pushed (push=False): the release is in {folder}")
    release_artifacts(cfg.name, result)
    print(result.message)
    return result
