"""services/backup.py on SQLite state folders, without Argilla or Prefect: the archive (one
file, 0600, manifest first with every member's size and sha256, nothing under its name until it
is whole), an online copy that holds only committed data, restore bringing back exactly the
backed-up state, a damaged archive refused in one line with nothing changed, a restore refused
while a service runs, and pruning. The PostgreSQL branch and the mid-study round trip on a real
Argilla are tests/integration/test_backup.py."""

from __future__ import annotations

import calendar

import gzip
import hashlib
import io
import json
import os
import sqlite3
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from crowdpref.errors import ServiceError
from crowdpref.settings import load_settings
from services import backup
from services.process import ProcessManager, ServiceSpec
from tests.conftest import REPO, cli_environment


@pytest.fixture()
def settings(tmp_path, monkeypatch):
    monkeypatch.delenv("CROWDPREF_SETTINGS", raising=False)
    monkeypatch.delenv("CROWDPREF_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    return load_settings(home=tmp_path / "state", argilla_url=None, argilla_api_key=None, database_url=None)


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
    """Every file under ``folder`` (backups/ aside) by its sha256, SQLite files by their rows."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and not rel.startswith("backups/"):
            if path.suffix in (".sqlite", ".db"):
                out[rel] = json.dumps(_rows(path))
            elif not rel.endswith(("-wal", "-shm")):
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _members(archive: Path) -> list[str]:
    with tarfile.open(archive, "r:gz") as tar:
        return tar.getnames()


def test_backup_writes_one_private_archive_with_a_manifest_of_every_file(settings):
    _state(settings)
    seen = []
    result = backup.create(settings, progress=lambda what, done, total: seen.append((what, done, total)),
                           now=1_800_000_000)
    assert result.path == settings.state_dir / "backups" / "crowdpref-20270115T080000Z.tar.gz"
    assert stat.S_IMODE(result.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(result.path.parent.stat().st_mode) == 0o700
    assert list(result.path.parent.iterdir()) == [result.path]  # no staging or partial file left
    assert result.databases == {"store": "sqlite", "argilla": "sqlite"}
    members = _members(result.path)
    assert members[0] == "manifest.json"
    assert set(members[1:]) == {
        "databases/store.sqlite", "databases/argilla.sqlite", "secrets/argilla-owner.json",
        "secrets/argilla-auth-secret", "studies/demo/questions.parquet",
        "studies/demo/private/participant-key-salt.json"}
    manifest = backup.read_manifest(result.path)
    assert manifest["created_at"] == "2027-01-15T08:00:00Z"
    with tarfile.open(result.path, "r:gz") as tar:
        for entry in manifest["files"]:
            data = tar.extractfile(entry["path"]).read()
            assert (len(data), hashlib.sha256(data).hexdigest()) == (entry["size"], entry["sha256"])
        assert tar.getmember("secrets/argilla-owner.json").mode & 0o077 == 0
    assert "sqlite:///" not in json.dumps(manifest)  # no database URL (they may hold passwords)
    assert seen[-1][1] == seen[-1][2] and {what for what, _, _ in seen} >= {"writing the archive"}


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
    try:
        result = backup.create(settings, tmp_path / "online.tar.gz")
    finally:
        writer.close()
    assert during_argilla == ["database is locked", 3]
    with tarfile.open(result.path, "r:gz") as tar:
        tar.extract("databases/store.sqlite", tmp_path / "x", filter="data")
    copy = tmp_path / "x" / "databases" / "store.sqlite"
    assert _rows(copy) == ["claim-1", "claim-2", "claim-3"]
    db = sqlite3.connect(copy)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()
    _sqlite(settings.state_dir / "store.sqlite", ["after"])  # released: writes go on


def test_restore_brings_back_exactly_the_backed_up_state(settings):
    _state(settings)
    before = _snapshot(settings.state_dir)
    archive = backup.create(settings).path
    # the study goes on: more claims and answers, a new run file, a new key, a deleted salt
    _sqlite(settings.state_dir / "store.sqlite", ["claim-3"])
    _sqlite(settings.argilla_home / "argilla.db", ["answer-2"])
    (settings.runs_dir / "demo" / "responses.parquet").write_bytes(b"later")
    (settings.secrets_dir / "argilla-auth-secret").write_text("s2")
    (settings.runs_dir / "demo" / "private" / "participant-key-salt.json").unlink()
    assert _snapshot(settings.state_dir) != before

    result = backup.restore(settings, archive)
    assert _snapshot(settings.state_dir) == before
    assert result.databases == {"store": "sqlite", "argilla": "sqlite"}
    assert _rows(settings.state_dir / "store.sqlite") == ["claim-1", "claim-2"]
    for path in (settings.state_dir / "store.sqlite", settings.argilla_home / "argilla.db",
                 *settings.secrets_dir.iterdir()):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(settings.secrets_dir.stat().st_mode) == 0o700
    assert not [p for p in settings.state_dir.iterdir() if p.name.startswith(".restore")]


def _damaged_archives(archive: Path, tmp_path: Path) -> dict[str, Path]:
    raw = archive.read_bytes()
    out = {}
    out["truncated"] = tmp_path / "truncated.tar.gz"
    out["truncated"].write_bytes(raw[: len(raw) // 2])
    out["not an archive"] = tmp_path / "garbage.tar.gz"
    out["not an archive"].write_bytes(b"this is not a backup\n" * 50)
    # a valid .tar.gz whose run file changed after the manifest was written (bit rot, tampering)
    tampered = io.BytesIO()
    with tarfile.open(archive, "r:gz") as src, tarfile.open(fileobj=tampered, mode="w:gz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read()
            if member.name == "studies/demo/questions.parquet":
                data = b"PAR2" + data[4:]
            dst.addfile(member, io.BytesIO(data))
    out["hash mismatch"] = tmp_path / "tampered.tar.gz"
    out["hash mismatch"].write_bytes(tampered.getvalue())
    # a member left out
    short = io.BytesIO()
    with tarfile.open(archive, "r:gz") as src, tarfile.open(fileobj=short, mode="w:gz") as dst:
        for member in src.getmembers():
            if member.name != "secrets/argilla-auth-secret":
                dst.addfile(member, src.extractfile(member))
    out["member missing"] = tmp_path / "short.tar.gz"
    out["member missing"].write_bytes(short.getvalue())
    # no manifest first
    plain = io.BytesIO()
    with tarfile.open(fileobj=plain, mode="w:gz") as dst:
        info = tarfile.TarInfo("studies/x")
        dst.addfile(info, io.BytesIO(b""))
    out["no manifest"] = tmp_path / "plain.tar.gz"
    out["no manifest"].write_bytes(plain.getvalue())
    # a gzip stream cut inside the last member's data, its header intact
    plain_tar = gzip.decompress(raw)
    with tarfile.open(fileobj=io.BytesIO(plain_tar)) as tar:
        last = tar.getmembers()[-1]
    assert last.size > 1
    out["cut gzip"] = tmp_path / "cut.tar.gz"
    out["cut gzip"].write_bytes(gzip.compress(plain_tar[: last.offset_data + last.size // 2]))
    return out


@pytest.mark.parametrize("damage", ["truncated", "not an archive", "hash mismatch", "member missing",
                                    "no manifest", "cut gzip"])
def test_a_damaged_archive_is_refused_in_one_line_and_nothing_changes(settings, tmp_path, damage):
    _state(settings)
    archive = backup.create(settings, tmp_path / "good.tar.gz").path
    _sqlite(settings.state_dir / "store.sqlite", ["claim-3"])  # the state now differs from the archive
    before = _snapshot(settings.state_dir)
    bad = _damaged_archives(archive, tmp_path)[damage]
    with pytest.raises(backup.BackupError) as err:
        backup.restore(settings, bad)
    message = str(err.value)
    assert "\n" not in message and str(bad) in message and "nothing was changed" in message, message
    assert _snapshot(settings.state_dir) == before
    assert not [p for p in settings.state_dir.iterdir() if p.name.startswith(".restore")]


def test_restore_refuses_while_a_service_runs_and_changes_nothing(settings, tmp_path):
    _state(settings)
    archive = backup.create(settings, tmp_path / "a.tar.gz").path
    _sqlite(settings.state_dir / "store.sqlite", ["claim-3"])
    manager = ProcessManager(settings.state_dir)
    manager.start(ServiceSpec("participant-portal", ["sleep", "60"], dict(os.environ), health=lambda: True),
                  settings.host)
    try:
        before = _snapshot(settings.state_dir)
        with pytest.raises(ServiceError) as err:
            backup.restore(settings, archive)
        message = str(err.value)
        assert "\n" not in message and "participant-portal" in message and "crowdpref down" in message
        assert _snapshot(settings.state_dir) == before
    finally:
        manager.stop("participant-portal", timeout_s=5)
    # the database server may run (it receives PostgreSQL dumps): it does not block a restore
    manager.start(ServiceSpec("postgres", ["sleep", "60"], dict(os.environ), health=lambda: True), settings.host)
    try:
        backup.restore(settings, archive)
    finally:
        manager.stop("postgres", timeout_s=5)
    assert _rows(settings.state_dir / "store.sqlite") == ["claim-1", "claim-2"]


def test_a_failed_backup_leaves_nothing_under_the_archive_name(settings, tmp_path):
    _state(settings)
    target = tmp_path / "out" / "b.tar.gz"

    seen_while_writing = []

    def interrupted(what, done, total):
        if what == "writing the archive" and done:
            seen_while_writing.append(target.exists())  # a kill now would leave this file
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        backup.create(settings, target, progress=interrupted)
    assert seen_while_writing == [False]
    assert list(target.parent.iterdir()) == []


def test_backup_never_writes_over_an_existing_file(settings, tmp_path):
    _state(settings)
    target = tmp_path / "taken.tar.gz"
    target.write_bytes(b"an older backup")
    with pytest.raises(backup.BackupError) as err:
        backup.create(settings, target)
    assert "\n" not in str(err.value) and "exists already" in str(err.value)
    assert target.read_bytes() == b"an older backup"


def test_restore_refuses_an_archive_of_another_store_kind(settings, tmp_path, monkeypatch):
    _state(settings)
    archive = backup.create(settings, tmp_path / "a.tar.gz").path
    before = _snapshot(settings.state_dir)
    elsewhere = load_settings(home=settings.state_dir, argilla_url=None, argilla_api_key=None,
                              database_url="postgresql+psycopg://u:hunter2@127.0.0.1:1/db")
    with pytest.raises(backup.BackupError) as err:
        backup.restore(elsewhere, archive)
    message = str(err.value)
    assert "\n" not in message and "sqlite store" in message and "nothing was changed" in message
    assert "hunter2" not in message
    assert _snapshot(settings.state_dir) == before


def test_a_remote_argilla_is_not_in_the_backup(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    remote = load_settings(home=tmp_path / "state", argilla_url="https://argilla.example.org",
                           argilla_api_key="k", database_url=None)
    _sqlite(remote.state_dir / "store.sqlite", ["claim-1"])
    _sqlite(remote.argilla_home / "argilla.db", ["stale local file"])
    result = backup.create(remote, tmp_path / "r.tar.gz")
    assert result.databases == {"store": "sqlite", "argilla": "external"}
    assert "databases/argilla.sqlite" not in _members(result.path)


def test_prune_keeps_the_newest_scheduled_archives_and_any_named_by_hand(settings):
    folder = settings.state_dir / "backups"
    folder.mkdir(parents=True)
    names = [f"crowdpref-2026112{d}T030000Z.tar.gz" for d in range(5)]
    for name in [*names, "crowdpref-before-upgrade.tar.gz"]:
        (folder / name).write_bytes(b"x")
    deleted = backup.prune(settings, keep=2, now=calendar.timegm((2026, 11, 25, 0, 0, 0)))
    assert sorted(p.name for p in deleted) == names[:3]
    assert sorted(p.name for p in folder.iterdir()) == sorted([*names[3:], "crowdpref-before-upgrade.tar.gz"])
    with pytest.raises(backup.BackupError):
        backup.prune(settings, keep=0)


def test_every_backup_run_deletes_the_archives_older_than_the_retention(settings):
    """The retention the withdrawal docs promise: after backup_retention_days (30 by default)
    no archive of <state>/backups/ holds a withdrawn participant's data."""
    assert settings.backup_retention_days == 30
    folder = settings.state_dir / "backups"
    folder.mkdir(parents=True)
    now = calendar.timegm((2026, 11, 28, 12, 0, 0))
    old, edge, fresh = ("crowdpref-20261028T115959Z.tar.gz", "crowdpref-20261029T120000Z.tar.gz",
                        "crowdpref-20261128T060000Z.tar.gz")
    for name in (old, edge, fresh, "crowdpref-before-upgrade.tar.gz"):
        (folder / name).write_bytes(b"x")
    assert [p.name for p in backup.prune(settings, now=now)] == [old]  # 30 days and 1 s old
    assert sorted(p.name for p in folder.iterdir()) == sorted([edge, fresh, "crowdpref-before-upgrade.tar.gz"])
    assert [p.name for p in backup.prune(settings, keep=28, now=now + 86400)] == [edge]
    shorter = settings.model_copy(update={"backup_retention_days": 1})
    assert [p.name for p in backup.prune(shorter, now=now + 86400)] == [fresh]  # 30 h old: the newest goes too


def test_cli_restore_of_a_damaged_archive_is_one_line_with_exit_1(tmp_path):
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"not gzip")
    home = tmp_path / "state"
    result = subprocess.run([sys.executable, "-m", "crowdpref.cli", "restore", str(bad)], cwd=REPO,
                            env=cli_environment(home), capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "nothing was changed" in lines[0], result.stderr
    assert not home.exists() or not [p for p in home.iterdir() if p.name.startswith(".restore")]


def test_cli_backup_writes_the_archive_and_says_where(tmp_path):
    home = tmp_path / "state"
    _sqlite(home / "store.sqlite", ["claim-1"])
    target = tmp_path / "cli.tar.gz"
    result = subprocess.run([sys.executable, "-m", "crowdpref.cli", "backup", "--to", str(target)], cwd=REPO,
                            env=cli_environment(home), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"backup written: {target}" in result.stdout and "mode 0600" in result.stdout
    assert backup.read_manifest(target)["databases"]["store"]["kind"] == "sqlite"
