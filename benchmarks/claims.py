"""Benchmark: a burst of simultaneous study-1 claims, warm account pool against cold claims.

Runs by hand (not a test). It starts its OWN embedded Argilla stack (redis, argilla-server 2.8
with the crowdpref-sql search engine, rq worker) in a private state folder on free ports, and
stops it at the end, also on error or Ctrl-C (``--keep`` leaves it up and prints its URL). The
study store is SQLite in that state folder.

1. Warm: a study-1 collection of ``n`` questions built in code (R=4, Q=10: twice the batches the
   burst needs, so no claim finds the study full) with a pool of ``--pool`` accounts;
   ``refill_pool()`` fills it first (not timed; its duration is printed). Then ``--claims``
   threads, each with its own participant key, its own :class:`ArgillaOwner` (the argilla SDK
   client is not made for sharing between threads) and its own :class:`Collection` on the
   shared store, are released together by a barrier and each calls ``Collection.claim``.
2. Cold: a second collection (another study name) with pool size 0 and the same burst: every
   claim creates its account on the spot (user, workspace, dataset) before its records.

Per claim it measures, from the claim call: the claim's return; then the participant logs in
(``AnnotatorSession`` with the returned username/password - what their browser does) and polls
their pending queue until it holds their Q records ("visible"). Login is part of what a person
experiences and is in "visible"; it is also shown on its own. Errors are retried the way a person
reloads (a claim with the same key - claims are idempotent and a repeated one completes a
half-finished one -, a login or queue call answered 5xx), after 1, 2, 4 .. 15 s; whoever still
has no records after 5 minutes gives up and counts as "never" in the percentiles (no survivor
bias: more than 5% giving up makes p95 "never"). It prints p50/p95 per phase, the
cold/warm ratio at p95, where the time of a claim goes (store transactions, the SQLite write-lock
wait, the dataset lookup, the bulk log, account provisioning; HTTP calls by endpoint), and the
double-allocation checks: from the store (items over R copies, a participant holding an item
twice, an account bound twice) and from Argilla (each participant's dataset holds exactly the
records the store gives them). Targets: warm p95 < 2 s, cold/warm p95 >= 5x, 0 double
allocations; each printed PASS or MISS.

    .venv/bin/python benchmarks/claims.py [--claims 100] [--pool K] [--keep]

``--store-only`` measures the study store alone (no Argilla, SQLite in a private folder): one
claim of Q=60 items (study 2's shape: R=3, counterbalanced, a warm pool) at 1,000, 10,000 and
60,000 items (``--sizes``). Per size: a fresh store and collection, 5 claims not timed, then
``--store-claims`` (100) timed ``Store.claim`` calls; before each, once 10 participants hold
work (or the collection is half taken), the oldest active participant is released (not
timed), so every size is measured the same way, with taken, released and untaken items mixed. Beside it, in the same run and at the
same size, the method's **loop step**: one step of the allocation loop the published method
runs per participant - sort the N items by copies still missing (a Python ``sorted`` over a
dict of N counts) and take the first Q -, timed 30 times; and the least a write transaction
costs on that store (one event row: connect, lock, insert, commit, close), the floor under any
claim. It prints claim p50/p95, the loop step and that floor per size, the growth of the claim's p50 from the smallest size to the largest, and the
counts check (``Store.check``: the per-item counts equal a recount of the assignments).
Targets: growth 60k/1k under 2x; a claim (p50) faster than the loop step at 60k.

    .venv/bin/python benchmarks/claims.py --store-only [--sizes 1000,10000,60000] [--store-claims 100]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.percentiles import fmt, pct  # noqa: E402
from crowdpref.argilla_client import AnnotatorSession, ArgillaOwner  # noqa: E402
from crowdpref.checks import is_check  # noqa: E402
from crowdpref.collection import Collection  # noqa: E402
from crowdpref.config import parse_study  # noqa: E402
from crowdpref.settings import Settings, load_settings  # noqa: E402
from crowdpref.store import Claimed, Store  # noqa: E402
from crowdpref.study1 import study1_collection  # noqa: E402
from tests.ports import free_port  # noqa: E402

R, Q = 4, 10  # copies per question, questions per participant
TARGET_WARM_P95_S = 2.0
TARGET_RATIO = 5.0
VISIBLE_TIMEOUT_S = 300.0  # a participant gives up after this long
POLL_S = 0.05
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 15.0  # a participant reloading after an error: first pause, longest pause
CATEGORIES = ("empathy", "ethics", "humour", "trust", "negotiation")

console = Console()
if not console.is_terminal:  # piped or logged: wide enough for the tables
    console = Console(width=200)


# --- the private stack ------------------------------------------------------------------------
def private_settings(home: Path) -> Settings:
    """Own state folder, free ports, no external URLs (a developer's CROWDPREF_*/ARGILLA_*
    environment cannot point the benchmark at a real server)."""
    return load_settings(
        home=home, argilla_port=free_port(), prefect_port=free_port(), redis_port=free_port(),
        argilla_venv=REPO / ".venv-argilla", argilla_url=None, argilla_api_key=None, prefect_api_url=None,
    )


@contextmanager
def embedded_argilla(home: Path, keep: bool) -> Iterator[Settings]:
    from services import stack

    settings = private_settings(home)
    started = time.perf_counter()
    try:
        with console.status("starting the embedded Argilla stack") as status:
            stack.up(settings, components=["argilla"], on_step=lambda step: status.update(f"starting {step}"))
        console.print(f"embedded Argilla up at {settings.argilla_api_url} in {time.perf_counter() - started:.1f} s "
                      f"(state folder {home})")
        yield settings
    finally:
        if keep:
            console.print(f"--keep: the stack stays up at {settings.argilla_api_url} (stop it with "
                          f"CROWDPREF_HOME={home} crowdpref down)")
        else:
            stopped = stack.down(settings)
            console.print(f"stopped: {', '.join(stopped) or 'nothing was running'}")


# --- the study ---------------------------------------------------------------------------------
def questions_frame(n: int) -> pd.DataFrame:
    return pd.DataFrame([
        {"question_id": f"q{i:05d}", "category": CATEGORIES[i % len(CATEGORIES)],
         "question": f"Question {i}: how would you handle everyday social situation number {i} with a friend?"}
        for i in range(n)
    ])


def study_config(name: str, pool: int) -> Any:
    return parse_study({
        "name": name, "seed": 7, "participants": "simulated",
        "study1": {"responses_per_question": R, "questions_per_participant": Q, "pool_size": pool,
                   "inactive_after_minutes": 600},
        "crowd": {"dropout_rate": 0, "low_effort_rate": 0, "offensive_rate": 0, "never_start_rate": 0},
    }, source="benchmarks/claims.py")


# --- per-thread profiling ------------------------------------------------------------------------
_local = threading.local()
SERVER_ERRORS = "(answers 5xx: the server overloaded)"
PHASES = (
    "store: claim txn", "  (of which: SQLite write-lock wait)",
    "argilla: provision account (cold)", "  ensure_workspace", "  ensure_annotator (user: bcrypt hash)",
    "  ensure_dataset", "store: account_ready txn",
    "argilla: dataset lookup (find_dataset)", "argilla: bulk log of the records", "store: records_logged txn",
)
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _profile() -> dict[str, float] | None:
    return getattr(_local, "phases", None)


def record(phase: str, seconds: float) -> None:
    phases = _profile()
    if phases is not None:
        phases[phase] = phases.get(phase, 0.0) + seconds


def timed(obj: Any, name: str, phase: str) -> None:
    """Wrap ``obj.name`` (on this instance only) so its time adds to ``phase`` of the calling
    thread's claim."""
    original = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            record(phase, time.perf_counter() - started)

    setattr(obj, name, wrapper)


