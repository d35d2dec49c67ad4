"""Raw records in the store, and a page source that serves them (``pmtk sync --rebuild``).

Each synced resource keeps, beside its tables, the table ``_raw_<Resource>``: one
row per record with ``id``, ``last_updated`` (``meta.lastUpdated`` as sent) and
``json`` (the record's JSON exactly as it was in the page, re-serialised
compactly by orjson), in a zstd-compressed Parquet file. It is staged, merged by
``id`` (the newest version wins), checksummed and committed with the other tables
of the resource, so it always holds the records the tables were built from.

From it, :class:`RawPageSource` serves Bundle pages as a client would, with no
request to the API: :func:`toolkit.store.sync` over it rebuilds every table of
the store (``pmtk sync --rebuild``), :func:`raw_pages` gives the records to a
ViewDefinition (:func:`toolkit.viewdefs.run_view`) as Bundle pages, and
:func:`raw_records` one by one, to another engine (Pathling and other Spark
readers take the ``json`` column as NDJSON).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from toolkit.errors import ViewDefinitionError
from toolkit.page import Page
from toolkit.paging import FetchSummary
from toolkit.store.entry import load, sync
from toolkit.store.layout import guard, locked, mkdir, read_manifest, write_parquet
from toolkit.store.rawtable import RAW_SCHEMA, raw_frame, raw_table
from toolkit.store.read import UNREADABLE, unreadable_error
from toolkit.store.results import RebuildRefused, StoreError, repair_command
from toolkit.viewdefs import load_view, run_view

__all__ = [
    "RAW_SCHEMA",
    "RawPageSource",
    "bundle_pages",
    "check_rebuild",
    "raw_frame",
    "raw_pages",
    "raw_records",
    "raw_table",
    "rebuild",
    "write_views",
]

PAGE_SIZE = 100


def raw_records(store: str | os.PathLike[str], resource_type: str) -> list[bytes]:
    """Every stored record of ``resource_type`` as JSON bytes, checked against its sha256.

    Raises
    ------
    toolkit.store.StoreError
        The store holds no raw records of the type (synced before they were kept:
        run ``pmtk sync --full``).
    toolkit.store.StoreDamaged
        The file fails its checksum.
    """
    frame = load(resource_type, store, table=raw_table(resource_type))
    assert isinstance(frame, pl.DataFrame)  # not lazy: load's default
    return frame.get_column("json").to_list()


VIEW_PAGE_SIZE = 500
"""Records per Bundle page of :func:`raw_pages`."""

_RAW_SLICE = 5000
"""Raw records read from the Parquet file at a time by :func:`raw_pages`."""


def bundle_pages(records: list[bytes], size: int = VIEW_PAGE_SIZE) -> list[bytes]:
    """Records' JSON bytes wrapped in Bundle pages of ``size``, each record unchanged, in order."""
    head, tail = b'{"resourceType":"Bundle","type":"collection","entry":[', b"]}"
    return [
        head + b",".join(b'{"resource":' + r + b"}" for r in records[i : i + size]) + tail
        for i in range(0, len(records), size)
    ]


def raw_pages(
    store: str | os.PathLike[str], resource_type: str, *, size: int = VIEW_PAGE_SIZE
) -> list[bytes]:
    """Every stored record of ``resource_type`` in Bundle pages of ``size``, for ``run_view``.

    :func:`toolkit.viewdefs.run_view` reads Bundle pages on its fast path (only
    the fields the view reads, decoded exactly, in Polars), while single records
    take its general path (each parsed and normalised in Python): for the 50,570
    Appointments of a medium store, 3 s and 0.55 GB against 39 s and 1.3 GB.
    The pages are the records' bytes joined, each record unchanged, in stored order.

    Raises
    ------
    toolkit.store.StoreError
        As :func:`raw_records`.
    toolkit.store.StoreDamaged
        As :func:`raw_records`.
    """
    # Checked against its sha256 first (load), then read a slice at a time: the records
    # are never all held twice, as a column and as pages (37 MB less at medium scale).
    table = raw_table(resource_type)
    scan = load(resource_type, store, table=table, lazy=True)
    assert isinstance(scan, pl.LazyFrame)
    pages: list[bytes] = []
    try:
        total = int(scan.select(pl.len()).collect().item())
        for start in range(0, total, _RAW_SLICE):
            column = scan.slice(start, _RAW_SLICE).select("json").collect().get_column("json")
            for offset in range(0, len(column), size):
                pages += bundle_pages(column.slice(offset, size).to_list(), size)
    except UNREADABLE as exc:
        path = Path(store) / table
        raise unreadable_error(Path(store), resource_type, path, exc) from exc
    return pages


