"""The after-reply pool: work a webhook delivery (or a screen-out page) left pending, run after
the reply on a few threads of its own, yielding to the deliveries still arriving."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import Any

from crowdpref.pacing import wait_for_quiet
from crowdpref.portal.refusal import log, one_line

AFTER_REPLY_WORKERS = 4  # threads that release work after a webhook's reply (the request threads stay free)
AFTER_REPLY_QUIET_S, AFTER_REPLY_PATIENCE_S = 0.5, 10.0
"""Work after a reply yields to the deliveries still arriving: it starts once none came for
``AFTER_REPLY_QUIET_S``, or after ``AFTER_REPLY_PATIENCE_S`` at the latest (a burst of 150
deliveries is answered first, then released; the releases no longer share the portal's CPU
with the replies)."""


class AfterReply:
    """The work a webhook delivery left pending in the store, run after its reply on a few
    threads of its own (so a burst of deliveries never takes the threads that serve requests).
    A delivery is run at most once at a time here; whether it still has work to do is the
    store's to say (:meth:`Portal.run_delivery`), so running it again is harmless.
    ``workers=0`` records and runs nothing: what a portal that died right after replying left."""

    def __init__(self, run: Callable[[str], Any], workers: int = AFTER_REPLY_WORKERS,
                 quiet_s: float = AFTER_REPLY_QUIET_S, patience_s: float = AFTER_REPLY_PATIENCE_S):
        self._run, self.workers = run, workers
        self.quiet_s, self.patience_s = quiet_s, patience_s
        self._last_submit = 0.0  # time.monotonic() of the latest delivery handed in
        self._pool: ThreadPoolExecutor | None = None
        self._running: set[str] = set()
        self._futures: set[Future[None]] = set()
        self._lock = threading.Lock()

    def submit(self, event_id: str) -> bool:
        """Run the delivery's work soon; False when it runs already (or ``workers=0``)."""
        if self.workers <= 0:
            return False
        with self._lock:
            if event_id in self._running:
                return False
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="after-reply")
            self._running.add(event_id)
            self._last_submit = time.monotonic()
            future = self._pool.submit(self._one, event_id)
            self._futures.add(future)
        future.add_done_callback(self._forget)
        return True

    def _one(self, event_id: str) -> None:
        self._yield_to_deliveries()
        try:
            self._run(event_id)
        except Exception as exc:  # noqa: BLE001 - it stays pending: the next start (or the Prolific sync) repeats it
            log.warning("webhook work not done (%s): it stays pending; the portal's next start or the Prolific "
                        "sync repeats it", one_line(exc))
        finally:
            with self._lock:
                self._running.discard(event_id)

    def _yield_to_deliveries(self) -> None:
        """Wait until no delivery was handed in for :attr:`quiet_s` (at most :attr:`patience_s`)."""
        def idle() -> float:
            with self._lock:
                return time.monotonic() - self._last_submit

        wait_for_quiet(idle, self.quiet_s, self.patience_s)

    def _forget(self, future: Future[None]) -> None:
        with self._lock:
            self._futures.discard(future)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until the work submitted so far is done (tests, benchmarks); False on timeout."""
        with self._lock:
            futures = set(self._futures)
        return not wait_for(futures, timeout=timeout_s).not_done

    def stop(self) -> None:
        """The portal stops: work not started stays pending in the store (the next start runs it)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
