"""Entry point of the embedded Argilla server. Runs INSIDE the argilla-server virtualenv
(never imported by the pipeline venv).

It registers crowdpref's SQL-backed search engine with argilla-server's engine registry, then
hands over to the stock CLI, so ``launch.py start|database ...`` behave exactly like
``python -m argilla_server ...``; ``worker --num-workers N`` runs the stock worker pool with jobs
in the worker process instead of a fork per job (:func:`_worker`). Select the engine with ``ARGILLA_SEARCH_ENGINE=crowdpref-sql``.

Extra commands: ``ensure-owner CREDENTIALS_JSON`` creates the owner account from a credentials
file (username, password, api_key) if it does not exist; ``reset-owner CREDENTIALS_JSON`` gives
the owner account that file's password and API key (``crowdpref up --reset-owner``). With
``--migrate`` before the file, either first migrates the database as ``database migrate`` does,
in the same process; ``start --crowdpref-prepare CREDENTIALS_JSON ...`` does what
``ensure-owner --migrate`` does in the server's own process before it serves. They read
the secrets from the file - never from argv (visible in ``ps``) - and never print them, unlike
the stock ``database users create`` which echoes an existing API key.

``start`` (and ``launch:app``, the ASGI app for ``uvicorn launch:app --workers N``, whose worker
processes import it afresh) applies two patches, and only to the argilla-server release they were
written for (``lighter_requests.SUPPORTED_VERSION``, read with ``importlib.metadata``; ``make
setup`` checks it too): on any other, the start fails with one ``crowdpref: `` line instead of
running unpatched or patched wrongly.

- :func:`bcrypt_off_the_loop`: a user's creation, password change and login hash or check the
  password in a thread, not on the event loop. Participants never sign in with a password (the
  portal mints their Argilla sessions), but every participant account is still created with one
  (argilla-server requires it), by the warm pool's refill, which runs on the same server as the
  arrivals it serves: on the loop, each creation stopped every other request for a bcrypt hash
  (cost 12, ~0.25 s). The burst's cost with and without it: docs/performance.md, "Argilla as
  shipped".
- ``lighter_requests.record_events_only_when_wanted``: no webhook event built for records when no
  webhook wants one (about half the bulk write of a participant's records).

Issue 34 removed the patches that paid only for metadata participants' records no longer carry
(settings adapters built once, a workspace membership read once per request).
:func:`cheap_test_hashes` applies to test stacks only.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sql_search_engine  # noqa: E402,F401  (registers the "crowdpref-sql" engine)
from lighter_requests import PatchProblem, record_events_only_when_wanted, version_problem  # noqa: E402


PROBLEM_PREFIX = "crowdpref: "
"""Starts a line the launcher writes for the operator (services/argilla/service.py repeats it
in its error): secret-free by construction, unlike a traceback."""


class LauncherProblem(Exception):
    """A problem the launcher reports in one line (no traceback) and exits 1 for."""


_PREHASHED: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("crowdpref_prehashed",
                                                                                     default=None)
BCRYPT_PATCHED = "_crowdpref_bcrypt_off_the_loop"  # set on the accounts module once patched


def bcrypt_off_the_loop() -> None:
    """Patch argilla-server's ``contexts.accounts`` so bcrypt never runs on the event loop:
    ``create_user`` and ``update_user`` hash the password in a thread first (the stock function
    then finds that hash through ``hash_password``, keyed by a context variable, so its own
    checks and writes are unchanged); ``authenticate_user`` (``POST /api/v1/token``) looks the
    user up, then checks the password - or runs the stock dummy check for an unknown name - in a
    thread. Idempotent. :class:`LauncherProblem` (one line) on an argilla-server other than the
    release it was written for (``lighter_requests.SUPPORTED_VERSION``), before anything changes."""
    problem = version_problem()
    if problem:
        raise LauncherProblem(problem)
    from argilla_server.contexts import accounts

    if getattr(accounts, BCRYPT_PATCHED, False):
        return

    stock_hash, stock_verify = accounts.hash_password, accounts.verify_password
    stock_create, stock_update = accounts.create_user, accounts.update_user
    dummy_verify, get_user = accounts._dummy_verify, accounts.get_user_by_username

    def hash_password(password: str) -> str:
        prehashed = _PREHASHED.get()
        if prehashed is not None and prehashed[0] == password:
            return prehashed[1]
        return stock_hash(password)  # a caller this patch does not know: hashed where it is

    async def _with_hash(password: str, call: Any) -> Any:
        hashed = await asyncio.to_thread(stock_hash, password)
        token = _PREHASHED.set((password, hashed))
        try:
            return await call()
        finally:
            _PREHASHED.reset(token)

    async def create_user(db: Any, user_attrs: dict, workspaces: Any = None) -> Any:
        if not isinstance(user_attrs.get("password"), str):
            return await stock_create(db, user_attrs, workspaces)
        return await _with_hash(user_attrs["password"], lambda: stock_create(db, user_attrs, workspaces))

    async def update_user(db: Any, user: Any, user_attrs: dict) -> Any:
        if not isinstance(user_attrs.get("password"), str):
            return await stock_update(db, user, user_attrs)
        return await _with_hash(user_attrs["password"], lambda: stock_update(db, user, user_attrs))

    async def authenticate_user(db: Any, username: str, password: str) -> Any:
        user = await get_user(db, username)
        if user is None:
            await asyncio.to_thread(dummy_verify)  # the same cost as a real check: no user enumeration
            return None
        return user if await asyncio.to_thread(stock_verify, password, user.password_hash) else None

    accounts.hash_password = hash_password
    accounts.create_user = create_user
    accounts.update_user = update_user
    accounts.authenticate_user = authenticate_user
    setattr(accounts, BCRYPT_PATCHED, True)


TEST_BCRYPT_ROUNDS = "CROWDPREF_TEST_BCRYPT_ROUNDS"
"""TEST STACKS ONLY (tests/conftest.py sets it; services/argilla/service.py passes it on when set):
the bcrypt cost of the hashes this Argilla makes, instead of argilla-server's own (12, ~0.28 s a
hash), so a test suite that makes and signs in hundreds of accounts does not spend minutes hashing.
Unset - always, outside the tests - argilla-server's hashing is untouched."""


