"""Where the project folder is found (crowdpref/project.py): ``CROWDPREF_PROJECT``, else the
folder above the package, else the working folder or a parent; a one-line error otherwise."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from crowdpref import project
from crowdpref.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def _make_project(folder: Path) -> Path:
    for name in project.MARKERS[1:]:
        (folder / name).mkdir(parents=True)
    (folder / "prefect.yaml").write_text("name: x\n", encoding="utf-8")
    return folder


@pytest.fixture()
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(project.ENV, raising=False)


def test_the_environment_variable_wins_and_a_wrong_one_is_a_one_line_error(tmp_path, monkeypatch):
    other = _make_project(tmp_path / "other")
    monkeypatch.setenv(project.ENV, str(other))
    assert project.project_root() == other.resolve()
    (other / "services").rmdir()
    with pytest.raises(ConfigError) as caught:
        project.project_root()
    message = str(caught.value)
    assert "\n" not in message and project.ENV in message and "missing there: services" in message


def test_the_checkout_above_the_package_comes_next(no_env, tmp_path, monkeypatch):
    monkeypatch.chdir(_make_project(tmp_path / "elsewhere"))  # a project in the working folder loses
    assert project.project_root() == REPO


def test_then_the_working_folder_or_a_parent_and_else_a_one_line_error(no_env, tmp_path, monkeypatch):
    monkeypatch.setattr(project, "__file__", str(tmp_path / "site-packages" / "crowdpref" / "project.py"))
    inside = _make_project(tmp_path / "checkout") / "flows"
    monkeypatch.chdir(inside)
    assert project.project_root() == (tmp_path / "checkout").resolve()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        project.project_root()
    assert "\n" not in str(caught.value) and project.ENV in str(caught.value)


def test_use_project_puts_the_folder_first_on_sys_path(tmp_path, monkeypatch):
    other = _make_project(tmp_path / "other")
    monkeypatch.setenv(project.ENV, str(other))
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(other.resolve())])
    assert project.use_project() == other.resolve()
    assert sys.path[0] == str(other.resolve())
