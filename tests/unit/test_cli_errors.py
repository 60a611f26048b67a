"""What the CLI can explain in one line (crowdpref/cli.py ``explain``), what it must leave as a
traceback, the console formatter that drops only explained tracebacks, and the state-file
readers' messages (salt, owner credentials) with the fix that is safe in each situation."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import httpx
import pytest

from crowdpref.cli import common
from crowdpref.errors import ConfigError, CrowdprefError, ServiceError, StateFileError
from crowdpref.pseudonyms import SALT_FILE, Pseudonyms
from crowdpref.settings import load_settings


@pytest.fixture()
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for name in ("CROWDPREF_SETTINGS", "CROWDPREF_ARGILLA_URL", "ARGILLA_API_URL", "CROWDPREF_PREFECT_API_URL",
                 "PREFECT_API_URL", "CROWDPREF_ARGILLA_API_KEY", "ARGILLA_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    s = load_settings(home=tmp_path / "state", argilla_port=16900, prefect_port=14200)
    monkeypatch.setattr(common, "_SETTINGS", s)
    return s


def _connect_error(url: str) -> httpx.ConnectError:
    return httpx.ConnectError("refused", request=httpx.Request("GET", url))


def test_a_refused_connection_names_the_service_and_how_to_start_it(settings):
    prefect = common.explain(_connect_error("http://127.0.0.1:14200/api/flows/"))
    argilla = common.explain(_connect_error("http://127.0.0.1:16900/api/v1/me"))
    other = common.explain(_connect_error("http://10.9.9.9:1234/x"))
    assert isinstance(prefect, ServiceError) and "Prefect server at http://127.0.0.1:14200" in str(prefect)
    assert "`crowdpref up`" in str(prefect) and "PREFECT_API_URL" in str(prefect)
    assert "Argilla server at http://127.0.0.1:16900" in str(argilla) and "CROWDPREF_ARGILLA_URL" in str(argilla)
    assert "http://10.9.9.9:1234 is not reachable" in str(other)


def test_a_server_that_does_not_answer_in_time_is_one_line_and_a_read_is_tried_again(settings, monkeypatch):
    """A busy Prefect server that takes the connection but does not answer: `crowdpref deploy` printed
    httpx's traceback (a fresh-clone run, 2026-11-29). Reads (GET, POST .../filter) are tried again;
    a write that timed out is not (it may have been done); the rest is one line naming the server."""
    from deployments import deploy

    timeout = httpx.ReadTimeout("timed out", request=httpx.Request("POST", "http://127.0.0.1:14200/api/deployments/filter"))
    explained = common.explain(timeout)
    assert isinstance(explained, ServiceError) and "\n" not in str(explained)
    assert "http://127.0.0.1:14200 did not answer in time (ReadTimeout)" in str(explained)

    monkeypatch.setattr(deploy._RetryingClient, "DELAYS_S", (0.0, 0.0, 0.0))
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(f"{request.method} {request.url.path}")
        if len(calls) <= 2:
            raise httpx.ReadTimeout("timed out", request=request)
        return httpx.Response(200, json=[])

    with deploy._RetryingClient(base_url="http://prefect.test/api/", transport=httpx.MockTransport(handler)) as client:
        assert client.post("deployments/filter", json={}).status_code == 200  # the third try answers
        assert calls == ["POST /api/deployments/filter"] * 3
        calls[:] = []
        with pytest.raises(httpx.ReadTimeout):
            client.post("deployments/", json={})  # a write: not repeated
        assert calls == ["POST /api/deployments/"]


def test_prefects_failed_to_reach_api_is_explained_through_its_cause(settings):
    try:
        try:
            raise _connect_error("http://127.0.0.1:14200/api/flows/")
        except httpx.ConnectError as exc:
            raise RuntimeError("Failed to reach API at http://127.0.0.1:14200/api/") from exc
    except RuntimeError as wrapped:
        explained = common.explain(wrapped)
    assert explained is not None and "Prefect server" in str(explained)


def test_a_crowdpref_error_is_itself_and_bugs_are_not_explained(settings):
    error = ConfigError("studies/x.yaml: bad")
    assert common.explain(error) is error
    assert common.explain(KeyError("api_key")) is None
    assert common.explain(ZeroDivisionError()) is None
    assert common.explain(FileNotFoundError(2, "No such file", "/x")) is None  # may be our own bug: keep it
    try:
        try:
            raise ValueError("a bug")
        except ValueError:
            raise CrowdprefError("reported") from None
    except CrowdprefError as suppressed:
        assert common.explain(suppressed) is suppressed
    unreadable = common.explain(PermissionError(13, "Permission denied", "/state/store.sqlite"))
    assert isinstance(unreadable, StateFileError) and "/state/store.sqlite" in str(unreadable)


def test_the_console_drops_an_explained_traceback_and_keeps_a_bugs(settings):
    formatter = logging.Formatter("%(message)s")
    quiet = common._without_explained_traceback(formatter.format)

    def record(exc: BaseException) -> logging.LogRecord:
        try:
            raise exc
        except BaseException:  # noqa: BLE001
            return logging.LogRecord("prefect.flow_runs", logging.ERROR, __file__, 1, "Encountered exception",
                                     None, sys.exc_info())

    explained = record(CrowdprefError("questions.parquet: not found"))
    assert quiet(explained) == "Encountered exception"
    assert explained.exc_info is not None  # the record is untouched for the other handlers (the API's log)
    assert "Traceback" in formatter.format(explained)
    assert "Traceback" in quiet(record(ZeroDivisionError("bug")))


def test_a_damaged_salt_says_delete_only_while_nothing_was_exported(tmp_path: Path):
    private = tmp_path / "private"
    private.mkdir()
    (private / SALT_FILE).write_text('{"salt": ')
    with pytest.raises(StateFileError) as before:
        Pseudonyms(private)
    assert str(private / SALT_FILE) in str(before.value) and "delete it and rerun" in str(before.value)
    (tmp_path / "responses.parquet").write_bytes(b"")
    (private / SALT_FILE).write_text(json.dumps({"not": "a salt"}))
    with pytest.raises(StateFileError) as after:
        Pseudonyms(private)
    assert "restore it from your backup" in str(after.value) and "delete" not in str(after.value)
    assert "fields missing" in str(after.value)


def test_owner_credentials_messages_never_quote_the_file(settings):
    path = settings.owner_credentials_file
    path.parent.mkdir(parents=True)
    path.write_text('{"username": "crowdpref-owner", "password": "s3cret-value-1234", "api_key": ')
    with pytest.raises(StateFileError) as caught:
        settings.resolved_argilla_api_key()
    assert "s3cret" not in str(caught.value) and "\n" not in str(caught.value)
    assert str(path) in str(caught.value) and "delete it and run `crowdpref up`" in str(caught.value)