def instrument_store(store: Store) -> None:
    """Store transactions on the claim path, and the wait for SQLite's write lock (the time
    ``BEGIN IMMEDIATE`` takes: other claims' transactions ahead of this one)."""
    from sqlalchemy import event

    timed(store, "claim", "store: claim txn")
    timed(store, "records_logged", "store: records_logged txn")
    timed(store, "account_ready", "store: account_ready txn")

    @event.listens_for(store.engine, "before_cursor_execute")
    def _before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement == "BEGIN IMMEDIATE":
            _local.begin_at = time.perf_counter()

    @event.listens_for(store.engine, "after_cursor_execute")
    def _after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement == "BEGIN IMMEDIATE":
            record("  (of which: SQLite write-lock wait)", time.perf_counter() - _local.begin_at)


def instrument_http(client: Any) -> None:
    """Count and time (to the response headers) every request of an httpx client, by endpoint."""

    def on_request(request: Any) -> None:
        starts = getattr(_local, "request_starts", None)
        if starts is not None:
            starts[id(request)] = time.perf_counter()

    def on_response(response: Any) -> None:
        starts = getattr(_local, "request_starts", None)
        calls = getattr(_local, "calls", None)
        if starts is None or calls is None:
            return
        begun = starts.pop(id(response.request), None)
        if response.status_code >= 500:
            n, _ = calls.get(SERVER_ERRORS, (0, 0.0))
            calls[SERVER_ERRORS] = (n + 1, 0.0)
        if begun is not None:
            path = UUID.sub("{id}", response.request.url.path)
            key = f"{response.request.method} {path}"
            n, seconds = calls.get(key, (0, 0.0))
            calls[key] = (n + 1, seconds + time.perf_counter() - begun)

    client.event_hooks["request"].append(on_request)
    client.event_hooks["response"].append(on_response)


