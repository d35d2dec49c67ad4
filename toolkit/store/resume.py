"""Resuming a sync: prefetching pages, the checkpoint and the server's clock."""

from __future__ import annotations

import contextlib
import email.utils
import queue
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar

import polars as pl

from toolkit.store.layout import instant
from toolkit.store.results import PAGE_SIZE, STORE_FORMAT, Mode

_T = TypeVar("_T")

_POLL = 0.2
"""Seconds between checks for Ctrl-C while the consumer waits for the next page."""


class Prefetch(Generic[_T]):
    """Iterate ``pages`` in a worker thread, at most ``depth`` pages ahead.

    Errors (and ``KeyboardInterrupt``) raised while fetching are re-raised in
    the consuming thread, at the point where the failed page would have come.
    """

    def __init__(self, pages: Iterator[_T], depth: int) -> None:
        self._pages = pages
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pmtk-sync-prefetch", daemon=True)
        self._thread.start()

    def _put(self, item: tuple[str, Any]) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
            except queue.Full:
                continue
            return True
        return False

    def _run(self) -> None:
        item: tuple[str, Any] = ("done", None)
        try:
            for page in self._pages:
                if not self._put(("page", page)):
                    return
        except BaseException as exc:  # handed to the consumer, which re-raises it
            item = ("error", exc)
        finally:
            close = getattr(self._pages, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    close()
        self._put(item)

    def batches(self, limit: int) -> Iterator[list[_T]]:
        """Yield the pages in order, grouped: one page, plus any already fetched (<= limit).

        When writing keeps up with the network every batch is a single page;
        when it falls behind, the waiting pages are flattened together, which
        amortises the per-call cost instead of letting the backlog grow.
        """
        while True:
            batch: list[_T] = []
            end: tuple[str, Any] | None = None
            kind, value = self._next()
            while True:
                if kind != "page":
                    end = (kind, value)
                    break
                batch.append(value)
                if len(batch) >= limit:
                    break
                try:
                    kind, value = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch:
                yield batch
            if end is not None:
                if end[0] == "error":
                    raise end[1]
                return

    def _next(self) -> tuple[str, Any]:
        """The next item, waiting in short steps so that Ctrl-C is answered at once.

        An untimed ``get`` can sleep through SIGINT until the worker hands on its
        next page, up to a minute of rate-limit wait (Python runs the handler in
        the main thread only once that thread wakes); a timed one wakes every
        ``_POLL`` seconds and lets the handler raise ``KeyboardInterrupt``.
        """
        while True:
            try:
                return self._queue.get(timeout=_POLL)
            except queue.Empty:
                continue

    def __enter__(self) -> Prefetch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            # Ctrl-C: the worker only fetches (pages are staged in the consuming
            # thread), so nothing is lost by not waiting. It may be asleep in a
            # rate-limit wait of up to a minute, which joining would sit out (up
            # to the 30 s below) before the interrupt took effect. It is a daemon
            # thread and, the stop flag set, hands nothing on when it wakes.
            return
        self._thread.join(timeout=30)


@dataclass(slots=True)
class Checkpoint:
    """The state file of an unfinished sync of one resource."""

    resource: str
    schema_version: str
    mode: Mode
    since: str | None
    started_at: str
    server_time: str | None = None
    phase: Literal["fetch", "merge", "commit"] = "fetch"
    page_size: int = PAGE_SIZE
    pages_done: int = 0
    parts: int = 0
    records: int = 0
    total: int | None = None
    next_url: str | None = None
    max_last_updated: str | None = None
    entry: dict[str, Any] | None = None
    staged: int | None = None
    """Raw-record rows written to the parts this checkpoint counts (``None``: not kept,
    a checkpoint of an older pmtk); the merge refuses parts that hold fewer."""
    unique: bool = False
    """The staged records are known to be one per id: one walk into an empty stage that
    read no id twice (no resume, no recovery), so the merge need not look for repeats."""

    def to_json(self) -> dict[str, Any]:
        return {
            "format": STORE_FORMAT,
            "resource": self.resource,
            "schema_version": self.schema_version,
            "mode": self.mode,
            "since": self.since,
            "server_time": self.server_time,
            "started_at": self.started_at,
            "phase": self.phase,
            "page_size": self.page_size,
            "pages_done": self.pages_done,
            "parts": self.parts,
            "records": self.records,
            "total": self.total,
            "next_url": self.next_url,
            "max_last_updated": self.max_last_updated,
            "entry": self.entry,
            "staged": self.staged,
            "unique": self.unique,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Checkpoint:
        if data.get("format") != STORE_FORMAT:
            msg = "checkpoint of another store format"
            raise ValueError(msg)
        return cls(
            resource=str(data["resource"]),
            schema_version=str(data["schema_version"]),
            mode=data["mode"],
            since=data["since"],
            server_time=data.get("server_time"),
            started_at=str(data["started_at"]),
            phase=data["phase"],
            page_size=int(data["page_size"]),
            pages_done=int(data["pages_done"]),
            parts=int(data["parts"]),
            records=int(data["records"]),
            total=data["total"],
            next_url=data["next_url"],
            max_last_updated=data["max_last_updated"],
            entry=data["entry"],
            staged=data["staged"] if isinstance(data.get("staged"), int) else None,
            unique=data.get("unique") is True,
        )


def _server_time(date_header: str | None) -> str | None:
    """The server's clock from an HTTP ``Date`` header, as ISO 8601 UTC (or ``None``)."""
    if not date_header:
        return None
    try:
        when = email.utils.parsedate_to_datetime(date_header)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def since_after(mark: str | None, server_time: str | None) -> str | None:
    """The ``_lastUpdated`` bound of the next incremental sync.

    ``mark`` is the greatest ``lastUpdated`` stored and ``server_time`` the
    server's clock when the walk began (``Date`` of its first response).

    * ``mark < server_time``: the mark's clock tick had ended before anything
      was read, so any later write carries a greater ``lastUpdated`` and
      ``gt<mark>`` misses nothing (and re-reads nothing).
    * ``mark >= server_time``: records changed while the walk ran. ``ge`` the
      walk's start re-reads them (merged by id), and catches a record changed
      behind the walk or later in the mark's tick.
    * server time unknown: ``ge<mark>``, safe but it re-reads the records at the mark.
    """
    if mark is None:
        return None
    if server_time is None:
        return f"ge{mark}"
    if instant(mark) < instant(server_time):
        return f"gt{mark}"
    return f"ge{server_time}"


def later_since(a: str | None, b: str | None) -> str | None:
    """The later of two ``_lastUpdated`` bounds (``gt``/``ge`` and an instant); ``None``
    is earliest (no bound: everything). At one instant ``gt`` is the later bound (it
    asks for less)."""
    if a is None or b is None:
        return b if a is None else a

    def key(bound: str) -> tuple[Any, int]:
        return instant(bound[2:]), 1 if bound.startswith("gt") else 0

    return a if key(a) >= key(b) else b


def next_since(entry: Mapping[str, Any]) -> str | None:
    since = entry.get("next_since")
    if isinstance(since, str) and since[:2] in ("gt", "ge"):
        return since
    mark = entry.get("high_water_mark")
    return f"ge{mark}" if isinstance(mark, str) else None


def row_hashes(df: pl.DataFrame) -> list[int]:
    if df.height == 0:
        return []
    hashes = df.select(pl.struct(pl.all()).hash(seed=0).alias("h"))["h"]
    return sorted(hashes.to_list())
