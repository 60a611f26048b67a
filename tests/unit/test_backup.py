"""services/backup.py on SQLite state folders with Debian's restic, without Argilla or Prefect:
what a snapshot holds (staged online: committed rows only, the store's writes held while
Argilla's database is copied), restore bringing back exactly the backed-up state, a wrong
password, a missing repository or password file, an unknown snapshot, a damaged repository or
restic missing refused in one line with nothing changed, a restore refused while a service runs,
and the first `crowdpref backup` making the repository and its 0600 password file. The retention
(restic forget) is tests/integration/test_backup_flow.py; the PostgreSQL branch and the
mid-study round trip on a real Argilla are tests/integration/test_backup.py.

The tests share one restic repository (``restic init`` takes seconds): each state folder's
snapshots carry its own tag, as several servers' would in one repository."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from crowdpref.cli import app, common
from crowdpref.errors import ServiceError
from crowdpref.settings import load_settings
from services import backup
from services.process import ProcessManager, ServiceSpec
from tests.conftest import REPO, cli_environment

pytestmark = pytest.mark.skipif(not shutil.which("restic"), reason="restic not installed "
                                "(services/bootstrap.sh installs Debian's restic)")


def _restic(repo: Path, password: Path, *args: str, cwd: Path | None = None) -> str:
    env = {**os.environ, "RESTIC_REPOSITORY": str(repo), "RESTIC_PASSWORD_FILE": str(password),
           "RESTIC_CACHE_DIR": str(repo.parent / "cache")}
    return subprocess.run(["restic", *args], env=env, cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> tuple[Path, Path]:
    """One restic repository (and its password file) for the module's tests."""
    folder = tmp_path_factory.mktemp("restic")
    password = folder / "password"
    password.write_text("a test password\n")
    os.chmod(password, 0o600)
    _restic(folder / "repo", password, "init")
    return folder / "repo", password


def _settings_for(home: Path, repo: tuple[Path, Path], **more: object):
    values: dict[str, object] = {"argilla_url": None, "argilla_api_key": None, "database_url": None,
                                 "backup_repository": str(repo[0]), "backup_password_file": repo[1]}
    return load_settings(home=home, **{**values, **more})


