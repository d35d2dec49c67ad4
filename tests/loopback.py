"""Small servers and Bundle builders that several test folders share.

``serve(app)`` runs a Starlette app with uvicorn on 127.0.0.1, on a free port, in a
thread, and always stops it. ``token_endpoint`` and ``requires_token`` are the
spec's OAuth client-credentials endpoint (JSON body) and its bearer check, for a
hand-written deployment. ``paged_api`` is such a deployment that serves each
resource type's entries one per page, so that a client walks ``next`` links and
reads every page on its own. ``bundle`` builds a ``searchset`` Bundle of bare
records; ``all_pages`` walks a list over an ``httpx.Client`` by its ``next`` links.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

Handler = Callable[[Request], Awaitable[Response]]


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


def token_endpoint(secret: str, token: str, *, client_id: str | None = None) -> Handler:
    """The spec's token endpoint: ``token`` for ``secret`` (and ``client_id``, if given)."""

    async def answer(request: Request) -> Response:
        body = await request.json()
        if body.get("client_secret") != secret or (
            client_id is not None and body.get("client_id") != client_id
        ):
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        return JSONResponse({"token_type": "Bearer", "expires_in": 3600, "access_token": token})

    return answer


def requires_token(token: str, handler: Handler) -> Handler:
    """``handler`` behind the bearer check: 401 with an OperationOutcome without ``token``."""

    async def guarded(request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {token}":
            outcome = {"resourceType": "OperationOutcome", "issue": [{"severity": "error"}]}
            return JSONResponse(outcome, status_code=401)
        return await handler(request)

    return guarded


def paged_api(
    entries_of: Callable[[str], list[dict[str, Any]]],
    *,
    client_id: str,
    secret: str,
    token: str,
) -> Starlette:
    """A deployment at ``/main`` listing ``entries_of(type)`` one entry per page."""

    async def listing(request: Request) -> Response:
        kind = request.path_params["kind"]
        entries = entries_of(kind)
        number = int(request.query_params.get("page", "1"))
        base = f"{str(request.base_url).rstrip('/')}/main"
        links = [{"relation": "self", "url": f"{base}/{kind}?page={number}"}]
        if number < len(entries):
            links.append({"relation": "next", "url": f"{base}/{kind}?page={number + 1}"})
        page = {
            "resourceType": "Bundle",
            "type": "searchset",
            "total": len(entries),
            "link": links,
            "entry": entries[number - 1 : number],
        }
        return JSONResponse(page, media_type="application/fhir+json")

    return Starlette(
        routes=[
            Route(
                "/main/oauth/token",
                token_endpoint(secret, token, client_id=client_id),
                methods=["POST"],
            ),
            Route("/main/{kind}", requires_token(token, listing), methods=["GET"]),
        ]
    )


def bundle(
    ids: list[str],
    *,
    resource: str = "Patient",
    total: int | None = None,
    next_url: str | None = None,
) -> dict[str, Any]:
    """A ``searchset`` Bundle of bare ``resource`` records with these ids."""
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


def all_pages(api: httpx.Client, path: str, **params: Any) -> list[dict[str, Any]]:
    """Every record of a list, 100 a page, following ``next`` links to the end."""
    out: list[dict[str, Any]] = []
    url: str | None = path
    query: dict[str, Any] | None = {"_count": 100, **params}
    while url is not None:
        body = api.get(url, params=query).json()
        out += [e["resource"] for e in body.get("entry", [])]
        url = next((x["url"] for x in body["link"] if x["relation"] == "next"), None)
        query = None
    return out
