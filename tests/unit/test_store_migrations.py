"""The study store's schema is versioned with Alembic: a store written by an older crowdpref is
upgraded in place when opened, with its data, and a killed provisioner's lease is taken over
at once on the same host (the column revision 0002 added)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, text

from crowdpref.store import Store


def _config() -> Config:
    import crowdpref.store

    config = Config()
    config.set_main_option("script_location", str(Path(crowdpref.store.__file__).parent / "migrations"))
    return config


def test_a_store_at_revision_0001_is_upgraded_in_place_with_its_data(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    engine = create_engine(url)
    config = _config()
    with engine.begin() as conn:  # what crowdpref 0001 created, with a study in it
        config.attributes["connection"] = conn
        command.upgrade(config, "0001")
        conn.execute(text("INSERT INTO collections (study, key, copies, per_participant, seed, counterbalance, "
                          "username_prefix, created_at) VALUES ('old', 'study1', 2, 1, 0, 0, 'old-s1', 0)"))
        conn.execute(text("INSERT INTO items (collection_id, item_id, ordinal) VALUES (1, 'q1', 0), (1, 'q2', 1)"))
        conn.execute(text("INSERT INTO accounts (collection_id, username, state, created_at) "
                          "VALUES (1, 'old-s1-0001', 'creating', 0)"))
        conn.execute(text("INSERT INTO credentials (account_id, password) VALUES (1, 'pw-of-old-account')"))
        conn.execute(text("INSERT INTO meta (name, value) VALUES ('key_salt', 'old-salt')"))
    engine.dispose()

    store = Store(url)
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0014"
        columns = {row[1] for row in conn.execute(text("PRAGMA table_info(accounts)"))}
        participant_columns = {row[1] for row in conn.execute(text("PRAGMA table_info(participants)"))}
        tables = {row[0] for row in conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'"))}
        delivery_columns = {row[1] for row in conn.execute(text("PRAGMA table_info(webhook_deliveries)"))}
    assert {"lease_owner", "dataset_id"} <= columns
    assert {"check_verdict", "checks_passed", "excluded_at"} <= participant_columns
    assert {"activity_seq", "read_seq", "read_at"} <= participant_columns  # 0006: monitoring by activity
    assert "withdrawn_at" in participant_columns  # 0007: withdrawals
    assert {"state", "collection_id", "participant_id", "platform_status"} <= delivery_columns  # 0008
    assert "signed_hash" in delivery_columns  # 0011: replays under a new event id
    assert "session_hash" in participant_columns and {"platform_studies", "webhook_deliveries"} <= tables
    assert "item_counts" in tables  # 0009: the per-item counts claims read
    assert "onboarding" in tables  # 0010: onboarding before the claim
    assert "invites" in tables  # 0012: the invitation links issued, each revocable alone
    assert "credentials" not in tables  # 0013: no participant password is kept (they are derived)
    info = store.find_collection("old", "study1")
    assert info is not None and store.items(info.id) == ["q1", "q2"]
    assert [a.username for a in store.accounts(info.id)] == ["old-s1-0001"]
    again = Store(url)
    assert store.key_hash("x") == again.key_hash("x")  # the old salt is kept: old keys still match
    again.close()
    claimed = store.claim(info, "someone", "invite")
    assert claimed.status == "claimed" and claimed.participant.items in (["q1"], ["q2"])
    store.close()  # (and its WAL checkpointed into the file)
    assert b"pw-of-old-account" not in (tmp_path / "old.sqlite").read_bytes()  # gone, not only unread


def test_a_killed_provisioners_lease_is_taken_over_at_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    store = Store(url)
    info = store.collection("s", "study1", ["q1"], copies=1, per_participant=1, seed=0, username_prefix="s-s1")
    store.plan_pool(info, 2)
    # another process leases an account and dies before finishing it
    child = subprocess.run([sys.executable, "-c", (
        "from crowdpref.store import Store; s = Store(%r); i = s.find_collection('s', 'study1'); "
        "print(s.lease_unbound_creating(i)[0].id)") % url], capture_output=True, text=True, check=True)
    dead_lease = int(child.stdout.strip())
    # a live holder's lease is respected; a dead one's is free now, long before it runs out
    mine = store.lease_unbound_creating(info, limit=5)
    assert [a.id for a in mine] == sorted({1, 2})  # both: the dead process's lease and the free one
    assert dead_lease in [a.id for a in mine]
    assert store.lease_unbound_creating(info, limit=5) == []  # held by this live process now
    later = Store(url, clock=lambda: time.time() + 121)
    assert len(later.lease_unbound_creating(info, limit=5)) == 2  # ... until the lease runs out
