"""The portal's entry limits: a bounded in-memory :class:`RateLimiter`, and the checks every
entry passes BEFORE any Prolific call, study look-up or allocation (:meth:`EntryLimits.throttle`:
per person, per client address, for the whole portal; entries Prolific did not confirm count
against the address and the portal, :meth:`EntryLimits._failed`)."""

from __future__ import annotations

import hashlib
import ipaddress
from collections import OrderedDict, deque
from collections.abc import Mapping

from crowdpref.portal.refusal import Refusal

ENTRIES_PER_WINDOW, ENTRY_WINDOW_S = 10, 10.0  # per person (Prolific id or invitation)
# per client address (not a loopback one: the simulated crowd, or a proxy whose X-Forwarded-For
# is not trusted, would make every participant one address): entries, and entries Prolific
# did not confirm (a forged id, someone else's session, another study) - the latter stop an
# address for a while before any further Prolific call
ADDRESS_ENTRIES, ADDRESS_WINDOW_S = 60, 60.0
ADDRESS_FAILURES, FAILURE_WINDOW_S = 5, 600.0
# the whole portal: entries, and entries Prolific did not confirm (forgers on many addresses)
GLOBAL_ENTRIES, GLOBAL_WINDOW_S = 600, 60.0
GLOBAL_FAILURES = 20  # per GLOBAL_WINDOW_S
LIMITER_MAX_KEYS = 10_000  # ids / addresses each limiter remembers at most (oldest forgotten first)


class RateLimiter:
    """At most ``limit`` events per ``window_s`` seconds for each key, in memory that cannot
    grow without bound: each key keeps at most ``limit`` times, keys idle for a window are
    dropped as new ones come, and past ``max_keys`` the least recently seen key is forgotten.
    Not thread-safe on its own (the portal holds its lock)."""

    def __init__(self, limit: int, window_s: float, max_keys: int = LIMITER_MAX_KEYS):
        self.limit, self.window_s, self.max_keys = limit, window_s, max_keys
        self._hits: OrderedDict[str, deque[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._hits)

    def full(self, key: str, now: float) -> bool:
        """Whether ``key`` used its ``limit`` within the window (records nothing)."""
        hits = self._hits.get(key)
        if hits is None:
            return False
        while hits and hits[0] <= now - self.window_s:
            hits.popleft()
        return len(hits) >= self.limit

    def add(self, key: str, now: float) -> None:
        self._prune(now)
        hits = self._hits.get(key)
        if hits is None:
            while len(self._hits) >= self.max_keys:
                self._hits.popitem(last=False)
            hits = self._hits[key] = deque(maxlen=self.limit)
        else:
            self._hits.move_to_end(key)
        hits.append(now)

    def take(self, key: str, now: float) -> bool:
        """Record one event for ``key`` unless it is over its limit (then False)."""
        if self.full(key, now):
            return False
        self.add(key, now)
        return True

    def _prune(self, now: float, most: int = 8) -> None:
        """Forget up to ``most`` keys idle for a whole window (least recently seen first: the
        order of the dict is the order of their last event)."""
        for _ in range(most):
            oldest = next(iter(self._hits.values()), None)
            if oldest is None or (oldest and oldest[-1] > now - self.window_s):
                return
            self._hits.popitem(last=False)


def limited_address(client: str | None) -> str | None:
    """The address the per-address limits count, or None: unknown, or a loopback address
    (the simulated crowd; a reverse proxy whose X-Forwarded-For is not trusted would make
    every participant one address, which the global limits cover)."""
    if not client:
        return None
    try:
        if ipaddress.ip_address(client).is_loopback:
            return None
    except ValueError:
        pass
    return client[:64]


class EntryLimits:
    """The :class:`~crowdpref.portal.service.Portal`'s entry limits (its ``limits``, ``_lock``
    and ``clock``)."""

    def throttle(self, study: str, key: str, params: Mapping[str, str], client: str | None = None) -> None:
        """The entry limits, checked BEFORE any Prolific call, study look-up or allocation:
        the whole portal (``GLOBAL_ENTRIES`` per ``GLOBAL_WINDOW_S``, and ``GLOBAL_FAILURES``
        entries Prolific did not confirm), the client address (``ADDRESS_ENTRIES`` per
        ``ADDRESS_WINDOW_S``; ``ADDRESS_FAILURES`` unconfirmed per ``FAILURE_WINDOW_S``; not
        for a loopback address) and the person (``ENTRIES_PER_WINDOW`` per ``ENTRY_WINDOW_S``
        for one Prolific id or invitation). 429 when one is used up. Memory: each limiter
        keeps at most ``LIMITER_MAX_KEYS`` keys."""
        now = self.clock()
        ident = params.get("PROLIFIC_PID") or params.get("invite") or ""
        person = hashlib.sha256(f"{study}\x1f{key}\x1f{ident.lower()}".encode()).hexdigest()[:32]
        address = limited_address(client)
        with self._lock:
            if self.limits["global_failures"].full("*", now) or (
                    address is not None and self.limits["address_failures"].full(address, now)):
                raise Refusal(429, "Too many requests", "Too many links that Prolific does not confirm were opened "
                              "from here. Please wait a few minutes, then open the study from Prolific again.")
            if self.limits["global"].full("*", now) or (
                    address is not None and self.limits["address"].full(address, now)):
                raise Refusal(429, "Too many requests", "The study is very busy right now. Please wait a minute, "
                              "then open the link again.")
            if not self.limits["person"].take(person, now):
                raise Refusal(429, "Too many requests", "You opened this link many times in a few seconds. "
                              "Please wait a moment, then open it once.")
            self.limits["global"].add("*", now)
            if address is not None:
                self.limits["address"].add(address, now)

    def _failed(self, client: str | None) -> None:
        """An entry Prolific did not confirm: it counts against the address and the portal."""
        now = self.clock()
        address = limited_address(client)
        with self._lock:
            self.limits["global_failures"].add("*", now)
            if address is not None:
                self.limits["address_failures"].add(address, now)
