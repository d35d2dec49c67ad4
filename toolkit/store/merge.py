"""Event changes merged into the store (:func:`apply_changes`, :func:`upsert`, :func:`delete`).

This is how a webhook receiver (:mod:`toolkit.webhooks`) keeps a store
current without a list walk. The records are flattened with the resource's
view, validated, and merged by id into every table (child table rows of a
replaced or removed record go with it) and into the raw records (so views over
them and ``pmtk sync --rebuild`` see the change); the new files are staged in a
:class:`~toolkit.store.transaction.Transaction` of their own
(``.staging/.changes-<Resource>/``), fsynced, moved in under their sha256
names and switched in by replacing the manifest, exactly as a sync commits.
The newest ``meta.lastUpdated`` wins: a record older than the stored version
is skipped, so duplicate and out-of-order changes are harmless. The
high-water mark of the resource is left alone, so the next incremental
:func:`~toolkit.store.sync` still covers anything not announced.

>>> import tempfile
>>> from toolkit.store import load
>>> record = {"resourceType": "Referral", "id": "7",
...           "meta": {"lastUpdated": "2026-01-02T03:04:05Z"}}
>>> with tempfile.TemporaryDirectory() as out:
...     done = upsert("Referral", [record], out)
...     gone = delete("Referral", ["7"], out)
...     (done.upserted, gone.deleted, load("Referral", out).height)
(['7'], ['7'], 0)
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from toolkit import views
from toolkit.store.layout import (
    claim,
    empty_tables,
    init_manifest,
    later,
    load_manifest_for_write,
    locked,
    manifest_path,
    mkdir,
    now_iso,
    parent_key,
    schema_version,
    sink_parquet,
    update_manifest,
    write_json,
)
from toolkit.store.paths import table_path
from toolkit.store.precedence import instant as fhir_instant
from toolkit.store.precedence import replaces, stamp
from toolkit.store.rawtable import RAW_SCHEMA, raw_frame, raw_table
from toolkit.store.results import (
    DEFAULT_STORE,
    STAGING,
    STORE_FORMAT,
    STORE_KIND,
    ErrorsMode,
    FileProblem,
    StoreDamaged,
    StoreError,
    StoreWriteError,
)
from toolkit.store.resume import later_since, next_since, since_after
from toolkit.store.transaction import Transaction, verify_entry

LOCK_WAIT = 30.0
"""Seconds :func:`apply_changes` waits for a sync (or another writer) to release the store."""


@contextlib.contextmanager
def _locked_waiting(root: Path, timeout: float) -> Iterator[None]:
    """Like :func:`locked`, but wait up to ``timeout`` s: a change arrives while a sync runs.

    The folder is claimed before the wait and again under the lock (another process may
    have written it meanwhile), so a user's folder is never written by a change.
    """
    claim(root)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with locked(root):
                claim(root)
                yield
            return
        except StoreError as exc:
            if isinstance(exc, StoreWriteError) or time.monotonic() >= deadline:
                raise
            if "another pmtk sync" not in str(exc):
                raise
        time.sleep(0.05)


@dataclass(slots=True)
class ChangeResult:
    """What :func:`apply_changes` did to one resource of a store.

    Attributes
    ----------
    resource
        The resource type.
    upserted
        Ids whose fetched version was written (new or newer than the stored one).
    stale
        Ids skipped because the store already holds a newer ``meta.lastUpdated``.
    deleted
        Ids removed (those that were stored).
    written
        Whether new data files were committed (false when nothing changed).
    """

    resource: str
    upserted: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    written: bool = False


def _stored_versions(path: Path, ids: Sequence[str]) -> dict[str, str | None]:
    """``id -> last_updated`` (a FHIR instant in UTC, or ``None``) of the stored ``ids``."""
    if not ids:
        return {}
    rows = (
        pl.scan_parquet(path)
        .filter(pl.col("id").is_in(list(ids)))
        .select("id", pl.col("last_updated").dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ"))
        .collect()
    )
    return dict(zip(rows["id"].to_list(), rows["last_updated"].to_list(), strict=True))


def _newest_per_id(records: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The winning record per id (:func:`toolkit.store.precedence.replaces`, in order)."""
    chosen: dict[str, Mapping[str, Any]] = {}
    for record in records:
        rid = record.get("id")
        if not isinstance(rid, str) or not rid:
            msg = f"a record to upsert has no id: {str(record)[:120]}"
            raise ValueError(msg)
        held = chosen.get(rid)
        if held is None or replaces(stamp(record), stamp(held)):
            chosen[rid] = record
    return chosen


