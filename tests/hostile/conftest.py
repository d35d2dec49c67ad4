"""Small hostile servers on 127.0.0.1, each a real uvicorn over a real socket.

``serve(app)`` (from :mod:`tests.loopback`) runs a Starlette app in a thread on a
free port and stops it.
``Recorder`` is the "foreign" server: it records every request's headers and
answers 401 (the answer that tempts a client into fetching a new token), so a
test can assert that nothing -- and no ``Authorization`` header -- reached it.
``api_app`` builds a minimal deployment from the spec (JSON token endpoint,
Bundle lists with ``next`` links) whose list answers a test scripts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import pytest
import stamina
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.loopback import requires_token, serve, token_endpoint

SECRET = "hostile-s3cret-never-shown"
TOKEN = "hostile-token-never-shown"


@pytest.fixture(autouse=True)
def instant_retries() -> Iterator[None]:
    with stamina.set_testing(True, attempts=6, cap=True):
        yield


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
    listing = requires_token(TOKEN, list_handler)
    return Starlette(
        routes=[
            Route("/main/oauth/token", token_endpoint(SECRET, TOKEN), methods=["POST"]),
            Route(f"/main/{resource}", listing, methods=["GET"]),
            Route(f"/main/{resource}/{{rid}}", listing, methods=["GET", "PATCH"]),
        ]
    )
