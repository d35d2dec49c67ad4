"""The receiving ASGI app: who may post, what is refused, and the durable intake before 202."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import orjson

from toolkit.webhooks.events import (
    MEDIA_TYPES,
    Event,
    NotificationError,
    note,
    parse_notification,
)
from toolkit.webhooks.queue import _outcome

if TYPE_CHECKING:
    from toolkit.webhooks.listener import Listener

_FORWARDED = ("forwarded", "x-forwarded-for", "x-real-ip", "x-forwarded-host")


def make_app(listener: Listener) -> Any:
    """The receiver: ``GET /status`` (loopback only) and a POST on any path."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def status(request: Request) -> Response:
        return _status(listener, request)

    async def receive(request: Request) -> Response:
        refusal = _refusal(listener, request)
        if refusal is None:
            return await _receive(listener, request)
        listener.stats.refused += 1
        return refusal

    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    return Starlette(
        routes=[
            Route("/status", status, methods=["GET"]),
            Route("/{path:path}", receive, methods=methods),
        ]
    )


def _status(listener: Listener, request: Any) -> Any:
    """``GET /status``: the listener's status, to a loopback caller that no proxy forwarded."""
    from starlette.responses import Response

    client = request.client.host if request.client else ""
    proxied = any(name in request.headers for name in _FORWARDED)
    if not _is_loopback(client) or proxied:
        # Behind a reverse proxy every caller is 127.0.0.1: a forwarding header
        # says the call came from outside, and the status is for the operator.
        return _outcome(404, "not-found", "no such endpoint")
    body = orjson.dumps(listener.status(), option=orjson.OPT_INDENT_2)
    return Response(body, media_type="application/json")


async def _receive(listener: Listener, request: Any) -> Any:
    """A notification that passed :func:`_refusal`: parsed, queued durably, then 202."""
    from starlette.requests import ClientDisconnect

    try:
        # the wire protocol has already refused a body over the cap (413)
        body = await request.body()
    except ClientDisconnect:
        listener.stats.refused += 1
        return _outcome(400, "incomplete", "the body was not sent in full")
    try:
        events = parse_notification(body)
    except NotificationError as exc:
        listener.stats.refused += 1
        note(logging.WARNING, "refused a webhook body: %s", exc)
        return _outcome(400, "structure", f"not a history Bundle notification: {exc}")
    kept = _storable(listener, events)
    if kept:
        refusal = await _enqueue(listener, kept)
        if refusal is not None:
            listener.stats.refused += 1
            return refusal
    listener.stats.received += 1
    text = f"queued {len(kept)} event(s)" + (
        f"; {len(events) - len(kept)} of a type pmtk keeps no table of, not applied"
        if len(kept) != len(events)
        else ""
    )
    return _outcome(202, "informational", text, severity="information")


def _is_loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _refusal(listener: Listener, request: Any) -> Any:
    """The answer to a call refused before its body is read (method, auth, media, state)."""
    if request.method != "POST":
        # OPTIONS too, with no CORS header: a browser's preflight fails, so a page
        # cannot post the JSON the receiver requires.
        return _outcome(405, "not-supported", "webhooks are delivered with POST")
    auth = listener.auth_header
    if auth is not None and not auth.matches(request.headers.getlist(auth.name)):
        note(logging.WARNING, "refused a webhook without the right %s header", auth.name)
        return _outcome(401, "login", f"missing or wrong {auth.name} header")
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in MEDIA_TYPES:
        shown = repr(media[:60]) if media else "none"
        return _outcome(
            415,
            "not-supported",
            f"the body must be sent as Content-Type application/json (or application/fhir+json), "
            f"not {shown}",
        )
    busy = listener.unavailable()
    if busy is not None:
        text, wait = busy
        response = _outcome(503, "transient", text)
        response.headers["retry-after"] = str(wait)
        return response
    return None


def _storable(listener: Listener, events: list[Event]) -> list[Event]:
    """The events of types pmtk has a view of; the others are counted and logged."""
    kept: list[Event] = []
    for event in events:
        if event.resource_type in listener.viewed:
            kept.append(event)
            continue
        listener.stats.ignored += 1
        note(
            logging.WARNING,
            "accepted %s/%s (%s) but not applied: pmtk keeps no %s table",
            event.resource_type,
            event.id,
            event.action or "change",
            event.resource_type,
        )
    return kept


async def _enqueue(listener: Listener, kept: list[Event]) -> Any:
    """Queue the events durably and wake the worker; the answer refusing them otherwise."""
    from starlette.concurrency import run_in_threadpool

    from toolkit.store.layout import now_iso as _now_iso

    try:
        # the fsyncs run on a worker thread, so other calls are not held up
        await run_in_threadpool(listener.queue.put, kept, _now_iso())
    except OSError as exc:
        listener.record_error("writing the event queue failed", exc)
        response = _outcome(503, "transient", "the event could not be stored; retry later")
        response.headers["retry-after"] = "10"
        return response
    listener.stats.events_queued += len(kept)
    listener.wake.set()
    return None