def apply_changes(
    resource_type: str,
    store: str | os.PathLike[str] = DEFAULT_STORE,
    *,
    upserts: Sequence[Mapping[str, Any]] = (),
    deletes: Sequence[str] = (),
    event: Mapping[str, Any] | None = None,
    errors: ErrorsMode = "raise",
    lock_timeout: float = LOCK_WAIT,
) -> ChangeResult:
    """Write single records into a store (or remove them), keeping its invariants.

    Parameters
    ----------
    resource_type
        A resource with a view, e.g. ``"Appointment"``.
    store
        The store directory (missing, empty or a pmtk store).
    upserts
        Whole records as the API serves them (``GET /main/<type>/<id>``).
    deletes
        Ids to remove (also when upserted here).
    event
        The last event these changes come from (kept in the manifest's ``"events"``).
    errors
        Validation mode for the new rows (:func:`toolkit.schemas.validate`).
    lock_timeout
        Seconds to wait while a sync holds the store.

    Returns
    -------
    ChangeResult

    Raises
    ------
    toolkit.errors.DataValidationError
        A record fails its schema (with ``errors="raise"``); nothing is written.
    StoreError
        The stored files fail their checksums (:class:`StoreDamaged`: run ``pmtk sync
        --full --resource R``) or were written for another view; the lock stayed held for
        ``lock_timeout`` s; or as for :func:`sync` (NotAStore, ManifestDamaged, StoreWriteError).
    """
    root = Path(store)
    # Flatten and validate before taking the lock: a bad record changes nothing.
    wanted, removed, new_tables = _prepared(resource_type, upserts, deletes, errors)
    with _locked_waiting(root, lock_timeout):
        return _apply_locked(root, resource_type, wanted, removed, new_tables, event)


def warm(resource_type: str) -> None:
    """Flatten and validate no records of ``resource_type``: the imports and schema
    builds that a process's first :func:`apply_changes` would otherwise pay for."""

    empty = empty_tables(resource_type)  # raises ConfigurationError for a type without a view
    views.flatten_tables(resource_type, [_NO_RECORDS])
    _checked_tables(resource_type, {}, empty, "raise")


_NO_RECORDS = b'{"resourceType": "Bundle", "type": "searchset", "entry": []}'


def _prepared(
    resource_type: str,
    upserts: Sequence[Mapping[str, Any]],
    deletes: Sequence[str],
    errors: ErrorsMode,
) -> tuple[dict[str, Mapping[str, Any]], set[str], dict[str, pl.DataFrame]]:
    """The newest record per id to write, the ids to remove, and the validated new rows."""
    empty = empty_tables(resource_type)  # raises ConfigurationError for a type without a view
    wanted = _newest_per_id(upserts)
    removed = {rid for rid in deletes if isinstance(rid, str) and rid}
    for rid in removed:
        wanted.pop(rid, None)
    return wanted, removed, _checked_tables(resource_type, wanted, empty, errors)


def _apply_locked(
    root: Path,
    resource_type: str,
    wanted: Mapping[str, Mapping[str, Any]],
    removed: set[str],
    new_tables: dict[str, pl.DataFrame],
    event: Mapping[str, Any] | None,
) -> ChangeResult:
    """:func:`apply_changes` once the store's lock is held (a sync holds it already)."""
    version = schema_version(resource_type)
    result = ChangeResult(resource=resource_type)
    init_manifest(root)
    txn = Transaction(root, resource_type)
    txn.recover()  # first finish a sync's commit that a crash interrupted
    entry = load_manifest_for_write(root)["resources"].get(resource_type)
    empty, new_tables = _with_raw(resource_type, entry, wanted, new_tables)
    stored = _stored_tables(root, resource_type, entry, version, empty)
    versions = _stored_versions(stored[resource_type], [*wanted, *removed]) if stored else {}
    for rid, record in wanted.items():
        if rid in versions and not replaces(stamp(record), versions[rid]):
            result.stale.append(rid)
        else:
            result.upserted.append(rid)
    result.deleted = sorted(r for r in removed if r in versions)
    changed = [*result.upserted, *result.deleted]
    tables_info: dict[str, Any] = dict(entry["tables"]) if stored and entry else {}
    if changed:
        tables_info.update(
            _write_changed(root, resource_type, empty, new_tables, stored, result, changed)
        )
        result.written = True
    _record_changes(root, resource_type, entry, version, tables_info, result, event, changed)
    if result.written:
        txn.remove_superseded(tables_info)
    return result


def _with_raw(
    resource_type: str,
    entry: Any,
    wanted: Mapping[str, Mapping[str, Any]],
    new_tables: dict[str, pl.DataFrame],
) -> tuple[dict[str, pl.DataFrame], dict[str, pl.DataFrame]]:
    """The tables a change writes, with the raw records when the store keeps them.

    The raw records are what ViewDefinitions and ``pmtk sync --rebuild`` read: a
    change that skipped them would show the old record there, and a rebuild would
    restore it (or a deleted one). A store synced before raw records were kept has
    none, and a change does not start a table that would hold only the changed
    records: :func:`~toolkit.store.raw.raw_records` keeps asking for a full sync.
    """
    empty = empty_tables(resource_type)
    raw = raw_table(resource_type)
    tables = entry.get("tables") if isinstance(entry, dict) else None
    if isinstance(tables, dict) and tables and raw not in tables:
        return empty, new_tables
    records = list(wanted.values())
    return (
        {**empty, raw: pl.DataFrame(schema=RAW_SCHEMA)},
        {**new_tables, raw: raw_frame(resource_type, [dict(r) for r in records])},
    )


