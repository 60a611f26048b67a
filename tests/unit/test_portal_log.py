"""The portal's request log (:class:`crowdpref.portal.app.PathOnlyLog`): one line per request with
the method, the path and the status - never the query string, which carries Prolific ids - also
for a request the app fails on."""

from __future__ import annotations

import logging

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from crowdpref.portal.app import PathOnlyLog


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/s/{study}/{key}")
    def enter(study: str, key: str) -> dict[str, str]:
        return {"study": study}

    @app.get("/broken")
    def broken() -> None:
        raise RuntimeError("boom")

    app.add_middleware(PathOnlyLog)
    return app


def test_one_line_per_request_with_the_path_and_status_and_no_query(caplog: pytest.LogCaptureFixture) -> None:
    client = TestClient(_app(), raise_server_exceptions=False)
    with caplog.at_level(logging.INFO, logger="crowdpref.portal"):
        assert client.get("/s/demo/study1?PROLIFIC_PID=5f1e2d3c4b5a69788796a5b4&SESSION_ID=65aa00bb11cc"
                          ).status_code == 200
        assert client.get("/broken?SESSION_ID=65aa00bb11cc").status_code == 500
        assert client.post("/s/demo/study1").status_code == 405
    lines = [r.getMessage() for r in caplog.records if r.name == "crowdpref.portal"]
    assert [line.rsplit(" ", 2)[0] for line in lines] == [
        "GET /s/demo/study1 200", "GET /broken 500", "POST /s/demo/study1 405"]
    assert all(line.endswith(" ms") for line in lines)
    assert "5f1e2d3c4b5a69788796a5b4" not in caplog.text and "65aa00bb11cc" not in caplog.text
