"""Back up and restore a crowdpref state with restic (Debian's ``restic`` package): crowdpref
makes consistent copies of what a backup must hold in a private staging folder, and restic turns
each into an encrypted, deduplicated snapshot in a repository (a local folder or any restic
repository URL), checks its integrity on restore and forgets old snapshots.

What a snapshot holds (``crowdpref backup``; :func:`create`):

- ``databases/store.*``: the study store (``database_url``, else ``<state>/store.sqlite``), who
  holds and answered what, who was paid;
- ``databases/argilla.*``: the embedded Argilla's database (every answer), when Argilla is the
  embedded one (a remote ``CROWDPREF_ARGILLA_URL`` is that server's to back up). Its URL comes
  from :func:`argilla_database_url`: ``services.argilla.service.database_url(settings)`` when the
  Argilla service defines it (its PostgreSQL branch), else ``<state>/argilla/argilla.db``;
- ``secrets/``: the whole secrets folder (the Argilla owner's credentials, its token-signing key,
  the key participants' account passwords are made from);
- ``studies/``: the run folders (``settings.runs_dir``), their private salts included;
- ``crowdpref-backup.json``: the kind of each database (no URL: they may hold passwords).

Databases are copied online and consistently while the stack runs: SQLite through its online
backup API (:meth:`sqlite3.Connection.backup`, one snapshot even while others write),
PostgreSQL with ``pg_dump`` (one snapshot transaction; custom format). The store's writes wait
while both are copied (:func:`store_writes_paused`), so the two copies agree. The copies go into
``<state>/.backup-staging`` (0700, one backup of a state folder at a time), which ``restic
backup`` then saves with the tags ``crowdpref`` and :func:`state_tag` (several state folders may
share a repository) and which is deleted after. Each backup ends with the retention:
``restic forget --keep-within <backup_retention_days>d --prune`` over this state folder's
snapshots (:func:`forget`).

The repository is ``backup_repository`` (default ``<state>/backups/restic``), created by the
first backup (``restic init``). Its password is read from ``backup_password_file`` (default
``<state>/backup-password``, generated with mode 0600 by the first backup, outside the secrets
folder that the snapshots hold); restic gets both through its environment (RESTIC_REPOSITORY,
RESTIC_PASSWORD_FILE), never in argv, which ``ps`` shows. A remote repository's credentials
(AWS_*, B2_*, ... ) pass through from the environment; crowdpref's own settings do not.

``crowdpref restore [SNAPSHOT]`` (:func:`restore`; default: this state folder's latest) needs the
stack down (a running service would keep writing to what is being replaced; a PostgreSQL server
may run: it receives the dumps). ``restic restore --verify`` writes the snapshot into a
temporary folder inside the state folder, checking every blob; then crowdpref checks that it
holds what its ``crowdpref-backup.json`` says. A wrong password, a missing repository, an unknown
snapshot or a damaged repository stops it there with one line and nothing changed. Only then
are the PostgreSQL dumps loaded (``pg_restore --single-transaction``: each database is replaced
whole or not at all) and the files swapped in by renames (the current ones moved aside first
and put back if a swap fails).

No Prefect imports here: ``flows/backup.py`` wraps :func:`create` for the scheduled deployment.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import sqlite3
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crowdpref.errors import CrowdprefError, ServiceError
from crowdpref.settings import Settings

FORMAT = "crowdpref-restic"
VERSION = 1
DESCRIPTION = "crowdpref-backup.json"
TAG = "crowdpref"
STAGING = ".backup-staging"
LOCK = ".backup.lock"
DEFAULT_REPOSITORY = "backups/restic"
DEFAULT_PASSWORD_FILE = "backup-password"
PARTS = ("databases", "secrets", "studies")
DATABASE_SERVICE_PREFIX = "postgres"
"""Services whose names start with this may run during a restore: they receive the dumps."""

Progress = Callable[[str, int, int], None]
"""``progress(what, done, total)``: what is being done, and how far (bytes or items)."""


def _quiet(what: str, done: int, total: int) -> None:  # the default progress: say nothing
    return None


class BackupError(CrowdprefError):
    """A backup cannot be taken, or a snapshot cannot be restored (one line: what, why, what to do)."""


@dataclass(frozen=True)
class BackupResult:
    snapshot: str  # restic's short id
    repository: str  # without any password
    files: int
    size: int  # bytes staged
    added: int  # bytes the repository grew by (before compression and dedup of later runs)
    databases: dict[str, str]  # part -> kind ("sqlite", "postgresql", "absent", "external")
    forgotten: list[str]  # snapshots the retention forgot
    initialised: bool  # this backup created the repository
    password_file: Path
    seconds: float


@dataclass(frozen=True)
class RestoreResult:
    snapshot: str
    created_at: str
    files: int
    databases: dict[str, str]
    seconds: float


@dataclass(frozen=True)
class Snapshot:
    id: str
    short_id: str
    time: str
    tags: tuple[str, ...]
    paths: tuple[str, ...]
    hostname: str
    mine: bool  # taken of this state folder (its state tag)


# --- where things are ------------------------------------------------------------------------------
def store_url(settings: Settings) -> str:
    """The study store's URL: ``database_url``, else the default SQLite file in the state folder."""
    from crowdpref.store import default_url

    url = settings.database_url
    return url.get_secret_value() if url is not None else default_url(settings.state_dir)


