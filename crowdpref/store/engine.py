"""The study store's engine: its database, its migrations, its transactions - and the base of
:class:`crowdpref.store.Store`, with what every domain of the store shares.

Several processes change a study's state at once (the portal letting people in, scheduled
collection runs, the operator's ``crowdpref drop``), so the state lives here and every change is
one short transaction that touches only the rows it means to change. Nothing is rewritten
whole, so no update is lost.

- SQLite (WAL) in the state folder by default, created owner-only (0600): it holds account
  passwords. ``database_url`` points it at PostgreSQL for teams running workers and the portal
  on several machines (then the database must be readable by the study owner only).
- Writes to one collection are serialised: ``BEGIN IMMEDIATE`` on SQLite, a row lock on the
  collection (``SELECT ... FOR UPDATE``) on PostgreSQL. A claim is one short transaction (no
  Argilla call inside; ``benchmarks/claims.py`` prints the store's share of a claim), so
  serialising claims costs little and makes over-allocation impossible.
- The schema is versioned with Alembic (``crowdpref/store/migrations``); opening a store upgrades
  it under the same write lock, so a study that runs for days survives a crowdpref upgrade.
- No Argilla call ever happens inside a transaction: the store records intent first (an
  account ``creating``, a participant ``releasing``), the caller then changes Argilla, and a
  second transaction records the result. A process killed in between leaves a state the next
  run finishes (see :mod:`crowdpref.collection`).

External participant ids (Prolific ids, invite keys) are never stored: only a salted hash
(``key_hash``), which is all a lookup needs.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Connection, Engine, bindparam, create_engine, event, func, insert, select
from sqlalchemy.exc import DatabaseError, IntegrityError
from sqlalchemy.pool import QueuePool

from crowdpref.errors import CrowdprefError, first_line
from crowdpref.store import schema as t
from crowdpref.store.results import Account, Assignment, CollectionInfo, ItemCounts, ParticipantState
from crowdpref.store.statuses import AssignmentStatus

STORE_FILE = "store.sqlite"


class StoreError(CrowdprefError):
    """The study store is unreachable, corrupt, or holds something that contradicts a request."""


PUBLIC_STORE = "crowdpref"
"""The study store's database and role on the stack's PostgreSQL server (the public profile)."""


def default_url(state_dir: Path) -> str:
    """The embedded store: SQLite in the state folder."""
    return f"sqlite:///{state_dir / STORE_FILE}"


def public_password_file(secrets_dir: Path) -> Path:
    """Where ``crowdpref up`` keeps the password of the store's PostgreSQL role (0600)."""
    return secrets_dir / f"postgres-{PUBLIC_STORE}"


def settings_url(settings: Any) -> str:
    """The store the settings name: ``database_url`` when set; else, in the public profile
    (``settings.public``), the database ``crowdpref`` on the stack's PostgreSQL server
    (``host:postgres_port``) as the role ``crowdpref``, with the password ``crowdpref up`` generated
    into ``secrets/postgres-crowdpref``; else SQLite in the state folder. Raises
    :class:`StoreError` (one line, no secret) when that password file is missing or empty."""
    url = getattr(settings, "database_url", None)
    if url is not None and hasattr(url, "get_secret_value"):
        url = url.get_secret_value()
    if url:
        return url
    if not getattr(settings, "public", False):
        return default_url(settings.state_dir)
    path = public_password_file(settings.secrets_dir)
    try:
        password = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        password, reason = "", exc.strerror or type(exc).__name__
    else:
        reason = "empty"
    if not password:
        raise StoreError(f"{path}: the study store's PostgreSQL password cannot be read ({reason}): run "
                         "`crowdpref up` (it creates the server, its roles and this file), or set "
                         "database_url (CROWDPREF_DATABASE_URL)")
    return (f"postgresql+psycopg://{PUBLIC_STORE}:{quote(password, safe='')}@{settings.host}:"
            f"{settings.postgres_port}/{PUBLIC_STORE}")


