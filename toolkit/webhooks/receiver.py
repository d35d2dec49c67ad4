"""The receiving ASGI app: who may post, what is refused, and the durable intake before 202."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import orjson

from toolkit import catalogue
from toolkit.webhooks.events import (
    MEDIA_TYPES,
    Delivery,
    Event,
    NotificationError,
    note,
    parse_delivery,
)
from toolkit.webhooks.queue import outcome_response

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
        misdirected = _misdirected(listener, request)
        if misdirected is not None:
            listener.stats.refused += 1
            return misdirected
        return _status(listener, request)

    async def receive(request: Request) -> Response:
        refusal = _misdirected(listener, request) or _refusal(listener, request)
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


_LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


def split_host(value: str) -> tuple[str, int | None] | None:
    """``("name", port or None)`` of a ``Host`` header value (lower case, IPv6 without
    brackets); ``None`` when it is not one."""
    value = value.strip().lower()
    if not value or any(c in value for c in " /\\@?#"):
        return None
    if value.startswith("["):
        name, sep, rest = value[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:]
    elif value.count(":") > 1:
        return None
    else:
        name, _, port_text = value.partition(":")
    if port_text and not (port_text.isdigit() and len(port_text) <= 5):
        return None
    return name.rstrip("."), int(port_text) if port_text else None


def served_host(listener: Listener, value: str) -> bool:
    """Whether a ``Host`` header names this receiver (DNS rebinding defence).

    Accepted: the bound address (and, bound to loopback, ``localhost``, ``127.0.0.1``
    and ``::1``) with the bound port or none; a name given as a public host, with
    any port (``name``) or exactly the one given (``name:port``).
    """
    parsed = split_host(value)
    if parsed is None:
        return False
    name, port = parsed
    bound = listener.bind_host.strip("[]").lower()
    # bound to loopback or to every address (0.0.0.0, ::): this machine's own names too
    unspecified = bound in ("0.0.0.0", "::")
    local = {bound} | (_LOOPBACK_NAMES if unspecified or _is_loopback_name(bound) else set())
    if name in local and port in (None, listener.port):
        return True
    for public in listener.public_hosts:
        wanted = split_host(public)
        if wanted is not None and wanted[0] == name and wanted[1] in (None, port):
            return True
    return False


def _is_loopback_name(host: str) -> bool:
    return host == "localhost" or _is_loopback(host)


def _misdirected(listener: Listener, request: Any) -> Any:
    """421 for a call whose ``Host`` this receiver does not serve (a rebound DNS name)."""
    value = request.headers.get("host", "")
    if served_host(listener, value):
        return None
    note(logging.WARNING, "refused a call for host %r: not a host this receiver serves", value[:80])
    return outcome_response(
        421,
        "forbidden",
        "this receiver does not serve that Host (give the name with --public-host)",
    )


def _status(listener: Listener, request: Any) -> Any:
    """``GET /status``: the listener's status, to a loopback caller that no proxy
    forwarded and that carries the authentication header (when one is set)."""
    from starlette.responses import Response

    client = request.client.host if request.client else ""
    proxied = any(name in request.headers for name in _FORWARDED)
    if not _is_loopback(client) or proxied:
        # Behind a reverse proxy every caller is 127.0.0.1: a forwarding header
        # says the call came from outside, and the status is for the operator.
        return outcome_response(404, "not-found", "no such endpoint")
    auth = listener.auth_header
    if auth is not None and not auth.matches(request.headers.getlist(auth.name)):
        listener.stats.refused += 1
        return outcome_response(401, "login", f"missing or wrong {auth.name} header")
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
        return outcome_response(400, "incomplete", "the body was not sent in full")
    try:
        delivery = parse_delivery(body)
    except NotificationError as exc:
        listener.stats.refused += 1
        note(logging.WARNING, "refused a webhook body: %s", exc)
        return outcome_response(400, "structure", f"not a history Bundle notification: {exc}")
    return await _admit(listener, body, delivery)


async def _admit(listener: Listener, body: bytes, delivery: Delivery) -> Any:
    """Queue the events not queued before (every event once), then 202.

    Each event is claimed in the event log before it is queued and confirmed after
    the queue's fsync; a copy of it arriving meanwhile waits for that outcome. When
    queueing fails the claims are released: the sender retries, nothing is lost.
    """
    from starlette.concurrency import run_in_threadpool

    log = listener.events
    events = delivery.events
    keys = log.keys(body, delivery.subscription, [e.event_number for e in events])
    fresh, waits = log.claim(keys)
    while waits:  # the same event is being queued by another call: its outcome decides
        await run_in_threadpool(_wait_for, waits)
        fresh, waits = log.claim(keys)
    claimed = [key for key, new in zip(keys, fresh, strict=True) if new]
    confirmed = False
    try:
        new_events = [event for event, new in zip(events, fresh, strict=True) if new]
        replayed = len(events) - len(new_events)
        kept = _storable(listener, new_events)
        if kept:
            refusal = await _enqueue(listener, kept)
            if refusal is not None:
                listener.stats.refused += 1
                return refusal
        announced = (delivery.subscription, delivery.events_since_start)
        types = [event.resource_type for event in new_events]
        await run_in_threadpool(log.confirm, claimed, types, announced)
        confirmed = True
    finally:
        if not confirmed:
            log.release(claimed)
    listener.stats.received += 1
    if replayed:
        log.duplicates += replayed
        note(logging.INFO, "%d event(s) already queued before: not queued again", replayed)
    text = f"queued {len(kept)} event(s)"
    if len(kept) != len(new_events):
        text += f"; {len(new_events) - len(kept)} of a type pmtk keeps no table of, not applied"
    if replayed:
        text += f"; {replayed} already received, not queued again"
    return outcome_response(202, "informational", text, severity="information")


def _wait_for(claims: list[Any]) -> None:
    for claim in claims:
        claim.done.wait(60)


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
        return outcome_response(405, "not-supported", "webhooks are delivered with POST")
    auth = listener.auth_header
    if auth is not None and not auth.matches(request.headers.getlist(auth.name)):
        note(logging.WARNING, "refused a webhook without the right %s header", auth.name)
        return outcome_response(401, "login", f"missing or wrong {auth.name} header")
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in MEDIA_TYPES:
        shown = repr(media[:60]) if media else "none"
        return outcome_response(
            415,
            "not-supported",
            f"the body must be sent as Content-Type application/json (or application/fhir+json), "
            f"not {shown}",
        )
    busy = listener.unavailable()
    if busy is not None:
        text, wait = busy
        response = outcome_response(503, "transient", text)
        response.headers[catalogue.RETRY_AFTER_HEADER] = str(wait)
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
        response = outcome_response(503, "transient", "the event could not be stored; retry later")
        response.headers[catalogue.RETRY_AFTER_HEADER] = "10"
        return response
    listener.stats.events_queued += len(kept)
    listener.clear_error("writing the event queue failed")
    listener.wake.set()
    return None