def drop_missing(
    root: Path, resource_type: str, present: set[str], *, older_than: str | None = None
) -> list[str]:
    """Delete the stored records of ``resource_type`` whose ids are not in ``present``.

    For a sync that holds the store's lock: the deployment's full list of ids
    (``$export-ids`` or a reconciling walk) against what the store keeps.
    Returns the ids removed (with their child-table rows).

    ``older_than`` (a server time from before the list was asked for) spares every
    record stored with a ``lastUpdated`` at or after it: for a writer that does not
    hold the lock from the list's request to this call (the listener's catch-up), a
    record created after the list was made, and stored meanwhile by a webhook, is
    missing from the list but not deleted.
    """

    entry = load_manifest_for_write(root)["resources"].get(resource_type)
    tables = entry.get("tables") if isinstance(entry, dict) else None
    info = tables.get(resource_type) if isinstance(tables, dict) else None
    if not isinstance(info, dict) or "path" not in info:
        return []
    path = table_path(root, resource_type, resource_type, info)
    rows = pl.scan_parquet(path)
    if older_than is not None:
        bound = fhir_instant(older_than)
        if bound is None:
            return []  # no bound known: nothing can be shown older than the list
        rows = rows.filter(pl.col("last_updated") < bound)
    stored = rows.select("id").collect()["id"]
    missing = {rid for rid in stored.to_list() if rid not in present}
    if not missing:
        return []
    empty = empty_tables(resource_type)
    result = _apply_locked(root, resource_type, {}, missing, empty, None)
    return result.deleted


def drop_missing_waiting(
    root: Path,
    resource_type: str,
    present: set[str],
    *,
    older_than: str,
    lock_timeout: float = LOCK_WAIT,
) -> list[str]:
    """:func:`drop_missing` for a writer without the lock: it waits for the lock (as
    :func:`apply_changes` does) and spares what is newer than ``older_than``."""
    root = Path(root)
    with _locked_waiting(root, lock_timeout):
        return drop_missing(root, resource_type, present, older_than=older_than)


def record_catch_up(
    root: Path,
    resource_type: str,
    *,
    newest: str | None,
    server_time: str | None,
    started_at: str,
    fetched: int,
    pages: int,
    lock_timeout: float = LOCK_WAIT,
) -> bool:
    """Move the resource's next incremental bound forward after a catch-up walk; true if moved.

    The listener's catch-up walks ``_lastUpdated`` from the stored bound without the
    store's lock and writes what it read through :func:`apply_changes`; this records
    that walk as a sync would (the high-water mark ``newest`` and the server's clock at
    the walk's start give the next bound: :func:`~toolkit.store.resume.since_after`).
    The bound only ever moves forward: when a sync has meanwhile recorded a later one,
    it is kept. A resource no sync has made a table of is left alone.
    """
    root = Path(root)
    with _locked_waiting(root, lock_timeout):
        entry = load_manifest_for_write(root)["resources"].get(resource_type)
        if not isinstance(entry, dict) or entry.get("last_sync") is None:
            return False
        mark = later(entry.get("high_water_mark"), newest)
        bound = since_after(mark, server_time)
        held = next_since(entry)
        if bound is None or later_since(bound, held) != bound or bound == held:
            return False
        new_entry = dict(entry)
        new_entry.update(
            high_water_mark=mark,
            server_time=server_time,
            next_since=bound,
            last_sync={
                "started_at": started_at,
                "records_fetched": fetched,
                "pages": pages,
                "status": "caught up",
                "by": "pmtk listen (catch-up)",
            },
        )
        update_manifest(root, resource_type, new_entry)
        return True


def _checked_tables(
    resource_type: str,
    wanted: Mapping[str, Mapping[str, Any]],
    empty: dict[str, pl.DataFrame],
    errors: ErrorsMode,
) -> dict[str, pl.DataFrame]:
    """The records flattened with the resource's view and validated (before any lock)."""
    from toolkit import schemas

    page = orjson.dumps(
        {
            "resourceType": "Bundle",
            "type": "searchset",
            "entry": [{"resource": dict(r)} for r in wanted.values()],
        }
    )
    new_tables = views.flatten_tables(resource_type, [page]) if wanted else empty
    for table, frame in new_tables.items():
        schemas.validate(
            frame, resource_type, table=None if table == resource_type else table, errors=errors
        )
    return new_tables


