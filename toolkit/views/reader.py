"""The tuned reader: batches of pages on persistent threads, checked, repaired, read by Polars."""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import Any

import msgspec
import polars as pl

from toolkit import catalogue
from toolkit._threads import daemon_pool
from toolkit.errors import DataValidationError
from toolkit.views.check import (
    ENCODER,
    ENVELOPE,
    column_keys,
    is_utf8,
    reencoded,
    strict_decoder,
    top_fields,
)
from toolkit.views.conform import (
    SKELETON,
    Conformer,
    Fix,
    Problem,
    as_bytes,
    iter_pages,
    outcome_text,
)
from toolkit.views.declare import (
    KnownUrls,
    View,
    known_extensions,
    level_read_dtype,
    reader_fields,
    resource_views,
)


@dataclass(frozen=True, slots=True)
class _Compiled:
    resource: str
    resource_dtype: pl.Struct  # entry[].resource as read: every field, or one table's
    unread: frozenset[str]  # known top-level fields this read skips (one table's read)
    unread_arrays: frozenset[str]  # those of them that are arrays (still checked to be one)
    strict: msgspec.json.Decoder[Any]  # see strict_decoder
    strict_entry: msgspec.json.Decoder[Any]  # the same check of one entry (see _repair)
    strict_entries: msgspec.json.Decoder[Any]  # ... of an array of entries
    views: tuple[View, ...]
    columns: tuple[tuple[str, str | None, str, str], ...]  # see column_keys
    known_urls: KnownUrls  # extension urls the columns read, and in what forms (known_extensions)
    checked_urls: KnownUrls  # ... and their declared full urls (the exact check's)

    @property
    def bundle_schema(self) -> dict[str, Any]:
        """The schema a page is read with (see :func:`read_schema`)."""
        entry = pl.List(pl.Struct({"resource": self.resource_dtype}))
        return {**ENVELOPE.to_schema(), "entry": entry}

    @property
    def batch_schema(self) -> dict[str, Any]:
        """:attr:`bundle_schema` plus the batch sentinel (see :func:`_read_batch`)."""
        return {**self.bundle_schema, _SENTINEL: pl.String()}


def _array_of(entry: msgspec.json.Decoder[Any]) -> msgspec.json.Decoder[Any]:
    """The decoder of a JSON array of what ``entry`` decodes (the same check)."""
    return msgspec.json.Decoder(list.__class_getitem__(entry.type))


@cache
def compiled_reader(resource_type: str) -> _Compiled:
    views = resource_views(resource_type)
    res = catalogue.RESOURCES[resource_type]
    fields = tuple(f for f in reader_fields(res) if not f.write_only)
    resource_struct = level_read_dtype(fields)
    resource_dtype = pl.Struct({"resourceType": pl.String(), **resource_struct.to_schema()})
    known_urls = known_extensions(fields)
    checked_urls = known_extensions(fields, declared=True)
    strict, strict_entry = strict_decoder(resource_dtype, known_urls=checked_urls)
    return _Compiled(
        resource=resource_type,
        resource_dtype=resource_dtype,
        unread=frozenset(),
        unread_arrays=frozenset(),
        strict=strict,
        strict_entry=strict_entry,
        strict_entries=_array_of(strict_entry),
        views=views,
        columns=column_keys(views),
        known_urls=known_urls,
        checked_urls=checked_urls,
    )


@cache
def compiled_table(resource_type: str, table: str) -> _Compiled:
    """:func:`compiled_reader` for one table: the read schema keeps only the fields it uses.

    Reading a field costs Polars' JSON reader time even when no column needs it
    (Appointment's main table reads 20 % faster without ``participant``), so
    :func:`flatten` of one table reads just that table's top-level fields. The
    exact check types only those fields (the others are skipped as raw JSON) and
    still knows every key: each table reports the odd values and unknown keys of
    what it reads.
    """
    full = compiled_reader(resource_type)
    (view_,) = [v for v in full.views if v.name == table]
    if view_.extensions:  # extensions sit at any depth: every field is read
        return dataclasses.replace(full, views=(view_,))
    wanted = top_fields(view_) | {"resourceType", "id"}
    slim = pl.Struct([f for f in full.resource_dtype.fields if f.name in wanted])
    unread = frozenset(f.name for f in full.resource_dtype.fields if f.name not in wanted)
    arrays = frozenset(
        f.name
        for f in full.resource_dtype.fields
        if f.name in unread and isinstance(f.dtype, pl.List)
    )
    strict, strict_entry = strict_decoder(slim, unread, arrays, full.checked_urls)
    return dataclasses.replace(
        full,
        resource_dtype=slim,
        unread=unread,
        unread_arrays=arrays,
        strict=strict,
        strict_entry=strict_entry,
        strict_entries=_array_of(strict_entry),
        views=(view_,),
    )