def cheap_test_hashes() -> None:
    """When :data:`TEST_BCRYPT_ROUNDS` is set (test stacks only), replace argilla-server's
    ``accounts.hash_password`` with one of that bcrypt cost (4 to 31). Runs before
    :func:`bcrypt_off_the_loop` (which then hashes off the loop at that cost) and before
    ``ensure-owner``/``reset-owner``. Checking a password reads the cost from its stored hash, so
    logins get as cheap; an unknown name's dummy check keeps argilla-server's cost 12."""
    value = os.environ.get(TEST_BCRYPT_ROUNDS, "")
    if not value:
        return
    if not value.isdigit() or not 4 <= int(value) <= 31:
        raise LauncherProblem(f"{TEST_BCRYPT_ROUNDS}={value!r} is not a bcrypt cost: unset it (tests only) "
                              "or give a whole number from 4 to 31")
    import bcrypt
    from argilla_server.contexts import accounts

    if getattr(accounts, BCRYPT_PATCHED, False):
        return  # already patched in this process: the off-the-loop patch holds the hashing it found
    rounds = int(value)

    def hash_password(password: str) -> str:
        return bcrypt.hashpw(bytes(password, encoding="utf-8"), bcrypt.gensalt(rounds)).decode("utf-8")

    accounts.hash_password = hash_password


def _patched_or_exit() -> None:
    """Every patch of the launcher, or one ``crowdpref:`` line and exit status 1."""
    try:
        cheap_test_hashes()
        bcrypt_off_the_loop()
        record_events_only_when_wanted()
    except (LauncherProblem, PatchProblem) as exc:  # one line for the operator, not a traceback per worker
        print(f"{PROBLEM_PREFIX}{exc}", file=sys.stderr)
        raise SystemExit(1) from None
    redis_password_out_of_messages()


