"""No dead public code, read from the source with :mod:`ast` (nothing is imported).

Every public (no leading underscore) module-level function and class, and every public method of
a module-level class, in ``crowdpref/``, ``services/`` and ``deployments/`` must be referenced by
name somewhere in the code that runs: ``crowdpref/`` (the CLI included), ``tasks/``, ``flows/``,
``services/`` or ``deployments/``. Tests, benchmarks and docs do not count as callers. A
reference is a name (``f``), an attribute (``x.f``) or an import (``from m import f``) anywhere
but the definition itself; like vulture, it matches by name, so a name shared with a live one
hides a dead one (it can miss dead code, never flag live code).

Not counted as dead, by rule:

- functions registered by a decorator (``@app.command`` for a typer command, ``@app.get`` /
  ``@app.post`` / ``@app.exception_handler`` for a route, pydantic's ``@field_validator`` /
  ``@model_validator``, SQLAlchemy's ``@event.listens_for``), and a class registered by a
  decorator (``@SearchEngine.register``) together with its methods (the registry calls them);
- ``upgrade`` / ``downgrade`` in an Alembic revision file (Alembic calls them by name).

Everything else that nothing calls is either removed or named in :data:`ALLOWED` with its reason.
An entry that is referenced again, or no longer exists, fails the test too, so the list stays
true and short.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("crowdpref", "services", "deployments")
CALLERS = ("crowdpref", "tasks", "flows", "services", "deployments")

REGISTERING_DECORATORS = frozenset(
    {"command", "get", "post", "exception_handler", "field_validator", "model_validator", "listens_for", "register"}
)
MIGRATIONS = "crowdpref/store/migrations/versions/"

# "path::Qualified.name" -> why nothing in the code calls it, yet it stays.
ALLOWED: dict[str, str] = {
    "crowdpref/settings.py::Settings.settings_customise_sources": (
        "pydantic-settings hook: BaseSettings calls it by name to order the settings sources"
    ),
    "crowdpref/settings.py::_YamlFileSource.get_field_value": (
        "abstract method of pydantic-settings' PydanticBaseSettingsSource: must be defined for the "
        "source to be instantiable"
    ),
    "crowdpref/simulation/prolific_server.py::FakeProlific.wait_for_deliveries": (
        "the fake Prolific's API for the tests that drive it (crowdpref/simulation is the fakes' home; "
        "tests wait for its webhook deliveries)"
    ),
    "crowdpref/argilla_client.py::ArgillaOwner.delete_webhook": (
        "benchmarks/full_scale.py stands the Argilla webhook down with it (argilla_hooks.stand_down)"
    ),
    "crowdpref/portal/prepare.py::Preparer.wait_idle": (
        "for the tests that drive the portal: they wait until the workspaces it prepares after the "
        "entry (admission first) are ready before they look in Argilla"
    ),
    "crowdpref/portal/argilla_session.py::OwnerSessions.auth_flow": (
        "httpx.Auth hook: httpx calls it by name for every request of a client built with the auth"
    ),
    "crowdpref/portal/pages.py::_Layout.preprocess": (
        "Jinja2 Extension hook: the environment calls it on every template source"
    ),
    "deployments/deploy.py::set_schedules_active": (
        "API deployments/README.md names for users (toggle a deployment's schedules from Python)"
    ),
    "deployments/deploy.py::serve_in_background": (
        "API deployments/README.md names for users (prefect-serve as a background service)"
    ),
    "deployments/deploy.py::stop_serve": "API deployments/README.md names for users (stops prefect-serve)",
    "deployments/deploy.py::stop_worker": "API deployments/README.md names for users (stops prefect-worker)",
}


def python_files(folders: Iterable[str]) -> Iterator[Path]:
    for folder in folders:
        yield from sorted((ROOT / folder).rglob("*.py"))


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _registered(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> bool:
    return any(_decorator_name(d) in REGISTERING_DECORATORS for d in node.decorator_list)


def public_definitions(path: Path, rel: str) -> Iterator[tuple[str, str, int]]:
    """(name, qualified name, line) of each public definition in ``path`` that no rule exempts."""
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not isinstance(node, defs) or _registered(node):
            continue
        if rel.startswith(MIGRATIONS) and node.name in {"upgrade", "downgrade"}:
            continue
        if not node.name.startswith("_"):
            yield node.name, node.name, node.lineno
        if isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, defs) and not sub.name.startswith("_") and not _registered(sub):
                    yield sub.name, f"{node.name}.{sub.name}", sub.lineno


def referenced_names(paths: Iterable[Path]) -> set[str]:
    """Every name the code in ``paths`` uses: names, attributes and imported names."""
    names: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.alias):
                names.add(node.name.rsplit(".", 1)[-1])
    return names


def unreferenced(root: Path = ROOT, scanned: Iterable[str] = SCANNED, callers: Iterable[str] = CALLERS) -> list[str]:
    """``path::Qualified.name`` of each public definition under ``scanned`` that nothing under
    ``callers`` references."""
    used = referenced_names(p for folder in callers for p in sorted((root / folder).rglob("*.py")))
    dead = []
    for folder in scanned:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            dead += [f"{rel}::{qual}" for name, qual, _ in public_definitions(path, rel) if name not in used]
    return dead


def test_no_public_definition_is_dead() -> None:
    dead = [d for d in unreferenced() if d not in ALLOWED]
    assert not dead, (
        "public definitions nothing in crowdpref/, tasks/, flows/, services/ or deployments/ "
        "references (tests do not count): remove them, or add them to ALLOWED in "
        f"tests/unit/test_dead_code.py with the reason they stay: {dead}"
    )


def test_the_allow_list_is_current() -> None:
    stale = sorted(set(ALLOWED) - set(unreferenced()))
    assert not stale, f"ALLOWED names definitions that are now referenced or gone; drop them: {stale}"


def test_the_scan_sees_a_dead_function(tmp_path: Path) -> None:
    """The rules themselves, on a tree of four files: a function only a test calls is dead; one
    the code calls, a typer command and a pydantic validator are not."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "lib" / "mod.py").write_text(
        "import typer\n"
        "app = typer.Typer()\n"
        "def used():\n    return 1\n"
        "def only_tests_call_me():\n    return 2\n"
        "@app.command()\n"
        "def cli_command():\n    used()\n"
        "class Model:\n"
        "    @field_validator('x')\n"
        "    def _check(cls, v):\n        return v\n"
        "    @model_validator(mode='after')\n"
        "    def check_all(self):\n        return self\n"
        "    def method_nobody_calls(self):\n        return Model\n",
        encoding="utf-8",
    )
    (tmp_path / "tests" / "test_mod.py").write_text(
        "from lib.mod import only_tests_call_me, Model\n"
        "def test_it():\n    assert only_tests_call_me() == 2 and Model().method_nobody_calls()\n",
        encoding="utf-8",
    )
    assert unreferenced(tmp_path, ("lib",), ("lib",)) == [
        "lib/mod.py::only_tests_call_me",
        "lib/mod.py::Model.method_nobody_calls",
    ]
