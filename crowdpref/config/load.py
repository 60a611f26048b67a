"""Reading a study YAML file: :func:`load_study` (a file) and :func:`parse_study` (an
already-parsed mapping).

Every problem becomes a :class:`~crowdpref.errors.ConfigError` whose message is one line,
``FILE: FIELD: PROBLEM: FIX``: the file, the dotted field, what is wrong and how to fix it.
Duplicate YAML keys are errors (PyYAML would silently keep the last one); a pydantic
validation error is turned into that line here, naming the allowed fields, the closest
spelling or the default where they help.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from crowdpref.config.study import StudyConfig
from crowdpref.errors import ConfigError

__all__ = ["load_study", "parse_study"]


# --- loading -------------------------------------------------------------------------------
class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False):
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            continue  # SafeLoader reports unhashable keys itself
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first on line {seen[key]})", key_node.start_mark
            )
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _fmt_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith("["):
            out += str(part)
        elif part != "":
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The config model that holds the field at ``loc`` (for allowed-field lists)."""
    model: Any = StudyConfig
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        model = _inner_model(field.annotation)
        if model is None:
            return None
    return model


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _field_at(loc: tuple[Any, ...]) -> Any:
    """The pydantic FieldInfo at ``loc``, or None (list items, dict values, unknown)."""
    model = _model_at(loc[:-1]) if loc else None
    if model is None or not isinstance(loc[-1], str):
        return None
    return model.model_fields.get(loc[-1])


def _default_of(loc: tuple[Any, ...]) -> Any:
    field = _field_at(loc)
    if field is None or field.default_factory is not None:
        return None
    default = field.default
    return default if isinstance(default, (int, float, str)) and not isinstance(default, bool) else None


_TYPE_NAMES = {
    "int_type": "a whole number", "int_parsing": "a whole number", "int_from_float": "a whole number",
    "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "text", "list_type": "a list", "dict_type": "a mapping",
    "model_type": "a mapping", "model_attributes_type": "a mapping",
}


def _describe(err: dict[str, Any]) -> tuple[str, str]:
    """(problem, fix) for one pydantic error."""
    kind, ctx, loc = err["type"], err.get("ctx") or {}, err["loc"]
    value = err.get("input")
    last = str(loc[-1]) if loc else "field"
    if kind == "crowdpref":
        return ctx["problem"], ctx["fix"]
    if kind == "missing":
        return "is required", f"add `{last}:` with a value"
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        allowed = sorted(model.model_fields) if model else []
        close = difflib.get_close_matches(str(last), allowed, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else "remove it or rename it;"
        return "unknown field", f"{hint} allowed here: {', '.join(allowed)}"
    if kind in _TYPE_NAMES:
        want = _TYPE_NAMES[kind]
        example = _default_of(loc)
        if want == "a mapping":
            fix = f"write `key: value` lines indented under `{last}:`"
        elif want == "a list":
            fix = f"write one `- item` line per entry under `{last}:`"
        elif want == "text":
            fix = "quote the value, e.g. \"...\""
        elif isinstance(value, str) and _looks_numeric(value) and want != "true or false":
            fix = f"remove the quotes around {value}"
        elif example is not None:
            fix = f"write {want}, e.g. {example}"
        else:
            fix = f"write {want}"
        return f"must be {want} (got {_short(value)})", fix
    if kind == "literal_error":
        expected = ctx.get("expected", "")
        options = re.findall(r"'([^']*)'", expected)
        close = difflib.get_close_matches(str(value), options, n=1) if options else []
        hint = f"did you mean {close[0]!r}? " if close else ""
        field = _field_at(loc)
        nullable = " (or null)" if field is not None and field.default is None else ""
        return (f"must be one of {expected}{nullable} (got {_short(value)})",
                f"{hint}use one of {', '.join(options)}{nullable}")
    bounds = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"),
              "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}
    if kind in bounds:
        op, key = bounds[kind]
        limit = ctx.get(key)
        example = _default_of(loc)
        fix = f"use a value {op} {limit}" + (f" (default {example})" if example is not None else "")
        return f"must be {op} {limit} (got {_short(value)})", fix
    if kind in ("too_short", "string_too_short"):
        return f"is too short (got {_short(value)})", "give at least one entry / some text"
    if kind in ("too_long", "string_too_long"):
        return f"is too long (got {_short(value)})", "shorten it"
    msg = str(err.get("msg", "invalid value")).replace("\n", " ")
    return f"{msg} (got {_short(value)})", "fix the value"


def _format_error(exc: ValidationError, source: str) -> str:
    # unknown fields first: a typo also makes the intended field look missing
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    err = errors[0]
    loc = tuple(err["loc"])
    field_ = (err.get("ctx") or {}).get("field", "") if err["type"] == "crowdpref" else ""
    if field_:
        loc = loc + tuple(p for p in re.split(r"\.", field_) if p)
    problem, fix = _describe(err)
    more = f" (and {len(errors) - 1} more problem{'s' * (len(errors) > 2)})" if len(errors) > 1 else ""
    line = f"{source}: {_fmt_loc(loc)}: {problem}: {fix}{more}"
    return " ".join(line.split())  # one line, always


def parse_study(data: Any, source: str = "study config", base_dir: str | Path | None = None) -> StudyConfig:
    """Validate an already-parsed mapping; relative paths resolve against ``base_dir``.
    Raises :class:`ConfigError` with a one-line message starting with ``source``."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: (top level): must be a mapping of fields (got {type(data).__name__}): "
            "write `name: my-study` and the sections (questions:, study1:, ...) as top-level keys"
        )
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise ConfigError(f"{source}: {_short(bad[0])}: field names must be text: "
                          "use names such as study1 or seed")
    context = {"base_dir": Path(base_dir) if base_dir is not None else None}
    try:
        config = StudyConfig.model_validate(data, context=context)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc, source)) from None
    config._source = source
    return config


def load_study(path: str | Path) -> StudyConfig:
    """Read and validate a study YAML file.

    Every problem (missing or unreadable file, not UTF-8, not YAML, wrong shape, unknown
    field, wrong type, out-of-range value, inconsistent numbers) raises
    :class:`ConfigError` whose message is one line: ``FILE: FIELD: PROBLEM: FIX``.
    """
    shown = str(path)
    p = Path(path).expanduser()
    if not p.exists():
        raise ConfigError(f"{shown}: (file): study file not found: check the path "
                          f"(relative to {Path.cwd()})")
    if not p.is_file():
        raise ConfigError(f"{shown}: (file): not a file: give the path of a study .yaml file")
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{shown}: (file): cannot read ({exc.strerror}): check its permissions") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{shown}: (file): not UTF-8 text (byte 0x{raw[exc.start]:02x} on line "
                          f"{line}): save the file as UTF-8") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(file)"
        what = getattr(exc, "problem", None) or exc.__class__.__name__
        fix = ("keep only one of them" if "duplicate key" in what
               else "fix the syntax there (indentation, colons, quotes)")
        raise ConfigError(" ".join(f"{shown}: {where}: not valid YAML ({what}): {fix}".split())) from None
    return parse_study(data, source=shown, base_dir=p.parent)
