"""Kill-safe provisioning, proved by fault injection on the real embedded Argilla.

For each operation that changes Argilla - provisioning a pool account, a claim (warm: a ready
pool account; cold: the account is created during the claim) and a release - a first run counts
the sequence of mutating Argilla calls (``ArgillaOwner.after_change``). Then, for every point
in that sequence, a fresh tiny study runs the operation again and dies right after that call
(a ``BaseException`` raised from the hook: nothing catches it, like a kill), or before the first
call is sent (only the store's intent exists). A new process's objects (store, client,
collection) then run the repair path - ``refill_pool``, the same ``claim`` again, ``monitor()``
- and Argilla is checked against the store: every account a user who logs in with the store's
password, in its own workspace, holding exactly one published dataset with the study's
questions and exactly the records the store says. Nothing may be refused.

The matrix (operation x crash point: repaired yes/no) goes to
``test-output/fault-injection-matrix.md``. A last test SIGKILLs a real collection process in
the middle of ``refill_pool(8)`` and repairs it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from crowdpref.account_passwords import AccountPasswords
from crowdpref.argilla_client import AnnotatorSession, ArgillaOwner
from crowdpref.checks import is_check
from crowdpref.collection import Collection
from crowdpref.config import parse_study
from crowdpref.store import ACTIVE, BOUND, COMPLETE, FINISHED, READY, RELEASED, Claimed, Store
from crowdpref.study1 import study1_collection
from crowdpref.tls import shared_context
from tests.integration.test_study1_collection import _questions as study1_questions

pytestmark = pytest.mark.integration

LEASE_S = 120.0  # Store.lease_unbound_creating: a LIVE provisioner holds an account this long
INACTIVE_MIN = 30
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class Crash(BaseException):
    """A kill between two Argilla calls: a BaseException, so no ``except Exception`` stops it."""


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _config_dict(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "seed": 11,
        "participants": "simulated",
        "study1": {
            "responses_per_question": 2, "questions_per_participant": 3, "inactive_after_minutes": INACTIVE_MIN,
            "pool_size": 0,
            "checks": {"count": 1},
        },
        "study2": {"pairs_per_participant": 6},
        "crowd": {"dropout_rate": 0, "low_effort_rate": 0, "offensive_rate": 0, "never_start_rate": 0},
    }


def _questions() -> list[dict[str, str]]:
    """The study-1 collection test's six questions, as plain rows (they travel to a child process)."""
    return study1_questions().to_dict("records")


# --- one tiny study; each open() is what a new process would build ----------------------------
@dataclass
class Study:
    server: Any
    folder: Path
    name: str
    clock: Clock = field(default_factory=Clock)

    @property
    def store_url(self) -> str:
        return f"sqlite:///{self.folder / 'store.sqlite'}"

    def open(self, clock: Callable[[], float] | None = None) -> Collection:
        owner = ArgillaOwner(self.server.api_url, self.server.owner_api_key,
                             passwords=AccountPasswords.from_secrets(self.folder / "secrets"))  # every process: one key
        store = Store(self.store_url, clock=clock or self.clock)
        return study1_collection(parse_study(_config_dict(self.name), source="test"), pd.DataFrame(_questions()),
                                 owner, self.folder, store)


def _close(collection: Collection) -> None:
    collection.owner.close()
    collection.store.close()


def _label(call: str) -> str:
    return UUID_RE.sub("{id}", call)


def _crash_before_first_change(owner: ArgillaOwner) -> None:
    """Die before the first mutating request is sent (both of the client's HTTP connections)."""

    def hook(request: httpx.Request) -> None:
        if request.method != "GET" and not request.url.path.endswith("/search"):
            raise Crash(f"before {request.method} {request.url.path}")

    for client in (owner._http, owner.client.http_client):
        hooks = client.event_hooks
        client.event_hooks = {"request": [*hooks["request"], hook], "response": list(hooks["response"])}


class CrashAfter:
    """The ``after_change`` hook: records every mutating call; dies after call number ``n``
    (n = 0: never - the counting run)."""

    def __init__(self, n: int = 0):
        self.n = n
        self.calls: list[str] = []

    def __call__(self, call: str) -> None:
        self.calls.append(call)
        if len(self.calls) == self.n:
            raise Crash(call)


