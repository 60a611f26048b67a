"""Serve a portal app over real HTTP from a background thread (uvicorn, access log off), for
tests and benchmarks that need a browser, the fake Prolific's webhooks or real sockets.

    with PortalThread(create_app(portal), port=free_port()) as server:
        httpx.get(f"{server.url}/healthz")
"""

from __future__ import annotations

import threading
import time

import httpx
import uvicorn


class PortalThread:
    def __init__(self, app: object, host: str = "127.0.0.1", port: int = 0):
        self.config = uvicorn.Config(app, host=host, port=port, access_log=False, log_level="warning",
                                     timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self.server.run, name="portal", daemon=True)
        self.url = f"http://{host}:{port}"

    def __enter__(self) -> PortalThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the portal did not start on {self.url}")

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
