"""PostgreSQL from Debian's package: the stack's own server in the public profile
(:func:`start_service`), and the binaries and commands the tests' throwaway server
(``tests/postgres_server.py``) shares with it.

Binaries: Debian's ``postgresql`` package (``make setup`` installs it) puts ``initdb`` and
``pg_ctl`` in ``/usr/lib/postgresql/<version>/bin``, off PATH; the highest version there wins.
``initdb`` refuses to run as root, so as root every server command runs as the ``postgres``
user (``runuser -u postgres --``) on a folder chowned to it; any other user runs them directly.

The stack's server (the public profile, ``settings.public``) keeps data: fsync on, the
``postgres`` binary in the foreground under :class:`services.process.ProcessManager` (pid record,
log in ``<state>/logs/postgres.log``, stopped by ``crowdpref down``), listening on
``settings.host:settings.postgres_port`` only, SCRAM password authentication for every role. Its
folder (``data/``, the socket) is ``<state>/postgres``, unless the ``postgres`` account cannot
reach the state folder (a checkout in a 0700 folder, as root): then it is
``/var/lib/crowdpref/<hash of the state folder>/`` (owned by ``postgres``, 0700), and the
state folder's ``postgres-location`` file says where. Three roles, each with a password
generated once into ``secrets/postgres-<role>`` (0600): ``postgres`` (the superuser, for
administration only), ``argilla`` (owns the database ``argilla``) and ``crowdpref`` (owns the study
store's database ``crowdpref``); neither owner may connect to the other's database. The server
only ever sees SCRAM verifiers computed here, never a password. No Prefect imports here.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import pwd
import secrets
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from crowdpref.errors import ServiceError, state_file_error
from crowdpref.runfolder import write_text
from crowdpref.settings import Settings
from crowdpref.store.engine import PUBLIC_STORE, public_password_file
from services.process import ServiceSpec, as_user

PG_ROOT = Path("/usr/lib/postgresql")
SERVER_USER = "postgres"  # the account Debian's package creates; the server runs as it under root
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


def _as_server_user(argv: Sequence[str]) -> list[str]:
    return [shutil.which("runuser") or "runuser", "-u", SERVER_USER, "--", *argv] if _is_root() else list(argv)


def _exec_as_server_user(argv: Sequence[str]) -> list[str]:
    """``argv`` as the server user under root, for the long-running server: ``setpriv`` (util-linux)
    sets the user and execs it, so no root process stays behind as its parent (``runuser`` does),
    with no capability and ``--no-new-privs``."""
    return as_user(argv, SERVER_USER, SERVER_USER) if _is_root() else list(argv)


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


# --- the stack's server (the public profile) ------------------------------------------------------
NAME = "postgres"  # the service's name: pid record run/postgres.json, log logs/postgres.log
LOCATION_RECORD = "postgres-location"  # in the state folder, when the server's folder is elsewhere
SYSTEM_ROOT = Path("/var/lib/crowdpref")  # where such folders go (as root)
STATE_BACKREF = "state-folder"  # in such a folder: the state folder it belongs to
ADMIN_ROLE = "postgres"  # the service's superuser: creates the roles and databases, nothing else
ARGILLA_ROLE = "argilla"  # owns the database `argilla`; argilla-server signs in as it
OWNED_DATABASES = (ARGILLA_ROLE, PUBLIC_STORE)  # each owned by the role of the same name
_SCRAM_ITERATIONS = 4096  # PostgreSQL's default (scram_iterations)


def scram_verifier(password: str, salt: bytes | None = None, iterations: int = _SCRAM_ITERATIONS) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores for ``password`` (RFC 5802/7677, its
    ``rolpassword`` format). Given as a role's password, the server keeps it as it is, so the
    password itself never reaches the server, its log or its statement errors."""
    salt = salt if salt is not None else os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    stored_key = hashlib.sha256(hmac.new(salted, b"Client Key", "sha256").digest()).digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    b64 = lambda raw: base64.b64encode(raw).decode()  # noqa: E731
    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


