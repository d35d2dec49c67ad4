"""A local Parquet store of the deployment's records, kept current by incremental sync.

Layout of a store directory (``pmtk-store`` unless told otherwise)::

    pmtk-store/
      manifest.json                    what is stored, how fresh it is, which schema
      Appointment/data.parquet         one dataset per resource ...
      appointment_participant/data.parquet   ... and per child table of its view
      Referral/data.parquet
      .staging/<Resource>/             only while a sync of <Resource> is unfinished
        state.json                     the checkpoint: query, pages done, high-water mark
        <table>/part-000001.parquet    one part file per fetched page and table
        merged/<table>.parquet         merged datasets waiting to be swapped in
      .lock                            held (flock) while a sync writes

How a resource is synced (:func:`sync`):

1. **Fetch.** The list endpoint is walked page by page (``_count=100``). Each
   page is flattened with :func:`toolkit.views.flatten_tables` and written as
   its own part file, then the checkpoint is replaced atomically. Memory holds
   one page (plus a few prefetched ones), never the resource.
2. **Validate.** The staged rows are validated with
   :func:`toolkit.schemas.validate` in bounded batches.
3. **Merge.** The parts are merged by ``id`` into the current dataset with
   ``scan_parquet``/``sink_parquet`` (streaming): the newest staged version of a
   record replaces the stored one, and the child-table rows of a replaced
   record are replaced as a whole.
4. **Commit.** The merged files are moved over the datasets with
   :func:`os.replace` and the manifest is replaced last. The checkpoint records
   the commit first, so a crash half-way through is rolled forward by the next
   run. Readers never see a half-written file.

Incremental semantics: the manifest keeps, per resource, the server-side
high-water mark (the greatest ``meta.lastUpdated`` stored). The next sync asks
for ``_lastUpdated=ge<mark>`` -- ``ge``, not ``gt``, so that a record written
in the same clock tick as the mark, after the previous sync read that tick, is
not lost. The records at the mark come back again; merging by ``id`` makes that
harmless, and when every returned row equals the stored one the dataset is left
untouched. A re-sync with nothing changed therefore costs one list request per
resource (plus a token).

A changed view (the schema version, a hash of every table's columns and dtypes)
forces a full sync of that resource, as does ``full=True``.
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import inspect
import os
import queue
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol

import orjson
import polars as pl

from toolkit import catalogue
from toolkit.errors import IncompleteResult, PagingLoop, PmtkError

__all__ = [
    "DEFAULT_STORE",
    "PAGE_SIZE",
    "STORE_FORMAT",
    "PageProgress",
    "PageSource",
    "ResourceSync",
    "StoreError",
    "SyncSummary",
    "declared_schemas",
    "load",
    "read_manifest",
    "schema_version",
    "sync",
]

DEFAULT_STORE = "pmtk-store"
"""Directory used when no ``out``/``store`` is given."""

STORE_FORMAT = 1
"""Version of the on-disk layout and of ``manifest.json``."""

PAGE_SIZE = catalogue.MAX_PAGE_SIZE
"""``_count`` of every list request: the largest page the API serves."""

VALIDATION_BATCH_ROWS = 50_000
"""Staged rows validated at once: bounds the memory validation needs."""

COMPARE_LIMIT = 5_000
"""Largest incremental fetch compared row by row with the store to detect "unchanged"."""

PREFETCH_PAGES = 8
"""Pages fetched ahead of the one being written (and the most flattened into one part)."""

MANIFEST = "manifest.json"
STAGING = ".staging"
DATA_FILE = "data.parquet"
STATE_FILE = "state.json"
PART_COLUMN = "_part"

Mode = Literal["full", "incremental"]
ErrorsMode = Literal["raise", "warn"]


class StoreError(PmtkError, FileNotFoundError):
    """The store, a resource in it, or one of its files is missing, locked or unreadable."""


class PageSource(Protocol):
    """What :func:`sync` needs from a client: raw Bundle pages of a search."""

    def pages(self, resource_type: str, /, **search: Any) -> Iterator[bytes]:
        """Yield each page of a search as the raw Bundle bytes."""
        ...


@dataclass(frozen=True, slots=True)
class PageProgress:
    """Passed to a ``progress`` callable after each page is safely staged.

    Attributes
    ----------
    resource
        The resource type being synced.
    page
        Page number (1-based) of the page just staged.
    pages
        Pages staged so far in this run.
    records
        Records staged for this resource so far (including before a resume).
    total
        ``Bundle.total`` of the search, when the server reports it.
    """

    resource: str
    page: int
    pages: int
    records: int
    total: int | None


ProgressCallback = Callable[[PageProgress], None]


@dataclass(slots=True)
class ResourceSync:
    """What one resource's sync did.

    Attributes
    ----------
    resource
        The resource type.
    mode
        ``"full"`` or ``"incremental"``.
    status
        ``"updated"`` (the datasets were replaced) or ``"unchanged"``.
    resumed
        Whether the run continued an interrupted one.
    fetched
        Records received from the server (including before a resume).
    rows
        Rows now stored, per table.
    pages
        List pages requested in this run.
    requests
        HTTP requests the client sent for them (retries and 429 waits included,
        token requests excluded); equals ``pages`` when the client cannot tell.
    elapsed
        Seconds spent on this resource in this run.
    high_water_mark
        Greatest ``meta.lastUpdated`` stored (server time), or ``None``.
    """

    resource: str
    mode: Mode
    status: str = "updated"
    resumed: bool = False
    fetched: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    pages: int = 0
    requests: int = 0
    elapsed: float = 0.0
    high_water_mark: str | None = None


@dataclass(slots=True)
class SyncSummary:
    """The outcome of :func:`sync`: one :class:`ResourceSync` per resource.

    Attributes
    ----------
    out
        The store directory.
    resources
        One entry per synced resource, in the order synced.
    elapsed
        Wall-clock seconds of the whole sync.
    """

    out: Path
    resources: list[ResourceSync] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def pages(self) -> int:
        """List pages requested by the whole sync."""
        return sum(r.pages for r in self.resources)

    @property
    def requests(self) -> int:
        """HTTP requests sent by the whole sync (token requests not counted)."""
        return sum(r.requests for r in self.resources)

    def __getitem__(self, resource_type: str) -> ResourceSync:
        for r in self.resources:
            if r.resource == resource_type:
                return r
        msg = f"{resource_type!r} was not part of this sync"
        raise KeyError(msg)

    def table(self) -> Any:
        """A :class:`rich.table.Table`: rows, pages, requests and time per resource."""
        from rich.table import Table

        t = Table(title=f"pmtk sync -> {self.out}")
        t.add_column("resource", no_wrap=True)
        t.add_column("mode", no_wrap=True)
        t.add_column("status", no_wrap=True)
        for name in ("fetched", "rows", "child rows", "pages", "requests", "elapsed"):
            t.add_column(name, justify="right")
        for r in self.resources:
            main = r.rows.get(r.resource, 0)
            children = sum(n for table, n in r.rows.items() if table != r.resource)
            t.add_row(
                r.resource,
                r.mode + (" (resumed)" if r.resumed else ""),
                r.status,
                f"{r.fetched:,}",
                f"{main:,}",
                f"{children:,}",
                str(r.pages),
                str(r.requests),
                f"{r.elapsed:.1f} s",
            )
        t.caption = f"{self.requests} requests ({self.pages} pages) in {self.elapsed:.1f} s"
        return t


# --------------------------------------------------------------------------- small helpers


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _instant(text: str) -> datetime:
    when = datetime.fromisoformat(text)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _later(a: str | None, b: str | None) -> str | None:
    if a is None:
        return b
    if b is None:
        return a
    return b if _instant(b) > _instant(a) else a


def _write_json(path: Path, obj: Any) -> None:
    """Replace ``path`` atomically: a reader sees the old or the new file, never a part."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    os.replace(tmp, path)


