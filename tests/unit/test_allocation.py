"""Balanced allocation and re-allocation (crowdpref.allocation): property tests against the
method's rules (exact copies, distinct batches, most-copies-first) plus worked examples."""

from __future__ import annotations

import doctest
import math
import random
from collections import Counter
from collections.abc import Collection, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import crowdpref.allocation as allocation_module
from crowdpref.allocation import Allocation, AllocationPool, allocate, reallocate
from crowdpref.config import Batches, Study1Config, Study2Config

SETTINGS = settings(max_examples=150, deadline=None)


def ids(n: int, prefix: str = "q") -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(n)]


@st.composite
def shapes(draw: st.DrawFn, max_items: int = 40, max_copies: int = 6) -> tuple[int, int, int]:
    """(n_items, copies, per_participant) with per_participant <= n_items."""
    n = draw(st.integers(1, max_items))
    copies = draw(st.integers(1, max_copies))
    q = draw(st.integers(1, n))
    return n, copies, q


seeds = st.integers(0, 2**32)


# --- checkers -----------------------------------------------------------------------------------
def check_greedy_batch(
    left: Counter[str], batch: Sequence[str], limit: int, exclude: Collection[str] = ()
) -> None:
    """``batch`` was taken from ``left`` (copies still missing) the way the method says:
    distinct items, at most ``limit``, none excluded, each with copies left, and every item in
    it had at least as many copies left as any allowed item left out; a batch shorter than
    ``limit`` left no allowed item behind. Then consume it from ``left``."""
    assert len(batch) == len(set(batch)), f"repeated item in {batch}"
    assert len(batch) <= limit
    assert not set(batch) & set(exclude), "an excluded (held) item was handed out"
    assert all(left[x] > 0 for x in batch), "an item was handed out more often than it had copies"
    allowed_out = [x for x, c in left.items() if c > 0 and x not in exclude and x not in batch]
    if batch and allowed_out:
        assert min(left[x] for x in batch) >= max(left[x] for x in allowed_out), (
            "a batch skipped an item with more copies left"
        )
    if len(batch) < limit:
        assert not allowed_out, "a short batch left allowed items behind"
    left.subtract(batch)


def replay_allocation(items: list[str], copies: int, alloc: Allocation) -> list[list[int]]:
    """Check every batch of a full allocation against the greedy rule and the +-1 balance;
    return the sorted remaining-count profile after each batch."""
    left = Counter(dict.fromkeys(items, copies))
    profiles = []
    for batch in alloc.batches:
        check_greedy_batch(left, batch, alloc.per_participant)
        remaining = list(left.values())
        assert max(remaining) - min(remaining) <= 1, "remaining copies drifted apart by > 1"
        profiles.append(sorted(remaining))
    assert all(c == 0 for c in left.values())
    return profiles


def naive_method(items: list[str], copies: int, q: int, seed: int) -> list[list[str]]:
    """The method's loop, literally: per participant sort all items by copies left (ties
    random), take the first q with copies left."""
    rng = random.Random(seed)
    left = dict.fromkeys(items, copies)
    batches = []
    while any(left.values()):
        order = sorted(items, key=lambda x: (-left[x], rng.random()))
        batch = [x for x in order if left[x] > 0][:q]
        for x in batch:
            left[x] -= 1
        batches.append(batch)
    return batches


# --- full allocation: properties ----------------------------------------------------------------
@SETTINGS
@given(shapes(), seeds)
def test_allocation_exact_distinct_balanced(shape: tuple[int, int, int], seed: int) -> None:
    n, copies, q = shape
    items = ids(n)
    alloc = allocate(items, copies, q, seed)
    # exact copies per item, nothing else
    assert alloc.counts() == Counter(dict.fromkeys(items, copies))
    assert alloc.n_slots == n * copies
    # distinct items per participant
    assert all(len(set(b)) == len(b) for b in alloc.batches)
    # batch sizes: all q, except the last under smaller_last, which gets the remainder
    plan = Batches(n * copies, q)
    assert len(alloc) == plan.participants == math.ceil(n * copies / q)
    assert [len(b) for b in alloc.batches[:-1]] == [q] * (len(alloc) - 1)
    assert len(alloc.batches[-1]) == plan.last_batch == ((n * copies) % q or q)
    # balance: every batch takes the items with most copies left; counts stay within 1
    replay_allocation(items, copies, alloc)


