"""The SQL search plug-in searches from its own connection pool, not argilla-server's.

argilla-server's request handlers hold a session from its pool while they await a search; a
search from that same pool deadlocked it in the launch burst (issue 19: every connection held
by a handler waiting for a second one, 500 "QueuePool limit" after 30 s). Here, in the Argilla
venv on a SQLite file: every connection argilla-server's pool can give (pool + overflow) is
checked out and held, then the search engine is pinged and asked for its info. With its own
pool both answer at once; searching from argilla-server's pool (seen by putting that back)
they wait for a connection until the 5-s limit below.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARGILLA_PYTHON = REPO / ".venv-argilla" / "bin" / "python"

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not ARGILLA_PYTHON.exists(), reason="no Argilla venv (.venv-argilla): run make setup")]

SCRIPT = r"""
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from argilla_server.database import AsyncSessionLocal, async_engine
import sqlalchemy as sa
from sql_search_engine import SQLSearchEngine

async def main():
    pool = async_engine.pool
    held = []
    for _ in range(pool.size() + pool._max_overflow):  # every connection argilla-server's pool gives
        session = AsyncSessionLocal()
        await session.execute(sa.text("select 1"))
        held.append(session)
    engine = SQLSearchEngine()
    try:
        ok = await asyncio.wait_for(engine.ping(), 5)
        info = await asyncio.wait_for(engine.info(), 5)
        print("answered", ok, info["distribution"])
    except asyncio.TimeoutError:
        print("waited for argilla-server's pool")
    finally:
        for session in held:
            await session.close()

asyncio.run(main())
"""


def test_the_search_never_waits_for_a_connection_argilla_holds(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARGILLA_")}
    env.update(ARGILLA_HOME_PATH=str(tmp_path), ARGILLA_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'argilla.db'}",
               ARGILLA_SEARCH_ENGINE="crowdpref-sql")
    result = subprocess.run([str(ARGILLA_PYTHON), "-c", SCRIPT, str(REPO / "services" / "argilla")], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "answered True crowdpref-sql", result.stdout + result.stderr[-1000:]
