"""The request pipeline: every HTTP exchange of a :class:`toolkit.Client`, in layers.

A request travels through these layers, outermost first; each does one thing:

1. **origin guard** (:meth:`Pipeline.url`): the path or link is resolved
   against the base URL and refused (:class:`~toolkit.errors.ForeignLink`,
   before a byte is sent) unless it stays on the configured
   :class:`~toolkit.origin.Origin`; ids are checked by
   :func:`~toolkit.origin.safe_id` before they become a path segment;
2. **retries** (:meth:`Pipeline.call`): stamina repeats transport errors, cut-off
   bodies and 502/503/504 for idempotent requests, and only never-sent requests
   otherwise (a write that may have landed is
   :class:`~toolkit.errors.OutcomeUnknown`);
3. **answers** (:meth:`Pipeline._answer`): a redirect is followed only for a GET
   to the same origin (at most :data:`MAX_REDIRECTS` hops, the body of a 3xx is
   never data; any other 3xx is :class:`~toolkit.errors.RedirectRefused`), an
   error status becomes its typed :class:`~toolkit.errors.ApiError`, a 2xx body is
   decoded once;
4. **pacing** (:meth:`Pipeline._paced`, :class:`toolkit.throttle.Throttle`): the
   client-side sliding window, the server's rate-limit headers, and 429 answers
   waited out (the server did not act on them);
5. **auth** (:class:`toolkit.auth.ClientCredentialsAuth`, run by httpx): the
   bearer token, fetched lazily, and one replay on a 401;
6. **guarded transport** (:class:`~toolkit.transport.GuardedTransport`, in its
   own module): below httpx's auth, so that the token request and every 401
   replay pass through it too, it checks the origin again (httpx would otherwise
   attach the bearer token to whatever host a link names), bounds the whole
   exchange by one **deadline** (connect, send, headers and the body, read under
   our own clock: httpx's timeouts bound each phase, so a server dripping a byte
   a second never times out), and decodes ``gzip``/``deflate`` itself, in bounded
   steps, under a **size cap** on the *decoded* body, so a compression bomb costs
   at most the cap.

Whatever fails below the pipeline leaves it as a :class:`~toolkit.errors.PmtkError`
with the library's exception as its ``__cause__``: a name that does not resolve
or a refused port is :class:`~toolkit.errors.ConnectionFailed` at once (not
retried; the operating system's reason and the host in the message), an answer
that is not valid HTTP or will not decode is :class:`~toolkit.errors.ProtocolError`,
and a local ``OSError`` is a :class:`~toolkit.errors.TransportError`.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import stamina

from toolkit import catalogue, redaction, retries
from toolkit.auth import ClientCredentialsAuth, outcome_details
from toolkit.config import Settings
from toolkit.errors import (
    ApiError,
    ConfigurationError,
    ConnectionFailed,
    DeadlineExceeded,
    ForeignLink,
    OutcomeUnknown,
    PmtkError,
    ProtocolError,
    RateLimited,
    RedirectRefused,
    ResponseTooLarge,
    ServerError,
    TransportError,
    error_for_status,
)
from toolkit.origin import DEFAULT_PORTS, Origin, display_url, safe_id
from toolkit.throttle import RETRY_STATUSES, RetryPolicy, Throttle, parse_retry_after
from toolkit.transport import (
    ACCEPT_ENCODING,
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_TIMEOUT,
    GuardedTransport,
)

# Origin and safe_id (toolkit.origin) and the guarded transport's names
# (toolkit.transport) were defined here first, and are still importable from here.
__all__ = [
    "ACCEPT_ENCODING",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_TIMEOUT",
    "MAX_REDIRECTS",
    "Counters",
    "GuardedTransport",
    "Origin",
    "Pipeline",
    "Reply",
    "api_error",
    "safe_id",
]

# The logger users configure for pmtk's requests; it kept its name when the pipeline
# moved here out of toolkit.client.
log = redaction.logger("toolkit.client")
retries.install()  # readable retry lines instead of bare "stamina.retry_scheduled"

MAX_REDIRECTS = 5
"""Same-origin redirects a GET follows before :class:`~toolkit.errors.RedirectRefused`."""

_FOLLOWED = frozenset({301, 302, 303, 307, 308})


# ---------------------------------------------------------------------- the policy layers

# Sent when the request may not have reached the server: always safe to repeat.
_UNSENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Worth repeating for an idempotent request (the answer was lost or cut off).
_TRANSIENT = (
    *_UNSENT,
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)

Params = Mapping[str, str] | Sequence[tuple[str, str]]
"""Query parameters as the pipeline takes them: a mapping or ordered pairs."""


class _CorruptBody(Exception):
    """A 2xx answer whose JSON body could not be read (for example cut off)."""


def _no_connection(exc: BaseException) -> OSError | None:
    """The OS error behind a connect failure that a retry would only repeat, if it is one.

    A name that does not resolve (:class:`socket.gaierror`) or a port that refuses
    (:class:`ConnectionRefusedError`): httpx chains them as httpcore's cause.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (socket.gaierror, ConnectionRefusedError)):
            return current
        current = current.__cause__ or current.__context__
    return None


