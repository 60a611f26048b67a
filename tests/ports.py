"""A free TCP port on 127.0.0.1, for the tests and the benchmarks (one helper, not a copy per
file; crowdpref/ and services/ never pick a port: they use the configured ones)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now (the OS picks it; it may be taken again before use)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