def instrument_collection(collection: Collection) -> None:
    owner = collection.owner
    timed(owner, "find_dataset", "argilla: dataset lookup (find_dataset)")
    timed(owner, "log_records", "argilla: bulk log of the records")
    timed(collection, "_provision_account", "argilla: provision account (cold)")
    timed(owner, "ensure_workspace", "  ensure_workspace")
    timed(owner, "ensure_annotator", "  ensure_annotator (user: bcrypt hash)")
    timed(owner, "ensure_dataset", "  ensure_dataset")
    instrument_http(owner._http)
    instrument_http(owner.client.http_client)


# --- one claim -------------------------------------------------------------------------------------
@dataclass
class ClaimRun:
    key: str
    ok: bool = False
    error: str | None = None  # the last error (a claim still failing at the deadline)
    failed_at: str | None = None  # "claim" | "login" | "poll"
    username: str | None = None
    items: int = 0
    claim_s: float = math.nan  # first claim call -> a claim call returned (retries included)
    login_s: float = math.nan  # the participant's login alone (retries included)
    visible_s: float = math.nan  # first claim call -> the Q records in the participant's pending queue
    claim_errors: int = 0  # claim calls that raised (the participant reloads the portal: the same key again)
    participant_errors: int = 0  # login/queue calls answered 5xx or unreachable (the browser reloads)
    polls: int = 0
    phases: dict[str, float] = field(default_factory=dict)
    calls: dict[str, tuple[int, float]] = field(default_factory=dict)


def _transient(exc: Exception) -> bool:
    return bool(getattr(exc, "transient", False)) or isinstance(exc, httpx.HTTPError)


def run_claim(collection: Collection, api_url: str, run: ClaimRun, barrier: threading.Barrier) -> None:
    """One participant: claim (again, with the same key, after an error - a claim is idempotent
    and a repeated one completes a half-finished one), log in, poll the pending queue until it
    holds their records (again after a 5xx, as a browser reload would). Gives up after
    VISIBLE_TIMEOUT_S from the first claim call."""
    _local.phases, _local.calls, _local.request_starts = run.phases, run.calls, {}
    stage = "claim"
    try:
        barrier.wait(timeout=600)
        started = time.perf_counter()

        retries = 0
        jitter = random.Random(run.key)

        def retry_or_raise(exc: Exception) -> None:
            """A person reloads after an error, waiting longer each time (1, 2, 4 .. 15 s, jittered)."""
            nonlocal retries
            run.error = f"{exc.__class__.__name__}: {str(exc)[:300]}"
            if time.perf_counter() - started > VISIBLE_TIMEOUT_S:
                raise exc
            time.sleep(min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** retries) * jitter.uniform(0.75, 1.25))
            retries += 1

        while True:
            try:
                result = collection.claim(run.key, "simulated")
                break
            except Exception as exc:  # noqa: BLE001 - any claim error: the participant tries again
                run.claim_errors += 1
                retry_or_raise(exc)
        run.claim_s = time.perf_counter() - started
        if not isinstance(result, Claimed):
            raise RuntimeError(f"claim answered {result!r}")
        participant = result.participant
        run.username, run.items = participant.username, len(participant.items)
        expected = len(participant.items)  # quality checks are among them
        _local.phases, _local.calls = {}, {}  # what follows is the participant's, not the claim's
        stage = "login"
        login_started = time.perf_counter()
        while True:
            try:
                session = AnnotatorSession(api_url, participant.username, collection.owner.passwords(participant.username))
                break
            except Exception as exc:  # noqa: BLE001
                if not _transient(exc):
                    raise
                run.participant_errors += 1
                retry_or_raise(exc)
        run.login_s = time.perf_counter() - login_started
        stage = "poll"
        try:
            dataset_id = None
            while True:
                run.polls += 1
                try:
                    if dataset_id is None:
                        dataset_id = next((d["id"] for d in session.datasets()
                                           if d["name"] == collection.dataset_name), None)
                    if dataset_id is not None and len(session.pending_records(dataset_id)) >= expected:
                        break
                except Exception as exc:  # noqa: BLE001
                    if not _transient(exc):
                        raise
                    run.participant_errors += 1
                    retry_or_raise(exc)
                    continue
                if time.perf_counter() - started > VISIBLE_TIMEOUT_S:
                    raise RuntimeError(f"records not visible to {participant.username} after {VISIBLE_TIMEOUT_S:g} s")
                time.sleep(POLL_S)
            run.visible_s = time.perf_counter() - started
        finally:
            session.close()
        run.ok = True
    except Exception as exc:  # noqa: BLE001 - one participant failing is a result, not a crash
        run.failed_at = stage
        run.error = f"{exc.__class__.__name__}: {str(exc)[:300]}"
    finally:
        _local.phases = _local.calls = _local.request_starts = None