class _RawWalk:
    def __init__(self, resource_type: str, records: list[bytes], started_at: str | None) -> None:
        self.resource_type = resource_type
        self.records = records
        self.summary = FetchSummary(resource_type, started_at=started_at)

    def _record(self, blob: bytes) -> Any:
        try:
            return orjson.loads(blob)
        except orjson.JSONDecodeError as exc:
            msg = f"a raw record of {self.resource_type} is not valid JSON ({exc})"
            raise RebuildRefused(msg) from None

    def __iter__(self) -> Iterator[Page]:
        total = len(self.records)
        for start in range(0, max(total, 1), PAGE_SIZE):
            chunk = [self._record(r) for r in self.records[start : start + PAGE_SIZE]]
            more = start + PAGE_SIZE < total
            bundle: dict[str, Any] = {
                "resourceType": "Bundle",
                "type": "searchset",
                "total": total,
                "entry": [{"resource": r} for r in chunk],
            }
            self.summary.pages += 1
            self.summary.records += len(chunk)
            self.summary.total = total
            yield Page(
                raw=orjson.dumps(bundle),
                url=f"store:{self.resource_type}?page={start // PAGE_SIZE + 1}",
                bundle=bundle,
                records=chunk,
                total=total,
                next=f"store:{self.resource_type}?page={start // PAGE_SIZE + 2}" if more else None,
                server_time=None,
            )
        self.summary.complete = True


class RawPageSource:
    """A :class:`~toolkit.store.results.PageSource` serving a store's raw records.

    It sends no request (``requests_sent`` stays 0). Each walk's ``started_at`` is
    the server time the resource's last real sync recorded, so that a rebuild
    keeps the store's incremental marks where the deployment left them.
    """

    def __init__(self, store: str | os.PathLike[str]) -> None:
        self.root = Path(store)
        self.requests_sent = 0

    def _started_at(self, resource_type: str) -> str | None:
        entry = read_manifest(self.root)["resources"].get(resource_type)
        value = entry.get("server_time") if isinstance(entry, dict) else None
        return value if isinstance(value, str) else None

    def walk(
        self,
        resource_type: str,
        /,
        *,
        params: Mapping[str, Any] | None = None,
        skipped: int = 0,
        progress: bool | None = None,
    ) -> _RawWalk:
        """Every stored record of the type, in pages of 100 (the search ``params`` do not
        apply: a rebuild is always of everything)."""
        del params, skipped, progress
        records = raw_records(self.root, resource_type)
        return _RawWalk(resource_type, records, self._started_at(resource_type))

    def export_ids(self, resource_type: str) -> set[str] | None:
        """Not served: a rebuild never reconciles deletions."""
        del resource_type
        return None

    def __enter__(self) -> RawPageSource:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def check_rebuild(store: str | os.PathLike[str], resources: list[str]) -> None:
    """Refuse a rebuild the raw records cannot do whole, before anything is written.

    For each resource: every raw record must be a JSON object of the type whose
    ``id`` is its row's, and every id of the main table must have its raw record
    (a raw table holding fewer records, even with its checksum recorded to match,
    would rebuild the table short).

    Raises
    ------
    toolkit.store.RebuildRefused
        Naming the resource, the record or the counts.
    toolkit.store.StoreDamaged, toolkit.store.StoreError
        As :func:`toolkit.store.load` does for the raw or the main table.
    """
    root = Path(store)
    for rt in resources:
        raw = load(rt, root, table=raw_table(rt))
        assert isinstance(raw, pl.DataFrame)
        fix = f"nothing was written; run `{repair_command(root, rt)}` to fetch them again"
        for rid, blob in zip(raw["id"], raw["json"], strict=True):
            problem = _record_problem(rt, rid, blob)
            if problem is not None:
                msg = f"the raw record {rid!r} of {rt} in {root} {problem}; {fix}"
                raise RebuildRefused(msg)
        rows, lost = _not_covered(root, rt, raw["id"])
        if lost:
            shown = f" (e.g. {', '.join(repr(i) for i in lost[:3])})" if lost[0] else ""
            msg = (
                f"the raw records of {rt} in {root} hold {raw.height} records but its table "
                f"holds {rows} rows: {len(lost)} rows{shown} have no raw record and a "
                f"rebuild would drop them; {fix}"
            )
            raise RebuildRefused(msg)