def argilla_database_url(settings: Settings) -> str | None:
    """The embedded Argilla's database URL (None for a remote Argilla): what
    ``services.argilla.service.database_url(settings)`` says when the service defines it, else
    the SQLite file ``<state>/argilla/argilla.db``."""
    if not settings.embedded_argilla:
        return None
    from services.argilla import service as argilla

    custom = getattr(argilla, "database_url", None)
    if callable(custom):
        return str(custom(settings))
    return f"sqlite:///{settings.argilla_home / 'argilla.db'}"


def databases(settings: Settings) -> dict[str, str | None]:
    """The databases a backup holds, by part name: ``store`` and ``argilla`` (None: not ours)."""
    return {"store": store_url(settings), "argilla": argilla_database_url(settings)}


def _kind(url: str) -> str:
    scheme = url.split(":", 1)[0].split("+", 1)[0]
    if scheme == "sqlite":
        return "sqlite"
    if scheme in ("postgresql", "postgres"):
        return "postgresql"
    raise BackupError(f"database {_redacted(url)}: crowdpref backs up SQLite and PostgreSQL only, not {scheme}")


def _sqlite_path(url: str) -> Path:
    path = url.split("///", 1)[1] if "///" in url else ""
    if not path or path == ":memory:":
        raise BackupError(f"database {url}: an in-memory SQLite database has nothing to back up")
    return Path(path.split("?", 1)[0])


def _redacted(url: str) -> str:
    """A URL without its password, for messages."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable URL: name only its scheme
        return url.split(":", 1)[0] + "://..."


# --- PostgreSQL ------------------------------------------------------------------------------------
def _pg_tool(name: str) -> str:
    from services.postgres import find_bin_dir

    bin_dir = find_bin_dir()
    if bin_dir is not None and (bin_dir / name).is_file():
        return str(bin_dir / name)
    found = shutil.which(name)
    if found is None:
        raise BackupError(f"{name} not found (under /usr/lib/postgresql/*/bin or on PATH): install Debian's "
                          "postgresql-client (make setup installs the server, which brings it)")
    return found


def _pg_args(url: str) -> tuple[list[str], dict[str, str]]:
    """Connection options for pg_dump/pg_restore: host, port, user and database as arguments,
    the password through the environment (never in argv, which ``ps`` shows)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    args = ["-d", parsed.database or "postgres"]
    if parsed.host:
        args += ["-h", parsed.host]
    if parsed.port:
        args += ["-p", str(parsed.port)]
    if parsed.username:
        args += ["-U", parsed.username]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    if parsed.password is not None:
        env["PGPASSWORD"] = str(parsed.password)
    sslmode = parsed.query.get("sslmode")
    if isinstance(sslmode, str):
        env["PGSSLMODE"] = sslmode
    return args + ["--no-password"], env


def _run_pg(argv: list[str], env: dict[str, str], what: str, url: str) -> None:
    try:
        result = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, timeout=3600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackupError(f"{what} of {_redacted(url)} failed ({exc.__class__.__name__})") from None
    if result.returncode != 0:
        lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit {result.returncode}"
        password = env.get("PGPASSWORD")
        if password:
            reason = reason.replace(password, "***")
        raise BackupError(f"{what} of {_redacted(url)} failed: {reason[:300]}")