def redis_password_out_of_messages() -> None:
    """argilla-server quotes its Redis URL in the error it raises (and logs) when Redis does not
    answer or refuses the password, and that URL holds Redis's password (services/redis.py): the
    Redis client is made from the full URL (at import), then the setting keeps it masked."""
    from urllib.parse import urlsplit

    from argilla_server.jobs import queues  # noqa: F401  (its Redis client, from the full URL)
    from argilla_server.settings import settings

    parts = urlsplit(settings.redis_url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        settings.redis_url = parts._replace(netloc=netloc).geturl()


def __getattr__(name: str) -> Any:
    """``launch:app``: argilla-server's ASGI app, patched (for uvicorn's worker processes, which
    import the app themselves rather than run :func:`main`)."""
    if name == "app":
        _patched_or_exit()
        from argilla_server import app

        return app
    raise AttributeError(name)


async def _set_owner(credentials_file: Path, *, replace: bool) -> str:
    """The owner account from ``credentials_file`` (username, password, api_key): created when it
    does not exist; when it does, ``replace`` gives it the file's password and API key
    (``reset-owner``), else a different API key is the problem returned (``ensure-owner``)."""
    from argilla_server.contexts import accounts
    from argilla_server.database import AsyncSessionLocal
    from argilla_server.models import User, UserRole

    creds = json.loads(credentials_file.read_text())
    async with AsyncSessionLocal() as session:
        existing = await accounts.get_user_by_username(session, creds["username"])
        if existing is not None and not replace:
            if existing.api_key != creds["api_key"]:
                return (
                    f"owner '{creds['username']}' exists with a different API key than "
                    f"{credentials_file}: restore that file from your backup, or run `crowdpref down` "
                    "then `crowdpref up --reset-owner` to give the owner a new password and API key"
                )
            return ""
        values = {"role": UserRole.owner, "api_key": creds["api_key"],
                  "password_hash": accounts.hash_password(creds["password"])}
        if existing is None:
            await User.create(session, first_name="crowdpref", username=creds["username"], **values)
        else:
            await existing.update(session, **values)
    return ""


def _migrate() -> None:
    """argilla-server's ``database migrate`` (to the newest revision), in this process: ``ensure-owner
    --migrate`` / ``reset-owner --migrate`` run it first, so a start pays argilla-server's import
    (seconds of CPU) once for both steps instead of once per step. Raises (exit 1) as the stock
    command does when the migration fails."""
    from argilla_server.cli.database.migrate import migrate_db

    migrate_db(revision="head")


PREPARE_OPTION = "--crowdpref-prepare"
"""``start --crowdpref-prepare CREDENTIALS_JSON ...``: before serving, what ``ensure-owner --migrate
CREDENTIALS_JSON`` does, in the server's own process - argilla-server's import (seconds of CPU)
paid once per start instead of once for the step and once for the server."""


def _owner_or_exit(credentials: Path, *, migrate: bool, replace: bool) -> None:
    """``ensure-owner`` / ``reset-owner`` (``replace``), and ``start --crowdpref-prepare`` before it
    serves: the test hashing knob, the migration when ``migrate``, then the owner from the
    credentials file (:func:`_set_owner`). A problem is one ``crowdpref:`` line and exit status 1.
    The database engine's pool is closed after: its connections belong to this event loop
    (asyncpg's do), and a server started next in this process opens its own."""
    try:
        cheap_test_hashes()
    except LauncherProblem as exc:
        print(f"{PROBLEM_PREFIX}{exc}", file=sys.stderr)
        raise SystemExit(1) from None
    if migrate:
        _migrate()

    async def owner_then_close() -> str:
        from argilla_server.database import async_engine

        try:
            return await _set_owner(credentials, replace=replace)
        finally:
            await async_engine.dispose()

    problem = asyncio.run(owner_then_close())
    if problem:
        print(f"{PROBLEM_PREFIX}{problem}", file=sys.stderr)
        raise SystemExit(1)


def _worker(num_workers: int) -> None:
    """argilla-server's ``worker`` command (an rq ``WorkerPool`` on its two queues), except that
    each job runs inside the worker process (rq's ``SimpleWorker``) instead of in a process
    forked for it. Argilla enqueues one job per webhook event - one per response a participant
    saves - and with a fork per job each cost about 84 ms of CPU (benchmarks/full_scale.py at
    102 questions: the worker used 190 CPU-s with webhooks on, 14 with them off); with jobs in
    the worker process the full study's ~22,000 saved responses cost it 606 CPU-s, ~27 ms each.
    Its jobs are short, async and run one at a time, so nothing needs a fresh process.

    They run on one event loop, kept for the worker's life (:func:`_one_loop_job_class`): rq runs
    each async job on a loop of its own, and argilla-server's database engine is one pool per
    process, whose asyncpg connections (PostgreSQL, the public profile) belong to the loop that
    opened them - every job after the first failed with "attached to a different loop" or
    "another operation is in progress", and no webhook was delivered. A process per job had hidden
    it (each began with an empty pool); SQLite's connections are not tied to a loop."""
    from argilla_server.jobs.queues import DEFAULT_QUEUE, HIGH_QUEUE, REDIS_CONNECTION
    from rq import SimpleWorker
    from rq.worker_pool import WorkerPool

    WorkerPool(connection=REDIS_CONNECTION, queues=[DEFAULT_QUEUE.name, HIGH_QUEUE.name],
               num_workers=num_workers, worker_class=SimpleWorker, job_class=_one_loop_job_class()).start()


def _one_loop_job_class() -> type:
    """rq's ``Job`` (a custom job class: rq's ``job_class``), except that an async job runs on the
    worker process's one event loop instead of on a new loop that rq makes for each job (and
    never closes). See :func:`_worker`."""
    from rq.job import Job

    class OneLoopJob(Job):
        loop: asyncio.AbstractEventLoop | None = None

        def _execute(self) -> object:
            result = self.func(*self.args, **self.kwargs)
            if not asyncio.iscoroutine(result):
                return result
            if OneLoopJob.loop is None or OneLoopJob.loop.is_closed():
                OneLoopJob.loop = asyncio.new_event_loop()
            return OneLoopJob.loop.run_until_complete(result)

    return OneLoopJob


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "worker" and sys.argv[2] == "--num-workers":
        _worker(int(sys.argv[3]))
        return
    owner_command = sys.argv[1:2] in (["ensure-owner"], ["reset-owner"]) and (
        len(sys.argv) == 3 or (len(sys.argv) == 4 and sys.argv[2] == "--migrate"))
    if owner_command:
        replace = sys.argv[1] == "reset-owner"
        _owner_or_exit(Path(sys.argv[-1]), migrate=sys.argv[2] == "--migrate", replace=replace)
        print("owner password and API key replaced" if replace else "owner account ready")
        return
    if sys.argv[1:3] == ["start", PREPARE_OPTION] and len(sys.argv) >= 4:
        credentials = Path(sys.argv[3])
        del sys.argv[2:4]  # the stock ``start`` below never sees the option
        _owner_or_exit(credentials, migrate=True, replace=False)
        print("owner account ready", flush=True)
    if len(sys.argv) >= 2 and sys.argv[1] == "start":
        _patched_or_exit()
    from argilla_server.cli import app

    app()


if __name__ == "__main__":
    main()
