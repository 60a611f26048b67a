"""Run the portal: ``python -m crowdpref.portal [--host H] [--port P]`` (``crowdpref up`` does)."""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn

from crowdpref.errors import CrowdprefError


UVICORN_OPTIONS = {
    # uvicorn would write query strings (Prolific ids): the app logs method, path, status only
    "access_log": False,
    # uvicorn's default believes X-Forwarded-For from 127.0.0.1 and rewrites the client address
    # before the app sees it; the portal's own rule (portal_trusted_proxies, or the public
    # profile's Caddy on HOST) must be the only one, so a local client cannot forge its address
    "proxy_headers": False,
    "log_level": "warning",
    # C parser and libuv loop: about a quarter less CPU per request than h11 on asyncio, what a
    # burst of webhooks or arrivals is bound by (named, so a missing package fails at start)
    "http": "httptools",
    "loop": "uvloop",
    "timeout_graceful_shutdown": 5,
}


def main() -> int:
    from crowdpref.portal.app import build_app
    from crowdpref.settings import load_settings

    parser = argparse.ArgumentParser(prog="python -m crowdpref.portal")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s", stream=sys.stdout)
    logging.getLogger("crowdpref.portal").setLevel(logging.INFO)  # method, path, status: never a query
    logging.getLogger("crowdpref.pacer").setLevel(logging.INFO)  # each raise of a launch's places
    try:
        settings = load_settings()
        app = build_app(settings)
    except CrowdprefError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    uvicorn.run(app, host=args.host or settings.host, port=args.port or settings.portal_port, **UVICORN_OPTIONS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