def _read_json(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def _write_parquet(df: pl.DataFrame, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    df.write_parquet(tmp)
    os.replace(tmp, path)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name.replace("-", "_")).lower()


def _views(resource_type: str) -> tuple[Any, ...]:
    from toolkit import views

    if resource_type not in views.VIEWS:
        from toolkit.errors import ConfigurationError

        known = ", ".join(views.VIEWS)
        msg = f"no view for resource type {resource_type!r}; known types: {known}"
        raise ConfigurationError(msg)
    return views.VIEWS[resource_type]


def declared_schemas(resource_type: str) -> dict[str, pl.Schema]:
    """Column names and dtypes of every table of a resource's view, main table first.

    Parameters
    ----------
    resource_type
        A resource with a declared view, e.g. ``"Appointment"``.

    Returns
    -------
    dict of str to polars.Schema
        Keyed by table name: the resource name, then child tables such as
        ``appointment_participant`` (see :data:`toolkit.views.VIEWS`).

    Examples
    --------
    >>> list(declared_schemas("Appointment"))[:2]
    ['Appointment', 'appointment_supporting_information']
    """
    return {v.name: v.schema for v in _views(resource_type)}


def _parent_key(resource_type: str) -> str:
    """Column of a child table that holds its parent's id, e.g. ``appointment_id``."""
    for v in _views(resource_type):
        if v.key is not None:
            return str(v.key)
    return f"{_snake(resource_type)}_id"


def _empty_tables(resource_type: str) -> dict[str, pl.DataFrame]:
    return {
        name: pl.DataFrame(schema=schema)
        for name, schema in declared_schemas(resource_type).items()
    }


def schema_version(resource_type: str) -> str:
    """A short hash of every table's columns and dtypes in a resource's view.

    A store whose manifest records another version for a resource is re-synced
    in full, because its stored frames no longer match the view.

    Parameters
    ----------
    resource_type
        A resource with a declared view.

    Returns
    -------
    str
        ``"<STORE_FORMAT>-<16 hex digits>"``.
    """
    parts = [
        f"{table}:" + ",".join(f"{col}={dtype!r}" for col, dtype in schema.items())
        for table, schema in declared_schemas(resource_type).items()
    ]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return f"{STORE_FORMAT}-{digest}"


# --------------------------------------------------------------------------- manifest


def _manifest_path(root: Path) -> Path:
    return root / MANIFEST


def read_manifest(store: str | os.PathLike[str] = DEFAULT_STORE) -> dict[str, Any]:
    """The parsed ``manifest.json`` of a store.

    Parameters
    ----------
    store
        The store directory.

    Returns
    -------
    dict
        ``{"format": 1, "resources": {<type>: {...}}}``; see ``docs/store.md``.

    Raises
    ------
    StoreError
        When the directory or its manifest is missing or unreadable.
    """
    root = Path(store)
    path = _manifest_path(root)
    if not path.is_file():
        what = "does not exist" if not root.exists() else "has no manifest.json"
        msg = f"no pmtk store at {root}: the directory {what}; run `pmtk sync --out {root}` first"
        raise StoreError(msg)
    try:
        manifest = _read_json(path)
    except (OSError, orjson.JSONDecodeError) as exc:
        msg = f"the manifest of the store at {root} is unreadable ({exc}); run `pmtk sync --full`"
        raise StoreError(msg) from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("resources"), dict):
        msg = f"the manifest of the store at {root} is malformed; run `pmtk sync --full`"
        raise StoreError(msg)
    return manifest


