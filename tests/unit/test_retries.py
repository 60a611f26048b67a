"""The one retry policy: transient failures are retried, problems a user must fix are not."""

from __future__ import annotations

import httpx
import pytest

from crowdpref.argilla_client import ArgillaError, check_server
from crowdpref.errors import ConfigError, CrowdprefError
from tasks.retries import NETWORK, is_transient


def test_transient_failures_are_retried():
    assert is_transient(httpx.ConnectError("refused"))
    assert is_transient(TimeoutError())
    response = httpx.Response(503, request=httpx.Request("GET", "http://x"))
    assert is_transient(httpx.HTTPStatusError("down", request=response.request, response=response))
    with pytest.raises(ArgillaError) as unreachable:
        check_server("http://127.0.0.1:9", "key", timeout_s=2)
    assert is_transient(unreachable.value)


def test_user_fixable_problems_are_not_retried():
    assert not is_transient(ConfigError("study.yaml: study1.x: fix it"))
    assert not is_transient(CrowdprefError("responses.parquet: not found: run collect-responses first"))
    response = httpx.Response(401, request=httpx.Request("GET", "http://x"))
    assert not is_transient(httpx.HTTPStatusError("auth", request=response.request, response=response))
    assert not is_transient(ValueError("a bug"))


def test_policy_has_backoff_and_jitter():
    assert NETWORK["retries"] == len(NETWORK["retry_delay_seconds"]) >= 2
    assert list(NETWORK["retry_delay_seconds"]) == sorted(NETWORK["retry_delay_seconds"])
    assert 0 < NETWORK["retry_jitter_factor"] <= 1
