"""The launcher moves bcrypt off argilla-server's event loop (services/argilla/launch.py,
``bcrypt_off_the_loop``), and refuses to start on an argilla-server release it was not written for.

1. argilla-server's own ``create_user`` / ``authenticate_user`` on a real migrated SQLite
   database, in the Argilla venv, six at once while a ticker measures the CPU time the event
   loop's thread spent between two of its ticks (CPU, not wall time, so a busy machine does not
   blur it): without the patch the loop itself burns a whole bcrypt hash at a time, with it a
   small fraction of one (the hashes run in other threads). Accounts still work: the right
   password logs in, a wrong one and an unknown user do not, the stored hash is cost 12.
2. The running embedded server (``launch.py start``, the session's Argilla), sent 16 logins at
   once: the bcrypt CPU is spent by its other threads, under a quarter of it by the main thread
   that runs the event loop (on the loop, all of it would be): the patch is applied where it
   matters.
3. Another argilla-server release (the installed version read as 2.9.0): ``start`` and
   ``launch:app`` exit 1 with one ``crowdpref:`` line naming both versions.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.argilla_venv import ARGILLA_PYTHON, REPO, Ran, Snippet, run_forked

LAUNCH_DIR = REPO / "services" / "argilla"

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not ARGILLA_PYTHON.exists(), reason="no Argilla venv (.venv-argilla): run make setup")]

N = 6
STALL = r"""
import asyncio, gc, json, sys, time
sys.path.insert(0, sys.argv[2])
import bcrypt, launch
if sys.argv[1] == "patched":
    launch.bcrypt_off_the_loop()
from argilla_server.contexts import accounts
from argilla_server.database import AsyncSessionLocal

N, PASSWORD = int(sys.argv[3]), "correct horse battery staple 42"
started = time.thread_time(); bcrypt.hashpw(b"x", bcrypt.gensalt()); one_hash = time.thread_time() - started

async def main():
    gaps, done = [], asyncio.Event()
    async def ticker():
        last = time.thread_time()  # the loop thread's own CPU: what it burned between two ticks
        while not done.is_set():
            await asyncio.sleep(0.002)
            now = time.thread_time(); gaps.append(now - last); last = now
    async with AsyncSessionLocal() as db:  # warm up: SQLAlchemy's first queries are CPU on the loop too
        await accounts.create_user(db, {"first_name": "x", "last_name": None, "username": "warm-up",
                                        "role": "annotator", "password": PASSWORD})
        await accounts.authenticate_user(db, "warm-up", PASSWORD)
    gc.disable()  # a full collection of argilla-server's heap is ~0.4 s of loop CPU too: not what is measured
    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.05)
    async def make(i):
        async with AsyncSessionLocal() as db:
            await accounts.create_user(db, {"first_name": "x", "last_name": None, "username": f"u{i}",
                                            "role": "annotator", "password": PASSWORD})
    async def login(name, password):
        async with AsyncSessionLocal() as db:
            user = await accounts.authenticate_user(db, name, password)
            return None if user is None else (user.username, user.password_hash)
    await asyncio.gather(*(make(i) for i in range(N)))
    right = await asyncio.gather(*(login(f"u{i}", PASSWORD) for i in range(N)))
    wrong = await login("u0", "wrong"); unknown = await login("nobody", PASSWORD)
    done.set(); await tick
    print(json.dumps({"one_hash": one_hash, "max_stall": max(gaps), "right": right, "wrong": wrong,
                      "unknown": unknown}))
