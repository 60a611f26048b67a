"""What every study-config model shares: strict scalar types, the slug rule, the base model and
the validation error that carries a field, a problem and a fix.

A validator raises :func:`_problem`; :mod:`crowdpref.config.load` turns it into the one-line
``FILE: FIELD: PROBLEM: FIX`` message of a :class:`~crowdpref.errors.ConfigError`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import AllowInfNan, BaseModel, ConfigDict, Strict, ValidationInfo
from pydantic_core import PydanticCustomError

__all__ = ["MAX_NAME_LEN", "SLUG_RE", "Bool", "Float", "Int", "Str", "slugify"]

# --- strict scalar types: YAML already gives typed values, so "10" or true is not a number --
Int = Annotated[int, Strict()]
Float = Annotated[float, Strict(), AllowInfNan(False)]  # ints are accepted as floats
Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict()]

SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
MAX_NAME_LEN = 40


def slugify(text: str) -> str:
    """``"Diversity and cultural differences"`` -> ``"diversity-and-cultural-differences"``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _problem(field: str, problem: str, fix: str) -> PydanticCustomError:
    """A validation error for ``field`` (dotted, relative to the model raising it)."""
    return PydanticCustomError(
        "crowdpref", "{problem}: {fix}", {"field": field, "problem": problem, "fix": fix}
    )


def _check_slug(field: str, value: str, what: str) -> str:
    if not SLUG_RE.fullmatch(value) or len(value) > MAX_NAME_LEN:
        suggestion = slugify(value)[:MAX_NAME_LEN].strip("-") or "my-study"
        raise _problem(
            field,
            f"must be a slug of lowercase letters, digits and single dashes, at most "
            f"{MAX_NAME_LEN} characters (got {value!r})",
            f"use {what} such as {suggestion!r}",
        )
    return value


def _resolve_path(value: Any, info: ValidationInfo, field: str) -> Path:
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise _problem(field, f"must be a file path (got {value!r})", "write the path as text")
    path = Path(value).expanduser()
    base = (info.context or {}).get("base_dir") if info.context else None
    if not path.is_absolute() and base is not None:
        path = Path(base) / path
    return path


class _Section(BaseModel):
    """Base for every config model: unknown keys are errors; field docstrings are the docs."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_default=True)

