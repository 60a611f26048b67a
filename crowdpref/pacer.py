"""The launch pacer: a paced Prolific launch's places opened as its people arrive, not only when
the next collection run comes.

The pace itself (:mod:`crowdpref.launch_pacing`, applied by
:func:`crowdpref.recruitment.raise_places`) opens at most one step of places in flight and one
step per ``step_seconds``. Collection runs and ``sync-prolific`` apply it too, but they come
every 10-15 minutes on their schedules: paced by them alone, a launch of 400 places in steps of
10 would take hours while the server idles. The pacer looks at every launch under way every
:data:`LOOK_EVERY_S` seconds, so each step opens as soon as the last one's people have claimed
their work (and ``step_seconds`` have passed), at the rate the server was measured to serve.

- **Which launches.** Every collection the store has published on Prolific whose config (the
  path the store recorded, :mod:`crowdpref.study_paths`) still recruits there with
  ``launch.mode: paced``. A launch whose places cover the work, or whose study is not raisable
  (paused by a person, completed with places open), is looked at again only every
  :data:`IDLE_LOOK_S` seconds: work may come back (a return) and need a place.
- **What it reads.** Prolific's study and submissions, and the store - never a count of its own
  - each look, through the same :func:`~crowdpref.recruitment.raise_places` the runs call: a
  restart, or a run and the pacer looking at once, decides from the same facts (two looks at once
  raise to the same total). Prolific busy or unreachable is looked at again after
  :data:`LOOK_EVERY_S`; any other failure (the study deleted there: 404) after :data:`IDLE_LOOK_S`.
- **Where it runs.** In the participant portal (a thread of its own), which sees the arrivals and
  already holds the Prolific token to verify them; :meth:`Pacer.look` is one pass (tests, the
  CLI). A failure (Prolific down, a config that no longer loads) is logged in one line and
  tried again at the next look; it never stops the portal.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from crowdpref.errors import first_line

log = logging.getLogger("crowdpref.pacer")

LOOK_EVERY_S = 5.0
"""How often a launch under way is looked at at most: a step opens at most this long after it may
(half its ``step_seconds`` when that is shorter, so a fine pace is kept)."""
TICK_S = 0.5
"""How often the pacer's thread wakes to see which launch is due."""
IDLE_LOOK_S = 60.0
"""How often a launch that needs no place now (or may not be raised) is looked at again."""


def launch_pace(config: Any, key: str, settings: Any) -> Any:
    """The study's launch pace on this server: ``prolific.studyN.launch`` against the capacity
    the dress rehearsal measured (``<state>/capacity.json``; the default without one)."""
    from crowdpref.launch_pacing import study_pace
    from crowdpref.preflight.host import read_capacity

    return study_pace(config, key, read_capacity(settings.state_dir))


@dataclass(frozen=True)
class Look:
    """What one look at one launch found: the study and part, and the pace's decision (None:
    nothing may be raised - the work is complete or the study's status forbids it) or the
    problem that stopped the look."""

    study: str
    key: str
    decision: Any = None
    problem: str | None = None

    @property
    def raised(self) -> bool:
        return self.decision is not None and self.decision.raise_to is not None

    @property
    def under_way(self) -> bool:
        """More places are still to open for work that waits (look again soon)."""
        return self.problem is None and self.decision is not None and self.decision.total < self.decision.target


class Pacer:
    """Applies the launch pace of every paced Prolific launch in the store, every
    :data:`LOOK_EVERY_S` seconds or half the launch's ``step_seconds``, whichever is shorter
    (:meth:`start`), or once (:meth:`look`).

    ``config_of(study, key)`` and ``collection_of(study, key)`` give a study's config (None: skip
    it) and its collection, ``client_of(config)`` a Prolific client for it (the portal's own,
    :meth:`crowdpref.portal.service.Portal.launch_pacer`).
    """

    def __init__(self, store: Any, settings: Any, *, config_of: Callable[[str, str], Any],
                 collection_of: Callable[[str, str], Any], client_of: Callable[[Any], Any],
                 look_every_s: float | None = None, idle_look_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.store, self.settings = store, settings
        self._config_of, self._collection_of, self._client_of = config_of, collection_of, client_of
        self.look_every_s = LOOK_EVERY_S if look_every_s is None else look_every_s
        self.idle_look_s = IDLE_LOOK_S if idle_look_s is None else idle_look_s
        self._clock = clock
        # keyed by the collection id and Prolific's study id: SQLite gives a deleted collection's id
        # (a dress rehearsal's) to the next one made, which must not inherit its timing
        self._next: dict[tuple[int, str], float] = {}  # when to look at the launch again
        self._said: dict[tuple[int, str], str] = {}  # the last problem logged (each said once)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def look(self, force: bool = False) -> list[Look]:
        """One pass: every paced launch that is due (all of them with ``force``) is looked at and
        raised where its pace says so. What each look found, in the store's order."""
        from crowdpref.recruitment import raise_places, recruits_on_prolific

        found: list[Look] = []
        for info, platform in self.store.platform_studies("prolific"):
            now, launch = self._clock(), (info.id, platform.external_id)
            if not force and now < self._next.get(launch, 0.0):
                continue
            self._next[launch] = now + self.idle_look_s
            try:
                config = self._config_of(info.study, info.key)
                if config is None or not recruits_on_prolific(config):
                    continue
                pace = launch_pace(config, info.key, self.settings)
                if not pace.paced:
                    continue
                collection = self._collection_of(info.study, info.key)
                client = self._client_of(config)
                study = client.get_study(platform.external_id)
                submissions = client.list_submissions(platform.external_id)
                result = Look(info.study, info.key, raise_places(collection, config, client, study, submissions, pace))
                cadence = min(self.look_every_s, pace.step_seconds / 2)
            except Exception as exc:  # noqa: BLE001 - one launch's problem never stops the others or the portal
                result = Look(info.study, info.key, problem=first_line(exc, 200, with_type=True))
                # Prolific busy or unreachable: soon again; anything else (a study deleted there, a
                # config that no longer loads) waits for a person: no faster than idle_look_s
                again = self.look_every_s if getattr(exc, "transient", False) else self.idle_look_s
                self._next[launch] = now + again
                if self._said.get(launch) != result.problem:
                    self._said[launch] = result.problem
                    log.warning("pacing %s %s: %s (tried again in %g s)", info.study, info.key, result.problem, again)
            else:
                self._said.pop(launch, None)
                if result.under_way:
                    self._next[launch] = now + cadence
                if result.raised:
                    log.info("pacing %s %s: places raised to %d (%s)", info.study, info.key,
                             result.decision.total, result.decision.reason)
            found.append(result)
        return found

    def start(self) -> None:
        """Look every :attr:`look_every_s` seconds on a thread of its own until :meth:`stop`."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="launch-pacer", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(min(TICK_S, self.look_every_s)):
            try:
                self.look()
            except Exception as exc:  # noqa: BLE001 - the store was unreachable: the next look tries again
                log.warning("pacing: %s (tried again in %g s)", first_line(exc, 200, with_type=True),
                            self.look_every_s)

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

