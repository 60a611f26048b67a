"""The dress rehearsal (``crowdpref preflight --rehearse N``) on the session's real embedded Argilla
(its Redis and rq worker), the fake Prolific and the portal over real HTTP: 3 simulated
participants through entry, onboarding, Argilla and Finish; the report's lines, capacity.json,
and nothing of the rehearsal left behind (Argilla users, workspaces and datasets, store rows,
run folder) - also after a rehearsal killed half-way (its leftovers go first)."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import httpx
import pytest
import yaml

from crowdpref.portal.app import create_app
from crowdpref.portal.service import Portal
from crowdpref.preflight import rehearsal
from crowdpref.preflight.host import read_capacity
from crowdpref.settings import load_settings
from crowdpref.simulation.prolific_server import FakeProlific
from crowdpref.store import open_store
from tests.browser.test_token_sign_in import _share_argilla_key as share_signing_key
from tests.conftest import free_port
from tests.portal_server import PortalThread
from tests.unit.test_portal_onboarding import ONBOARDING

pytestmark = pytest.mark.integration


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _argilla_names(api_url: str, key: str) -> tuple[set[str], set[str], list[str]]:
    headers = {"X-Argilla-Api-Key": key}
    users = {u["username"] for u in httpx.get(f"{api_url}/api/v1/users", headers=headers).json()["items"]}
    workspaces = {w["name"] for w in httpx.get(f"{api_url}/api/v1/me/workspaces", headers=headers).json()["items"]}
    datasets = [d["name"] for d in httpx.get(f"{api_url}/api/v1/me/datasets", headers=headers).json()["items"]]
    return users, workspaces, datasets


def test_rehearsal_reports_measures_and_leaves_nothing(study_env: Path, argilla_server, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch, unique: str) -> None:
    from crowdpref.cli.preflight import _rq_workers

    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({
        "name": f"r{unique}", "seed": 3, "participants": "simulated",
        "questions": {"categories": ["empathy", "ethics"], "per_category": 2},
        "study1": {"responses_per_question": 2, "questions_per_participant": 2, "pool_size": 2,
                   "checks": {"count": 1, "on_fail": "exclude"},
                   "onboarding": ONBOARDING},
        "study2": {"pairs_per_participant": 4},
        "crowd": {"arrive_via": "prolific"},
    }))
    portal_log = _Lines()
    logger = logging.getLogger("crowdpref.portal")
    logger.addHandler(portal_log)
    monkeypatch.setattr(logger, "level", logging.INFO)
    with FakeProlific(retry_delay_s=0.1) as fake:
        monkeypatch.setenv("CROWDPREF_FAKE_PROLIFIC_PORT", str(fake.port))
        port = free_port()
        monkeypatch.setenv("CROWDPREF_PORTAL_PORT", str(port))
        # no Caddy in front here: the portal and Argilla at their own addresses (these clients are no
        # browsers, so the stack's one origin is not needed)
        monkeypatch.setenv("CROWDPREF_PORTAL_URL", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("CROWDPREF_ARGILLA_PUBLIC_URL", os.environ["CROWDPREF_ARGILLA_URL"])
        settings = load_settings()
        share_signing_key(argilla_server, settings)  # what the portal mints participants' sessions with
        store = open_store(settings)
        # a rehearsal killed half-way: its config, run folder and store rows
        stale = "r-rehearsal-2601010000"
        store.set_meta(f"study-config:{stale}", "x")
        store.collection(stale, "study1", ["q1"], copies=1, per_participant=1, seed=1, username_prefix=f"{stale}-s1")
        (settings.runs_dir / stale).mkdir(parents=True)
        with PortalThread(create_app(Portal(settings, store), argilla_webhook=True), port=settings.portal_port):
            deadline = time.monotonic() + 20
            while not any("Argilla webhook registered" in line for line in portal_log.lines):
                assert time.monotonic() < deadline, portal_log.lines
                time.sleep(0.1)
            readers = rehearsal.Readers(lambda: list(portal_log.lines), lambda: _rq_workers(argilla_server.settings))
            outcome = rehearsal.rehearse(settings, study, 3, readers, rates=(1.0, 2.0, 4.0))
        store.close()
    logger.removeHandler(portal_log)

    lines = {c.name: c for c in outcome.checks}
    shown = "\n".join(c.line() for c in outcome.checks)
    assert stale in lines["rehearsal: leftovers removed"].detail, shown
    for name in ("rehearsal: participants through the stack", "rehearsal: counts in the store and in Argilla",
                 "rehearsal: webhooks heard", "rehearsal: Argilla worker jobs", "rehearsal: removed"):
        assert lines[name].status == "OK", shown
    assert "3 claimed, 3 complete, 3 finished" in lines["rehearsal: counts in the store and in Argilla"].detail
    assert lines["rehearsal: time to the first item"].status in ("OK", "WARN")
    assert [w.rate for w in outcome.waves] == [1.0, 2.0, 4.0] and all(len(w.times) == 1 for w in outcome.waves)

    capacity = read_capacity(settings.state_dir)
    assert capacity is not None and capacity["participants"] == 3
    assert [r["per_s"] for r in capacity["rates"]] == [1.0, 2.0, 4.0]
    assert all(r["p95_s"] is not None for r in capacity["rates"])
    assert capacity["arrivals_per_s"] == rehearsal.capacity(outcome.waves)
    assert json.loads((settings.state_dir / "capacity.json").read_text())["measured_at"] > 0

    # nothing of the rehearsal (nor of the stale one) is left
    users, workspaces, datasets = _argilla_names(argilla_server.api_url, argilla_server.owner_api_key)
    assert not [n for n in users | workspaces if "-rehearsal-" in n]
    assert not [n for n in datasets if "-rehearsal-" in n]
    store = open_store(settings)
    try:
        for name in (outcome.name, stale):
            assert store.find_collection(name, "study1") is None
            assert store.get_meta(f"study-config:{name}") is None
            assert not (settings.runs_dir / name).exists() and not (settings.runs_dir / f"{name}.yaml").exists()
    finally:
        store.close()


def test_delete_study_on_postgresql(postgres_url: str) -> None:
    """Store.delete_study in one transaction on PostgreSQL too (its foreign keys are enforced)."""
    from crowdpref.store import Store
    from tests.unit.test_preflight_rehearsal import check_delete_study

    store = Store(postgres_url)
    try:
        check_delete_study(store)
    finally:
        store.close()
