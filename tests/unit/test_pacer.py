"""The launch pacer (crowdpref.pacer) on the contract-checked fake Prolific (real client, real
SQLite store, no Argilla): places open in steps as people take and claim them, with no
collection run in between; a launch left in ``mode: all`` or whose config is gone is not
touched; Prolific down is one line per launch and the next look carries on; the thread opens
steps by itself."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from crowdpref import pacer as pacer_module
from crowdpref.launch_pacing import resolve_pace
from crowdpref.pacer import Pacer
from crowdpref.prolific import ProlificClient
from crowdpref.recruitment import ensure_prolific_study
from crowdpref.simulation.prolific_server import FakeProlific
from crowdpref.store import Store, default_url
from tests.unit.test_launch_pacing import Clock, _claim
from tests.unit.test_recruitment import _config, _study1


def _launch(tmp_path: Path, fake: FakeProlific, clock: Clock, **launch: Any) -> tuple[Any, Any, Any, Any]:
    from tests.conftest import isolated_settings

    settings = isolated_settings(tmp_path / "home", portal_url="https://portal.example.org",
                                 prolific_workspace_id="ws-1")
    config = _config(study1={"max_places": 4, "launch": launch})  # 4 batches, cap 4
    store = Store(default_url(tmp_path), clock=clock)
    client = ProlificClient(fake.base_url, fake.token, backoff_s=0.0, sleep=lambda _s: None)
    collection = _study1(config, store, tmp_path)
    platform = ensure_prolific_study(collection, config, settings, client,
                                     pace=resolve_pace(config.prolific.study1.launch, None))
    return settings, config, collection, (client, platform.external_id)


def _pacer(settings: Any, config: Any, collection: Any, client: Any, **options: Any) -> Pacer:
    return Pacer(collection.store, settings, config_of=lambda study, key: config,
                 collection_of=lambda study, key: collection, client_of=lambda _config: client, **options)


def test_steps_open_as_people_claim_with_no_collection_run_and_never_past_the_cap(tmp_path: Path) -> None:
    clock = Clock()
    with FakeProlific() as fake:
        settings, config, collection, (client, study_id) = _launch(tmp_path, fake, clock, step=1, step_seconds=10)
        study = fake.studies[study_id]
        pacer = _pacer(settings, config, collection, client)
        assert study["total_available_places"] == 1
        [look] = pacer.look(force=True)
        assert not look.raised and look.under_way  # the first step is open, nobody took it yet
        claimed = _claim(fake, collection, study_id, prepared=False)  # admitted, workspace not ready yet
        clock.shift += 11
        assert not pacer.look(force=True)[0].raised  # still in flight: not in their work yet
        collection.store.records_logged(collection.info.id, claimed.participant.id)  # now it is
        assert pacer.look(force=True)[0].raised
        places = [study["total_available_places"]]
        for _ in range(3):
            _claim(fake, collection, study_id)  # the step is taken and claimed ...
            assert not pacer.look(force=True)[0].raised  # ... but step_seconds have not passed
            clock.shift += 11
            pacer.look(force=True)
            places.append(study["total_available_places"])
        assert places == [2, 3, 4, 4]  # one step per claim, up to the cap, never past it
        last = pacer.look(force=True)[0]
        assert not last.under_way and last.problem is None
        client.close()
        collection.store.close()


def test_only_paced_launches_with_a_config_are_looked_at_and_only_when_due(tmp_path: Path) -> None:
    clock = Clock()
    with FakeProlific() as fake:
        settings, config, collection, (client, study_id) = _launch(tmp_path, fake, clock, mode="all")
        assert fake.studies[study_id]["total_available_places"] == 4
        assert _pacer(settings, config, collection, client).look(force=True) == []  # mode: all: the runs' business
        gone = Pacer(collection.store, settings, config_of=lambda study, key: None,
                     collection_of=lambda study, key: pytest.fail("opened"), client_of=lambda c: pytest.fail("client"))
        assert gone.look(force=True) == []  # its config file is gone: skipped
        client.close()
        collection.store.close()

    with FakeProlific() as fake:
        settings, config, collection, (client, study_id) = _launch(tmp_path / "paced", fake, clock, step=1)
        now = [100.0]
        pacer = _pacer(settings, config, collection, client, look_every_s=5, idle_look_s=60, clock=lambda: now[0])
        assert len(pacer.look()) == 1  # due at first
        assert pacer.look() == []  # not again within look_every_s
        now[0] += 5
        assert len(pacer.look()) == 1  # under way: every look_every_s
        client.close()
        collection.store.close()


def test_prolific_down_is_one_line_per_launch_and_the_next_look_goes_on(tmp_path: Path, caplog) -> None:
    clock = Clock()
    with FakeProlific() as fake:
        settings, config, collection, (client, study_id) = _launch(tmp_path, fake, clock, step=1)
        down = ProlificClient("http://127.0.0.1:9/api/v1/", "a-secret-token", backoff_s=0.0, sleep=lambda _s: None,
                              timeout_s=1.0)
        current = [down]
        pacer = Pacer(collection.store, settings, config_of=lambda study, key: config,
                      collection_of=lambda study, key: collection, client_of=lambda _c: current[0])
        with caplog.at_level(logging.WARNING, logger="crowdpref.pacer"):
            first, second = pacer.look(force=True), pacer.look(force=True)
        assert first[0].problem and "\n" not in first[0].problem and second[0].problem == first[0].problem
        said = [r.getMessage() for r in caplog.records if r.name == "crowdpref.pacer"]
        assert len(said) == 1 and "a-secret-token" not in said[0]  # said once, no token
        now = time.monotonic()
        assert pacer._next[collection.info.id, study_id] - now < 10  # busy or unreachable: looked at again soon
        current[0] = client  # Prolific is back
        _claim(fake, collection, study_id)
        clock.shift += 11
        assert pacer.look(force=True)[0].raised
        with fake.lock:  # the study deleted on Prolific (404): not a thing to ask every few seconds
            del fake.studies[study_id]
        gone = pacer.look(force=True)[0]
        assert "ProlificNotFound" in gone.problem and pacer._next[collection.info.id, study_id] - time.monotonic() > 30
        down.close()
        client.close()
        collection.store.close()


def test_the_thread_opens_the_next_step_by_itself(tmp_path: Path) -> None:
    clock = Clock()
    with FakeProlific() as fake:
        settings, config, collection, (client, study_id) = _launch(tmp_path, fake, clock, step=1, step_seconds=0.2)
        study = fake.studies[study_id]
        pacer = _pacer(settings, config, collection, client, look_every_s=0.05)
        pacer.start()
        try:
            for places in (2, 3):
                _claim(fake, collection, study_id)
                deadline = time.monotonic() + 10
                while study["total_available_places"] < places and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert study["total_available_places"] == places
        finally:
            pacer.stop()
        client.close()
        collection.store.close()



def test_the_portal_paces_a_launch_while_it_serves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The portal's app (as build_app makes it) runs the pacer: a person takes the first place and
    claims, and the portal opens the next one by itself; an app made without it does not."""
    import yaml
    from fastapi.testclient import TestClient

    from crowdpref.config import load_study
    from crowdpref.portal.app import create_app
    from crowdpref.portal.service import Portal
    from crowdpref.study1 import study1_collection
    from tests.conftest import isolated_settings
    from tests.unit.test_recruitment import NoArgilla, _questions

    monkeypatch.setattr(pacer_module, "LOOK_EVERY_S", 0.05)
    studies = tmp_path / "studies"
    studies.mkdir()
    config_file = studies / "recruit-test.yaml"
    data = _config(study1={"max_places": 4, "launch": {"step": 1, "step_seconds": 0.1}}).model_dump(mode="json",
                                                                                                      exclude_none=True)
    config_file.write_text(yaml.safe_dump(data))
    settings = isolated_settings(tmp_path / "home", portal_studies=studies, portal_url="https://portal.example.org",
                                 prolific_workspace_id="ws-1", prolific_token="t")
    store = Store(default_url(tmp_path))
    with FakeProlific() as fake:
        client = ProlificClient(fake.base_url, fake.token, backoff_s=0.0, sleep=lambda _s: None)

        def open_collection(path: Path, key: str) -> Any:
            return study1_collection(load_study(path), _questions(), NoArgilla(), tmp_path / "run", store)

        portal = Portal(settings, store, open_collection=open_collection, prolific_factory=lambda target: client)
        config, _ = portal.config("recruit-test", "study1")
        collection = portal.collection("recruit-test", "study1")
        platform = ensure_prolific_study(collection, config, settings, client,
                                         pace=resolve_pace(config.prolific.study1.launch, None))
        study = fake.studies[platform.external_id]
        with TestClient(create_app(portal)):  # no pacer: the places stay
            _claim(fake, collection, platform.external_id)
            time.sleep(0.5)
            assert study["total_available_places"] == 1
        with TestClient(create_app(portal, launch_pacer=True)):
            deadline = time.monotonic() + 10
            while study["total_available_places"] < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert study["total_available_places"] == 2
        client.close()
    store.close()