def _load_manifest_for_write(root: Path) -> dict[str, Any]:
    if not _manifest_path(root).exists():
        return {"format": STORE_FORMAT, "resources": {}}
    try:
        return read_manifest(root)
    except StoreError:
        # An unreadable manifest cannot be trusted: every resource starts over in full.
        return {"format": STORE_FORMAT, "resources": {}}


def _update_manifest(root: Path, resource_type: str, entry: dict[str, Any]) -> None:
    manifest = _load_manifest_for_write(root)
    manifest["format"] = STORE_FORMAT
    manifest["resources"][resource_type] = entry
    _write_json(_manifest_path(root), manifest)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Hold an exclusive lock on the store; a second writer fails fast."""
    root.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX: no lock, single writer assumed
        yield
        return
    with (root / ".lock").open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            msg = f"another pmtk sync is writing to {root}; wait for it to finish"
            raise StoreError(msg) from exc
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- prefetch


class _Prefetch:
    """Iterate ``pages`` in a worker thread, at most ``depth`` pages ahead.

    Errors (and ``KeyboardInterrupt``) raised while fetching are re-raised in
    the consuming thread, at the point where the failed page would have come.
    """

    def __init__(self, pages: Iterator[bytes], depth: int) -> None:
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

    def batches(self, limit: int) -> Iterator[list[bytes]]:
        """Yield the pages in order, grouped: one page, plus any already fetched (<= limit).

        When writing keeps up with the network every batch is a single page;
        when it falls behind, the waiting pages are flattened together, which
        amortises the per-call cost instead of letting the backlog grow.
        """
        while True:
            batch: list[bytes] = []
            end: tuple[str, Any] | None = None
            kind, value = self._queue.get()
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

    def __enter__(self) -> _Prefetch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


# --------------------------------------------------------------------------- one resource


@dataclass(slots=True)
class _Checkpoint:
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
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> _Checkpoint:
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
        )


class _ResourceSyncer:
    """Fetch, stage, validate, merge and commit one resource."""

    def __init__(
        self,
        *,
        root: Path,
        resource_type: str,
        client: PageSource,
        full: bool,
        errors: ErrorsMode,
        on_page: Callable[[PageProgress], None],
    ) -> None:
        self.root = root
        self.rt = resource_type
        self.client = client
        self.full = full
        self.errors = errors
        self.on_page = on_page
        self.stage = root / STAGING / resource_type
        self.state_path = self.stage / STATE_FILE
        self.version = schema_version(resource_type)
        self.empty = _empty_tables(resource_type)
        self.key = _parent_key(resource_type)

    # -- paths ---------------------------------------------------------------------

    def _final(self, table: str) -> Path:
        return self.root / table / DATA_FILE

    def _parts_dir(self, table: str) -> Path:
        return self.stage / table

    def _merged(self, table: str) -> Path:
        return self.stage / "merged" / f"{table}.parquet"

    def _save(self, cp: _Checkpoint) -> None:
        _write_json(self.state_path, cp.to_json())

    # -- planning ------------------------------------------------------------------

    def _previous(self) -> dict[str, Any] | None:
        if not _manifest_path(self.root).exists():
            return None
        entry = _load_manifest_for_write(self.root)["resources"].get(self.rt)
        return entry if isinstance(entry, dict) else None

    def _stored_ok(self, entry: Mapping[str, Any] | None) -> bool:
        return (
            entry is not None
            and entry.get("schema_version") == self.version
            and entry.get("high_water_mark") is not None
            and all(self._final(t).is_file() for t in self.empty)
        )

    def _resume_point(self) -> _Checkpoint | None:
        if not self.state_path.is_file():
            return None
        try:
            cp = _Checkpoint.from_json(_read_json(self.state_path))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if cp.resource != self.rt or cp.schema_version != self.version:
            return None
        if cp.phase == "commit":
            return cp  # always rolled forward: the datasets may already be half swapped
        if self.full and cp.mode != "full":
            return None
        return cp

    # -- the run -------------------------------------------------------------------

    def run(self) -> ResourceSync:
        started = time.monotonic()
        previous = self._previous()
        cp = self._resume_point()
        if cp is not None and cp.phase == "commit":
            self._commit(cp)
            previous = self._previous()
            cp = None
        resumed = cp is not None
        if cp is None:
            shutil.rmtree(self.stage, ignore_errors=True)
            incremental = not self.full and self._stored_ok(previous)
            cp = _Checkpoint(
                resource=self.rt,
                schema_version=self.version,
                mode="incremental" if incremental else "full",
                since=_next_since(previous) if incremental and previous else None,
                started_at=_now_iso(),
            )
            self.stage.mkdir(parents=True, exist_ok=True)
            self._save(cp)
        result = ResourceSync(resource=self.rt, mode=cp.mode, resumed=resumed)
        sent_before = _requests_sent(self.client)
        try:
            if cp.phase == "fetch":
                result.pages = self._fetch(cp)
            sent = _requests_sent(self.client)
            result.requests = (
                sent - sent_before if sent is not None and sent_before is not None else result.pages
            )
            result.fetched = cp.records
            self._finish(cp, previous, result)
        except BaseException as exc:
            self._record_failure(previous, exc)
            raise
        result.elapsed = time.monotonic() - started
        return result

    def _record_failure(self, previous: dict[str, Any] | None, exc: BaseException) -> None:
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        entry = dict(previous or {"tables": {}, "high_water_mark": None})
        entry.update(
            status=status,
            error=f"{type(exc).__name__}: {exc}"[:500],
            failed_at=_now_iso(),
            resumable=self.state_path.is_file(),
        )
        with contextlib.suppress(OSError):
            _update_manifest(self.root, self.rt, entry)

    def _search(self, cp: _Checkpoint, first_page: int) -> dict[str, Any]:
        params: dict[str, Any] = {"_count": cp.page_size}
        if first_page > 1:
            params["page"] = first_page
        if cp.since is not None:
            params["_lastUpdated"] = cp.since
        return params

    def _fetch(self, cp: _Checkpoint) -> int:
        """Walk the search from the checkpoint, staging each page; return pages requested."""
        # On resume, the last staged page is read again: if records moved between
        # pages while the run was interrupted, the overlap (merged by id) keeps
        # them from falling into the gap.
        first_page = max(cp.pages_done, 1)
        self._drop_unrecorded_parts(cp)
        requested = 0
        pages = self._pages(cp, first_page)
        try:
            with _Prefetch(iter(pages), PREFETCH_PAGES) as prefetch:
                for batch in prefetch.batches(PREFETCH_PAGES):
                    self._stage_pages(cp, batch, first_page + requested)
                    requested += len(batch)
                    self.on_page(
                        PageProgress(
                            resource=self.rt,
                            page=cp.pages_done,
                            pages=requested,
                            records=cp.records,
                            total=cp.total,
                        )
                    )
        except IncompleteResult as exc:
            # a fresh walk's tail also starts at page 2 (page 1 came through request())
            start = first_page if first_page > 1 else 2
            if not _resumed_walk_complete(cp, start, requested, exc):
                raise
        cp.phase = "merge"
        cp.next_url = None
        self._save(cp)
        return requested

    def _pages(self, cp: _Checkpoint, first_page: int) -> Iterator[bytes]:
        """The pages of the walk from ``first_page``; notes the server's time at its start.

        A fresh walk is one ``client.pages`` walk: when records change during it,
        the client appends recovery pages (newer versions come later, so the
        merge's "newest part wins" keeps them) and ``client.last_summary``
        carries the server time of its first page. A resumed walk starts at
        ``first_page``, so it is short of ``Bundle.total`` by design: recovery
        is switched off and :func:`_resumed_walk_complete` judges it.
        """
        search = self._search(cp, first_page)
        pages = self.client.pages
        if first_page > 1:
            if "recover" in inspect.signature(pages).parameters:
                yield from pages(self.rt, params=search, recover=False)
            else:
                yield from pages(self.rt, params=search)
            return
        for page in pages(self.rt, params=search):
            if cp.server_time is None:
                summary = getattr(self.client, "last_summary", None)
                started = getattr(summary, "started_at", None)
                cp.server_time = started if isinstance(started, str) else None
            yield page

    def _drop_unrecorded_parts(self, cp: _Checkpoint) -> None:
        """Remove part files written after the last checkpoint (a crash mid-page)."""
        for table in self.empty:
            directory = self._parts_dir(table)
            if not directory.is_dir():
                continue
            for path in directory.iterdir():
                match = re.fullmatch(r"part-(\d+)\.parquet", path.name)
                if match is None or int(match.group(1)) > cp.parts:
                    path.unlink(missing_ok=True)

    def _stage_pages(self, cp: _Checkpoint, pages: list[bytes], page_number: int) -> None:
        """Flatten consecutive pages (from ``page_number``) into one part; checkpoint."""
        from toolkit import views

        last_updated: str | None = None
        n_entries = 0
        bundle: dict[str, Any] = {}
        for page in pages:
            bundle = orjson.loads(page)
            entries = bundle.get("entry") or []
            n_entries += len(entries)
            for e in entries:
                stamp = ((e.get("resource") or {}).get("meta") or {}).get("lastUpdated")
                if isinstance(stamp, str):
                    last_updated = _later(last_updated, stamp)
        tables = views.flatten_tables(self.rt, pages)
        part = cp.parts + 1
        for table, df in tables.items():
            if df.height == 0:
                continue
            directory = self._parts_dir(table)
            directory.mkdir(parents=True, exist_ok=True)
            staged = df.with_columns(pl.lit(part, dtype=pl.Int32).alias(PART_COLUMN))
            _write_parquet(staged, directory / f"part-{part:06d}.parquet")
        next_url = next(
            (
                link.get("url")
                for link in bundle.get("link") or []
                if link.get("relation") == "next"
            ),
            None,
        )
        cp.parts = part
        cp.pages_done = page_number + len(pages) - 1
        cp.records += n_entries
        if isinstance(bundle.get("total"), int):
            cp.total = bundle["total"]
        cp.next_url = next_url
        cp.max_last_updated = _later(cp.max_last_updated, last_updated)
        self._save(cp)

    # -- merge and commit ----------------------------------------------------------

    def _part_files(self, table: str) -> list[Path]:
        directory = self._parts_dir(table)
        if not directory.is_dir():
            return []
        return sorted(directory.glob("part-*.parquet"))

    def _scan_parts(self, table: str) -> pl.LazyFrame:
        files = self._part_files(table)
        if not files:
            return (
                self.empty[table].lazy().with_columns(pl.lit(0, dtype=pl.Int32).alias(PART_COLUMN))
            )
        return pl.scan_parquet(files)

    def _latest(self) -> pl.LazyFrame:
        """``(id, _part)`` of the newest staged version of every staged record."""
        return self._scan_parts(self.rt).group_by("id").agg(pl.col(PART_COLUMN).max())

    def _dedupe(self, table: str) -> pl.LazyFrame:
        """The staged rows of ``table`` that belong to the newest version of each record."""
        latest = self._latest()
        scanned = self._scan_parts(table)
        if table == self.rt:
            rows = scanned.join(latest, on=["id", PART_COLUMN], how="semi")
            rows = rows.unique(subset=["id"], keep="any")
        else:
            rows = scanned.join(
                latest.rename({"id": self.key}), on=[self.key, PART_COLUMN], how="semi"
            )
        return rows.drop(PART_COLUMN)

    def _new_file(self, table: str) -> Path:
        return self.stage / "new" / f"{table}.parquet"

    def _write_new(self) -> None:
        """Sink the deduplicated staged rows of every table to one file each (streaming)."""
        (self.stage / "new").mkdir(parents=True, exist_ok=True)
        for table, empty in self.empty.items():
            target = self._new_file(table)
            tmp = target.with_name(f".{target.name}.tmp")
            self._dedupe(table).select(empty.columns).cast(empty.schema).sink_parquet(tmp)
            os.replace(tmp, target)

    def _new_rows(self, table: str) -> pl.LazyFrame:
        return pl.scan_parquet(self._new_file(table))

    def _validate_new(self) -> None:
        """Validate the new rows with the table's schema, a bounded batch at a time."""
        from toolkit import schemas

        for table in self.empty:
            scan = self._new_rows(table)
            height = scan.select(pl.len()).collect().item()
            for offset in range(0, max(height, 1), VALIDATION_BATCH_ROWS):
                frame = scan.slice(offset, VALIDATION_BATCH_ROWS).collect()
                schemas.validate(
                    frame,
                    self.rt,
                    table=None if table == self.rt else table,
                    errors=self.errors,
                )

    def _unchanged(self, cp: _Checkpoint) -> bool:
        """Whether every staged row is already stored as is (an incremental no-op)."""
        if cp.mode != "incremental":
            return False
        if cp.records == 0:
            return True
        if cp.records > COMPARE_LIMIT:
            return False
        ids = self._new_rows(self.rt).select("id")
        for table in self.empty:
            key = "id" if table == self.rt else self.key
            new = self._new_rows(table).collect()
            old = (
                pl.scan_parquet(self._final(table))
                .join(ids.rename({"id": key}), on=key, how="semi")
                .collect()
            )
            if new.height != old.height or new.schema != old.schema:
                return False
            if _row_hashes(new) != _row_hashes(old):
                return False
        return True

    def _merge(self, cp: _Checkpoint) -> dict[str, int]:
        (self.stage / "merged").mkdir(parents=True, exist_ok=True)
        ids = self._new_rows(self.rt).select("id")
        rows: dict[str, int] = {}
        for table, empty in self.empty.items():
            new = self._new_rows(table)
            if cp.mode == "incremental":
                key = "id" if table == self.rt else self.key
                old = pl.scan_parquet(self._final(table)).join(
                    ids.rename({"id": key}), on=key, how="anti"
                )
                frame = pl.concat([old.select(empty.columns), new.select(empty.columns)])
            else:
                frame = new
            target = self._merged(table)
            tmp = target.with_name(f".{target.name}.tmp")
            frame.cast(empty.schema).sink_parquet(tmp)
            os.replace(tmp, target)
            rows[table] = pl.scan_parquet(target).select(pl.len()).collect().item()
        return rows

    def _entry(
        self, cp: _Checkpoint, previous: Mapping[str, Any] | None, rows: Mapping[str, int]
    ) -> dict[str, Any]:
        hwm = cp.max_last_updated
        if cp.mode == "incremental" and previous is not None:
            hwm = _later(previous.get("high_water_mark"), hwm)
        return {
            "status": "ok",
            "schema_version": self.version,
            "high_water_mark": hwm,
            "server_time": cp.server_time,
            "next_since": _since_after(hwm, cp.server_time),
            "fetched_at": _now_iso(),
            "mode": cp.mode,
            "tables": {
                table: {"path": f"{table}/{DATA_FILE}", "rows": n} for table, n in rows.items()
            },
        }

    def _finish(
        self, cp: _Checkpoint, previous: dict[str, Any] | None, result: ResourceSync
    ) -> None:
        self._write_new()
        if self._unchanged(cp) and previous is not None:
            result.status = "unchanged"
            stored = {t: int(v["rows"]) for t, v in previous.get("tables", {}).items()}
            entry = self._entry(cp, previous, stored)
        else:
            self._validate_new()
            rows = self._merge(cp)
            entry = self._entry(cp, previous, rows)
        entry["last_sync"] = {
            "started_at": cp.started_at,
            "records_fetched": cp.records,
            "pages": result.pages,
            "status": result.status,
        }
        cp.phase = "commit"
        cp.entry = entry
        self._save(cp)
        self._commit(cp)
        result.rows = {t: v["rows"] for t, v in entry["tables"].items()}
        result.high_water_mark = entry["high_water_mark"]

    def _commit(self, cp: _Checkpoint) -> None:
        """Swap merged datasets in, then the manifest; safe to repeat after a crash."""
        for table in self.empty:
            merged = self._merged(table)
            if merged.is_file():
                final = self._final(table)
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(merged, final)
        if cp.entry is not None:
            _update_manifest(self.root, self.rt, cp.entry)
        shutil.rmtree(self.stage, ignore_errors=True)


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


def _since_after(mark: str | None, server_time: str | None) -> str | None:
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
    if _instant(mark) < _instant(server_time):
        return f"gt{mark}"
    return f"ge{server_time}"


def _next_since(entry: Mapping[str, Any]) -> str | None:
    since = entry.get("next_since")
    if isinstance(since, str) and since[:2] in ("gt", "ge"):
        return since
    mark = entry.get("high_water_mark")
    return f"ge{mark}" if isinstance(mark, str) else None


def _requests_sent(client: Any) -> int | None:
    sent = getattr(client, "requests_sent", None)
    return sent if isinstance(sent, int) else None


def _resumed_walk_complete(
    cp: _Checkpoint, first_page: int, requested: int, exc: IncompleteResult
) -> bool:
    """Whether a walk that started at ``first_page`` really read everything.

    A client compares the records of *its* walk with ``Bundle.total``; a resumed
    walk skipped the full pages before ``first_page``, which the checkpoint has.
    """
    if first_page <= 1 or requested == 0 or isinstance(exc, PagingLoop):
        return False
    if cp.next_url is not None or exc.expected is None:
        return False
    return exc.received + (first_page - 1) * cp.page_size >= exc.expected


def _row_hashes(df: pl.DataFrame) -> list[int]:
    if df.height == 0:
        return []
    hashes = df.select(pl.struct(pl.all()).hash(seed=0).alias("h"))["h"]
    return sorted(hashes.to_list())


# --------------------------------------------------------------------------- progress


class _ProgressBars:
    """A rich progress bar per resource on stderr; silent when not interactive."""

    def __init__(self, enabled: bool) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description:<14}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("records"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            disable=not enabled,
        )
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> _ProgressBars:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def start(self, resource_type: str) -> None:
        self._tasks[resource_type] = self._progress.add_task(resource_type, total=None)

    def __call__(self, event: PageProgress) -> None:
        task = self._tasks.get(event.resource)
        if task is not None:
            self._progress.update(task, completed=event.records, total=event.total)

    def done(self, resource_type: str, rows: int) -> None:
        task = self._tasks.get(resource_type)
        if task is not None:
            total = self._progress.tasks[task].total
            self._progress.update(task, completed=total if total is not None else rows)


