"""A study run started from the Prefect UI: headless Chromium opens the embedded Prefect UI,
goes Deployments -> study -> Run -> Custom run, points the run form's `study` parameter at a
tiny study written by the test (its stage outputs already in the run folder, so every stage is
quick), submits it, and the run completes, executed by the Prefect worker that the stack starts as
one of its services (``stack.up(..., ["worker"])``, what ``crowdpref up`` does; the
deployments registered by ``crowdpref deploy``'s ``deploy_all``), not by a serve process: the
deployment is Ready before anything else runs, and the worker's log names the run.
Screenshots: the deployment page, the filled run form and the finished run's page."""

from __future__ import annotations

import re
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from tests.browser.conftest import BROWSER_MARKS
from tests.conftest import CONNECTION_ENV

pytestmark = BROWSER_MARKS

RUN_TIMEOUT_S = 180


@pytest.fixture()
def tiny_study(tmp_path: Path, unique: str) -> tuple[Path, Path]:
    """A study config and its run folder with every collected file already there."""
    from crowdpref.config import load_study
    from tests.unit.test_publish import write_study_run

    name = f"ui-{unique}"
    config = tmp_path / f"{name}.yaml"
    config.write_text(yaml.safe_dump({
        "name": name,
        "title": "Run from the Prefect UI",
        "questions": {"categories": ["empathy", "humour"], "per_category": 1},
        "study1": {"responses_per_question": 3, "questions_per_participant": 2},
        "study2": {"ratings_per_pair": 3, "pairs_per_participant": 3, "scale_points": 8},
        "screening": {"fallback": "profanity-check"},
        "publish": {"license": "mit"},
    }))
    home = tmp_path / "home"
    run_dir = home / "studies" / load_study(config).name
    write_study_run(run_dir, load_study(config))
    return config, run_dir


@pytest.fixture()
def serving(prefect_server, tiny_study, monkeypatch):
    """The deployments registered as ``crowdpref deploy`` does, and the stack's Prefect worker
    (``stack.up`` with the ``worker`` component) with the tiny study's state folder; stopped
    at the end (``stack.down``)."""
    from crowdpref.settings import load_settings
    from deployments.deploy import deploy_all
    from services import stack

    for name in CONNECTION_ENV:  # a developer's connection settings must not reach the worker's flows
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PREFECT_WORKER_QUERY_SECONDS", "2")  # pick the run up quickly
    home = tiny_study[1].parents[1]
    settings = load_settings(home=home, prefect_port=prefect_server.prefect_port, host=prefect_server.host,
                             argilla_url=None, prefect_api_url=None)
    started = time.perf_counter()
    deploy_all(settings)
    print(f"deployments registered in {time.perf_counter() - started:.1f} s")
    try:
        started = time.perf_counter()
        rows = stack.up(settings, ["worker"])
        print(f"the stack's prefect worker up in {time.perf_counter() - started:.1f} s")
        assert [(r.name, r.healthy) for r in rows if r.name in (stack.WORKER, stack.SERVE)] == [(stack.WORKER, True)]
        yield settings
    finally:
        assert stack.down(settings) == [stack.WORKER]


def _get(api: str, path: str) -> dict:
    from deployments.deploy import prefect_api

    with prefect_api(api, local=True) as client:  # retries the 503s of a busy server
        response = client.get(path)
    assert response.status_code == 200, response.text
    return response.json()


def _runs_with(api: str, deployment_id: str, study: str) -> list[dict]:
    from deployments.deploy import prefect_api

    with prefect_api(api, local=True) as client:
        response = client.post("flow_runs/filter", json={
            "flow_runs": {"deployment_id": {"any_": [deployment_id]}}, "sort": "EXPECTED_START_TIME_DESC"})
    response.raise_for_status()
    return [r for r in response.json() if r["parameters"].get("study") == study]