@pytest.fixture()
def settings(tmp_path, monkeypatch, repo):
    monkeypatch.delenv("CROWDPREF_SETTINGS", raising=False)
    monkeypatch.delenv("CROWDPREF_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    return _settings_for(tmp_path / "state", repo)


def _sqlite(path: Path, rows: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE IF NOT EXISTS t (v TEXT)")
        db.executemany("INSERT INTO t VALUES (?)", [(r,) for r in rows])
    db.close()


def _rows(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return [r[0] for r in db.execute("SELECT v FROM t ORDER BY rowid")]
    finally:
        db.close()


def _state(settings) -> None:
    """A state folder as a study leaves it: the store, Argilla's database, secrets, a run folder."""
    state = settings.state_dir
    _sqlite(state / "store.sqlite", ["claim-1", "claim-2"])
    _sqlite(settings.argilla_home / "argilla.db", ["answer-1"])
    settings.secrets_dir.mkdir(parents=True)
    for name, value in (("argilla-owner.json", '{"api_key": "k1"}'), ("argilla-auth-secret", "s1")):
        (settings.secrets_dir / name).write_text(value)
        os.chmod(settings.secrets_dir / name, 0o600)
    run = settings.runs_dir / "demo"
    (run / "private").mkdir(parents=True)
    (run / "questions.parquet").write_bytes(b"PAR1" * 100)
    (run / "private" / "participant-key-salt.json").write_text('{"salt": "abc"}')


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` by its sha256, SQLite files by their rows (the lock file and
    backups/, restic's cache, aside)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and rel != backup.LOCK and not rel.startswith("backups/"):
            if path.suffix in (".sqlite", ".db"):
                out[rel] = json.dumps(_rows(path))
            elif not rel.endswith(("-wal", "-shm")):
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _leftovers(state: Path) -> list[str]:
    return [p.name for p in state.iterdir() if p.name.startswith((".restore", backup.STAGING))]


@pytest.fixture(scope="module")
def backed_up(tmp_path_factory, repo):
    """A state folder with one snapshot of it (the module's tests that only restore share it)."""
    settings = _settings_for(tmp_path_factory.mktemp("backed-up") / "state", repo)
    _state(settings)
    return settings, backup.create(settings)


def test_a_snapshot_holds_the_staged_state_and_restore_brings_back_exactly_that(settings, repo, backed_up):
    _state(settings)
    before = _snapshot(settings.state_dir)
    seen = []
    taken = backup.create(settings, progress=lambda what, done, total: seen.append(what))
    assert taken.databases == {"store": "sqlite", "argilla": "sqlite"}
    assert taken.files == 6 and not taken.initialised and taken.repository == str(repo[0])
    assert _leftovers(settings.state_dir) == []  # the staging folder is gone
    assert {"copying the store database", "saving the snapshot"} <= set(seen)
    listed = [json.loads(line) for line in _restic(*repo, "ls", "--json", taken.snapshot).splitlines()]
    snapshot, nodes = listed[0], {n["path"]: n for n in listed[1:] if n.get("type") == "file"}
    assert set(snapshot["tags"]) == {"crowdpref", backup.state_tag(settings)}
    assert set(nodes) == {
        "/crowdpref-backup.json", "/databases/store.sqlite", "/databases/argilla.sqlite",
        "/secrets/argilla-owner.json", "/secrets/argilla-auth-secret", "/studies/demo/questions.parquet",
        "/studies/demo/private/participant-key-salt.json"}
    assert nodes["/secrets/argilla-owner.json"]["mode"] & 0o077 == 0
    # the list marks this state folder's snapshots (another state folder shares the repository)
    mine = {s.short_id: s.mine for s in backup.snapshots(settings)}
    assert mine[taken.snapshot] is True and mine[backed_up[1].snapshot] is False

    # the study goes on: more claims and answers, a new run file, a new key, a deleted salt
    _sqlite(settings.state_dir / "store.sqlite", ["claim-3"])
    _sqlite(settings.argilla_home / "argilla.db", ["answer-2"])
    (settings.runs_dir / "demo" / "responses.parquet").write_bytes(b"later")
    (settings.secrets_dir / "argilla-auth-secret").write_text("s2")
    (settings.runs_dir / "demo" / "private" / "participant-key-salt.json").unlink()
    assert _snapshot(settings.state_dir) != before

    result = backup.restore(settings)  # latest: this state folder's
    assert result.snapshot == taken.snapshot and result.files == taken.files
    assert _snapshot(settings.state_dir) == before
    assert result.databases == {"store": "sqlite", "argilla": "sqlite"}
    assert _rows(settings.state_dir / "store.sqlite") == ["claim-1", "claim-2"]
    for path in (settings.state_dir / "store.sqlite", settings.argilla_home / "argilla.db",
                 *settings.secrets_dir.iterdir()):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(settings.secrets_dir.stat().st_mode) == 0o700
    assert _leftovers(settings.state_dir) == []


def test_the_online_copy_holds_committed_wal_rows_and_holds_store_writes_while_argilla_is_copied(
        settings, tmp_path, monkeypatch):
    _state(settings)
    writer = sqlite3.connect(settings.state_dir / "store.sqlite", isolation_level=None)
    writer.execute("INSERT INTO t VALUES ('claim-3')")  # committed, still in the WAL file only
    during_argilla = []
    dump = backup._dump

    def watched(part, url, staging):
        if part == "argilla":  # the store is copied: a store write now waits, a read goes on
            other = sqlite3.connect(settings.state_dir / "store.sqlite", timeout=0.2, isolation_level=None)
            try:
                other.execute("INSERT INTO t VALUES ('during')")
                during_argilla.append("written")
            except sqlite3.OperationalError as exc:
                during_argilla.append(str(exc))
            during_argilla.append(other.execute("SELECT count(*) FROM t").fetchone()[0])
            other.close()
        return dump(part, url, staging)

    monkeypatch.setattr(backup, "_dump", watched)
    staging = tmp_path / "staging"
    staging.mkdir()
    try:
        backup.stage(settings, staging)
    finally:
        writer.close()
    assert during_argilla == ["database is locked", 3]
    copy = staging / "databases" / "store.sqlite"
    assert _rows(copy) == ["claim-1", "claim-2", "claim-3"]
    description = json.loads((staging / "crowdpref-backup.json").read_text())
    assert description["databases"]["store"] == {"kind": "sqlite", "member": "databases/store.sqlite"}
    assert "sqlite:///" not in json.dumps(description)  # no database URL (they may hold passwords)
    db = sqlite3.connect(copy)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()
    _sqlite(settings.state_dir / "store.sqlite", ["after"])  # released: writes go on


def _tree_packs(repository: Path, password: Path) -> set[str]:
    """The pack files of ``repository`` that hold only folder trees (from its index)."""
    packs: set[str] = set()
    for index in _restic(repository, password, "--no-cache", "list", "index").split():
        for pack in json.loads(_restic(repository, password, "--no-cache", "cat", "index", index))["packs"]:
            if all(blob["type"] == "tree" for blob in pack["blobs"]):
                packs.add(pack["id"])
    assert packs, "no pack of folder trees in the repository"
    return packs


def _damage(repository: Path, only: set[str] | None = None) -> None:
    """Flip every 16th byte of every pack file, so every blob in it (at least 32 bytes: nonce and
    MAC) is hit wherever restic put it: what a failing disk or a bad copy does. (One byte in the
    middle of a pack may land in a blob no read touches, or in the pack's header, which reads
    through the index never open.)"""
    for pack in (repository / "data").rglob("*"):
        if pack.is_file() and (only is None or pack.name in only):
            os.chmod(pack, 0o600)
            raw = bytearray(pack.read_bytes())
            for at in range(7, len(raw), 16):
                raw[at] ^= 0xFF
            pack.write_bytes(bytes(raw))


@pytest.mark.parametrize("failure", ["wrong password", "no repository", "no password file", "unknown snapshot",
                                     "damaged repository", "not a crowdpref snapshot", "restic not installed"])
def test_a_failed_restore_says_why_in_one_line_and_changes_nothing(backed_up, repo, tmp_path, monkeypatch, failure):
    settings, taken = backed_up
    snapshot, expected = taken.snapshot, None
    if failure == "wrong password":
        other = tmp_path / "other-password"
        other.write_text("not the password\n")
        settings = settings.model_copy(update={"backup_password_file": other})
        expected = [str(other), "does not open the backup repository", "backup_password_file"]
    elif failure == "no repository":
        settings = settings.model_copy(update={"backup_repository": SecretStr(str(tmp_path / "nothing"))})
        expected = ["no restic repository at", str(tmp_path / "nothing"), "CROWDPREF_BACKUP_REPOSITORY"]
    elif failure == "no password file":
        settings = settings.model_copy(update={"backup_password_file": tmp_path / "lost"})
        expected = [str(tmp_path / "lost"), "no backup password file", "the copy you kept off the server"]
    elif failure == "unknown snapshot":
        snapshot, expected = "deadbeef", ["deadbeef", "no such snapshot", "crowdpref backup --list"]
    elif failure == "damaged repository":
        copy = tmp_path / "damaged"
        shutil.copytree(repo[0], copy)
        _damage(copy)
        settings = settings.model_copy(update={"backup_repository": SecretStr(str(copy))})
        expected = ["failed on", str(copy)]
    elif failure == "not a crowdpref snapshot":  # another program's snapshot in a shared repository
        (tmp_path / "other").mkdir()
        (tmp_path / "other" / "notes.txt").write_text("not a crowdpref backup")
        _restic(*repo, "backup", "-q", "--tag", "other-program", ".", cwd=tmp_path / "other")
        snapshot = json.loads(_restic(*repo, "snapshots", "--json", "--tag", "other-program"))[0]["short_id"]
        expected = [f"snapshot {snapshot}", "not a crowdpref backup"]
    else:
        monkeypatch.setenv("PATH", str(tmp_path))  # no restic there
        expected = ["restic not found", "apt-get install restic"]
    _sqlite(settings.state_dir / "store.sqlite", ["claim-3"])  # the state now differs from the snapshot
    before = _snapshot(settings.state_dir)
    with pytest.raises(backup.BackupError) as err:
        backup.restore(settings, snapshot)
    message = str(err.value)
    assert "\n" not in message and "nothing was changed" in message, message
    assert all(part in message for part in expected), message
    assert "a test password" not in message
    assert _snapshot(settings.state_dir) == before
    assert _leftovers(settings.state_dir) == []


def test_restore_refuses_while_a_service_runs_and_changes_nothing(backed_up):
    settings, taken = backed_up
    _sqlite(settings.state_dir / "store.sqlite", ["claim-3"])
    manager = ProcessManager(settings.state_dir)
    manager.start(ServiceSpec("participant-portal", ["sleep", "60"], dict(os.environ), health=lambda: True),
                  settings.host)
    try:
        before = _snapshot(settings.state_dir)
        with pytest.raises(ServiceError) as err:
            backup.restore(settings, taken.snapshot)
        message = str(err.value)
        assert "\n" not in message and "participant-portal" in message and "crowdpref down" in message
        assert _snapshot(settings.state_dir) == before
    finally:
        manager.stop("participant-portal", timeout_s=5)
    # the database server may run (it receives PostgreSQL dumps): it does not block a restore
    manager.start(ServiceSpec("postgres", ["sleep", "60"], dict(os.environ), health=lambda: True), settings.host)
    try:
        backup.restore(settings, taken.snapshot)
    finally:
        manager.stop("postgres", timeout_s=5)
    assert _rows(settings.state_dir / "store.sqlite") == ["claim-1", "claim-2"]


def test_restore_refuses_a_snapshot_of_another_store_kind(backed_up, repo):
    settings, taken = backed_up
    before = _snapshot(settings.state_dir)
    elsewhere = _settings_for(settings.state_dir, repo, database_url="postgresql+psycopg://u:hunter2@127.0.0.1:1/db")
    with pytest.raises(backup.BackupError) as err:
        backup.restore(elsewhere, taken.snapshot)
    message = str(err.value)
    assert "\n" not in message and "sqlite store" in message and "nothing was changed" in message
    assert "hunter2" not in message
    assert _snapshot(settings.state_dir) == before
    assert _leftovers(settings.state_dir) == []


def test_a_remote_argilla_is_not_in_the_backup(tmp_path, monkeypatch, repo):
    monkeypatch.chdir(tmp_path)
    remote = _settings_for(tmp_path / "state", repo, argilla_url="https://argilla.example.org", argilla_api_key="k")
    _sqlite(remote.state_dir / "store.sqlite", ["claim-1"])
    _sqlite(remote.argilla_home / "argilla.db", ["stale local file"])
    staging = tmp_path / "staging"
    staging.mkdir()
    assert backup.stage(remote, staging) == {"store": "sqlite", "argilla": "external"}
    assert sorted(p.name for p in (staging / "databases").iterdir()) == ["store.sqlite"]


def test_the_repository_url_and_password_never_reach_argv_or_messages(settings):
    restic = backup._Restic(settings.model_copy(update={
        "backup_repository": SecretStr("rest:https://backup:s3cret@127.0.0.1:1/crowdpref")}))
    env = backup._restic_env(restic.settings, restic.repo, restic.password)
    assert env["RESTIC_REPOSITORY"].endswith("s3cret@127.0.0.1:1/crowdpref")
    assert env["RESTIC_PASSWORD_FILE"] == str(settings.backup_password_file)
    assert not any(name.startswith("CROWDPREF_") for name in env)
    assert restic.where == "rest:https://backup:***@127.0.0.1:1/crowdpref"
    failed = restic._fail("restic snapshots", "Fatal: unable to open config file: connection refused\n"
                          "Is there a repository at the following location?\n" + restic.repo, 1)
    assert "s3cret" not in str(failed) and "cannot be reached" in str(failed)


def test_cli_first_backup_makes_the_repository_and_a_private_password_file(tmp_path, monkeypatch):
    home = tmp_path / "state"
    for name in os.environ:
        if name.startswith(("CROWDPREF_", "ARGILLA_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CROWDPREF_HOME", str(home))
    monkeypatch.setattr(common, "_SETTINGS", None)
    monkeypatch.chdir(tmp_path)
    _sqlite(home / "store.sqlite", ["claim-1"])
    result = CliRunner().invoke(app, ["backup"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output + result.stderr
    password = home / "backup-password"
    assert "backup snapshot" in result.stdout and str(home / "backups" / "restic") in result.stdout
    assert str(password) in result.stderr and "OFF this server" in result.stderr
    assert stat.S_IMODE(password.stat().st_mode) == 0o600 and len(password.read_text().strip()) >= 32
    assert password.read_text().strip() not in result.stdout + result.stderr
    listed = CliRunner().invoke(app, ["backup", "--list"], env={"COLUMNS": "300"})
    assert listed.exit_code == 0 and listed.stdout.startswith("* ") and "1 snapshot(s)" in listed.stdout
    # the password file lost: the next backup refuses instead of making a new password
    password.unlink()
    again = CliRunner().invoke(app, ["backup"], env={"COLUMNS": "300"})
    assert again.exit_code == 1 and "a restic repository exists there" in again.stderr, again.output + again.stderr
    assert len(again.stderr.strip().splitlines()) == 1 and not password.exists()


def test_cli_restore_without_a_repository_is_one_line_with_exit_1(tmp_path):
    home = tmp_path / "state"
    (home / "backup-password").parent.mkdir(parents=True)
    (home / "backup-password").write_text("pw\n")
    result = subprocess.run([sys.executable, "-m", "crowdpref.cli", "restore"], check=False, cwd=REPO,
                            env=cli_environment(home), capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "nothing was changed" in lines[0], result.stderr
    assert "no restic repository" in lines[0]
    assert _leftovers(home) == [] and not (home / "backups" / "restic").exists()


def test_the_preflight_reads_the_last_backup_back_from_the_real_repository(backed_up, repo, tmp_path):
    """``crowdpref preflight``'s backup line on a real restic snapshot: found, recent, readable
    (its description decrypted and every database it names listed); a damaged repository is not."""
    from crowdpref.cli.preflight import _backups

    settings, taken = backed_up
    state = _backups(settings)
    assert (state.snapshot, state.readable, state.problem) == (taken.snapshot, True, None)
    assert abs(time.time() - state.latest_at) < 600
    copy = tmp_path / "damaged"
    shutil.copytree(repo[0], copy)
    _damage(copy)
    damaged = _backups(_settings_for(settings.state_dir, (copy, repo[1])))
    assert damaged.snapshot == taken.snapshot and damaged.readable is False and damaged.problem
    # only the folder trees damaged: the local cache (filled by the reads above) still holds them,
    # and a read-back through it would call this repository sound
    trees = tmp_path / "trees-damaged"
    shutil.copytree(repo[0], trees)
    _damage(trees, only=_tree_packs(trees, repo[1]))
    damaged = _backups(_settings_for(settings.state_dir, (trees, repo[1])))
    assert damaged.readable is False and "does not read back" in damaged.problem, damaged
