"""The throwaway PostgreSQL server of the tests (``tests/postgres_server.py``, fixtures
``postgres_server`` / ``postgres_url`` in tests/conftest.py), through SQLAlchemy + psycopg 3.
Skipped, with the reason, where no server can run (no binaries, no way to become postgres)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

pytestmark = pytest.mark.integration

SEEN_URLS: list[str] = []  # the postgres_url of each test_each_test_gets_its_own_database run


def test_table_round_trip(postgres_url: str) -> None:
    assert make_url(postgres_url).drivername == "postgresql+psycopg"
    engine = sa.create_engine(postgres_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE ratings (id serial PRIMARY KEY, rater text NOT NULL, score int)"))
            conn.execute(sa.text("INSERT INTO ratings (rater, score) VALUES (:rater, :score)"),
                         [{"rater": "a", "score": 3}, {"rater": "b", "score": 5}])
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT rater, score FROM ratings ORDER BY id")).all()
            version = conn.execute(sa.text("SHOW server_version")).scalar_one()
    finally:
        engine.dispose()
    assert [tuple(row) for row in rows] == [("a", 3), ("b", 5)]
    assert version  # a real PostgreSQL answered


@pytest.mark.parametrize("run", ["first", "second"])
def test_each_test_gets_its_own_database(postgres_url: str, run: str) -> None:
    engine = sa.create_engine(postgres_url)
    try:
        with engine.begin() as conn:
            # fresh: no table of the other run (or of any other test) is visible here
            assert sa.inspect(conn).get_table_names() == []
            current = conn.execute(sa.text("SELECT current_database()")).scalar_one()
            conn.execute(sa.text(f"CREATE TABLE marker_{run} (id int)"))
    finally:
        engine.dispose()
    assert current == make_url(postgres_url).database
    SEEN_URLS.append(postgres_url)
    assert len(set(SEEN_URLS)) == len(SEEN_URLS), f"two tests got the same database: {SEEN_URLS}"
