"""The studies a portal serves: their configs by name (the store's recorded paths, else the
portal's studies folder, :class:`StudyRegistry`), each config parsed once per version of its
file, the collection opened for it, and the Prolific client of its target."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml

from crowdpref import study_paths
from crowdpref.collection import Collection
from crowdpref.config import StudyConfig, load_study
from crowdpref.errors import CrowdprefError
from crowdpref.portal.limits import LIMITER_MAX_KEYS
from crowdpref.portal.refusal import RETURN_WORDING, Refusal, one_line, unavailable
from crowdpref.recruitment import ProlificTarget, prolific_target

Key = Literal["study1", "study2"]
KEYS: tuple[Key, ...] = ("study1", "study2")
RESCAN_INTERVAL_S = 2.0  # an unknown study name re-reads the studies folder at most this often


class StudyRegistry:
    """Study configs by name from the portal's studies folder (re-read when a name is unknown,
    so a new study needs no restart)."""

    def __init__(self, folder: Path, clock: Callable[[], float] = time.monotonic):
        self.folder = folder
        self._paths: dict[str, Path] = {}
        self._lock = threading.Lock()
        self._clock = clock
        self._scanned: tuple[float, int] | None = None  # when, and the folder's mtime then

    def path(self, name: str) -> Path | None:
        with self._lock:
            if name not in self._paths:  # an unknown name (maybe made up) re-reads the folder only when a
                now = self._clock()  # file was added, or at most every RESCAN_INTERVAL_S
                try:
                    mtime = self.folder.stat().st_mtime_ns
                except OSError:
                    mtime = -1
                if self._scanned is None or self._scanned[1] != mtime or now - self._scanned[0] >= RESCAN_INTERVAL_S:
                    self._scanned = (now, mtime)
                    self._scan()
            return self._paths.get(name)

    def _scan(self) -> None:
        for file in sorted(self.folder.glob("*.y*ml")):
            try:
                data = yaml.safe_load(file.read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError, UnicodeDecodeError):
                continue
            if isinstance(data, dict) and isinstance(data.get("name"), str):
                self._paths.setdefault(data["name"], file)


class Studies:
    """The :class:`~crowdpref.portal.service.Portal`'s studies and collections (its ``store``,
    ``settings``, ``registry`` and caches)."""

    def study_path(self, study: str) -> Path | None:
        """The config of study ``study``: the path the store recorded when its collection was
        opened or its links handed out (:mod:`crowdpref.study_paths`), wherever it lives; else a
        config of that name in the studies folder. Looked up again at most every
        ``RESCAN_INTERVAL_S`` per name (an unknown name costs no store read per request)."""
        now = time.monotonic()
        with self._lock:
            cached = self._known_paths.get(study)
        if cached is None or now - cached[0] >= RESCAN_INTERVAL_S:
            try:
                found = study_paths.known(self.store, study)
            except Exception:  # noqa: BLE001 - the store unreadable: the folder still serves
                found = None
            cached = (now, found)
            with self._lock:
                self._known_paths[study] = cached
                if len(self._known_paths) > LIMITER_MAX_KEYS:  # made-up names must not grow it forever
                    self._known_paths.clear()
        return cached[1] or self.registry.path(study)

    def config(self, study: str, key: str) -> tuple[StudyConfig, Path]:
        if key not in KEYS:
            raise Refusal(404, "Page not found", "This address does not belong to a study. Please check the link.")
        path = self.study_path(study)
        if path is None:
            raise Refusal(404, "Study not found",
                          "We could not find this study. Please check the link, or contact the researchers.")
        try:
            mtime = path.stat().st_mtime_ns
            with self._lock:
                cached = self._configs.get(path)
            if cached is None or cached[0] != mtime:  # parsed once per version of the file
                cached = (mtime, load_study(path))
                with self._lock:
                    self._configs[path] = cached
        except (OSError, CrowdprefError) as exc:  # the config broke while the study runs
            raise unavailable(f"study config broken: {one_line(exc)}", "This study cannot be opened right now. "
                               "Please try again in a few minutes, or contact the researchers.",
                               "Study unavailable") from exc
        return cached[1], path

    def collection(self, study: str, key: Key) -> Collection:
        """The study's collection, opened again when its config file changed: opening it
        writes the config's R, Q and settings to the store's collection row, which every
        claim reads (so lowering R in the config takes effect at the next claim)."""
        config, path = self.config(study, key)
        version = self._configs[path][0]
        with self._lock:
            cached = self._collections.get((study, key))
        if cached is not None and cached[0] == version:
            return cached[1]
        try:
            collection = self._open_collection(path, key)
            collection.info  # noqa: B018 - the store's collection row follows this config version now
        except CrowdprefError as exc:  # e.g. study 2 before its pairs exist
            raise Refusal(409, "Not open yet",
                          "This part of the study is not open yet. " + RETURN_WORDING) from exc
        with self._lock:
            current = self._collections.get((study, key))
            if current is None or current[0] != version:
                self._collections[(study, key)] = current = (version, collection)
            return current[1]

    def prolific(self, config: StudyConfig) -> Any | None:
        target = prolific_target(config, self.settings)
        if target is None:
            return None
        if not target.token:
            raise unavailable("PROLIFIC_TOKEN not set: arrivals cannot be verified with Prolific",
                               "This study cannot be opened right now. Please try again in a few minutes.")
        with self._lock:
            if target.api_url not in self._clients:
                self._clients[target.api_url] = self._prolific_factory(target)
            return self._clients[target.api_url]


def open_study_collection(path: Path, key: Key, settings: Any) -> Collection:
    from crowdpref.studies import open_collection

    return open_collection(path, key, settings)


def prolific_client(target: ProlificTarget) -> Any:
    from crowdpref.prolific import ProlificClient

    return ProlificClient(target.api_url, target.token, timeout_s=10.0, max_attempts=3)
