"""A throwaway PostgreSQL server (for tests): initdb into a folder, start it on
127.0.0.1:PORT with its Unix socket in that folder, create databases, stop it.

Binaries: Debian's ``postgresql`` package (``make setup`` installs it) puts ``initdb`` and
``pg_ctl`` in ``/usr/lib/postgresql/<version>/bin``, off PATH; the highest version there wins.
``initdb`` refuses to run as root, so as root every server command runs as the ``postgres``
user (``runuser -u postgres --``) on a folder chowned to it; any other user runs them directly.

The cluster trusts local connections (``-A trust``) and has one superuser, ``crowdpref``; it
runs with ``fsync=off``: it is for tests, never for data to keep. No Prefect imports here.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from crowdpref.errors import ServiceError

PG_ROOT = Path("/usr/lib/postgresql")
SERVER_USER = "postgres"  # the account Debian's package creates; the server runs as it under root
SUPERUSER = "crowdpref"  # the cluster's superuser (initdb -U); connections need no password
HOST = "127.0.0.1"
_DB_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_SOCKET_PATH_MAX = 107  # sun_path in struct sockaddr_un on Linux, less the final NUL
_INSTALL_HINT = "install Debian's postgresql package (make setup does, as root)"


def _version_key(bin_dir: Path) -> tuple[int, ...]:
    """``/usr/lib/postgresql/15/bin`` -> (15,); ``9.6`` -> (9, 6); non-numeric sorts first."""
    parts = bin_dir.parent.name.split(".")
    return tuple(int(part) for part in parts) if all(part.isdigit() for part in parts) else (-1,)


def find_bin_dir(root: Path | None = None) -> Path | None:
    """The ``bin`` folder of the highest PostgreSQL version under ``root`` (default
    :data:`PG_ROOT`) that holds both ``initdb`` and ``pg_ctl``, or None when there is none."""
    candidates = [
        bin_dir
        for bin_dir in (root or PG_ROOT).glob("*/bin")
        if (bin_dir / "initdb").is_file() and (bin_dir / "pg_ctl").is_file()
    ]
    return max(candidates, key=_version_key, default=None)


def _is_root() -> bool:
    return os.geteuid() == 0


def unavailable_reason() -> str | None:
    """Why no server can be started on this machine, in one line; None when one can."""
    if find_bin_dir() is None:
        return f"no PostgreSQL server binaries (initdb, pg_ctl) under {PG_ROOT}/*/bin: {_INSTALL_HINT}"
    if _is_root():
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return (f"running as root, and initdb refuses root, but there is no '{SERVER_USER}' user "
                    f"to run it as: {_INSTALL_HINT} (it creates the user)")
        if shutil.which("runuser") is None:
            return (f"running as root, and initdb refuses root, but runuser (util-linux) is missing "
                    f"to become '{SERVER_USER}'")
    return None


def _one_line(text: str, limit: int = 300) -> str:
    """The last non-empty line of a command's output or log, for a one-line error."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else "no output"
    return last if len(last) <= limit else last[: limit - 3] + "..."


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


def _as_server_user(argv: Sequence[str]) -> list[str]:
    return ["runuser", "-u", SERVER_USER, "--", *argv] if _is_root() else list(argv)


def _run(argv: Sequence[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (as the server user under root), output merged; cwd is a folder that user
    may enter, or initdb/pg_ctl complain about the current directory."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env.setdefault("LC_ALL", "C.UTF-8")
    try:
        return subprocess.run(_as_server_user(argv), cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ServiceError(f"postgres: {Path(argv[0]).name} took over {timeout:.0f} s (folder {cwd})") from None
    except OSError as exc:
        raise ServiceError(f"postgres: cannot run {Path(argv[0]).name}: {exc.strerror or exc}") from None


def _pg_ctl_running(bin_dir: Path, data_dir: Path, cwd: Path) -> bool:
    if not (data_dir / "postmaster.pid").exists():
        return False
    return _run([str(bin_dir / "pg_ctl"), "-D", str(data_dir), "status"], cwd=cwd).returncode == 0


def _stop_data_dir(bin_dir: Path, data_dir: Path, cwd: Path) -> None:
    if not _pg_ctl_running(bin_dir, data_dir, cwd):
        return
    result = _run([str(bin_dir / "pg_ctl"), "-D", str(data_dir), "-m", "fast", "-w", "-t", "60", "stop"], cwd=cwd)
    if result.returncode != 0 and _pg_ctl_running(bin_dir, data_dir, cwd):
        raise ServiceError(f"postgres in {data_dir} did not stop: {_one_line(result.stdout)}")


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


def server_user_can_enter(folder: Path, *, write: bool = False) -> bool:
    """Whether the server's account can pass through ``folder`` (and write in it, with
    ``write``): every parent must let others through. Always True when not root (the server
    then runs as the current user)."""
    if not _is_root():
        return True
    test = ["test", "-w", str(folder), "-a", "-x", str(folder)] if write else ["test", "-x", str(folder)]
    return subprocess.run(["runuser", "-u", SERVER_USER, "--", *test], cwd="/", check=False).returncode == 0


def _hand_to_server_user(folder: Path) -> None:
    """As root: chown ``folder`` (recursively) to the server user and check it can reach it
    (every parent folder must let others through)."""
    if not _is_root():
        return
    account = pwd.getpwnam(SERVER_USER)
    for path in [folder, *folder.rglob("*")]:
        if path.stat().st_uid != account.pw_uid:
            os.chown(path, account.pw_uid, account.pw_gid, follow_symlinks=False)
    if not server_user_can_enter(folder, write=True):
        raise ServiceError(f"postgres: the '{SERVER_USER}' user cannot enter {folder}: "
                           "a parent folder is closed to others (chmod o+x it or use another folder)")


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
