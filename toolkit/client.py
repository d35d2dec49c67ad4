"""The synchronous fetch client: complete list walks, typed errors, validated writes.

Every HTTP exchange goes through one choke point, :meth:`Client.request`, which
applies pacing (:mod:`toolkit.throttle`), authentication (:mod:`toolkit.auth`),
the retry policy (stamina for transport errors and 502/503/504, the throttle for
429 waits) and the mapping of error answers to :mod:`toolkit.errors`.

The guards live in their own layers: :mod:`toolkit.http` (credentials only to
the configured origin, a deadline per request, a cap on the decoded body, safe
ids) and :mod:`toolkit.paging` (a page parsed once; a walk that refuses wrong
frames and recovers when the collection changes while it is walked). A walk
either returns everything the server announced, each record once, or raises.

The client does not import the mock deployment; :func:`connect` imports it
lazily only when nothing is configured.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, Literal, Self

import httpx
import orjson
import stamina

from toolkit import catalogue, retries, writes
from toolkit.auth import ClientCredentialsAuth, outcome_details
from toolkit.config import region_for_country, resolve_settings
from toolkit.errors import (
    ApiError,
    ConfigurationError,
    DeadlineExceeded,
    OutcomeUnknown,
    RateLimited,
    ResponseTooLarge,
    ServerError,
    TransportError,
    error_for_status,
    unknown_name,
)
from toolkit.http import (
    ACCEPT_ENCODING,
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_TIMEOUT,
    GuardedTransport,
    Origin,
    safe_id,
)
from toolkit.paging import FetchSummary, Page, Query, Walk, local_now
from toolkit.throttle import RETRY_STATUSES, RetryPolicy, Throttle, parse_retry_after

if TYPE_CHECKING:
    from types import TracebackType

    import polars as pl

__all__ = [
    "Client",
    "FetchSummary",
    "connect",
    "region_for_country",
    "search_params",
]

log = logging.getLogger("toolkit.client")
retries.install()  # readable retry lines instead of bare "stamina.retry_scheduled"

_SEARCH_ALIASES: dict[str, str] = {
    "id": "_id",
    "ids": "_id",
    "last_updated": "_lastUpdated",
    "lastUpdated": "_lastUpdated",
    "count": "_count",
    "sort": "_sort",
    "total": "_total",
    "summary": "_summary",
    "include": "_include",
}

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


class _CorruptBody(Exception):
    """A 2xx answer whose JSON body could not be read (for example cut off)."""


def _retry_idempotent(exc: Exception) -> bool:
    if isinstance(exc, (*_TRANSIENT, _CorruptBody)):
        return True
    return isinstance(exc, ServerError) and exc.status in RETRY_STATUSES


def _retry_unsent(exc: Exception) -> bool:
    return isinstance(exc, _UNSENT)


def _param_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(_param_value(v) for v in value)
    return str(value)


def search_params(
    search: Mapping[str, Any], params: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Map Python keyword names to API query parameters.

    ``last_updated`` -> ``_lastUpdated``, ``count`` -> ``_count``, ``id`` ->
    ``_id``, ``sort`` -> ``_sort``, ``total`` -> ``_total``; other underscores
    become hyphens (``practitioner_role`` -> ``practitioner-role``). Lists are
    comma-joined, dates and datetimes ISO-formatted. ``params`` passes raw names
    unchanged and wins on a clash. ``None`` values are dropped.

    Examples
    --------
    >>> search_params({"last_updated": "gt2026-01-01T00:00:00Z", "id": ["a", "b"]})
    {'_lastUpdated': 'gt2026-01-01T00:00:00Z', '_id': 'a,b'}
    """
    out: dict[str, str] = {}
    for key, value in search.items():
        if value is None:
            continue
        name = _SEARCH_ALIASES.get(key, key if key.startswith("_") else key.replace("_", "-"))
        out[name] = _param_value(value)
    for key, value in (params or {}).items():
        if value is not None:
            out[key] = _param_value(value)
    return out


def _check_errors(errors: object) -> None:
    """Refuse a bad ``errors=`` before the walk, not after it."""
    if errors not in ("raise", "warn"):
        msg = f"errors= must be 'raise' or 'warn', got {errors!r}"
        raise ConfigurationError(msg)


