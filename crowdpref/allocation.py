"""Balanced allocation of work items to participants, and re-allocation of released slots.

The same code serves both studies: the items are questions in study 1 (``copies`` = R
answers per question, ``per_participant`` = Q questions per participant) and answer pairs in
study 2 (``ratings_per_pair``, ``pairs_per_participant``).

The method
----------
Every item needs ``copies`` slots; each participant gets ``per_participant`` DISTINCT items,
always taken from the items with the most copies still unallocated (ties broken at random).
Done literally - re-sort every item for every participant - that is O(P * N log N) for N
items and P = ceil(N * R / Q) participants. :func:`allocate` produces an allocation with
exactly the same properties in O(R * N log N) total (see its docstring for why it is the same
greedy): for the published study (1000 questions, R=4, Q=10) that is four shuffles instead of
400 sorts.

Drop-outs
---------
A participant who leaves releases the slots they never answered. Released slots go to an
:class:`AllocationPool` (a multiset: the same item can be in it several times when several of
its holders dropped out). :func:`reallocate` (or :meth:`AllocationPool.hand_out`) hands the
whole pool out again - to named participants first (existing participants with spare room,
or people with a history), never giving anyone an item they hold or held, then to new
participants in batches of at most Q distinct items - always items with the most copies in
the pool first. Every pooled slot is handed out exactly once, so after re-allocation every
item again has exactly R holders. :meth:`AllocationPool.take` serves one sign-up at a time.

Reproducibility
---------------
Everything is a pure function of the inputs, including their ORDER, and the integer seed.
Randomness comes only from :meth:`random.Random.random` (the one method whose sequence
Python guarantees across versions for the same seed): a seeded shuffle here is a sort by
``random()`` keys, never :meth:`random.Random.shuffle`.
"""

from __future__ import annotations

import bisect
import random
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from operator import add
from types import MappingProxyType
from typing import Literal

__all__ = [
    "Allocation",
    "AllocationPool",
    "Reallocation",
    "Remainder",
    "allocate",
    "reallocate",
]

Remainder = Literal["smaller_last", "error"]
_REMAINDERS: tuple[str, ...] = ("smaller_last", "error")


# --- helpers ----------------------------------------------------------------------------------
def _shuffled(items: Sequence[str], rng: random.Random) -> list[str]:
    """A seeded uniform permutation of ``items``: sort by ``rng.random()`` keys.

    O(n log n) in C (the sort compares floats); chosen over ``rng.shuffle`` because only
    ``random()`` is guaranteed to give the same sequence on every Python version."""
    keys = list(islice(iter(rng.random, None), len(items)))
    return [items[i] for i in sorted(range(len(items)), key=keys.__getitem__)]


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a whole number (got {value!r})")
    if value < 1:
        raise ValueError(f"{name} must be at least 1 (got {value})")
    return value


def _check_seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int (got {seed!r})")
    return seed


def _even_alternatives(total: int, per_participant: int, limit: int) -> list[int]:
    """The nearest batch sizes below and above ``per_participant`` (at most ``limit``) that
    split ``total`` slots evenly."""
    found = []
    for q in range(per_participant - 1, 0, -1):
        if total % q == 0:
            found.append(q)
            break
    for q in range(per_participant + 1, limit + 1):
        if total % q == 0:
            found.append(q)
            break
    return found


# --- full allocation --------------------------------------------------------------------------
@dataclass(frozen=True)
class Allocation:
    """The result of :func:`allocate`: one batch of distinct item ids per participant.

    ``batches[p]`` is participant ``p``'s batch, in the order the items should be shown.
    Every batch has ``per_participant`` items except, under ``remainder="smaller_last"``,
    the last one, which gets the remaining ``(n_items * copies) % per_participant``."""

    batches: tuple[tuple[str, ...], ...]
    copies: int
    per_participant: int

    @property
    def n_participants(self) -> int:
        return len(self.batches)

    @property
    def n_slots(self) -> int:
        """Items handed out in total (= n_items * copies)."""
        return sum(len(b) for b in self.batches)

    def counts(self) -> Counter[str]:
        """Copies of each item across all batches (each is ``copies``)."""
        return Counter(item for batch in self.batches for item in batch)

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[tuple[str, ...]]:
        return iter(self.batches)

    def __getitem__(self, participant: int) -> tuple[str, ...]:
        return self.batches[participant]


