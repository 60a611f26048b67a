"""Where the project folder is: the checkout holding ``prefect.yaml`` and the top-level folders
``flows/``, ``tasks/``, ``deployments/`` and ``services/``.

Those folders are not installed with the package (generic names such as ``tasks`` would clash
with other projects'): they are found by path. The CLI commands that run them (``up``,
``deploy``, ``demo``, ``run``, ...) call :func:`use_project` first, which puts the project folder
on ``sys.path``. Prefect runs the deployments from the same folder (``prefect.yaml``'s
``set_working_directory`` pull step, path entrypoints such as ``flows/study.py:study``).

The project folder is, in this order:

1. ``CROWDPREF_PROJECT``, when set;
2. the folder above the ``crowdpref`` package, when it is a project folder (a checkout with
   ``pip install -e .``, as ``make setup`` does);
3. the nearest of the working folder and its parents that is one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from crowdpref.errors import ConfigError

ENV = "CROWDPREF_PROJECT"
MARKERS = ("prefect.yaml", "flows", "tasks", "deployments", "services")
"""What a project folder holds: ``prefect.yaml`` and the four folders."""


def is_project(folder: Path) -> bool:
    """Whether ``folder`` holds ``prefect.yaml`` and the flows, tasks, deployments and services folders."""
    return (folder / MARKERS[0]).is_file() and all((folder / name).is_dir() for name in MARKERS[1:])


def _missing(folder: Path) -> str:
    return ", ".join(name for name in MARKERS if not (folder / name).exists())


def project_root() -> Path:
    """The project folder (see the module docstring), or a one-line :class:`ConfigError` naming
    what is missing and how to fix it."""
    configured = os.environ.get(ENV)
    if configured:
        folder = Path(configured).expanduser().resolve()
        if not is_project(folder):
            raise ConfigError(f"{ENV}={configured} is not a crowdpref project folder (missing there: "
                              f"{_missing(folder)}): point it at the crowdpref checkout, or unset it")
        return folder
    beside = Path(__file__).resolve().parents[1]
    if is_project(beside):
        return beside
    cwd = Path.cwd().resolve()
    for folder in (cwd, *cwd.parents):
        if is_project(folder):
            return folder
    raise ConfigError(f"no crowdpref project folder found (one holding {', '.join(MARKERS)}) above the "
                      f"crowdpref package or the working folder {cwd}: run this from the crowdpref checkout, "
                      f"or set {ENV} to it")


def use_project() -> Path:
    """The project folder, put on ``sys.path`` (first) so its ``flows``, ``tasks``,
    ``deployments`` and ``services`` import."""
    root = project_root()
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return root