class StoreBase:
    """The store's connection to its database and what every domain of the store shares:
    transactions, the event log, key hashing, and reading collections, participants and item
    counts. :class:`crowdpref.store.Store` adds one mixin per domain (claims, the pool, the
    participant lifecycle, the platform side, monitoring)."""

    def __init__(self, url: str, clock: Callable[[], float] = time.time):
        self.url = url
        self.clock = clock
        self.dialect = url.split(":", 1)[0].split("+", 1)[0]
        self.engine = _engine(url)
        deadline = time.monotonic() + LOCKED_OPEN_S
        while True:
            try:
                upgrade(self.engine)
                self._salt = self._key_salt()
                break
            except DatabaseError as exc:  # OperationalError, or a damaged file ('not a database')
                if _locked(exc) and time.monotonic() < deadline:
                    time.sleep(0.05)  # another process opens, checkpoints or migrates it right now
                    continue
                self.engine.dispose()
                raise StoreError(_cannot_open(url, exc)) from None

    # transactions ---------------------------------------------------------------------------
    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """A read-only transaction: one consistent snapshot (SQLite WAL: a deferred BEGIN, which
        never waits for writers; writes take the lock up front, see :func:`_engine`)."""
        with self.engine.connect() as conn:
            conn.execution_options(crowdpref_read_only=True)
            yield conn

    @contextmanager
    def _write(self, collection_id: int | None = None) -> Iterator[Connection]:
        """One write transaction; with ``collection_id``, serialised with every other write to
        that collection (SQLite: the database write lock; PostgreSQL: the collection's row)."""
        with self.engine.begin() as conn:
            if collection_id is not None and self.dialect == "postgresql":
                conn.execute(select(t.collections.c.id).where(t.collections.c.id == collection_id).with_for_update())
            yield conn

    def _event(self, conn: Connection, cid: int, kind: str, participant_id: int | None = None,
               item_id: str | None = None, at: float | None = None, **detail: Any) -> None:
        conn.execute(_INSERT_EVENT, {  # one prebuilt statement: events are written on every path
            "collection_id": cid, "at": self.clock() if at is None else at, "kind": kind,
            "participant_id": participant_id, "item_id": item_id,
            "detail": json.dumps(detail, sort_keys=True) if detail else None,
        })

    def _key_salt(self) -> str:
        """The store's key salt: read without the write lock (every open but the first), made once."""
        with self._read() as conn:
            row = conn.execute(select(t.meta.c.value).where(t.meta.c.name == "key_salt")).first()
        if row is not None:
            return row[0]
        for attempt in range(2):
            try:
                with self._write() as conn:
                    row = conn.execute(select(t.meta.c.value).where(t.meta.c.name == "key_salt")).first()
                    if row is not None:
                        return row[0]
                    salt = secrets.token_hex(16)
                    conn.execute(insert(t.meta).values(name="key_salt", value=salt))
                    return salt
            except IntegrityError:
                if attempt:  # PostgreSQL: a concurrent first open stored its salt: the second pass reads it
                    raise
        raise AssertionError("unreachable")

    def key_hash(self, key: str) -> str:
        """The salted hash that stands for an external participant id everywhere in the store."""
        return hashlib.sha256(f"{self._salt}\x1f{key}".encode()).hexdigest()

    # shared readers and writers (every domain uses them) ----------------------------------------
    def _info(self, cid: int, conn: Connection | None = None) -> CollectionInfo:
        if conn is None:
            with self._read() as own:
                return self._info(cid, own)
        row = conn.execute(_COLLECTION, {"cid": cid}).one()
        return CollectionInfo(row.id, row.study, row.key, row.copies, row.per_participant, row.seed,
                              bool(row.counterbalance), row.username_prefix)

    def _new_account(self, conn: Connection, info: CollectionInfo, state: str) -> Account:
        n = conn.execute(select(func.count()).select_from(t.accounts)
                         .where(t.accounts.c.collection_id == info.id)).scalar_one()
        username = f"{info.username_prefix}-{n + 1:04d}"
        account_id = conn.execute(insert(t.accounts).values(
            collection_id=info.id, username=username, state=state, created_at=self.clock(),
        )).inserted_primary_key[0]
        self._event(conn, info.id, "account_created", username=username)
        return Account(account_id, username, state)

    def _participant(self, conn: Connection, pid: int) -> ParticipantState:
        return self._participants(conn, [pid])[0]

    def _participants(self, conn: Connection, pids: Sequence[int] | None = None, cid: int | None = None,
                      statuses: Sequence[str] | None = None) -> list[ParticipantState]:
        p, a, s = t.participants.c, t.accounts.c, t.assignments.c
        query = select(p.id, p.source, p.status, p.claimed_at, p.last_activity_at, p.records_logged,
                       p.drop_requested, p.released_at, p.release_reason, p.account_id, p.session_hash,
                       p.checks_answered, p.checks_passed, p.check_verdict, p.excluded_at, p.withdrawn_at, a.username,
                       a.state.label("account_state"), a.dataset_id).join(t.accounts, a.id == p.account_id).order_by(p.id)
        if pids is not None:
            query = query.where(p.id.in_(list(pids)))
        if cid is not None:
            query = query.where(p.collection_id == cid)
        if statuses is not None:
            query = query.where(p.status.in_(list(statuses)))
        rows = conn.execute(query).all()
        if not rows:
            return []
        by_pid: dict[int, list[Assignment]] = {r.id: [] for r in rows}
        aquery = select(s.participant_id, s.item_id, s.position, s.status, s.swapped, s.submitted_at).order_by(
            s.participant_id, s.position)
        if pids is not None or cid is None:
            aquery = aquery.where(s.participant_id.in_(list(by_pid)))
        else:
            aquery = aquery.where(s.collection_id == cid)
        for r in conn.execute(aquery):
            if r.participant_id in by_pid:
                by_pid[r.participant_id].append(Assignment(r.item_id, r.position, r.status,
                                                           None if r.swapped is None else bool(r.swapped),
                                                           r.submitted_at))
        return [ParticipantState(
            id=r.id, username=r.username, account_id=r.account_id, account_state=r.account_state, source=r.source,
            status=r.status, claimed_at=r.claimed_at, last_activity_at=r.last_activity_at,
            records_logged=bool(r.records_logged), drop_requested=bool(r.drop_requested),
            assignments=tuple(by_pid[r.id]), released_at=r.released_at, release_reason=r.release_reason,
            dataset_id=r.dataset_id, session_hash=r.session_hash, checks_answered=r.checks_answered or 0,
            checks_passed=r.checks_passed or 0, check_verdict=r.check_verdict, excluded_at=r.excluded_at,
            withdrawn_at=r.withdrawn_at,
        ) for r in rows]

    # counts ------------------------------------------------------------------------------------------
    def item_counts(self, cid: int, conn: Connection | None = None) -> ItemCounts:
        s = t.assignments.c
        query = (select(s.item_id, s.status, func.count()).where(s.collection_id == cid)
                 .group_by(s.item_id, s.status))
        if conn is None:
            with self._read() as own:
                rows = own.execute(query).all()
        else:
            rows = conn.execute(query).all()
        counts: dict[str, Counter[str]] = {status: Counter() for status in AssignmentStatus}
        for item, status, n in rows:
            counts[status][item] = n
        return ItemCounts(counts[AssignmentStatus.SUBMITTED], counts[AssignmentStatus.HELD],
                          counts[AssignmentStatus.RELEASED], counts[AssignmentStatus.EXCLUDED],
                          counts[AssignmentStatus.REOPENED], counts[AssignmentStatus.WITHDRAWN])

    def close(self) -> None:
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"Store({_redacted(self.url)})"