# --- restic ----------------------------------------------------------------------------------------
def repository(settings: Settings) -> str:
    """The restic repository: ``backup_repository``, else ``<state>/backups/restic``."""
    if settings.backup_repository is not None:
        return settings.backup_repository.get_secret_value()
    return str(settings.state_dir / DEFAULT_REPOSITORY)


def password_file(settings: Settings) -> Path:
    """The repository's password file: ``backup_password_file``, else ``<state>/backup-password``."""
    chosen = settings.backup_password_file
    return Path(chosen).expanduser().absolute() if chosen is not None else settings.state_dir / DEFAULT_PASSWORD_FILE


def state_tag(settings: Settings) -> str:
    """The tag of this state folder's snapshots: a hash of its absolute path, so a state folder
    rebuilt at the same place after a lost disk finds its snapshots again."""
    return "crowdpref-state-" + hashlib.sha256(str(settings.state_dir).encode()).hexdigest()[:12]


def redacted_repository(url: str) -> str:
    """A repository URL without its password (``rest:https://user:secret@host/`` ->
    ``rest:https://user:***@host/``), for messages."""
    return re.sub(r"(//[^/@:]*):[^/@]*@", r"\1:***@", url)


def _restic_env(settings: Settings, repo: str, password: Path) -> dict[str, str]:
    """This process's environment (a remote repository's credentials pass through) without
    crowdpref's settings and any other restic password or repository, plus ours."""
    from crowdpref.settings import Settings as _S

    ours = {str(n) for f in _S.model_fields.values() for n in f.validation_alias.choices}  # type: ignore[union-attr]
    drop = {"RESTIC_PASSWORD", "RESTIC_PASSWORD_COMMAND", "RESTIC_PASSWORD_FILE", "RESTIC_REPOSITORY",
            "RESTIC_REPOSITORY_FILE", "RESTIC_KEY_HINT"}
    env = {k: v for k, v in os.environ.items()
           if k not in ours and k not in drop and not k.startswith(("PG", "CROWDPREF_"))}
    env.update(RESTIC_REPOSITORY=repo, RESTIC_PASSWORD_FILE=str(password))
    env.setdefault("RESTIC_CACHE_DIR", str(settings.state_dir / "backups" / "cache"))
    return env


class _NoRepository(BackupError):
    """There is no restic repository at the configured place (yet)."""