def test_a_study_run_started_from_the_ui_completes(prefect_server, serving, tiny_study, browser_page, output_dir):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect

    page = browser_page
    config, run_dir = tiny_study
    api = prefect_server.prefect_url
    # Prefect marks a deployment READY when a worker of its pool polls: the worker's first poll can
    # come a moment after it registered itself healthy (a run of the whole suite saw NOT_READY)
    deadline = time.monotonic() + 60
    while (deployment := _get(api, "deployments/name/study/study"))["status"] != "READY" and time.monotonic() < deadline:
        time.sleep(1)
    assert deployment["work_pool_name"] == "crowdpref" and deployment["status"] == "READY", \
        (deployment["work_pool_name"], deployment["status"])

    # Deployments -> study
    page.goto(f"{prefect_server.prefect_ui_url}/deployments")
    page.get_by_placeholder("Search deployments").fill("study")
    page.get_by_role("link", name="study", exact=True).first.click()
    page.wait_for_url(f"**/deployments/deployment/{deployment['id']}**")
    run_button = page.get_by_role("button", name="Run", exact=True)
    expect(run_button).to_be_visible()
    expect(page.get_by_text("advance-every-15-minutes")).to_be_visible()
    page.screenshot(path=str(output_dir / "prefect-ui-study-deployment.png"), full_page=True)

    # Run -> Custom run: the form is built from the flow's type hints
    run_button.click()
    page.get_by_role("link", name="Custom run").click()
    page.wait_for_url(re.compile(r"/deployments/deployment/[0-9a-f-]+/run(\?|$)"))
    study_field = page.locator("label", has_text=re.compile(r"^study")).locator("xpath=following::textarea[1]")
    expect(study_field).to_have_value("studies/demo.yaml")  # the deployment's default
    study_field.fill(str(config))
    expect(page.locator("label", has_text=re.compile(r"^simulate"))).to_be_visible()
    page.screenshot(path=str(output_dir / "prefect-ui-study-custom-run.png"), full_page=True)
    # Submit: on success the UI goes back to the deployment's page; a busy server (a 503 the UI does
    # not retry) gets its error toast, and a person clicks Submit again
    for attempt in range(3):
        page.get_by_role("button", name="Submit").click()
        try:
            page.wait_for_url(lambda url: not urlsplit(url).path.endswith("/run"), timeout=30_000)
            break
        except PlaywrightTimeout:
            page.screenshot(path=str(output_dir / f"prefect-ui-study-submit-{attempt}.png"), full_page=True)
            assert page.get_by_text("Something went wrong").count(), \
                "Submit neither created a run nor reported an error: see prefect-ui-study-submit-*.png"
    else:
        raise AssertionError("creating the flow run failed three times: see prefect-ui-study-submit-*.png")

    # the run exists with our parameters, the stack's worker runs it, it completes
    deadline = time.monotonic() + 30
    runs = _runs_with(api, deployment["id"], str(config))
    while not runs and time.monotonic() < deadline:
        time.sleep(0.5)
        runs = _runs_with(api, deployment["id"], str(config))
    assert len(runs) == 1, "submitting the custom run form created no (or more than one) flow run"
    run_id = runs[0]["id"]
    submitted = time.monotonic()
    state = runs[0]["state"]["type"]
    while state not in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED") and time.monotonic() - submitted < RUN_TIMEOUT_S:
        time.sleep(1)
        state = _get(api, f"flow_runs/{run_id}")["state"]["type"]
    print(f"UI-started run {run_id}: {state} {time.monotonic() - submitted:.1f} s after submitting")
    worker_log = serving.logs_dir / "prefect-worker.log"
    assert state == "COMPLETED", f"flow run {run_id} ended {state}: see {worker_log}"
    assert run_id in worker_log.read_text(errors="replace"), "the stack's worker did not run it"
    assert runs[0]["work_pool_name"] == "crowdpref"

    run = _get(api, f"flow_runs/{run_id}")
    assert run["parameters"]["study"] == str(config) and run["parameters"]["simulate"] is False
    assert (run_dir / "release" / "README.md").exists()  # every stage ran, in the worker's state folder

    page.goto(f"{prefect_server.prefect_ui_url}/runs/flow-run/{run_id}")
    expect(page.get_by_text(run["name"]).first).to_be_visible()
    expect(page.get_by_text("Completed").first).to_be_visible()
    page.screenshot(path=str(output_dir / "prefect-ui-study-run.png"), full_page=True)