def _retry_idempotent(exc: Exception) -> bool:
    if isinstance(exc, httpx.ConnectError) and _no_connection(exc) is not None:
        return False
    if isinstance(exc, (*_TRANSIENT, _CorruptBody)):
        return True
    return isinstance(exc, ServerError) and exc.status in RETRY_STATUSES


def _retry_unsent(exc: Exception) -> bool:
    if isinstance(exc, httpx.ConnectError) and _no_connection(exc) is not None:
        return False
    return isinstance(exc, _UNSENT)


def _query(params: Params | None) -> httpx.QueryParams | None:
    if params is None:
        return None
    pairs: list[tuple[str, str | int | float | bool | None]] = list(
        params.items() if isinstance(params, Mapping) else params
    )
    return httpx.QueryParams(pairs)


def _deadline(timeout: float | httpx.Timeout) -> float:
    """The whole-request deadline: ``timeout``, or the largest phase of a :class:`httpx.Timeout`."""
    if isinstance(timeout, httpx.Timeout):
        phases = [t for t in (timeout.connect, timeout.read, timeout.write, timeout.pool) if t]
        return max(phases) if phases else DEFAULT_TIMEOUT
    return float(timeout)


def api_error(response: httpx.Response, method: str) -> ApiError:
    """The typed :class:`~toolkit.errors.ApiError` of an error answer, with its OperationOutcome."""
    code, diagnostics, outcome = outcome_details(response)
    cls = error_for_status(response.status_code)
    return cls(
        response.status_code,
        method=method,
        url=str(response.request.url),
        code=code,
        diagnostics=diagnostics,
        outcome=outcome,
        media_type=response.headers.get("content-type", "").split(";")[0].strip().lower() or None,
    )


@dataclass(slots=True)
class Counters:
    """Requests sent and attempts repeated by one client, shared by its threads."""

    requests: int = 0
    retries: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, *, requests: int = 0, retries: int = 0) -> None:
        """Count ``requests`` more requests and ``retries`` more repeated attempts."""
        with self.lock:
            self.requests += requests
            self.retries += retries


@dataclass(frozen=True, slots=True)
class Reply:
    """A 2xx answer and its decoded JSON body (``None`` when not decoded or empty)."""

    response: httpx.Response
    data: Any


@dataclass(frozen=True, slots=True)
class _Call:
    """One request as the layers below the origin guard see it (the URL already checked)."""

    method: str
    url: str
    params: httpx.QueryParams | None
    content: bytes | None
    headers: Mapping[str, str]
    decode: bool
    idempotent: bool