def password_file(settings: Settings, role: str) -> Path:
    """``secrets/postgres-<role>`` (0600): the role's password, generated once."""
    if role == PUBLIC_STORE:
        return public_password_file(settings.secrets_dir)  # where the library reads it
    return settings.secrets_dir / f"postgres-{role}"


def role_password(settings: Settings, role: str, *, create: bool = True) -> str:
    """The password of ``role``, generated into :func:`password_file` when missing (``create``)."""
    path = password_file(settings, role)
    if create and not path.exists():
        write_text(secrets.token_urlsafe(32), path, private=True)
    try:
        password = path.read_text(encoding="utf-8").strip()
        if not password:
            raise ValueError("empty")
    except (OSError, ValueError) as exc:
        raise state_file_error(path, f"the password of PostgreSQL role '{role}'", exc,
                               "restore it from your backup (crowdpref up makes a missing one, except the "
                               f"'{ADMIN_ROLE}' one of an existing server)") from None
    return password


def location_record(settings: Settings) -> Path:
    return settings.state_dir / LOCATION_RECORD


def data_folder(settings: Settings) -> Path:
    """The server's folder (``data/``, its socket): what ``postgres-location`` in the state
    folder names, else ``<state>/postgres``. For ``status``, backups and ``down``."""
    record = location_record(settings)
    try:
        text = record.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return settings.state_dir / NAME
    except OSError as exc:
        raise state_file_error(record, "where the PostgreSQL data folder is", exc,
                               "write the folder's path into it (or restore it from your backup)") from None
    if not text.startswith("/"):
        raise ServiceError(f"{record}: names no absolute folder: write the PostgreSQL folder's path into it "
                           "(or restore it from your backup)")
    return Path(text)


def system_folder(state_dir: Path) -> Path:
    """Where the server's folder goes when its account cannot reach ``state_dir``:
    ``/var/lib/crowdpref/<first 12 hex digits of the SHA-256 of the state folder's path>``."""
    digest = hashlib.sha256(str(state_dir.expanduser().resolve()).encode()).hexdigest()[:12]
    return SYSTEM_ROOT / digest


def choose_folder(settings: Settings) -> Path:
    """The server's folder, created: the recorded one, else ``<state>/postgres`` when the
    server's account can pass through the state folder, else :func:`system_folder` (recorded)."""
    record = location_record(settings)
    if record.exists():
        folder = data_folder(settings)
    else:
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        if server_user_can_enter(settings.state_dir):
            folder = settings.state_dir / NAME
        else:
            folder = system_folder(settings.state_dir)
            SYSTEM_ROOT.mkdir(parents=True, exist_ok=True)
            os.chmod(SYSTEM_ROOT, 0o755)  # the server's account passes through; the folder below is its own
            folder.mkdir(mode=0o700, exist_ok=True)
            (folder / STATE_BACKREF).write_text(str(settings.state_dir.expanduser().resolve()) + "\n")
            write_text(str(folder) + "\n", record)
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    return folder


def _service_bin_dir() -> Path:
    reason = unavailable_reason()
    if reason:
        raise ServiceError(f"postgres cannot be started: {reason}")
    bin_dir = find_bin_dir()
    assert bin_dir is not None  # unavailable_reason checked it
    return bin_dir


def prepare(settings: Settings) -> Path:
    """Make the server's folder (see :func:`data_folder`) and, on first use, its cluster:
    ``initdb`` with SCRAM authentication for local and TCP connections and the superuser
    ``postgres``, whose password goes to ``secrets/postgres-postgres``. Returns the folder."""
    bin_dir = _service_bin_dir()
    folder = choose_folder(settings)
    _hand_to_server_user(folder)
    data = folder / "data"
    if (data / "PG_VERSION").exists():
        return folder
    if data.is_dir() and any(data.iterdir()):
        raise ServiceError(f"postgres: {data} is not empty but holds no cluster (no PG_VERSION): move it away "
                           "and run `crowdpref up` again")
    verifier = scram_verifier(role_password(settings, ADMIN_ROLE))
    pwfile = folder / "initdb-pwfile"  # the verifier only, in the server's own 0700 folder
    pwfile.write_text(verifier + "\n")
    try:
        _hand_to_server_user(folder)
        result = _run([str(bin_dir / "initdb"), "-D", str(data), "-U", ADMIN_ROLE, "--pwfile", str(pwfile),
                       "-A", "scram-sha-256", "-E", "UTF8", "--no-locale"], cwd=folder)
    finally:
        pwfile.unlink(missing_ok=True)
    if result.returncode != 0:
        raise ServiceError(f"postgres: initdb {data} failed: {_one_line(result.stdout)}")
    return folder