def _stored_tables(
    root: Path, resource_type: str, entry: Any, version: str, empty: dict[str, pl.DataFrame]
) -> dict[str, Path]:
    """The stored file of every table, after checking its view version and checksums."""
    if not (isinstance(entry, dict) and entry.get("tables")):
        return {}
    if entry.get("schema_version") != version:
        msg = (
            f"the stored {resource_type} tables were written for another version of "
            f"its view; run `pmtk sync --out {root} --full --resource {resource_type}`"
        )
        raise StoreError(msg)
    problems = verify_entry(root, resource_type, entry)
    tables = entry["tables"]
    if isinstance(tables, dict):  # (one that is not is reported missing by verify_entry)
        # a table of the resource that the entry does not name (a damaged or forged
        # manifest) is missing too: merging without it would drop its rows
        problems += [
            FileProblem(resource_type, t, f"{t}/?", "missing")
            for t in empty
            if not isinstance(tables.get(t), dict)
        ]
    if problems:
        raise StoreDamaged(root, problems)
    return {t: root / str(tables[t]["path"]) for t in empty}


def _write_changed(
    root: Path,
    resource_type: str,
    empty: dict[str, pl.DataFrame],
    new_tables: dict[str, pl.DataFrame],
    stored: dict[str, Path],
    result: ChangeResult,
    changed: list[str],
) -> dict[str, Any]:
    """Every table merged with the changes, fsynced and moved to its sha256 name."""
    key = parent_key(resource_type)
    keep = pl.DataFrame({"id": result.upserted}, schema={"id": pl.String})
    staging = root / STAGING / f".changes-{resource_type}"
    txn = Transaction(root, resource_type, stage=staging, tables=empty)
    txn.cleanup()
    mkdir(staging, f"staging changes of {resource_type}")
    tables_info: dict[str, Any] = {}
    try:
        for table, schema_frame in empty.items():
            k = "id" if table in (resource_type, raw_table(resource_type)) else key
            fresh = new_tables[table].join(keep.rename({"id": k}), on=k, how="semi")
            parts = [fresh.lazy().select(schema_frame.columns)]
            if stored:
                old = pl.scan_parquet(stored[table]).filter(~pl.col(k).is_in(changed))
                parts.insert(0, old.select(schema_frame.columns))
            target = staging / f"{table}.parquet"
            sink_parquet(
                pl.concat(parts).cast(schema_frame.schema),
                target,
                f"writing the changed {table} table",
            )
            tables_info[table] = txn.publish(table, target)
    finally:
        txn.cleanup()
    return tables_info


def _record_changes(
    root: Path,
    resource_type: str,
    entry: Any,
    version: str,
    tables_info: dict[str, Any],
    result: ChangeResult,
    event: Mapping[str, Any] | None,
    changed: list[str],
) -> None:
    """Replace the manifest: the resource's new files and the event counters."""
    new_entry = dict(entry) if isinstance(entry, dict) else {}
    if result.written:
        new_entry.setdefault("status", "ok")
        new_entry.setdefault("schema_version", version)
        new_entry.setdefault("high_water_mark", None)  # a later sync fetches in full
        new_entry["tables"] = tables_info
        new_entry["changed_at"] = now_iso()
    manifest = load_manifest_for_write(root)
    manifest["kind"] = STORE_KIND
    manifest["format"] = STORE_FORMAT
    if new_entry:
        manifest["resources"][resource_type] = new_entry
    if event is not None or result.written:
        held = manifest.get("events")
        events: dict[str, Any] = dict(held) if isinstance(held, dict) else {}
        events["applied"] = int(events.get("applied") or 0) + len(changed)
        if event is not None:
            events["last_applied"] = {**dict(event), "applied_at": now_iso()}
        manifest["events"] = events
        write_json(manifest_path(root), manifest)


def upsert(
    resource_type: str,
    records: Sequence[Mapping[str, Any]],
    store: str | os.PathLike[str] = DEFAULT_STORE,
    *,
    event: Mapping[str, Any] | None = None,
    errors: ErrorsMode = "raise",
) -> ChangeResult:
    """Insert or replace whole records in a store; the newest ``meta.lastUpdated`` wins.

    A shorthand for :func:`apply_changes` with ``upserts=records``.
    """
    return apply_changes(resource_type, store, upserts=records, event=event, errors=errors)


def delete(
    resource_type: str,
    ids: Sequence[str],
    store: str | os.PathLike[str] = DEFAULT_STORE,
    *,
    event: Mapping[str, Any] | None = None,
) -> ChangeResult:
    """Remove records (and their child-table rows) from a store.

    A shorthand for :func:`apply_changes` with ``deletes=ids``.
    """
    return apply_changes(resource_type, store, deletes=ids, event=event)
