"""The percentile and the time format every benchmark prints with (claims.py, portal.py,
potato_peer.py), so their tables compare like with like."""

from __future__ import annotations

import math
from collections.abc import Sequence


def pct(values: Sequence[float], p: float) -> float:
    """Percentile by linear interpolation (numpy's default); NaN values (not measured) are left
    out, infinite ones (never happened: a participant who gave up) count as the slowest."""
    xs = sorted(v for v in values if not math.isnan(v))
    if not xs:
        return math.nan
    k = (len(xs) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    if math.isinf(xs[hi]):
        return math.inf
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def fmt(seconds: float) -> str:
    """Seconds as people read them: ``never`` for infinity, ``-`` for not measured."""
    if math.isinf(seconds):
        return "never"
    return "-" if math.isnan(seconds) else f"{seconds:.2f} s"
