"""The portal's entry limits: a bounded in-memory :class:`RateLimiter`, and the budgets an entry
meets before the portal asks Prolific about it (:class:`EntryLimits`):

- per person (one Prolific id or invitation: ``ENTRIES_PER_WINDOW`` per ``ENTRY_WINDOW_S``) and
  per client address (an IPv4 address, an IPv6 /64: :func:`limited_address`; ``ADDRESS_ENTRIES``
  per ``ADDRESS_WINDOW_S``, and ``ADDRESS_FAILURES`` entries Prolific did not confirm per
  ``FAILURE_WINDOW_S``). A person the store already knows, or whose browser holds the portal's
  valid cookie for the study, is not limited per address (:meth:`EntryLimits.throttle`, ``known``);
- for the whole portal, Prolific calls, never entries (:meth:`EntryLimits.submission`): while
  fewer than ``PROLIFIC_LOOKUPS`` submissions were looked up one by one, and fewer than
  ``GLOBAL_FAILURES`` of those were not confirmed, in the last ``GLOBAL_WINDOW_S``, a new
  arrival's submission is asked for by its id; past either budget (forged ids from many
  addresses), a new arrival is checked against the study's list of submissions, read at most once
  per ``LIST_REFRESH_S`` whoever asks (:class:`SubmissionLists`). A flood of forged entries then
  costs one list read per ``LIST_REFRESH_S``, however large; a genuine arrival is in the next
  read (meanwhile a page that reloads itself after ``LIST_REFRESH_S``).

A refusal that cost nothing - malformed or missing ids, another study's STUDY_ID, an unknown
study, an invitation whose signature fails - counts against no budget shared with anyone: only
against its own address's entries (and its own id's, where it names one)."""

from __future__ import annotations

import hashlib
import ipaddress
import math
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import Any

from crowdpref.portal.refusal import Refusal

ENTRIES_PER_WINDOW, ENTRY_WINDOW_S = 10, 10.0  # per person (Prolific id or invitation)
# per client address (IPv4; IPv6 per /64, what one subscriber gets; not a loopback one: the
# simulated crowd, or a proxy whose X-Forwarded-For is not trusted, would make every participant
# one address): entries, and entries Prolific did not confirm (a forged id, someone else's
# session) - the latter stop an address for a while before any further Prolific call
ADDRESS_ENTRIES, ADDRESS_WINDOW_S = 60, 60.0
ADDRESS_FAILURES, FAILURE_WINDOW_S = 5, 600.0
# the whole portal: submissions looked up one by one, and those Prolific did not confirm;
# past either, new arrivals are checked against the study's submission list instead
PROLIFIC_LOOKUPS, GLOBAL_WINDOW_S = 300, 60.0
GLOBAL_FAILURES = 5  # per GLOBAL_WINDOW_S
LIST_REFRESH_S = 5.0  # a study's submission list is read at most this often
LIMITER_MAX_KEYS = 10_000  # ids / addresses each limiter remembers at most (oldest forgotten first)
IPV6_PREFIX = 64  # an IPv6 client counts by its /64


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


def entry_limiters() -> dict[str, RateLimiter]:
    """The portal's limiters (its ``limits``), each in bounded memory."""
    return {
        "person": RateLimiter(ENTRIES_PER_WINDOW, ENTRY_WINDOW_S),
        "address": RateLimiter(ADDRESS_ENTRIES, ADDRESS_WINDOW_S),
        "address_failures": RateLimiter(ADDRESS_FAILURES, FAILURE_WINDOW_S),
        "lookups": RateLimiter(PROLIFIC_LOOKUPS, GLOBAL_WINDOW_S, max_keys=1),
        "global_failures": RateLimiter(GLOBAL_FAILURES, GLOBAL_WINDOW_S, max_keys=1),
    }


def limited_address(client: str | None) -> str | None:
    """The address the per-address limits count, or None: unknown, or a loopback address
    (the simulated crowd; a reverse proxy whose X-Forwarded-For is not trusted would make
    every participant one address). IPv6 counts by its /64 (``2001:db8:1:2::/64``), an
    IPv4-mapped IPv6 address as its IPv4 address."""
    if not client:
        return None
    try:
        address = ipaddress.ip_address(client)
    except ValueError:
        return client[:64]
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network(f"{address}/{IPV6_PREFIX}", strict=False))
    return str(address)


class SubmissionLists:
    """Each Prolific study's submissions as last read (session id -> submission), read again at
    most once per ``LIST_REFRESH_S``, one read at a time (who waits for a read uses it)."""

    def __init__(self, refresh_s: float = LIST_REFRESH_S):
        self.refresh_s = refresh_s
        self._lock = threading.Lock()
        self._read: dict[str, tuple[float | None, dict[str, Any]]] = {}

    def find(self, client_api: Any, study_id: str, session_id: str, clock: Any) -> Any | None:
        """The submission ``session_id`` names, or None when a read made now does not hold it.
        Refusal 503 (with ``retry_after``) when it is not in the last read and that read is
        too recent for another."""
        with self._lock:
            read_at, found = self._read.get(study_id, (None, {}))
            if session_id in found:
                return found[session_id]
            wait = 0.0 if read_at is None else read_at + self.refresh_s - clock()
            if wait > 0:
                raise Refusal(503, "Checking with Prolific", "We are checking your place with Prolific. This page "
                              "opens again by itself in a few seconds.", retry_after=max(1, math.ceil(wait)))
            found = {s.id.lower(): s for s in client_api.list_submissions(study_id)}
            self._read[study_id] = (clock(), found)
            return found.get(session_id)

    def remember(self, study_id: str, session_id: str, submission: Any) -> None:
        """A submission confirmed by its id: found here until the next read of the list (which
        holds it too), so a person who got in is never kept waiting for a read."""
        with self._lock:
            read_at, found = self._read.get(study_id, (None, {}))
            found[session_id] = submission
            self._read[study_id] = (read_at, found)


