"""Entry point of the embedded Argilla server. Runs INSIDE the argilla-server virtualenv
(never imported by the pipeline venv).

It registers crowdpref's SQL-backed search engine with argilla-server's engine registry, then
hands over to the stock CLI, so ``launch.py start|database ...`` behave exactly like
``python -m argilla_server ...``; ``worker --num-workers N`` runs the stock worker pool with jobs
in the worker process instead of a fork per job (:func:`_worker`). Select the engine with ``ARGILLA_SEARCH_ENGINE=crowdpref-sql``.

Extra commands: ``ensure-owner CREDENTIALS_JSON`` creates the owner account from a credentials
file (username, password, api_key) if it does not exist; ``reset-owner CREDENTIALS_JSON`` gives
the owner account that file's password and API key (``crowdpref up --reset-owner``). Both read
the secrets from the file - never from argv (visible in ``ps``) - and never print them, unlike
the stock ``database users create`` which echoes an existing API key.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sql_search_engine  # noqa: E402,F401  (registers the "crowdpref-sql" engine)


PROBLEM_PREFIX = "crowdpref: "
"""Starts a line the launcher writes for the operator (services/argilla/service.py repeats it
in its error): secret-free by construction, unlike a traceback."""


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


def _worker(num_workers: int) -> None:
    """argilla-server's ``worker`` command (an rq ``WorkerPool`` on its two queues), except that
    each job runs inside the worker process (rq's ``SimpleWorker``) instead of in a process
    forked for it. Argilla enqueues one job per webhook event - one per response a participant
    saves - and with a fork per job each cost about 84 ms of CPU (benchmarks/full_scale.py at
    102 questions: the worker used 190 CPU-s with webhooks on, 14 with them off); with jobs in
    the worker process the full study's ~22,000 saved responses cost it 606 CPU-s, ~27 ms each.
    Its jobs are short, async and run one at a time, so nothing needs a fresh process."""
    from argilla_server.jobs.queues import DEFAULT_QUEUE, HIGH_QUEUE, REDIS_CONNECTION
    from rq import SimpleWorker
    from rq.worker_pool import WorkerPool

    WorkerPool(connection=REDIS_CONNECTION, queues=[DEFAULT_QUEUE.name, HIGH_QUEUE.name],
               num_workers=num_workers, worker_class=SimpleWorker).start()


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "worker" and sys.argv[2] == "--num-workers":
        _worker(int(sys.argv[3]))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "ensure-owner":
        problem = asyncio.run(_set_owner(Path(sys.argv[2]), replace=False))
        if problem:
            print(f"{PROBLEM_PREFIX}{problem}", file=sys.stderr)
            sys.exit(1)
        print("owner account ready")
        return
    if len(sys.argv) == 3 and sys.argv[1] == "reset-owner":
        asyncio.run(_set_owner(Path(sys.argv[2]), replace=True))
        print("owner password and API key replaced")
        return
    from argilla_server.cli import app

    app()


if __name__ == "__main__":
    main()