class Pipeline:
    """The layers every request of one client goes through (see the module docstring).

    Parameters
    ----------
    settings
        The resolved address, credentials and user agent.
    requests_per_minute, timeout, max_response_bytes, transport, retry_policy, clock, sleep
        As for :class:`toolkit.Client`.

    Raises
    ------
    ConfigurationError
        When ``timeout`` or ``max_response_bytes`` is not positive.

    Attributes
    ----------
    origin, throttle, auth, retry_policy, counters
        The layers' state; :class:`toolkit.Client` exposes the first four.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        requests_per_minute: int | None,
        timeout: float | httpx.Timeout,
        max_response_bytes: int,
        transport: httpx.BaseTransport | None,
        retry_policy: RetryPolicy | None,
        clock: Callable[[], float] | None,
        sleep: Callable[[float], None] | None,
    ) -> None:
        self.base_url = settings.base_url
        self.origin = Origin.of(settings.base_url)
        try:
            guarded = GuardedTransport(
                self.origin,
                transport,
                timeout=_deadline(timeout),
                max_response_bytes=max_response_bytes,
            )
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        self.retry_policy = retry_policy or RetryPolicy()
        clock_fn = clock or time.monotonic
        self.throttle = Throttle(requests_per_minute, clock=clock_fn, sleep=sleep or time.sleep)
        self.auth = ClientCredentialsAuth(
            settings.token_url,
            settings.client_id,
            settings.client_secret,
            user_agent=settings.user_agent,
            clock=clock_fn,
        )
        self.counters = Counters()
        self.http = httpx.Client(
            auth=self.auth,
            transport=guarded,
            timeout=timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout),
            headers={
                "Accept": catalogue.FHIR_JSON,
                "User-Agent": settings.user_agent,
                "Accept-Encoding": ACCEPT_ENCODING,
            },
            follow_redirects=False,
        )

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()

    # ------------------------------------------------------------------ 1. origin guard

    def url(self, path: str) -> str:
        """The absolute URL of ``path``, checked against the origin before any request.

        An absolute URL, a ``//host`` link or anything with a backslash is resolved
        as a browser would and must stay on the configured origin
        (:class:`~toolkit.errors.ForeignLink` otherwise).
        """
        base = self.base_url + "/"
        if "://" in path or path.startswith("//") or "\\" in path:
            return self.origin.resolve(path, base, what="URL")
        if path.startswith(catalogue.API_PREFIX + "/") and self.base_url.endswith(
            catalogue.API_PREFIX
        ):
            path = path[len(catalogue.API_PREFIX) :]
        return self.origin.resolve(f"{self.base_url}/{path.lstrip('/')}", base, what="URL")

    def resolve_link(self, link: str, page_url: str) -> str:
        """A ``next`` link of the page at ``page_url``, resolved and checked against the origin."""
        return self.origin.resolve(link, page_url, what="next link")

    # ------------------------------------------------------------------ 2. retries

    def call(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        json: Any = None,
        content_type: str = "application/json",
        decode: bool = True,
        retry: bool | None = None,
    ) -> Reply:
        """Send one request through every layer; the :class:`Reply` of its 2xx answer.

        ``retry`` says whether a failure after sending may be retried; default:
        GET, HEAD and PATCH yes, POST no.
        """
        url = self.url(path)
        idempotent = method in ("GET", "HEAD", "PATCH") if retry is None else retry
        call = _Call(
            method,
            url,
            _query(params),
            orjson.dumps(json) if json is not None else None,
            {"Content-Type": content_type},
            decode,
            idempotent,
        )
        return self._retrying(call)

    def fetch_page(self, url: str, query: Params | None) -> tuple[httpx.Response, Any]:
        """A page of a list walk (:class:`toolkit.paging.Walk`): the response, its body decoded."""
        reply = self.call("GET", url, params=query)
        return reply.response, reply.data

    def _retrying(self, call: _Call) -> Reply:
        """Attempts of ``call`` under the retry policy; failures mapped to pmtk's errors."""
        policy = self.retry_policy
        attempts = 0
        try:
            for attempt in stamina.retry_context(
                on=_retry_idempotent if call.idempotent else _retry_unsent,
                attempts=policy.attempts,
                timeout=None,
                wait_initial=policy.wait_initial,
                wait_max=policy.wait_max,
                wait_jitter=policy.wait_jitter,
            ):
                with attempt:
                    attempts = attempt.num
                    if attempts > 1:
                        self.counters.add(retries=1)
                        log.info("%s %s: attempt %d", call.method, call.url, attempts)
                    return self._answer(call)
        except httpx.TransportError as exc:
            raise _transport_failure(call, exc, attempts) from exc
        except (httpx.HTTPError, httpx.StreamError, httpx.InvalidURL) as exc:
            # DecodingError (a broken gzip stream, an encoding not asked for) and the rest
            # of httpx's errors that are not transport errors: the answer is unreadable.
            msg = f"{call.method} {display_url(call.url)}: the answer could not be read: {exc}"
            if not call.idempotent:
                msg += "; the request was sent, so check whether the write landed before resending"
                raise OutcomeUnknown(msg) from exc
            raise ProtocolError(msg) from exc
        except OSError as exc:
            if isinstance(exc, PmtkError):  # pmtk's own errors that are also OSErrors
                raise
            msg = f"{call.method} {display_url(call.url)} failed locally: {exc}"
            raise TransportError(msg) from exc
        except (DeadlineExceeded, ResponseTooLarge) as exc:
            # Not retried: a server that drips or floods would do it again.
            if not call.idempotent:
                msg = (
                    f"{call.method} {call.url}: {exc}; the request was sent, so the outcome is "
                    "unknown; check whether the write landed before sending it again"
                )
                raise OutcomeUnknown(msg) from exc
            raise
        except _CorruptBody as exc:
            msg = f"{exc} (after {attempts} attempts)"
            raise TransportError(msg) from exc
        msg = f"{call.method} {call.url}: no attempt was made"  # stamina always makes one
        raise TransportError(msg)

    # ------------------------------------------------------------------ 3. answers

    def _answer(self, call: _Call) -> Reply:
        """One attempt: redirects followed or refused, an error status raised, a 2xx decoded."""
        response = self._paced(call)
        hops = 0
        while 300 <= response.status_code < 400:
            target = self._redirect(call, response, hops)
            hops += 1
            log.debug("%s %s -> %s %s", call.method, call.url, response.status_code, target)
            response = self._paced(dataclasses.replace(call, url=target, params=None))
        method, url = call.method, call.url
        if response.status_code >= 400:
            error = api_error(response, method)
            if not call.idempotent and response.status_code >= 500:
                msg = (
                    f"{method} {url} answered {response.status_code} after the request was "
                    "sent: the outcome is unknown; check whether the write landed before "
                    "sending it again"
                )
                raise OutcomeUnknown(msg) from error
            raise error
        data: Any = None
        if call.decode and response.content:
            try:
                data = orjson.loads(response.content)
            except orjson.JSONDecodeError as exc:
                if not call.idempotent:
                    msg = (
                        f"{method} {url} answered {response.status_code} with an unreadable "
                        "body: the write may have landed; check before sending it again"
                    )
                    raise OutcomeUnknown(msg) from exc
                msg = f"{method} {url}: the response body is not valid JSON (cut off?)"
                raise _CorruptBody(msg) from exc
        return Reply(response, data)

    def _redirect(self, call: _Call, response: httpx.Response, hops: int) -> str:
        """The URL a 3xx sends a GET to, or :class:`RedirectRefused`; its body is never read.

        Followed: 301, 302, 303, 307 and 308 answering a GET, to the configured
        origin, at most :data:`MAX_REDIRECTS` times. Refused: any other method (a
        write is not repeated elsewhere), another origin (credentials go nowhere
        else; nothing is sent there), too many hops, no ``Location``, other 3xx.
        """
        status = response.status_code
        here = str(response.request.url)
        location = response.headers.get("location")
        problem = None
        target = ""
        if location is None or not location.strip():
            problem = "it has no Location header"
        elif call.method != "GET":
            problem = f"only a GET is redirected; a {call.method} is not sent again elsewhere"
            if not call.idempotent:
                problem += " (the server may have applied it: check before sending it again)"
        elif status not in _FOLLOWED:
            problem = f"{status} is not a redirect pmtk follows (301, 302, 303, 307, 308)"
        elif hops >= MAX_REDIRECTS:
            problem = f"more than {MAX_REDIRECTS} redirects in a row"
        else:
            try:
                target = self.origin.resolve(location.strip(), here, what="redirect to")
            except ForeignLink:
                problem = f"it leads off the configured origin {self.origin}; nothing sent there"
        if problem is None:
            return target
        shown = display_url(location) if location else None
        raise RedirectRefused(
            status,
            method=call.method,
            url=here,
            diagnostics=f"redirect to {shown!r} refused: {problem}; its body is not data",
            location=shown,
        )

    # ------------------------------------------------------------------ 4. pacing

    def _paced(self, call: _Call) -> httpx.Response:
        """Send once, waiting out 429 answers (which the server did not act on)."""
        policy = self.retry_policy
        for n in range(policy.rate_limit_waits + 1):
            response = self._send(call)
            if response.status_code != 429:
                return response
            if n == policy.rate_limit_waits:
                break
            pause = self.throttle.on_rate_limited(response.headers, policy)
            log.info("%s %s answered 429; waiting %.1f s", call.method, response.request.url, pause)
        code, diagnostics, outcome = outcome_details(response)
        raise RateLimited(
            429,
            method=call.method,
            url=str(response.request.url),
            code=code,
            diagnostics=diagnostics or f"still rate limited after {policy.rate_limit_waits} waits",
            outcome=outcome,
            retry_after=parse_retry_after(response.headers.get(catalogue.RETRY_AFTER_HEADER)),
        )

    def _send(self, call: _Call) -> httpx.Response:
        """One request when the throttle allows it, through auth and the guarded transport."""
        self.throttle.acquire()
        self.counters.add(requests=1)
        request = self.http.build_request(
            call.method, call.url, params=call.params, content=call.content, headers=call.headers
        )
        sent_at = self.throttle.now()
        response = self.http.send(request)
        self.throttle.note_round_trip(self.throttle.now() - sent_at)
        log.debug("%s %s -> %s", call.method, request.url, response.status_code)
        self.throttle.observe(response.status_code, response.headers)
        return response


