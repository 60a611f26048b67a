"""Background work that gives way to people: wait for a pause in arrivals (or deliveries)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for_quiet(idle: Callable[[], float], quiet_s: float, patience_s: float) -> bool:
    """Wait until ``idle()`` (seconds since the last arrival) reaches ``quiet_s``, at most
    ``patience_s``. True when the pause came; False when the patience ran out first."""
    deadline = time.monotonic() + patience_s
    while True:
        gap = idle()
        if gap >= quiet_s:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(max(0.05, min(left, quiet_s - gap, 1.0)))