asyncio.run(main())
"""


def _argilla_env(home: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "ARGILLA_HOME_PATH": str(home),
            "ARGILLA_DATABASE_URL": f"sqlite+aiosqlite:///{home / 'argilla.db'}", "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1"}


MIGRATE = f"""
import runpy, sys
sys.argv[0] = {str(LAUNCH_DIR / "launch.py")!r}
runpy.run_path(sys.argv[0], run_name="__main__")  # `launch.py database migrate`
"""
COPY = "import shutil; shutil.copy2({source!r}, {destination!r})\n"

LAUNCH_APP = f"import sys; sys.path.insert(0, {str(LAUNCH_DIR)!r}); from argilla_server.contexts import accounts; "
OTHER_VERSION = "import lighter_requests; lighter_requests.installed_version = lambda: '2.9.0'; "
COSTS = [("", "$2b$12$"), ("4", "$2b$04$"), ("3", None), ("x", None)]
COST = (f"import sys; sys.path.insert(0, {str(LAUNCH_DIR)!r}); import launch; launch._patched_or_exit(); "
        "from argilla_server.contexts import accounts; h = accounts.hash_password('pw'); "
        "print(h[:7], accounts.verify_password('pw', h))")


@pytest.fixture(scope="module")
def argilla_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    """What the Argilla venv's Python made of every snippet of this module, each run as
    ``python -c`` in a process of its own: all children of one process that imported
    argilla_server.contexts.accounts (tests/argilla_venv.py), which every snippet imports first
    anyway, instead of ten processes each paying that import (~5 s of CPU). Their database
    (``ARGILLA_DATABASE_URL``, read at that import): ``argilla.db`` in one folder, migrated by
    ``launch.py database migrate``, kept as ``migrated.db`` and copied back before each stall run."""
    home = tmp_path_factory.mktemp("argilla-venv")
    db, migrated = str(home / "argilla.db"), str(home / "migrated.db")
    stall = [str(LAUNCH_DIR), str(N)]
    snippets = {
        "migrate": Snippet(MIGRATE, args=("database", "migrate"), timeout_s=300),
        "stall-stock": Snippet(COPY.format(source=db, destination=migrated) + STALL, args=("stock", *stall),
                               timeout_s=300),
        "stall-patched": Snippet(COPY.format(source=migrated, destination=db) + STALL, args=("patched", *stall),
                                 timeout_s=300),
        "refuse-version": Snippet(LAUNCH_APP + OTHER_VERSION + "import launch; sys.argv = ['launch.py', 'start']; "
                                  "launch.main()"),
        "app-ok": Snippet(LAUNCH_APP + "import launch, lighter_requests as lr; launch.app; "
                          "from argilla_server.webhooks.v1 import records; "
                          "print(getattr(accounts, launch.BCRYPT_PATCHED, False), getattr(records, lr.PATCHED, False))"),
        "app-broken": Snippet(LAUNCH_APP + OTHER_VERSION + "import launch; launch.app"),
        **{f"cost-{rounds}": Snippet(COST, env={"CROWDPREF_TEST_BCRYPT_ROUNDS": rounds or None}) for rounds, _ in COSTS},
    }
    runs = run_forked(list(snippets.values()), preload="argilla_server.contexts.accounts", env=_argilla_env(home),
                      timeout=1500)
    return dict(zip(snippets, runs))


def _stall(runs: dict[str, Ran], variant: str) -> dict:
    migrate = runs["migrate"]
    assert migrate.returncode == 0, migrate.stderr[-2000:]
    run = runs[f"stall-{variant}"]
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_user_creation_and_login_leave_the_event_loop_free(argilla_runs):
    stock, patched = _stall(argilla_runs, "stock"), _stall(argilla_runs, "patched")
    for result in (stock, patched):  # accounts work the same either way
        assert [r[0] for r in result["right"]] == [f"u{i}" for i in range(N)]
        assert all(r[1].startswith("$2b$12$") for r in result["right"])
        assert result["wrong"] is None and result["unknown"] is None
    # stock: the loop thread computes whole hashes; patched: never more than a fraction of one
    assert stock["max_stall"] > 0.8 * stock["one_hash"], stock
    assert patched["max_stall"] < 0.2 * patched["one_hash"], patched


def _thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of a process, from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended
        cpu[int(task.name)] = (int(fields[11]) + int(fields[12])) / ticks
    return cpu


def test_the_running_server_hashes_outside_its_event_loop(argilla_server):
    """``launch.py start`` applies the patch: during a burst of logins the bcrypt CPU is spent by
    the server's other threads, not by its main thread (the event loop's)."""
    from services.argilla.service import SERVER
    from services.process import ProcessManager

    running = ProcessManager(argilla_server.settings.state_dir).running(SERVER)
    assert running is not None
    url, logins = argilla_server.api_url, 16
    with httpx.Client(timeout=60) as warm:
        assert warm.get(f"{url}/api/v1/status").status_code == 200

    def login(i: int) -> int:  # an unknown user costs Argilla the same (dummy) check
        return httpx.post(f"{url}/api/v1/token", data={"username": f"nobody-{i}", "password": "x" * 20},
                          timeout=120).status_code

    before = _thread_cpu(running.pid)
    with ThreadPoolExecutor(logins) as pool:
        assert list(pool.map(login, range(logins))) == [401] * logins
    after = _thread_cpu(running.pid)
    used = {tid: after[tid] - before.get(tid, 0.0) for tid in after}
    loop, others = used.get(running.pid, 0.0), sum(v for tid, v in used.items() if tid != running.pid)
    # 16 hashes at cost 12 are seconds of CPU; on the loop they would all be the main thread's
    assert others > 1.0 and loop < 0.25 * (loop + others), used


def test_start_refuses_another_argilla_server_release(argilla_runs):
    run = argilla_runs["refuse-version"]  # `launch.py start` with the installed version read as 2.9.0
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("crowdpref: "), run.stderr
    assert "argilla-server 2.9.0 is installed" in lines[0] and "2.8.0 only" in lines[0], lines[0]


def test_launch_app_the_multi_worker_entry_is_patched_too(argilla_runs):
    """``uvicorn launch:app --workers N`` (several Argilla workers): each worker imports
    ``launch:app``, which applies the patches (bcrypt, and services/argilla/lighter_requests.py's) -
    or, on another argilla-server release, exits with the same one line."""
    ok, broken = argilla_runs["app-ok"], argilla_runs["app-broken"]
    assert ok.returncode == 0 and ok.stdout.strip() == "True True", ok.stderr[-2000:]  # + lighter_requests.py
    assert broken.returncode == 1
    lines = broken.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("crowdpref: ") and "2.9.0" in lines[0], broken.stderr


@pytest.mark.parametrize("rounds, expected", COSTS)
def test_the_test_only_bcrypt_cost(argilla_runs, rounds, expected):
    """``CROWDPREF_TEST_BCRYPT_ROUNDS`` (set by tests/conftest.py for every test stack): hashes of
    that cost, through the off-the-loop patch too; unset, argilla-server's own cost 12; a value
    that is no bcrypt cost stops the launcher with one ``crowdpref:`` line."""
    run = argilla_runs[f"cost-{rounds}"]  # unset when ``rounds`` is empty
    if expected is None:
        assert run.returncode == 1
        assert run.stderr.strip().startswith("crowdpref: CROWDPREF_TEST_BCRYPT_ROUNDS="), run.stderr
    else:
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.split() == [expected, "True"]