@contextlib.contextmanager
def _client_quiet(client: Any) -> Iterator[None]:
    """Silence a client's own per-walk progress bar: the store draws one per resource."""
    if not hasattr(client, "progress"):
        yield
        return
    before = client.progress
    client.progress = False
    try:
        yield
    finally:
        client.progress = before


# --------------------------------------------------------------------------- public API


def sync(
    client: PageSource | None = None,
    out: str | os.PathLike[str] = DEFAULT_STORE,
    resources: Sequence[str] | None = None,
    full: bool = False,
    progress: bool | ProgressCallback | None = None,
    *,
    errors: ErrorsMode = "raise",
) -> SyncSummary:
    """Bring the Parquet store at ``out`` up to date with the deployment.

    Parameters
    ----------
    client
        Anything with ``pages(resource_type, params=...)`` yielding raw Bundle
        bytes, normally a :class:`toolkit.Client`. ``None`` uses
        :func:`toolkit.connect` (``PM_*`` settings, or the embedded mock).
    out
        The store directory; created when missing.
    resources
        Resource types to sync; default every listed resource
        (:data:`toolkit.catalogue.LISTED_RESOURCES`).
    full
        Re-fetch everything instead of only what changed since the last sync.
    progress
        ``None`` shows a progress bar when stderr is a terminal, ``True``
        always, ``False`` never. A callable is instead called with a
        :class:`PageProgress` after each page is staged (raising from it
        interrupts the sync; the next run resumes).
    errors
        Validation mode passed to :func:`toolkit.schemas.validate`: ``"raise"``
        stops before anything is swapped in, ``"warn"`` stores the data anyway.

    Returns
    -------
    SyncSummary
        Rows, pages and time per resource; ``summary.table()`` renders it.

    Raises
    ------
    StoreError
        When another sync holds the store's lock.
    toolkit.errors.DataValidationError
        When a frame fails its schema and ``errors="raise"``.
    toolkit.errors.ApiError, toolkit.errors.TransportError
        When fetching fails; the staged pages are kept and the next run resumes.

    Examples
    --------
    >>> from toolkit.mock import serve
    >>> from toolkit import Client
    >>> import tempfile
    >>> with serve(scale="small") as dep, Client(
    ...     base_url=dep.base_url, client_id=dep.client_id, client_secret=dep.client_secret
    ... ) as client, tempfile.TemporaryDirectory() as out:
    ...     summary = sync(client, out, resources=["Referral"], progress=False)
    ...     load("Referral", out).height == summary["Referral"].rows["Referral"]
    True
    """
    root = Path(out)
    wanted = list(resources) if resources else list(catalogue.LISTED_RESOURCES)
    unknown = [r for r in wanted if r not in catalogue.LISTED_RESOURCES]
    if unknown:
        from toolkit.errors import ConfigurationError

        known = ", ".join(catalogue.LISTED_RESOURCES)
        msg = f"cannot sync {', '.join(unknown)}: not a listed resource (choose from {known})"
        raise ConfigurationError(msg)
    owned: Any = None
    if client is None:
        import toolkit

        owned = toolkit.connect()
        client = owned
    started = time.monotonic()
    summary = SyncSummary(out=root)
    callback: ProgressCallback | None = progress if callable(progress) else None
    show = sys.stderr.isatty() if progress is None else progress is True
    try:
        with (
            _locked(root),
            _client_quiet(client),
            _ProgressBars(show and callback is None) as bars,
        ):
            for rt in wanted:
                bars.start(rt)
                syncer = _ResourceSyncer(
                    root=root,
                    resource_type=rt,
                    client=client,
                    full=full,
                    errors=errors,
                    on_page=callback or bars,
                )
                result = syncer.run()
                bars.done(rt, result.fetched)
                summary.resources.append(result)
    finally:
        if owned is not None:
            close = getattr(owned, "close", None)
            if close is not None:
                close()
    summary.elapsed = time.monotonic() - started
    return summary


