"""The guarded transport: the last layer of the request pipeline, below httpx's auth.

:class:`GuardedTransport` wraps the transport that does the I/O. Below auth, so
that the token request and every 401 replay pass through it too, it checks the
origin again (httpx would otherwise attach the bearer token to whatever host a
link names), bounds the whole exchange by one **deadline** (connect, send,
headers and the body, read under our own clock: httpx's timeouts bound each
phase, so a server dripping a byte a second never times out), and decodes
``gzip``/``deflate`` itself, in bounded steps, under a **size cap** on the
*decoded* body, so a compression bomb costs at most the cap. The layers above it
are :mod:`toolkit.http`'s.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from toolkit.errors import DeadlineExceeded, ResponseTooLarge
from toolkit.origin import Origin, display_url

__all__ = [
    "ACCEPT_ENCODING",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_TIMEOUT",
    "GuardedTransport",
]

DEFAULT_TIMEOUT = 30.0
"""Seconds one request may take in all, body included."""

DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
"""Cap on one decoded response body: a page of 100 records is well under 1 MiB."""

ACCEPT_ENCODING = "gzip, deflate"
"""The encodings :class:`GuardedTransport` decodes (and so the only ones asked for)."""

_STEP = 64 * 1024  # decoded bytes produced per decompression step


class _Decoder:
    """``gzip``/``deflate``/identity, decoded in steps of at most :data:`_STEP` bytes."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._z: Any = None
        if encoding in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif encoding == "deflate":
            self._z = zlib.decompressobj()
            self._raw_fallback = True

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._z is None:
            yield data
            return
        pending = data
        while pending:
            try:
                out = self._z.decompress(pending, _STEP)
            except zlib.error:
                if self.encoding == "deflate" and getattr(self, "_raw_fallback", False):
                    # "deflate" is sent both zlib-wrapped and raw; try raw once.
                    self._raw_fallback = False
                    self._z = zlib.decompressobj(-zlib.MAX_WBITS)
                    continue
                raise
            self._raw_fallback = False
            pending = self._z.unconsumed_tail
            if out:
                yield out
            elif not pending:
                break

    def flush(self) -> bytes:
        return self._z.flush() if self._z is not None else b""


class _GuardedStream(httpx.SyncByteStream):
    """The body of one response, decoded, under the request's deadline and size cap."""

    def __init__(
        self,
        inner: httpx.SyncByteStream,
        *,
        url: str,
        deadline: float,
        limit: float,
        max_bytes: int,
        encoding: str,
        timeouts: dict[str, float | None],
        clock: Callable[[], float],
    ) -> None:
        self._inner = inner
        self._url = url
        self._deadline = deadline
        self._limit = limit
        self._max = max_bytes
        self._decoder = _Decoder(encoding)
        self._timeouts = timeouts
        self._clock = clock

    def _too_slow(self) -> DeadlineExceeded:
        msg = (
            f"{self._url}: no complete answer within the {self._limit:g} s "
            "deadline (timeout=, body included); stopped reading"
        )
        return DeadlineExceeded(msg, url=self._url, limit=self._limit)

    def _left(self) -> float:
        left = self._deadline - self._clock()
        if left <= 0:
            raise self._too_slow()
        return left

    def __iter__(self) -> Iterator[bytes]:
        size = 0
        # httpcore reads the read timeout when the body read starts: shrink it to
        # what is left of the deadline, so no single read waits past it.
        self._timeouts["read"] = min(self._timeouts.get("read") or self._limit, self._left())
        try:
            for raw in self._inner:
                self._left()
                for chunk in self._decoder.feed(raw):
                    size += len(chunk)
                    if size > self._max:
                        msg = (
                            f"{self._url}: the response body passed the cap of "
                            f"{self._max:,} bytes decoded (max_response_bytes=); stopped reading"
                        )
                        raise ResponseTooLarge(msg, url=self._url, limit=self._max)
                    yield chunk
                    self._left()
            tail = self._decoder.flush()
            if size + len(tail) > self._max:
                msg = f"{self._url}: the response body passed the cap of {self._max:,} bytes"
                raise ResponseTooLarge(msg, url=self._url, limit=self._max)
            if tail:
                yield tail
        except zlib.error as exc:
            msg = f"{self._url}: the {self._decoder.encoding} body could not be decoded ({exc})"
            raise httpx.DecodingError(msg) from None
        except httpx.TimeoutException:
            if self._clock() >= self._deadline - 0.05:
                raise self._too_slow() from None
            raise

    def close(self) -> None:
        self._inner.close()


class GuardedTransport(httpx.BaseTransport):
    """Origin check, whole-request deadline and decoded-size cap around a transport.

    Parameters
    ----------
    origin
        The only origin requests may go to.
    inner
        The transport that does the I/O (default :class:`httpx.HTTPTransport`).
    timeout
        Seconds for the whole request, body included.
    max_response_bytes
        Cap on the decoded body of one response.
    clock
        Monotonic clock (the deadline is real time even when pacing is faked).
    """

    def __init__(
        self,
        origin: Origin,
        inner: httpx.BaseTransport | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not timeout > 0:
            msg = f"timeout must be a positive number of seconds, got {timeout!r}"
            raise ValueError(msg)
        if max_response_bytes < 1:
            msg = f"max_response_bytes must be positive, got {max_response_bytes!r}"
            raise ValueError(msg)
        self.origin = origin
        self.inner = inner if inner is not None else httpx.HTTPTransport()
        self.timeout = float(timeout)
        self.max_response_bytes = max_response_bytes
        self._clock = clock

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.origin.check(request.url, what="request to")
        start = self._clock()
        deadline = start + self.timeout
        phases = dict(request.extensions.get("timeout") or {})
        timeouts: dict[str, float | None] = {
            k: min(v, self.timeout) if isinstance(v, int | float) else self.timeout
            for k, v in ((p, phases.get(p)) for p in ("connect", "read", "write", "pool"))
        }
        request.extensions = {**request.extensions, "timeout": timeouts}
        url = display_url(request.url)
        try:
            response = self.inner.handle_request(request)
        except httpx.TimeoutException:
            if self._clock() >= deadline - 0.05:
                msg = f"{url}: no answer within the {self.timeout:g} s deadline (timeout=)"
                raise DeadlineExceeded(msg, url=url, limit=self.timeout) from None
            raise
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("identity", "", "gzip", "x-gzip", "deflate"):
            response.close()
            msg = f"{url}: unsupported Content-Encoding {encoding[:40]!r}"
            raise httpx.DecodingError(msg)
        # The body reaches httpx already decoded, so it must not decode it again.
        headers = [
            (k, v)
            for k, v in response.headers.multi_items()
            if k.lower() not in ("content-encoding", "content-length")
        ]
        assert isinstance(response.stream, httpx.SyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=headers,
            stream=_GuardedStream(
                response.stream,
                url=url,
                deadline=deadline,
                limit=self.timeout,
                max_bytes=self.max_response_bytes,
                encoding=encoding,
                timeouts=timeouts,
                clock=self._clock,
            ),
            extensions=response.extensions,
            request=request,
        )

    def close(self) -> None:
        self.inner.close()
