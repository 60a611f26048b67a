"""The minted Argilla session (crowdpref/portal/argilla_session.py) and the portal's *Start*
choosing it: Argilla's own JWT code (in the Argilla venv) accepts the token for the participant
with the shared key and refuses it with another key or once expired; the portal and Argilla on
one origin -> Start answers 200 with the session in the page (no Location, no-store, the token
in no log line); on two origins -> the work frame, which signs in with the password; a missing key file -> 503
whose log line names the file."""

from __future__ import annotations

import json
import logging
import re
import time

import pytest
from fastapi.testclient import TestClient

from crowdpref.errors import CrowdprefError
from crowdpref.portal import argilla_session
from crowdpref.portal.app import create_app
from crowdpref.portal.service import Portal
from tests.argilla_venv import ARGILLA_PYTHON, Snippet, run_forked
from tests.unit.test_portal_entry import _write, rig  # noqa: F401 - the fixture

FRONT = "http://study.test"
TOKEN_IN_PAGE = re.compile(r'"Bearer ([A-Za-z0-9_.-]+)"')


JWT_DECODE = ("import importlib, json, sys\n"
              # argilla-server reads ARGILLA_AUTH_SECRET_KEY into its settings, and JWT takes its key from
              # them, when imported: this process's import (tests/argilla_venv.py) had another key
              "from argilla_server.security import settings\n"
              "from argilla_server.security.authentication import jwt\n"
              "importlib.reload(settings); importlib.reload(jwt)\n"
              "try:\n    print(json.dumps(jwt.JWT.decode(sys.argv[1])))\nexcept Exception as e:\n"
              "    print(json.dumps({'refused': type(e).__name__}))")


def _argilla_decode(*cases: tuple[str, str]) -> list[dict]:
    """What argilla-server's ``JWT.decode`` makes of each ``(token, secret)``: the token with
    ``secret`` as its key (``ARGILLA_AUTH_SECRET_KEY``), each in a process of its own, all for
    one import of argilla-server (tests/argilla_venv.py)."""
    runs = run_forked([Snippet(JWT_DECODE, args=(token,), env={"ARGILLA_AUTH_SECRET_KEY": secret})
                       for token, secret in cases], preload="argilla_server.security.authentication.jwt",
                      env={"PATH": "/usr/bin:/bin", "ARGILLA_AUTH_SECRET_KEY": "t" * 64, "HF_HUB_OFFLINE": "1"},
                      timeout=120)
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    return [json.loads(run.stdout.strip().splitlines()[-1]) for run in runs]


@pytest.mark.skipif(not ARGILLA_PYTHON.exists(), reason="no Argilla venv (.venv-argilla): run make setup")
def test_argilla_accepts_the_minted_token_with_its_key_only():
    secret = "k" * 64
    now = time.time()
    token, expires = argilla_session.mint_token(secret, "p-0042", now=now)
    assert expires == int(now + argilla_session.TOKEN_LIFETIME_S)
    old, _ = argilla_session.mint_token(secret, "p-0042", now=time.time() - argilla_session.TOKEN_LIFETIME_S - 60)
    claims, other_key, expired = _argilla_decode((token, secret), (token, "other" * 10), (old, secret))
    assert claims["username"] == "p-0042" and claims["role"] == "annotator" and claims["exp"] == expires
    assert other_key == {"refused": "UnauthorizedError"}
    assert expired == {"refused": "UnauthorizedError"}


KNOWN_TOKEN = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJ1c2VybmFtZSI6InAtMDA0MiIsIm5hbWUiOiJwLTAwNDIiLCJyb2xlIjoiYW5ub3"
               "RhdG9yIiwiZXhwIjoxNzY3NjkzNjAwfQ.65WfsbObdr3q4wtVqoYKfp94syUx4fzAMC2FimBxSRc")
"""The token the hand-written HS256 encoder minted for ``p-0042`` with the key ``k`` * 64 at
2026-01-05 10:00 UTC (before PyJWT did it): header ``{"alg":"HS256","typ":"JWT"}``, the claims
username, name, role, exp in this order, compact JSON."""