@SETTINGS
@given(shapes(max_items=25, max_copies=5), seeds, seeds)
def test_allocation_follows_the_methods_loop(shape: tuple[int, int, int], seed: int,
                                             other: int) -> None:
    """Whatever the tie-breaking, the greedy's remaining-count profile after each participant
    is fixed; ours must equal the literal loop's, batch by batch."""
    n, copies, q = shape
    items = ids(n)
    ours = replay_allocation(items, copies, allocate(items, copies, q, seed))
    left = Counter(dict.fromkeys(items, copies))
    theirs = []
    for batch in naive_method(items, copies, q, other):
        left.subtract(batch)
        theirs.append(sorted(left.values()))
    assert ours == theirs


@SETTINGS
@given(shapes(), seeds)
def test_allocation_deterministic_under_seed(shape: tuple[int, int, int], seed: int) -> None:
    n, copies, q = shape
    items = ids(n)
    assert allocate(items, copies, q, seed) == allocate(list(items), copies, q, seed)


@SETTINGS
@given(st.integers(10, 60), st.integers(1, 5), st.data(), seeds)
def test_allocation_seed_matters(n: int, copies: int, data: st.DataObject, seed: int) -> None:
    q = data.draw(st.integers(1, n - 1))
    items = ids(n)
    # >= 10! orderings of the first round alone: equal results would mean the seed is ignored
    assert allocate(items, copies, q, seed) != allocate(items, copies, q, seed + 1)


@SETTINGS
@given(shapes(), seeds)
def test_remainder_error(shape: tuple[int, int, int], seed: int) -> None:
    n, copies, q = shape
    items = ids(n)
    left = (n * copies) % q
    if left:
        with pytest.raises(ValueError) as err:
            allocate(items, copies, q, seed, remainder="error")
        message = str(err.value)
        for part in (f"{n} items", f"{copies} copies", f"{n * copies} slots",
                     f"batches of {q}", f"{left} left over", "smaller_last"):
            assert part in message
    else:
        assert allocate(items, copies, q, seed, remainder="error") == allocate(
            items, copies, q, seed)


# --- full allocation: examples ------------------------------------------------------------------
def test_six_questions_two_copies_three_each() -> None:
    items = ids(6)
    alloc = allocate(items, copies=2, per_participant=3, seed=7)
    assert len(alloc) == 4
    assert [len(b) for b in alloc] == [3, 3, 3, 3]
    assert alloc.counts() == Counter(dict.fromkeys(items, 2))
    # the first two participants cover every question once before anyone gets a second copy
    assert sorted(alloc[0] + alloc[1]) == items


def test_twelve_questions_four_copies_five_each_last_gets_three() -> None:
    items = ids(12)
    alloc = allocate(items, copies=4, per_participant=5, seed=1)
    assert len(alloc) == 10
    assert [len(b) for b in alloc] == [5] * 9 + [3]
    assert alloc.counts() == Counter(dict.fromkeys(items, 4))
    with pytest.raises(ValueError, match=r"12 items x 4 copies = 48 slots .*batches of 5 "
                                         r"\(3 left over\).*per_participant=4 or 6"):
        allocate(items, copies=4, per_participant=5, seed=1, remainder="error")


def test_published_study_numbers_match_the_config_plan() -> None:
    s1, s2 = Study1Config(), Study2Config()
    items = ids(1000)
    alloc = allocate(items, s1.responses_per_question, s1.questions_per_participant, seed=0)
    assert len(alloc) == 400 == s1.participants_needed(1000)
    pairs = ids(6000, "p")  # 1000 questions x 6 pairs of 4 answers
    rating = allocate(pairs, s2.ratings_per_pair, s2.pairs_per_participant, seed=0)
    assert len(rating) == s2.participants_needed(6000) == 300
    assert rating.counts() == Counter(dict.fromkeys(pairs, 3))


def test_single_item_and_full_batches() -> None:
    assert allocate(["only"], 3, 1, seed=0).batches == (("only",),) * 3
    whole = allocate(ids(4), 2, 4, seed=0)  # Q == N: everyone gets everything
    assert [sorted(b) for b in whole] == [ids(4)] * 2


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(item_ids=[]), ValueError, "no items"),
        (dict(item_ids=["a", "b", "a"]), ValueError, r"1 duplicate item id\(s\): 'a'"),
        (dict(item_ids=["a", ""]), ValueError, "empty string"),
        (dict(item_ids=["a", 3]), TypeError, "must be strings"),
        (dict(item_ids="abc"), TypeError, "not a single string"),
        (dict(per_participant=4), ValueError, r"per_participant=4 .* only 3 items"),
        (dict(per_participant=0), ValueError, "per_participant must be at least 1"),
        (dict(copies=0), ValueError, "copies must be at least 1"),
        (dict(copies=True), TypeError, "copies must be a whole number"),
        (dict(copies=2.0), TypeError, "copies must be a whole number"),
        (dict(seed="7"), TypeError, "seed must be an int"),
        (dict(remainder="pad"), ValueError, "remainder must be 'smaller_last' or 'error'"),
    ],
)
def test_allocate_rejects_bad_input(kwargs: dict, error: type[Exception], match: str) -> None:
    args = dict(item_ids=["a", "b", "c"], copies=2, per_participant=2, seed=0) | kwargs
    with pytest.raises(error, match=match):
        allocate(**args)


