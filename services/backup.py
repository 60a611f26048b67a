"""Back up and restore a crowdpref state: ONE ``.tar.gz`` archive holding the study store, the
embedded Argilla's database, the secrets needed to use them again and the study run folders.

What an archive holds (``crowdpref backup``; :func:`create`):

- ``databases/store.*``: the study store (``database_url``, else ``<state>/store.sqlite``), who
  holds and answered what, who was paid, account passwords;
- ``databases/argilla.*``: the embedded Argilla's database (every answer), when Argilla is the
  embedded one (a remote ``CROWDPREF_ARGILLA_URL`` is that server's to back up). Its URL comes
  from :func:`argilla_database_url`: ``services.argilla.service.database_url(settings)`` when the
  Argilla service defines it (its PostgreSQL branch), else ``<state>/argilla/argilla.db``;
- ``secrets/``: the whole secrets folder (the Argilla owner's credentials, its token-signing key);
- ``studies/``: the run folders (``settings.runs_dir``), their private salts included;
- ``manifest.json``, the first member: what the archive holds, each file's size and sha256.

Databases are copied online and consistently while the stack runs: SQLite through its online
backup API (:meth:`sqlite3.Connection.backup`, one snapshot even while others write),
PostgreSQL with ``pg_dump`` (one snapshot transaction; custom format). The store's writes wait
while both are copied (:func:`store_writes_paused`), so the two copies agree. The archive holds
secrets and passwords, so it is written owner-only (mode 0600, in a 0700 ``backups/`` folder),
first under a temporary name beside its target, then renamed: a crash leaves no half archive
under the real name. Database URLs (they may hold passwords) are never written into it.

``crowdpref restore ARCHIVE`` (:func:`restore`) needs the stack down (a running service would
keep writing to what is being replaced; a PostgreSQL server may run: it receives the dumps). It
reads the manifest first, then unpacks every member into a temporary folder inside the state
folder, checking each size and sha256 against the manifest; a damaged archive stops it there
with one line and nothing changed. Only then are the PostgreSQL dumps loaded (``pg_restore
--single-transaction``: each database is replaced whole or not at all) and the files swapped in
by renames (the current ones moved aside first and put back if a swap fails).

No Prefect imports here: ``flows/backup.py`` wraps :func:`create` for the scheduled deployment.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from crowdpref.errors import CrowdprefError, ServiceError
from crowdpref.settings import Settings

FORMAT = "crowdpref-backup"
VERSION = 1
MANIFEST = "manifest.json"
BACKUPS_DIR = "backups"
NAME_PREFIX = "crowdpref-"
SUFFIX = ".tar.gz"
DATABASE_SERVICE_PREFIX = "postgres"
"""Services whose names start with this may run during a restore: they receive the dumps."""

Progress = Callable[[str, int, int], None]
"""``progress(what, done, total)``: what is being done, and how far (bytes or items)."""


def _quiet(what: str, done: int, total: int) -> None:  # the default progress: say nothing
    return None


class BackupError(CrowdprefError):
    """A backup cannot be written, or an archive cannot be restored (one line: which file, why,
    what to do)."""


@dataclass(frozen=True)
class BackupResult:
    path: Path
    size: int
    files: int
    databases: dict[str, str]  # part -> kind ("sqlite", "postgresql", "absent")
    seconds: float


@dataclass(frozen=True)
class RestoreResult:
    archive: Path
    created_at: str
    files: int
    databases: dict[str, str]
    seconds: float


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


def default_archive(settings: Settings, now: float | None = None) -> Path:
    """``<state>/backups/crowdpref-YYYYmmddTHHMMSSZ.tar.gz`` (UTC)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    return settings.state_dir / BACKUPS_DIR / f"{NAME_PREFIX}{stamp}{SUFFIX}"


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


# --- writing a backup ------------------------------------------------------------------------------
def _hash_copy(source: Any, target: Path) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    with open(target, "wb") as out:
        while chunk := source.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _file_digest(path: Path) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


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
                handle = open(src, "rb")
            except FileNotFoundError:  # removed since the walk listed it
                continue
            except OSError as exc:
                raise BackupError(f"{src}: cannot be read for the backup ({exc.strerror}): fix its permissions") from None
            with handle:
                mode = os.fstat(handle.fileno()).st_mode
                if not stat.S_ISREG(mode):
                    continue
                target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                _hash_copy(handle, target)
                os.chmod(target, stat.S_IMODE(mode))  # the archive keeps it (0600 secrets stay 0600)