def allocate(
    item_ids: Sequence[str],
    copies: int,
    per_participant: int,
    seed: int,
    remainder: Remainder = "smaller_last",
) -> Allocation:
    """Split ``len(item_ids) * copies`` slots into participant batches of ``per_participant``
    distinct items, balanced: every batch takes the items with the most copies still
    unallocated, ties broken by a seeded shuffle.

    Algorithm (round-robin with a fresh permutation per round). With N items, R copies and
    batch size Q <= N, the method's greedy keeps the remaining-copy counts of all items within
    1 of each other: if the counts are c+1 (k items) and c (the rest), a batch takes Q
    random items among the c+1 ones, or - when Q > k - all k of them plus Q - k random items
    among the c ones. So the greedy hands out the items in rounds: round 1 is a random
    permutation of all items, then round 2, and so on, and the batches are consecutive chunks
    of Q of this stream. The only care needed is at a round boundary: a batch that holds the
    last k items of round r takes its other Q - k items from round r+1 and those must not be
    any of those k; so the first Q - k items of round r+1 are drawn from the other N - k
    items (exactly what the greedy does, since those k items have just become equal to the
    rest). We build each round by a seeded permutation and move the first Q - k eligible
    items to its front.

    Guarantees: every item appears in exactly ``copies`` batches; no batch repeats an item;
    at the moment each batch is taken, every item in it has at least as many copies left as
    any item not in it, and after every batch the remaining counts differ by at most 1.

    Cost: R seeded permutations of N items, O(R * N log N) (the log is a C float sort) plus
    O(N * R) to cut the batches - against O(P * N log N) for re-sorting per participant.

    ``remainder``: when N * R is not a multiple of Q, ``"smaller_last"`` gives the LAST
    participant only the (N * R) % Q remaining items; ``"error"`` raises ValueError.

    The result depends on the order of ``item_ids`` and on ``seed``, nothing else.

    Raises ValueError for: no items, duplicate ids, empty ids, copies < 1,
    per_participant < 1, per_participant > number of items (a batch could not be distinct),
    an unknown ``remainder``, or an uneven split under ``remainder="error"``.
    """
    if isinstance(item_ids, str):
        raise TypeError("item_ids must be a sequence of item ids, not a single string")
    items = list(item_ids)
    copies = _positive_int("copies", copies)
    q = _positive_int("per_participant", per_participant)
    seed = _check_seed(seed)
    if remainder not in _REMAINDERS:
        raise ValueError(f"remainder must be 'smaller_last' or 'error' (got {remainder!r})")
    n = len(items)
    if n == 0:
        raise ValueError("no items to allocate: give at least one item id")
    bad = next((x for x in items if not isinstance(x, str)), None)
    if bad is not None:
        raise TypeError(f"item ids must be strings (got {bad!r})")
    if "" in items:
        raise ValueError("an item id is the empty string: give every item a non-empty id")
    if len(set(items)) != n:
        dupes = sorted(x for x, c in Counter(items).items() if c > 1)
        shown = ", ".join(repr(x) for x in dupes[:5]) + (" ..." if len(dupes) > 5 else "")
        raise ValueError(f"{len(dupes)} duplicate item id(s): {shown}: every item must appear once "
                         "(its copies come from the copies argument)")
    if q > n:
        raise ValueError(f"per_participant={q} distinct items per participant, but there are only "
                         f"{n} items: use per_participant <= {n}, or add items")
    total = n * copies
    left = total % q
    if left and remainder == "error":
        alts = _even_alternatives(total, q, n)
        hint = f" (e.g. per_participant={' or '.join(map(str, alts))})" if alts else ""
        raise ValueError(
            f"{n} items x {copies} copies = {total} slots do not split into batches of "
            f"{q} ({left} left over) and remainder='error': change copies or per_participant "
            f"so that items x copies is a multiple of per_participant{hint}, "
            f"or use remainder='smaller_last' (the last participant then gets {left})"
        )

    rng = random.Random(seed)
    stream: list[str] = []
    for _ in range(copies):
        perm = _shuffled(items, rng)
        k = len(stream) % q  # items of the open batch that came from earlier rounds
        if k:
            tail = set(stream[-k:])
            need = q - k  # <= n - k since q <= n: enough eligible items exist
            front: list[str] = []
            moved: list[str] = []
            j = 0
            while len(front) < need:
                x = perm[j]
                j += 1
                (moved if x in tail else front).append(x)
            perm[:j] = front + moved
        stream.extend(perm)
    batches = tuple(tuple(stream[i:i + q]) for i in range(0, total, q))
    return Allocation(batches=batches, copies=copies, per_participant=q)


