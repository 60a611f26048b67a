"""How the dataset card and the Prefect artifacts write values in markdown: numbers, missing
values ("not available"), table cells."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["NA", "cell", "fmt", "lower_first"]

NA = "not available"
"""What the card says for a figure it does not have."""


def fmt(value: Any) -> str:
    """A value as the card shows it: None or NaN -> :data:`NA`, booleans as yes/no, floats with
    at most three decimals, a collection as its size."""
    if value is None:
        return NA
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return NA
        return f"{value:.3f}".rstrip("0").rstrip(".") if value % 1 else f"{value:.0f}"
    if isinstance(value, (list, tuple, set)):
        return str(len(value))
    return str(value)


def lower_first(text: str) -> str:
    """``text`` with its first letter in lower case (a scale label inside a sentence)."""
    return text[:1].lower() + text[1:]


def cell(text: str) -> str:
    """``text`` safe inside a markdown table cell (pipes escaped, one line)."""
    return text.replace("|", "\\|").replace("\n", " ")
