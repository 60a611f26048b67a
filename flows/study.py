"""The whole study, stage by stage - the method, as a flow."""

from __future__ import annotations

import time
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from crowdpref.config import load_study
from crowdpref.recruitment import recruits_on_prolific
from flows.aggregate_ratings import aggregate_ratings
from flows.collect_ratings import collect_ratings
from flows.collect_responses import collect_responses
from flows.evaluate import evaluate
from flows.generate_questions import generate_questions
from flows.publish_dataset import publish_dataset
from flows.recruit import recruit
from flows.screen_responses import screen_responses
from flows.simulate_crowd import simulate_crowd
from tasks.artifacts import artifact_key
from tasks.collection import wait_for_release
from tasks.preflight import show_preflight


@flow(name="study", log_prints=True, persist_result=True)
def study(
    study: str = "studies/demo.yaml",
    simulate: bool = False,
    max_wait_s: float = 0.0,
    max_visits: int = 25,
    skip_preflight: bool = False,
    skipped_by: str | None = None,
) -> dict[str, Any]:
    """Run a study end to end: generate questions -> study 1 (written answers) -> hate-speech
    screening -> study 2 (pairwise ratings) -> aggregation -> evaluation (when the config's
    ``evaluation.enabled``: do the labels carry signal beyond length?) -> publishing.

    On Prolific (or in a simulation whose crowd arrives through the fake Prolific) each study's
    Prolific study is published once, when its collection starts; returned and timed-out
    submissions free their work through the portal's webhooks, and each collection run
    reconciles the submissions (approvals, lost webhooks, places).

    Screening runs as soon as study 1 is complete and before study 2 builds its pairs, so that
    ``screening.policy: drop`` keeps flagged answers out of the pairs (nobody rates them).

    Re-entrant: a stage whose output is already in the run folder is skipped (it says so). While
    a collection still waits for people, the run records the progress and ends cleanly as
    "waiting"; the next run - by hand or on the 15-minute schedule - advances it. A failed run
    can be retried: finished stages come back from cache and only the failed work runs again.

    Args:
        study: the study config (YAML), e.g. studies/demo.yaml.
        simulate: let the simulated crowd play the participants (demo, tests).
        max_wait_s: with simulate, how long a run may wait for quiet participants to count as
            dropped out (their work then returns to the pool); 0 = never wait.
        max_visits: with simulate, how many crowd visits per collection in one run (each visit
            brings crowd.arrivals_per_visit new participants, who claim their work).
        skip_preflight: publish on the real Prolific without a passed pre-flight (recorded in
            the study's events with ``skipped_by``, else the OS user).
        skipped_by: who skips the pre-flight.
    """
    config = load_study(study)
    stages: list[dict[str, Any]] = []

    def timed(name: str, run: Any) -> Any:
        started = time.perf_counter()
        result = run()
        status = result if isinstance(result, str) else "done"
        stages.append({"stage": name, "status": status, "seconds": round(time.perf_counter() - started, 1)})
        return result

    on_prolific = recruits_on_prolific(config)

    def collection(key: str, collect: Any) -> str:
        return timed(f"collect ({key})",
                     lambda: _advance(study, key, collect, simulate, max_wait_s, max_visits, on_prolific,
                                      (skip_preflight, skipped_by)))

    if on_prolific and config.participants == "prolific":  # the real Prolific: its gate reads the report
        print(f"pre-flight: {show_preflight(config.name)}")
    timed("generate-questions", lambda: generate_questions(study))
    if collection("study1", collect_responses) != "complete":
        return _finish(config.name, "waiting", stages)
    # before study 2: its pairs leave out the answers screening flagged when policy is 'drop'
    timed("screen-responses", lambda: screen_responses(study))
    if collection("study2", collect_ratings) != "complete":
        return _finish(config.name, "waiting", stages)
    timed("aggregate-ratings", lambda: aggregate_ratings(study))
    if config.evaluation.enabled:  # before publishing: the card shows what it found
        timed("evaluate", lambda: evaluate(study))
    timed("publish-dataset", lambda: publish_dataset(study))
    return _finish(config.name, "complete", stages)


def _advance(study: str, key: str, collect: Any, simulate: bool, max_wait_s: float, max_visits: int,
             on_prolific: bool, preflight_skip: tuple[bool, str | None] = (False, None)) -> str:
    """One collection: provision and read back (on Prolific, also reconcile its submissions);
    on Prolific, make sure its Prolific study is published (once); with a simulated crowd, let
    it visit (and wait for drop-outs to be released when that is due soon) until complete or
    out of visits."""
    status = collect(study)
    if on_prolific and status != "complete":
        recruit(study, key, *preflight_skip)
    for visit in range(max_visits):
        if status == "complete" or not simulate:
            break
        visit_report = simulate_crowd(study, stage=key)
        if not (visit_report["submitted"] or visit_report["arrived"] or visit_report["left"]
                or visit_report.get("screened_out")):
            # nobody had anything left to do: only quiet participants hold work
            if not wait_for_release(study, key, max_wait_s, visit):
                break
        status = collect(study)  # on Prolific each collection run also reconciles the submissions
    return status


def _finish(study_name: str, status: str, stages: list[dict[str, Any]]) -> dict[str, Any]:
    rows = "\n".join(f"| {s['stage']} | {s['status']} | {s['seconds']} |" for s in stages)
    create_markdown_artifact(
        key=artifact_key(study_name, "study-run"),
        markdown=f"# {study_name}: {status}\n\n| stage | status | seconds |\n|---|---|---|\n{rows}\n",
        description="Stages of this run of the study flow and how long each took",
    )
    print(f"study {study_name}: {status}; " + ", ".join(f"{s['stage']} {s['seconds']} s" for s in stages))
    return {"study": study_name, "status": status, "stages": stages}
