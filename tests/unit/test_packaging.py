"""The package's metadata: every Python its dependencies support can install it, and nothing
specific to these machines (the local torch wheel) is in it - that lives in constraints.txt."""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError, metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
PYTHONS = [f"3.{minor}" for minor in range(8, 16)]


def _dependency_pythons() -> tuple[list[str], dict[str, str]]:
    """The Python versions every direct dependency (as installed here) declares support for."""
    declared: dict[str, str] = {}
    for line in PROJECT["dependencies"]:
        name = Requirement(line).name
        try:
            declared[name] = metadata(name).get("Requires-Python") or ""
        except PackageNotFoundError:  # pragma: no cover - the venv installs them all
            pytest.fail(f"{name} is a dependency but not installed")
    allowed = [v for v in PYTHONS if all(v in SpecifierSet(spec) for spec in declared.values())]
    return allowed, declared


def test_requires_python_covers_every_python_the_dependencies_support() -> None:
    allowed, declared = _dependency_pythons()
    ours = SpecifierSet(PROJECT["requires-python"])
    assert allowed, declared
    refused = [v for v in allowed if v not in ours]
    assert not refused, f"requires-python {ours} refuses {refused}, which every dependency supports"
    # and it does not promise a Python some dependency refuses
    promised = [v for v in PYTHONS if v in ours and v not in allowed and v < allowed[0]]
    assert not promised, f"requires-python {ours} admits {promised}, which a dependency refuses"


def test_no_machine_specific_pin_in_the_package_metadata() -> None:
    lines = [*PROJECT["dependencies"], *(d for ds in PROJECT["optional-dependencies"].values() for d in ds)]
    for line in lines:
        requirement = Requirement(line)
        assert requirement.url is None, f"{line}: a direct URL or local file in the package metadata"
    torch = next(Requirement(line) for line in PROJECT["dependencies"] if Requirement(line).name == "torch")
    assert not torch.specifier, "the torch build of these machines is pinned in constraints.txt only"
    constraints = [Requirement(line) for line in (REPO / "constraints.txt").read_text().splitlines()
                   if line.strip() and not line.startswith("#")]
    assert any(c.name == "torch" and c.specifier for c in constraints)


def test_every_template_ships_as_package_data() -> None:
    """The portal's pages and the dataset card render from Jinja2 templates inside the package:
    each one must match a package-data pattern, or an installed crowdpref has no pages."""
    from fnmatch import fnmatch

    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    templates = sorted((REPO / "crowdpref").glob("**/templates/*"))
    assert len(templates) > 10
    for path in templates:
        package = ".".join(path.parent.parent.relative_to(REPO).parts)
        inside = path.relative_to(path.parent.parent).as_posix()
        assert any(fnmatch(inside, pattern) for pattern in package_data.get(package, [])), \
            f"{path.relative_to(REPO)} is not package data: add it to [tool.setuptools.package-data] {package!r}"