class EntryLimits:
    """The :class:`~crowdpref.portal.service.Portal`'s entry limits (its ``limits``,
    ``submission_lists``, ``_lock`` and ``clock``)."""

    def throttle(self, study: str, key: str, params: Mapping[str, str], client: str | None = None,
                 known: Callable[[], bool] = lambda: False) -> None:
        """The limits checked before any Prolific call or allocation: the client address
        (``ADDRESS_ENTRIES`` per ``ADDRESS_WINDOW_S``; ``ADDRESS_FAILURES`` unconfirmed per
        ``FAILURE_WINDOW_S``; not for a loopback address, nor for a person ``known()`` says the
        store knows or whose cookie is valid - asked only when the address is over a limit) and
        the person (``ENTRIES_PER_WINDOW`` per ``ENTRY_WINDOW_S`` for one Prolific id or
        invitation; an entry without one is refused for free, counted against no person). 429
        when one is used up. No limit here is shared by everyone: the portal-wide budget is on
        Prolific calls (:meth:`submission`). Memory: each limiter keeps at most
        ``LIMITER_MAX_KEYS`` keys."""
        now = self.clock()
        ident = params.get("PROLIFIC_PID") or params.get("invite") or ""
        person = hashlib.sha256(f"{study}\x1f{key}\x1f{ident.lower()}".encode()).hexdigest()[:32]
        address = limited_address(client)
        with self._lock:
            over = address is not None and (self.limits["address_failures"].full(address, now)
                                            or self.limits["address"].full(address, now))
        if over and known():
            address = None  # a person the portal knows: never held back by what others do from their address
        with self._lock:
            if address is not None and self.limits["address_failures"].full(address, now):
                raise Refusal(429, "Too many requests", "Too many links that Prolific does not confirm were opened "
                              "from here. Please wait a few minutes, then open the study from Prolific again.")
            if address is not None and self.limits["address"].full(address, now):
                raise Refusal(429, "Too many requests", "Too many links were opened from here. Please wait a "
                              "minute, then open the link again.")
            if ident and not self.limits["person"].take(person, now):  # no id: refused for free, nobody's budget
                raise Refusal(429, "Too many requests", "You opened this link many times in a few seconds. "
                              "Please wait a moment, then open it once.")
            if address is not None:
                self.limits["address"].add(address, now)

    def submission(self, client_api: Any, study_id: str, session_id: str, pid: str, client: str | None) -> Any:
        """The Prolific submission ``session_id`` names, checked to be ``pid``'s in ``study_id``,
        within the portal-wide budget of Prolific calls: asked for by its id while fewer than
        ``PROLIFIC_LOOKUPS`` look-ups and ``GLOBAL_FAILURES`` unconfirmed ones were made in the
        last ``GLOBAL_WINDOW_S``; past that, found among the study's submissions
        (:class:`SubmissionLists`: the last read of its list, and every submission confirmed
        since, so a person who got in before is always found). ProlificNotFound, or a Refusal
        403 for someone else's session: not confirmed, counted against the address, and against
        the portal when it cost a look-up of its own."""
        from crowdpref.prolific import ProlificNotFound

        now = self.clock()
        with self._lock:
            one_by_one = not (self.limits["lookups"].full("*", now) or self.limits["global_failures"].full("*", now))
            if one_by_one:
                self.limits["lookups"].add("*", now)
        try:
            if one_by_one:
                found = client_api.get_submission(session_id)
            else:
                found = self.submission_lists.find(client_api, study_id, session_id, self.clock)
                if found is None:
                    raise ProlificNotFound("the submission is not in the study's list")
        except ProlificNotFound:
            self._failed(client, shared=one_by_one)
            raise
        if found.participant_id.lower() != pid or found.study_id.lower() != study_id:
            self._failed(client, shared=one_by_one)
            raise Refusal(403, "Not your session",
                          "This session belongs to someone else. Please open the study from your own Prolific account.")
        if one_by_one:
            self.submission_lists.remember(study_id, session_id, found)
        return found

    def _failed(self, client: str | None, shared: bool = True) -> None:
        """An entry Prolific did not confirm: it counts against the address, and (``shared``: it
        cost a look-up of its own) against the portal's budget of look-ups."""
        now = self.clock()
        address = limited_address(client)
        with self._lock:
            if shared:
                self.limits["global_failures"].add("*", now)
            if address is not None:
                self.limits["address_failures"].add(address, now)