@dataclass(slots=True)
class _Counters:
    requests: int = 0
    retries: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, *, requests: int = 0, retries: int = 0) -> None:
        with self.lock:
            self.requests += requests
            self.retries += retries


@dataclass(frozen=True, slots=True)
class _Reply:
    response: httpx.Response
    data: Any


def _interactive() -> bool:
    try:
        from rich.console import Console
    except ImportError:  # pragma: no cover - rich is a dependency
        return False
    console = Console(stderr=True)
    return bool(console.is_jupyter or console.is_terminal)


class Client:
    """A client of one practice-management deployment.

    Parameters
    ----------
    base_url
        Regional address including ``/main``; default ``PM_BASE_URL``, or ``region``.
    client_id, client_secret
        OAuth client credentials; default ``PM_CLIENT_ID`` / ``PM_CLIENT_SECRET``.
    user_agent
        ``"<vendor> (<email>)"``; default ``PM_USER_AGENT`` or ``"pmtk/0.1 (set PM_USER_AGENT)"``.
    region
        ``"au"`` or ``"eu"``: use the regional address of ``catalogue.REGIONS``.
    requests_per_minute
        Client-side pacing (sliding window); the API allows 500.
    timeout
        Seconds one request may take in all: connect, send, headers and the
        whole body (read under the client's own clock). An :class:`httpx.Timeout`
        sets the phases; the whole-request deadline is then its largest phase.
    max_response_bytes
        Cap on the decoded body of one response, enforced while reading
        (default 64 MiB): a compression bomb costs at most this much.
    max_pages
        Pages one pass of a list walk may take. Default: what ``Bundle.total``
        and the page size allow (+2), or 10,000 when there is no ``total``.
    transport
        An httpx transport (for example :class:`httpx.MockTransport` in tests).
    progress
        Show a progress bar on list walks; ``None`` shows it only when interactive.
    retry_policy
        Attempts and backoff (:class:`toolkit.throttle.RetryPolicy`).
    clock, sleep
        Monotonic clock and sleep used for pacing and token expiry (tests inject fakes).

    Raises
    ------
    ConfigurationError
        When the address or a credential is missing.

    Examples
    --------
    >>> import toolkit
    >>> with toolkit.connect() as client:                       # doctest: +SKIP
    ...     referrals = client.frame("Referral", last_updated="gt2026-01-01T00:00:00Z")
    """

    def __init__(
        self,
        base_url: str | None = None,
        client_id: str | None = None,
        client_secret: str | None = None,
        *,
        user_agent: str | None = None,
        region: str | None = None,
        requests_per_minute: int | None = catalogue.RATE_LIMIT_PER_MINUTE,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_pages: int | None = None,
        transport: httpx.BaseTransport | None = None,
        progress: bool | None = None,
        retry_policy: RetryPolicy | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        settings = resolve_settings(
            base_url, client_id, client_secret, user_agent=user_agent, region=region
        )
        self.base_url = settings.base_url
        self.origin = Origin.of(settings.base_url)
        if max_pages is not None and (isinstance(max_pages, bool) or max_pages < 1):
            msg = f"max_pages must be a positive number of pages, got {max_pages!r}"
            raise ConfigurationError(msg)
        self.max_pages = max_pages
        if isinstance(timeout, httpx.Timeout):
            phases = [t for t in (timeout.connect, timeout.read, timeout.write, timeout.pool) if t]
            deadline = max(phases) if phases else DEFAULT_TIMEOUT
        else:
            deadline = float(timeout)
        try:
            guarded = GuardedTransport(
                self.origin,
                transport,
                timeout=deadline,
                max_response_bytes=max_response_bytes,
            )
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        self.client_id = settings.client_id
        self.user_agent = settings.user_agent
        self.progress = progress
        self.retry_policy = retry_policy or RetryPolicy()
        clock_fn = clock or time.monotonic
        self._clock = clock_fn
        self.throttle = Throttle(requests_per_minute, clock=clock_fn, sleep=sleep or time.sleep)
        self.auth = ClientCredentialsAuth(
            settings.token_url,
            settings.client_id,
            settings.client_secret,
            user_agent=settings.user_agent,
            clock=clock_fn,
        )
        self._counters = _Counters()
        self._closers = ExitStack()
        self.last_summary: FetchSummary | None = None
        self._http = httpx.Client(
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

    def __repr__(self) -> str:
        return (
            f"Client(base_url={self.base_url!r}, client_id={self.client_id!r}, "
            f"user_agent={self.user_agent!r})"
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool (and anything started for this client)."""
        self._http.close()
        self._closers.close()

    @property
    def requests_sent(self) -> int:
        """HTTP requests sent so far, token requests excluded."""
        return self._counters.requests

    # ------------------------------------------------------------------ choke point

    def _url(self, path: str) -> str:
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

    def _send_paced(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | Sequence[tuple[str, str]] | None,
        content: bytes | None,
        headers: Mapping[str, str],
    ) -> httpx.Response:
        """Send once, waiting out 429 answers (which the server did not act on)."""
        policy = self.retry_policy
        query: httpx.QueryParams | None = None
        if params is not None:
            pairs: list[tuple[str, str | int | float | bool | None]] = list(
                params.items() if isinstance(params, Mapping) else params
            )
            query = httpx.QueryParams(pairs)
        for n in range(policy.rate_limit_waits + 1):
            self.throttle.acquire()
            self._counters.add(requests=1)
            request = self._http.build_request(
                method, url, params=query, content=content, headers=headers
            )
            sent_at = self.throttle.now()
            response = self._http.send(request)
            self.throttle.note_round_trip(self.throttle.now() - sent_at)
            log.debug("%s %s -> %s", method, request.url, response.status_code)
            self.throttle.observe(response.status_code, response.headers)
            if response.status_code != 429:
                return response
            if n == policy.rate_limit_waits:
                break
            pause = self.throttle.on_rate_limited(response.headers, policy)
            log.info("%s %s answered 429; waiting %.1f s", method, request.url, pause)
        code, diagnostics, outcome = outcome_details(response)
        raise RateLimited(
            429,
            method=method,
            url=str(response.request.url),
            code=code,
            diagnostics=diagnostics or f"still rate limited after {policy.rate_limit_waits} waits",
            outcome=outcome,
            retry_after=parse_retry_after(response.headers.get(catalogue.RETRY_AFTER_HEADER)),
        )

    def _error(self, response: httpx.Response, method: str) -> ApiError:
        code, diagnostics, outcome = outcome_details(response)
        cls = error_for_status(response.status_code)
        return cls(
            response.status_code,
            method=method,
            url=str(response.request.url),
            code=code,
            diagnostics=diagnostics,
            outcome=outcome,
        )

    def _attempt(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | Sequence[tuple[str, str]] | None,
        content: bytes | None,
        headers: Mapping[str, str],
        decode: bool,
        idempotent: bool,
    ) -> _Reply:
        response = self._send_paced(method, url, params=params, content=content, headers=headers)
        if response.status_code >= 400:
            error = self._error(response, method)
            if not idempotent and response.status_code >= 500:
                msg = (
                    f"{method} {url} answered {response.status_code} after the request was "
                    "sent: the outcome is unknown; check whether the write landed before "
                    "sending it again"
                )
                raise OutcomeUnknown(msg) from error
            raise error
        data: Any = None
        if decode and response.content:
            try:
                data = orjson.loads(response.content)
            except orjson.JSONDecodeError as exc:
                if not idempotent:
                    msg = (
                        f"{method} {url} answered {response.status_code} with an unreadable "
                        "body: the write may have landed; check before sending it again"
                    )
                    raise OutcomeUnknown(msg) from exc
                msg = f"{method} {url}: the response body is not valid JSON (cut off?)"
                raise _CorruptBody(msg) from exc
        return _Reply(response, data)

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
        json: Any = None,
        content_type: str = "application/json",
        decode: bool = True,
        retry: bool | None = None,
    ) -> _Reply:
        url = self._url(path)
        idempotent = method in ("GET", "HEAD", "PATCH") if retry is None else retry
        content = orjson.dumps(json) if json is not None else None
        headers = {"Content-Type": content_type}
        policy = self.retry_policy
        on = _retry_idempotent if idempotent else _retry_unsent
        attempts = 0
        try:
            for attempt in stamina.retry_context(
                on=on,
                attempts=policy.attempts,
                timeout=None,
                wait_initial=policy.wait_initial,
                wait_max=policy.wait_max,
                wait_jitter=policy.wait_jitter,
            ):
                with attempt:
                    attempts = attempt.num
                    if attempts > 1:
                        self._counters.add(retries=1)
                        log.info("%s %s: attempt %d", method, url, attempts)
                    return self._attempt(
                        method,
                        url,
                        params=params,
                        content=content,
                        headers=headers,
                        decode=decode,
                        idempotent=idempotent,
                    )
        except httpx.TransportError as exc:
            if not idempotent and not isinstance(exc, _UNSENT):
                msg = (
                    f"{method} {url} failed after the request was sent ({type(exc).__name__}): "
                    "the outcome is unknown; check whether the write landed before sending "
                    "it again"
                )
                raise OutcomeUnknown(msg) from exc
            msg = f"{method} {url} failed after {attempts} attempt(s): {type(exc).__name__}"
            raise TransportError(msg) from exc
        except (DeadlineExceeded, ResponseTooLarge) as exc:
            # Not retried: a server that drips or floods would do it again.
            if not idempotent:
                msg = (
                    f"{method} {url}: {exc}; the request was sent, so the outcome is unknown; "
                    "check whether the write landed before sending it again"
                )
                raise OutcomeUnknown(msg) from exc
            raise
        except _CorruptBody as exc:
            msg = f"{exc} (after {attempts} attempts)"
            raise TransportError(msg) from exc
        msg = f"{method} {url}: no attempt was made"  # stamina always makes one
        raise TransportError(msg)

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        content_type: str = "application/json",
        retry: bool | None = None,
    ) -> httpx.Response:
        """Send one request through pacing, auth, retries and error mapping.

        Parameters
        ----------
        method
            HTTP method.
        path
            ``"Referral"``, ``"/main/Referral"`` or an absolute URL.
        params
            Raw query parameters.
        json
            Body, serialized as JSON.
        content_type
            Request ``Content-Type``.
        retry
            Whether a failure after sending may be retried; default: GET and PATCH yes,
            POST no (a POST failing after it was sent raises
            :class:`~toolkit.errors.OutcomeUnknown`).

        Returns
        -------
        httpx.Response
            A successful (2xx) response, body read.

        Raises
        ------
        ApiError
            The typed subclass for the status, with ``code`` and ``diagnostics``
            from the OperationOutcome.
        TransportError
            When the deployment could not be reached after the allowed retries.
        """
        query = {k: _param_value(v) for k, v in (params or {}).items() if v is not None}
        return self._call(
            method,
            path,
            params=query or None,
            json=json,
            content_type=content_type,
            decode=False,
            retry=retry,
        ).response

    # ------------------------------------------------------------------ list walks

    def _show_progress(self) -> bool:
        return _interactive() if self.progress is None else self.progress

    def _fetch_page(self, url: str, query: Query | None) -> tuple[httpx.Response, Any]:
        reply = self._call("GET", url, params=query)
        return reply.response, reply.data

    def _new_walk(
        self,
        resource_type: str,
        path: str,
        query: Mapping[str, str],
        *,
        max_pages: int | None = None,
        recover: bool = True,
        track_ids: bool = True,
    ) -> Walk:
        if max_pages is not None and (isinstance(max_pages, bool) or max_pages < 1):
            msg = f"max_pages must be a positive number of pages, got {max_pages!r}"
            raise ConfigurationError(msg)
        summary = FetchSummary(resource_type)
        self.last_summary = summary
        return Walk(
            resource_type,
            self._url(path),
            list(query.items()),
            fetch=self._fetch_page,
            resolve=lambda link, page_url: self.origin.resolve(link, page_url, what="next link"),
            summary=summary,
            max_pages=max_pages if max_pages is not None else self.max_pages,
            recover=recover,
            track_ids=track_ids,
            now=local_now,
        )

    def _walk(self, walk: Walk) -> Iterator[Page]:
        """The pages of ``walk``, with the progress bar and the request counts of the summary."""
        summary = walk.summary
        started = time.perf_counter()
        requests0, retries0 = self._counters.requests, self._counters.retries
        waited0, limited0 = self.throttle.waited, self.throttle.rate_limited

        def settle() -> None:
            summary.requests = self._counters.requests - requests0
            summary.retries = self._counters.retries - retries0
            summary.waited_seconds = self.throttle.waited - waited0
            summary.rate_limited = self.throttle.rate_limited - limited0
            summary.elapsed_seconds = time.perf_counter() - started

        bar_cm: Any = nullcontext(None)
        if self._show_progress():
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            bar_cm = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                transient=True,
            )
        with bar_cm as bar:
            task = bar.add_task(summary.resource_type, total=None) if bar is not None else None
            try:
                for page in walk:
                    if bar is not None and task is not None:
                        bar.update(task, total=summary.total, completed=summary.records)
                    settle()
                    yield page
            finally:
                settle()
        log.debug("%s", summary)

    def _list_query(
        self, resource_type: str, search: Mapping[str, Any], params: Mapping[str, Any] | None
    ) -> dict[str, str]:
        # A misspelt keyword (dates= for date=) would be ignored by the server and return
        # every row: refuse it before any request. Raw names in params= pass unchecked.
        known = catalogue.search_keywords(resource_type)
        for key in search:
            if key not in known:
                raise unknown_name("search keyword", key, known, f" for {resource_type}")
        query = search_params(search, params)
        query.setdefault("_count", str(catalogue.MAX_PAGE_SIZE))
        try:
            count = int(query["_count"])
        except ValueError:
            count = 0
        if not 1 <= count <= catalogue.MAX_PAGE_SIZE:
            msg = f"count/_count must be 1..{catalogue.MAX_PAGE_SIZE}, got {query['_count']!r}"
            raise ConfigurationError(msg)
        return query

    @staticmethod
    def _check_type(resource_type: str) -> None:
        catalogue.resource(resource_type)  # UnknownName, with the near miss

    def pages(
        self,
        resource_type: str,
        /,
        *,
        params: Mapping[str, Any] | None = None,
        max_pages: int | None = None,
        recover: bool = True,
        **search: Any,
    ) -> Iterator[bytes]:
        """Raw Bundle pages of a list walk, as bytes (the fast path for ``flatten``).

        Parameters
        ----------
        resource_type
            ``"Referral"``, ``"Appointment"``, ...
        params
            Raw query parameters, passed unchanged.
        max_pages
            Pages one pass may take (default: the client's ``max_pages``, else
            what ``Bundle.total`` allows, else 10,000).
        recover
            Recover when records change during the walk (default). ``False``
            raises :class:`~toolkit.errors.IncompleteResult` instead.
        **search
            Search parameters by Python name (see :func:`search_params`), for
            example ``last_updated="gt2026-01-01T00:00:00Z"``, ``subject=...``.

        Yields
        ------
        bytes
            Each Bundle page's body, in order; then, when records changed during
            the walk, the recovery pages (``_lastUpdated=ge<start>``, and if a
            record slid past a page boundary, ``lt<start>``). A record may then
            appear in more than one page: keep, per id, the greatest
            ``meta.lastUpdated`` (ties: the later page), as :meth:`frame`,
            :meth:`frames`, :meth:`records` and the store's sync do.
            ``client.last_summary.recovered`` tells whether that happened.

        Raises
        ------
        IncompleteResult
            When the walk ends short of ``Bundle.total`` and recovery cannot make
            it whole (:class:`~toolkit.errors.PagingLoop` for a loop).
        MalformedPage
            An entry of another type, more records than ``total``, or too many
            pages (:class:`~toolkit.errors.PageLimitExceeded`).
        ForeignLink
            A ``next`` link off the configured origin; it is not requested.
        ApiError, TransportError
            When a page fails after the allowed retries; a walk never stops silently.
        """
        self._check_type(resource_type)
        walk = self._new_walk(
            resource_type,
            resource_type,
            self._list_query(resource_type, search, params),
            max_pages=max_pages,
            recover=recover,
        )
        for page in self._walk(walk):
            yield page.raw

    def _clean_pages(
        self,
        resource_type: str,
        params: Mapping[str, Any] | None,
        max_pages: int | None,
        search: Mapping[str, Any],
    ) -> list[bytes]:
        """Every page of a walk, superseded versions removed (each record once)."""
        self._check_type(resource_type)
        walk = self._new_walk(
            resource_type,
            resource_type,
            self._list_query(resource_type, search, params),
            max_pages=max_pages,
        )
        return walk.clean([page.raw for page in self._walk(walk)])

    def records(
        self,
        resource_type: str,
        /,
        *,
        params: Mapping[str, Any] | None = None,
        max_pages: int | None = None,
        **search: Any,
    ) -> Iterator[dict[str, Any]]:
        """Every record of a list walk, as dicts, each id once in its newest version.

        Same checks as :meth:`pages`. The records come after the walk has ended
        (a record read early may be superseded by a version read later).
        """
        self._check_type(resource_type)
        walk = self._new_walk(
            resource_type,
            resource_type,
            self._list_query(resource_type, search, params),
            max_pages=max_pages,
        )
        pages = [page.records for page in self._walk(walk)]
        keep = walk.winners()
        for i, records in enumerate(pages):
            positions = keep.get(i, set())
            yield from (r for pos, r in enumerate(records) if pos in positions)

    def frame(
        self,
        resource_type: str,
        /,
        *,
        table: str | None = None,
        view: str | None = None,
        errors: Literal["raise", "warn"] = "raise",
        params: Mapping[str, Any] | None = None,
        max_pages: int | None = None,
        **search: Any,
    ) -> pl.DataFrame:
        """A validated Polars frame of every record (flattened by the declared view).

        Parameters
        ----------
        resource_type
            The resource to list.
        table, view
            A child table of the view (for example ``"appointment_participant"``);
            ``view`` is a synonym of ``table``. Default: the main table.
        errors
            ``"raise"`` raises :class:`~toolkit.errors.DataValidationError` on
            schema failures; ``"warn"`` warns and returns the frame.
        params, max_pages, **search
            As for :meth:`pages`. Each record appears once, in its newest version.
        """
        from toolkit.schemas import validate
        from toolkit.views import flatten

        if table is not None and view is not None and table != view:
            msg = f"pass table= or view=, not both ({table!r} != {view!r})"
            raise ConfigurationError(msg)
        name = table if table is not None else view
        _check_errors(errors)
        if name is not None and name != resource_type:
            from toolkit.views import table_names

            if name not in table_names(resource_type):
                raise unknown_name(
                    "table", name, table_names(resource_type), f" of {resource_type}"
                )
        pages = self._clean_pages(resource_type, params, max_pages, search)
        df = flatten(resource_type, pages, table=name)
        return validate(df, resource_type, table=name, errors=errors)

    def frames(
        self,
        resource_type: str,
        /,
        *,
        errors: Literal["raise", "warn"] = "raise",
        params: Mapping[str, Any] | None = None,
        max_pages: int | None = None,
        **search: Any,
    ) -> dict[str, pl.DataFrame]:
        """The main table and every child table of a list walk, each validated.

        Keys are the resource name for the main table and ``<resource>_<child>``
        (snake case) for child tables, as in :func:`toolkit.views.flatten_tables`.
        Each record (and its child rows) appears once, in its newest version.
        """
        from toolkit.schemas import validate
        from toolkit.views import flatten_tables

        _check_errors(errors)
        tables = flatten_tables(
            resource_type, self._clean_pages(resource_type, params, max_pages, search)
        )
        return {
            key: validate(
                df, resource_type, table=None if key == resource_type else key, errors=errors
            )
            for key, df in tables.items()
        }

    # ------------------------------------------------------------------ single records

    def read(self, resource_type: str, record_id: str) -> dict[str, Any]:
        """One record by id (``GET /main/<type>/<id>``).

        Raises
        ------
        NotFound
            When there is no such record (also a ``KeyError``).
        InvalidId
            When ``record_id`` cannot be one path segment (``..``, ``/``, ``%``,
            whitespace, ...); nothing is sent.
        """
        self._check_type(resource_type)
        reply = self._call("GET", f"{resource_type}/{safe_id(resource_type, record_id)}")
        data = reply.data
        if not isinstance(data, dict) or data.get("resourceType") != resource_type:
            kind = data.get("resourceType") if isinstance(data, dict) else type(data).__name__
            raise ApiError(
                reply.response.status_code,
                method="GET",
                url=str(reply.response.url),
                diagnostics=f"expected a {resource_type}, got {kind}",
            )
        return data

    def _write_result(self, reply: _Reply) -> dict[str, Any]:
        data = reply.data
        return data if isinstance(data, dict) else {}

    def create(self, resource_type: str, body: Any) -> dict[str, Any]:
        """Create a record (POST); the body is validated first and never retried blindly.

        Parameters
        ----------
        resource_type
            ``"Referral"``, ``"Coverage"``, ``"Organization"`` or ``"Practitioner"``.
        body
            A dict or a pydantic model using the API's field names.

        Returns
        -------
        dict
            The created record as the server returned it.

        Raises
        ------
        RequestValidationError
            When the body breaks a catalogue rule; nothing is sent.
        OutcomeUnknown
            When the request failed after it was sent (it may have landed).
        """
        data = writes.check_create(resource_type, body)
        reply = self._call("POST", writes.CREATABLE[resource_type], json=data, retry=False)
        return self._write_result(reply)

    def patch(self, resource_type: str, record_id: str, changes: Any) -> dict[str, Any]:
        """Change fields of a record with a JSON merge patch.

        ``null`` removes a field. A patch appending ``attachments`` is not
        idempotent and is therefore not retried after it was sent.

        Raises
        ------
        RequestValidationError
            When a change breaks a catalogue rule, or the type does not accept
            PATCH (Practitioner, Organization: the API answers 405); nothing is sent.
        """
        safe_id(resource_type, record_id)
        data = writes.check_patch(resource_type, record_id, changes)
        reply = self._call(
            "PATCH",
            f"{resource_type}/{record_id}",
            json=data,
            content_type=catalogue.MERGE_PATCH_JSON,
            retry="attachments" not in data,
        )
        return self._write_result(reply)

    def book(
        self,
        parameters: Mapping[str, Any] | None = None,
        /,
        *,
        start: datetime | str | None = None,
        end: datetime | str | None = None,
        practitioner_role: Any = None,
        patient: Any = None,
        healthcare_service: Any = None,
        location_type: str = "clinic",
        status: str = "booked",
        description: str | None = None,
    ) -> dict[str, Any]:
        """Book an appointment (``POST /main/Appointment/$book``); never retried blindly.

        Either pass a ready ``Parameters`` dict, or the keyword arguments from
        which it is built (``minutesDuration`` is computed from start and end).

        Raises
        ------
        RequestValidationError
            When the booking breaks a rule; nothing is sent.
        Conflict
            When the slot is already taken (409).
        OutcomeUnknown
            When the request failed after it was sent.
        """
        if parameters is None:
            missing = [
                n
                for n, v in (
                    ("start", start),
                    ("end", end),
                    ("practitioner_role", practitioner_role),
                    ("patient", patient),
                )
                if v is None
            ]
            if missing:
                problems = [(n, "is required to book") for n in missing]
                raise writes.RequestValidationError("Appointment", problems)
            assert start is not None and end is not None
            parameters = writes.book_parameters(
                start=start,
                end=end,
                practitioner_role=practitioner_role,
                patient=patient,
                healthcare_service=healthcare_service,
                location_type=location_type,
                status=status,
                description=description,
            )
        body = writes.check_book(parameters)
        reply = self._call("POST", "Appointment/$book", json=body, retry=False)
        return self._write_result(reply)

    def find(
        self,
        start: datetime | date | str,
        end: datetime | date | str,
        duration: int,
        **filters: Any,
    ) -> pl.DataFrame:
        """Proposed free appointments (``GET /main/Appointment/$find``) as a frame.

        Parameters
        ----------
        start, end
            The search range.
        duration
            Appointment length in minutes.
        **filters
            ``practitioner_role``, ``practitioner``, ``organization``, ``show``,
            ``emergency``, ``apply_buffer_time``, ``sort`` (``"start"``/``"-start"``).

        Returns
        -------
        polars.DataFrame
            One row per proposal: ``id``, ``start``, ``end`` (UTC datetimes),
            ``minutes_duration``, ``practitioner_role`` and ``healthcare_service``
            (ids, ready for :meth:`book`) and ``location_type``.

        Notes
        -----
        Not the Appointment view: it keeps participants in a child table keyed by
        id, and proposal ids (``proposed-<start>-<minutes>``) repeat across
        practitioners, so the role could not be joined back unambiguously.
        """
        if isinstance(duration, bool) or not isinstance(duration, int) or duration <= 0:
            msg = f"duration must be a positive number of minutes, got {duration!r}"
            raise ConfigurationError(msg)
        query = search_params({"start": start, "end": end, "duration": duration, **filters})
        walk = self._new_walk("Appointment", "Appointment/$find", query, track_ids=False)
        return _proposed_frame(r for page in self._walk(walk) for r in page.records)


def _proposed_frame(records: Iterator[dict[str, Any]] | Any) -> pl.DataFrame:
    """Proposed appointments as a typed frame, one row per proposal."""

    def last_segment(ref: Any) -> str | None:
        return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None

    import polars as pl

    rows = []
    for r in records:
        actors = [
            ((p or {}).get("actor") or {}).get("reference")
            for p in r.get("participant") or []
            if ((p or {}).get("actor") or {}).get("type") == "PractitionerRole"
        ]
        services = [(s or {}).get("reference") for s in r.get("supportingInformation") or []]
        location = next(
            (
                e.get("valueCode")
                for e in r.get("extension") or []
                if isinstance(e, dict) and e.get("url") == "location-type"
            ),
            None,
        )
        rows.append(
            {
                "id": r.get("id"),
                "start": r.get("start"),
                "end": r.get("end"),
                "minutes_duration": r.get("minutesDuration"),
                "practitioner_role": last_segment(actors[0]) if actors else None,
                "healthcare_service": last_segment(services[0]) if services else None,
                "location_type": location,
            }
        )
    schema = {
        "id": pl.String,
        "start": pl.String,
        "end": pl.String,
        "minutes_duration": pl.Int64,
        "practitioner_role": pl.String,
        "healthcare_service": pl.String,
        "location_type": pl.String,
    }
    frame = pl.DataFrame(rows, schema=schema)
    return frame.with_columns(pl.col("start", "end").str.to_datetime(time_zone="UTC"))


# ---------------------------------------------------------------------- connect()

_EMBEDDED_LOCK = threading.Lock()
_EMBEDDED: dict[str, Any] = {}


MOCK_USER_AGENT = "pmtk (embedded mock)"
"""The user agent sent to the embedded mock when none is configured (no warning then)."""


def _embedded_mock() -> Any:
    """Start the embedded mock once per process; it stops at interpreter exit."""
    with _EMBEDDED_LOCK:
        dep = _EMBEDDED.get("deployment")
        if dep is None:
            from toolkit.mock import serve  # lazily: the client does not depend on the mock

            stack = ExitStack()
            dep = stack.enter_context(serve())
            atexit.register(stack.close)
            _EMBEDDED["deployment"] = dep
            _EMBEDDED["stack"] = stack
        return dep


def connect(**kwargs: Any) -> Client:
    """A :class:`Client` for the configured deployment, or for the embedded mock.

    With ``PM_BASE_URL`` (or ``base_url=``/``region=``) set, this is
    ``Client(**kwargs)``. With nothing at all configured it starts the embedded
    mock deployment in a background thread (once per process, stopped at exit),
    says so in one line on stderr, and connects to it with the mock's demo
    credentials. Credentials without an address, or a near-miss ``PM_`` variable
    name, raise :class:`~toolkit.errors.ConfigurationError` instead: pmtk never
    quietly falls back to synthetic data (see :mod:`toolkit.config`).

    Examples
    --------
    >>> import toolkit
    >>> client = toolkit.connect()                              # doctest: +SKIP
    pmtk: nothing configured (no PM_BASE_URL); using the embedded mock deployment at ...
    """
    from toolkit.config import configured

    if configured(
        base_url=kwargs.get("base_url"),
        region=kwargs.get("region"),
        client_id=kwargs.get("client_id"),
        client_secret=kwargs.get("client_secret"),
    ):
        return Client(**kwargs)
    dep = _embedded_mock()
    # A notice, not data: stderr, so that piped output stays clean.
    print(
        "pmtk: nothing configured (no PM_BASE_URL); using the embedded mock deployment "
        f"at {dep.base_url}",
        file=sys.stderr,
    )
    kwargs.setdefault("client_id", dep.client_id)
    kwargs.setdefault("client_secret", dep.client_secret)
    if not (kwargs.get("user_agent") or os.environ.get("PM_USER_AGENT")):
        kwargs["user_agent"] = MOCK_USER_AGENT
    return Client(base_url=dep.base_url, **kwargs)
