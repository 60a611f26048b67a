"""Every HTTP client crowdpref makes shares the process's one TLS context (crowdpref/tls.py):
httpx would load certifi's CA bundle again for each client, about 37 ms of CPU every time."""

from __future__ import annotations

import ssl

import httpx

from crowdpref.argilla_client import AnnotatorSession
from crowdpref.prolific import ProlificClient
from crowdpref.tls import shared_context


def _context(client: httpx.Client) -> ssl.SSLContext:
    return client._transport._pool._ssl_context  # type: ignore[attr-defined]


def test_one_context_per_process_that_verifies_like_httpx():
    context = shared_context()
    assert shared_context() is context
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert len(context.get_ca_certs()) == len(httpx.create_ssl_context().get_ca_certs()) > 50


def test_the_clients_share_it():
    with ProlificClient("https://api.prolific.com/api/v1/", "token") as prolific:
        assert _context(prolific._http) is shared_context()
    session = AnnotatorSession("https://argilla.example.org", "someone", None, token="minted")
    assert _context(session._http) is shared_context()
    assert _context(httpx.Client()) is not shared_context()  # what httpx does on its own
