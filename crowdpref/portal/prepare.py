"""Admission first: a participant's claim is written to the store at once, and their workspace in
Argilla (the account a cold claim still has to create, the records of their batch) is prepared
afterwards, on a few threads of the portal's own (:class:`Preparer`), so that no request waits
on a busy or stalled Argilla for longer than the portal chooses to.

The entry waits at most :data:`ENTRY_WAIT_S` for it (on a quiet server the participant gets
everything in one go, as before), and not at all while preparations queue (a burst); *Start* at most :data:`START_WAIT_S`, then it answers with a
page that says their work is being prepared and opens it by itself when it is ready (a meta
refresh: no script needed), a 200 whatever Argilla does. A preparation that failed (Argilla down, a timeout) is tried again
when the person's page asks, no sooner than :func:`backoff_s` after the failure; the flow's
monitoring pass repairs any claim the portal left unprepared (``Store.due_for_reading``)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from crowdpref.errors import CrowdprefError
from crowdpref.portal.refusal import one_line
from crowdpref.store import ACTIVE, CREATING, ParticipantState

log = logging.getLogger("crowdpref.portal")

PREPARE_WORKERS = 4  # Argilla is the bottleneck: a few writers at a time, never one per arrival
ENTRY_WAIT_S = 0.5  # the entry answers within this (plus the store's claim), ready or not
START_WAIT_S = 4.0  # Start (and the waiting page's reload) waits at most this for the workspace
WAITING_REFRESH_S = 2  # the waiting page reloads itself after this many seconds
FAILING_RETRY_S = 10  # after a failed preparation: the waiting page reloads itself this often
MAX_FAILURES_KEPT = 10_000  # bounded memory, whoever arrives


def ready(participant: ParticipantState) -> bool:
    """Whether the participant's work is visible in Argilla: their account exists (a cold claim
    creates it) and their dataset holds their records. Someone no longer active has nothing to
    prepare."""
    if participant.status != ACTIVE:
        return True
    return participant.records_logged and participant.account_state != CREATING and bool(participant.dataset_id)


def backoff_s(failures: int) -> float:
    """How long after its ``failures``-th failure a preparation is tried again: 2, 4, 8, 16, 30 s."""
    return float(min(30, 2 ** max(1, failures)))


@dataclass(frozen=True)
class Preparation:
    """Where a participant's workspace stands: ``ready``, else ``future`` (the job preparing it;
    None while a failed one waits for its back-off) and ``failing`` (the last try failed)."""

    ready: bool
    future: Future[Any] | None = None
    failing: bool = False


class Preparer:
    """The threads that prepare claimed participants' workspaces, one job per participant at a
    time (a second ask while one runs returns the same job)."""

    def __init__(self, workers: int = PREPARE_WORKERS, clock: Callable[[], float] = time.monotonic):
        self.workers = workers
        self.clock = clock
        self._executor = ThreadPoolExecutor(max(1, workers), thread_name_prefix="prepare")
        self._lock = threading.Lock()
        self._jobs: dict[tuple[int, int], Future[Any]] = {}
        self._failures: dict[tuple[int, int], tuple[int, float]] = {}  # -> (count, when the last failed)

    def prepare(self, collection: Any, participant: ParticipantState) -> Preparation:
        """Start preparing ``participant``'s workspace unless it is ready, being prepared, or
        failed too recently (:func:`backoff_s`); never waits on Argilla."""
        if ready(participant):
            return Preparation(True)
        job = (collection.info.id, participant.id)
        with self._lock:
            running = self._jobs.get(job)
            if running is not None:
                return Preparation(False, running, failing=job in self._failures)
            failed = self._failures.get(job)
            if failed is not None and self.clock() - failed[1] < backoff_s(failed[0]):
                return Preparation(False, failing=True)
            if self.workers <= 0:  # (tests) nothing prepares here: the flow's monitoring does
                return Preparation(False, failing=failed is not None)
            future = self._executor.submit(self._run, collection, participant, job)
            self._jobs[job] = future
            return Preparation(False, future, failing=failed is not None)

    def _run(self, collection: Any, participant: ParticipantState, job: tuple[int, int]) -> None:
        try:
            current = collection.store.participant(collection.info.id, participant.username)
            if not ready(current):
                collection.make_visible(current)
        except Exception as exc:  # Argilla down or slow: the person's page asks again later
            with self._lock:
                count = self._failures.get(job, (0, 0.0))[0] + 1
                if len(self._failures) >= MAX_FAILURES_KEPT:
                    self._failures.pop(next(iter(self._failures)))
                self._failures[job] = (count, self.clock())
                self._jobs.pop(job, None)
            log.warning("preparing a participant's workspace failed (try %d): %s", count, one_line(exc))
            raise
        with self._lock:
            self._failures.pop(job, None)
            self._jobs.pop(job, None)

    def busy(self) -> bool:
        """Whether preparations wait in the queue (more jobs than workers): then a new one will
        not be done within :data:`ENTRY_WAIT_S`, and the entry does not wait for it."""
        with self._lock:
            return len(self._jobs) > self.workers

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no preparation runs (tests, benchmarks); True when none does."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                running = list(self._jobs.values())
            if not running:
                return True
            if time.monotonic() >= deadline:
                return False
            for future in running:
                try:
                    future.result(timeout=max(0.0, deadline - time.monotonic()))
                except Exception:  # noqa: BLE001, S110 - failed or still running: looked at again above
                    pass

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class NotReady(CrowdprefError):
    """The participant's workspace in Argilla is not ready yet (the work frame sends them to the
    page that waits for it)."""


def failing(preparation: Preparation) -> bool:
    """Whether the last try to prepare the workspace failed (Argilla down or too slow)."""
    future = preparation.future
    if future is not None and future.done():
        return future.cancelled() or future.exception() is not None
    return preparation.failing


async def wait_ready(preparation: Preparation, timeout_s: float) -> bool:
    """Wait (without holding a thread) at most ``timeout_s`` for ``preparation``'s job; True
    when it is ready or its job finished well in time. A job still running goes on after the wait."""
    if preparation.ready:
        return True
    if preparation.future is None:
        return False
    try:
        await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(preparation.future)), timeout_s)
    except TimeoutError:
        return False
    except Exception:  # noqa: BLE001 - it failed (logged by the job): the page says so, asks again later
        return False
    return True
