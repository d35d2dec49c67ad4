"""A hostile client on raw sockets: huge and half-sent heads, slow bodies, too many sockets.

The receiver serves with the same hardened protocol as the mock
(``toolkit/_protocol.py``); these tests talk to a real ``listen()`` over loopback
with bytes written by hand, since an HTTP library would refuse to send them.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolkit.client import Client
from toolkit.webhooks import Listener, listen

LIMIT = 32 * 1024


@pytest.fixture
def receiver(store: Path, client: Client) -> Iterator[Listener]:
    with listen(
        store,
        client=client,
        auth_header="X-Hook: s3cret",
        catch_up=False,
        header_timeout=1.0,
        body_timeout=1.0,
        max_connections=6,
    ) as listener:
        yield listener


def _connect(listener: Listener) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", listener.port), timeout=10)
    return sock


def _answer(sock: socket.socket, timeout: float = 10.0) -> bytes:
    """Everything the server sends until it closes the connection."""
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data


def test_a_huge_head_is_431_and_the_connection_closed_before_much_is_read(
    receiver: Listener,
) -> None:
    sock = _connect(receiver)
    sent = 0
    try:
        sock.sendall(b"POST /webhook HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        line = b"X-Filler: " + b"a" * 1000 + b"\r\n"
        with pytest.raises(OSError):  # the server closes; a 256 MiB head is never read
            for _ in range(256 * 1024):
                sock.sendall(line)
                sent += len(line)
        answer = _answer(sock)
    finally:
        sock.close()
    assert sent < 8 * 1024 * 1024, sent
    if answer:  # a reset may discard the answer on the client's side; when read, it is 431
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:80]
        assert b"OperationOutcome" in answer


def test_a_head_just_over_the_limit_gets_a_readable_431(receiver: Listener) -> None:
    sock = _connect(receiver)
    try:
        head = b"POST /webhook HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"b" * LIMIT + b"\r\n\r\n"
        sock.sendall(head)
        answer = _answer(sock)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:80]
    assert b"larger than 32768 bytes" in answer


@pytest.mark.parametrize(
    "sent",
    [
        b"",  # connected, nothing sent
        b"POST /webhook HTTP/1.1\r\nHost: 127.0.0.1\r\n",  # half a head
        b"POST /webhook HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Hook: s3cret\r\n"
        b'Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{"resourceType"',
    ],
    ids=["silent", "half-head", "half-body"],
)
def test_a_half_sent_request_gets_408_and_is_closed(receiver: Listener, sent: bytes) -> None:
    sock = _connect(receiver)
    started = time.monotonic()
    try:
        sock.sendall(sent)
        answer = _answer(sock, timeout=15)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
    assert time.monotonic() - started < 8
    assert receiver.queue.count() == 0


def test_connections_past_the_cap_are_answered_503_and_closed_at_once(
    receiver: Listener,
) -> None:
    held = [_connect(receiver) for _ in range(6)]
    try:
        time.sleep(0.2)
        extra = _connect(receiver)
        started = time.monotonic()
        answer = _answer(extra, timeout=5)
        extra.close()
        assert answer.startswith(b"HTTP/1.1 503 "), answer[:80]
        assert b"retry-after: 1" in answer.lower()
        assert time.monotonic() - started < 2  # not after the head deadline
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)
    again = _connect(receiver)
    try:
        again.sendall(
            b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Hook: s3cret\r\n"
            b"Connection: close\r\n\r\n"
        )
        assert _answer(again).startswith(b"HTTP/1.1 200 ")
    finally:
        again.close()


def test_status_is_refused_to_a_call_forwarded_by_a_proxy(receiver: Listener) -> None:
    import httpx

    base = f"http://127.0.0.1:{receiver.port}/status"
    signed = {"X-Hook": "s3cret"}
    direct = httpx.get(base, headers=signed)
    assert direct.status_code == 200
    report = direct.json()
    assert report["worker"] == "running" and report["queue"]["events"] == 0
    assert report["store"] == str(receiver.store.resolve())
    for header in ("X-Forwarded-For", "Forwarded", "X-Real-IP"):
        assert httpx.get(base, headers={**signed, header: "203.0.113.9"}).status_code == 404
