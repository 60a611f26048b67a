"""participants.parquet: one row per participant per study (:data:`crowdpref.contracts.PARTICIPANTS`),
what the preregistered filters (:mod:`crowdpref.filters`) read: how each participant ended, their
quality checks and their time on task. Written by the study exports; each export replaces its own
study's rows, so study 1 and study 2 share the file. Pseudonymous keys only."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from crowdpref.checks import is_check
from crowdpref.contracts import PARTICIPANTS
from crowdpref.runfolder import write_parquet
from crowdpref.store import EXCLUDED, SUBMITTED, ParticipantState
from crowdpref.work_quality import time_on_task

FILE = "participants.parquet"
EXCLUDED_STATUS = "excluded"


def participants_frame(study: str, participants: Sequence[ParticipantState], participant_key: Callable[[str], str],
                       too_fast_seconds: float, has_checks: bool) -> pd.DataFrame:
    """The rows of one study (``study1`` / ``study2``), sorted by participant key."""
    timing = time_on_task(participants, too_fast_seconds, is_check=is_check).set_index("username")
    rows = []
    for p in participants:
        items = [a for a in p.assignments if not is_check(a.item_id)]
        answered = p.checks_answered
        rows.append({
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
    frame = pd.DataFrame(rows, columns=PARTICIPANTS)
    return frame.sort_values("participant_key").reset_index(drop=True)


def write_participants(run_folder: Path, study: str, frame: pd.DataFrame) -> Path:
    """Replace ``study``'s rows of participants.parquet with ``frame`` (atomically)."""
    path = run_folder / FILE
    if path.exists():
        others = pd.read_parquet(path)
        others = others[others["study"] != study]
        frame = pd.concat([others, frame], ignore_index=True) if len(others) else frame
    frame = frame.sort_values(["study", "participant_key"]).reset_index(drop=True)
    return write_parquet(frame, path)