def load(
    resource_type: str,
    store: str | os.PathLike[str] = DEFAULT_STORE,
    *,
    table: str | None = None,
    lazy: bool = False,
) -> pl.DataFrame | pl.LazyFrame:
    """Read a stored table back with the dtypes its view declares.

    Parameters
    ----------
    resource_type
        The resource, e.g. ``"Appointment"``.
    store
        The store directory written by :func:`sync`.
    table
        A child table such as ``"appointment_participant"`` (or just
        ``"participant"``); default the resource's main table.
    lazy
        Return a :class:`polars.LazyFrame` over the file instead of reading it.

    Returns
    -------
    polars.DataFrame or polars.LazyFrame

    Raises
    ------
    StoreError
        When the store, the resource, the table or its file is missing or
        unreadable, or was written with another schema than the current view.
    """
    root = Path(store)
    manifest = read_manifest(root)
    entry = manifest["resources"].get(resource_type)
    if not isinstance(entry, dict) or not entry.get("tables"):
        stored = ", ".join(sorted(manifest["resources"])) or "nothing"
        msg = (
            f"the store at {root} holds no {resource_type} data (it holds: {stored}); "
            f"run `pmtk sync --out {root} --resource {resource_type}`"
        )
        raise StoreError(msg)
    tables: dict[str, Any] = entry["tables"]
    name = table or resource_type
    if name not in tables and f"{_snake(resource_type)}_{name}" in tables:
        name = f"{_snake(resource_type)}_{name}"
    if name not in tables:
        msg = f"{resource_type} has no table {table!r} in {root}; tables: {', '.join(tables)}"
        raise StoreError(msg)
    path = root / str(tables[name]["path"])
    if not path.is_file():
        msg = f"{path} is missing although the manifest lists it; run `pmtk sync --full`"
        raise StoreError(msg)
    declared = declared_schemas(resource_type).get(name)
    try:
        frame = pl.scan_parquet(path)
        stored_schema = frame.collect_schema()
    except (pl.exceptions.PolarsError, OSError) as exc:
        msg = f"{path} is not a readable Parquet file ({exc}); run `pmtk sync --full`"
        raise StoreError(msg) from exc
    if declared is not None:
        if list(stored_schema.names()) != list(declared.names()):
            msg = (
                f"{path} was written for another version of the {resource_type} view; "
                f"run `pmtk sync --full --resource {resource_type}`"
            )
            raise StoreError(msg)
        frame = frame.cast(declared)
    if lazy:
        return frame
    try:
        return frame.collect()
    except (pl.exceptions.PolarsError, OSError) as exc:
        msg = f"{path} is not a readable Parquet file ({exc}); run `pmtk sync --full`"
        raise StoreError(msg) from exc
