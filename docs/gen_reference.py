"""Generate the reference pages at build time (mkdocs-gen-files), so they cannot go stale.

- ``reference/study-config.md``: every field of the study config, from the pydantic models of
  :mod:`crowdpref.config` (path, type, default, the field's docstring);
- ``reference/settings.md``: every machine-level setting, from :class:`crowdpref.settings.Settings`
  (environment variables, default, description);
- ``reference/cli.md``: every command of ``crowdpref`` with its arguments and options, from the
  typer app :data:`crowdpref.cli.app`;
- ``reference/release-columns.md``: every file of a release and its columns, from the column
  schemas the release itself is built with;
- ``reference/api/``: one mkdocstrings page per public module of ``crowdpref/``, listed from the
  package tree (a new module gets its page without editing anything), plus the ``SUMMARY.md``
  that mkdocs-literate-nav turns into the API section of the navigation.

Run by ``mkdocs build`` (see ``mkdocs.yml``); nothing here is written to the source tree. Each
page's text comes from a plain function (``settings_page()``, ``cli_page()``, ...) that the tests
import to check the generated tables against the code; importing the module writes nothing.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "crowdpref"
#: Not library API: the alembic migration scripts run by the store, module entry points.
SKIP_PARTS = {"migrations", "__main__"}

_ROLE = re.compile(r":(?:py:)?(?:func|data|class|mod|meth|attr|exc|obj|const):`~?([^`]+)`")
_CODE = re.compile(r"(``.+?``|`[^`]+`)")


def prose(text: str | None) -> str:
    """A docstring made Markdown: dedented, Sphinx roles as code, ``::`` blocks as code."""
    if not text:
        return ""
    text = _ROLE.sub(r"`\1`", inspect.cleandoc(text))
    return re.sub(r"::\n", ":\n", text)


def cell(text: Any) -> str:
    """One Markdown table cell: a single line, pipes escaped, ``<``/``>`` escaped outside code."""
    text = " ".join(prose(str(text)).split()) if text is not None else ""
    parts = _CODE.split(text)
    for i in range(0, len(parts), 2):  # even parts are outside code spans
        parts[i] = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return "".join(parts).replace("|", "\\|")


def code(value: Any) -> str:
    text = str(value)
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows), ""]


# --- types and defaults of pydantic fields --------------------------------------------------
def type_text(annotation: Any) -> str:
    """A readable type: ``Annotated`` unwrapped, ``Literal`` as its values, unions with ``|``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin is typing.Literal:
        return " \\| ".join(code(repr(a).replace("'", '"')) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(type_text(a) for a in args)
    if origin in (list, tuple, set, frozenset):
        return f"list of {type_text(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping of {type_text(args[0])} to {type_text(args[1])}" if args else "mapping"
    if annotation is type(None):
        return code("null")
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return f"{annotation.__name__} (see below)"
        return {"str": "text", "bool": "boolean", "int": "integer", "float": "number",
                "Path": "path", "PosixPath": "path", "SecretStr": "secret text"}.get(
            annotation.__name__, annotation.__name__)
    return cell(str(annotation).replace("typing.", ""))


def bounds_text(field: FieldInfo) -> str:
    marks = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "at least", "max_length": "at most"}
    found = []
    for meta in field.metadata:
        for attr, mark in marks.items():
            value = getattr(meta, attr, None)
            if value is not None:
                number = f"{value:,}" if isinstance(value, int) else f"{value:g}"
                found.append(f"{mark} {number}" + (" items" if "length" in attr else ""))
    return ", ".join(found)


def default_value(field: FieldInfo) -> Any:
    if field.default_factory is not None:
        return field.default_factory()  # type: ignore[call-arg]
    return field.default


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "*required*"
    value = default_value(field)
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "the section's defaults"
    if isinstance(value, list) and value and isinstance(value[0], BaseModel):
        slugs = [getattr(v, "slug", None) for v in value]
        return f"{len(value)} entries" + (f": {', '.join(code(s) for s in slugs[:3])}, …" if all(slugs) else "")
    if isinstance(value, bool):
        return code(str(value).lower())
    if isinstance(value, Path):
        return code(value.as_posix())
    if isinstance(value, dict):
        text = ", ".join(f"{k}: {v}" for k, v in value.items())
        return code("{" + text + "}")
    if isinstance(value, list):
        return code("[" + ", ".join(str(v) for v in value) + "]")
    return code(value if not isinstance(value, str) else f'"{value}"')


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (``X``, ``list[X]``, ``X | None``), or None for a plain value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = model_of(arg)
        if found is not None:
            return found
    return None