@dataclass
class _Restic:
    """restic for one settings: its binary, repository and password file."""

    settings: Settings
    binary: str = ""
    repo: str = ""
    password: Path = field(default_factory=Path)

    def __post_init__(self) -> None:
        found = shutil.which("restic")
        if found is None:
            raise BackupError("restic not found on PATH: install Debian's restic (`apt-get install restic`; "
                              "services/bootstrap.sh installs it); nothing was changed")
        self.binary, self.repo, self.password = found, repository(self.settings), password_file(self.settings)

    @property
    def where(self) -> str:
        return redacted_repository(self.repo)

    def _fail(self, what: str, output: str, rc: int) -> BackupError:
        lines = [line.strip() for line in output.replace(self.repo, self.where).splitlines() if line.strip()]
        text = " ".join(lines)
        setting = "backup_repository (CROWDPREF_BACKUP_REPOSITORY)"
        if "wrong password" in text or "no key found" in text:
            return BackupError(f"{self.password}: this password does not open the backup repository {self.where}: "
                               "put that repository's password in the file (the copy you kept off the server), or "
                               f"point backup_password_file (CROWDPREF_BACKUP_PASSWORD_FILE) or {setting} elsewhere")
        if "unable to open config file" in text or "Is there a repository at the following location" in text:
            if re.search(r"no such file|does not exist|not exist|\b404\b|not found", text, re.IGNORECASE):
                return _NoRepository(f"no restic repository at {self.where}: check {setting}, or take a backup "
                                     "first (crowdpref backup creates it)")
            reason = next((line for line in lines if "unable to open config file" in line), lines[0])
            return BackupError(f"the backup repository {self.where} cannot be reached ({reason[:200]}): check "
                               f"{setting} and its credentials in the environment, and that its server is up")
        if "no matching ID found" in text or "no snapshot found" in text or "invalid id" in text:
            return BackupError(f"{what}: no such snapshot in {self.where}: list them with `crowdpref backup --list`")
        if "already locked" in text:
            return BackupError(f"{what}: the repository {self.where} is locked by another restic run: wait for it "
                               "to end, or if none runs remove the stale lock (`restic unlock`)")
        damaged = [line for line in lines if any(word in line for word in (
            "ciphertext verification failed", "checksum", "damaged", "unexpected EOF", "not found in index",
            "LoadBlob", "load", "error"))]
        reason = (damaged or lines or [f"exit {rc}"])[-1]
        return BackupError(f"{what} failed on {self.where}: {reason[:300]}")

    def run(self, args: list[str], what: str, *, cwd: Path | None = None, timeout: float = 24 * 3600,
            keep_output: bool = True) -> subprocess.CompletedProcess[str]:
        """``restic ARGS``; a one-line :class:`BackupError` when it fails. ``keep_output=False``
        sends what restic writes to standard output nowhere (a read-back of a whole snapshot)."""
        try:
            result = subprocess.run([self.binary, *args], env=_restic_env(self.settings, self.repo, self.password),
                                    cwd=cwd, stdin=subprocess.DEVNULL, text=True, timeout=timeout, check=False,
                                    stdout=subprocess.PIPE if keep_output else subprocess.DEVNULL,
                                    stderr=subprocess.PIPE)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BackupError(f"{what}: restic failed to run ({exc.__class__.__name__}) on {self.where}") from None
        if result.returncode != 0:
            raise self._fail(what, result.stderr + "\n" + (result.stdout or ""), result.returncode)
        return result

    def need_password(self) -> None:
        if not self.password.is_file():
            raise BackupError(f"{self.password}: no backup password file: put the backup repository's password "
                              "there (the copy you kept off the server), or point backup_password_file "
                              "(CROWDPREF_BACKUP_PASSWORD_FILE) at it; nothing was changed")

    def initialise(self) -> None:
        """``restic init`` with the password file, generated (0600) first when it is missing."""
        generated = False
        if not self.password.exists():
            self.password.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.password, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(32) + "\n")
            generated = True
        try:
            self.run(["init"], "restic init")
        except BackupError as exc:
            if generated:  # e.g. a repository there already: its password is not the one just made
                self.password.unlink(missing_ok=True)
            if "already" in str(exc) or "exists" in str(exc):
                raise BackupError(f"{self.where}: a restic repository exists there, but {self.password} was "
                                  "missing: put its password in that file (the copy you kept off the server)") from None
            raise


# --- writing a backup ------------------------------------------------------------------------------
def _dump_sqlite(path: Path, target: Path) -> None:
    """One consistent snapshot through SQLite's online backup API (others may write meanwhile)."""
    try:
        source = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60)
    except sqlite3.Error as exc:
        raise BackupError(f"{path}: cannot be opened for the backup ({exc}): check its permissions") from None
    try:
        copy = sqlite3.connect(target)
        try:
            source.backup(copy)
        finally:
            copy.close()
    except sqlite3.Error as exc:
        raise BackupError(f"{path}: the online backup failed ({exc}): it may be damaged; "
                          "run `sqlite3 FILE 'PRAGMA integrity_check'`") from None
    finally:
        source.close()


def _dump(part: str, url: str, staging: Path) -> tuple[str, str | None]:
    """Write ``part``'s database into ``staging/databases``; returns (kind, member or None)."""
    kind = _kind(url)
    (staging / "databases").mkdir(exist_ok=True)
    if kind == "sqlite":
        path = _sqlite_path(url)
        if not path.exists():
            return "absent", None
        member = f"databases/{part}.sqlite"
        _dump_sqlite(path, staging / member)
        return kind, member
    member = f"databases/{part}.pgdump"
    args, env = _pg_args(url)
    _run_pg([_pg_tool("pg_dump"), "--format=custom", "--no-owner", "--no-privileges",
             "-f", str(staging / member), *args], env, "pg_dump", url)
    return kind, member