def create(settings: Settings, archive: Path | None = None, *, progress: Progress = _quiet,
           now: float | None = None) -> BackupResult:
    """Write one backup archive (default :func:`default_archive`) while the stack may run; see
    the module's docstring for what it holds. An existing file is never written over (a
    one-line error). Returns where it is and what it holds."""
    started = time.monotonic()
    target = Path(archive) if archive is not None else default_archive(settings, now)
    target = target.expanduser().absolute()
    if target.is_dir():
        raise BackupError(f"{target}: is a folder: give --to a file name, e.g. {target / 'crowdpref.tar.gz'}")
    if target.exists():  # never write over a backup
        raise BackupError(f"{target}: exists already: choose another name with --to, or move it away first")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.parent.name == BACKUPS_DIR:
            os.chmod(target.parent, 0o700)
    except OSError as exc:
        raise BackupError(f"{target.parent}: cannot create the backup folder ({exc.strerror}): choose another "
                          "place with --to") from None
    parts = databases(settings)
    staging = Path(tempfile.mkdtemp(prefix=".backup-", dir=target.parent))
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        os.chmod(staging, 0o700)
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
        files = []
        for path in sorted(p for p in staging.rglob("*") if p.is_file()):
            size, sha = _file_digest(path)
            files.append({"path": path.relative_to(staging).as_posix(), "size": size, "sha256": sha})
        from crowdpref import __version__ as crowdpref_version

        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now)),
            "crowdpref_version": crowdpref_version,
            "databases": {part: {"kind": kind, "member": next(
                (f["path"] for f in files if f["path"].startswith(f"databases/{part}.")), None)}
                for part, kind in kinds.items()},
            "files": files,
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        total = sum(f["size"] for f in files)
        written = 0
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as raw:
            with tarfile.open(fileobj=raw, mode="w:gz", compresslevel=6) as tar:
                tar.add(staging / MANIFEST, arcname=MANIFEST)
                for entry in files:
                    progress("writing the archive", written, total)
                    tar.add(staging / entry["path"], arcname=entry["path"])
                    written += entry["size"]
            raw.flush()
            os.fsync(raw.fileno())
        progress("writing the archive", total, total)
        os.replace(partial, target)
        return BackupResult(target, target.stat().st_size, len(files), kinds, time.monotonic() - started)
    except OSError as exc:
        raise BackupError(f"{target}: the backup could not be written ({exc.strerror or exc}): check the free "
                          "space and permissions there, or choose another place with --to") from None
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(staging, ignore_errors=True)


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


def _damaged(archive: Path, why: str) -> BackupError:
    return BackupError(f"{archive}: cannot be restored ({why}): nothing was changed; choose another archive "
                       "(crowdpref backup writes them to <state>/backups/)")


def _safe_member(name: str) -> bool:
    path = PurePosixPath(name)
    return bool(name) and not path.is_absolute() and ".." not in path.parts and path.parts[0] in (
        "databases", "secrets", "studies")