# --- the study config -----------------------------------------------------------------------
def study_config_page() -> tuple[str, list[str]]:
    from crowdpref.config import StudyConfig

    missing: list[str] = []
    out = [
        "# Study config",
        "",
        "Every field of a study YAML (`studies/*.yaml`), generated from the pydantic models of "
        "[`crowdpref.config`][crowdpref.config] when the docs are built. Every "
        "section except `name` is optional; the defaults reproduce the published Prolific x "
        "Argilla social-reasoning study. Unknown keys are errors, and values are typed strictly "
        "(`\"10\"` is not a number). Check a file with `crowdpref validate STUDY.yaml`.",
        "",
    ]

    def section(prefix: str, model: type[BaseModel], level: int, title: str) -> None:
        rows, nested = [], []
        for name, field in model.model_fields.items():
            path = f"{prefix}{name}"
            sub = model_of(field.annotation)
            description = field.description or (prose(sub.__doc__) if sub is not None else "")
            if not description:
                missing.append(path)
            kind = type_text(field.annotation)
            bounds = bounds_text(field)
            if bounds:
                kind += f" ({bounds})"
            if sub is not None:
                many = typing.get_origin(field.annotation) in (list, tuple)
                nested.append((f"{path}[]." if many else f"{path}.", sub, f"`{path}`" + ("[]" if many else "")))
            rows.append([code(path), kind, default_text(field), cell(description) or "—"])
        out.extend([f"{'#' * level} {title}", ""])
        doc = prose(model.__doc__)
        if doc and model is not StudyConfig:
            out.extend([doc, ""])
        out.extend(table(["Field", "Type", "Default", "Description"], rows))
        for sub_prefix, sub_model, sub_title in nested:
            section(sub_prefix, sub_model, min(level + 1, 4), f"{sub_title}: {sub_model.__name__}")

    top = {n: f for n, f in StudyConfig.model_fields.items()}
    scalars = [n for n, f in top.items() if model_of(f.annotation) is None]
    out += ["## Top level", "", prose(StudyConfig.__doc__), ""]
    rows = []
    for name in scalars:
        field = top[name]
        if not field.description:
            missing.append(name)
        kind = type_text(field.annotation)
        if bounds_text(field):
            kind += f" ({bounds_text(field)})"
        rows.append([code(name), kind, default_text(field), cell(field.description) or "—"])
    out += table(["Field", "Type", "Default", "Description"], rows)
    for name, field in top.items():
        sub = model_of(field.annotation)
        if sub is not None:
            section(f"{name}.", sub, 2, f"`{name}`: {sub.__name__}")
    if missing:
        out += ["## Fields without a description", "",
                "These fields have no docstring yet; the table shows `—` for them: "
                + ", ".join(code(m) for m in missing) + ".", ""]
    return "\n".join(out), missing


# --- the settings ---------------------------------------------------------------------------
def settings_page() -> tuple[str, list[str]]:
    from crowdpref import settings as settings_module
    from crowdpref.settings import DEFAULT_SETTINGS_FILE, Settings

    missing: list[str] = []
    rows = []
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        names = list(getattr(alias, "choices", None) or ([alias] if alias else []))
        if not field.description:
            missing.append(name)
        rows.append([code(name) + "<br>" + "<br>".join(code(n) for n in names),
                     type_text(field.annotation), default_text(field), cell(field.description) or "—"])
    out = [
        "# Settings",
        "",
        prose(settings_module.__doc__),
        "",
        f"In the YAML settings file (`$CROWDPREF_SETTINGS` or `./{DEFAULT_SETTINGS_FILE}`) a "
        "setting's key is its name (the first line of the first column); in the environment it is "
        "any of the names below it, the first taking precedence. Secrets (*secret text*) never "
        "print. This table is generated from "
        "[`crowdpref.settings.Settings`][crowdpref.settings.Settings] when the docs are built.",
        "",
        *table(["Setting / environment", "Type", "Default", "Description"], rows),
    ]
    if missing:
        out += ["## Settings without a description", "",
                "These settings have no description yet (`—` above): "
                + ", ".join(code(m) for m in missing) + ".", ""]
    return "\n".join(out), missing


# --- the command line -----------------------------------------------------------------------
def cli_page() -> str:
    import typer.main

    from crowdpref.cli import app

    group = typer.main.get_command(app)
    click = importlib_click(group)
    root = click.Context(group, info_name="crowdpref")
    out = ["# Command line", "",
           "Every command of `crowdpref`, generated from its typer app "
           "([`crowdpref.cli`][crowdpref.cli]) when the docs are built; `crowdpref COMMAND "
           "--help` prints the same.", "", prose(group.help), "", "| Command | What it does |",
           "|---|---|"]
    commands = []
    for name in group.list_commands(root):
        command = group.get_command(root, name)
        if command is None or command.hidden:
            continue
        commands.append((name, command))
        first = prose(command.help).split("\n\n")[0] if command.help else ""
        out.append(f"| [`{name}`](#{name}) | {cell(first)} |")
    out.append("")
    for name, command in commands:
        ctx = click.Context(command, info_name=name, parent=root)
        usage = command.get_usage(ctx).removeprefix("Usage: ")
        out += [f"## `{name}` {{#{name}}}", "", "```text", usage, "```", "", prose(command.help), ""]
        arguments, options = [], []
        for param in command.get_params(ctx):
            if getattr(param, "hidden", False) or param.name == "help":
                continue
            record = param.get_help_record(ctx)
            decl, help_text = record if record else (param.name, "")
            (arguments if param.param_type_name == "argument" else options).append(
                [code(decl), cell(help_text) or "—"])
        if arguments:
            out += ["**Arguments**", "", *table(["Argument", "Description"], arguments)]
        if options:
            out += ["**Options**", "", *table(["Option", "Description"], options)]
    return "\n".join(out)


