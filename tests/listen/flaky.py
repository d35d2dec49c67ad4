"""A flaky upstream: a small HTTP server in front of a deployment that breaks record reads.

Written from the spec's forms, not from pmtk's mock: it relays every call to the
deployment behind it unchanged (token endpoint, lists, reads), except a record read
``GET /main/<Type>/<id>`` that its ``policy`` decides to break. A policy gets the
type, the id and how many times that record was read before, and returns ``None``
(relay) or a status to answer with an OperationOutcome (``500``: a server fault the
client does not retry; ``400``/``403``: refused for good).
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson

from toolkit.store.identity import normalise_base_url

Policy = Callable[[str, str, int], int | None]

_READ = re.compile(r"/main/([A-Z][A-Za-z]+)/([A-Za-z0-9\-.]{1,64})")
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


def forward(
    handler: BaseHTTPRequestHandler, http: httpx.Client, upstream: str, body: bytes
) -> httpx.Response:
    """Send ``handler``'s request (without hop-by-hop headers) to ``upstream``."""
    headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP}
    return http.request(handler.command, upstream + handler.path, headers=headers, content=body)


def send_back(
    handler: BaseHTTPRequestHandler, answer: httpx.Response, content: bytes | None = None
) -> None:
    """Answer ``handler`` with ``answer``'s status, end-to-end headers and decoded body
    (or ``content`` in its place)."""
    content = answer.content if content is None else content
    handler.send_response(answer.status_code)
    for name, value in answer.headers.items():
        if name.lower() not in _HOP and name.lower() != "content-encoding":
            handler.send_header(name, value)
    handler.send_header("content-length", str(len(content)))
    handler.end_headers()
    handler.wfile.write(content)


def made_through(store: Path, base_url: str) -> str:
    """Record ``base_url`` (a relay to the store's deployment) as the store's deployment.

    The relay is the same deployment at another address; the store's deployment check
    would otherwise (rightly) refuse a receiver reading through it. Returns ``base_url``.
    """
    manifest = store / "manifest.json"
    data = orjson.loads(manifest.read_bytes())
    data["deployment"]["base_url"] = normalise_base_url(base_url)
    manifest.write_bytes(orjson.dumps(data))
    return base_url


class Flaky:
    """The running relay: ``base_url`` for a client; ``reads`` (record reads, by record),
    ``broken`` and ``calls`` (every call relayed or broken: tokens and lists too) counted.

    ``rewrite_links`` writes the relay's origin over the deployment's in every answer,
    as a gateway that rewrites its upstream's links does, so that a Bundle's ``next``
    leads back through the relay (a client refuses a link to another origin)."""

    def __init__(self, upstream: str, policy: Policy, *, rewrite_links: bool = False) -> None:
        self.upstream = upstream.rstrip("/").removesuffix("/main")
        self.policy = policy
        self.rewrite_links = rewrite_links
        self.reads: Counter[tuple[str, str]] = Counter()
        self.broken = 0
        self.calls = 0
        self.lock = threading.Lock()
        self.base_url = ""

    def decide(self, path: str) -> int | None:
        with self.lock:
            self.calls += 1
        matched = _READ.fullmatch(path.split("?")[0])
        if not matched:
            return None
        key = (matched.group(1), matched.group(2))
        with self.lock:
            seen = self.reads[key]
            self.reads[key] += 1
            status = self.policy(key[0], key[1], seen)
            if status is not None:
                self.broken += 1
        return status


def _handler(flaky: Flaky, http: httpx.Client) -> type[BaseHTTPRequestHandler]:
    class Relay(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return  # quiet

        def _relay(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            status = flaky.decide(self.path)
            if status is not None:
                outcome = orjson.dumps(
                    {
                        "resourceType": "OperationOutcome",
                        "issue": [
                            {"severity": "error", "code": "exception", "diagnostics": "flaky"}
                        ],
                    }
                )
                self.send_response(status)
                self.send_header("content-type", "application/fhir+json")
                self.send_header("content-length", str(len(outcome)))
                self.end_headers()
                self.wfile.write(outcome)
                return
            answer = forward(self, http, flaky.upstream, body)
            content = answer.content
            if flaky.rewrite_links:
                mine = flaky.base_url.removesuffix("/main")
                content = content.replace(flaky.upstream.encode(), mine.encode())
            send_back(self, answer, content)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _relay

    return Relay


@contextmanager
def flaky_upstream(
    upstream_base_url: str, policy: Policy, *, rewrite_links: bool = False
) -> Iterator[Flaky]:
    """Serve a :class:`Flaky` relay to ``upstream_base_url`` on 127.0.0.1 until the block ends."""
    flaky = Flaky(upstream_base_url, policy, rewrite_links=rewrite_links)
    with httpx.Client(timeout=30, trust_env=False) as http:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(flaky, http))
        server.daemon_threads = True
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        thread.start()
        flaky.base_url = f"http://127.0.0.1:{server.server_address[1]}/main"
        try:
            yield flaky
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)


def every_nth(n: int) -> Policy:
    """Break every ``n``-th record read with a 500 (10 % for ``n=10``), whatever the record."""
    count = {"reads": 0}
    lock = threading.Lock()

    def policy(_rtype: str, _rid: str, _seen: int) -> int | None:
        with lock:
            count["reads"] += 1
            return 500 if count["reads"] % n == 0 else None

    return policy