# --- Argilla against the store ------------------------------------------------------------------
def argilla_vs_store(collection: Collection, server: Any) -> list[str]:
    """Everything that differs between Argilla and the study store (empty: consistent)."""
    store, info, spec = collection.store, collection.info, collection.spec
    problems = list(store.check(info.id))
    prefix = f"{info.username_prefix}-"
    settings = spec.dataset_settings()
    want_questions = {q.name for q in settings.questions}
    want_fields = {f.name for f in settings.fields}
    with httpx.Client(base_url=server.api_url, headers={"X-Argilla-Api-Key": server.owner_api_key},
                      timeout=60, verify=shared_context()) as http:

        def get(path: str, **params: Any) -> Any:
            response = http.get(path, params=params)
            response.raise_for_status()
            return response.json()

        users = {u["username"]: u for u in get("/api/v1/users")["items"] if u["username"].startswith(prefix)}
        workspaces = {w["name"]: w for w in get("/api/v1/me/workspaces")["items"] if w["name"].startswith(prefix)}
        datasets = get("/api/v1/me/datasets")["items"]
        accounts = store.accounts(info.id)
        names = {a.username for a in accounts}
        problems += [f"Argilla user {u} is unknown to the store" for u in sorted(set(users) - names)]
        problems += [f"Argilla workspace {w} is unknown to the store" for w in sorted(set(workspaces) - names)]
        participants = {p.username: p for p in store.participants(info.id)}
        in_argilla: Counter[str] = Counter()  # item -> records in participants' datasets
        for account in accounts:
            who = account.username
            participant = participants.get(who)
            if account.state not in (READY, BOUND):
                problems.append(f"account {who} is still '{account.state}'")
                continue
            if (participant is None) != (account.state == READY):
                problems.append(f"account {who} is '{account.state}' but has {'a' if participant else 'no'} participant")
            user = users.get(who)
            if user is None:
                problems.append(f"account {who}: no Argilla user")
                continue
            if user["role"] != "annotator":
                problems.append(f"account {who}: role {user['role']}")
            if not AnnotatorSession.password_works(server.api_url, who, collection.owner.passwords(who)):
                problems.append(f"account {who}: its password does not log in")
            member = who in {w["name"] for w in get(f"/api/v1/users/{user['id']}/workspaces")["items"]}
            finished = participant is not None and (participant.status in FINISHED or participant.withdrawn_at)
            if finished and member:
                problems.append(f"account {who}: {participant.status} but still in workspace {who}")
            elif not finished and not member:
                problems.append(f"account {who}: user is not in workspace {who}")
            workspace = workspaces.get(who)
            if workspace is None:
                problems.append(f"account {who}: no workspace")
                continue
            own = [d for d in datasets if d["workspace_id"] == workspace["id"]]
            if len(own) != 1 or own[0]["name"] != collection.dataset_name:
                problems.append(f"account {who}: workspace holds datasets {[d['name'] for d in own]}")
                continue
            dataset = own[0]
            if dataset["status"] != "ready":
                problems.append(f"account {who}: dataset is '{dataset['status']}', not published")
            questions = {q["name"] for q in get(f"/api/v1/datasets/{dataset['id']}/questions")["items"]}
            fields = {f["name"] for f in get(f"/api/v1/datasets/{dataset['id']}/fields")["items"]}
            if (questions, fields) != (want_questions, want_fields):
                problems.append(f"account {who}: dataset has questions {sorted(questions)}, fields {sorted(fields)}")
            records = [r["external_id"] for r in get(f"/api/v1/datasets/{dataset['id']}/records", limit=1000)["items"]]
            if len(records) != len(set(records)):
                problems.append(f"account {who}: records logged twice {sorted(records)}")
            if participant is None:
                expected: set[str] = set()
            elif participant.status in (ACTIVE, COMPLETE):
                expected = set(participant.visible)  # the quality check is one of their assignments
                if not participant.records_logged:
                    problems.append(f"participant {who}: records not marked logged")
            elif participant.status == RELEASED:
                expected = set(participant.submitted)
            else:
                problems.append(f"participant {who} is still '{participant.status}'")
                continue
            if set(records) != expected:
                problems.append(f"account {who}: dataset holds {sorted(set(records))}, the store says {sorted(expected)}")
            in_argilla.update(r for r in set(records) if not is_check(r))
    counts = store.item_counts(info.id)
    for item in store.items(info.id):
        n_store = counts.submitted[item] + counts.held[item]
        if in_argilla[item] != n_store:
            problems.append(f"item {item}: {in_argilla[item]} records in Argilla, {n_store} held/submitted in the store")
        if in_argilla[item] > info.copies:
            problems.append(f"item {item}: {in_argilla[item]} copies in Argilla (R = {info.copies})")
    return problems


