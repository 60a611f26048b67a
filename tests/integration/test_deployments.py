"""The deployments of prefect.yaml against the session's embedded Prefect server:
``deploy_all`` registers every one of them (work pool, parameters, inactive schedules with a
timezone), an activated interval schedule makes the server's scheduler create Scheduled runs
with the schedule's parameters (and pausing it removes them again), and ``deployments/serve.py``
registers the same deployments from one process and stops on one SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime

import httpx
import pytest

from crowdpref.errors import CrowdprefError
from deployments.definitions import REPO, WORK_POOL, load_definitions, problems
from deployments.deploy import deploy_all, prefect_api, set_schedules_active
from tests.conftest import CONNECTION_ENV, free_port, isolated_settings

pytestmark = pytest.mark.integration

EXPECTED = {
    "study", "generate-questions", "collect-responses", "collect-ratings", "screen-responses",
    "aggregate-ratings", "evaluate", "publish-dataset", "simulate-crowd", "smoke-check", "recruit", "sync-prolific",
    "backup",
}
SCHEDULER_WAIT_S = 150  # the embedded server's scheduler loop runs every 60 s


@pytest.fixture()
def prefect_env(prefect_server, monkeypatch):
    """This test talks to the session's embedded Prefect server (also through subprocesses)."""
    for key, value in prefect_server.prefect_env().items():
        monkeypatch.setenv(key, value)
    return prefect_server


@pytest.fixture(scope="module")
def deployed(prefect_server):
    started = time.perf_counter()
    names = deploy_all(prefect_server)
    print(f"deploy_all: {len(names)} deployments in {time.perf_counter() - started:.1f} s")
    return names


def _api(settings) -> httpx.Client:
    """Retries 503s: the embedded server on SQLite answers them while it is busy."""
    return prefect_api(settings.prefect_url, local=True)


def _deployment(client: httpx.Client, flow: str, name: str) -> dict:
    response = client.get(f"deployments/name/{flow}/{name}")
    assert response.status_code == 200, response.text
    return response.json()


def test_prefect_yaml_matches_the_flows():
    definitions = load_definitions()
    assert {d.name for d in definitions} == EXPECTED
    assert problems(definitions) == []
    study = next(d for d in definitions if d.name == "study")
    (every_15,) = study.schedules
    assert every_15.interval == 900 and not every_15.active and every_15.timezone
    assert every_15.parameters["study"] == "studies/demo.yaml"
    assert all(not s.active for d in definitions for s in d.schedules)
    backup = next(d for d in definitions if d.name == "backup")
    (every_6h,) = backup.schedules
    assert every_6h.interval == 6 * 3600 and not every_6h.active and every_6h.timezone
    assert not backup.parameters and not every_6h.parameters  # retention: backup_retention_days
    assert backup.concurrency_limit == 1 and backup.collision_strategy == "CANCEL_NEW"


def test_problems_names_what_is_wrong(tmp_path):
    bad = tmp_path / "prefect.yaml"
    bad.write_text("""
deployments:
  - name: study
    entrypoint: flows/study.py:study
    description: the study
    tags: [crowdpref]
    parameters: {study: studies/demo.yaml, typo_param: 1}
    work_pool: {name: somewhere-else}
    schedules:
      - interval: 60
        slug: fast
  - name: study
    entrypoint: flows/nope.py:missing
    tags: []
    work_pool: {name: crowdpref}
""")
    found = "\\n".join(problems(load_definitions(bad)))
    for expected in ("study: defined more than once", "'typo_param'", "expected 'crowdpref'",
                     "has no timezone", "no description", "no tags", "cannot import flows/nope.py:missing"):
        assert expected in found, found