def read_schema(resource_type: str) -> pl.Schema:
    """The explicit schema Polars reads a Bundle page of ``resource_type`` with.

    Parameters
    ----------
    resource_type
        A listed resource type.

    Returns
    -------
    polars.Schema
        ``resourceType``, ``issue`` (to report an OperationOutcome) and
        ``entry: list[struct{resource: struct{...}}]``, derived from the catalogue.
    """
    return pl.Schema(compiled_reader(resource_type).bundle_schema)


def _locate(comp: _Compiled, path: str, key: str) -> tuple[str, int | None, str | None]:
    """``(table, index, column)`` of a value at ``path`` (field ``key``); index in child tables."""
    first = re.match(r"([^.\[]+)(?:\[(\d+)\])?", path)
    head, index = (first.group(1), first.group(2)) if first else (path, None)
    table = comp.resource  # the main table is named after the resource
    at: int | None = None
    for name, for_each, _column, _key in comp.columns:
        if for_each == head and index is not None:
            table, at = name, int(index)
            break
    for name, _for_each, column, col_key in comp.columns:
        if name != table:
            continue
        if (
            col_key == key
            or col_key.startswith((f"{key}.", f"{key}:"))
            or key.startswith((f"{col_key}.", f"{col_key}:"))
        ):
            return table, at, column
    return table, at, None


_ENTRY_AT = re.compile(r" - at `\$(?:\.entry)?\[(\d+)\][^`]*`\Z")
"""Where msgspec's error ends by naming the entry it stopped at, in a page
(``... - at `$.entry[37].resource.minutesDuration```) or in an array of
entries (``$[37]``). Only the end counts: an unknown key named earlier in the
message is the page's text."""


def _failed_entry(exc: Exception) -> int | None:
    """The index of the entry where a check stopped; ``None`` when it names none."""
    found = _ENTRY_AT.search(str(exc))
    return int(found.group(1)) if found else None


def _check_run(comp: _Compiled, run: list[msgspec.Raw]) -> tuple[list[Any] | None, int]:
    """Check consecutive entries in one call: ``(decoded, len(run))`` when all pass,
    ``(None, index of the first that fails)`` otherwise."""
    try:
        return comp.strict_entries.decode(b"[" + b",".join(run) + b"]"), len(run)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        at = _failed_entry(exc)
    if at is not None and at < len(run):
        return None, at
    for at, entry_raw in enumerate(run):  # no entry named: one at a time
        try:
            comp.strict_entry.decode(entry_raw)
        except (msgspec.DecodeError, UnicodeDecodeError):
            return None, at
    return None, len(run)  # pragma: no cover - each passes when all do


