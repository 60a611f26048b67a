"""The dress rehearsal's pure parts (crowdpref.preflight.rehearsal): the waves, the percentile,
the capacity and its record, the copy of the study; and Store.delete_study, which removes a
throw-away study's rows from every table that holds per-study rows and nothing of another
study's (SQLite here; PostgreSQL in tests/integration/test_preflight_rehearsal.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import func, select

from crowdpref.config import parse_study
from crowdpref.preflight import rehearsal
from crowdpref.preflight.rehearsal import Wave
from crowdpref.store import Claimed, Store
from crowdpref.store import schema as t


def test_waves_split_the_participants_over_the_rates() -> None:
    assert rehearsal.waves(20) == [(0.5, 5), (1.0, 5), (2.0, 5), (4.0, 5)]
    assert rehearsal.waves(10) == [(0.5, 2), (1.0, 2), (2.0, 3), (4.0, 3)]  # the remainder to the fastest
    assert rehearsal.waves(3) == [(0.5, 1), (1.0, 1), (2.0, 1)]
    assert rehearsal.waves(0) == []
    assert sum(k for _, k in rehearsal.waves(37)) == 37


def test_percentile_is_the_nearest_rank() -> None:
    values = [0.1 * i for i in range(1, 21)]  # 0.1 .. 2.0
    assert rehearsal.percentile(values, 50) == pytest.approx(1.0)
    assert rehearsal.percentile(values, 95) == pytest.approx(1.9)
    assert rehearsal.percentile([3.0], 95) == 3.0


def test_capacity_is_the_fastest_wave_under_the_limit_with_everyone_through() -> None:
    waves = [Wave(0.5, 2, [0.3, 0.4]), Wave(1.0, 2, [0.5, 0.9]), Wave(2.0, 2, [0.6, 1.4]), Wave(4.0, 2, [0.2, 0.3])]
    assert rehearsal.capacity(waves) == 4.0  # the highest rate whose p95 < 1 s
    waves[3].errors.append("sim-study1-0008: no place")  # someone did not get through: that rate does not count
    assert rehearsal.capacity(waves) == 1.0
    slow = [Wave(0.5, 1, [1.2]), Wave(1.0, 1, [1.0])]  # 1.0 s is not under 1 s
    assert rehearsal.capacity(slow) == 0.0
    assert rehearsal.capacity_check(slow).status == "WARN" and "below the lowest rate" in rehearsal.capacity_check(
        slow).detail
    assert rehearsal.capacity_check(waves).status == "OK"


def test_capacity_record_is_what_the_config_check_reads(tmp_path: Path) -> None:
    from crowdpref.preflight.host import read_capacity

    waves = [Wave(0.5, 1, [0.4]), Wave(1.0, 1, [], ["x: refused"])]
    path = rehearsal.write_capacity(tmp_path, rehearsal.capacity_record(waves, 2, 1_790_000_000.0))
    read = read_capacity(tmp_path)
    assert path == tmp_path / "capacity.json" and read is not None
    assert read["arrivals_per_s"] == 0.5 and read["measured_at"] == 1_790_000_000.0 and read["participants"] == 2
    assert read["rates"] == [{"per_s": 0.5, "participants": 1, "through": 1, "p50_s": 0.4, "p95_s": 0.4},
                             {"per_s": 1.0, "participants": 1, "through": 0, "p50_s": None, "p95_s": None}]


def test_rehearsal_names() -> None:
    name = rehearsal.rehearsal_name("a-very-long-study-name-that-goes-on-and-on", 1_790_000_000.0)
    assert len(name) <= 40 and rehearsal.is_rehearsal(name) and name.endswith("-rehearsal-2609211413")
    assert not rehearsal.is_rehearsal("demo") and not rehearsal.is_rehearsal("my-rehearsal-notes")
    with pytest.raises(ValueError, match="not a rehearsal"):
        rehearsal.remove(None, None, "demo")  # never removes a real study


def test_the_copy_is_simulated_on_the_fake_prolific_and_sized_for_n() -> None:
    data = yaml.safe_load((Path(__file__).parents[2] / "studies" / "demo.yaml").read_text())
    data["participants"], data["prolific"]["enabled"] = "prolific", True
    copy = rehearsal.rehearsal_study(data, "demo-rehearsal-2611281200", 20, 12)
    config = parse_study(copy)
    assert config.name == "demo-rehearsal-2611281200" and config.participants == "simulated"
    assert not config.prolific.enabled and config.crowd.arrive_via == "prolific" and not config.crowd.llm
    assert config.crowd.dropout_rate == config.crowd.careless_rate == config.crowd.never_start_rate == 0
    assert config.study1.username_prefix == "demo-rehearsal-2611281200-s1"
    assert config.study1.onboarding is not None  # the study's own onboarding is rehearsed
    assert config.prolific.study1.launch.mode == "all"  # the waves set the rates, not a paced launch
    plan = config.study1.batches(12)
    assert plan.participants >= 20  # 20 batches of 5 over 12 questions
    assert data["name"] == "demo" and data["participants"] == "prolific"  # the original is untouched


# --- Store.delete_study ---------------------------------------------------------------------------------
def populate(store: Store, study: str) -> list[int]:
    """One study with a row in every table that holds per-study rows; its collection ids."""
    cids = []
    for key in ("study1", "study2"):
        info = store.collection(study, key, ["q1", "q2", "q3"], copies=2, per_participant=2, seed=1,
                                username_prefix=f"{study}-{key}")
        cids.append(info.id)
        store.plan_pool(info, 2)
        claimed = store.claim(info, f"{study}-{key}-person", "simulated")
        assert isinstance(claimed, Claimed)
        store.claim(info, f"{study}-{key}-other", "simulated")
        store.begin_release(info.id, claimed.participant.id, "test")
        store.onboarding_start(info.id, store.key_hash(f"{study}-{key}-newcomer"), "simulated")
        store.save_platform_study(info.id, "prolific", f"ext-{study}-{key}", "published", places=3)
        store.set_meta(f"prolific-places-capped:{info.id}", "")
    store.record_invites(study, "study1", [(f"{abs(hash(study)) % 10**12:012d}", "x")])
    for meta in (f"study-config:{study}", f"prolific-group:{study}", f"filters:{study}"):
        store.set_meta(meta, "value")
    with store._write() as conn:  # a pending webhook acting on one of its participants
        conn.execute(t.webhook_deliveries.insert().values(event_id=f"ev-{study}", source="prolific", kind="k",
                                                          received_at=0.0, outcome="o", state="pending",
                                                          collection_id=cids[0], participant_id=1))
    return cids


def rows_of(store: Store, study: str, cids: list[int]) -> dict[str, int]:
    """Rows per table that belong to the study: by collection, by study name, or meta named after it."""
    counts: dict[str, int] = {}
    with store._read() as conn:
        for table in t.metadata.sorted_tables:
            where: Any = None
            if "collection_id" in table.c:
                where = table.c.collection_id.in_(cids)
            elif "participant_id" in table.c:
                where = table.c.participant_id.in_(select(t.participants.c.id).where(
                    t.participants.c.collection_id.in_(cids)))
            elif "study" in table.c:
                where = table.c.study == study
            elif table is t.collections:
                where = table.c.id.in_(cids)
            elif table is t.meta:
                where = table.c.name.in_([f"study-config:{study}", f"prolific-group:{study}", f"filters:{study}"]
                                         + [f"prolific-places-capped:{cid}" for cid in cids])
            if table is t.collections:
                where = table.c.id.in_(cids)
            if where is not None:
                counts[table.name] = int(conn.execute(select(func.count()).select_from(table).where(where)).scalar_one())
    return counts


def check_delete_study(store: Store) -> None:
    gone, kept = "demo-rehearsal-2611281200", "demo"
    gone_cids, kept_cids = populate(store, gone), populate(store, kept)
    before = rows_of(store, kept, kept_cids)
    every = rows_of(store, gone, gone_cids)
    assert all(every.values()), every  # the fixture puts a row in every per-study table
    removed = store.delete_study(gone)
    assert rows_of(store, gone, gone_cids) == dict.fromkeys(every, 0)
    assert sum(removed.values()) == sum(every.values())
    assert rows_of(store, kept, kept_cids) == before  # the other study keeps everything
    assert store.find_collection(kept, "study1") is not None and store.get_meta("key_salt")
    assert store.delete_study(gone) == dict.fromkeys(removed, 0)  # again: nothing to do


def test_delete_study_removes_every_row_of_the_study_and_nothing_else(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        check_delete_study(store)
    finally:
        store.close()