# --- re-allocation: properties ------------------------------------------------------------------
@st.composite
def dropouts(draw: st.DrawFn):
    """An allocation, the participants who dropped out and how many of their items each had
    answered (the answered ones are kept, the rest released)."""
    n, copies, q = draw(shapes(max_items=30, max_copies=5))
    items = ids(n)
    alloc = allocate(items, copies, q, draw(seeds))
    dropped = draw(st.sets(st.integers(0, len(alloc) - 1), max_size=len(alloc)))
    answered = {p: draw(st.integers(0, len(alloc[p]))) for p in sorted(dropped)}
    kept: list[str] = []
    released: list[str] = []
    for p, batch in enumerate(alloc):
        done = answered.get(p, len(batch))
        kept += batch[:done]
        released += batch[done:]
    return items, copies, q, alloc, answered, kept, released


def replay_reallocation(pool: Counter[str], q: int, result, held=None, room=None) -> None:
    left = Counter(pool)
    for pid, batch in result.assigned.items():
        check_greedy_batch(left, batch, (room or {}).get(pid, q), held[pid])
    for batch in result.batches:
        check_greedy_batch(left, batch, q)
    assert +left == Counter(), "some pooled slots were not handed out"


@SETTINGS
@given(dropouts(), seeds)
def test_reallocation_to_new_participants(case, seed: int) -> None:
    items, copies, q, _alloc, _answered, kept, released = case
    pool = Counter(released)
    result = reallocate(released, q, seed)
    assert result.assigned == {}
    # every released slot handed out exactly once - no over- or under-collection
    assert result.counts() == pool and result.n_slots == len(released)
    # each new participant gets distinct items, most copies first
    replay_reallocation(pool, q, result)
    # k copies of one item go to k different participants, and no more participants than
    # needed: max(ceil(slots / q), most copies of one item)
    expected = max(math.ceil(len(released) / q), max(pool.values(), default=0))
    assert len(result.batches) == expected
    sizes = [len(b) for b in result.batches]
    assert sizes == sorted(sizes, reverse=True)
    # after re-allocation every item again has exactly R holders
    final = Counter(kept) + result.counts()
    assert final == Counter(dict.fromkeys(items, copies))
    # deterministic; the pool object gives the same answer as the raw slots
    assert reallocate(list(released), q, seed) == result
    assert AllocationPool.of(released).hand_out(q, seed) == result


@SETTINGS
@given(dropouts(), seeds, st.data())
def test_reallocation_tops_up_and_never_repeats_an_item(case, seed: int,
                                                        data: st.DataObject) -> None:
    """Named participants first - stayers with spare room, and the drop-outs themselves coming
    back under a new account - then new participants; nobody gets an item they hold or held."""
    items, copies, q, alloc, answered, kept, released = case
    stayers = [p for p in range(len(alloc)) if p not in answered]
    chosen = data.draw(st.lists(st.sampled_from(stayers), unique=True) if stayers else st.just([]))
    held = {f"p{p}": set(alloc[p]) for p in chosen}
    held |= {f"back{p}": set(alloc[p]) for p in answered}  # they held their whole batch
    room = {pid: data.draw(st.integers(0, q)) for pid in held if data.draw(st.booleans())}
    pool = Counter(released)
    result = reallocate(released, q, seed, held=held, room=room)
    assert list(result.assigned) == list(held)
    assert result.counts() == pool
    replay_reallocation(pool, q, result, held=held, room=room)
    # no item twice for anyone, counting what they held before
    for pid, extra in result.assigned.items():
        assert not set(extra) & held[pid]
        assert len(extra) <= room.get(pid, q)
    final = Counter(kept) + result.counts()
    assert final == Counter(dict.fromkeys(items, copies))


