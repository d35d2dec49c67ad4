"""The synchronous fetch client: complete list walks, typed errors, validated writes.

Every HTTP exchange goes through one choke point, :meth:`Client.request`, which
applies pacing (:mod:`toolkit.throttle`), authentication (:mod:`toolkit.auth`),
the retry policy (stamina for transport errors and 502/503/504, the throttle for
429 waits) and the mapping of error answers to :mod:`toolkit.errors`.

List walks (:meth:`Client.pages`) follow ``next`` links (absolute or relative),
ask for 100 records a page, refuse link loops and duplicate ids, and compare the
records received with ``Bundle.total``: a walk either returns everything the
server announced or raises.

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
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, Literal, Self
from urllib.parse import parse_qsl, quote, urlencode, urljoin, urlsplit, urlunsplit

import httpx
import orjson
import stamina

from toolkit import catalogue, retries, writes
from toolkit.auth import ClientCredentialsAuth, outcome_details
from toolkit.config import region_for_country, resolve_settings
from toolkit.errors import (
    ApiError,
    ConfigurationError,
    IncompleteResult,
    OutcomeUnknown,
    PagingLoop,
    RateLimited,
    ServerError,
    TransportError,
    error_for_status,
)
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

FHIR_JSON = "application/fhir+json"
MERGE_PATCH = "application/merge-patch+json"

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


def _page_key(url: str) -> str:
    """A URL normalized for loop detection: sorted query, ``page`` defaulting to 1."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.setdefault("page", "1")
    return urlunsplit(
        (parts.scheme, parts.netloc.lower(), parts.path, urlencode(sorted(query.items())), "")
    )


