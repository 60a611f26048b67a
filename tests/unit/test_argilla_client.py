"""Client details that need no server."""

from __future__ import annotations

import os
import time

import pytest

from crowdpref.argilla_client import _parse_time


@pytest.fixture()
def new_york(monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.delenv("TZ")
    time.tzset()


def test_server_timestamps_are_utc_whatever_the_local_zone(new_york):
    assert os.environ["TZ"] == "America/New_York" and time.timezone != 0
    assert _parse_time("2026-01-01T00:00:00").timestamp() == 1767225600.0
    assert _parse_time("2026-01-01T00:00:00.250000+00:00").timestamp() == 1767225600.25
    assert _parse_time(None) is None