def importlib_click(command: Any) -> Any:
    """The click module the typer app's commands come from (typer may vendor its own)."""
    import importlib

    return importlib.import_module(type(command).__mro__[1].__module__.rsplit(".", 1)[0])


# --- the release's columns ------------------------------------------------------------------
def release_columns_page() -> str:
    from crowdpref.config import DETOXIFY_LABELS, StudyConfig
    from crowdpref.release.schema import release_subsets

    config = StudyConfig(name="example")
    subsets = release_subsets(config, DETOXIFY_LABELS[config.screening.model], filtered=True)
    out = [
        "# Release columns",
        "",
        "Every file of a published release and its columns, generated when the docs are built from "
        "the column declarations the release itself is built with "
        "([`crowdpref.release.schema`][crowdpref.release.schema]), so this page, the dataset card "
        "and the Parquet files cannot disagree. Values that depend on the study config (the "
        "categories, the scale midpoint, the too-fast thresholds, the screening labels) are shown "
        "for the default config.",
        "",
        "Each configuration is one Parquet file with one `train` split: "
        "`load_dataset(folder)` gives the preferences, `load_dataset(folder, \"ratings\")` the "
        "ratings, and so on. The release folder also holds the dataset card (`README.md`). "
        "The `*_raw` configurations exist when the preregistered filters ran.",
        "",
        *table(["Configuration", "File", "Read from (run folder)", "Always there"],
               [[f"[`{s.name}`](#{s.name})", code(s.data_path), code(s.source_file),
                 "yes" if s.required else "no"] for s in subsets]),
    ]
    for s in subsets:
        out += [f"## `{s.name}`: {s.title} {{#{s.name}}}", "", cell(s.description), "",
                f"File: {code(s.data_path)}, read from {code(s.source_file)} in the run folder"
                + (" (only the rows the preregistered filters kept)." if s.kept_only else "."), "",
                *table(["Column", "Type", "Allowed values", "Meaning"],
                       [[code(c.name), c.dtype, cell(c.allowed), cell(c.meaning)] for c in s.columns])]
    return "\n".join(out)


# --- the library API ------------------------------------------------------------------------
def api_modules() -> Iterator[tuple[str, Path]]:
    """(dotted name, doc path) of every public module and package under ``crowdpref/``."""
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
            doc = Path(*parts, "index.md")
        else:
            doc = Path(*parts).with_suffix(".md")
        if any(p in SKIP_PARTS or (p.startswith("_") and p != "__init__") for p in parts):
            continue
        # a module folder without __init__.py is not a package
        if not all((ROOT / Path(*parts[:i]) / "__init__.py").exists() for i in range(1, len(parts))):
            continue
        yield ".".join(parts), doc


def api_pages() -> None:
    import mkdocs_gen_files

    nav = mkdocs_gen_files.Nav()
    for dotted, doc in api_modules():
        parts = tuple(dotted.split("."))
        nav[parts[1:] or parts] = doc.as_posix()  # "crowdpref" first, then its modules flat
        with mkdocs_gen_files.open(f"reference/api/{doc.as_posix()}", "w") as f:
            f.write(f"::: {dotted}\n")
    with mkdocs_gen_files.open("reference/api/SUMMARY.md", "w") as f:
        f.writelines(nav.build_literate_nav())


def main() -> None:
    import logging

    import mkdocs_gen_files

    log = logging.getLogger("mkdocs.plugins.gen_reference")
    for name, make in (("study-config", study_config_page), ("settings", settings_page)):
        text, missing = make()
        with mkdocs_gen_files.open(f"reference/{name}.md", "w") as f:
            f.write(text)
        if missing:  # a note, not a warning: --strict must not fail on a missing docstring
            log.info("reference/%s.md: %d field(s) without a description: %s", name, len(missing),
                     ", ".join(missing))
    with mkdocs_gen_files.open("reference/cli.md", "w") as f:
        f.write(cli_page())
    with mkdocs_gen_files.open("reference/release-columns.md", "w") as f:
        f.write(release_columns_page())
    api_pages()


# mkdocs-gen-files runs this file with runpy.run_path (``__name__`` is "<run_path>"); an import
# (the tests) only defines the functions above.
if __name__ in ("<run_path>", "__main__"):
    main()