def burst(label: str, make_collection: Callable[[], Collection], api_url: str, n: int, key_prefix: str,
          progress: Progress) -> tuple[list[ClaimRun], float]:
    """``n`` threads, each with its own owner + collection, released together by a barrier."""
    task = progress.add_task(f"{label}: preparing {n} clients", total=n)
    collections: list[Collection] = []
    for _ in range(n):  # built before the burst (check_server, SDK client, the collection row)
        collection = make_collection()
        collection.info  # noqa: B018 - the store's collection row, read now, not in the timed claim
        instrument_collection(collection)
        collections.append(collection)
        progress.advance(task)
    runs = [ClaimRun(key=f"{key_prefix}-{i:04d}") for i in range(n)]
    barrier = threading.Barrier(n + 1)
    threads = [threading.Thread(target=run_claim, args=(c, api_url, r, barrier), name=f"claim-{i}", daemon=True)
               for i, (c, r) in enumerate(zip(collections, runs))]
    for thread in threads:
        thread.start()
    progress.update(task, description=f"{label}: {n} simultaneous claims", completed=0)
    barrier.wait(timeout=600)
    started = time.perf_counter()
    while any(t.is_alive() for t in threads):
        progress.update(task, completed=sum(not t.is_alive() for t in threads))
        time.sleep(0.1)
    wall = time.perf_counter() - started
    progress.update(task, completed=n)
    for collection in collections:
        collection.owner.close()
    return runs, wall


# --- checks ------------------------------------------------------------------------------------------
@dataclass
class Allocation:
    over_r: int  # items with more than R copies in flight or done
    held_twice: int  # participants holding one item twice
    accounts_shared: int  # accounts bound to more than one participant / usernames handed out twice
    wrong_batch: int  # participants without exactly Q distinct items
    argilla_extra: int  # participants whose dataset holds records the store does not give them
    argilla_missing: int  # participants whose dataset lacks some of their records (a claim left unfinished)
    warm_claims: int
    problems: list[str]
    argilla_mismatch_n: int
    participants: int

    @property
    def double(self) -> int:
        return self.over_r + self.held_twice + self.accounts_shared + self.argilla_extra

    @property
    def argilla_mismatch(self) -> int:
        return self.argilla_mismatch_n


def check_allocation(collection: Collection, store: Store, runs: list[ClaimRun]) -> Allocation:
    cid = collection.info.id
    problems = list(store.check(cid))
    participants = store.participants(cid)
    held_twice = [p.username for p in participants if len(p.items) != len(set(p.items))]
    problems += [f"{u} holds an item twice" for u in held_twice]
    by_account = Counter(p.account_id for p in participants)
    by_username = Counter(r.username for r in runs if r.username)
    shared = [a for a, k in by_account.items() if k > 1] + [u for u, k in by_username.items() if k > 1]
    problems += [f"account/username {a} bound to more than one participant" for a in shared]
    wrong = [p.username for p in participants if len(set(p.items)) != Q]
    problems += [f"{u} has {len(set(p.items))} items instead of {Q}" for p in participants
                 if (u := p.username) in wrong]
    mismatch = extra = missing = 0
    for participant in participants:
        dataset = collection.owner.find_dataset(collection.dataset_name, workspace=participant.username)
        held = set() if dataset is None else {r for r in collection.owner.record_ids(dataset) if not is_check(r)}
        expected = {i for i in participant.visible if not is_check(i)}
        if held != expected:
            mismatch += 1
            extra += bool(held - expected)
            missing += bool(expected - held)
            problems.append(f"{participant.username}: Argilla holds {len(held)} records, the store "
                            f"{len(expected)} (differing: {sorted(held ^ expected)[:3]})")
    warm = sum(bool(json.loads(e["detail"] or "{}").get("warm"))
               for e in store.events(cid, kinds=["claimed"]))
    return Allocation(len(store.check(cid)), len(held_twice), len(shared), len(wrong), extra, missing, warm,
                      problems, mismatch, len(participants))


