"""The portal process's uvicorn options: uvicorn itself must not rewrite the client address
from X-Forwarded-For (its default trusts 127.0.0.1), or a local client could pose as anyone
and the portal's own trusted-proxy rule would never be what decides."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from crowdpref.portal.__main__ import UVICORN_OPTIONS
from tests.conftest import free_port
from tests.portal_server import PortalThread


def _client_host(request: Request) -> PlainTextResponse:
    return PlainTextResponse(request.client.host if request.client else "")


def test_a_forged_forwarded_for_does_not_change_the_client_the_portal_sees():
    app = Starlette(routes=[Route("/healthz", _client_host)])
    thread = PortalThread(app, port=free_port())
    # the portal's own server options, not the test harness's
    thread.server.config = type(thread.config)(app, host="127.0.0.1", port=thread.config.port, **UVICORN_OPTIONS)
    with thread as server:
        seen = httpx.get(f"{server.url}/healthz", headers={"X-Forwarded-For": "198.51.100.7"}).text
    assert seen == "127.0.0.1"
    assert UVICORN_OPTIONS["access_log"] is False  # query strings (Prolific ids) never reach a log


def test_the_portal_runs_on_httptools_and_uvloop():
    """The portal's server: the C HTTP parser and the libuv loop (about a quarter less CPU per
    webhook than h11 on asyncio, measured in docs/performance.md), both installed with crowdpref."""
    app = Starlette(routes=[Route("/healthz", _client_host), Route("/loop", _loop_name)])
    thread = PortalThread(app, port=free_port())
    thread.server.config = type(thread.config)(app, host="127.0.0.1", port=thread.config.port, **UVICORN_OPTIONS)
    with thread as server:
        assert httpx.get(f"{server.url}/loop").text == "uvloop.Loop"
    assert thread.server.config.http_protocol_class.__name__ == "HttpToolsProtocol"


async def _loop_name(request: Request) -> PlainTextResponse:
    import asyncio

    loop = asyncio.get_running_loop()
    return PlainTextResponse(f"{type(loop).__module__}.{type(loop).__name__}")
