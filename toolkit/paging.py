"""List walks: a :class:`Walk` over pages parsed once, that recovers from change.

A walk follows ``next`` links (checked against the origin by the caller's
``resolve``), parses each page once (:class:`toolkit.page.Page`), and refuses
what would make a quiet wrong frame:

* an entry of another ``resourceType`` (unless ``_include``/``_revinclude`` was
  asked: then an entry marked ``search.mode: include``, or of another type
  without a mark, as some servers send them, is an included record, kept apart
  in :attr:`Page.included` and not counted), refused by :meth:`Page.parse`;
* more records than ``Bundle.total`` that the walk's own time cannot explain,
  or more pages than ``total`` and the page size allow (+ :data:`PAGE_MARGIN`);
  without a ``total``, more than ``max_pages`` pages (:data:`DEFAULT_MAX_PAGES`);
* a ``next`` link back to a page already read, or a page of nothing but
  versions already read (:class:`~toolkit.errors.PagingLoop`).

**Changing collections.** On a busy deployment records change while a list is
walked: a changed record moves, so it shows up twice and another slides across
a page boundary and is missed. The walk notes the server's time ``t0`` when it
starts (the ``Date`` header of page 1, else its ``meta.lastUpdated``, else the
local clock minus :data:`CLOCK_MARGIN`). When the walk ends with a repeated id
or a count other than ``total``, it recovers:

1. walk ``_lastUpdated=ge<t0>`` (same other parameters): every record changed
   or created since the start, in its newest version;
2. ask how many records are unchanged since ``t0`` (``_lastUpdated=lt<t0>``,
   ``_count=1``, its ``total``); if the walk holds that many, it is whole;
3. otherwise (a record slid into a page already read) walk
   ``_lastUpdated=lt<t0>`` -- a set that changes only by losing records -- and
   go back to 1, once.

The pages of the recovery are yielded after the walk's own pages, so a consumer
of raw pages sees a record more than once and keeps, per id, the newest
``meta.lastUpdated`` (ties: the later page). :meth:`Walk.clean` does that for
pages kept in memory. Recovery raises :class:`~toolkit.errors.IncompleteResult`
only when it cannot make the result whole.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
import orjson

from toolkit import catalogue
from toolkit.errors import (
    IgnoredFilter,
    IgnoredFilterWarning,
    IncompleteResult,
    MalformedPage,
    PageLimitExceeded,
    PagingLoop,
)
from toolkit.page import (
    NOT_FILTERS,
    Page,
    ignored_filters,
    micros,
    next_link,
    read_instant,
    record_stamp,
    self_link,
)
from toolkit.seen import Seen

# Page and the reading of its links and filters (toolkit.page) were defined here
# first, and are still importable from here.
__all__ = [
    "CLOCK_MARGIN",
    "DEFAULT_MAX_PAGES",
    "IGNORED_FILTERS",
    "NOT_FILTERS",
    "PAGE_MARGIN",
    "FetchSummary",
    "Page",
    "Walk",
    "ignored_filters",
    "next_link",
    "self_link",
]

IGNORED_FILTERS = ("raise", "warn")
"""What a walk does when the server ignored a filter: raise
:class:`~toolkit.errors.IgnoredFilter`, or warn and go on."""

DEFAULT_MAX_PAGES = 10_000
"""Pages one pass may take when the server gives no ``total`` (a million records at 100)."""

PAGE_MARGIN = 2
"""Pages allowed beyond ``ceil(total / page size)`` (records created during the walk)."""

CLOCK_MARGIN = timedelta(minutes=2)
"""Subtracted from the local clock when the server tells no time (clock skew)."""

RECOVERY_ROUNDS = 2
"""Passes of "changed since t0" a recovery may make (a fill walk between them)."""

Query = list[tuple[str, str]]
Fetch = Callable[[str, Query | None], tuple[httpx.Response, Any]]


@dataclass(slots=True)
class FetchSummary:
    """What one list walk cost. ``client.last_summary`` holds the latest.

    Attributes
    ----------
    resource_type
        The resource walked.
    pages, records
        Pages received (recovery included) and distinct records kept.
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
    started_at
        Server time at the start of the walk (ISO 8601 UTC), the recovery's ``t0``.
    recovered
        The collection changed during the walk and recovery pages were fetched.
    filters_checked
        Whether the first page's ``self`` link could tell which filters the server
        applied (``False``: no usable ``self`` link, or no filter was sent).
    ignored_filters
        Filters the server left out of its ``self`` link (with ``ignored_filters="warn"``;
        ``"raise"`` raises :class:`~toolkit.errors.IgnoredFilter` instead).
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
    started_at: str | None = None
    recovered: bool = False
    filters_checked: bool = False
    ignored_filters: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        total = "?" if self.total is None else str(self.total)
        state = "complete" if self.complete else "incomplete"
        if self.recovered:
            state += ", recovered from changes during the walk"
        if self.ignored_filters:
            state += f", the server ignored {', '.join(self.ignored_filters)}"
        return (
            f"{self.resource_type}: {self.records}/{total} records in {self.pages} pages, "
            f"{self.requests} requests, {self.retries} retries, {self.rate_limited} x 429, "
            f"{self.waited_seconds:.1f} s waiting, {self.elapsed_seconds:.1f} s elapsed ({state})"
        )