def _repair(comp: _Compiled, raw: bytes, failed_at: int | None = None) -> tuple[bytes, Fix] | None:
    """One page brought to the read schema, and what that took, per entry.

    Only the entries that fail the exact check (``comp.strict_entry``) are
    parsed and rebuilt; the others are written back from what the check
    decoded, as a page that passes it is (:func:`reencoded`), so a page with
    one odd record costs about one record's repair, not a page's. The entries
    between two that fail are checked in one call (msgspec names where it
    stopped; ``failed_at``: where the page's check did). Alternative forms
    become the canonical one, values of a wrong JSON type become null
    (recorded with their path, table, column and raw value), keys the schema
    does not know, at any depth, go to ``extra`` by path, and entries of other
    resource types are reduced to their ``resourceType`` (the reader skips
    them). ``None`` when the page is not a JSON Bundle object: the reader then
    refuses it with the reason.
    """
    try:
        page = SKELETON.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):  # malformed, not UTF-8, or not a Bundle
        return None
    if page.resourceType != "Bundle":
        return None
    entries = page.entry or []
    fix = Fix([None] * len(entries), [None] * len(entries), [None] * len(entries))
    # Written back as the check decoded them when the read skips some fields
    # (see reencoded), else as sent (a Raw encodes as its text).
    reencode = bool(comp.unread) and is_utf8(raw)
    items: list[Any] = []
    pos = 0
    while pos < len(entries):
        if pos == 0 and failed_at is not None and failed_at < len(entries):
            decoded, bad = None, failed_at
        else:
            decoded, bad = _check_run(comp, entries[pos:])
        good = entries[pos : pos + bad]
        if reencode and decoded is None and good:
            decoded = comp.strict_entries.decode(b"[" + b",".join(good) + b"]")
        items += decoded if reencode and decoded is not None else good
        pos += bad
        if pos == len(entries):
            break
        entry_raw = entries[pos]
        try:  # the page's check stopped here, so this fails too; made sure of
            checked = comp.strict_entry.decode(entry_raw)
        except (msgspec.DecodeError, UnicodeDecodeError):
            pass
        else:  # pragma: no cover
            items.append(checked if reencode else entry_raw)
            pos += 1
            continue
        try:
            # msgspec, not orjson: orjson reads an integer beyond the 64-bit range as a
            # rounded float (-2**63 - 1 became -2**63, an in-range Int64), where msgspec
            # keeps it exact and the conform step reports it instead of storing it.
            entry = msgspec.json.decode(bytes(entry_raw))
        except ValueError:  # pragma: no cover - the skeleton decode checked the JSON
            return None
        repaired = _repair_entry(comp, entry)
        if repaired is None:
            return None
        items.append(msgspec.Raw(repaired[0]))
        fix.extra[pos], fix.invalid[pos], fix.extensions[pos] = repaired[1:]
        pos += 1
    return b'{"resourceType":"Bundle","entry":' + ENCODER.encode(items) + b"}", fix


def _repair_entry(
    comp: _Compiled, entry: Any
) -> tuple[bytes, str | None, str | None, str | None] | None:
    """One entry as the reader can read it, with its ``extra``, ``invalid`` and
    ``extensions`` (the rows of its extension table) JSON texts."""
    res = entry.get("resource") if isinstance(entry, dict) else None
    if not isinstance(res, dict) or res.get("resourceType", comp.resource) != comp.resource:
        kind = res.get("resourceType") if isinstance(res, dict) else None
        reduced = {"resource": {"resourceType": kind} if isinstance(kind, str) else None}
        return ENCODER.encode(reduced), None, None, None
    conformer = Conformer(comp.resource, comp.unread, comp.unread_arrays, comp.known_urls)
    fixed = conformer.struct(res, comp.resource_dtype, "", "")
    extra = ENCODER.encode(conformer.extra).decode() if conformer.extra else None
    problems: list[Problem] = []
    for path, key, value in conformer.problems:
        table, index, column = _locate(comp, path, key)
        problems.append(
            {"path": path, "table": table, "index": index, "column": column, "value": value}
        )
    # msgspec writes what it read: an integer beyond 64 bits stays exact in ``invalid``.
    invalid = ENCODER.encode(problems).decode() if problems else None
    try:
        exts = conformer.extensions
        extensions = ENCODER.encode(exts).decode() if exts else None
        return ENCODER.encode({"resource": fixed}), extra, invalid, extensions
    except (msgspec.EncodeError, TypeError, OverflowError):
        return None


def _prepare(comp: _Compiled, batch: list[bytes]) -> tuple[list[bytes], list[Fix | None]]:
    """Check each page exactly (:func:`strict_decoder`); repair the pages that fail.

    A page that passes is read as the check decoded it (:func:`reencoded`):
    only the fields the read schema has, which Polars reads three times faster
    than the page as sent when it skips most of it (one table's read). Called
    on the reader threads, one batch at a time, before the batch is read.
    """
    pages: list[bytes] = []
    fixes: list[Fix | None] = []
    for raw in batch:
        try:
            checked = comp.strict.decode(raw)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            repaired = _repair(comp, raw, _failed_entry(exc))
            if repaired is not None:
                pages.append(repaired[0])
                fixes.append(repaired[1])
                continue
            pages.append(raw)
        else:
            # Written back without the fields it skips when the read skips some:
            # re-encoding every field costs more than Polars saves on the rest.
            slim = reencoded(checked, raw) if comp.unread else None
            pages.append(slim or raw)
        fixes.append(None)
    return pages, fixes