# --- reporting -----------------------------------------------------------------------------------------
def claim_times(runs: list[ClaimRun]) -> list[float]:
    """Claim return per participant; one whose claim never succeeded counts as never."""
    return [r.claim_s if not math.isnan(r.claim_s) else math.inf for r in runs]


def visible_times(runs: list[ClaimRun]) -> list[float]:
    return [r.visible_s if r.ok else math.inf for r in runs]


def verdict(ok: bool) -> str:
    return "[green]PASS[/]" if ok else "[red]MISS[/]"


def latency_table(results: dict[str, tuple[list[ClaimRun], float]]) -> Table:
    table = Table(title=f"{next(iter(len(r) for r, _ in results.values()))} simultaneous study-1 claims "
                        f"(R={R}, Q={Q}), seconds from the claim call")
    for column in ("", "records visible", "claim errors (retried)", "participant 5xx (retried)", "burst wall",
                   "claim returns p50", "p95", "login p50", "p95", "visible p50", "p95", "max"):
        table.add_column(column, justify="right")
    for label, (runs, wall) in results.items():
        claim, visible = claim_times(runs), visible_times(runs)
        login = [r.login_s for r in runs]
        table.add_row(label, f"{sum(r.ok for r in runs)}/{len(runs)}", str(sum(r.claim_errors for r in runs)),
                      str(sum(r.participant_errors for r in runs)), fmt(wall),
                      fmt(pct(claim, 50)), fmt(pct(claim, 95)), fmt(pct(login, 50)), fmt(pct(login, 95)),
                      fmt(pct(visible, 50)), fmt(pct(visible, 95)), fmt(max(visible, default=math.nan)))
    return table


def phase_table(results: dict[str, tuple[list[ClaimRun], float]]) -> Table:
    table = Table(title="where a claim's time goes (per claim, inside Collection.claim; visible = claim + login + poll)")
    table.add_column("phase")
    for label in results:
        table.add_column(f"{label} p50", justify="right")
        table.add_column(f"{label} p95", justify="right")
        table.add_column(f"{label} share", justify="right")
    names: list[str] = []
    for runs, _ in results.values():
        for r in runs:
            names += [n for n in r.phases if n not in names]
    order = {name: n for n, name in enumerate(PHASES)}  # the claim's order: a parent, then its parts
    names.sort(key=lambda name: order.get(name, len(order)))
    rows = ["claim (total)"] + names + ["participant: login (bcrypt)", "participant: poll until visible"]
    for name in rows:
        cells = [name]
        for runs, _ in results.values():
            ok = [r for r in runs if not math.isnan(r.claim_s)]
            if name == "claim (total)":
                values = [r.claim_s for r in ok]
            elif name == "participant: login (bcrypt)":
                values = [r.login_s for r in ok]
            elif name == "participant: poll until visible":
                values = [r.visible_s - r.claim_s - r.login_s for r in ok if r.ok]
            else:
                values = [r.phases.get(name, 0.0) for r in ok]
            total_claim = sum(r.claim_s for r in ok) or math.nan
            share = sum(values) / total_claim if name.startswith(("store", "argilla", " ", "claim")) else math.nan
            cells += [fmt(pct(values, 50)), fmt(pct(values, 95)),
                      "-" if math.isnan(share) else f"{share:.0%}"]
        table.add_row(*cells)
    return table


def http_table(results: dict[str, tuple[list[ClaimRun], float]], top: int = 8) -> Table:
    table = Table(title="owner HTTP calls inside the claims, by endpoint (time to response headers)")
    table.add_column("endpoint")
    for label in results:
        table.add_column(f"{label} calls/claim", justify="right")
        table.add_column(f"{label} mean", justify="right")
        table.add_column(f"{label} total", justify="right")
    totals: dict[str, dict[str, tuple[int, float]]] = {}
    for label, (runs, _) in results.items():
        agg: dict[str, tuple[int, float]] = defaultdict(lambda: (0, 0.0))
        for r in runs:
            for key, (n, s) in r.calls.items():
                agg[key] = (agg[key][0] + n, agg[key][1] + s)
        totals[label] = dict(agg)
    keys: list[str] = []  # each burst's costliest endpoints, warm first
    for agg in totals.values():
        keys += [k for k in sorted(agg, key=lambda k: -agg[k][1])[:top] if k not in keys]
    keys = [k for k in keys if k != SERVER_ERRORS] + [SERVER_ERRORS]
    for key in keys:
        cells = [key]
        for label, (runs, _) in results.items():
            n, s = totals[label].get(key, (0, 0.0))
            if key == SERVER_ERRORS:
                cells += [f"{n / max(1, len(runs)):.2f}" if n else "0", "", f"{n} answers" if n else ""]
                continue
            cells += [f"{n / max(1, len(runs)):.1f}" if n else "-", f"{s / n * 1000:.0f} ms" if n else "-",
                      f"{s:.1f} s" if n else "-"]
        table.add_row(*cells)
    return table