def test_the_minted_token_is_byte_for_byte_the_hand_encoded_one():
    token, expires = argilla_session.mint_token("k" * 64, "p-0042", now=1_767_607_200.0)
    assert (token, expires) == (KNOWN_TOKEN, 1_767_693_600)
    assert argilla_session.username_of(token) == "p-0042"
    unicode, _ = argilla_session.mint_token("s\u00e9cret-" + "k" * 40, "caf\u00e9-\u2713", now=0, lifetime_s=60)
    assert argilla_session.username_of(unicode) == "caf\u00e9-\u2713"


def test_same_origin():
    assert argilla_session.same_origin("https://study.example.org", "https://Study.example.org:443/x")
    assert argilla_session.same_origin("http://127.0.0.1:8080/a", "http://127.0.0.1:8080")
    assert not argilla_session.same_origin("http://127.0.0.1:6910", "http://127.0.0.1:6900")
    assert not argilla_session.same_origin("http://study.example.org", "https://study.example.org")


def test_the_key_file_is_the_one_argilla_is_given(tmp_path):
    from services.argilla.service import auth_secret
    from tests.conftest import isolated_settings

    settings = isolated_settings(tmp_path / "home")
    created = auth_secret(settings)  # what services/argilla gives argilla-server
    assert argilla_session.load_secret(settings.secrets_dir) == created
    with pytest.raises(CrowdprefError, match=r"argilla-auth-secret cannot be read .* `crowdpref up`"):
        argilla_session.load_secret(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / argilla_session.SECRET_FILE).write_text("\n")
    with pytest.raises(CrowdprefError, match="is empty"):
        argilla_session.load_secret(tmp_path / "empty")


def _started(rig, settings, name: str):  # noqa: F811
    portal = Portal(settings, rig.store, open_collection=rig.portal._open_collection)
    _write(rig.studies, name, participants="invite")
    client = TestClient(create_app(portal), base_url=settings.portal_public_url)
    link = portal.invite_link(name, "study1", "inv-1").split(settings.portal_public_url, 1)[1]
    assert client.post(link, follow_redirects=False).status_code == 303
    return portal, client.post(f"/s/{name}/study1/start", follow_redirects=False)