_WORKERS = max(2, min(8, os.cpu_count() or 2))


_pool: tuple[int, ThreadPoolExecutor] | None = None


_pool_lock = threading.Lock()


def executor() -> ThreadPoolExecutor:
    """The module's persistent reader threads (created on first use, then reused).

    A pool per call cost more than the reads of a single page, which is how
    :mod:`toolkit.store` calls the flattener. A forked child process has none
    of its parent's threads, so it gets a pool of its own. Its threads are daemons
    started off the main thread (:func:`toolkit._threads.daemon_pool`), so a Ctrl-C
    while they start cannot leave one that holds the process's exit.
    """
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            pool = daemon_pool(_WORKERS, "pmtk-read")
            _pool = (os.getpid(), pool)
        return _pool[1]


def _read_error(comp: _Compiled, index: int, exc: Exception) -> DataValidationError:
    text = str(exc).strip()
    detail = text.splitlines()[0][:300] if text else type(exc).__name__
    msg = (
        f"page {index} is not a Bundle of {comp.resource} that the view can read "
        f"(a value has the wrong JSON type, or the JSON is malformed): {detail}"
    )
    return DataValidationError(msg, None)


def _kind_error(raw: bytes, kind: str | None, index: int) -> DataValidationError:
    if kind == "OperationOutcome":
        try:
            row = pl.read_json(raw, schema=ENVELOPE.to_schema()).row(0, named=True)
        except (pl.exceptions.PolarsError, OSError, ValueError):  # pragma: no cover
            row = {}  # it was read with the wider Bundle schema already
        detail = outcome_text(row)
        msg = f"page {index} is an OperationOutcome (an error answer), not a Bundle: {detail}"
    else:
        msg = f"page {index} is not a Bundle (resourceType {kind!r})"
    return DataValidationError(msg, None)


@dataclass(frozen=True, slots=True)
class _Block:
    """What one reader thread made of consecutive pages."""

    kinds: pl.Series  # each page's resourceType
    counts: pl.Series  # each page's number of entries
    resources: pl.Series  # the entry resources of every page, in order
    fixes: list[Fix | None]  # each page: what its repair found (None: read as sent)
    failure: tuple[int, Exception] | None  # (page index, error) of the page it stopped at


_BATCH_BYTES = 512 * 1024
"""Pages are read by Polars in batches of about this many bytes (a JSON array of
the pages): one call per page spent a fixed ~70 µs setting up the nested schema,
and much larger documents read slower than this size (the parser's working set
outgrows the CPU cache)."""


def _batches(raws: list[bytes], start: int) -> Iterator[tuple[int, list[bytes]]]:
    """Consecutive pages grouped into batches of at most :data:`_BATCH_BYTES`."""
    batch: list[bytes] = []
    size = 0
    first = start
    for i, raw in enumerate(raws, start):
        if batch and size + len(raw) > _BATCH_BYTES:
            yield first, batch
            batch, size, first = [], 0, i
        batch.append(raw)
        size += len(raw)
    if batch:
        yield first, batch


def _prepared_batches(
    comp: _Compiled, raws: list[bytes], start: int
) -> Iterator[tuple[int, list[bytes], list[bytes], list[Fix | None]]]:
    """Consecutive pages checked and repaired (:func:`_prepare`), in batches to read together.

    ``(first page's index, pages as sent, pages to read, fixes)``. Pages read
    as sent are batched by their size (:func:`_batches`); re-encoded ones
    (one table's read, :func:`reencoded`) by what is read of them, a quarter
    of the page or less, so that each read still has about :data:`_BATCH_BYTES`.
    """
    if not comp.unread:
        for first, as_sent in _batches(raws, start):
            yield first, as_sent, *_prepare(comp, as_sent)
        return
    sent: list[bytes] = []
    batch: list[bytes] = []
    fixes: list[Fix | None] = []
    size = 0
    first = start
    for i, raw in enumerate(raws, start):
        (page,), (fix,) = _prepare(comp, [raw])
        if batch and size + len(page) > _BATCH_BYTES:
            yield first, sent, batch, fixes
            sent, batch, fixes, size, first = [], [], [], 0, i
        sent.append(raw)
        batch.append(page)
        fixes.append(fix)
        size += len(page)
    if batch:
        yield first, sent, batch, fixes