# --- the operations -----------------------------------------------------------------------------
def _answer_one(collection: Collection, server: Any, key: str) -> None:
    """The participant answers one of their questions (not the quality check), then goes quiet."""
    participant = collection.store.participant_by_key(collection.info.id, key)
    assert participant is not None
    session = AnnotatorSession(server.api_url, participant.username, collection.owner.passwords(participant.username))
    dataset = next(d for d in session.datasets() if d["name"] == collection.dataset_name)
    record = next(r for r in session.pending_records(dataset["id"]) if not is_check(r["external_id"]))
    session.submit([(record["id"], {"response": "I would say it kindly and explain why.", "quality": 4})])
    session.close()


def _claim_again(collection: Collection, study: Study) -> str:
    result = collection.claim("person-1", "simulated")
    assert isinstance(result, Claimed), f"the repeated claim was answered {result}"
    return ""


def _expect_claimed(warm: bool) -> Callable[[Collection], list[str]]:
    def expect(collection: Collection) -> list[str]:
        participants = collection.participants()
        accounts = collection.store.accounts(collection.info.id)
        problems = []
        if len(accounts) != 1:
            problems.append(f"{len(accounts)} accounts, expected 1 (no second account for the same key)")
        if (len(participants) != 1 or participants[0].status != ACTIVE
                or sorted(map(is_check, participants[0].held)) != [False, False, False, True]):  # Q = 3 + the check
            problems.append(f"participants: {participants}")
        elif warm and participants[0].username != accounts[0].username:
            problems.append("the warm claim did not get the pool account")
        return problems
    return expect


def _expect_ready_account(collection: Collection) -> list[str]:
    accounts = collection.store.accounts(collection.info.id)
    return [] if [a.state for a in accounts] == [READY] else [f"accounts {[(a.username, a.state) for a in accounts]}"]


def _expect_released(collection: Collection) -> list[str]:
    participants = collection.participants()
    if len(participants) != 1:
        return [f"participants: {participants}"]
    p = participants[0]
    statuses = sorted((a.status, is_check(a.item_id)) for a in p.assignments)  # the check went unanswered
    if p.status != RELEASED or statuses != [("released", False), ("released", False), ("released", True),
                                            ("submitted", False)]:
        return [f"participant {p.username} is '{p.status}' with assignments {statuses}"]
    return []


def _monitor(collection: Collection, study: Study) -> str:
    collection.monitor()
    return ""


def _refill_after_lease(collection: Collection, study: Study) -> str:
    """The crash here is simulated inside THIS (still running) process, so its lease is held by
    a live process: a rerun at once leaves the account (two live provisioners never build the
    same account); the next run once that lease ran out finishes it. (A really killed process's
    lease is free at once: see the SIGKILL test.)"""
    made_at_once = collection.refill_pool(1)
    states = [a.state for a in collection.store.accounts(collection.info.id)]
    study.clock.now += LEASE_S + 1
    collection.refill_pool(1)
    return f"an immediate rerun made {made_at_once} (account {', '.join(states)})"


def _release_setup(collection: Collection, study: Study) -> None:
    assert isinstance(collection.claim("person-1", "simulated"), Claimed)
    _answer_one(collection, study.server, "person-1")
    study.clock.now += (INACTIVE_MIN + 10) * 60


@dataclass(frozen=True)
class Operation:
    key: str
    title: str
    setup: Callable[[Collection, Study], None]
    act: Callable[[Collection], Any]
    repair: Callable[[Collection, Study], str]  # returns a note for the matrix
    repair_label: str
    expect: Callable[[Collection], list[str]]


OPERATIONS = {
    "provision": Operation(
        "pv", "provision a pool account: `refill_pool(1)`", lambda c, s: None, lambda c: c.refill_pool(1),
        _refill_after_lease, "`refill_pool(1)` once the killed run's lease (120 s) ran out", _expect_ready_account),
    "claim-warm": Operation(
        "cw", "warm claim (ready pool account): `claim(key)`", lambda c, s: c.refill_pool(1),
        lambda c: c.claim("person-1", "simulated"), _claim_again, "the same `claim(key)` again",
        _expect_claimed(warm=True)),
    "claim-cold": Operation(
        "cc", "cold claim (pool 0, account created in the claim): `claim(key)`", lambda c, s: None,
        lambda c: c.claim("person-1", "simulated"), _claim_again, "the same `claim(key)` again",
        _expect_claimed(warm=False)),
    "claim-cold-monitor": Operation(
        "cm", "cold claim, the participant never comes back: `claim(key)`", lambda c, s: None,
        lambda c: c.claim("person-1", "simulated"), _monitor, "`monitor()` (no second claim)",
        _expect_claimed(warm=False)),
    "release": Operation(
        "rl", "release (1 of 3 answered, then inactive): `monitor()`", _release_setup, lambda c: c.monitor(),
        _monitor, "`monitor()` again", _expect_released),
}


