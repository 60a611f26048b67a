"""The backup flow (flows/backup.py, the `backup` deployment's entrypoint) under the Prefect test
harness: its first run makes the repository (<state>/backups/restic) and the 0600 password file,
takes one snapshot of the state folder, and applies the retention: this state folder's snapshots
older than backup_retention_days are forgotten (restic forget --prune), newer ones and another
state folder's stay."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time

import pytest

from crowdpref.settings import load_settings
from flows.backup import backup as backup_flow
from services import backup

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not shutil.which("restic"), reason="restic not installed (services/bootstrap.sh)")]


def test_the_backup_flow_takes_a_snapshot_and_forgets_those_older_than_the_retention(crowdpref_home, tmp_path):
    crowdpref_home.mkdir(parents=True)
    db = sqlite3.connect(crowdpref_home / "store.sqlite")
    db.execute("CREATE TABLE t (v TEXT)")
    db.close()
    settings = load_settings()
    password = backup.password_file(settings)  # the default: <state>/backup-password
    assert password == settings.state_dir / "backup-password"
    password.write_text("the repository's password\n")
    env = {**os.environ, "RESTIC_REPOSITORY": backup.repository(settings), "RESTIC_PASSWORD_FILE": str(password),
           "RESTIC_CACHE_DIR": str(tmp_path / "cache")}
    assert backup.repository(settings) == str(settings.state_dir / "backups" / "restic")
    subprocess.run(["restic", "init"], env=env, check=True, capture_output=True)

    # older snapshots, as earlier runs left them (restic backup --time): this state folder's 31 and
    # 29 days old, another state folder's 31 days old, in the same repository
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "crowdpref-backup.json").write_text("{}")
    mine = backup.state_tag(settings)
    for days, tag in ((31, mine), (29, mine), (31, "crowdpref-state-other")):
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() - days * 86400))
        done = subprocess.run(["restic", "backup", "-q", "--time", stamp, "--tag", "crowdpref", "--tag", tag, "."],
                              cwd=tmp_path / "old", env=env, check=False, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr

    snapshot = backup_flow()
    out = subprocess.run(["restic", "snapshots", "--json"], env=env, check=True, capture_output=True, text=True)
    listed = sorted((round((time.time() - _epoch(s["time"])) / 86400), s["tags"][-1], s["short_id"])
                    for s in json.loads(out.stdout))
    # the new one, then the retention: this state folder's 31-day-old snapshot is gone
    assert [(days, tag) for days, tag, _ in listed] == [(0, mine), (29, mine), (31, "crowdpref-state-other")]
    assert listed[0][2] == snapshot


def _epoch(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp[:19] + "+00:00" if stamp.endswith("Z") else stamp[:26] + stamp[-6:]).timestamp()