@contextmanager
def store_writes_paused(url: str) -> Iterator[None]:
    """Hold the study store's write lock (readers go on; writers wait) while the databases are
    copied, so that the store and Argilla's copies agree: crowdpref records what it is about to
    change in Argilla in the store first (an account ``creating``, a participant ``releasing``)
    and the result after, so with the store's writes held, whatever Argilla gains meanwhile is
    either a participant's answer (read back into the store by the next collection run) or the
    second half of a change the store already announced (finished by the next run, as after a
    crash). SQLite: ``BEGIN IMMEDIATE`` (a writer waits up to its 60 s busy timeout);
    PostgreSQL: every table of the store locked ``IN EXCLUSIVE MODE`` (pg_dump's reads pass)."""
    kind = _kind(url) if url else "none"
    if kind == "sqlite":
        path = _sqlite_path(url)
        if not path.exists():
            yield
            return
        try:
            conn = sqlite3.connect(path, timeout=60, isolation_level=None)
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise BackupError(f"{path}: the store's write lock could not be taken for the backup ({exc}): "
                              "try again; a process may hold it for long") from None
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    if kind != "postgresql":
        yield
        return
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    try:
        engine = create_engine(url, poolclass=NullPool)
        conn = engine.connect()
    except Exception as exc:  # noqa: BLE001 - a server down or a driver missing: one line
        raise BackupError(f"the study store at {_redacted(url)} cannot be reached for the backup "
                          f"({exc.__class__.__name__}): check that its server runs") from None
    try:
        with conn.begin() as transaction:
            tables = conn.execute(text("SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = "
                                       "current_schema()")).scalars().all()
            for table in tables:
                conn.execute(text(f"LOCK TABLE {table} IN EXCLUSIVE MODE"))
            yield
            transaction.rollback()
    finally:
        conn.close()
        engine.dispose()


def _copy_tree(source: Path, staging: Path, prefix: str) -> None:
    """Copy the regular files under ``source`` into ``staging/prefix``: each file read through
    one open descriptor, so a file replaced meanwhile (atomic writes) is copied whole, old or new."""
    if not source.is_dir():
        return
    for root, dirs, names in os.walk(source):
        dirs.sort()
        rel = Path(root).relative_to(source)
        for name in sorted(names):
            src = Path(root) / name
            target = staging / prefix / rel / name
            try:
                handle = open(src, "rb")  # noqa: SIM115 - closed by the with below, after the except
            except FileNotFoundError:  # removed since the walk listed it
                continue
            except OSError as exc:
                raise BackupError(f"{src}: cannot be read for the backup ({exc.strerror}): fix its permissions") from None
            with handle:
                mode = os.fstat(handle.fileno()).st_mode
                if not stat.S_ISREG(mode):
                    continue
                target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                with open(target, "wb") as out:
                    shutil.copyfileobj(handle, out, 1 << 20)
                os.chmod(target, stat.S_IMODE(mode))  # the snapshot keeps it (0600 secrets stay 0600)


def stage(settings: Settings, staging: Path, progress: Progress = _quiet) -> dict[str, str]:
    """Write what a backup holds into the empty folder ``staging``: consistent copies of the
    databases (the store's writes paused meanwhile), the secrets, the run folders and
    ``crowdpref-backup.json``. Returns each database's kind."""
    parts = databases(settings)
    kinds: dict[str, str] = {}
    steps = [p for p, u in parts.items() if u is not None]
    with store_writes_paused(parts["store"] or ""):  # the store first, Argilla while it waits
        for done, part in enumerate(steps):
            progress(f"copying the {part} database", done, len(steps) + 2)
            kinds[part], member = _dump(part, parts[part] or "", staging)
            if member is not None:
                os.chmod(staging / member, 0o600)
    for part, url in parts.items():
        if url is None:
            kinds[part] = "external"
    progress("copying secrets and run folders", len(steps), len(steps) + 2)
    _copy_tree(settings.secrets_dir, staging, "secrets")
    _copy_tree(settings.runs_dir, staging, "studies")
    from crowdpref import __version__ as crowdpref_version

    description = {"format": FORMAT, "version": VERSION, "crowdpref_version": crowdpref_version,
                   "databases": {part: {"kind": kind, "member": _member(staging, part)} for part, kind in kinds.items()}}
    (staging / DESCRIPTION).write_text(json.dumps(description, indent=2), encoding="utf-8")
    return kinds