@dataclass
class Row:
    operation: str
    n: int
    call: str
    repaired: bool
    detail: str = ""


@pytest.fixture(scope="module")
def matrix(output_dir: Path) -> Iterator[list[Row]]:
    rows: list[Row] = []
    yield rows
    if not rows:
        return
    lines = [
        "# Fault-injection matrix: kill after each Argilla call, rerun, check Argilla against the store",
        "",
        "Real embedded Argilla 2.8 and the SQLite study store; study 1, 6 questions, R=2, Q=3, one instructed-response check. "
        "Call 0 = killed before the first Argilla change (the store's intent only); call i = killed right after "
        "the i-th mutating call succeeded. Repaired = the repair run was accepted (nothing refused) and afterwards "
        "every account has a user that logs in with the store's password, in its own workspace, with exactly one "
        "published dataset holding exactly the records the store says, no item over R, `store.check()` empty.",
        "",
        "| operation | call | Argilla call (the process dies after it) | repair run | repaired | note |",
        "|---|---:|---|---|---|---|",
    ]
    by_key = {op.key: op for op in OPERATIONS.values()}
    for row in rows:
        op = by_key[row.operation]
        lines.append(f"| {op.title} | {row.n} | `{row.call}` | {op.repair_label} | "
                     f"{'yes' if row.repaired else 'NO'} | {row.detail.replace('|', '/')} |")
    lines += [
        "",
        f"{sum(r.repaired for r in rows)} of {len(rows)} crash points repaired.",
        "",
        "Pool provisioning: the crash is simulated inside the test process, which keeps running, so the "
        "account it had leased (`Store.lease_unbound_creating`, one at a time, 120 s) is still held by a live "
        "process: a rerun inside that window leaves it (nothing refused), the first run after it finishes it. A "
        "process that was really killed frees its lease at once (its pid is gone): the SIGKILL test reruns "
        "immediately. Claims and releases are repaired by an immediate rerun.",
    ]
    (output_dir / "fault-injection-matrix.md").write_text("\n".join(lines) + "\n")


def _count_calls(op: Operation, server: Any, folder: Path, name: str) -> list[str]:
    """The uninjected run: its sequence of mutating calls; its result must be consistent too."""
    study = Study(server, folder, name)
    collection = study.open()
    op.setup(collection, study)
    counter = CrashAfter()
    collection.owner.after_change = counter
    op.act(collection)
    collection.owner.after_change = None
    problems = op.expect(collection) + argilla_vs_store(collection, server)
    _close(collection)
    assert not problems, f"the uninjected {op.key} run is already inconsistent: {problems}"
    assert counter.calls, f"{op.key} made no Argilla change"
    return counter.calls


def _crash_and_repair(op: Operation, server: Any, folder: Path, name: str, n: int, expected: str) -> Row:
    study = Study(server, folder, name)
    collection = study.open()
    op.setup(collection, study)
    hook = CrashAfter(n)
    if n == 0:
        _crash_before_first_change(collection.owner)
    else:
        collection.owner.after_change = hook
    try:
        op.act(collection)
    except Crash as crash:
        died_at = str(crash)
    else:
        died_at = None
    finally:
        _close(collection)  # the process is gone: nothing of it survives but Argilla and the store
    if n and (died_at is None or _label(died_at) != expected):
        return Row(op.key, n, expected, False, f"the run died at {died_at!r}, not after {expected!r} ({hook.calls})")
    if n == 0 and died_at is None:
        return Row(op.key, n, "(none)", False, "the run made no Argilla change")
    rerun = study.open()
    try:
        note = op.repair(rerun, study)
    except Exception as exc:  # noqa: BLE001 - a refused repair is a matrix entry, not an abort
        _close(rerun)
        return Row(op.key, n, expected, False, f"repair refused: {exc.__class__.__name__}: {exc}")
    problems = op.expect(rerun) + argilla_vs_store(rerun, server)
    _close(rerun)
    return Row(op.key, n, expected, not problems, "; ".join(problems) or note)


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_every_crash_point_is_repaired(operation, argilla_server, tmp_path, unique, matrix):
    op = OPERATIONS[operation]
    base = f"fi{unique}-{op.key}"
    calls = [_label(c) for c in _count_calls(op, argilla_server, tmp_path / "count", f"{base}-n")]
    points = [(0, f"(before {calls[0]})")] + list(enumerate(calls, start=1))
    rows = [_crash_and_repair(op, argilla_server, tmp_path / f"crash-{n}", f"{base}-{n}", n, call)
            for n, call in points]
    print(f"\n{operation}: {len(calls)} mutating calls: {calls}")
    matrix.extend(rows)
    failed = [f"{r.n} {r.call}: {r.detail}" for r in rows if not r.repaired]
    assert not failed, f"{len(failed)} of {len(rows)} crash points of '{operation}' not repaired:\n" + "\n".join(failed)


