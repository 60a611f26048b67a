"""Prefect tasks specific to study 2 (the shared ones are in tasks/collection.py)."""

from __future__ import annotations

import pandas as pd
from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from crowdpref.config import load_study
from crowdpref.errors import CrowdprefError
from crowdpref.pairing import make_pairs
from crowdpref.runfolder import RunFolder, read_parquet, write_parquet
from crowdpref.screening import excluded_response_ids
from crowdpref.settings import load_settings
from crowdpref.simulation.arrivals import open_door
from crowdpref.simulation.crowd import CrowdReport, SimulatedCrowd, check_may_play
from crowdpref.studies import open_collection
from crowdpref.study2 import export_ratings as export_ratings_to
from crowdpref.study2 import study1_complete
from tasks.artifacts import artifact_key
from tasks.collection import publish_validation
from tasks.retries import NETWORK


def _run(study: str) -> tuple:
    config = load_study(study)
    return config, RunFolder.for_study(load_settings().runs_dir, config.name)


def excluded_by_screening(config, run: RunFolder) -> set[str]:
    """Response ids the screening policy drops (none under the default policy 'flag')."""
    if config.screening.policy != "drop":
        return set()
    screening = read_parquet(run.screening, needed_by="screening.policy is 'drop': run screen-responses before pairing")
    return excluded_response_ids(screening, config.screening.policy, source=str(run.screening))


@task(name="build-pairs")
def build_pairs(study: str) -> str:
    """pairs.parquet from the complete study-1 export (seeded A/B order, recorded)."""
    config, run = _run(study)
    responses = study1_complete(run)
    result = make_pairs(responses, config.study2.pairs, config.seed, excluded_by_screening(config, run))
    if result.pairs.empty:
        raise CrowdprefError(f"{run.responses}: no question has 2 or more usable answers: nothing to pair")
    write_parquet(result.pairs, run.pairs)
    per_question = result.per_question()
    create_table_artifact(
        key=artifact_key(config.name, "study2-pairs-per-question"),
        table=[{"question_id": q, "pairs": int(n)} for q, n in per_question.items()],
        description=f"{len(result.pairs)} pairs over {len(per_question)} questions; "
                    f"{int(result.pairs['swapped'].sum())} shown swapped (A = second answer); "
                    f"{result.excluded_responses} answers excluded by screening",
    )
    if result.skipped_questions:
        create_markdown_artifact(
            key=artifact_key(config.name, "study2-skipped-questions"),
            markdown="# Questions skipped (fewer than 2 usable answers)\n\n" + "\n".join(
                f"- {q}: {n} answers" for q, n in sorted(result.skipped_questions.items())),
        )
    return str(run.pairs)


@task(name="export-ratings", **NETWORK)
def export_ratings(study: str) -> str:
    """ratings.parquet and the validation report, once every pair has its R ratings."""
    config, run = _run(study)
    collection = open_collection(study, "study2")
    frame, report = export_ratings_to(collection, run.path)
    publish_validation(config.name, "study2", report)
    create_table_artifact(
        key=artifact_key(config.name, "study2-ratings-per-rater"),
        table=[{"rater_key": k, "ratings": int(n)} for k, n in frame.groupby("rater_key").size().items()],
        description=f"{len(frame)} ratings by {frame['rater_key'].nunique()} raters",
    )
    return str(run.ratings)


@task(name="simulate-study2-crowd")
def simulate_study2_crowd(study: str, dropouts: list[str] | None = None, force: bool = False) -> CrowdReport:
    """Simulated raters arrive, claim pairs and rate what is pending (not retried, like study
    1's crowd). Refuses a study that takes real participants unless ``force``."""
    config, run = _run(study)
    collection = open_collection(study, "study2")
    check_may_play(config, collection, force)
    truth_file = run.private_dir / "crowd-truth-responses.parquet"
    truth = pd.read_parquet(truth_file) if truth_file.exists() else pd.DataFrame(columns=["response_id", "hidden_quality"])
    crowd = SimulatedCrowd(config.crowd, config.seed, dropouts=dropouts)
    settings = load_settings()
    return crowd.play_study2(
        collection,
        settings.argilla_api_url,
        dict(zip(truth["response_id"], truth["hidden_quality"])),
        config.study2.scale_points,
        door=open_door(config, settings, collection, onboard=crowd.onboarding_walker(config, "study2")),
    )
