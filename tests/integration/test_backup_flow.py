"""The backup flow (flows/backup.py, the `backup` deployment's entrypoint) under the Prefect test
harness: it writes one archive of the state folder, keeps the newest ``keep`` scheduled archives
and leaves an archive named by hand alone."""

from __future__ import annotations

import sqlite3
import stat

import pytest

from flows.backup import backup as backup_flow
from services import backup

pytestmark = pytest.mark.integration


def test_the_backup_flow_writes_an_archive_and_keeps_the_newest(crowdpref_home):
    crowdpref_home.mkdir(parents=True)
    db = sqlite3.connect(crowdpref_home / "store.sqlite")
    db.execute("CREATE TABLE t (v TEXT)")
    db.close()
    folder = crowdpref_home / "backups"
    folder.mkdir(parents=True)
    old = folder / "crowdpref-20200101T000000Z.tar.gz"
    mine = folder / "crowdpref-before-upgrade.tar.gz"
    old.write_bytes(b"old")
    mine.write_bytes(b"mine")
    path = backup_flow(keep=1)
    written = crowdpref_home.resolve() / "backups" / path.rsplit("/", 1)[-1]
    assert path == str(written) and written.exists()
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert backup.read_manifest(written)["databases"]["store"]["kind"] == "sqlite"
    assert sorted(p.name for p in folder.iterdir()) == sorted([written.name, mine.name])  # the old one pruned