def _member(folder: Path, part: str) -> str | None:
    found = sorted((folder / "databases").glob(f"{part}.*")) if (folder / "databases").is_dir() else []
    return found[0].relative_to(folder).as_posix() if found else None


@contextmanager
def _one_at_a_time(state: Path) -> Iterator[None]:
    """One backup of a state folder at a time (they share its staging folder)."""
    state.mkdir(parents=True, exist_ok=True)
    fd = os.open(state / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BackupError(f"{state}: another backup of this state folder is running: wait for it to end") from None
        yield
    finally:
        os.close(fd)


def _snapshot_time(now: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))  # restic reads --time as local time


def _save(restic: _Restic, settings: Settings, staging: Path, progress: Progress,
          now: float | None) -> dict[str, Any]:
    """``restic backup`` of the staging folder's contents; restic's summary (``snapshot_id`` ...)."""
    args = [restic.binary, "backup", "--json", "--tag", TAG, "--tag", state_tag(settings), "."]
    if now is not None:
        args[2:2] = ["--time", _snapshot_time(now)]
    summary: dict[str, Any] = {}
    with tempfile.TemporaryFile("w+") as errors:
        proc = subprocess.Popen(args, cwd=staging, env=_restic_env(settings, restic.repo, restic.password),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, text=True)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if message.get("message_type") == "status":
                    progress("saving the snapshot", int(message.get("bytes_done") or 0),
                             int(message.get("total_bytes") or 1))
                elif message.get("message_type") == "summary":
                    summary = message
            rc = proc.wait()
        finally:
            if proc.poll() is None:  # interrupted: restic must not go on writing
                proc.kill()
                proc.wait()
        errors.seek(0)
        output = errors.read()
    if rc != 0 or not summary.get("snapshot_id"):
        raise restic._fail("restic backup", output, rc)
    return summary


def create(settings: Settings, *, progress: Progress = _quiet, now: float | None = None) -> BackupResult:
    """Take one backup snapshot while the stack may run, then apply the retention (:func:`forget`);
    see the module's docstring for what it holds. ``now``: the snapshot's time (tests)."""
    started = time.monotonic()
    restic = _Restic(settings)
    state = settings.state_dir
    with _one_at_a_time(state):
        initialised = False
        if not restic.password.exists():
            restic.initialise()  # a new repository and its password (refused where one exists)
            initialised = True
        staging = state / STAGING
        shutil.rmtree(staging, ignore_errors=True)  # a crashed run's
        try:
            staging.mkdir(mode=0o700)
            os.chmod(staging, 0o700)
            kinds = stage(settings, staging, progress)
            files = [p for p in staging.rglob("*") if p.is_file() and p.name != DESCRIPTION]
            size = sum(p.stat().st_size for p in files)
            try:
                summary = _save(restic, settings, staging, progress, now)
            except _NoRepository:
                restic.initialise()  # the password file is there: the new repository takes it
                initialised = True
                summary = _save(restic, settings, staging, progress, now)
        except OSError as exc:
            raise BackupError(f"{staging}: the backup could not be staged ({exc.strerror or exc}): check the free "
                              "space and permissions of the state folder") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        progress("applying the retention", 0, 1)
        forgotten = forget(settings, restic)
    progress("done", 1, 1)
    return BackupResult(str(summary["snapshot_id"])[:8], restic.where, len(files), size,
                        int(summary.get("data_added") or 0), kinds, forgotten, initialised, restic.password,
                        time.monotonic() - started)


def forget(settings: Settings, restic: _Restic | None = None) -> list[str]:
    """The retention: ``restic forget --keep-within <backup_retention_days>d --prune`` over this
    state folder's snapshots (all in one group; restic counts the days back from the newest,
    which a backup has just taken), so a withdrawn participant's data is gone from the
    repository after that period. Returns the short ids of the snapshots forgotten."""
    restic = restic or _Restic(settings)
    restic.need_password()
    result = restic.run(["forget", "--json", "--tag", state_tag(settings), "--group-by", "",
                         "--keep-within", f"{settings.backup_retention_days}d", "--prune"],
                        "restic forget (the retention)")
    first = next((line for line in result.stdout.splitlines() if line.startswith("[")), "[]")
    try:
        groups = json.loads(first) or []
    except ValueError:
        groups = []
    return sorted(str(s.get("short_id") or s.get("id", ""))[:8] for g in groups for s in (g.get("remove") or []))


