"""participants.parquet: one row per participant per study (:data:`crowdpref.contracts.PARTICIPANTS`),
what the preregistered filters (:mod:`crowdpref.filters`) read: how each participant ended, their
quality checks and their time on task. Written by the study exports; each export replaces its own
study's rows, so study 1 and study 2 share the file. Pseudonymous keys only."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from crowdpref.checks import is_check
from crowdpref.contracts import PARTICIPANTS
from crowdpref.runfolder import write_parquet
from crowdpref.store import EXCLUDED, SUBMITTED, OnboardingState, ParticipantState
from crowdpref.work_quality import time_on_task

FILE = "participants.parquet"
EXCLUDED_STATUS = "excluded"
SCREENED_OUT = "screened_out"  # the onboarding quiz turned them away before any work


def participants_frame(study: str, participants: Sequence[ParticipantState], participant_key: Callable[[str], str],
                       too_fast_seconds: float, has_checks: bool, onboarding: Sequence[OnboardingState] = (),
                       key_hashes: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The rows of one study (``study1`` / ``study2``), sorted by participant key.
    ``onboarding``: the study's onboarding records (:meth:`crowdpref.store.Store.onboarding_records`)
    and ``key_hashes`` (username -> key hash, :meth:`~crowdpref.store.Store.key_hash_of`) to join
    them to the participants; whoever the quiz screened out gets a row of their own, keyed by a
    pseudonym of their key hash (they have no account)."""
    timing = time_on_task(participants, too_fast_seconds, is_check=is_check).set_index("username")
    by_hash = {o.key_hash: o for o in onboarding}
    hashes = key_hashes or {}
    rows = []
    for p in participants:
        items = [a for a in p.assignments if not is_check(a.item_id)]
        answered = p.checks_answered
        rows.append({
            **_onboarding_columns(by_hash.get(hashes.get(p.username, ""))),
            "participant_key": participant_key(p.username),
            "study": study,
            "source": p.source,
            "status": EXCLUDED_STATUS if p.excluded_at is not None else p.status,
            "items_assigned": len(items),
            "items_submitted": sum(a.status in (SUBMITTED, EXCLUDED) for a in items),
            "checks_answered": answered,
            "checks_passed": p.checks_passed,
            "checks_verdict": (p.check_verdict or "unanswered") if has_checks else "none",
            "median_seconds_per_item": float(timing.loc[p.username, "median_seconds_per_item"]),
            "too_fast": bool(timing.loc[p.username, "too_fast"]),
        })
    for o in onboarding:
        if o.status == SCREENED_OUT:
            rows.append({
                "participant_key": participant_key(f"onboarding\x1f{o.key_hash}"), "study": study,
                "source": o.source, "status": SCREENED_OUT, "items_assigned": 0, "items_submitted": 0,
                "checks_answered": 0, "checks_passed": 0, "checks_verdict": "unanswered" if has_checks else "none",
                "median_seconds_per_item": float("nan"), "too_fast": False, **_onboarding_columns(o),
            })
    frame = pd.DataFrame(rows, columns=PARTICIPANTS)
    return frame.sort_values("participant_key").reset_index(drop=True)


NO_ONBOARDING: dict[str, object] = {"onboarding_attempts": 0, "onboarding_score": float("nan"),
                                    "onboarding_seconds": float("nan")}
"""The onboarding columns of a participant who had none."""


def _onboarding_columns(state: OnboardingState | None) -> dict[str, object]:
    if state is None:
        return dict(NO_ONBOARDING)
    score = float("nan") if state.best_score is None else float(state.best_score)
    return {"onboarding_attempts": state.attempts_used, "onboarding_score": score,
            "onboarding_seconds": float(state.seconds_spent)}


def write_participants(run_folder: Path, study: str, frame: pd.DataFrame) -> Path:
    """Replace ``study``'s rows of participants.parquet with ``frame`` (atomically)."""
    path = run_folder / FILE
    if path.exists():
        others = pd.read_parquet(path)
        others = others[others["study"] != study]
        frame = pd.concat([others, frame], ignore_index=True) if len(others) else frame
    frame = frame.sort_values(["study", "participant_key"]).reset_index(drop=True)
    return write_parquet(frame, path)