def allocation_table(checks: dict[str, Allocation]) -> Table:
    table = Table(title="double allocation (store and Argilla, after the bursts)")
    table.add_column("")
    for column in ("participants", "warm accounts used", "items over R", "holds an item twice",
                   "account bound twice", "batch != Q", "Argilla dataset != store", "of which extra records",
                   "of which missing records", "double allocations"):
        table.add_column(column, justify="right")
    for label, c in checks.items():
        table.add_row(label, str(c.participants), str(c.warm_claims), str(c.over_r), str(c.held_twice),
                      str(c.accounts_shared), str(c.wrong_batch), str(c.argilla_mismatch), str(c.argilla_extra),
                      str(c.argilla_missing), str(c.double))
    return table


# --- the store alone ------------------------------------------------------------------------------------
STORE_R, STORE_Q = 3, 60  # study 2's shape: 3 ratings per pair, 60 pairs per participant
STORE_ACTIVE = 10  # participants holding work at once: from then on each claim follows a release, at every size
TARGET_GROWTH = 2.0


def loop_step_times(missing: dict[str, int], q: int, repeats: int = 30) -> list[float]:
    """The method's allocation loop, one step per participant: sort every item by copies still
    missing, take the first ``q``, count them taken."""
    missing = dict(missing)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        chosen = sorted(missing, key=missing.__getitem__, reverse=True)[:q]
        for item in chosen:
            missing[item] -= 1
        times.append(time.perf_counter() - started)
    return times