@dataclass(slots=True)
class FetchSummary:
    """What one list walk cost. ``client.last_summary`` holds the latest.

    Attributes
    ----------
    resource_type
        The resource walked.
    pages, records
        Pages and records received.
    total
        ``Bundle.total`` announced by the server (``None`` when absent).
    requests
        HTTP requests sent for the walk, retries and 429 repeats included.
    retries
        Attempts repeated after a transport error or 502/503/504.
    rate_limited
        429 answers waited out.
    waited_seconds
        Time spent waiting on pacing and ``retry-after``.
    elapsed_seconds
        Wall time of the walk.
    complete
        True once the walk ended with every announced record.
    """

    resource_type: str
    pages: int = 0
    records: int = 0
    total: int | None = None
    requests: int = 0
    retries: int = 0
    rate_limited: int = 0
    waited_seconds: float = 0.0
    elapsed_seconds: float = 0.0
    complete: bool = False

    def __str__(self) -> str:
        total = "?" if self.total is None else str(self.total)
        state = "complete" if self.complete else "incomplete"
        return (
            f"{self.resource_type}: {self.records}/{total} records in {self.pages} pages, "
            f"{self.requests} requests, {self.retries} retries, {self.rate_limited} x 429, "
            f"{self.waited_seconds:.1f} s waiting, {self.elapsed_seconds:.1f} s elapsed ({state})"
        )


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
        Seconds for each phase of a request, or an :class:`httpx.Timeout`.
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
        timeout: float | httpx.Timeout = 30.0,
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
            transport=transport,
            timeout=timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout),
            headers={"Accept": FHIR_JSON, "User-Agent": settings.user_agent},
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
        if path.startswith(("http://", "https://")):
            return path
        if path.startswith(catalogue.API_PREFIX + "/") and self.base_url.endswith(
            catalogue.API_PREFIX
        ):
            path = path[len(catalogue.API_PREFIX) :]
        return f"{self.base_url}/{path.lstrip('/')}"

    def _send_paced(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None,
        content: bytes | None,
        headers: Mapping[str, str],
    ) -> httpx.Response:
        """Send once, waiting out 429 answers (which the server did not act on)."""
        policy = self.retry_policy
        for n in range(policy.rate_limit_waits + 1):
            self.throttle.acquire()
            self._counters.add(requests=1)
            request = self._http.build_request(
                method, url, params=params, content=content, headers=headers
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
            retry_after=parse_retry_after(response.headers.get("retry-after")),
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
        params: Mapping[str, str] | None,
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
        params: Mapping[str, str] | None = None,
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

    def _walk(
        self, resource_type: str, path: str, query: dict[str, str], *, unique_ids: bool = True
    ) -> Iterator[tuple[bytes, list[dict[str, Any]]]]:
        """Walk the pages of one list; see :meth:`pages`.

        ``unique_ids=False`` skips the duplicate-id check, for ``$find``, whose
        proposal ids (``proposed-<start>-<minutes>``) repeat across practitioners.
        """
        summary = FetchSummary(resource_type)
        self.last_summary = summary
        started = time.perf_counter()
        requests0, retries0 = self._counters.requests, self._counters.retries
        waited0, limited0 = self.throttle.waited, self.throttle.rate_limited

        def settle() -> None:
            summary.requests = self._counters.requests - requests0
            summary.retries = self._counters.retries - retries0
            summary.waited_seconds = self.throttle.waited - waited0
            summary.rate_limited = self.throttle.rate_limited - limited0
            summary.elapsed_seconds = time.perf_counter() - started

        seen_pages: set[str] = set()
        seen_ids: set[str] = set()
        url: str | None = self._url(path)
        params: dict[str, str] | None = query
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
            task = bar.add_task(resource_type, total=None) if bar is not None else None
            try:
                while url is not None:
                    reply = self._call("GET", url, params=params)
                    params = None
                    page_url = str(reply.response.url)
                    seen_pages.add(_page_key(page_url))
                    entries = self._entries(
                        reply, resource_type, summary, seen_ids if unique_ids else None
                    )
                    if bar is not None and task is not None:
                        bar.update(task, total=summary.total, completed=summary.records)
                    settle()
                    yield reply.response.content, entries
                    url = self._next_url(reply.data, page_url, seen_pages, summary)
                    if url is not None and not entries:
                        msg = (
                            f"{resource_type}: page {summary.pages} is empty but links to "
                            f"a next page; stopping rather than looping"
                        )
                        raise IncompleteResult(
                            msg, expected=summary.total, received=summary.records
                        )
            finally:
                settle()
        if summary.total is not None and summary.records < summary.total:
            msg = (
                f"{resource_type}: the server announced {summary.total} records "
                f"(Bundle.total) but the walk returned {summary.records} in "
                f"{summary.pages} pages"
            )
            raise IncompleteResult(msg, expected=summary.total, received=summary.records)
        summary.complete = True
        log.debug("%s", summary)

    def _entries(
        self,
        reply: _Reply,
        resource_type: str,
        summary: FetchSummary,
        seen_ids: set[str] | None,
    ) -> list[dict[str, Any]]:
        bundle = reply.data
        url = str(reply.response.url)
        if not isinstance(bundle, dict) or bundle.get("resourceType") != "Bundle":
            kind = bundle.get("resourceType") if isinstance(bundle, dict) else type(bundle).__name__
            code, diagnostics = None, f"expected a Bundle, got {kind}"
            if kind == "OperationOutcome":
                code, diag, _ = outcome_details(reply.response)
                diagnostics = diag or diagnostics
            raise ApiError(
                reply.response.status_code,
                method="GET",
                url=url,
                code=code,
                diagnostics=diagnostics,
                outcome=bundle if isinstance(bundle, dict) else None,
            )
        raw_entries = bundle.get("entry") or []
        entries = [
            e["resource"]
            for e in raw_entries
            if isinstance(e, dict) and isinstance(e.get("resource"), dict)
        ]
        ids = [r["id"] for r in entries if isinstance(r.get("id"), str)]
        if seen_ids is None:
            ids, seen_ids = [], set()
        repeated = sorted({i for i in ids if i in seen_ids} | {i for i in ids if ids.count(i) > 1})
        if repeated and entries:
            if all(i in seen_ids for i in ids):
                msg = (
                    f"{resource_type}: page {summary.pages + 1} ({url}) repeats records "
                    f"already read ({', '.join(repeated[:5])}...): the next links loop"
                )
                raise PagingLoop(msg, expected=summary.total, received=summary.records)
            msg = (
                f"{resource_type}: page {summary.pages + 1} ({url}) repeats "
                f"{len(repeated)} record id(s) ({', '.join(repeated[:5])}): paging is "
                "unstable, the result would have duplicates or gaps"
            )
            raise IncompleteResult(msg, expected=summary.total, received=summary.records)
        seen_ids.update(ids)
        summary.pages += 1
        summary.records += len(entries)
        total = bundle.get("total")
        if summary.total is None and isinstance(total, int) and not isinstance(total, bool):
            summary.total = total
        return entries

    @staticmethod
    def _next_url(
        bundle: dict[str, Any], page_url: str, seen_pages: set[str], summary: FetchSummary
    ) -> str | None:
        links = bundle.get("link") or []
        nxt = next(
            (
                link.get("url")
                for link in links
                if isinstance(link, dict) and link.get("relation") == "next"
            ),
            None,
        )
        if not isinstance(nxt, str) or not nxt:
            return None
        url = urljoin(page_url, nxt)
        if _page_key(url) in seen_pages:
            msg = (
                f"{summary.resource_type}: the next link of page {summary.pages} points "
                f"back to a page already read ({url})"
            )
            raise PagingLoop(msg, expected=summary.total, received=summary.records)
        return url

    def _list_query(
        self, search: Mapping[str, Any], params: Mapping[str, Any] | None
    ) -> dict[str, str]:
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
        if resource_type not in catalogue.RESOURCES:
            catalogue.resource(resource_type)  # raises a KeyError naming the known types

    def pages(
        self, resource_type: str, /, *, params: Mapping[str, Any] | None = None, **search: Any
    ) -> Iterator[bytes]:
        """Raw Bundle pages of a list walk, as bytes (the fast path for ``flatten``).

        Parameters
        ----------
        resource_type
            ``"Referral"``, ``"Appointment"``, ...
        params
            Raw query parameters, passed unchanged.
        **search
            Search parameters by Python name (see :func:`search_params`), for
            example ``last_updated="gt2026-01-01T00:00:00Z"``, ``subject=...``.

        Yields
        ------
        bytes
            Each Bundle page's body, in order.

        Raises
        ------
        IncompleteResult
            When the walk ends with fewer records than ``Bundle.total``, or a
            page repeats ids (:class:`~toolkit.errors.PagingLoop` for a loop).
        ApiError, TransportError
            When a page fails after the allowed retries; a walk never stops silently.
        """
        self._check_type(resource_type)
        for raw, _ in self._walk(resource_type, resource_type, self._list_query(search, params)):
            yield raw

    def records(
        self, resource_type: str, /, *, params: Mapping[str, Any] | None = None, **search: Any
    ) -> Iterator[dict[str, Any]]:
        """Every record of a list walk, as dicts; same checks as :meth:`pages`."""
        self._check_type(resource_type)
        query = self._list_query(search, params)
        for _, entries in self._walk(resource_type, resource_type, query):
            yield from entries

    def frame(
        self,
        resource_type: str,
        /,
        *,
        table: str | None = None,
        view: str | None = None,
        errors: Literal["raise", "warn"] = "raise",
        params: Mapping[str, Any] | None = None,
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
        params, **search
            As for :meth:`pages`.
        """
        from toolkit.schemas import validate
        from toolkit.views import flatten

        if table is not None and view is not None and table != view:
            msg = f"pass table= or view=, not both ({table!r} != {view!r})"
            raise ConfigurationError(msg)
        name = table if table is not None else view
        df = flatten(resource_type, self.pages(resource_type, params=params, **search), table=name)
        return validate(df, resource_type, table=name, errors=errors)

    def frames(
        self,
        resource_type: str,
        /,
        *,
        errors: Literal["raise", "warn"] = "raise",
        params: Mapping[str, Any] | None = None,
        **search: Any,
    ) -> dict[str, pl.DataFrame]:
        """The main table and every child table of a list walk, each validated.

        Keys are the resource name for the main table and ``<resource>_<child>``
        (snake case) for child tables, as in :func:`toolkit.views.flatten_tables`.
        """
        from toolkit.schemas import validate
        from toolkit.views import flatten_tables

        tables = flatten_tables(resource_type, self.pages(resource_type, params=params, **search))
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
        """
        self._check_type(resource_type)
        if not isinstance(record_id, str) or not record_id or "/" in record_id:
            msg = f"{record_id!r} is not a {resource_type} id"
            raise ConfigurationError(msg)
        reply = self._call("GET", f"{resource_type}/{quote(record_id, safe='-._~')}")
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
        data = writes.check_patch(resource_type, record_id, changes)
        reply = self._call(
            "PATCH",
            f"{resource_type}/{quote(record_id, safe='-._~')}",
            json=data,
            content_type=MERGE_PATCH,
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
        walk = self._walk("Appointment", "Appointment/$find", query, unique_ids=False)
        return _proposed_frame(entry for _, entries in walk for entry in entries)


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
    ``Client(**kwargs)``. With nothing configured it starts the embedded mock
    deployment in a background thread (once per process, stopped at exit),
    prints one line saying so, and connects to it with the mock's demo
    credentials.

    Examples
    --------
    >>> import toolkit
    >>> client = toolkit.connect()                              # doctest: +SKIP
    pmtk: no PM_BASE_URL set; using the embedded mock at http://127.0.0.1:PORT/main
    """
    configured = (
        kwargs.get("base_url") or kwargs.get("region") or os.environ.get("PM_BASE_URL")
    ) or os.environ.get("PM_REGION")
    if configured:
        return Client(**kwargs)
    dep = _embedded_mock()
    print(f"pmtk: no PM_BASE_URL set; using the embedded mock at {dep.base_url}", file=sys.stdout)
    kwargs.setdefault("client_id", dep.client_id)
    kwargs.setdefault("client_secret", dep.client_secret)
    return Client(base_url=dep.base_url, **kwargs)