# --- engine, migrations --------------------------------------------------------------------------
_INSERT_EVENT = insert(t.events)
_COLLECTION = select(t.collections).where(t.collections.c.id == bindparam("cid"))


LOCKED_OPEN_S = 30.0
"""How long opening a store tries again while SQLite answers "database is locked" without waiting
on its busy timeout (seen with five processes opening one store at once on a loaded machine)."""


def _locked(exc: BaseException) -> bool:
    """Whether SQLite refused because another connection holds the database, not because the file is bad."""
    text = str(getattr(exc, "orig", exc))
    return "database is locked" in text or "database is busy" in text


def _cannot_open(url: str, exc: BaseException) -> str:
    """One line for a store that exists but cannot be used. Never advice that loses data: the
    store is the study's ledger (who holds and answered what, account passwords)."""
    where = _redacted(url)
    if url.startswith("sqlite") and _locked(exc):
        return (f"the study store {where.split('///', 1)[-1]} is locked by another process ({first_line(exc)}) "
                f"after {LOCKED_OPEN_S:g} s of trying: stop the process that holds it (`crowdpref status` shows the "
                "stack's; `fuser FILE` names any), then run the command again; do not delete it: it holds the study's state")
    if url.startswith("sqlite"):
        return (f"the study store {where.split('///', 1)[-1]} cannot be opened ({first_line(exc)}): it is damaged or "
                "not readable - restore it from your backup (or fix its permissions), or point database_url "
                "(CROWDPREF_DATABASE_URL) at another store; do not delete it: it holds the study's state")
    return (f"the study store at {where} cannot be opened ({first_line(exc)}): check that the database server "
            "runs and database_url (CROWDPREF_DATABASE_URL) is right")


