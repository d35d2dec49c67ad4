"""One page of a list answer: a searchset Bundle, parsed once and checked.

:meth:`Page.parse` reads a list answer and refuses what would make a quiet wrong
frame: an answer that is not a Bundle (an OperationOutcome's text, if it is one,
in the :class:`~toolkit.errors.ApiError`), an entry without a resource, a
``Bundle.total`` that is not a count, and an entry of another ``resourceType``
(unless ``_include``/``_revinclude`` was asked: then an entry marked
``search.mode: include``, or of another type without a mark, as some servers
send them, is an included record, kept apart in :attr:`Page.included` and not
counted). An OperationOutcome entry marked ``search.mode: outcome`` is FHIR's
note about the search, not a record.

The page's links are read here (:func:`next_link`, :func:`self_link`), and what
its ``self`` link says of the filters sent (:func:`ignored_filters`), with the
FHIR instants the walk compares (:func:`read_instant`, :func:`record_stamp`,
:func:`micros`). The walk that follows the pages, and recovers when the
collection changes under it, is :class:`toolkit.paging.Walk`.
"""

from __future__ import annotations

import email.utils
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urljoin, urlsplit

import httpx
import orjson

from toolkit import catalogue
from toolkit.auth import outcome_details
from toolkit.errors import ApiError, MalformedPage

__all__ = [
    "NOT_FILTERS",
    "Page",
    "ignored_filters",
    "micros",
    "next_link",
    "read_instant",
    "record_stamp",
    "self_link",
]


def read_instant(value: Any) -> datetime | None:
    """A FHIR instant as an aware UTC datetime, or ``None`` when absent or unreadable."""
    if not isinstance(value, str) or len(value) < 10:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC)


def record_stamp(record: dict[str, Any]) -> datetime | None:
    meta = record.get("meta")
    return read_instant(meta.get("lastUpdated")) if isinstance(meta, dict) else None


def micros(when: datetime | None) -> int | None:
    """``when`` as whole microseconds since the epoch (exact, unlike a float timestamp)."""
    return None if when is None else (when - _EPOCH) // _MICROSECOND


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


NOT_FILTERS = catalogue.RESULT_PARAMETERS | {"_elements", "_revinclude", "_format", "_pretty"}
"""Query parameters that shape or page a search without choosing its records: a server
that drops one of them from ``self`` changes no row of the result."""


def self_link(bundle: dict[str, Any]) -> str | None:
    """The url of a Bundle's ``self`` link (a non-empty string), or None."""
    for link in bundle.get("link") or []:
        if isinstance(link, dict) and link.get("relation") == "self":
            url = link.get("url")
            if isinstance(url, str) and url.strip():
                return url
    return None


def ignored_filters(request_url: str, bundle: dict[str, Any]) -> list[str] | None:
    """The filters of ``request_url`` a search answer's ``self`` link leaves out.

    FHIR's rule (facts): a server ignores a search parameter it does not support
    and leaves it out of the ``self`` link, which states the search as the server
    understood it. Compared per name (modifier included: ``name:exact``) and per
    count, so one of two ``date`` bounds dropped is seen; values are not compared,
    because a server may rewrite them (``Patient/1`` as an absolute url, ``+`` as
    ``%2B``, ``2026`` as ``ge2026-01-01``). Parameters that only page or shape the
    answer (:data:`NOT_FILTERS`) and empty values (they filter nothing) are not
    checked; the server may reorder the parameters and add ``_count`` or ``page``.

    Returns None when it cannot tell: no ``self`` link, or one to another path
    than the request's (a placeholder such as ``"x"`` says nothing of the search).
    A server that ignores a filter but still echoes it cannot be caught this way.

    Examples
    --------
    >>> page = {"link": [{"relation": "self", "url": "https://h/main/Patient?_count=30"}]}
    >>> ignored_filters("https://h/main/Patient?email=a%40b.c&_count=30", page)
    ['email']
    >>> ignored_filters("https://h/main/Patient?email=a%40b.c", {"link": []}) is None
    True
    """
    link = self_link(bundle)
    if link is None:
        return None
    sent = urlsplit(request_url)
    echoed = urlsplit(urljoin(request_url, link))
    if echoed.path.rstrip("/") != sent.path.rstrip("/"):
        return None
    kept = Counter(k for k, _v in parse_qsl(echoed.query, keep_blank_values=True))
    wanted = Counter(
        k
        for k, v in parse_qsl(sent.query, keep_blank_values=True)
        if k not in NOT_FILTERS and v.strip(", ")
    )
    return sorted(k for k, n in wanted.items() if kept[k] < n)


