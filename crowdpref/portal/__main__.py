"""Run the portal: ``python -m crowdpref.portal [--host H] [--port P]`` (``crowdpref up`` does)."""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn

from crowdpref.errors import CrowdprefError


def main() -> int:
    from crowdpref.portal.app import build_app
    from crowdpref.settings import load_settings

    parser = argparse.ArgumentParser(prog="python -m crowdpref.portal")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s", stream=sys.stdout)
    logging.getLogger("crowdpref.portal").setLevel(logging.INFO)  # method, path, status: never a query
    try:
        settings = load_settings()
        app = build_app(settings)
    except CrowdprefError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    # access_log off: uvicorn would write query strings (Prolific ids); the app logs paths only
    uvicorn.run(app, host=args.host or settings.host, port=args.port or settings.portal_port, access_log=False,
                log_level="warning", timeout_graceful_shutdown=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