def max_connections(settings: Settings) -> int:
    """Room for every Argilla server worker's two pools (argilla-server's and the search
    plug-in's, 15 + 10 overflow each), its rq worker, the portal's and flows' stores (5 + 20
    each) and administration."""
    return 50 * settings.argilla_worker_count + 100


def spec(settings: Settings) -> ServiceSpec:
    """The ``postgres`` binary in the foreground (as the ``postgres`` user under root) on the
    folder :func:`prepare` made, fsync on, on ``settings.host:settings.postgres_port`` only."""
    bin_dir = _service_bin_dir()
    folder = data_folder(settings)
    socket_dir = str(folder) if len(str(folder / f".s.PGSQL.{settings.postgres_port}")) <= _SOCKET_PATH_MAX else ""
    argv = _exec_as_server_user([
        str(bin_dir / "postgres"), "-D", str(folder / "data"), "-p", str(settings.postgres_port),
        "-c", f"listen_addresses={settings.host}", "-c", f"unix_socket_directories={socket_dir}",
        "-c", f"max_connections={max_connections(settings)}", "-c", "password_encryption=scram-sha-256",
    ])
    return ServiceSpec(
        name=NAME,
        argv=argv,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"},
        health=lambda: healthy(settings),
        port=settings.postgres_port,
        port_setting="CROWDPREF_POSTGRES_PORT",
        cwd=folder,
        start_timeout_s=60,
    )