def store_claim_times(home: Path, n_items: int, n_claims: int
                      ) -> tuple[list[float], list[float], list[float], list[str]]:
    """(claim times, loop-step times, one-row write times, counts problems) at ``n_items`` items."""
    store = Store(f"sqlite:///{Path(tempfile.mkdtemp(dir=home)) / 'store.sqlite'}")  # a fresh store per size
    try:
        items = [f"pair-{i:06d}" for i in range(n_items)]
        info = store.collection(f"bench-{n_items}", "study2", items, copies=STORE_R, per_participant=STORE_Q,
                                seed=7, username_prefix=f"b{n_items}", counterbalance=True)
        warmup = 5
        store.plan_pool(info, warmup + n_claims)  # a warm pool: every claim binds a ready account
        for account in store.accounts(info.id):
            store.account_ready(info, account.id)
        slots = n_items * STORE_R
        active: list[int] = []
        times = []
        for n in range(warmup + n_claims):
            while active and (len(active) >= STORE_ACTIVE or (len(active) + 1) * STORE_Q > slots // 2):
                pid = active.pop(0)
                store.begin_release(info.id, pid, "bench")
                store.finish_release(info.id, pid)
            started = time.perf_counter()
            result = store.claim(info, f"bench-{n_items}-{n}", "simulated")
            elapsed = time.perf_counter() - started
            if not isinstance(result, Claimed):
                raise RuntimeError(f"claim {n} at {n_items} items answered {result}")
            active.append(result.participant.id)
            if n >= warmup:
                times.append(elapsed)
        floor = []  # the least a write transaction costs here: one event row (open, lock, insert, commit, close)
        for _ in range(30):
            started = time.perf_counter()
            store.log_event(info.id, "bench_floor")
            floor.append(time.perf_counter() - started)
        counts = store.item_counts(info.id)
        missing = {item: STORE_R - counts.held[item] - counts.submitted[item] for item in items}
        return times, loop_step_times(missing, STORE_Q), floor, store.check(info.id)
    finally:
        store.close()


def store_only(sizes: list[int], n_claims: int) -> int:
    home = Path(tempfile.mkdtemp(prefix="bench-claims-store-"))
    console.print(f"store only: SQLite in {home}; one claim = Q={STORE_Q} items, R={STORE_R}, counterbalanced, "
                  f"warm pool; {n_claims} timed claims per size, each after a release once {STORE_ACTIVE} hold work; "
                  f"{os.cpu_count()} cores")
    rows = []
    try:
        for n_items in sizes:
            claims, loop, floor, problems = store_claim_times(home, n_items, n_claims)
            rows.append((n_items, pct(claims, 50), pct(claims, 95), pct(loop, 50), pct(floor, 50), problems))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    table = Table(title=f"Store.claim of {STORE_Q} items against the method's loop step (same run)")
    for column in ("items", "claim p50", "claim p95", "loop step p50", "claim p50 / loop step",
                   "one-row write txn p50", "counts check"):
        table.add_column(column, justify="right")
    for n_items, p50, p95, loop, floor, problems in rows:
        table.add_row(f"{n_items:,}", fmt_ms(p50), fmt_ms(p95), fmt_ms(loop), f"{p50 / loop:.2f}x", fmt_ms(floor),
                      "ok" if not problems else f"{len(problems)} differences")
    console.print(table)
    first, last = rows[0], rows[-1]
    growth = last[1] / first[1]
    targets = [
        (f"growth of the claim p50, {last[0]:,} / {first[0]:,} items, < {TARGET_GROWTH:g}x", f"{growth:.2f}x",
         growth < TARGET_GROWTH),
        (f"claim p50 < loop step p50 at {last[0]:,} items", f"{fmt_ms(last[1])} vs {fmt_ms(last[3])}",
         last[1] < last[3]),
        ("per-item counts equal a recount of the assignments", f"{sum(len(r[5]) for r in rows)} differences",
         all(not r[5] for r in rows)),
    ]
    verdicts = Table(title="targets")
    for column in ("target", "measured", ""):
        verdicts.add_column(column)
    for name, measured, ok in targets:
        verdicts.add_row(name, measured, verdict(ok))
    console.print(verdicts)
    return 0 if all(ok for _, _, ok in targets) else 1


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 0.1 else f"{seconds * 1000:.0f} ms"


# --- main ------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=100, help="simultaneous claims per burst (default 100)")
    parser.add_argument("--pool", type=int, default=None, help="warm pool size K (default: --claims)")
    parser.add_argument("--keep", action="store_true", help="leave the stack (and its state folder) up")
    parser.add_argument("--home", type=Path, default=None,
                        help="state folder (default test-output/bench-claims-<pid>, removed after a clean run)")
    parser.add_argument("--store-only", action="store_true",
                        help="the study store alone: claim p50/p95 at --sizes items against the method's loop step")
    parser.add_argument("--sizes", default="1000,10000,60000", help="--store-only: item counts (default 1000,10000,60000)")
    parser.add_argument("--store-claims", type=int, default=100, help="--store-only: timed claims per size (default 100)")
    args = parser.parse_args(argv)
    if args.store_only:
        try:
            sizes = [int(size.replace("_", "")) for size in args.sizes.split(",")]
        except ValueError:
            parser.error(f"--sizes {args.sizes!r}: give item counts separated by commas, e.g. 1000,10000,60000")
        if len(sizes) < 2 or min(sizes) < 2 * STORE_Q or args.store_claims < 1:
            parser.error(f"--sizes needs two or more counts of at least {2 * STORE_Q} items, "
                         "and --store-claims at least 1")
        return store_only(sizes, args.store_claims)
    n = args.claims
    pool = n if args.pool is None else args.pool
    n_questions = max(500, math.ceil(2 * n * Q / R))  # 2n batches: no claim finds the study full
    home = (args.home or REPO / "test-output" / f"bench-claims-{os.getpid()}").resolve()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still stops the stack
    warnings.filterwarnings("ignore", category=UserWarning, module="argilla")
    logging.getLogger("argilla.sdk").setLevel(logging.CRITICAL)  # its 5xx are counted in the HTTP table
    bench_started = time.perf_counter()
    questions = questions_frame(n_questions)
    clean = False
    with embedded_argilla(home, args.keep) as settings:
        api_url, api_key = settings.argilla_api_url, settings.resolved_argilla_api_key()
        store = Store(f"sqlite:///{home / 'claims-store.sqlite'}")
        instrument_store(store)
        suffix = f"{int(time.time()) % 100000:05d}"
        warm_config, cold_config = study_config(f"bench-warm-{suffix}", pool), study_config(f"bench-cold-{suffix}", 0)
        console.print(f"study: {n_questions} questions x R={R} / Q={Q} = {n_questions * R // Q} batches per "
                      f"collection; warm pool K={pool}; {n} simultaneous claims per burst; "
                      f"store {store.url.split('///')[-1]}")

        def collection_for(config: Any) -> Callable[[], Collection]:
            return lambda: study1_collection(config, questions, ArgillaOwner(api_url, api_key), home / "runs", store)

        results: dict[str, tuple[list[ClaimRun], float]] = {}
        checks: dict[str, Allocation] = {}
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            warm = collection_for(warm_config)()
            task = progress.add_task(f"warm pool: provisioning {pool} accounts (refill_pool)", total=pool)
            refill_started = time.perf_counter()
            done: dict[str, Any] = {}
            filler = threading.Thread(target=lambda: done.setdefault("made", warm.refill_pool()), daemon=True)
            filler.start()
            while filler.is_alive():
                progress.update(task, completed=sum(a.state == "ready" for a in store.accounts(warm.info.id)))
                filler.join(0.5)
            refill_s = time.perf_counter() - refill_started
            progress.update(task, completed=pool)
            if "made" not in done:
                raise RuntimeError("refill_pool failed (see the traceback above)")
            progress.console.print(f"refill_pool(): {done['made']} accounts ready in {refill_s:.1f} s "
                                   f"({refill_s / max(1, done['made']):.2f} s per account, one after another; not timed)")

            results["warm"] = burst("warm", collection_for(warm_config), api_url, n, f"warm-{suffix}", progress)
            results["cold"] = burst("cold", collection_for(cold_config), api_url, n, f"cold-{suffix}", progress)
            task = progress.add_task("checking allocations in the store and in Argilla", total=2)
            checks["warm"] = check_allocation(warm, store, results["warm"][0])
            progress.advance(task)
            cold = collection_for(cold_config)()
            checks["cold"] = check_allocation(cold, store, results["cold"][0])
            progress.advance(task)

        console.print(latency_table(results))
        console.print(phase_table(results))
        console.print(http_table(results))
        console.print(allocation_table(checks))
        failures = [(label, r) for label, (runs, _) in results.items() for r in runs if not r.ok]
        for label, run in failures[:5]:
            console.print(f"[red]{label} participant {run.key} gave up at {run.failed_at}:[/] {run.error}")
        for label, check in checks.items():
            for problem in check.problems[:5]:
                console.print(f"[red]{label}:[/] {problem}")

        warm_runs, cold_runs = results["warm"][0], results["cold"][0]
        warm_vis, cold_vis = pct(visible_times(warm_runs), 95), pct(visible_times(cold_runs), 95)
        warm_claim, cold_claim = pct(claim_times(warm_runs), 95), pct(claim_times(cold_runs), 95)

        def ratio(cold_s: float, warm_s: float) -> float:
            return math.nan if math.isinf(warm_s) or math.isnan(warm_s) else cold_s / warm_s

        ratio_vis, ratio_claim = ratio(cold_vis, warm_vis), ratio(cold_claim, warm_claim)

        def times(x: float) -> str:
            return "n/a (warm p95: never)" if math.isnan(x) else f"{x:.1f}x"

        double = sum(c.double for c in checks.values())
        missing = sum(c.argilla_missing for c in checks.values())
        console.print(f"cold/warm at p95: visible {times(ratio_vis)}, claim return {times(ratio_claim)} "
                      "(baseline: the cold burst of this run)")
        targets = [
            (f"warm p95 claim -> records visible (login included) < {TARGET_WARM_P95_S:g} s", fmt(warm_vis),
             warm_vis < TARGET_WARM_P95_S),
            (f"warm p95 claim call -> claim returned < {TARGET_WARM_P95_S:g} s", fmt(warm_claim),
             warm_claim < TARGET_WARM_P95_S),
            (f"cold/warm p95 (visible) >= {TARGET_RATIO:g}x", times(ratio_vis), ratio_vis >= TARGET_RATIO),
            (f"cold/warm p95 (claim return) >= {TARGET_RATIO:g}x", times(ratio_claim), ratio_claim >= TARGET_RATIO),
            ("double allocations = 0", str(double), double == 0),
            (f"every participant sees their records within {VISIBLE_TIMEOUT_S:g} s",
             f"{len(failures)} gave up, {missing} datasets short", not failures and not missing),
        ]
        table = Table(title="targets (2-core machine: client threads, Argilla server, redis and worker share it)")
        for column in ("target", "measured", ""):
            table.add_column(column)
        for name, measured, ok in targets:
            table.add_row(name, measured, verdict(ok))
        console.print(table)
        store.close()
        clean = not failures and not missing and double == 0
    console.print(f"wall time {time.perf_counter() - bench_started:.0f} s")
    if clean and not args.keep and args.home is None:
        shutil.rmtree(home, ignore_errors=True)
    elif not args.keep:
        console.print(f"state folder (logs) kept: {home}")
    return 0 if all(ok for _, _, ok in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
