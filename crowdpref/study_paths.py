"""Where each study's config lives, as the study store knows it.

The portal serves a study by the ``name:`` in its config. It used to find the config only by
scanning its studies folder (``portal_studies``), so a config kept anywhere else answered its
participants "Study not found". Now whoever opens a study's collection (the flows) or hands out
its links (``crowdpref invite``) records the config's absolute path in the store, and the
portal looks there first (:meth:`crowdpref.portal.service.Portal.study_path`); the folder scan
stays for a study nobody has opened yet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PREFIX = "study-config:"
"""The store's ``meta`` row of a study's config path: ``study-config:<name>``."""


def remember(store: Any, config: Any) -> Path | None:
    """Record ``config``'s file (``config.source``) as the config of study ``config.name``
    (a write only when it changed); the path recorded, or None for a config with no file."""
    if not config.source:
        return None
    path = Path(config.source).expanduser().resolve()
    if store.get_meta(PREFIX + config.name) != str(path):
        store.set_meta(PREFIX + config.name, str(path))
    return path


def known(store: Any, name: str) -> Path | None:
    """The config path recorded for study ``name`` when that file still exists, else None."""
    value = store.get_meta(PREFIX + name)
    if not value:
        return None
    path = Path(value)
    return path if path.is_file() else None
