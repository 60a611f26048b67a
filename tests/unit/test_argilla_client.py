"""Client details that need no server."""

from __future__ import annotations

import os
import time

import pytest

from crowdpref.argilla_client import _parse_time


@pytest.fixture()
def new_york(monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.delenv("TZ")
    time.tzset()


def test_server_timestamps_are_utc_whatever_the_local_zone(new_york):
    assert os.environ["TZ"] == "America/New_York" and time.timezone != 0
    assert _parse_time("2026-01-01T00:00:00").timestamp() == 1767225600.0
    assert _parse_time("2026-01-01T00:00:00.250000+00:00").timestamp() == 1767225600.25
    assert _parse_time(None) is None


def test_an_idempotent_request_on_a_connection_the_server_dropped_is_sent_once_more():
    """A server that closes the first connection without answering (a kept-alive connection
    closed as the request went out): a GET is sent again and answered; a POST is not repeated."""
    import socket
    import threading

    import httpx

    from crowdpref.argilla_client import StaleConnectionRetry

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    seen: list[bytes] = []

    def whole_request(conn: socket.socket) -> bytes:
        """The request with its body: a socket closed with bytes still unread is reset (RST),
        which the client sees as a different error from the close this test means."""
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            body += conn.recv(65536)
        return head

    def serve() -> None:
        for n in range(3):
            conn, _ = server.accept()
            with conn:
                seen.append(whole_request(conn).split(b" ", 1)[0])
                if n % 2 == 0:  # the 1st and 3rd connections: dropped without an answer
                    continue
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with httpx.Client(transport=StaleConnectionRetry(), timeout=5) as client:
        assert client.get(f"http://127.0.0.1:{port}/x").text == "ok"
        with pytest.raises(httpx.RemoteProtocolError):
            client.post(f"http://127.0.0.1:{port}/x", content=b"{}")
    thread.join(5)
    server.close()
    assert seen == [b"GET", b"GET", b"POST"]