def test_a_launch_on_a_deleted_launchs_collection_id_is_looked_at_at_once(tmp_path: Path) -> None:
    """SQLite gives a deleted collection's id (a dress rehearsal's copy, removed) to the next
    collection made: the new launch must not inherit the old one's next look (60 s away here)."""
    clock = Clock()
    with FakeProlific() as fake:
        settings, config, collection, (client, first) = _launch(tmp_path, fake, clock, step=1)
        now, current = [100.0], {"collection": collection}
        pacer = Pacer(collection.store, settings, config_of=lambda study, key: config,
                      collection_of=lambda study, key: current["collection"], client_of=lambda _config: client,
                      look_every_s=5, idle_look_s=60, clock=lambda: now[0])
        with fake.lock:  # deleted on Prolific: a 404, looked at again only after idle_look_s
            del fake.studies[first]
        [gone] = pacer.look()
        assert gone.problem is not None
        old_store, old_id = collection.store, collection.info.id
        old_store.delete_study(collection.info.study)
        settings, config, collection, (client2, second) = _launch(tmp_path, fake, clock, step=1)
        current["collection"] = collection
        assert collection.info.id == old_id and second != first  # SQLite reused the id; a new Prolific study
        now[0] += 1
        [look] = pacer.look()  # due at once, though the same collection id waits 59 s more
        assert look.problem is None and look.under_way
        for closing in (client, client2, collection.store, old_store):
            closing.close()