def snapshots(settings: Settings) -> list[Snapshot]:
    """The repository's crowdpref snapshots, oldest first; ``mine``: of this state folder."""
    restic = _Restic(settings)
    restic.need_password()
    result = restic.run(["snapshots", "--json", "--tag", TAG], "restic snapshots")
    try:
        listed = json.loads(result.stdout or "[]") or []
    except ValueError:
        raise BackupError(f"restic snapshots on {restic.where}: unreadable output") from None
    mine = state_tag(settings)
    return [Snapshot(str(s["id"]), str(s.get("short_id") or s["id"][:8]), str(s.get("time", "")),
                     tuple(s.get("tags") or ()), tuple(s.get("paths") or ()), str(s.get("hostname", "")),
                     mine in (s.get("tags") or ())) for s in listed]


# --- restoring -------------------------------------------------------------------------------------
def running_services(settings: Settings) -> list[str]:
    """Services of this state folder that run now (by their pid records), except the database
    server (:data:`DATABASE_SERVICE_PREFIX`), which a restore of PostgreSQL dumps needs."""
    from services.process import ProcessManager

    manager = ProcessManager(settings.state_dir)
    if not manager.pids_dir.is_dir():
        return []
    names = sorted(p.stem for p in manager.pids_dir.glob("*.json"))
    return [n for n in names if not n.startswith(DATABASE_SERVICE_PREFIX) and manager.running(n) is not None]


@dataclass
class _Swap:
    """Renames done so far, undone in reverse if a later one fails."""

    aside: Path
    moves: list[tuple[Path, Path | None]] = field(default_factory=list)  # (target, its old copy)

    def put(self, new: Path | None, target: Path) -> None:
        """``new`` (None: nothing) takes ``target``'s place; the old one goes aside."""
        old = None
        if target.exists() or target.is_symlink():
            old = self.aside / str(len(self.moves))
            os.replace(target, old)
        self.moves.append((target, old))
        if new is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(new, target)

    def undo(self) -> None:
        for target, old in reversed(self.moves):
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)
            if old is not None:
                os.replace(old, target)


@contextmanager
def _temporary(parent: Path, prefix: str) -> Iterator[Path]:
    parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    os.chmod(folder, 0o700)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _refused(what: str, why: str) -> BackupError:
    return BackupError(f"{what}: cannot be restored ({why}): nothing was changed; choose another snapshot "
                       "(`crowdpref backup --list`)")


