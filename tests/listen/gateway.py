"""A reverse proxy on loopback in front of the mock, as a gateway or load balancer is.

Every request is passed through to the mock unchanged, except the paths told to
fail: those get the answer a proxy gives during a deploy, written here by hand (an
nginx HTML 404, a plain-text 404, a JSON 404 that is no OperationOutcome, a redirect
to another origin, a 410 HTML page). None of them is the API's own word; only a
FHIR OperationOutcome in a FHIR JSON body is (FHIR R4, "RESTful API": a read of a
deleted or unknown resource answers 404/410 with an OperationOutcome).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

NGINX_404 = (
    b"<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n"
    b"<center><h1>404 Not Found</h1></center>\r\n<hr><center>nginx/1.25.3</center>\r\n"
    b"</body>\r\n</html>\r\n"
)

ANSWERS: dict[str, tuple[int, dict[str, str], bytes]] = {
    "html404": (404, {"content-type": "text/html"}, NGINX_404),
    "text404": (404, {"content-type": "text/plain"}, b"404 page not found\n"),
    # a JSON 404 of a gateway: JSON, but no OperationOutcome
    "json404": (404, {"content-type": "application/json"}, b'{"message":"no Route matched"}'),
    # an OperationOutcome body sent as HTML: not a FHIR answer either
    "outcome-as-html": (
        404,
        {"content-type": "text/html"},
        b'{"resourceType":"OperationOutcome","issue":[{"severity":"error","code":"not-found"}]}',
    ),
    "html410": (410, {"content-type": "text/html"}, b"<html><body>Gone</body></html>"),
    "redirect": (302, {"location": "https://login.example.invalid/sso"}, b""),
    # the API's own refusal (FHIR R4: 422 Unprocessable Entity with an OperationOutcome)
    "fhir422": (
        422,
        {"content-type": "application/fhir+json"},
        b'{"resourceType":"OperationOutcome","issue":[{"severity":"error",'
        b'"code":"processing","diagnostics":"cannot be read now"}]}',
    ),
}


_HOP_HEADERS = ("content-length", "transfer-encoding", "connection", "content-encoding")


@dataclass
class Gateway:
    """The running proxy: ``base_url`` for a client, ``broken`` paths and what they answer."""

    upstream: str
    base_url: str = ""
    broken: dict[str, str] = field(default_factory=dict)
    """``{"/main/Appointment/<id>": "html404", ...}``: GETs of these paths get that answer."""
    hits: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, path: str) -> int:
        with self.lock:
            return self.hits.get(path, 0)


def _app(gateway: Gateway, upstream: httpx.Client) -> Any:
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    origin = _origin(gateway.upstream)

    async def forward(request: Request) -> Response:
        path = request.url.path
        with gateway.lock:
            gateway.hits[path] = gateway.hits.get(path, 0) + 1
            mode = gateway.broken.get(path) if request.method == "GET" else None
        if mode is not None:
            status, headers, body = ANSWERS[mode]
            return Response(body, status_code=status, headers=headers)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host",)}
        answer = await run_in_threadpool(
            upstream.request,
            request.method,
            path,
            params=list(request.query_params.multi_items()),
            headers=headers,
            content=await request.body(),
        )
        kept = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_HEADERS}
        # the mock's absolute links name the mock: a client must stay on the gateway
        own = gateway.base_url.rsplit("/main", 1)[0]
        body = answer.content.replace(origin.encode(), own.encode())
        return Response(body, status_code=answer.status_code, headers=kept)

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)])


@contextlib.contextmanager
def gateway(upstream: str) -> Iterator[Gateway]:
    """A :class:`Gateway` in front of ``upstream`` (the mock's ``base_url``), stopped after."""
    import uvicorn

    from toolkit._serving import start

    proxy = Gateway(upstream)
    with httpx.Client(base_url=_origin(upstream), trust_env=False, timeout=30) as http:
        config = uvicorn.Config(
            _app(proxy, http), host="127.0.0.1", port=0, log_level="error", lifespan="off"
        )
        running = start(config, name="test-gateway", what="the test gateway", timeout=30)
        proxy.base_url = f"http://127.0.0.1:{running.port}/main"
        try:
            yield proxy
        finally:
            running.stop()


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
