"""Small hostile servers on 127.0.0.1, each a real uvicorn over a real socket.

``serve(app)`` runs a Starlette app in a thread on a free port and stops it.
``Recorder`` is the "foreign" server: it records every request's headers and
answers 401 (the answer that tempts a client into fetching a new token), so a
test can assert that nothing -- and no ``Authorization`` header -- reached it.
``api_app`` builds a minimal deployment from the spec (JSON token endpoint,
Bundle lists with ``next`` links) whose list answers a test scripts.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import stamina
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

SECRET = "hostile-s3cret-never-shown"
TOKEN = "hostile-token-never-shown"


@pytest.fixture(autouse=True)
def instant_retries() -> Iterator[None]:
    with stamina.set_testing(True, attempts=6, cap=True):
        yield


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def serve(app: Any) -> Iterator[int]:
    """Serve ``app`` on 127.0.0.1 in a thread; yields the port; always stops it."""
    port = _free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            msg = "test server did not start"
            raise RuntimeError(msg)
        time.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@dataclass
class Recorder:
    """A foreign server that records what reached it."""

    seen: list[dict[str, str]] = field(default_factory=list)

    def app(self) -> Starlette:
        async def anything(request: Request) -> Response:
            self.seen.append({k.lower(): v for k, v in request.headers.items()})
            return JSONResponse(
                {
                    "resourceType": "OperationOutcome",
                    "issue": [{"severity": "error", "code": "login", "diagnostics": "who?"}],
                },
                status_code=401,
            )

        methods = ["GET", "POST", "PATCH", "PUT", "DELETE"]
        return Starlette(routes=[Route("/{path:path}", anything, methods=methods)])

    @property
    def authorization_headers(self) -> list[str]:
        return [h["authorization"] for h in self.seen if "authorization" in h]


@pytest.fixture
def foreign() -> Iterator[tuple[Recorder, int]]:
    recorder = Recorder()
    with serve(recorder.app()) as port:
        yield recorder, port


ListHandler = Callable[[Request], Awaitable[Response]]


def api_app(list_handler: ListHandler, *, resource: str = "Patient") -> Starlette:
    """A deployment with the spec's token endpoint and one scripted list route."""

    async def token(request: Request) -> Response:
        body = await request.json()
        if body.get("client_secret") != SECRET:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        return JSONResponse({"token_type": "Bearer", "expires_in": 3600, "access_token": TOKEN})

    async def listing(request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return JSONResponse({"resourceType": "OperationOutcome", "issue": []}, status_code=401)
        return await list_handler(request)

    return Starlette(
        routes=[
            Route("/main/oauth/token", token, methods=["POST"]),
            Route(f"/main/{resource}", listing, methods=["GET"]),
            Route(f"/main/{resource}/{{rid}}", listing, methods=["GET", "PATCH"]),
        ]
    )


def bundle(
    ids: list[str],
    *,
    resource: str = "Patient",
    total: int | None = None,
    next_url: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "resourceType": "Bundle",
        "type": "searchset",
        "entry": [{"resource": {"resourceType": resource, "id": i}} for i in ids],
        "link": [{"relation": "self", "url": "x"}],
    }
    if total is not None:
        body["total"] = total
    if next_url is not None:
        body["link"].append({"relation": "next", "url": next_url})
    return body
