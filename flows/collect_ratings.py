"""Study 2, pairwise ratings: other participants compare two answers to the same question."""

from __future__ import annotations

from prefect import flow

from crowdpref.config import load_study
from crowdpref.runfolder import RunFolder
from crowdpref.settings import load_settings
from tasks.collection import advance_collection
from tasks.study2 import build_pairs, export_ratings


@flow(name="collect-ratings", log_prints=True)
def collect_ratings(study: str = "studies/demo.yaml") -> str:
    """Pair the answers of each question, keep warm accounts ready for arriving raters (who
    claim their pairs when they arrive; study-1 participants are refused), read back their
    8-point ratings, each rating's A/B order counterbalanced within its pair (with the portal
    receiving Argilla's webhooks: only raters who worked since the last read, plus a slow
    backstop), release raters who went quiet (their pairs return to the pool), and export
    `ratings.parquet` once every pair has its R ratings.

    Needs the complete study-1 export. Never waits for people: returns "waiting" or "complete";
    run it again to advance."""
    config = load_study(study)
    run = RunFolder.for_study(load_settings().runs_dir, config.name)
    if not run.ratings.exists() and not run.pairs.exists():
        build_pairs(study)
    return advance_collection(study, "study2", run.ratings, export_ratings, noun="ratings")