_SENTINEL = "_pmtk_batch_sentinel"


_NONCE = secrets.token_hex(8)
"""Random per process, so that no page can contain a sentinel's value."""


def _read_batch(comp: _Compiled, batch: list[bytes]) -> pl.DataFrame | None:
    """Read several pages in one call; ``None`` when they must be read page by page.

    The pages are joined into one JSON array with a sentinel object between
    each two (``{"entry": [], "_pmtk_batch_sentinel": "<nonce>-<i>"}``, the
    nonce random per process; an empty rather than a null ``entry`` keeps the
    explode of the entries a copy-free one). The read is kept only when the
    rows alternate page, sentinel, page, ... with every sentinel in its place:
    no page text can hold a sentinel's value, so each page then is exactly one
    JSON value, which is what reading it alone requires. A page that is
    malformed, an array, two values, or half of a value completed by its
    neighbour fails that test or the read, and the caller reads the batch page
    by page, which names the page.

    Returns
    -------
    polars.DataFrame or None
        One row per page and one per sentinel (odd rows), read with
        ``comp.batch_schema``. Only ``Series`` methods that do not go through
        Polars' query engine are used here: this runs once per batch on the
        reader threads, and a query per batch cost more than the batching saved.
    """
    if len(batch) < 2:
        return None
    parts = [b"[", batch[0]]
    expected: list[str | None] = [None]
    for i, page in enumerate(batch[1:]):
        sentinel = f"{_NONCE}-{i}"
        parts += [b',{"entry":[],"', _SENTINEL.encode(), b'":"', sentinel.encode(), b'"},', page]
        expected += [sentinel, None]
    parts.append(b"]")
    try:
        df = pl.read_json(b"".join(parts), schema=comp.batch_schema)
    except (pl.exceptions.PolarsError, OSError, ValueError):
        return None
    if df.height != len(expected) or df.get_column(_SENTINEL).to_list() != expected:
        return None
    return df


def _sent_error(sent: bytes, schema: dict[str, Any], exc: Exception) -> Exception:
    """Polars' error for the page as sent: the one it gives for a page re-encoded
    (:func:`reencoded`) would point into text that the server never sent."""
    try:
        pl.read_json(sent, schema=schema)
    except (pl.exceptions.PolarsError, OSError, ValueError) as sent_exc:
        return sent_exc
    return exc  # pragma: no cover - what fails re-encoded fails as sent


def _read_block(comp: _Compiled, raws: list[bytes], start: int) -> _Block:
    """Read consecutive pages; stop at the first that cannot be read as one Bundle object.

    Each batch is first checked exactly, and the pages that fail the check are
    repaired (:func:`_prepared_batches`). The block's entries are gathered and exploded
    here, on the reader thread, so that the caller only joins a few long Series.
    """
    schema = comp.bundle_schema
    kinds: list[pl.Series] = [pl.Series("resourceType", [], dtype=pl.String)]
    lists: list[pl.Series] = [pl.Series("entry", [], dtype=schema["entry"])]
    is_page: list[bool] = []  # False for the rows of batch sentinels
    fixes: list[Fix | None] = []
    failure: tuple[int, Exception] | None = None
    for first, sent, batch, batch_fixes in _prepared_batches(comp, raws, start):
        together = _read_batch(comp, batch)
        if together is not None:
            kinds.append(together.get_column("resourceType"))
            lists.append(together.get_column("entry"))
            is_page += [True, False] * (len(batch) - 1) + [True]
            fixes += batch_fixes
            continue
        for i, (raw, fix, as_sent) in enumerate(zip(batch, batch_fixes, sent, strict=True), first):
            try:
                df = pl.read_json(raw, schema=schema)
            except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
                failure = (i, _sent_error(as_sent, schema, exc) if fix is None else exc)
                break
            if df.height != 1:  # a JSON array, not one Bundle object
                failure = (i, ValueError(f"a JSON array of {df.height} values, not one object"))
                break
            kinds.append(df.get_column("resourceType"))
            lists.append(df.get_column("entry"))
            is_page.append(True)
            fixes.append(fix)
        if failure is not None:
            break
    entry_lists = pl.concat(lists)
    resources = entry_lists.explode(empty_as_null=False, keep_nulls=False).struct.field("resource")
    pages = pl.Series("page", is_page, dtype=pl.Boolean)
    return _Block(
        kinds=pl.concat(kinds, rechunk=True).filter(pages),
        counts=entry_lists.list.len().fill_null(0).filter(pages),
        resources=resources,
        fixes=fixes,
        failure=failure,
    )


