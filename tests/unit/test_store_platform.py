"""The study store's platform side (migration 0004): sessions found by their salted hash,
one platform study per collection, webhook deliveries de-duplicated, secrets created once,
completion codes stable per collection and different between them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crowdpref.store import Claimed, Store, StoreError, default_url
from crowdpref.store.results import Participation, StatusDelivery


def _store(tmp_path: Path) -> Store:
    return Store(default_url(tmp_path))


def _collection(store: Store, study: str = "s", key: str = "study1"):
    return store.collection(study, key, ["q1", "q2", "q3"], copies=1, per_participant=1, seed=0,
                            username_prefix=f"{study}-{key}")


def test_a_session_is_found_by_its_hash_and_never_stored_raw(tmp_path: Path) -> None:
    store = _store(tmp_path)
    info = _collection(store)
    claimed = store.claim(info, "5f1e2d3c4b5a69788796a5b4", "prolific")
    assert isinstance(claimed, Claimed)
    store.record_session(info.id, claimed.participant.id, "65aa00bb11cc22dd33ee44ff")
    assert store.participations(session_id="65aa00bb11cc22dd33ee44ff") == [
        Participation(info.id, claimed.participant.id, "active")]
    assert store.participations(session_id="000000000000000000000000") == []
    assert store.participations(key="5f1e2d3c4b5a69788796a5b4") == [Participation(info.id, claimed.participant.id,
                                                                                  "active")]
    assert [p.username for _, p in store.find_by_key("5f1e2d3c4b5a69788796a5b4")] == [claimed.participant.username]
    store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("store.sqlite*"))
    assert b"65aa00bb11cc22dd33ee44ff" not in raw and b"5f1e2d3c4b5a69788796a5b4" not in raw


def test_one_platform_study_per_collection(tmp_path: Path) -> None:
    store = _store(tmp_path)
    info = _collection(store)
    first = store.save_platform_study(info.id, "prolific", "study-a", "draft", group_id="g1", places=3)
    again = store.save_platform_study(info.id, "prolific", "study-a", "published", places=5)
    assert (first.state, again.state, again.group_id, again.places) == ("draft", "published", "g1", 5)
    with pytest.raises(StoreError, match="already published as prolific study study-a"):
        store.save_platform_study(info.id, "prolific", "study-b", "draft")
    assert store.platform_study(info.id).external_id == "study-a"


def test_a_webhook_delivery_is_recorded_once(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert store.record_delivery("evt-1", "prolific", "submission.status.change", "RETURNED: work released")
    assert not store.record_delivery("evt-1", "prolific", "submission.status.change", "again")
    assert [d["outcome"] for d in store.deliveries("prolific")] == ["RETURNED: work released"]


def test_a_status_change_is_matched_and_recorded_in_one_transaction(tmp_path: Path) -> None:
    """The webhook reply's one write: the participant its session (else the person's only
    active participation) names, the delivery - pending when the status frees a place - and one
    ``platform_status`` event; a duplicate writes nothing."""
    store = _store(tmp_path)
    info = _collection(store)
    claimed = store.claim(info, "5f1e2d3c4b5a69788796a5b4", "prolific")
    store.record_session(info.id, claimed.participant.id, "65aa00bb11cc22dd33ee44ff")
    writes: list[int] = []
    begin = store._write
    store._write = lambda *a, **k: (writes.append(1), begin(*a, **k))[1]  # type: ignore[method-assign]
    freeing = {"RETURNED"}
    found = Participation(info.id, claimed.participant.id, "active")
    returned = store.record_status_delivery("e1", "prolific", "submission.status.change", "RETURNED",
                                            session_id="65aa00bb11cc22dd33ee44ff", key=None, freeing=freeing)
    assert returned == StatusDelivery(found, "RETURNED: queued", True) and writes == [1]
    assert store.pending_deliveries("prolific") == ["e1"]
    # the same event again: nothing written
    assert store.record_status_delivery("e1", "prolific", "submission.status.change", "RETURNED",
                                        session_id="65aa00bb11cc22dd33ee44ff", key=None, freeing=freeing) is None
    # by the person's key (no session): their one active participation; a status that frees nothing
    awaiting = store.record_status_delivery("e2", "prolific", "submission.status.change", "AWAITING REVIEW",
                                            session_id=None, key="5f1e2d3c4b5a69788796a5b4", freeing=freeing)
    assert awaiting == StatusDelivery(found, "recorded AWAITING REVIEW", False)
    nobody = store.record_status_delivery("e3", "prolific", "submission.status.change", "RETURNED",
                                          session_id="000000000000000000000000", key="0" * 24, freeing=freeing)
    assert nobody == StatusDelivery(None, "unknown participant", False)
    assert [json.loads(e["detail"]) for e in store.events(info.id, kinds=["platform_status"])] == [
        {"status": "RETURNED"}, {"status": "AWAITING REVIEW"}]
    assert store.pending_deliveries("prolific") == ["e1"] and len(store.deliveries("prolific")) == 3
    # a status of any length fits the delivery's columns (outcome 200, platform status 30 characters)
    long = "RETURNED" + "X" * 300
    assert store.record_status_delivery("e4", "prolific", "submission.status.change", long,
                                        session_id="65aa00bb11cc22dd33ee44ff", key=None, freeing={long}).pending
    [row] = [d for d in store.deliveries("prolific") if d["event_id"] == "e4"]
    assert len(row["outcome"]) == 200 and len(row["platform_status"]) == 30


def test_secrets_are_created_once_and_survive_reopening(tmp_path: Path) -> None:
    store = _store(tmp_path)
    key = store.secret("portal_cookie_key")
    assert len(key) >= 40 and store.secret("portal_cookie_key") == key != store.secret("other")
    store.close()
    assert _store(tmp_path).secret("portal_cookie_key") == key


def test_completion_codes_are_stable_and_differ_between_collections(tmp_path: Path) -> None:
    store = _store(tmp_path)
    one, two, other = _collection(store), _collection(store, key="study2"), _collection(store, study="t")
    code = store.completion_code(one.id)
    assert code == store.completion_code(one.id) and len(code) == 8 and code.isalnum()
    assert len({code, store.completion_code(two.id), store.completion_code(other.id)}) == 3
    # not derivable from the study name alone: another store (another salt) gives another code
    assert Store(default_url(tmp_path / "elsewhere")).completion_code(
        _collection(Store(default_url(tmp_path / "elsewhere"))).id) != code