# --- re-allocation ----------------------------------------------------------------------------
class _Greedy:
    """Pool items in buckets by copies left; serves "most copies first" batches.

    ``_queues[c]`` holds the items with c copies left, from index ``_heads[c]`` on, in a
    seeded random order; ``_levels`` is the sorted list of non-empty c. A batch walks the
    levels from the top and takes items from the front of each queue, so it always holds the
    items with the most copies (ties: queue order). Taken items move, after the batch is
    complete (so a batch never holds an item twice), to the END of the queue one level down:
    among equal counts, items not yet served go first (round-robin).

    A batch costs O(items taken + items skipped because they are excluded + levels visited),
    so handing out a whole pool of T slots (D distinct items) is O(D log D + T) without
    exclusions."""

    __slots__ = ("_heads", "_levels", "_queues")

    def __init__(self, counts: Mapping[str, int], rng: random.Random) -> None:
        # One sort, descending, by 2 * copies + U[0, 1): by copies first - exactly, even when
        # the float sum rounds up - and in a seeded random order among equal copies.
        items = list(counts)
        values = counts.values()
        keys = list(map(add, map(add, values, values), iter(rng.random, None)))
        order = sorted(range(len(items)), key=keys.__getitem__, reverse=True)
        self._queues: dict[int, list[str]] = {}
        start = 0
        while start < len(order):  # cut the levels: binary search for where each one ends
            c = int(keys[order[start]]) >> 1
            end = bisect.bisect_right(order, -2 * c, lo=start, key=lambda i: -keys[i])
            self._queues[c] = [items[i] for i in order[start:end]]
            start = end
        self._heads = dict.fromkeys(self._queues, 0)
        self._levels = sorted(self._queues)

    def __bool__(self) -> bool:
        return bool(self._levels)

    def take(self, limit: int, exclude: Collection[str] | None = None) -> list[str]:
        """Up to ``limit`` distinct items, most copies left first, none in ``exclude``."""
        taken: list[tuple[int, list[str]]] = []
        need = limit
        for c in reversed(self._levels):
            queue, head = self._queues[c], self._heads[c]
            if exclude:
                chunk: list[str] = []
                skipped: list[str] = []
                j, end = head, len(queue)
                while j < end and len(chunk) < need:
                    x = queue[j]
                    j += 1
                    (skipped if x in exclude else chunk).append(x)
                if skipped:  # they stay at the front of the queue, in their order
                    queue[j - len(skipped):j] = skipped
                self._heads[c] = j - len(skipped)
            else:
                chunk = queue[head:head + need]
                self._heads[c] = head + len(chunk)
            if chunk:
                taken.append((c, chunk))
                need -= len(chunk)
                if not need:
                    break
        for c, chunk in taken:  # descending c: a level is refilled before it is checked
            if self._heads[c] >= len(self._queues[c]):
                del self._queues[c], self._heads[c]
                self._levels.remove(c)
            if c > 1:
                below = self._queues.get(c - 1)
                if below is None:
                    self._queues[c - 1] = list(chunk)
                    self._heads[c - 1] = 0
                    bisect.insort(self._levels, c - 1)
                else:
                    below.extend(chunk)
        return [x for _, chunk in taken for x in chunk]

    def drain(self, limit: int) -> list[tuple[str, ...]]:
        """Batches of up to ``limit`` items until the pool is empty. Once every item left
        has one copy, the rest is cut in one go: the queue's consecutive chunks."""
        batches = []
        while self._levels and self._levels != [1]:
            batches.append(tuple(self.take(limit)))
        if self._levels:
            queue, head = self._queues[1], self._heads[1]
            batches += [tuple(queue[i:i + limit]) for i in range(head, len(queue), limit)]
            self._queues.clear()
            self._heads.clear()
            self._levels.clear()
        return batches