SQLITE_POOL, SQLITE_OVERFLOW = 4, 60
"""Open SQLite connections a store keeps, and how many more it opens (and closes again) while
many threads use it at once (the portal's request threads)."""


def _engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1] if "///" in url else ""
        if path and path != ":memory:":
            file = Path(path)
            try:
                file.parent.mkdir(parents=True, exist_ok=True)
                if not file.exists():  # owner-only from the first byte: it holds passwords
                    os.close(os.open(file, os.O_CREAT | os.O_WRONLY, 0o600))
            except OSError as exc:
                raise StoreError(_cannot_open(url, exc)) from None
        # connections are kept open (a pool): opening one costs ~3 ms and closing the last one
        # checkpoints the WAL (~4 ms), which with a connection per transaction was a third of a
        # claim (benchmarks/claims.py --store-only). A process that forks must not share them:
        # the pool is per process (``close`` disposes it; nothing here forks with a store open).
        engine = create_engine(url, poolclass=QueuePool, pool_size=SQLITE_POOL, max_overflow=SQLITE_OVERFLOW,
                               pool_timeout=60, connect_args={"timeout": 60, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=60000")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            if conn.get_execution_options().get("crowdpref_read_only"):
                conn.exec_driver_sql("BEGIN")  # a snapshot for reads: readers never queue behind writers
            else:
                conn.exec_driver_sql("BEGIN IMMEDIATE")  # writes take the lock up front: no upgrade deadlocks

        return engine
    try:
        return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=20)
    except Exception as exc:  # noqa: BLE001 - a bad URL or a missing driver: one line
        raise StoreError(f"database_url {_redacted(url)} cannot be used ({first_line(exc)}): for PostgreSQL "
                         "install crowdpref[postgres] and use postgresql+psycopg://USER@HOST:PORT/DB") from None


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest migration, under the write lock (concurrent openers wait;
    the first migrates, the others find it done). A store already at the newest migration is
    checked in a read transaction: opening it never waits for a writer."""
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    head = ScriptDirectory.from_config(config).get_current_head()
    with engine.connect() as conn:
        conn.execution_options(crowdpref_read_only=True)  # SQLite: a deferred BEGIN, no write lock
        if MigrationContext.configure(conn).get_current_revision() == head:
            return
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7236019)")
        if MigrationContext.configure(conn).get_current_revision() == head:
            return
        config.attributes["connection"] = conn
        command.upgrade(config, "head")


def _redacted(url: str) -> str:
    """The URL without its password (for messages)."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}" if ":" in creds else url
