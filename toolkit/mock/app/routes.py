"""The routes: which handler answers which method and path, behind the gate."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from email.utils import formatdate

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolkit import catalogue
from toolkit.mock.app.responses import ALL_METHODS, Handler, error, fhir, outcome_bytes
from toolkit.mock.app.rooms import MockApp
from toolkit.mock.state import MockState

KNOWN_TYPES = frozenset(catalogue.RESOURCES)


OPERATIONS = frozenset(
    {"/main/Appointment/$find", "/main/Appointment/$book", *catalogue.EXPORT_IDS.values()}
)


def route_key(path: str) -> str:
    """The route template a path counts under in the statistics.

    Known resource types keep their name (``/main/Appointment/{id}``); everything
    else folds into a handful of keys, so that any number of distinct paths costs
    a bounded number of counters.
    """
    if path in ("/main/oauth/token", catalogue.METADATA_PATH) or path in OPERATIONS:
        return path
    parts = path.split("/")
    if len(parts) < 3 or parts[0] != "" or parts[1] != "main":
        return "(outside /main)"
    rtype = parts[2] if parts[2] in KNOWN_TYPES else "{unknown type}"
    if len(parts) == 3:
        return f"/main/{rtype}"
    if len(parts) == 4:
        return f"/main/{rtype}/" if parts[3] == "" else f"/main/{rtype}/{{id}}"
    return "/main/(deeper path)"


class Gate:
    """Pure ASGI wrapper: User-Agent check (403), a virtual-clock ``Date``, statistics.

    Every response gets a ``Date`` header from the mock's virtual clock (the server
    time a client should note before a walk), in place of uvicorn's real-time one.
    """

    def __init__(self, app: ASGIApp, state: MockState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        counted = not path.startswith("/main/_test/")
        status_seen = 500
        state = self.state

        async def dated_send(message: Message) -> None:
            nonlocal status_seen
            if message["type"] == "http.response.start":
                status_seen = message["status"]
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"date"]
                headers.append((b"date", formatdate(state.now(), usegmt=True).encode()))
                message = {**message, "headers": headers}
            await send(message)

        has_agent = any(k == b"user-agent" and v.strip() for k, v in scope["headers"])
        try:
            if not has_agent:
                content = outcome_bytes("forbidden", "a User-Agent header is required")
                await fhir(content, 403)(scope, receive, dated_send)
            else:
                await self.app(scope, receive, dated_send)
        finally:
            if counted:
                state.record(route_key(path), status_seen)


def create_app(state: MockState) -> ASGIApp:
    """The ASGI application serving ``state``."""
    mock = MockApp(state)

    def by_method(
        table: dict[str, Handler], *, is_list: bool = False
    ) -> Callable[[Request], Awaitable[Response]]:
        guarded = {
            m: mock.guarded(h, counts_as_list=is_list and m == "GET") for m, h in table.items()
        }
        return _dispatch(guarded)

    async def token(request: Request) -> Response:
        if request.method != "POST":
            return error(405, "not-supported", "the token endpoint takes POST", {"allow": "POST"})
        return await mock.token(request)

    routes = [
        Route("/main/oauth/token", token, methods=ALL_METHODS),
        Route("/main/_test/{action:path}", mock.control, methods=ALL_METHODS),
        Route("/main/Appointment/$find", by_method({"GET": mock.find}), methods=ALL_METHODS),
        Route("/main/Appointment/$book", by_method({"POST": mock.book}), methods=ALL_METHODS),
        Route(catalogue.METADATA_PATH, by_method({"GET": mock.metadata}), methods=ALL_METHODS),
        *(
            Route(path, by_method({"GET": mock.export_ids}), methods=ALL_METHODS)
            for path in catalogue.EXPORT_IDS.values()
        ),
        Route(
            "/main/{rtype}",
            by_method({"GET": mock.list_, "POST": mock.create}, is_list=True),
            methods=ALL_METHODS,
        ),
        Route("/main/{rtype}/", by_method({"POST": mock.create}), methods=ALL_METHODS),
        Route(
            "/main/{rtype}/{rid}",
            by_method({"GET": mock.read, "PATCH": mock.patch}),
            methods=ALL_METHODS,
        ),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={
            404: _not_found,
            HTTPException: _http_error,
            500: _server_error,
            Exception: _server_error,
        },
    )
    app.router.redirect_slashes = False
    return Gate(app, state)


def _dispatch(
    guarded: dict[str, Callable[[Request], Awaitable[Response]]],
) -> Callable[[Request], Awaitable[Response]]:
    """One endpoint answering each method with its handler, 405 (with ``Allow``) otherwise."""
    if "GET" in guarded:
        guarded["HEAD"] = guarded["GET"]  # uvicorn sends the headers without the body

    async def endpoint(request: Request) -> Response:
        handler = guarded.get(request.method)
        if handler is None:
            allow = ", ".join(sorted(guarded))
            return error(
                405,
                "not-supported",
                f"{request.method} is not allowed on {request.url.path}",
                {"allow": allow},
            )
        return await handler(request)

    return endpoint


async def _not_found(request: Request, exc: Exception) -> Response:
    return error(404, "not-found", f"nothing at {request.url.path[:200]}")


async def _http_error(request: Request, exc: Exception) -> Response:
    # Starlette's own refusals (a method outside a route's list, a bad request):
    # an OperationOutcome like every other error, never text/plain.
    status = exc.status_code if isinstance(exc, HTTPException) else 400
    detail = exc.detail if isinstance(exc, HTTPException) else "bad request"
    headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else None
    return error(status, "not-supported" if status == 405 else "invalid", str(detail), headers)


async def _server_error(request: Request, exc: Exception) -> Response:
    return error(500, "exception", "the mock failed to handle this request")