def _pool_counts(pool: AllocationPool | Mapping[str, int] | Iterable[str]) -> dict[str, int]:
    """Validate a pool given as a pool, a mapping item -> copies, or an iterable of item ids
    (one entry per released slot). Keeps first-seen order; drops zero counts."""
    if isinstance(pool, AllocationPool):
        return pool._counts  # already checked; read, never modified
    if isinstance(pool, str):
        raise TypeError("pool must be item ids (an iterable of strings) or a mapping "
                        "item -> copies, not a single string")
    if isinstance(pool, Mapping):
        counts: dict[str, int] = {}
        for item, c in pool.items():
            if not isinstance(item, str) or not item:
                raise TypeError(f"pool item ids must be non-empty strings (got {item!r})")
            if isinstance(c, bool) or not isinstance(c, int):
                raise TypeError(f"pool copies of {item!r} must be a whole number (got {c!r})")
            if c < 0:
                raise ValueError(f"pool copies of {item!r} must be >= 0 (got {c})")
            if c:
                counts[item] = c
        return counts
    counts = Counter(pool)
    if not set(map(type, counts)) <= {str} or "" in counts:
        bad = next(x for x in counts if not isinstance(x, str) or not x)
        raise TypeError(f"pool item ids must be non-empty strings (got {bad!r})")
    return counts


@dataclass(frozen=True)
class Reallocation:
    """Where the slots of a pool went.

    ``assigned[pid]``: the items given to named participant ``pid`` (possibly empty), in
    the order of the ``held`` mapping. ``batches``: the batches of NEW participants, each
    of at most ``per_participant`` distinct items, largest first (a batch is smaller than
    ``per_participant`` only when fewer distinct items were left in the pool)."""

    assigned: dict[str, tuple[str, ...]]
    batches: tuple[tuple[str, ...], ...]

    @property
    def n_slots(self) -> int:
        """Slots handed out (= the pool's size)."""
        return sum(map(len, self.assigned.values())) + sum(map(len, self.batches))

    def counts(self) -> Counter[str]:
        """Copies of each item handed out (equals the pool's counts)."""
        out: Counter[str] = Counter()
        for batch in (*self.assigned.values(), *self.batches):
            out.update(batch)
        return out


def reallocate(
    pool: AllocationPool | Mapping[str, int] | Iterable[str],
    per_participant: int,
    seed: int,
    held: Mapping[str, Collection[str]] | None = None,
    room: Mapping[str, int] | None = None,
) -> Reallocation:
    """Hand out every released slot of ``pool`` exactly once.

    ``pool``: an :class:`AllocationPool`, a mapping item -> copies, or the released item ids
    (one entry per slot: an item appears k times when k of its holders dropped out).

    First the participants named in ``held`` (in its order) each get up to ``room[pid]``
    (default ``per_participant``) items, none of them in ``held[pid]`` (what they hold now
    or held before): use this to top up existing participants with spare room, or to serve
    known newcomers with a history. Then everything left goes to NEW participants in batches
    of ``per_participant`` distinct items. Every batch, named or new, takes the items with
    the most copies in the pool first (among those allowed to it); ties are broken by a
    seeded shuffle, then round-robin. Hence k copies of one item always go to k different
    participants, and a new batch is smaller than ``per_participant`` only once fewer
    distinct items are left.

    The new batches are as few as possible: max(ceil(slots left / Q), most copies of one
    item) - taking the most-copies items first is what makes that so.

    Cost: O(D log D) for the seeded shuffle of the D distinct items, then O(T) for the T
    slots (plus the excluded items a named participant has to skip).
    """
    q = _positive_int("per_participant", per_participant)
    seed = _check_seed(seed)
    counts = _pool_counts(pool)
    held = held or {}
    room = room or {}
    for pid, items in held.items():
        if not isinstance(pid, str):
            raise TypeError(f"held keys must be participant ids (strings), got {pid!r}")
        if isinstance(items, str):
            raise TypeError(f"held[{pid!r}] must be a collection of item ids, not a single string")
    for pid, r in room.items():
        if pid not in held:
            raise ValueError(f"room names {pid!r}, who is not in held: add {pid!r} to held "
                             "(with the items they hold) or drop it from room")
        if isinstance(r, bool) or not isinstance(r, int):
            raise TypeError(f"room[{pid!r}] must be a whole number (got {r!r})")
        if not 0 <= r <= q:
            raise ValueError(f"room[{pid!r}]={r} must be between 0 and per_participant={q}")

    greedy = _Greedy(counts, random.Random(seed))
    assigned: dict[str, tuple[str, ...]] = {}
    for pid, items in held.items():
        limit = room.get(pid, q)
        exclude = items if isinstance(items, (set, frozenset)) else set(items)
        assigned[pid] = tuple(greedy.take(limit, exclude)) if limit and greedy else ()
    return Reallocation(assigned=assigned, batches=tuple(greedy.drain(q)))


