"""Paced places (crowdpref.launch_pacing): the pure decision of how many places a published
Prolific study has open now, and its application by the recruitment code against the
contract-checked fake Prolific (real client, real SQLite store, no Argilla): places rise in
steps as people arrive and claim, never past the budget cap, the step resumes after a restart
(a new store and client read Prolific's total and the event log), and Prolific's zero-places
flip (AWAITING REVIEW while the study is full) does not stall it. Also: the config's launch
section, ``max_concurrent_submissions`` on the fake, what ``crowdpref progress`` and
``crowdpref validate`` show."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from crowdpref.config import LaunchConfig
from crowdpref.launch_pacing import (
    ARRIVING_FOR_S,
    DEFAULT_ARRIVALS_PER_S,
    Pace,
    PlacesNow,
    first_places,
    launch_report,
    may_raise,
    pace_warnings,
    places_now,
    resolve_pace,
)
from crowdpref.prolific import ProlificClient
from crowdpref.recruitment import ensure_prolific_study, study_payload, sync_prolific
from crowdpref.simulation.prolific_server import ApiError, FakeProlific
from crowdpref.store import Store, default_url
from tests.unit.test_recruitment import _config, _study1

PACED = Pace("paced", step=10, step_seconds=10.0, arrivals_per_s=1.0, measured=False)


# --- the decision, alone --------------------------------------------------------------------------------
def test_places_open_in_steps_up_to_the_places_needed_and_never_past_the_cap() -> None:
    def total(**now: Any) -> int:
        return places_now(PlacesNow(**{"since_last_raise_s": 60.0, **now}), PACED).total

    assert first_places(35, 100, PACED) == 10  # the first publish: one step
    assert total(needed=35, cap=100, open=10, taken=10) == 20  # the step was taken: the next one
    assert total(needed=35, cap=100, open=10, taken=4) == 14  # 6 open places nobody took: 4 more
    assert total(needed=35, cap=100, open=10, taken=10, arriving=7) == 13  # 7 people still arriving
    assert total(needed=35, cap=100, open=10, taken=0) == 10  # a whole step in flight: wait
    assert total(needed=35, cap=100, open=30, taken=30) == 35  # the last step: up to the places needed
    assert total(needed=35, cap=32, open=30, taken=30) == 32  # ... never past the cap
    assert total(needed=35, cap=20, open=30, taken=30) == 30  # a cap below what is open lowers nothing
    assert total(needed=5, cap=100, open=10, taken=10) == 10  # the work needs no more: nothing
    waiting = places_now(PlacesNow(needed=35, cap=100, open=10, taken=10, since_last_raise_s=4.0), PACED)
    assert waiting.raise_to is None and "in 6 s" in waiting.next_step  # at most one step per step_seconds
    capped = places_now(PlacesNow(needed=35, cap=30, open=30, taken=30, since_last_raise_s=60.0), PACED)
    assert capped.raise_to is None and capped.short == 5 and "budget cap 30" in capped.reason
    every = Pace("all", step=10, step_seconds=10.0, arrivals_per_s=1.0, measured=False)
    assert places_now(PlacesNow(needed=35, cap=100, open=10, taken=0, since_last_raise_s=0.0), every).total == 35
    assert first_places(35, 100, every) == 35


def test_the_pace_comes_from_the_measured_capacity_or_the_default() -> None:
    from crowdpref.preflight.host import DEFAULT_CAPACITY_PER_S

    assert DEFAULT_ARRIVALS_PER_S == DEFAULT_CAPACITY_PER_S  # the pre-flight states the same default
    default = LaunchConfig()
    assert default.mode == "paced"  # the default launch is paced
    assert (resolve_pace(default, None).step, resolve_pace(default, None).measured) == (2, False)
    assert resolve_pace(default, {"arrivals_per_s": 2.5}).step == 5
    assert resolve_pace(default, {"arrivals_per_s": 2.5}).measured
    assert resolve_pace(default, {"arrivals_per_s": 0.05}).step == 1  # at least one place
    assert resolve_pace(default, {"arrivals_per_s": "x"}).step == 2  # unreadable: the default
    assert resolve_pace(LaunchConfig(step=4, step_seconds=30), {"arrivals_per_s": 2.5}).step == 4


def test_a_full_study_is_raised_but_one_a_person_stopped_is_not() -> None:
    assert may_raise("ACTIVE", 10, 3) and may_raise("PAUSED", 10, 3)
    assert may_raise("AWAITING REVIEW", 10, 10)  # the zero-places flip
    assert may_raise("COMPLETED", 10, 10)  # full and closed: more places make it active again
    assert not may_raise("COMPLETED", 10, 4)  # stopped with places open: it stays stopped


def test_validate_warns_about_a_pace_the_server_cannot_take() -> None:
    fast = LaunchConfig(step=50)
    assert pace_warnings("study1", fast, {"arrivals_per_s": 1.0})[0].startswith(
        "prolific.study1.launch.step: 50 places per 2 s is 25 arrivals/s, above this server's capacity 1/s "
        "(measured): set step to 2 or less")
    assert pace_warnings("study1", fast, {"arrivals_per_s": 25.0}) == []
    assert "mode: all opens 40 places at once" in pace_warnings("study2", LaunchConfig(mode="all"), None,
                                                                first_places=40)[0]
    assert "pool_size" in pace_warnings("study1", LaunchConfig(), None, pool_size=1)[0]
    assert pace_warnings("study1", LaunchConfig(), None, first_places=40, pool_size=10) == []


# --- on the fake Prolific ---------------------------------------------------------------------------------
class Clock:
    """The store's clock: the real time (the fake's ``started_at`` is real) plus a shift."""

    def __init__(self) -> None:
        self.shift = 0.0

    def __call__(self) -> float:
        return time.time() + self.shift


def _open(tmp_path: Path, clock: Clock) -> Store:
    return Store(default_url(tmp_path), clock=clock)


def _client(fake: FakeProlific) -> ProlificClient:
    return ProlificClient(fake.base_url, fake.token, backoff_s=0.0, sleep=lambda _s: None)


def _claim(fake: FakeProlific, collection: Any, study_id: str, prepared: bool = True) -> Any:
    """A person takes a place and claims their work; ``prepared``: and their work is in Argilla
    (records logged), as once the portal prepared it."""
    arrival = fake.arrive(study_id)
    claimed = collection.store.claim(collection.info, arrival["participant_id"], "prolific")
    if prepared:
        collection.store.records_logged(collection.info.id, claimed.participant.id)
    return claimed


def test_a_paced_launch_rises_in_steps_through_the_flip_to_the_cap_and_resumes_after_a_restart(
        tmp_path: Path) -> None:
    from tests.conftest import isolated_settings

    settings = isolated_settings(tmp_path / "home", portal_url="https://portal.example.org",
                                 prolific_workspace_id="ws-1")
    config = _config(study1={"max_places": 3, "launch": {"step": 1}})  # 4 batches of 3 slots, cap 3
    pace = resolve_pace(config.prolific.study1.launch, None)
    clock = Clock()
    with FakeProlific(page_size=2) as fake:
        store, client = _open(tmp_path, clock), _client(fake)
        collection = _study1(config, store, tmp_path)
        platform = ensure_prolific_study(collection, config, settings, client, pace=pace)
        study = fake.studies[platform.external_id]
        assert study["total_available_places"] == 1 == platform.places  # the first step only
        fake.arrive(platform.external_id)  # took the place, not in the portal yet: arriving
        assert study["status"] == "AWAITING REVIEW"  # no place open: Prolific's flip
        clock.shift += 11
        assert sync_prolific(collection, config, client, pace=pace).places_raised_to is None  # still arriving
        clock.shift += ARRIVING_FOR_S  # they never came: no longer arriving (Prolific times them out)
        report = sync_prolific(collection, config, client, pace=pace)
        assert report.places_raised_to == 2 and study["status"] == "ACTIVE"  # raised through the flip
        client.close()
        store.close()

        # a restart: a new store and client, nothing kept in memory
        store, client = _open(tmp_path, clock), _client(fake)
        collection = _study1(config, store, tmp_path)
        _claim(fake, collection, platform.external_id)  # the step is taken and claimed at once ...
        assert sync_prolific(collection, config, client, pace=pace).places_raised_to is None  # ... step_seconds
        clock.shift += 11  # after the last raise (read from the event log)
        report = sync_prolific(collection, config, client, pace=pace)
        assert report.places_raised_to == 3 and (report.places_capped_at, report.places_short) == (3, 1)
        _claim(fake, collection, platform.external_id)
        clock.shift += 11
        report = sync_prolific(collection, config, client, pace=pace)
        assert report.places_raised_to is None and report.places_capped_at == 3
        assert study["total_available_places"] == 3  # never past max_places
        raises = [json.loads(e["detail"]) for e in store.events(collection.info.id, kinds=["places_raised"])]
        assert [(r["before"], r["places"]) for r in raises] == [(1, 2), (2, 3)]
        assert raises[0]["status"] == "AWAITING REVIEW"
        client.close()
        store.close()


def test_the_fake_caps_concurrent_submissions_and_takes_the_setting_after_publishing(tmp_path: Path) -> None:
    from tests.conftest import isolated_settings

    settings = isolated_settings(tmp_path / "home", portal_url="https://portal.example.org")
    config = _config(study1={"launch": {"max_concurrent_submissions": 2}})
    body = study_payload(config, "study1", settings, "C1234567", places=4)
    assert body["submissions_config"] == {"max_submissions_per_participant": 1, "max_concurrent_submissions": 2}
    with FakeProlific() as fake, _client(fake) as client:
        study = client.create_study(body)
        client.publish_study(study.id)
        first = fake.arrive(study.id)
        fake.arrive(study.id)
        with pytest.raises(ApiError, match="max_concurrent_submissions"):
            fake.arrive(study.id)
        fake.complete(first["session_id"], "C1234567")  # awaiting review: no longer in progress
        fake.arrive(study.id)
        reply = httpx.patch(f"{fake.base_url}studies/{study.id}/", headers={"Authorization": f"Token {fake.token}"},
                            json={"submissions_config": {"max_concurrent_submissions": 3}})
        assert reply.status_code == 200, reply.text  # allowed once published (the API document)
        fake.arrive(study.id)  # the fourth place, under the new limit


def test_progress_and_validate_show_the_pacing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from crowdpref.cli import app, common
    from crowdpref.progress import study_progress
    from tests.conftest import isolated_settings

    settings = isolated_settings(tmp_path / "home", portal_url="https://portal.example.org",
                                 prolific_workspace_id="ws-1")
    config = _config(study1={"launch": {"step": 2}})
    pace = resolve_pace(config.prolific.study1.launch, None)
    with FakeProlific() as fake, _client(fake) as client:
        store = _open(tmp_path, Clock())
        collection = _study1(config, store, tmp_path)
        ensure_prolific_study(collection, config, settings, client, pace=pace)
        pacing = study_progress(config, settings, store=store).parts[0].pacing
        assert pacing is not None and (pacing.open, pacing.needed, pacing.cap) == (2, 4, 8)
        assert pacing.pace.startswith("paced: 2 places per step") and pacing.next_step.startswith("+2 as")
        store.close()
    rows, warnings = launch_report(config, {"arrivals_per_s": 0.1})
    # (no question count in this config: no first places in the row)
    assert rows[0] == ("Launch, study 1",
                       "paced: 2 places per step, at least 2 s apart (capacity 0.1 arrival/s, measured)")
    assert warnings and warnings[0].startswith("prolific.study1.launch.step: 2 places per 2 s")
    # the command reads the capacity from <state>/capacity.json
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CROWDPREF_HOME", str(tmp_path / "cli-home"))
    monkeypatch.setattr(common, "_SETTINGS", None)
    (tmp_path / "paced.yaml").write_text(yaml.safe_dump({
        "name": "paced", "participants": "prolific", "questions": {"per_category": 1},
        "prolific": {"enabled": True, "study1": {"launch": {"step": 2}}}}))
    state = common._settings().state_dir
    state.mkdir(parents=True, exist_ok=True)
    (state / "capacity.json").write_text(json.dumps({"arrivals_per_s": 0.1}))
    result = CliRunner().invoke(app, ["validate", "paced.yaml"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "capacity 0.1 arrival/s, measured" in result.output
    assert "prolific.study1.launch.step: 2 places per 2 s is 1 arrivals/s" in result.output