def _check(folder: Path, what: str) -> dict[str, Any]:
    """The restored snapshot holds a crowdpref backup: its description, each database it names,
    nothing outside databases/, secrets/ and studies/."""
    try:
        description = json.loads((folder / DESCRIPTION).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _refused(what, f"no {DESCRIPTION}: not a crowdpref backup") from None
    except (OSError, ValueError) as exc:
        raise _refused(what, f"{DESCRIPTION} unreadable: {exc.__class__.__name__}") from None
    if not isinstance(description, dict) or description.get("format") != FORMAT:
        raise _refused(what, f"{DESCRIPTION} does not describe a crowdpref backup")
    if description.get("version") != VERSION:
        raise _refused(what, f"backup format version {description.get('version')!r}, this crowdpref reads {VERSION}")
    held = description.get("databases")
    if not isinstance(held, dict):
        raise _refused(what, f"{DESCRIPTION} lists no databases")
    for part, entry in held.items():
        member = (entry or {}).get("member")
        if (entry or {}).get("kind") in ("sqlite", "postgresql") and not (
                isinstance(member, str) and member.startswith("databases/") and ".." not in member
                and (folder / member).is_file()):
            raise _refused(what, f"the {part} database it describes is missing")
    extra = sorted(p.name for p in folder.iterdir() if p.name not in (*PARTS, DESCRIPTION))
    if extra:
        raise _refused(what, f"it holds {extra[0]!r}, which a crowdpref backup does not")
    return description


_RESTORING = re.compile(r"restoring <Snapshot ([0-9a-f]+) of \[.*?\] at (.+?) by ")


def restore(settings: Settings, snapshot: str = "latest", *, progress: Progress = _quiet) -> RestoreResult:
    """Restore ``snapshot`` (an id, or ``latest``: this state folder's newest) into this state
    folder (and this settings' databases) with the stack down; see the module's docstring for
    the order that leaves nothing half-written."""
    started = time.monotonic()
    running = running_services(settings)
    if running:
        raise ServiceError(f"restore needs the stack down ({', '.join(running)} running, writing to what would be "
                           "replaced): run `crowdpref down` first")
    snapshot = snapshot.strip() or "latest"
    if not re.fullmatch(r"latest|[0-9a-fA-F]{4,64}", snapshot):
        raise BackupError(f"snapshot {snapshot!r}: give `latest` or a snapshot id from `crowdpref backup --list`")
    restic = _Restic(settings)
    restic.need_password()
    what = f"snapshot {snapshot}" + (f" of this state folder (tag {state_tag(settings)})" if snapshot == "latest" else "")
    parts = databases(settings)
    state = settings.state_dir
    with _temporary(state, ".restore-") as unpacked, _temporary(state, ".restore-old-") as aside:
        progress("restoring and verifying the snapshot", 0, 1)
        args = ["restore", snapshot, "--target", str(unpacked), "--verify"]
        if snapshot == "latest":
            args += ["--tag", state_tag(settings)]
        try:
            done = restic.run(args, what)
        except BackupError as exc:
            raise BackupError(f"{exc}; nothing was changed") from None
        found = _RESTORING.search(done.stdout)
        snapshot_id, created_at = (found.group(1), re.sub(r"\.\d+", "", found.group(2))) if found else (snapshot, "?")
        description = _check(unpacked, f"snapshot {snapshot_id}")
        held = description["databases"]
        for part, url in parts.items():
            kind = (held.get(part) or {}).get("kind")
            if url is None or kind in (None, "external", "absent"):
                continue
            if kind != _kind(url):
                setting = "database_url (CROWDPREF_DATABASE_URL)" if part == "store" else "Argilla's database"
                raise BackupError(f"snapshot {snapshot_id}: holds a {kind} {part} database, but {setting} is "
                                  f"{_kind(url)} here: restore with the settings the backup was taken with; "
                                  "nothing was changed")
        files = sum(1 for p in unpacked.rglob("*") if p.is_file()) - 1
        swap = _Swap(aside)
        try:
            # PostgreSQL first: each dump loads in one transaction (all or nothing)
            loaded: list[str] = []
            for part, url in parts.items():
                entry = held.get(part) or {}
                if url is not None and entry.get("kind") == "postgresql":
                    progress(f"loading the {part} database", 0, 1)
                    pg_args, env = _pg_args(url)
                    try:
                        _run_pg([_pg_tool("pg_restore"), "--single-transaction", "--exit-on-error", "--clean",
                                 "--if-exists", "--no-owner", "--no-privileges", *pg_args,
                                 str(unpacked / entry["member"])], env, "pg_restore", url)
                    except BackupError as exc:
                        done_part = f"the {' and '.join(loaded)} database was restored already, " if loaded else ""
                        raise BackupError(f"{exc}: {done_part}the {part} database and the files were not changed; "
                                          "fix the cause and run the restore again") from None
                    loaded.append(part)
            progress("swapping the files in", 0, 1)
            for part, url in parts.items():
                entry = held.get(part) or {}
                if url is None or entry.get("kind") not in ("sqlite", "absent"):
                    continue
                path = _sqlite_path(url)
                new = unpacked / entry["member"] if entry.get("kind") == "sqlite" else None
                if new is not None:
                    os.chmod(new, 0o600)
                for suffix in ("-wal", "-shm", "-journal"):  # the old file's journal must not meet the new one
                    swap.put(None, path.with_name(path.name + suffix))
                swap.put(new, path)
            new_secrets = unpacked / "secrets"
            if new_secrets.is_dir():
                os.chmod(new_secrets, 0o700)
            swap.put(new_secrets if new_secrets.is_dir() else None, settings.secrets_dir)
            new_runs = unpacked / "studies"
            swap.put(new_runs if new_runs.is_dir() else None, settings.runs_dir)
        except BaseException:
            swap.undo()
            raise
    progress("done", 1, 1)
    kinds = {part: (held.get(part) or {}).get("kind", "absent") for part in parts}
    return RestoreResult(snapshot_id, created_at, files, kinds, time.monotonic() - started)
