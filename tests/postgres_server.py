"""The tests' throwaway PostgreSQL server (the ``postgres_server`` fixture in tests/conftest.py),
on Debian's binaries as ``services/postgres.py`` finds and runs them: it trusts local connections
(``-A trust``), has one superuser, ``crowdpref``, and runs with ``fsync=off``: for tests, never
for data to keep. Also the clean-up of what interrupted test sessions leave. Nothing but the
tests uses this module.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from crowdpref.errors import ServiceError
from services import postgres
from services.postgres import (
    _SOCKET_PATH_MAX,
    PG_ROOT,
    _hand_to_server_user,
    _one_line,
    _pg_ctl_running,
    _run,
    _stop_data_dir,
    find_bin_dir,
    unavailable_reason,
)

SUPERUSER = "crowdpref"  # the cluster's superuser (initdb -U); connections need no password
HOST = "127.0.0.1"
_DB_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


_LOG_PREFIX = re.compile(r"^\S+ \S+ \S+ \[\d+\] ")  # "2026-11-23 20:13:26.057 UTC [5980] "


def _log_reason(log: Path) -> str:
    """The telling line of a server log: a failed bind, else the first FATAL/PANIC/ERROR,
    else the last line; without its timestamp."""
    try:
        lines = [_LOG_PREFIX.sub("", line).strip() for line in log.read_text(errors="replace").splitlines()]
    except OSError:
        return "no log written"
    lines = [line for line in lines if line]
    for wanted in (("could not bind",), ("FATAL:", "PANIC:", "ERROR:")):
        for line in lines:
            if any(word in line for word in wanted):
                return _one_line(line)
    return _one_line("\n".join(lines))


@dataclass
class PostgresServer:
    """A server started by :func:`start`: its folder (``data/``, ``log``, the socket), port and
    binaries. ``url`` is the SQLAlchemy URL of its ``postgres`` database."""

    folder: Path
    port: int
    bin_dir: Path

    @property
    def data_dir(self) -> Path:
        return self.folder / "data"

    @property
    def log_file(self) -> Path:
        return self.folder / "log"

    @property
    def url(self) -> str:
        return self.url_for("postgres")

    def url_for(self, database: str) -> str:
        """The SQLAlchemy (psycopg 3) URL of ``database`` on this server."""
        return f"postgresql+psycopg://{SUPERUSER}@{HOST}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create the empty database ``name`` (lower-case letters, digits, ``_``; at most 63)
        and return its URL."""
        if not _DB_NAME.fullmatch(name):
            raise ServiceError(f"postgres database name {name!r} is not allowed: "
                               "use [a-z_][a-z0-9_]*, at most 63 characters")
        result = _run([str(self.bin_dir / "createdb"), "-h", HOST, "-p", str(self.port),
                       "-U", SUPERUSER, name], cwd=self.folder)
        if result.returncode != 0:
            raise ServiceError(f"postgres on {HOST}:{self.port}: createdb {name} failed: {_one_line(result.stdout)}")
        return self.url_for(name)

    def drop_database(self, name: str) -> None:
        """Drop the database ``name``, ending its open sessions (``dropdb --force``); nothing
        to do when it does not exist."""
        result = _run([str(self.bin_dir / "dropdb"), "-h", HOST, "-p", str(self.port), "-U", SUPERUSER,
                       "--if-exists", "--force", name], cwd=self.folder)
        if result.returncode != 0:
            raise ServiceError(f"postgres on {HOST}:{self.port}: dropdb {name} failed: {_one_line(result.stdout)}")

    def running(self) -> bool:
        """Whether the server of ``data_dir`` runs (``pg_ctl status``)."""
        return _pg_ctl_running(self.bin_dir, self.data_dir, self.folder)

    def stop(self) -> None:
        """Stop the server (fast mode: open sessions are ended) and wait until it has exited;
        nothing to do when it does not run. Keeps the folder (its log)."""
        _stop_data_dir(self.bin_dir, self.data_dir, self.folder)


