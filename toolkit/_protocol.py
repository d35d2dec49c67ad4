"""uvicorn's httptools protocol with the limits it lacks, shared by the mock and ``pmtk listen``.

uvicorn 0.54 (``uvicorn/protocols/http/httptools_impl.py``) has no limit on the
size of a request head with httptools (``h11_max_incomplete_event_size`` only
applies to the h11 parser), starts no timer before a connection's first request
or while a request is half sent (``timeout_keep_alive`` only runs between
requests), counts a connection against ``limit_concurrency`` only once its head is
complete (so idle sockets pile up and hold file descriptors), has no body cap, and
answers a parse error, a 500 or ``limit_concurrency``'s 503 in ``text/plain``.
:func:`guarded_protocol` returns a subclass that:

* counts the bytes of the request line and headers and, past ``max_header_bytes``,
  answers **431** and closes;
* gives a connection ``header_timeout`` seconds from its first byte (or from
  opening) to finish a request head, and a request ``body_timeout`` seconds from
  the end of its head to finish its body; otherwise it answers **408** (when no
  response has started) and closes the connection;
* with ``max_body_bytes``, answers **413** to a body announced (``Content-Length``)
  or streamed past it, before the application sees more of it;
* with ``max_connections``, answers **503** (``Retry-After``) and closes any
  connection opened beyond it, at once, so idle sockets cannot exhaust the
  process's file descriptors;
* answers malformed HTTP with **400**, and the concurrency limit with **503**, as
  OperationOutcomes (``application/fhir+json``).

This is the one implementation of these limits: the mock (``toolkit/mock/server.py``)
and the webhook receiver (``toolkit/webhooks/command.py``) both serve with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from email.utils import formatdate
from typing import Any

import orjson
import uvicorn
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from toolkit import catalogue

_FHIR_JSON = catalogue.FHIR_JSON.encode()
_RETRY_AFTER = catalogue.RETRY_AFTER_HEADER.encode()

__all__ = ["Limits", "guarded_config", "guarded_protocol"]

REASONS = {
    400: b"Bad Request",
    408: b"Request Timeout",
    413: b"Content Too Large",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}

DRAIN_BYTES = 1024 * 1024
"""Bytes of a refused body read and discarded so the sender can read the 413 (then closed)."""


class Limits:
    """The connection limits of one server (see ``docs/mock.md`` and ``docs/webhooks.md``).

    Parameters
    ----------
    max_header_bytes
        Request line plus headers; more is answered 431.
    header_timeout, body_timeout
        Seconds to send a request head, and then its body (408 beyond).
    clock
        The ``Date`` of the protocol's own answers (the mock's virtual clock).
    max_body_bytes
        Largest request body (413 beyond); ``None`` leaves it to the application.
    max_connections
        Open connections at most; one more is answered 503 and closed. ``None``: no cap.
    """

    __slots__ = (
        "body_timeout",
        "clock",
        "header_timeout",
        "max_body_bytes",
        "max_connections",
        "max_header_bytes",
    )

    def __init__(
        self,
        *,
        max_header_bytes: int,
        header_timeout: float,
        body_timeout: float,
        clock: Callable[[], float],
        max_body_bytes: int | None = None,
        max_connections: int | None = None,
    ) -> None:
        self.max_header_bytes = max_header_bytes
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.clock = clock
        self.max_body_bytes = max_body_bytes
        self.max_connections = max_connections


def _outcome(code: str, text: str) -> bytes:
    issue = {"severity": "error", "code": code, "diagnostics": text, "details": {"text": text}}
    return orjson.dumps({"resourceType": "OperationOutcome", "issue": [issue]})


def raw_response(
    status: int, code: str, text: str, clock: Callable[[], float], *, retry_after: int = 0
) -> bytes:
    """A complete HTTP/1.1 response with an OperationOutcome that closes the connection."""
    body = _outcome(code, text)
    head = [
        b"HTTP/1.1 %d %s\r\n" % (status, REASONS[status]),
        b"content-type: " + _FHIR_JSON + b"\r\n",
        b"content-length: %d\r\n" % len(body),
        b"date: " + formatdate(clock(), usegmt=True).encode() + b"\r\n",
    ]
    if retry_after:
        head.append(b"%s: %d\r\n" % (_RETRY_AFTER, retry_after))
    head.append(b"connection: close\r\n\r\n")
    return b"".join(head) + body


async def _busy(scope: Any, receive: Any, send: Any) -> None:
    content = _outcome("transient", "the server is handling too many requests; retry shortly")
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", _FHIR_JSON),
                (b"content-length", str(len(content)).encode()),
                (_RETRY_AFTER, b"1"),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": content, "more_body": False})


class _Refused(Exception):
    """Raised inside a parser callback; httptools turns it into a parser error."""


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with deadlines, size caps and OperationOutcome answers.

    ``_limits`` is set on the subclass :func:`guarded_protocol` makes for one server.
    """

    _limits: Limits

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0
        self._body_bytes = 0
        self._too_large = False
        self._answered = False  # the protocol wrote its own answer; the parser is done
        self._drained = 0
        self._deadline: asyncio.TimerHandle | None = None

    # -------------------------------------------------------------- timers
    def _arm(self, seconds: float, what: str) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired, what)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, what: str) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if not self._answered and (self.cycle is None or not self.cycle.response_started):
            text = f"the request {what} was not received within the time limit"
            self.transport.write(raw_response(408, "timeout", text, self._limits.clock))
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        cap = self._limits.max_connections
        if cap is not None and len(self.connections) > cap:
            # Refused before a byte is read: the socket (a file descriptor) is freed now,
            # not after the head deadline.
            text = f"the server has {cap} connections open; retry shortly"
            self._answered = True
            transport.write(raw_response(503, "transient", text, self._limits.clock, retry_after=1))
            transport.close()
            return
        self._arm(self._limits.header_timeout, "head")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._answered:
            # A refused body: read and dropped (so the sender gets to read the answer),
            # up to DRAIN_BYTES, then the connection is closed.
            self._drained += len(data)
            if self._drained > DRAIN_BYTES:
                self.transport.close()
            return
        super().data_received(data)

    def _refuse(self, status: int, code: str, text: str) -> None:
        """Write the protocol's own answer, stop parsing, drain for a moment, then close."""
        self._answered = True
        if self.cycle is not None:
            # the application's request sees a disconnect, and its answer is dropped
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        if self.cycle is None or not self.cycle.response_started:
            self.transport.write(raw_response(status, code, text, self._limits.clock))
        self._arm(min(self._limits.body_timeout, 2.0), "body")
        raise _Refused

    # -------------------------------------------------------------- parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0
        self._body_bytes = 0
        if self._deadline is None:
            self._arm(self._limits.header_timeout, "head")

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self._limits.max_header_bytes:
            self._too_large = True
            raise _Refused

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)
        cap = self._limits.max_body_bytes
        if cap is not None and name.lower() == b"content-length" and value.strip().isdigit():
            declared = int(value.strip())
            if declared > cap:
                self._refuse(413, "too-costly", f"the body ({declared} bytes) exceeds {cap} bytes")

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()
        if self.cycle is not None and self.cycle.more_body:
            self._arm(self._limits.body_timeout, "body")

    def on_body(self, body: bytes) -> None:
        cap = self._limits.max_body_bytes
        self._body_bytes += len(body)
        if cap is not None and self._body_bytes > cap:
            self._refuse(413, "too-costly", f"the body exceeds {cap} bytes")
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    # ------------------------------------------------ uvicorn's plain-text answers
    def send_400_response(self, msg: str) -> None:
        if self._answered:
            return  # the refusal is written; the drain timer closes the connection
        if self._too_large:
            limit = self._limits.max_header_bytes
            text = f"the request line and headers are larger than {limit} bytes"
            content = raw_response(431, "too-costly", text, self._limits.clock)
        else:
            text = "the request is not valid HTTP/1.1"
            content = raw_response(400, "structure", text, self._limits.clock)
        self.transport.write(content)
        self.transport.close()

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        if app is service_unavailable:
            app = _busy
        super()._start_asgi_task(cycle, app)


def guarded_protocol(limits: Limits) -> type[HttpToolsProtocol]:
    """An :class:`HttpToolsProtocol` subclass enforcing ``limits`` (pass it as ``http=``)."""
    return type("GuardedProtocol", (GuardedProtocol,), {"_limits": limits})


def guarded_config(app: Any, limits: Limits, **settings: Any) -> uvicorn.Config:
    """The uvicorn settings the mock and ``pmtk listen`` share, for ``app``.

    httptools with ``limits`` (:func:`guarded_protocol`; h11, if it is ever chosen,
    with the same head size), no access log, lifespan or ``Server`` header, and a 2 s
    graceful shutdown; ``settings`` gives the rest (host, port, log level, keep-alive).
    """
    return uvicorn.Config(
        app,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=2,
        http=guarded_protocol(limits),
        h11_max_incomplete_event_size=limits.max_header_bytes,
        server_header=False,
        **settings,
    )
