"""Open a study's collection from its config path: the one place that knows which spec serves
which study key, so tasks can take plain values (a path, a key) that Prefect hashes and persists."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from crowdpref.collection import Collection
from crowdpref.config import load_study
from crowdpref.settings import Settings, load_settings

StudyKey = Literal["study1", "study2"]


def open_collection(study: str | Path, key: StudyKey, settings: Settings | None = None) -> Collection:
    config = load_study(study)
    settings = settings or load_settings()
    if key == "study1":
        from crowdpref.study1 import open_collection as open_study1

        return open_study1(config, settings)
    from crowdpref.study2 import open_collection as open_study2

    return open_study2(config, settings)