def _bound(when: datetime) -> str:
    """A ``_lastUpdated`` value: the second ``when`` falls in (floor), in UTC."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _page_key(url: str) -> str:
    """A URL normalized for loop detection: sorted query, ``page`` defaulting to 1."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.setdefault("page", "1")
    return urlunsplit(
        (parts.scheme, parts.netloc.lower(), parts.path, urlencode(sorted(query.items())), "")
    )


@dataclass(slots=True)
class _Pass:
    """The bookkeeping of one pass (the walk, or one recovery query)."""

    phase: str
    number: int
    """Passes are numbered from 1; the index notes the last pass that read each id."""
    pages: int = 0
    total: int | None = None
    first_len: int | None = None
    start: datetime | None = None
    unexplained: int = 0
    keys: set[str] = field(default_factory=set)


class Walk:
    """One list walk: its pages in order, then any recovery pages.

    Parameters
    ----------
    resource_type
        The type asked for; entries of another type are an error.
    url
        The list URL (already checked against the origin).
    query
        Query parameters as ``(name, value)`` pairs (names may repeat).
    fetch
        ``fetch(url, query) -> (response, parsed JSON)``: one GET through the
        client's pipeline.
    resolve
        ``resolve(link, page_url) -> url``: a ``next`` link resolved and checked
        against the origin (raises :class:`~toolkit.errors.ForeignLink`).
    summary
        Filled in as the walk goes.
    max_pages
        Pages one pass may take; ``None``: :data:`DEFAULT_MAX_PAGES` when the
        server gives no ``total`` (with a ``total`` the bound comes from it).
    recover
        Recover from changes during the walk (see the module docstring).
        ``False`` raises :class:`~toolkit.errors.IncompleteResult` instead.
    track_ids
        ``False`` for ``$find``, whose proposal ids repeat by design: no
        duplicate check and no recovery.
    skipped
        Records the caller already holds from the pages before ``url``'s (a
        resumed walk that starts at a later page). They count toward
        ``Bundle.total``; such a walk cannot recover (it never saw those pages),
        so it is whole when its records and ``skipped`` reach ``total``.
    now
        The local UTC clock, used only when the server tells no time.
    on_ignored_filter
        ``"raise"`` (default): a filter the first page's ``self`` link leaves out
        raises :class:`~toolkit.errors.IgnoredFilter` before the page is yielded, so
        an unfiltered walk never passes as a filtered one; ``"warn"``: an
        :class:`~toolkit.errors.IgnoredFilterWarning`, noted in the summary. Each
        pass is checked (the recovery's ``_lastUpdated`` too).
    """

    def __init__(
        self,
        resource_type: str,
        url: str,
        query: Query,
        *,
        fetch: Fetch,
        resolve: Callable[[str, str], str],
        summary: FetchSummary,
        max_pages: int | None = None,
        recover: bool = True,
        track_ids: bool = True,
        skipped: int = 0,
        now: Callable[[], datetime] | None = None,
        on_ignored_filter: str = "raise",
    ) -> None:
        if on_ignored_filter not in IGNORED_FILTERS:
            msg = f"ignored_filters must be 'raise' or 'warn', got {on_ignored_filter!r}"
            raise ValueError(msg)
        if max_pages is not None and max_pages < 1:
            msg = f"max_pages must be at least 1, got {max_pages!r}"
            raise ValueError(msg)
        if skipped < 0:
            msg = f"skipped must be a count of records, got {skipped!r}"
            raise ValueError(msg)
        self.resource_type = resource_type
        self.url = url
        self.query = list(query)
        self.summary = summary
        self.max_pages = max_pages
        self.recover = recover
        self.track_ids = track_ids
        self.skipped = skipped
        self.on_ignored_filter = on_ignored_filter
        self._fetch = fetch
        self._resolve = resolve
        self._now = now or (lambda: datetime.now(UTC))
        self._include = any(k in ("_include", "_revinclude") for k, _ in self.query)
        self._seen = Seen()
        self._passes = 0
        self._index = 0  # pages yielded so far
        self._repeats = 0  # the same version of a record read again
        self._moved = 0  # a newer version of a record read again
        self.started_at: datetime | None = None

    # ------------------------------------------------------------------ one pass

    def _limit(self, p: _Pass) -> int | None:
        derived = None
        if p.total is not None and p.first_len:
            derived = math.ceil(p.total / p.first_len) + PAGE_MARGIN
        if self.max_pages is not None:
            return min(self.max_pages, derived) if derived is not None else self.max_pages
        return derived if derived is not None else DEFAULT_MAX_PAGES

    def _note(self, p: _Pass, page: Page) -> None:
        """Account for the records of one page; raise on what cannot be right."""
        if p.pages == 1:
            p.total = page.total
            p.start = page.server_time
            if p.start is None:
                p.start = self._now() - CLOCK_MARGIN
        if p.first_len is None and page.next is not None:
            p.first_len = len(page.records)
        if not self.track_ids:
            p.unexplained += len(page.records)
            fresh = len(page.records)
        else:
            fresh = self._note_versions(p, page)
        if p.total is not None and p.unexplained > p.total:
            msg = (
                f"{self.resource_type}: {page.url}: {p.unexplained} records read but the "
                f"server announced {p.total} (Bundle.total), and they did not change during "
                "the walk; the pages contradict their total"
            )
            raise MalformedPage(msg, url=page.url)
        if p.phase == "walk" and self.track_ids and page.records and fresh == 0:
            msg = (
                f"{self.resource_type}: page {p.pages} ({page.url}) repeats records already "
                "read, in the same versions: the next links loop"
            )
            raise PagingLoop(msg, expected=p.total, received=len(self._seen))

    def _past_limit(self, p: _Pass, limit: int, url: str) -> PageLimitExceeded:
        """The error for a pass whose next links go on past ``limit`` pages."""
        basis = (
            f"Bundle.total {p.total} at {p.first_len} a page allows {limit} (+{PAGE_MARGIN})"
            if p.total is not None and p.first_len and self.max_pages is None
            else f"max_pages={limit}"
        )
        msg = (
            f"{self.resource_type}: the next links go on past {p.pages} pages; "
            f"{basis}. Pass max_pages= to allow more"
        )
        return PageLimitExceeded(msg, url=url, limit=limit)

    def _note_versions(self, p: _Pass, page: Page) -> int:
        """Note each record's version in the index; return how many were fresh."""
        ids: list[str] = []
        for pos, record in enumerate(page.records):
            rid = record.get("id")
            if not isinstance(rid, str) or not rid:
                msg = (
                    f"{self.resource_type}: {page.url}: record {pos} has no id, so the "
                    "walk cannot tell repeats from new records"
                )
                raise MalformedPage(msg, url=page.url)
            ids.append(rid)
        start = micros(p.start)
        known = self._seen.lookup(ids)
        held = frozenset(known)  # before the loop below adds this page's new ids
        fresh = 0
        for pos, (rid, record) in enumerate(zip(ids, page.records, strict=True)):
            stamp = micros(record_stamp(record))
            prev = known.get(rid)
            first_in_pass = prev is None or prev[3] != p.number
            if first_in_pass and (stamp is None or start is None or stamp < start):
                p.unexplained += 1
            if prev is None:
                fresh += 1
            elif prev[0] is None or stamp is None or stamp == prev[0]:
                self._repeats += 1
            else:
                self._moved += 1
                fresh += 1
            if prev is None or prev[0] is None or stamp is None or stamp >= prev[0]:
                known[rid] = (stamp, self._index, pos, p.number)
            else:
                known[rid] = (prev[0], prev[1], prev[2], p.number)
        self._seen.write({rid: known[rid] for rid in ids}, known=held)
        return fresh

    def _pass(self, query: Query, phase: str) -> Iterator[Page]:
        self._passes += 1
        p = _Pass(phase, self._passes)
        url: str | None = self.url
        params: Query | None = query
        while url is not None:
            limit = self._limit(p)
            if limit is not None and p.pages >= limit:
                raise self._past_limit(p, limit, url)
            response, data = self._fetch(url, params)
            params = None
            page = Page.parse(
                response, data, self.resource_type, include=self._include, phase=phase
            )
            p.keys.add(_page_key(page.url))
            p.pages += 1
            if p.pages == 1:
                self._check_filters(page)
            self._note(p, page)
            if phase == "walk" and p.pages == 1:
                self.started_at = p.start
                self.summary.total = p.total
                if p.start is not None:
                    self.summary.started_at = _bound(p.start)
            self.summary.pages += 1
            self.summary.records = len(self._seen) if self.track_ids else p.unexplained
            yield page
            self._index += 1
            if page.next is None:
                break
            url = self._resolve(page.next, page.url)
            if _page_key(url) in p.keys:
                msg = (
                    f"{self.resource_type}: the next link of page {p.pages} points back to a "
                    f"page already read ({url})"
                )
                raise PagingLoop(msg, expected=p.total, received=self.summary.records)
            if not page.records:
                msg = (
                    f"{self.resource_type}: page {p.pages} is empty but links to a next "
                    "page; stopping rather than looping"
                )
                raise IncompleteResult(msg, expected=p.total, received=self.summary.records)

    def _check_filters(self, page: Page) -> None:
        """Refuse (or warn about) a first page whose ``self`` link drops a filter sent."""
        dropped = ignored_filters(page.url, page.bundle)
        if dropped is None:
            return
        self.summary.filters_checked = True
        if not dropped:
            return
        names = ", ".join(dropped)
        msg = (
            f"{self.resource_type}: the server ignored the filter(s) {names}: its self link "
            f"({self_link(page.bundle)}) leaves them out, so the answer is not filtered by them"
        )
        if self.on_ignored_filter == "raise":
            raise IgnoredFilter(msg, url=page.url, ignored=dropped)
        for name in dropped:
            if name not in self.summary.ignored_filters:
                self.summary.ignored_filters.append(name)
        warnings.warn(msg, IgnoredFilterWarning, stacklevel=2)

    # ------------------------------------------------------------------ the walk

    def _base_query(self) -> Query:
        return [(k, v) for k, v in self.query if k != "page"]

    def _count_unchanged(self, bound: str) -> int | None:
        query = [(k, v) for k, v in self._base_query() if k != "_count"]
        query += [(catalogue.LAST_UPDATED, f"lt{bound}"), ("_count", "1")]
        response, data = self._fetch(self.url, query)
        page = Page.parse(response, data, self.resource_type, include=self._include)
        return page.total

    def __iter__(self) -> Iterator[Page]:
        yield from self._pass(self.query, "walk")
        total = self.summary.total
        records = self.summary.records
        if self.skipped:
            if total is not None and records + self.skipped < total:
                why = f" after the {self.skipped} records before its first page"
                raise self._short(why, total, records + self.skipped)
            self.summary.complete = True
            return
        if not self.track_ids or (
            not self._moved and not self._repeats and total in (None, records)
        ):
            if total is not None and records < total:
                raise self._short("", total, records)
            self.summary.complete = True
            return
        if not self.recover:
            repeated = self._moved or self._repeats  # else only short of total
            why = " and the collection changed during the walk (ids repeated)" if repeated else ""
            raise self._short(why, total, records)
        t0 = self.started_at or (self._now() - CLOCK_MARGIN)
        bound = _bound(t0)
        floor = micros(read_instant(bound))
        assert floor is not None
        self.summary.recovered = True
        missing = 0
        for rnd in range(RECOVERY_ROUNDS):
            changed = [*self._base_query(), (catalogue.LAST_UPDATED, f"ge{bound}")]
            yield from self._pass(changed, "changed")
            unchanged = self._count_unchanged(bound)
            have = self._seen.count_before(floor)
            if unchanged is None:
                if rnd > 0:
                    break
            elif have >= unchanged:
                break
            else:
                missing = unchanged - have
            if rnd == RECOVERY_ROUNDS - 1:
                msg = (
                    f"{self.resource_type}: records changed during the walk and recovery "
                    f"(_lastUpdated=ge/lt{bound}) still lacks {missing} unchanged record(s)"
                )
                raise IncompleteResult(msg, expected=total, received=len(self._seen))
            yield from self._pass(
                [*self._base_query(), (catalogue.LAST_UPDATED, f"lt{bound}")], "unchanged"
            )
        self.summary.records = len(self._seen)
        self.summary.complete = True

    def _short(self, why: str, total: int | None, records: int) -> IncompleteResult:
        msg = (
            f"{self.resource_type}: the server announced {total} records (Bundle.total) but "
            f"the walk returned {records} in {self.summary.pages} pages{why}"
        )
        return IncompleteResult(msg, expected=total, received=records)

    # ------------------------------------------------------------------ dedupe

    def close(self) -> None:
        """Drop the index of ids read (a spilled one's temporary file goes with it)."""
        self._seen.close()

    def winners(self) -> dict[int, set[int]]:
        """Per page index, the positions of the records that are the newest version."""
        out: dict[int, set[int]] = {}
        for page, pos in self._seen.versions():
            out.setdefault(page, set()).add(pos)
        return out

    def clean(self, pages: Sequence[bytes]) -> list[bytes]:
        """The walk's pages (as yielded) with every superseded record removed.

        Pages with nothing superseded are returned as they are (no re-encoding).
        """
        if not self.track_ids or (not self.summary.recovered and not self._repeats):
            self.close()
            return list(pages)
        keep = self.winners()
        self.close()
        out: list[bytes] = []
        for i, raw in enumerate(pages):
            bundle = orjson.loads(raw)
            entries = bundle.get("entry") or []
            positions = keep.get(i, set())
            kept: list[Any] = []
            pos = 0
            dropped = False
            for entry in entries:
                resource = entry.get("resource") if isinstance(entry, dict) else None
                search = entry.get("search") if isinstance(entry, dict) else None
                is_record = (
                    isinstance(resource, dict)
                    and resource.get("resourceType") == self.resource_type
                    and not (
                        self._include
                        and isinstance(search, dict)
                        and search.get("mode") == "include"
                    )
                )
                if is_record:
                    if pos in positions:
                        kept.append(entry)
                    else:
                        dropped = True
                    pos += 1
                else:
                    kept.append(entry)
            if dropped:
                bundle["entry"] = kept
                out.append(orjson.dumps(bundle))
            else:
                out.append(raw)
        return out


def local_now() -> datetime:
    """The local wall clock in UTC (the fallback when the server tells no time)."""
    return datetime.fromtimestamp(time.time(), UTC)