class AllocationPool:
    """The ledger of released slots: an immutable multiset of item ids.

    Built from released item ids (one entry per slot: an item appears k times when k of its
    holders dropped out) or a mapping item -> copies. Items keep the order in which they
    were first released; that order and the seed fix every hand-out (so two pools are equal
    only with the same counts in the same order). Operations return new pools.

    >>> pool = AllocationPool.of(["q1", "q2"]).release(["q1"])   # two holders of q1 left
    >>> pool.counts
    {'q1': 2, 'q2': 1}
    >>> batch, pool = pool.take(per_participant=10, seed=0)      # a newcomer signs up
    >>> sorted(batch), pool.counts
    (['q1', 'q2'], {'q1': 1})
    """

    __slots__ = ("_counts",)
    _counts: dict[str, int]

    def __init__(self, slots: AllocationPool | Mapping[str, int] | Iterable[str] = ()) -> None:
        object.__setattr__(self, "_counts", dict(_pool_counts(slots)))

    @classmethod
    def of(cls, items: AllocationPool | Mapping[str, int] | Iterable[str] = ()) -> AllocationPool:
        """A pool from released item ids (one entry per slot) or a mapping item -> copies."""
        return cls(items)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("AllocationPool is immutable: release() and take() return new pools")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AllocationPool):
            return NotImplemented
        return list(self._counts.items()) == list(other._counts.items())

    def __hash__(self) -> int:
        return hash(tuple(self._counts.items()))

    def __repr__(self) -> str:
        return f"AllocationPool({self._counts!r})"

    @property
    def slots(self) -> Mapping[str, int]:
        """Read-only view: item id -> copies in the pool, in first-release order."""
        return MappingProxyType(self._counts)

    @property
    def counts(self) -> dict[str, int]:
        """A copy of :attr:`slots` as a plain dict (e.g. to store the ledger as JSON)."""
        return dict(self._counts)

    @property
    def distinct(self) -> int:
        """Distinct items in the pool."""
        return len(self._counts)

    def __len__(self) -> int:
        """Slots in the pool (copies counted)."""
        return sum(self._counts.values())

    def __bool__(self) -> bool:
        return bool(self._counts)

    def __contains__(self, item: object) -> bool:
        return item in self._counts

    def __getitem__(self, item: str) -> int:
        """Copies of ``item`` in the pool (0 when absent)."""
        return self._counts.get(item, 0)

    def release(self, items: Mapping[str, int] | Iterable[str]) -> AllocationPool:
        """This pool plus the released ``items`` (one entry per slot, or item -> copies)."""
        merged = Counter(self._counts)
        merged.update(_pool_counts(items))
        return AllocationPool(merged)

    def take(
        self, per_participant: int, seed: int, exclude: Collection[str] = ()
    ) -> tuple[tuple[str, ...], AllocationPool]:
        """One batch for one participant (e.g. a sign-up): up to ``per_participant`` distinct
        items, most copies first, none in ``exclude``; returns (batch, the pool left).
        The same as the first named batch of :meth:`hand_out` with ``held={pid: exclude}``."""
        q = _positive_int("per_participant", per_participant)
        if isinstance(exclude, str):
            raise TypeError("exclude must be a collection of item ids, not a single string")
        greedy = _Greedy(self._counts, random.Random(_check_seed(seed)))
        excl = exclude if isinstance(exclude, (set, frozenset)) else set(exclude)
        batch = tuple(greedy.take(q, excl)) if greedy else ()
        taken = set(batch)
        return batch, AllocationPool({x: c - (x in taken) for x, c in self._counts.items()})

    def hand_out(
        self,
        per_participant: int,
        seed: int,
        held: Mapping[str, Collection[str]] | None = None,
        room: Mapping[str, int] | None = None,
    ) -> Reallocation:
        """Hand out the whole pool: :func:`reallocate` on it (the pool is then used up)."""
        return reallocate(self, per_participant, seed, held=held, room=room)

