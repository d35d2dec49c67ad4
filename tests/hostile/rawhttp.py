"""A raw-socket HTTP server on 127.0.0.1 that can answer what no framework would send.

Each request's head (and its ``Content-Length`` body) is read, then the answer
function's bytes are written as they are and the connection closed: a broken gzip
stream, a ``Content-Encoding: br`` body, a status line that is not HTTP, a
connection cut inside the headers. The token endpoint is the spec's (section 5).
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tests.hostile.conftest import SECRET, TOKEN


@dataclass
class Seen:
    """One request as the raw server read it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class RawServer:
    """The port and every request that reached the server."""

    port: int
    seen: list[Seen] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/main"


def http_answer(
    status: int, body: bytes, headers: dict[str, str] | None = None, *, reason: str = "X"
) -> bytes:
    """A complete HTTP/1.1 answer with ``Content-Length`` and ``Connection: close``."""
    lines = [f"HTTP/1.1 {status} {reason}"]
    for name, value in {
        "Content-Type": "application/fhir+json",
        **(headers or {}),
        "Content-Length": str(len(body)),
        "Connection": "close",
    }.items():
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def token_answer(seen: Seen) -> bytes:
    """The spec's token endpoint: a JSON token for the right secret, 401 otherwise."""
    try:
        sent = json.loads(seen.body)
    except ValueError:
        sent = {}
    if sent.get("client_secret") != SECRET:
        return http_answer(401, b'{"error": "invalid_client"}')
    token = {"token_type": "Bearer", "expires_in": 3600, "access_token": TOKEN}
    return http_answer(200, json.dumps(token).encode())


Answer = Callable[[Seen], bytes]


@contextmanager
def raw_server(answer: Answer, *, token: Answer = token_answer) -> Iterator[RawServer]:
    """Serve on a free 127.0.0.1 port; ``token`` answers the token endpoint, ``answer`` the rest."""
    state = RawServer(port=0)

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = self.request.recv(65536)
                if not chunk:
                    return
                head += chunk
            raw_head, _, body = head.partition(b"\r\n\r\n")
            lines = raw_head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            while len(body) < length:
                chunk = self.request.recv(65536)
                if not chunk:
                    break
                body += chunk
            seen = Seen(method, path, headers, body)
            state.seen.append(seen)
            reply = token(seen) if path.startswith("/main/oauth/token") else answer(seen)
            try:
                self.request.sendall(reply)
                self.request.shutdown(socket.SHUT_WR)
            except OSError:
                return

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
