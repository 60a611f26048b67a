"""The study flow on the real embedded Argilla with a simulated crowd: every stage from questions
to a published folder. A failure injected in a middle stage (aggregation) fails the first
attempt; the SAME flow run is retried and finished stages come back from cache: no collection
step runs again and nothing is created twice in Argilla. With ``screening.policy: drop`` the
flow screens study 1's answers before study 2 pairs them, so flagged answers are never rated
nor published. Without a crowd, the flow ends as "waiting" instead of failing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import datasets
import pandas as pd
import pytest
import yaml

import crowdpref.aggregation
from crowdpref.collection import Collection
from crowdpref.account_passwords import AccountPasswords
from crowdpref.settings import load_settings
from crowdpref.store import open_store
from tests.integration.test_study1_collection import _server_counts

pytestmark = pytest.mark.integration


def _study(tmp_path: Path, name: str, screening: dict | None = None, **crowd: object) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name,
        "seed": 3,
        "participants": "simulated",
        "questions": {"categories": ["empathy", "ethics"], "per_category": 3},
        # the simulated crowd submits a batch in one call: time on task means nothing for it
        # pool_size 3 (new-study's template has 2): a crowd of about a dozen needs no pool of 10
        # warm accounts, each a user, a workspace and a dataset in Argilla that nobody claims
        "study1": {"responses_per_question": 4, "questions_per_participant": 3, "inactive_after_minutes": 0.05,
                   "too_fast_seconds": 0, "pool_size": 3},
        "study2": {"ratings_per_pair": 3, "pairs_per_participant": 12, "inactive_after_minutes": 0.05,
                   "too_fast_seconds": 0, "pool_size": 3},
        "screening": {"fallback": "profanity-check", **(screening or {})},
        "crowd": {"dropout_rate": 0.15, "low_effort_rate": 0.1, "offensive_rate": 0.1, **crowd},
    }))
    return str(path)


def test_study_end_to_end_and_retry_from_cache(prefect_harness, study_env, argilla_server, tmp_path, unique, monkeypatch):
    from prefect.client.orchestration import get_client

    from flows.study import study as study_flow

    name = f"e{unique}"
    study = _study(tmp_path, name)
    run_dir = study_env / "studies" / name

    stage_bodies = []  # every execution of an earlier stage flow's body (each calls load_study first)
    for module in ("flows.generate_questions", "flows.collect_responses", "flows.collect_ratings",
                   "flows.screen_responses"):
        real_load = __import__(module, fromlist=["load_study"]).load_study
        monkeypatch.setattr(f"{module}.load_study",
                            lambda path, _real=real_load, _m=module: stage_bodies.append(_m) or _real(path))
    provision_calls = []  # every collection step: each collect run refills the account pool first
    real_refill = Collection.refill_pool
    monkeypatch.setattr(Collection, "refill_pool",
                        lambda self, *a, **kw: provision_calls.append(1) or real_refill(self, *a, **kw))
    real_aggregate = crowdpref.aggregation.aggregate
    attempts = []
    provisions_when_failing = []
    bodies_when_failing = []

    def fail_first_time(*args, **kwargs):
        attempts.append(1)
        if len(attempts) == 1:
            provisions_when_failing.append(len(provision_calls))
            bodies_when_failing.append(len(stage_bodies))
            raise RuntimeError("injected failure in aggregation")
        return real_aggregate(*args, **kwargs)

    monkeypatch.setattr(crowdpref.aggregation, "aggregate", fail_first_time)
    monkeypatch.setattr("tasks.aggregation.aggregate", fail_first_time, raising=False)

    state = study_flow.with_options(retries=1, retry_delay_seconds=0)(
        study, simulate=True, max_wait_s=30, return_state=True)
    assert state.is_completed(), state
    result = state.result()
    assert result["status"] == "complete", result
    assert len(attempts) == 2  # failed once, then succeeded on the retry

    # the retry did not redo the collections: provisioning ran only during the first attempt
    async def runs_of(flow_run_id):
        async with get_client() as client:
            run = await client.read_flow_run(flow_run_id)
            return run
    flow_run = asyncio.run(runs_of(state.state_details.flow_run_id))
    assert flow_run.run_count == 2
    calls_after_retry = len(provision_calls)
    assert provisions_when_failing[0] > 0 and calls_after_retry == provisions_when_failing[0]
    # no earlier stage flow even started again: the retry loaded their finished runs from cache
    assert bodies_when_failing[0] > 0 and len(stage_bodies) == bodies_when_failing[0], stage_bodies
    counts = _server_counts(argilla_server.api_url, argilla_server.owner_api_key, name)

    # ... and a further run of the flow skips every stage (outputs exist) without creating anything
    again = study_flow(study, simulate=True, max_wait_s=30)
    assert again["status"] == "complete"
    assert _server_counts(argilla_server.api_url, argilla_server.owner_api_key, name) == counts
    assert len(provision_calls) == calls_after_retry

    # the outputs: exact counts, re-allocation visible, a loadable release
    responses = pd.read_parquet(run_dir / "responses.parquet")
    assert responses.groupby("question_id").size().tolist() == [4] * 6
    ratings = pd.read_parquet(run_dir / "ratings.parquet")
    assert ratings.groupby("pair_id").size().tolist() == [3] * 36
    store = open_store(load_settings())
    study1 = store.find_collection(name, "study1")
    released = [p for p in store.participants(study1.id) if p.status == "released"]
    assert released, "the seeded crowd has drop-outs in study 1"
    assert store.events(study1.id, kinds=["reallocated"]), "released work was claimed by later arrivals"
    assert set(responses["source"]) == {"simulated"} and set(ratings["source"]) == {"simulated"}
    # every pair's raters saw it in counterbalanced orders (2 and 1 of 3)
    assert ratings.groupby("pair_id")["swapped"].sum().isin([1, 2]).all()
    preferences = pd.read_parquet(run_dir / "preferences.parquet")
    assert len(preferences) > 0 and set(preferences["chosen_response_id"]) <= set(responses["response_id"])
    release = datasets.load_dataset(str(run_dir / "release"))
    assert {"prompt", "chosen", "rejected", "margin"} <= set(release["train"].column_names)

    # every artifact of the run, read back from the API: progress everywhere, secrets nowhere
    async def artifacts() -> list:
        async with get_client() as client:
            return await client.read_artifacts(artifact_filter=_ours(name))

    found = [a for a in asyncio.run(artifacts()) if a.key and a.key.startswith(f"{name}-")]
    keys = {a.key for a in found}
    for expected in ("questions-per-category", "study1-account-pool", "study1-progress", "study1-participants",
                     "study1-validation", "study2-pairs-per-question", "study2-ratings-per-rater",
                     "screening-flagged", "aggregation-stats", "release", "dataset-card", "study-run"):
        assert f"{name}-{expected}" in keys, expected
    text = json.dumps([a.model_dump(mode="json") for a in found])
    secrets = [argilla_server.owner_api_key]
    for key in ("study1", "study2"):
        secrets += [AccountPasswords.from_secrets(load_settings().secrets_dir)(a.username)
                    for a in store.accounts(store.find_collection(name, key).id)]
    secrets.append(json.loads((run_dir / "private" / "participant-key-salt.json").read_text())["salt"])
    assert len(secrets) > 10
    leaked = [s for s in secrets if s in text]
    assert not leaked, f"{len(leaked)} secrets in artifacts"


def test_study_without_crowd_ends_waiting(prefect_harness, study_env, argilla_server, tmp_path, unique):
    from flows.study import study as study_flow

    name = f"w{unique}"
    study = _study(tmp_path, name)
    result = study_flow(study)
    assert result["status"] == "waiting"
    assert [s["stage"] for s in result["stages"]] == ["generate-questions", "collect (study1)"]
    assert result["stages"][1]["status"] == "waiting"
    assert not (study_env / "studies" / name / "responses.parquet").exists()


def test_study_with_drop_policy_screens_before_pairing(prefect_harness, study_env, argilla_server, tmp_path, unique):
    """policy 'drop': screening runs between study 1 and study 2, so the pairs - and everything
    after them - never contain an answer it flagged. (With screening after study 2, building
    the pairs fails: screening.parquet does not exist yet.)"""
    from flows.study import study as study_flow

    name = f"d{unique}"
    study = _study(tmp_path, name, screening={"policy": "drop"}, offensive_rate=0.2)
    run_dir = study_env / "studies" / name

    result = study_flow(study, simulate=True, max_wait_s=30)
    assert result["status"] == "complete", result
    assert [s["stage"] for s in result["stages"]] == [
        "generate-questions", "collect (study1)", "screen-responses", "collect (study2)",
        "aggregate-ratings", "publish-dataset"]

    responses = pd.read_parquet(run_dir / "responses.parquet")
    screening = pd.read_parquet(run_dir / "screening.parquet")
    assert set(screening["response_id"]) == set(responses["response_id"])
    flagged = set(screening.loc[screening["flagged"], "response_id"])
    assert flagged, "the crowd's offensive answers are flagged (else this test shows nothing)"
    assert flagged < set(responses["response_id"])  # flagged answers stay in study 1's export

    # screening was written before the pairs were built, and the pairs left the flagged out
    assert (run_dir / "screening.parquet").stat().st_mtime_ns <= (run_dir / "pairs.parquet").stat().st_mtime_ns
    pairs = pd.read_parquet(run_dir / "pairs.parquet")
    assert len(pairs) > 0
    paired = set(pairs["first_response_id"]) | set(pairs["second_response_id"])
    assert not paired & flagged, sorted(paired & flagged)
    ratings = pd.read_parquet(run_dir / "ratings.parquet")
    assert set(ratings["pair_id"]) == set(pairs["pair_id"])
    rated = set(ratings["response_a_id"]) | set(ratings["response_b_id"])
    assert not rated & flagged

    preferences = pd.read_parquet(run_dir / "preferences.parquet")
    assert len(preferences) > 0
    assert not (set(preferences["chosen_response_id"]) | set(preferences["rejected_response_id"])) & flagged
    assert not preferences["chosen_flagged"].any() and not preferences["rejected_flagged"].any()

    # the published dataset: the folder, and its preferences without a flagged answer
    release_dir = run_dir / "release"
    assert release_dir.is_dir() and (release_dir / "README.md").is_file()
    release = datasets.load_dataset(str(release_dir))["train"]
    assert len(release) == len(preferences)
    published = set(release["chosen_response_id"]) | set(release["rejected_response_id"])
    assert published and not published & flagged


def _ours(name: str):
    """Only this test's artifacts (the session's Prefect holds every test's: an unfiltered read
    is cut off at the server's page limit)."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    return ArtifactFilter(key=ArtifactFilterKey(like_=f"{name}-"))
