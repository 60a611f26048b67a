"""The project's import graph, read from the source with :mod:`ast` (nothing is imported):

- no import cycle among the modules of ``crowdpref/``, ``tasks/``, ``flows/``, ``deployments/``
  and ``services/``, counting the imports inside functions too: the two cycles issue 18 removed
  (``crowdpref.aggregation`` <-> ``crowdpref.reliability``, ``tasks.collection`` <->
  ``tasks.prolific``) each had one side inside a function, so a module-level graph did not see
  them;
- the library ``crowdpref/`` never imports Prefect, ``tasks``, ``flows`` or ``deployments`` at
  module level (a function may import them when it is called, as the CLI does).

Imports under ``if TYPE_CHECKING:`` never count (they do not run). Module level means what runs
when the module is imported, including module-level ``if``/``try``/``with`` blocks and class
bodies. ``from package import name`` counts as an import of the submodule ``package.name`` when
there is one, else of ``package``. Importing ``a.b.c`` also runs the ``__init__`` of ``a`` and
``a.b``, so it counts as importing those packages too, unless the importing module is inside them
(then they are already being imported).
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP_LEVEL = ("crowdpref", "tasks", "flows", "deployments", "services")
LIBRARY_MUST_NOT_IMPORT = ("prefect", "tasks", "flows", "deployments")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    modules = {}
    for top in TOP_LEVEL:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "__pycache__" not in path.parts:
                modules[module_name(path)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(body: list[ast.stmt], in_functions: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of a module with this body that run when it is imported, and with
    ``in_functions`` those inside its functions and methods too."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if in_functions:
                yield from imports(node.body, in_functions)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from imports(node.body, in_functions)
            yield from imports(node.orelse, in_functions)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody,
                          *(handler.body for handler in node.handlers)):
                yield from imports(block, in_functions)
        elif isinstance(node, (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While,
                               ast.ClassDef)):
            yield from imports(node.body, in_functions)
            yield from imports(getattr(node, "orelse", []), in_functions)


def imported_names(module: str, path: Path, known: Collection[str],
                   in_functions: bool = False) -> list[str]:
    """Dotted names of what ``module`` imports at module level (with ``in_functions``: anywhere
    but under ``TYPE_CHECKING``), submodules resolved against ``known``, relative imports made
    absolute."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = []
    for node in imports(ast.parse(path.read_text(encoding="utf-8")).body, in_functions):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join([*anchor, *([base] if base else [])])
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            names.append(submodule if submodule in known else base)
    return names


def import_graph(in_functions: bool = True) -> dict[str, set[str]]:
    """module -> the project modules it imports (with the packages whose ``__init__`` that runs,
    see the module docstring); ``in_functions`` False: at module level only."""
    modules = project_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for module, path in modules.items():
        own_packages = {module.rsplit(".", i)[0] for i in range(1, module.count(".") + 1)}
        for name in imported_names(module, path, modules, in_functions):
            parts = name.split(".")
            # the deepest project module the name reaches (an attribute import ends above it)
            while parts and ".".join(parts) not in modules:
                parts.pop()
            if not parts:
                continue
            graph[module].add(".".join(parts))
            for depth in range(1, len(parts)):
                parent = ".".join(parts[:depth])
                if parent in modules and parent not in own_packages:
                    graph[module].add(parent)
        graph[module].discard(module)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None (iterative depth-first search)."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path = [start]
        pending = [iter(sorted(graph[start]))]
        while pending:
            nxt = next(pending[-1], None)
            if nxt is None:
                done.add(path.pop())
                pending.pop()
            elif nxt in path:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in done:
                path.append(nxt)
                pending.append(iter(sorted(graph[nxt])))
    return None


def test_the_graph_is_read() -> None:
    graph = import_graph()
    assert len(graph) > 50
    assert "crowdpref.aggregation.pairs" in graph["crowdpref.aggregation.stage"]
    assert "crowdpref.aggregation" in graph["tasks.aggregation"]  # the package's __init__ runs
    assert "crowdpref.aggregation.pairs" in graph["crowdpref.aggregation.reliability"]
    # the CLI (the package crowdpref.cli and its command modules) imports flows inside its commands only
    at_module_level = import_graph(False)
    cli = [name for name in graph if name == "crowdpref.cli" or name.startswith("crowdpref.cli.")]
    assert "crowdpref.cli.runs" in cli
    assert any(name.startswith("flows.") for module in cli for name in graph[module])
    assert not any(name.startswith("flows.") for module in cli for name in at_module_level[module])


def test_find_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"b"}, "a": set(), "b": {"c"}, "c": {"b"}}) == ["b", "c", "b"]


def test_no_import_cycles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_library_imports_no_orchestration_at_module_level() -> None:
    modules = project_modules()
    offenders = []
    for module, path in modules.items():
        if module.split(".")[0] != "crowdpref":
            continue
        for name in imported_names(module, path, modules):
            if name.split(".")[0] in LIBRARY_MUST_NOT_IMPORT:
                offenders.append(f"{module} imports {name}")
    assert not offenders, "; ".join(offenders)


def test_the_public_api_resolves_from_its_home_and_import_crowdpref_stays_cheap():
    import subprocess
    import sys

    import crowdpref

    for name in crowdpref.__all__:
        value = getattr(crowdpref, name)
        if name != "__version__":
            home = crowdpref._HOMES[name]
            assert getattr(importlib.import_module(home), name) is value, name
    with pytest.raises(AttributeError):
        crowdpref.no_such_name  # noqa: B018
    loaded = subprocess.run([sys.executable, "-c", "import crowdpref, sys; print(sorted(sys.modules))"],
                            capture_output=True, text=True, check=True).stdout
    assert "'pandas'" not in loaded and "'sqlalchemy'" not in loaded
