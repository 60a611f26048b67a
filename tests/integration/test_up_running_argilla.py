"""``crowdpref up`` on a stack whose Argilla already runs asks that Argilla over HTTP whether it
takes the owner's API key (:func:`services.argilla.service.check_running_owner`) instead of
running the launcher's migration and owner step, an import of argilla-server (~6 s of CPU);
a key it refuses stops ``up`` with the line the owner step would say. On the session's Argilla,
through settings of another state folder whose credentials file says what the test wants."""

from __future__ import annotations

import json

import pytest

from crowdpref.errors import ServiceError
from services.argilla import service as argilla
from tests.conftest import isolated_settings

pytestmark = pytest.mark.integration


def _settings_with_key(argilla_server, tmp_path, api_key: str):
    settings = isolated_settings(tmp_path / "home", argilla_port=argilla_server.settings.argilla_port)
    real = argilla_server.settings.owner_credentials()
    settings.owner_credentials_file.parent.mkdir(parents=True, exist_ok=True)
    settings.owner_credentials_file.write_text(json.dumps({**real, "api_key": api_key}))
    return settings


def test_the_owners_key_is_asked_over_http(argilla_server, tmp_path):
    argilla.check_running_owner(_settings_with_key(argilla_server, tmp_path, argilla_server.owner_api_key))


def test_a_key_argilla_refuses_is_the_owner_steps_one_line(argilla_server, tmp_path):
    settings = _settings_with_key(argilla_server, tmp_path, "key-0123456789abcdef-not-argillas")
    with pytest.raises(ServiceError) as refused:
        argilla.check_running_owner(settings)
    message = str(refused.value)
    assert "exists with a different API key than" in message and str(settings.owner_credentials_file) in message
    assert "crowdpref up --reset-owner" in message and "\n" not in message
    assert "key-0123456789abcdef-not-argillas" not in message
