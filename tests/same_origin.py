"""A tiny same-origin front for tests: the portal's ASGI app on ``/s/``, ``/hooks/`` and
``/healthz`` (as Caddy routes them in the public profile), every other request forwarded to
Argilla. It records each request's method and path (with its query, so a test can assert no
secret ever rode in a URL).

    front = SameOrigin(create_app(portal), argilla_url)
    with PortalThread(front, port=port) as server: ...
"""

from __future__ import annotations

from typing import Any

import httpx

from crowdpref.tls import shared_context

PORTAL_PREFIXES = ("/s/", "/hooks/")
HOP_BY_HOP = {b"host", b"connection", b"content-length", b"transfer-encoding", b"accept-encoding", b"keep-alive"}


class SameOrigin:
    def __init__(self, portal_app: Any, argilla_url: str):
        self.portal, self.argilla_url = portal_app, argilla_url.rstrip("/")
        self.seen: list[tuple[str, str]] = []  # (method, path?query) of every request

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.portal(scope, receive, send)
        path, query = scope["path"], scope.get("query_string", b"").decode("latin-1")
        self.seen.append((scope["method"], f"{path}?{query}" if query else path))
        if path.startswith(PORTAL_PREFIXES) or path == "/healthz":
            return await self.portal(scope, receive, send)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in HOP_BY_HOP]
        url = f"{self.argilla_url}{path}" + (f"?{query}" if query else "")
        async with httpx.AsyncClient(timeout=60, verify=shared_context()) as client:  # (a TLS context each: 37 ms)
            reply = await client.request(scope["method"], url, headers=headers, content=body)
        out = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers.items()
               if k.lower().encode() not in HOP_BY_HOP and k.lower() != "content-encoding"]
        content = reply.content
        out.append((b"content-length", str(len(content)).encode()))
        await send({"type": "http.response.start", "status": reply.status_code, "headers": out})
        await send({"type": "http.response.body", "body": content})