def test_start_on_argillas_origin_hands_over_a_minted_session(rig, caplog):  # noqa: F811
    settings = rig.settings.model_copy(update={"portal_url": FRONT, "argilla_public_url": FRONT})
    settings.secrets_dir.mkdir(parents=True, exist_ok=True)
    (settings.secrets_dir / argilla_session.SECRET_FILE).write_text("s" * 64)
    caplog.set_level(logging.DEBUG)
    portal, start = _started(rig, settings, "same")
    assert argilla_session.same_origin(settings.portal_public_url, settings.argilla_participant_url)
    assert start.status_code == 200 and "location" not in start.headers
    assert start.headers["cache-control"] == "no-store" and start.headers["referrer-policy"] == "no-referrer"
    token = TOKEN_IN_PAGE.search(start.text).group(1)
    collection = portal.collection("same", "study1")
    [participant] = rig.store.participants(collection.info.id)
    assert f'"{argilla_session.TOKEN_KEY}"' in start.text and f'"{argilla_session.EXPIRATION_KEY}"' in start.text
    assert 'location.replace("/s/same/study1/work")' in start.text  # the work frame opens their item
    payload = token.split(".")[1]
    claims = json.loads(__import__("base64").urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert claims["username"] == participant.username
    assert f'"{claims["exp"] * 1000}"' in start.text  # the expiry as Argilla's frontend keeps it (ms)
    assert "<noscript><p>Argilla needs JavaScript" in start.text  # without scripts, the page says so
    password = collection.owner.passwords(participant.username)
    assert password not in start.text and "sign-in" not in start.text
    assert token not in caplog.text and "Bearer" not in caplog.text
    assert token not in repr(portal.sign_in("same", "study1", _cookie(portal, collection, participant)))


def _cookie(portal, collection, participant) -> str:
    return portal.cookies.dumps({"c": collection.info.id, "u": participant.username})


def test_the_laptop_stack_is_one_origin_too(rig):  # noqa: F811
    """No portal_url, no public URL: Caddy's plain-HTTP origin on the laptop, where Start hands
    over a minted session as on the public profile (there is no other way in)."""
    rig.settings.secrets_dir.mkdir(parents=True, exist_ok=True)
    (rig.settings.secrets_dir / argilla_session.SECRET_FILE).write_text("s" * 64)
    _, start = _started(rig, rig.settings, "laptop")
    assert start.status_code == 200 and TOKEN_IN_PAGE.search(start.text)


def test_a_missing_key_is_a_503_naming_the_file(rig, caplog):  # noqa: F811
    settings = rig.settings.model_copy(update={"portal_url": FRONT, "argilla_public_url": FRONT})
    caplog.set_level(logging.WARNING)
    _, start = _started(rig, settings, "nokey")
    assert start.status_code == 503 and "Bearer" not in start.text
    assert "503:" in caplog.text and "argilla-auth-secret cannot be read" in caplog.text


def test_an_argilla_crowdpref_did_not_start_needs_its_key_where_the_operator_is(tmp_path, monkeypatch):
    """``argilla_url`` set (not the embedded Argilla): without that Argilla's token-signing key in
    ``<state>/secrets/argilla-auth-secret`` every participant's Start would be a 503. The portal's
    start (services/portal.py's spec: ``up``, ``service install``) and ``crowdpref validate`` stop
    first, in one line naming the file and the fix, never the key. The embedded Argilla's key is
    made by ``up``: nothing to check."""
    from typer.testing import CliRunner

    from crowdpref.cli import app
    from crowdpref.errors import ConfigError
    from services import portal
    from tests.conftest import isolated_settings

    external = isolated_settings(tmp_path / "home", argilla_url="https://argilla.example.org", argilla_api_key="k")
    key = external.secrets_dir / argilla_session.SECRET_FILE
    with pytest.raises(ConfigError) as refused:
        portal.spec(external)
    message = str(refused.value)
    assert "\n" not in message and f"{key} is missing" in message and "Start refuses everyone (503)" in message
    assert f"put that server's ARGILLA_AUTH_SECRET_KEY in {key}" in message
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_text("\n")
    with pytest.raises(ConfigError, match=f"{key} is empty"):
        portal.spec(external)
    key.write_text("that-argillas-key\n")
    assert portal.spec(external).name == portal.NAME
    argilla_session.check_signing_key(isolated_settings(tmp_path / "embedded"))  # `up` makes it there

    study = tmp_path / "pilot.yaml"
    study.write_text("name: pilot\nparticipants: invite\n")
    monkeypatch.setenv("CROWDPREF_HOME", str(tmp_path / "cli"))
    monkeypatch.delenv("CROWDPREF_PORTAL_URL", raising=False)
    monkeypatch.delenv("CROWDPREF_ARGILLA_PUBLIC_URL", raising=False)
    monkeypatch.setenv("CROWDPREF_ARGILLA_URL", "https://argilla.example.org")
    monkeypatch.setenv("CROWDPREF_ARGILLA_API_KEY", "k")
    refused = CliRunner().invoke(app, ["validate", str(study)], env={"COLUMNS": "250"})
    assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1, refused.output
    assert f"{tmp_path / 'cli' / 'secrets' / argilla_session.SECRET_FILE} is missing" in refused.output
    (tmp_path / "cli" / "secrets").mkdir(parents=True, exist_ok=True)
    (tmp_path / "cli" / "secrets" / argilla_session.SECRET_FILE).write_text("that-argillas-key")
    passed = CliRunner().invoke(app, ["validate", str(study)], env={"COLUMNS": "250"})
    assert passed.exit_code == 0 and "that-argillas-key" not in passed.output, passed.output