def test_deploy_all_registers_every_deployment(prefect_env, deployed):
    definitions = {d.name: d for d in load_definitions()}
    assert [name.split("/")[1] for name in deployed] == list(definitions)
    with _api(prefect_env) as client:
        pool = client.get(f"work_pools/{WORK_POOL}")
        assert pool.status_code == 200 and pool.json()["type"] == "process"
        for full_name in deployed:
            flow, name = full_name.split("/")
            definition = definitions[name]
            got = _deployment(client, flow, name)
            assert got["entrypoint"] == definition.entrypoint
            assert got["work_pool_name"] == WORK_POOL
            assert got["description"] == definition.description
            assert set(definition.tags) <= set(got["tags"])
            assert got["parameters"] == definition.parameters
            if name not in ("smoke-check", "backup"):  # the two that take no study
                assert got["parameters"]["study"] == "studies/demo.yaml"
            assert got["pull_steps"] == [
                {"prefect.deployments.steps.set_working_directory": {"directory": str(REPO)}}
            ]
            schedules = {s["slug"]: s for s in got["schedules"]}
            assert set(schedules) == {s.slug for s in definition.schedules}
            for expected in definition.schedules:
                schedule = schedules[expected.slug]
                assert schedule["active"] is False
                assert schedule["schedule"]["timezone"] == expected.timezone
                assert schedule["parameters"] == expected.parameters
            # the UI's run form comes from the flow's type hints
            properties = got["parameter_openapi_schema"]["properties"]
            if "study" in properties:
                assert properties["study"]["type"] == "string"
        study = _deployment(client, "study", "study")
        assert study["parameter_openapi_schema"]["properties"]["simulate"]["type"] == "boolean"
        assert study["schedules"][0]["schedule"]["interval"] == 900
        assert study["concurrency_limit"] == 1 or (study.get("global_concurrency_limit") or {}).get("limit") == 1
        morning = {s["slug"]: s for s in _deployment(client, "collect-responses", "collect-responses")["schedules"]}
        assert morning["morning-progress-check"]["schedule"]["cron"] == "0 8 * * *"


def test_deploy_all_again_updates_instead_of_duplicating(prefect_env, deployed):
    def count(client: httpx.Client) -> int:
        return client.post("deployments/count", json={}).json()

    with _api(prefect_env) as client:
        before = count(client)
        assert deploy_all(prefect_env) == deployed
        assert count(client) == before


def test_deploy_all_without_a_server_is_one_line(tmp_path):
    settings = isolated_settings(tmp_path / "nowhere", prefect_port=free_port())
    with pytest.raises(CrowdprefError) as err:
        deploy_all(settings)
    message = str(err.value)
    assert "\n" not in message and "not reachable" in message and settings.prefect_url in message


def test_deploy_all_with_a_broken_entrypoint_is_one_line(prefect_env, tmp_path):
    broken = tmp_path / "prefect.yaml"
    broken.write_text("""
name: crowdpref
pull:
  - prefect.deployments.steps.set_working_directory: {directory: "{{ $PWD }}"}
deployments:
  - name: broken
    entrypoint: flows/nope.py:missing
    work_pool: {name: crowdpref}
""")
    with pytest.raises(CrowdprefError) as err:
        deploy_all(prefect_env, broken)
    message = str(err.value)
    assert "\n" not in message and "flows/nope.py" in message and "prefect-deploy.log" in message


def _scheduled_runs(client: httpx.Client, deployment_id: str) -> list[dict]:
    response = client.post("flow_runs/filter", json={
        "flow_runs": {"deployment_id": {"any_": [deployment_id]}, "state": {"type": {"any_": ["SCHEDULED"]}}},
        "sort": "EXPECTED_START_TIME_ASC",
    })
    response.raise_for_status()
    return response.json()


def test_an_active_interval_schedule_creates_scheduled_runs(prefect_env, deployed):
    with _api(prefect_env) as client:
        study = _deployment(client, "study", "study")
        assert not study["paused"]
        assert _scheduled_runs(client, study["id"]) == []  # inactive: nothing scheduled
        expected_parameters = study["schedules"][0]["parameters"]
        try:
            assert set_schedules_active(prefect_env, "study", True) == ["advance-every-15-minutes"]
            schedule = _deployment(client, "study", "study")["schedules"][0]
            assert schedule["active"] is True and schedule["parameters"] == expected_parameters

            started = time.monotonic()
            runs: list[dict] = []
            while time.monotonic() - started < SCHEDULER_WAIT_S and not runs:
                time.sleep(2)
                runs = _scheduled_runs(client, study["id"])
            waited = time.monotonic() - started
            assert runs, f"no Scheduled run of study/study within {SCHEDULER_WAIT_S} s of activating its schedule"
            print(f"{len(runs)} scheduled runs appeared after {waited:.0f} s")
            assert all(r["parameters"] == expected_parameters for r in runs)
            assert all(r["auto_scheduled"] for r in runs)
            starts = [datetime.fromisoformat(r["expected_start_time"].replace("Z", "+00:00")) for r in runs]
            gaps = {(b - a).total_seconds() for a, b in zip(starts, starts[1:])}
            assert gaps <= {900.0}, gaps
        finally:
            set_schedules_active(prefect_env, "study", False)
        # pausing removes the runs it had scheduled: nothing is left to start the demo study
        deadline = time.monotonic() + 20
        while _scheduled_runs(client, study["id"]) and time.monotonic() < deadline:
            time.sleep(1)
        assert _scheduled_runs(client, study["id"]) == []