def stop_folder(folder: Path) -> bool:
    """Stop a server left running in ``folder`` (one :func:`start` made) by an interrupted
    session; True when one was running. Nothing to do without a ``data/postmaster.pid``."""
    data_dir = folder / "data"
    if not (data_dir / "postmaster.pid").exists():
        return False
    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise ServiceError(f"postgres in {data_dir} may still run, but there is no pg_ctl under "
                           f"{PG_ROOT}/*/bin to stop it")
    running = _pg_ctl_running(bin_dir, data_dir, folder)
    _stop_data_dir(bin_dir, data_dir, folder)
    return running


def start(folder: Path, port: int) -> PostgresServer:
    """Start a throwaway server in ``folder`` (created if missing) on ``HOST:port`` and wait
    until it accepts connections. ``folder/data`` is initialised on first use and reused after;
    the server log is ``folder/log``. Raises :class:`ServiceError` (one line) when it cannot."""
    reason = unavailable_reason()
    if reason:
        raise ServiceError(f"postgres cannot be started: {reason}")
    bin_dir = find_bin_dir()
    assert bin_dir is not None  # unavailable_reason checked it
    folder = folder.expanduser().resolve()
    # the Unix socket goes in the folder, or nowhere when that path is too long for one (every
    # client here, pg_ctl -w included, connects over TCP to HOST:port anyway)
    socket_dir = str(folder) if len(str(folder / f".s.PGSQL.{port}")) <= _SOCKET_PATH_MAX else ""
    folder.mkdir(parents=True, exist_ok=True)
    _hand_to_server_user(folder)
    server = PostgresServer(folder=folder, port=port, bin_dir=bin_dir)
    if server.running():
        raise ServiceError(f"postgres already runs in {server.data_dir}: "
                           f"stop it first (pg_ctl -D {server.data_dir} stop)")
    if not (server.data_dir / "PG_VERSION").exists():
        result = _run([str(bin_dir / "initdb"), "-D", str(server.data_dir), "-A", "trust", "-U", SUPERUSER,
                       "-E", "UTF8", "--no-locale", "--no-sync"], cwd=folder)
        if result.returncode != 0:
            raise ServiceError(f"postgres: initdb {server.data_dir} failed: {_one_line(result.stdout)}")
    # pg_ctl hands -o to /bin/sh: quote the folder
    options = (f"-p {port} -k {shlex.quote(socket_dir)} -c listen_addresses={HOST} "
               "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
    result = _run([str(bin_dir / "pg_ctl"), "-D", str(server.data_dir), "-o", options,
                   "-l", str(server.log_file), "-w", "-t", "60", "start"], cwd=folder)
    if result.returncode != 0:
        try:
            server.stop()  # pg_ctl gave up waiting on a server that may still come up
        except ServiceError:
            pass
        raise ServiceError(f"postgres on {HOST}:{port} did not start: {_log_reason(server.log_file)} "
                           f"(log: {server.log_file})")
    return server


def orphaned_system_folders(under: Sequence[Path]) -> list[Path]:
    """Folders in ``services.postgres.SYSTEM_ROOT`` whose state folder (their ``state-folder``
    file) lies under one of ``under`` and no longer exists, and whose server does not run: what
    test sessions that removed their state folder leave behind. A folder without that file is
    never listed."""
    found = []
    roots = [root.expanduser().resolve() for root in under]
    for folder in sorted(postgres.SYSTEM_ROOT.glob("*")) if postgres.SYSTEM_ROOT.is_dir() else []:
        try:
            state = Path((folder / postgres.STATE_BACKREF).read_text().strip())
        except OSError:
            continue
        if state.exists() or not any(state.is_relative_to(root) for root in roots):
            continue
        try:
            pid = int((folder / "data" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pid = None
        if pid is not None and Path(f"/proc/{pid}").exists():
            continue
        found.append(folder)
    return found
