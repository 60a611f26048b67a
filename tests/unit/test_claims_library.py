"""Claims of library module docstrings that no other test checked.

- crowdpref/pseudonyms.py: participant keys are salted with a per-study secret in the run
  folder's ``private/`` - stable across reruns, different between studies, and not the hash of
  the (guessable) username; the salt file is owner-only and never shown.
- crowdpref/recruitment.py: a ``participants: simulated`` study talks to the FAKE Prolific,
  never to the real one (not even with a real token set), so a simulation cannot reach people.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

from crowdpref.config import parse_study
from crowdpref.ids import stable_id
from crowdpref.pseudonyms import SALT_FILE, Pseudonyms
from crowdpref.recruitment import prolific_client, prolific_target
from crowdpref.settings import load_settings


def test_participant_keys_are_stable_across_reruns_and_differ_between_studies(tmp_path):
    first = Pseudonyms(tmp_path / "study-a" / "private")
    rerun = Pseudonyms(tmp_path / "study-a" / "private")  # a rerun reads the same salt
    other = Pseudonyms(tmp_path / "study-b" / "private")
    user = "demo-s1-0001"
    assert first.participant_key(user) == rerun.participant_key(user)
    assert first.response_id("q_1", user) == rerun.response_id("q_1", user)
    assert first.participant_key(user) != other.participant_key(user)
    assert first.participant_key(user) != first.participant_key("demo-s1-0002")


def test_a_key_is_not_the_hash_of_the_guessable_username(tmp_path):
    ids = Pseudonyms(tmp_path / "private")
    user = "demo-s1-0001"
    unsalted = {stable_id("p_", user, length=12), stable_id("p_", "", user, length=12)}
    assert ids.participant_key(user) not in unsalted
    salt = json.loads((tmp_path / "private" / SALT_FILE).read_text())["salt"]
    assert ids.participant_key(user) == stable_id("p_", salt, user, length=12)  # the salt is what keys it


def test_the_salt_is_owner_only_and_never_shown(tmp_path):
    ids = Pseudonyms(tmp_path / "private")
    path = tmp_path / "private" / SALT_FILE
    salt = json.loads(path.read_text())["salt"]
    assert len(salt) >= 16
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert salt not in repr(ids) + str(ids)


def _settings(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CROWDPREF_SETTINGS", raising=False)
    return load_settings(home=tmp_path / "home", prolific_token="real-prolific-token-claims",
                         prolific_api_url="https://api.prolific.com/api/v1/", fake_prolific_port=6921)


def test_a_simulated_study_talks_to_the_fake_prolific_never_the_real_one(tmp_path, monkeypatch):
    settings = _settings(tmp_path, monkeypatch)
    simulated = parse_study({"name": "sim", "participants": "simulated"})
    target = prolific_target(simulated, settings)
    assert target is not None and target.fake
    assert target.api_url.startswith(f"http://{settings.host}:6921/")
    assert "prolific.com" not in target.api_url + target.app_url
    assert target.token != "real-prolific-token-claims"  # the real token is never sent to the fake
    client = prolific_client(simulated, settings)
    try:
        assert client.base_url == target.api_url and "prolific.com" not in client.base_url
    finally:
        client.close()
    # the same settings with a real Prolific study do reach the real API, with the real token
    real = parse_study({"name": "real", "participants": "prolific", "prolific": {"enabled": True}})
    real_target = prolific_target(real, settings)
    assert real_target is not None and not real_target.fake
    assert real_target.api_url == "https://api.prolific.com/api/v1/" and real_target.token == "real-prolific-token-claims"
    assert "real-prolific-token-claims" not in repr(real_target)