def test_a_worker_on_the_pool_runs_a_deployed_study(prefect_env, deployed, tmp_path, unique, monkeypatch):
    """The work-pool path end to end: a run of study/study (registered by deploy_all, pull step
    set_working_directory) is picked up by `prefect worker start --pool crowdpref` started as
    the background service prefect-worker, and completes; stop_worker stops it."""
    import yaml

    from crowdpref.config import load_study
    from crowdpref.settings import load_settings
    from deployments.deploy import WORKER_NAME, start_worker, stop_worker
    from services.process import ProcessManager
    from tests.unit.test_publish import write_study_run

    for name in CONNECTION_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PREFECT_WORKER_QUERY_SECONDS", "2")
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({
        "name": f"w-{unique}",
        "questions": {"categories": ["empathy", "humour"], "per_category": 1},
        "study1": {"responses_per_question": 3, "questions_per_participant": 2},
        "study2": {"ratings_per_pair": 3, "pairs_per_participant": 3, "scale_points": 8},
        "screening": {"fallback": "profanity-check"},
    }))
    home = tmp_path / "home"
    run_dir = home / "studies" / f"w-{unique}"
    write_study_run(run_dir, load_study(config))  # every collected file is already there
    settings = load_settings(home=home, host=prefect_env.host, prefect_port=prefect_env.prefect_port,
                             argilla_url=None, prefect_api_url=None)

    started = time.perf_counter()
    start_worker(settings)
    print(f"prefect-worker healthy in {time.perf_counter() - started:.1f} s")
    try:
        with _api(prefect_env) as client:
            study = _deployment(client, "study", "study")
            response = client.post(f"deployments/{study['id']}/create_flow_run",
                                   json={"parameters": {"study": str(config)}})
            assert response.status_code == 201, response.text
            run = response.json()
            submitted = time.monotonic()
            state = run["state"]["type"]
            while state not in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED") and time.monotonic() - submitted < 180:
                time.sleep(1)
                state = client.get(f"flow_runs/{run['id']}").json()["state"]["type"]
        print(f"worker ran study/study: {state} after {time.monotonic() - submitted:.1f} s")
        assert state == "COMPLETED", (settings.logs_dir / "prefect-worker.log").read_text()[-3000:]
        assert (run_dir / "release" / "README.md").exists()
    finally:
        stopping = time.perf_counter()
        assert stop_worker(settings)
        print(f"prefect-worker stopped in {time.perf_counter() - stopping:.1f} s")
    assert ProcessManager(settings.state_dir).running(WORKER_NAME) is None


def test_serve_registers_the_deployments_and_stops_on_sigterm(prefect_env, tmp_path):
    ready = tmp_path / "serve.ready"
    log = tmp_path / "serve.log"
    env = {**os.environ, "CROWDPREF_HOME": str(tmp_path / "home")}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "deployments" / "serve.py"), "--ready-file", str(ready)],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        started = time.monotonic()
        while not ready.exists():
            assert proc.poll() is None, f"serve.py exited with {proc.returncode}: {log.read_text()[-2000:]}"
            assert time.monotonic() - started < 120, f"serve.py not ready in 120 s: {log.read_text()[-2000:]}"
            time.sleep(0.5)
        print(f"serve.py registered its deployments in {time.monotonic() - started:.1f} s")
        definitions = load_definitions()
        with _api(prefect_env) as client:
            for definition in definitions:
                response = client.post("deployments/filter", json={"deployments": {"name": {"any_": [definition.name]}}})
                (got,) = [d for d in response.json() if d["entrypoint"] == definition.entrypoint]
                assert got["parameters"] == definition.parameters
                assert got["work_pool_name"] is None and got["path"] == "."  # served from here
                assert not got["paused"]
                assert {s["slug"]: s["active"] for s in got["schedules"]} == {
                    s.slug: False for s in definition.schedules
                }
        assert proc.poll() is None  # still serving
        proc.send_signal(signal.SIGTERM)
        stopping = time.monotonic()
        assert proc.wait(timeout=30) == 0, log.read_text()[-2000:]
        print(f"serve.py exited {time.monotonic() - stopping:.1f} s after one SIGTERM")
        assert not ready.exists()
        with _api(prefect_env) as client:
            assert _deployment(client, "study", "study")["paused"] is True  # paused on shutdown
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