def read_entries(comp: _Compiled, pages: Any) -> pl.DataFrame:
    """One row per entry resource of ``comp.resource``: ``resource``, ``extra``,
    ``invalid``, ``extensions`` (each a JSON text, see :func:`_repair_entry`)."""
    raws = [as_bytes(page) for page in iter_pages(pages)]
    if not raws:
        return pl.DataFrame(schema={"resource": comp.resource_dtype, **_FIX_SCHEMA})
    # pl.read_json releases the GIL: contiguous blocks of pages are read on the
    # persistent threads (one block each, in batches of _BATCH_BYTES). Each
    # thread runs the exact check (msgspec, which holds the GIL) on a batch
    # right before reading it, so one thread checks while the other reads; the
    # check on this thread, beside the readers, kept them waiting for the GIL
    # (measured 10 % slower on 2 cores). A single page is read inline.
    blocks = _read_blocks(comp, raws)
    failure: tuple[int, Exception] | None = None
    for n, block in enumerate(blocks):
        if block.failure is not None:
            failure = block.failure
            blocks = blocks[: n + 1]
            break
    # Errors in page order: the first page that is not a readable Bundle.
    kind = pl.concat([b.kinds for b in blocks])
    not_bundle = (kind != "Bundle").fill_null(value=True)
    if not_bundle.any():
        first = int(not_bundle.arg_true()[0])
        raise _kind_error(raws[first], kind[first], first)
    if failure is not None:
        raise _read_error(comp, *failure)
    counts = pl.concat([b.counts for b in blocks])
    entries = pl.concat([b.resources for b in blocks]).alias("resource").to_frame()
    entries = _with_fixes(entries, counts, [f for b in blocks for f in b.fixes])
    kind_expr = pl.col("resource").struct.field("resourceType")
    keep = pl.col("resource").is_not_null() & (kind_expr.is_null() | (kind_expr == comp.resource))
    # Filtering copies every nested column: only do it when something is dropped.
    if entries.select((~keep).any()).item():
        entries = entries.filter(keep)
    return entries


def _read_blocks(comp: _Compiled, raws: list[bytes]) -> list[_Block]:
    """Contiguous blocks of pages read on the persistent threads (a single page inline)."""
    if len(raws) == 1:
        return [_read_block(comp, raws, 0)]
    size = -(-len(raws) // _WORKERS)
    futures = [
        executor().submit(_read_block, comp, raws[i : i + size], i)
        for i in range(0, len(raws), size)
    ]
    return [f.result() for f in futures]


def _with_fixes(entries: pl.DataFrame, counts: pl.Series, fixes: list[Fix | None]) -> pl.DataFrame:
    """``entries`` with the ``extra``, ``invalid`` and ``extensions`` columns the
    repairs found (null if none)."""
    if all(f is None for f in fixes):
        return entries.with_columns(pl.lit(None, dtype=pl.String).alias(n) for n in _FIX_SCHEMA)
    extra: list[str | None] = []
    invalid: list[str | None] = []
    extensions: list[str | None] = []
    for i, (n, fix) in enumerate(zip(counts.to_list(), fixes, strict=True)):
        if fix is None:
            extra.extend([None] * n)
            invalid.extend([None] * n)
            extensions.extend([None] * n)
            continue
        if len(fix.extra) != n:  # pragma: no cover - both parsers read the same document
            msg = f"page {i}: {len(fix.extra)} entries by orjson but {n} by polars"
            raise DataValidationError(msg, None)
        extra.extend(fix.extra)
        invalid.extend(fix.invalid)
        extensions.extend(fix.extensions)
    return entries.with_columns(
        extra=pl.Series("extra", extra, dtype=pl.String),
        invalid=pl.Series("invalid", invalid, dtype=pl.String),
        extensions=pl.Series("extensions", extensions, dtype=pl.String),
    )


_FIX_SCHEMA: dict[str, pl.DataType] = {
    "extra": pl.String(),
    "invalid": pl.String(),
    "extensions": pl.String(),
}
"""The columns :func:`read_entries` adds beside ``resource``."""