def healthy(settings: Settings) -> bool:
    """The server on ``host:postgres_port`` accepts connections (``pg_isready``)."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        return False
    try:
        return subprocess.run([str(bin_dir / "pg_isready"), "-q", "-h", settings.host, "-p",
                               str(settings.postgres_port), "-t", "2"], cwd="/", check=False,
                              timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _connect(settings: Settings, role: str, database: str):  # -> psycopg.Connection
    try:
        import psycopg
    except ImportError:
        raise ServiceError("postgres: the psycopg driver is missing: install crowdpref[postgres]") from None
    try:
        return psycopg.connect(host=settings.host, port=settings.postgres_port, user=role, dbname=database,
                               password=role_password(settings, role, create=False), connect_timeout=10,
                               autocommit=True)
    except psycopg.OperationalError as exc:
        raise ServiceError(f"postgres on {settings.host}:{settings.postgres_port}: role '{role}' cannot sign in "
                           f"to '{database}' ({_one_line(str(exc))}): check {password_file(settings, role)}") from None


def provision(settings: Settings) -> None:
    """On the running server: the roles ``argilla`` and ``crowdpref`` (passwords from secrets/,
    generated when missing, set again every time so that the files and the server agree) and
    their databases, which only their owner (and the superuser) may connect to. Idempotent."""
    from psycopg import sql

    with _connect(settings, ADMIN_ROLE, "postgres") as conn:
        for name in OWNED_DATABASES:
            verifier = sql.Literal(scram_verifier(role_password(settings, name)))
            role = sql.Identifier(name)
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone()
            statement = "ALTER ROLE {} WITH LOGIN PASSWORD {}" if exists else "CREATE ROLE {} WITH LOGIN PASSWORD {}"
            conn.execute(sql.SQL(statement).format(role, verifier))
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                conn.execute(sql.SQL("CREATE DATABASE {} OWNER {} ENCODING 'UTF8'").format(role, role))
            conn.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(role))


def start_service(settings: Settings, manager: object) -> None:
    """``crowdpref up`` in the public profile: :func:`prepare`, start :func:`spec` with
    ``manager`` (a :class:`services.process.ProcessManager`; nothing when it already runs), wait
    until healthy, :func:`provision`."""
    prepare(settings)
    manager.start(spec(settings), settings.host)  # type: ignore[attr-defined]
    provision(settings)


def argilla_database_url(settings: Settings) -> str:
    """argilla-server's ``ARGILLA_DATABASE_URL`` on the stack's server (asyncpg at run time;
    argilla-server derives the psycopg2 URL of its migrations from it)."""
    from urllib.parse import quote

    password = quote(role_password(settings, ARGILLA_ROLE, create=False), safe="")
    return f"postgresql+asyncpg://{ARGILLA_ROLE}:{password}@{settings.host}:{settings.postgres_port}/{ARGILLA_ROLE}"


def stop_service(settings: Settings, manager: object) -> bool:
    """``crowdpref down``: a fast shutdown (``pg_ctl stop -m fast``: open sessions are ended,
    then a shutdown checkpoint) instead of the SIGTERM of other services, which PostgreSQL takes
    as "wait until every client has gone"; then ``manager`` forgets it. True when it ran."""
    was_running = manager.running(NAME) is not None  # type: ignore[attr-defined]
    bin_dir = find_bin_dir()
    if was_running and bin_dir is not None:
        manager.release(NAME)  # type: ignore[attr-defined]  # its keeper lets it end (services/keeper.py)
        folder = data_folder(settings)
        try:
            _stop_data_dir(bin_dir, folder / "data", folder)
        except ServiceError:
            pass  # the manager's SIGTERM, then SIGKILL, follow
    manager.stop(NAME)  # type: ignore[attr-defined]
    return was_running


# --- steps of the systemd unit (services/systemd.py) ------------------------------------------------
def wait_healthy(settings: Settings, timeout_s: float = 60.0) -> None:
    """Wait until the server on ``host:postgres_port`` accepts connections; a one-line
    :class:`ServiceError` after ``timeout_s``."""
    import time

    deadline = time.monotonic() + timeout_s
    while not healthy(settings):
        if time.monotonic() > deadline:
            raise ServiceError(f"postgres on {settings.host}:{settings.postgres_port} did not accept connections "
                               f"within {timeout_s:.0f} s (log: {settings.logs_dir / (NAME + '.log')})")
        time.sleep(0.5)


def unit_steps(settings: Settings) -> tuple[list[str], list[str]]:
    """The systemd unit's ``ExecStartPre=`` (:func:`prepare`: the folder and, on first use, the
    cluster) and ``ExecStartPost=`` (wait until it accepts connections, then :func:`provision`)
    as command lines: ``python -m services.postgres prepare|provision`` with the settings they
    need in the environment (no secret among them: the passwords stay in the secrets folder)."""
    from crowdpref.project import project_root

    env = ["/usr/bin/env", f"PYTHONPATH={project_root()}", f"CROWDPREF_HOME={settings.state_dir}",
           f"CROWDPREF_HOST={settings.host}", f"CROWDPREF_POSTGRES_PORT={settings.postgres_port}"]
    if settings.public_url:
        env.append(f"CROWDPREF_PUBLIC_URL={settings.public_url}")
    python = [sys.executable, "-m", "services.postgres"]
    return [*env, *python, "prepare"], [*env, *python, "provision"]


def main(argv: Sequence[str]) -> int:
    """``python -m services.postgres prepare|provision``: the steps of the systemd unit, with
    the settings of the environment; one line on stderr and exit 1 when a step fails."""
    from crowdpref.errors import CrowdprefError
    from crowdpref.settings import load_settings

    if len(argv) != 1 or argv[0] not in ("prepare", "provision"):
        print("usage: python -m services.postgres prepare|provision", file=sys.stderr)
        return 2
    try:
        settings = load_settings()
        if argv[0] == "prepare":
            prepare(settings)
        else:
            wait_healthy(settings)
            provision(settings)
    except CrowdprefError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