def read_manifest(archive: Path) -> dict[str, Any]:
    """The archive's manifest (its first member), checked: a crowdpref backup of a version this
    crowdpref reads. A one-line :class:`BackupError` otherwise."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            first = tar.next()
            if first is None or first.name != MANIFEST or not first.isfile():
                raise _damaged(archive, f"its first member is not {MANIFEST}: not a crowdpref backup")
            handle = tar.extractfile(first)
            manifest = json.loads(handle.read().decode("utf-8")) if handle else None
    except FileNotFoundError:
        raise BackupError(f"{archive}: no such file: give the path of an archive crowdpref backup wrote") from None
    except (tarfile.TarError, EOFError, OSError, ValueError, zlib.error) as exc:
        raise _damaged(archive, f"not a readable .tar.gz: {exc.__class__.__name__}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or not isinstance(manifest.get("files"), list):
        raise _damaged(archive, f"{MANIFEST} is not a crowdpref backup manifest")
    if manifest.get("version") != VERSION:
        raise _damaged(archive, f"backup format version {manifest.get('version')!r}, this crowdpref reads {VERSION}")
    for entry in manifest["files"]:
        if not (isinstance(entry, dict) and isinstance(entry.get("path"), str) and _safe_member(entry["path"])
                and isinstance(entry.get("size"), int) and isinstance(entry.get("sha256"), str)):
            raise _damaged(archive, f"{MANIFEST} lists a file it may not hold: {str(entry)[:80]}")
    return manifest


def _unpack(archive: Path, manifest: dict[str, Any], into: Path, progress: Progress) -> None:
    """Every member into ``into``, each checked against the manifest (size, sha256); the whole
    manifest must be there and nothing else."""
    expected = {f["path"]: f for f in manifest["files"]}
    total = sum(f["size"] for f in manifest["files"])
    seen: set[str] = set()
    done = 0
    try:
        with tarfile.open(archive, "r:gz") as tar:
            tar.next()  # the manifest, read already
            while (member := tar.next()) is not None:
                entry = expected.get(member.name)
                if entry is None or member.name in seen or not member.isfile():
                    raise _damaged(archive, f"it holds {member.name!r}, which its manifest does not list")
                seen.add(member.name)
                progress("checking and unpacking", done, total)
                target = into / member.name
                target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # the state folder is private
                handle = tar.extractfile(member)
                assert handle is not None
                size, sha = _hash_copy(handle, target)
                private = member.name.startswith(("databases/", "secrets/"))
                os.chmod(target, 0o600 if private else stat.S_IMODE(member.mode) & 0o755 or 0o600)
                if size != entry["size"] or sha != entry["sha256"]:
                    raise _damaged(archive, f"{member.name} does not match its sha256 in the manifest")
                done += size
    except BackupError:
        raise
    except (tarfile.TarError, EOFError, OSError, ValueError, zlib.error) as exc:
        raise _damaged(archive, f"unreadable at {len(seen) + 1} of {len(expected)} files: "
                       f"{exc.__class__.__name__}: {str(exc)[:80]}") from None
    missing = sorted(set(expected) - seen)
    if missing:
        raise _damaged(archive, f"{len(missing)} files of its manifest are missing, e.g. {missing[0]}")
    progress("checking and unpacking", total, total)


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


def restore(settings: Settings, archive: Path, *, progress: Progress = _quiet) -> RestoreResult:
    """Restore ``archive`` into this state folder (and this settings' databases) with the stack
    down; see the module's docstring for the order that leaves nothing half-written."""
    started = time.monotonic()
    archive = Path(archive).expanduser().absolute()
    running = running_services(settings)
    if running:
        raise ServiceError(f"restore needs the stack down ({', '.join(running)} running, writing to what would be "
                           "replaced): run `crowdpref down` first")
    progress("reading the manifest", 0, 1)
    manifest = read_manifest(archive)
    parts = databases(settings)
    held = manifest.get("databases") or {}
    for part, url in parts.items():
        kind = (held.get(part) or {}).get("kind")
        if url is None or kind in (None, "external", "absent"):
            continue
        if kind != _kind(url):
            setting = "database_url (CROWDPREF_DATABASE_URL)" if part == "store" else "Argilla's database"
            raise BackupError(f"{archive}: holds a {kind} {part} database, but {setting} is {_kind(url)} here: "
                              "restore with the settings the backup was taken with; nothing was changed")
    state = settings.state_dir
    with _temporary(state, ".restore-") as unpacked, _temporary(state, ".restore-old-") as aside:
        _unpack(archive, manifest, unpacked, progress)
        swap = _Swap(aside)
        try:
            # PostgreSQL first: each dump loads in one transaction (all or nothing)
            loaded: list[str] = []
            for part, url in parts.items():
                entry = held.get(part) or {}
                if url is not None and entry.get("kind") == "postgresql":
                    progress(f"loading the {part} database", 0, 1)
                    args, env = _pg_args(url)
                    try:
                        _run_pg([_pg_tool("pg_restore"), "--single-transaction", "--exit-on-error", "--clean",
                                 "--if-exists", "--no-owner", "--no-privileges", *args,
                                 str(unpacked / entry["member"])], env, "pg_restore", url)
                    except BackupError as exc:
                        done = f"the {' and '.join(loaded)} database was restored already, " if loaded else ""
                        raise BackupError(f"{exc}: {done}the {part} database and the files were not changed; "
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
    return RestoreResult(archive, str(manifest.get("created_at")), len(manifest["files"]), kinds,
                         time.monotonic() - started)


ARCHIVE_NAME_LENGTH = len(f"{NAME_PREFIX}YYYYmmddTHHMMSSZ{SUFFIX}")


def _archive_time(path: Path) -> float | None:
    """When an archive of ``<state>/backups/`` was written, from its name (UTC); None for a
    name :func:`default_archive` does not write."""
    if len(path.name) != ARCHIVE_NAME_LENGTH or not path.name.startswith(NAME_PREFIX):
        return None
    try:
        return float(calendar.timegm(time.strptime(path.name[len(NAME_PREFIX):-len(SUFFIX)], "%Y%m%dT%H%M%SZ")))
    except ValueError:
        return None


def prune(settings: Settings, keep: int | None = None, *, now: float | None = None) -> list[Path]:
    """Apply the retention to ``<state>/backups/`` (the archives named
    ``crowdpref-YYYYmmddTHHMMSSZ.tar.gz``, so an archive put there by hand, or written elsewhere
    with ``--to``, stays): delete every archive older than ``settings.backup_retention_days``
    (by the time in its name), so a withdrawal is gone from the backups after that period, and
    with ``keep`` all but the newest ``keep``; returns those deleted. ``keep`` < 1 is refused: a
    scheduled backup never deletes the one it just wrote."""
    if keep is not None and keep < 1:
        raise BackupError(f"keep={keep}: keep at least 1 archive (the newest)")
    folder = settings.state_dir / BACKUPS_DIR
    dated = sorted((stamp, p) for p in folder.glob(f"{NAME_PREFIX}*{SUFFIX}")
                   if (stamp := _archive_time(p)) is not None and p.is_file())
    oldest = (time.time() if now is None else now) - settings.backup_retention_days * 86400
    deleted = [p for stamp, p in dated if stamp < oldest]
    if keep is not None:
        deleted += [p for _, p in dated[:-keep] if p not in deleted]
    for path in deleted:
        path.unlink(missing_ok=True)
    return sorted(deleted)