def _not_covered(root: Path, resource_type: str, raw_ids: pl.Series) -> tuple[int, list[str]]:
    """The main table's rows and those of its ids without a raw record.

    A main table that cannot be read (lost, damaged, written for another view: what a
    rebuild repairs) is compared by the row count the manifest recorded for it; the
    rows missing are then unnamed (``""``).
    """
    try:
        main = load(resource_type, root, lazy=True)
        assert isinstance(main, pl.LazyFrame)
        ids = main.select("id").collect()["id"]
    except StoreError:
        entry = read_manifest(root)["resources"].get(resource_type)
        tables = entry.get("tables") if isinstance(entry, dict) else None
        info = tables.get(resource_type) if isinstance(tables, dict) else None
        rows = info.get("rows") if isinstance(info, dict) else None
        if not isinstance(rows, int) or rows <= raw_ids.n_unique():
            return raw_ids.len(), []
        return rows, [""] * (rows - raw_ids.n_unique())
    lost = ids.filter(~ids.is_in(raw_ids.implode()))
    return ids.len(), [str(i) for i in lost.to_list()]


def _record_problem(resource_type: str, rid: object, blob: object) -> str | None:
    """Why one raw row is not a record a rebuild can serve (``None`` when it is)."""
    if not isinstance(blob, bytes):
        return "is empty"
    try:
        record = orjson.loads(blob)
    except orjson.JSONDecodeError as exc:
        return f"is not valid JSON ({exc}; {len(blob)} bytes)"
    if not isinstance(record, dict):
        return f"is a JSON {type(record).__name__}, not a record"
    if record.get("resourceType") != resource_type or record.get("id") != rid:
        kind, other = record.get("resourceType"), record.get("id")
        return f"is {kind}/{other}, not the record of its row"
    return None


def rebuild(
    store: str | os.PathLike[str],
    resources: list[str] | None = None,
    *,
    progress: Any = False,
    errors: Any = "raise",
) -> Any:
    """Rebuild every table of ``store`` from its raw records, with no request to the API.

    It is a full :func:`toolkit.store.sync` whose pages come from the raw records
    (:class:`RawPageSource`), so the tables are exactly those a fresh sync of the
    same records writes, committed the same way. ``resources`` defaults to every
    resource the store holds. Returns the :class:`~toolkit.store.SyncSummary`.
    Raw records that cannot rebuild every row are refused first
    (:func:`check_rebuild`: :class:`~toolkit.store.RebuildRefused`, nothing written).
    """
    wanted = resources or sorted(read_manifest(store)["resources"])
    check_rebuild(store, wanted)
    return sync(
        RawPageSource(store), store, resources=wanted, full=True, progress=progress, errors=errors
    )


VIEW_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_\-]{0,63}")
"""A view's name, matched whole (:func:`re.fullmatch`: ``"ok\\n"`` is refused)."""


def view_name(view: Any, loaded: Any) -> str:
    """The checked name of a view: its ``name``, else its file's stem.

    Raises
    ------
    toolkit.errors.ViewDefinitionError
        A name that is not 1 to 64 letters, digits, ``_`` or ``-`` starting with a
        letter (a path separator, a dot, a trailing newline ...).
    """

    name = loaded.name or (Path(view).stem if isinstance(view, str | Path) else None)
    if not isinstance(name, str) or VIEW_NAME.fullmatch(name) is None:
        msg = f"the view needs a name of letters, digits, '_' or '-' (got {name!r})"
        raise ViewDefinitionError(msg, path="name")
    return name


def write_views(store: str | os.PathLike[str], views: list[Any]) -> dict[str, Path]:
    """Materialise ViewDefinitions over the store's raw records as ``views/<name>.parquet``.

    Each view is checked (:func:`toolkit.viewdefs.load_view`, :func:`view_name`)
    before any is run. The store's lock is held while they are written, and a
    ``views`` folder or view file that is a symbolic link is refused
    (:class:`~toolkit.store.StoreLinked`): nothing is written outside the store.
    Each file is written to a temporary name and moved into place, so a reader
    sees the old table or the new one, never half of one. Returns the path of
    each view's file.
    """
    checked = []
    for view in views:
        loaded = load_view(view)
        checked.append((view_name(view, loaded), loaded))
    names = [n for n, _ in checked]
    if len(set(names)) != len(names):
        msg = f"two views have the same name: {sorted(n for n in names if names.count(n) > 1)}"
        raise ViewDefinitionError(msg, path="name")
    root = Path(store)
    read_manifest(root)  # a store, before its lock is taken (nothing created otherwise)
    folder = root / "views"
    written: dict[str, Path] = {}
    with locked(root):
        mkdir(folder, "creating the views folder")  # refuses a link (StoreLinked)
        for name, loaded in checked:
            frame = run_view(loaded, raw_pages(store, loaded.resource))
            path = folder / f"{name}.parquet"
            guard(path)  # a view file that is a link: refused, never written through
            write_parquet(frame, path)
            written[name] = path
    return written