@SETTINGS
@given(dropouts(), seeds, st.data())
def test_pool_take_one_signup_at_a_time(case, seed: int, data: st.DataObject) -> None:
    items, copies, q, _alloc, _answered, kept, released = case
    pool = AllocationPool.of(released)
    assert len(pool) == len(released) and pool.counts == dict(Counter(released))
    handed: Counter[str] = Counter()
    step = 0
    while pool:
        exclude = set(data.draw(st.lists(st.sampled_from(items), max_size=3)))
        batch, rest = pool.take(q, seed + step, exclude=exclude)
        # the same choice as the first named batch of a full hand-out
        assert batch == pool.hand_out(q, seed + step, held={"x": exclude}).assigned["x"]
        left = Counter(pool.counts)
        check_greedy_batch(left, batch, q, exclude)
        assert rest.counts == dict(+left)
        if not batch:  # everything left is excluded for this participant: a fresh one takes it
            batch, rest = pool.take(q, seed + step)
            assert batch
        handed.update(batch)
        pool, step = rest, step + 1
    assert handed == Counter(released)
    assert Counter(kept) + handed == Counter(dict.fromkeys(items, copies))


@SETTINGS
@given(st.lists(st.sampled_from(ids(30)), min_size=8, unique=True), st.integers(1, 6), seeds)
def test_reallocation_seed_matters(items: list[str], copies: int, seed: int) -> None:
    q = 3
    pool = dict.fromkeys(items, copies)
    assert reallocate(pool, q, seed) == reallocate(dict(pool), q, seed)
    # 8+ distinct items with equal counts: everything is a tie, so the seed decides the order
    # (three seeds agreeing has probability below 1/(8!)**2)
    results = {reallocate(pool, q, s).batches for s in range(seed, seed + 3)}
    assert len(results) > 1


# --- re-allocation: examples --------------------------------------------------------------------
def test_two_dropouts_holding_the_same_question() -> None:
    alloc = allocate(ids(6), copies=2, per_participant=3, seed=3)
    holders = [p for p, b in enumerate(alloc) if "q000" in b]
    assert len(holders) == 2
    released = [x for p in holders for x in alloc[p]]
    pool = AllocationPool.of(released)
    assert pool["q000"] == 2 and "q000" in pool
    result = pool.hand_out(per_participant=3, seed=0)
    with_q0 = [b for b in result.batches if "q000" in b]
    assert len(with_q0) == 2  # two copies -> two different new participants
    assert result.counts() == Counter(released)


def test_pool_with_fewer_distinct_items_than_q() -> None:
    result = reallocate({"a": 3, "b": 1}, per_participant=10, seed=0)
    assert result.batches == (("a", "b"), ("a",), ("a",))
    result = reallocate(["a", "b", "c", "a"], per_participant=2, seed=0)
    assert result.batches[0][0] == "a" and len(result.batches) == 2
    assert reallocate([], per_participant=5, seed=0).batches == ()


def test_named_participant_never_gets_a_held_item() -> None:
    result = reallocate({"a": 2, "b": 1, "c": 1}, per_participant=2, seed=0,
                        held={"old": {"a"}, "full": {"b"}}, room={"full": 0})
    assert set(result.assigned["old"]) == {"b", "c"}  # 'a' had most copies, but they held it
    assert result.assigned["full"] == ()
    assert result.batches == (("a",), ("a",))


def test_pool_release_and_take() -> None:
    pool = AllocationPool().release(["q1", "q2"]).release({"q1": 1, "q3": 0})
    assert pool.counts == {"q1": 2, "q2": 1} and len(pool) == 3 and pool.distinct == 2
    batch, rest = pool.take(per_participant=1, seed=0)
    assert batch == ("q1",) and rest.counts == {"q1": 1, "q2": 1}
    assert pool.take(per_participant=5, seed=0, exclude={"q1", "q2"}) == ((), pool)
    assert AllocationPool().take(3, seed=0) == ((), AllocationPool())
    assert pool["missing"] == 0


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: reallocate("abc", 2, 0), TypeError, "not a single string"),
        (lambda: reallocate({"a": -1}, 2, 0), ValueError, "must be >= 0"),
        (lambda: reallocate({"a": 1.5}, 2, 0), TypeError, "whole number"),
        (lambda: reallocate(["a", 1], 2, 0), TypeError, "non-empty strings"),
        (lambda: reallocate(["a"], 0, 0), ValueError, "per_participant must be at least 1"),
        (lambda: reallocate(["a"], 2, 0, held={"p": "a"}), TypeError, "not a single string"),
        (lambda: reallocate(["a"], 2, 0, room={"p": 1}), ValueError, "not in held"),
        (lambda: reallocate(["a"], 2, 0, held={"p": set()}, room={"p": 3}), ValueError,
         r"room\['p'\]=3 must be between 0 and per_participant=2"),
        (lambda: AllocationPool.of(["a"]).take(2, 0, exclude="a"), TypeError, "single string"),
    ],
)
def test_reallocate_rejects_bad_input(call, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()


def test_docstring_examples() -> None:
    assert doctest.testmod(allocation_module).failed == 0
