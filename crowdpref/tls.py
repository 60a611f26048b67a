"""One TLS context per process, shared by every HTTP client crowdpref makes.

httpx builds a new :class:`ssl.SSLContext` for every client, a plain ``httpx.get`` included, and
loads certifi's ~120 CA certificates into it each time: about 37 ms of CPU on the 2-core machine,
where the rest of making a client costs 0.2 ms. The portal, the flows and the simulated crowd make
clients per arrival, per sign-in and per task (one run of the study flow test made 341 of them:
14.5 s of CPU). Loading the certificates once per process, the way httpx would load them (certifi's
bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set), and handing the same context to every
client keeps what is trusted and drops the cost; an ``SSLContext`` is safe to share between
connections and threads."""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def shared_context() -> ssl.SSLContext:
    """The process's verifying TLS context (built on first use; pass it as httpx's ``verify``)."""
    return httpx.create_ssl_context()