def test_the_check_sees_damage(argilla_server, tmp_path, unique):
    """The check the matrix relies on is not blind: a missing record, a record the store does not
    know, a user outside its workspace and a stray user are all reported."""
    study = Study(argilla_server, tmp_path, f"fd{unique}")
    collection = study.open()
    collection.refill_pool(2)
    claimed = collection.claim("person-1", "simulated")
    assert isinstance(claimed, Claimed)
    assert argilla_vs_store(collection, argilla_server) == []
    owner, name = collection.owner, collection.dataset_name
    participant, pool = claimed.participant.username, f"{collection.info.username_prefix}-0002"
    owner.delete_records(owner.find_dataset(name, participant), [claimed.participant.held[0]])
    owner.log_records(owner.find_dataset(name, pool), [collection.spec.record(claimed.participant.held[1])])
    workspace = owner.client.workspaces(pool)
    workspace.remove_user(pool)
    stray = f"{collection.info.username_prefix}-0099"
    owner.ensure_annotator(stray, owner.ensure_workspace(stray))
    problems = "\n".join(argilla_vs_store(collection, argilla_server))
    assert f"account {participant}: dataset holds" in problems
    assert f"account {pool}: dataset holds" in problems
    assert f"account {pool}: user is not in workspace" in problems
    assert f"Argilla user {stray} is unknown to the store" in problems
    assert f"item {claimed.participant.held[0]}: 0 records in Argilla, 1 held" in problems
    _close(collection)


# --- a real SIGKILL ------------------------------------------------------------------------------
CHILD = """
import json, os, sys
from pathlib import Path
import pandas as pd
from crowdpref.account_passwords import AccountPasswords
from crowdpref.argilla_client import ArgillaOwner
from crowdpref.config import parse_study
from crowdpref.store import Store
from crowdpref.study1 import study1_collection
from tests.integration.test_study1_collection import _questions as study1_questions

args = json.loads(os.environ["FI_ARGS"])
owner = ArgillaOwner(args["api_url"], os.environ["FI_KEY"],
                     passwords=AccountPasswords.from_secrets(Path(args["folder"]) / "secrets"))
collection = study1_collection(parse_study(args["config"], source="test"), pd.DataFrame(args["questions"]), owner,
                               Path(args["folder"]), Store(args["store_url"]))
print("provisioning", flush=True)
print("made", collection.refill_pool(8), flush=True)
"""


def test_sigkill_during_pool_refill_is_repaired(argilla_server, tmp_path, unique):
    study = Study(argilla_server, tmp_path, f"fk{unique}")
    watcher = study.open(clock=time.time)  # creates the store and the collection before the child runs
    cid = watcher.info.id
    args = {"api_url": argilla_server.api_url, "config": _config_dict(study.name), "questions": _questions(),
            "folder": str(tmp_path), "store_url": study.store_url}
    env = {**os.environ, "FI_ARGS": json.dumps(args), "FI_KEY": argilla_server.owner_api_key}
    log = tmp_path / "child.log"
    with log.open("w") as out:
        child = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while True:
            states = [a.state for a in watcher.store.accounts(cid)]
            if READY in states:
                break
            assert child.poll() is None, f"the collection process ended before any account was ready:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"no account ready after 180 s:\n{log.read_text()}"
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    at_kill = Counter(a.state for a in watcher.store.accounts(cid))
    assert at_kill[READY] < 8, f"the process finished before the kill ({at_kill}): nothing was interrupted"
    print(f"\nSIGKILL with accounts {dict(at_kill)}")
    _close(watcher)

    # the next run, at once (a new process's objects): the killed process's leases are free
    # because it no longer runs (no need to wait for them to run out); nothing is refused
    rerun = study.open(clock=time.time)
    made = rerun.refill_pool(8)
    accounts = rerun.store.accounts(cid)
    assert [a.state for a in accounts] == [READY] * 8, [(a.username, a.state) for a in accounts]
    assert made == 8 - at_kill[READY]
    problems = argilla_vs_store(rerun, argilla_server)
    assert not problems, problems
    # and the repaired pool serves a claim
    claimed = rerun.claim("person-1", "simulated")
    assert isinstance(claimed, Claimed) and claimed.participant.username == accounts[0].username
    assert not argilla_vs_store(rerun, argilla_server)
    _close(rerun)
