"""A session the portal mints into Argilla lasts no longer than the study's maximum time (its
inactivity window, the Prolific study's ``maximum_allowed_time``), at most a day: Argilla checks
only a session's signature and expiry, so a longer one would outlive the place (issue 32)."""

from __future__ import annotations

import base64
import json

from fastapi.testclient import TestClient

from crowdpref.portal import argilla_session
from crowdpref.portal.app import create_app
from crowdpref.portal.service import Portal
from tests.unit.test_argilla_session import FRONT, TOKEN_IN_PAGE
from tests.unit.test_portal_entry import _write, rig  # noqa: F401 - the fixture


def _minted_lifetime_s(rig, name: str, **study1: object) -> int:  # noqa: F811
    settings = rig.settings.model_copy(update={"portal_url": FRONT, "argilla_public_url": FRONT})
    settings.secrets_dir.mkdir(parents=True, exist_ok=True)
    (settings.secrets_dir / argilla_session.SECRET_FILE).write_text("s" * 64)
    portal = Portal(settings, rig.store, open_collection=rig.portal._open_collection)
    _write(rig.studies, name, participants="invite",
           study1={"responses_per_question": 2, "questions_per_participant": 3, "pool_size": 0, **study1})
    client = TestClient(create_app(portal), base_url=settings.portal_public_url)
    link = portal.invite_link(name, "study1", "inv-1").split(settings.portal_public_url, 1)[1]
    assert client.post(link, follow_redirects=False).status_code == 303
    before = int(portal.clock())
    start = client.post(f"/s/{name}/study1/start", follow_redirects=False)
    assert start.status_code == 200, start.text
    payload = TOKEN_IN_PAGE.search(start.text).group(1).split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims["exp"] - before


def test_a_minted_session_ends_with_the_studys_maximum_time(rig):  # noqa: F811
    assert 45 * 60 <= _minted_lifetime_s(rig, "short", inactive_after_minutes=45) <= 45 * 60 + 2


def test_never_longer_than_a_day(rig):  # noqa: F811
    assert _minted_lifetime_s(rig, "long", inactive_after_minutes=3 * 24 * 60) <= argilla_session.TOKEN_LIFETIME_S + 2