@dataclass(slots=True)
class Page:
    """One Bundle page, parsed once.

    Attributes
    ----------
    raw
        The body as received.
    url
        The URL it was read from.
    bundle
        The parsed Bundle.
    records
        Entry resources of the type asked for (``search.mode: include`` left out).
    included
        With ``_include`` asked, the included entries' resources (not counted).
    total
        ``Bundle.total``, if any.
    next
        The ``next`` link as written (unresolved), if any.
    server_time
        The server's clock: ``Date`` header, else ``meta.lastUpdated``.
    phase
        ``"walk"``, ``"changed"`` (recovery: changed since t0) or ``"unchanged"``.
    """

    raw: bytes
    url: str
    bundle: dict[str, Any]
    records: list[dict[str, Any]]
    total: int | None
    next: str | None
    server_time: datetime | None
    phase: str = "walk"
    included: list[dict[str, Any]] = field(default_factory=list)

    def main_raw(self) -> bytes:
        """The page with its included entries left out: what a flattener of the walked type
        reads (``raw`` itself when nothing was included)."""
        if not self.included:
            return self.raw
        matches = {id(r) for r in self.records}
        entries = self.bundle.get("entry") or []
        kept = [e for e in entries if isinstance(e, dict) and id(e.get("resource")) in matches]
        return orjson.dumps({**self.bundle, "entry": kept})

    @classmethod
    def parse(
        cls,
        response: httpx.Response,
        data: Any,
        resource_type: str,
        *,
        include: bool,
        phase: str = "walk",
    ) -> Page:
        """Parse and check one list answer; see the module docstring for the rules."""
        url = str(response.url)
        if not isinstance(data, dict) or data.get("resourceType") != "Bundle":
            raise _not_a_bundle(response, data, url)
        records, included = _page_records(data, resource_type, url, include=include)
        total = data.get("total")
        if total is not None and (
            not isinstance(total, int) or isinstance(total, bool) or total < 0
        ):
            msg = f"{resource_type}: {url}: Bundle.total is {total!r}, not a count"
            raise MalformedPage(msg, url=url)
        return cls(
            raw=response.content,
            url=url,
            bundle=data,
            records=records,
            total=total,
            next=next_link(data),
            server_time=_server_time(response, data),
            phase=phase,
            included=included,
        )


def next_link(bundle: Any) -> str | None:
    """The url of a Bundle's first ``next`` link that has one (a non-empty string), or None.

    The client's walk and the contract suite's paging checks read the link this way.

    Examples
    --------
    >>> next_link({"link": [{"relation": "self", "url": "/a"}, {"relation": "next", "url": "/b"}]})
    '/b'
    >>> next_link({"link": "not a list"}) is None
    True
    """
    links = bundle.get("link") if isinstance(bundle, dict) else None
    for link in links if isinstance(links, list) else []:
        if isinstance(link, dict) and link.get("relation") == "next":
            url = link.get("url")
            if isinstance(url, str) and url:
                return url
    return None


def _not_a_bundle(response: httpx.Response, data: Any, url: str) -> ApiError:
    """The error for an answer that is not a Bundle (an OperationOutcome's text if it is one)."""
    kind = data.get("resourceType") if isinstance(data, dict) else type(data).__name__
    code, diagnostics = None, f"expected a Bundle, got {kind}"
    if kind == "OperationOutcome":
        code, diag, _ = outcome_details(response)
        diagnostics = diag or diagnostics
    return ApiError(
        response.status_code,
        method="GET",
        url=url,
        code=code,
        diagnostics=diagnostics,
        outcome=data if isinstance(data, dict) else None,
    )


def _page_records(
    data: dict[str, Any], resource_type: str, url: str, *, include: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The page's records of ``resource_type`` and, with ``_include`` asked, its included
    resources: marked ``search.mode: include``, or of another type (an OperationOutcome
    aside) when the server marks nothing. Without ``_include``, another kind is refused."""
    raw_entries = data.get("entry") or []
    if not isinstance(raw_entries, list):
        msg = f"{resource_type}: {url}: Bundle.entry is not a list"
        raise MalformedPage(msg, url=url)
    records: list[dict[str, Any]] = []
    included: list[dict[str, Any]] = []
    for i, entry in enumerate(raw_entries):
        resource = entry.get("resource") if isinstance(entry, dict) else None
        if not isinstance(resource, dict):
            msg = f"{resource_type}: {url}: entry[{i}] has no resource object"
            raise MalformedPage(msg, url=url)
        search = entry.get("search")
        mode = search.get("mode") if isinstance(search, dict) else None
        kind = resource.get("resourceType")
        if include and (
            mode == "include" or (kind != resource_type and kind != "OperationOutcome")
        ):
            included.append(resource)  # asked for with _include: not a record of the walk
            continue
        if kind == "OperationOutcome" and mode == "outcome":
            continue  # FHIR's informational entry about the search itself
        if kind != resource_type:
            msg = (
                f"{resource_type}: {url}: entry[{i}] is a {kind!r}, not a {resource_type} "
                "(and not an _include marked search.mode 'include'); a frame of it "
                "would silently lose records"
            )
            raise MalformedPage(msg, url=url)
        records.append(resource)
    return records, included


def _server_time(response: httpx.Response, data: dict[str, Any]) -> datetime | None:
    """The server's time of the answer: its ``Date`` header, else the Bundle's ``meta``."""
    date = response.headers.get("date")
    if date:
        try:
            return email.utils.parsedate_to_datetime(date).astimezone(UTC)
        except (TypeError, ValueError, IndexError):
            pass
    meta = data.get("meta")
    return read_instant(meta.get("lastUpdated")) if isinstance(meta, dict) else None