def _transport_failure(call: _Call, exc: httpx.TransportError, attempts: int) -> PmtkError:
    """What a transport error that outlived the retries means to the caller.

    The message keeps the library's (and so the operating system's) words.
    """
    reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if not call.idempotent and not isinstance(exc, _UNSENT):
        msg = (
            f"{call.method} {call.url} failed after the request was sent "
            f"({reason}): the outcome is unknown; check whether the write "
            "landed before sending it again"
        )
        return OutcomeUnknown(msg)
    os_error = _no_connection(exc) if isinstance(exc, httpx.ConnectError) else None
    if os_error is not None:
        try:
            target = exc.request.url
        except RuntimeError:  # no request attached
            target = httpx.URL(call.url)
        host = target.host
        port = target.port or DEFAULT_PORTS.get(target.scheme, 0)
        what = (
            f"the host name {host!r} did not resolve"
            if isinstance(os_error, socket.gaierror)
            else f"{host}:{port} refused the connection"
        )
        msg = f"{call.method} {display_url(call.url)}: {what} ({os_error}); not retried"
        return ConnectionFailed(msg, host=host, reason=str(os_error))
    msg = f"{call.method} {call.url} failed after {attempts} attempt(s): {reason}"
    if isinstance(exc, httpx.ProtocolError):
        return ProtocolError(msg)
    return TransportError(msg)
