"""The launch section of a Prolific study (``prolific.studyN.launch``): how its places open
once it is published. :mod:`crowdpref.launch_pacing` applies it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from crowdpref.config.base import Float, Int, _Section


class LaunchConfig(_Section):
    """How a published study's places open (``prolific.studyN.launch``; the how-to's "Paced
    places" section explains it)."""

    mode: Literal["paced", "all"] = "paced"
    """``paced`` (the default): the first publish opens one step of places, and each collection
    run and ``sync-prolific`` opens more as the people who took them arrive in the portal, at
    most one step at a time and one step per ``step_seconds``, up to the places the work needs
    and never past ``max_places``. ``all``: every place at once (a study small enough for the
    server, or a server measured to take it)."""
    step: Int | None = Field(None, ge=1)
    """Places per step; None (the default): the server's measured capacity (arrivals per second
    at p95 < 1 s, written to ``<state>/capacity.json`` by the pre-flight's dress rehearsal)
    times ``step_seconds``; without a measurement 1 arrival/s is assumed, so 2 places.
    ``crowdpref validate`` warns when a step set here is above what the capacity allows."""
    step_seconds: Float = Field(2.0, gt=0, le=3600)
    """The least time between two steps: the pace never opens more than ``step`` places per
    ``step_seconds``. Prolific's crowd may take a whole step at once, and a server of capacity
    c serves such a burst of s people in about s / c seconds: the default of 2 s keeps a step's
    last person within about 2 s of their first item (benchmarks/paced_launch.py)."""
    max_concurrent_submissions: Int | None = Field(None, ge=1)
    """Prolific's ``submissions_config.max_concurrent_submissions``: the most people holding the
    study at once (reserved or active); None (the default): no limit (Prolific's -1). Sent when
    the study is created (a study already created keeps its own). It caps people in progress,
    not arrivals per second."""
