"""One resource's change committed into a lake: precedence, one ``MERGE`` per table, the pin.

A change is a set of new record versions (already flattened into the resource's
tables and validated) plus ids to delete. It is committed while holding the
resource's lease (:func:`toolkit.lake.state.take_lease`):

1. **Precedence.** The staged versions are reduced to the newest per id, then
   compared with the versions the lake holds (its raw-record table): a staged version
   wins unless the stored one is strictly newer (:func:`toolkit.lake.precedence`;
   on a tie the staged one, as the store does). Stale versions are counted, not written.
2. **One ``MERGE`` per table**, the same statement for every table: the source holds
   a *delete marker* for each id the change touches and the new rows of the winners.
   ``ON key = key AND marker`` deletes every stored row of a touched record (so a
   record that lost a participant loses the row) and the new rows, which match
   nothing, are inserted. Delta rewrites only the files holding touched rows. A
   deployment's partition that has no file yet takes a plain append.
3. **The pin**: the new version of every table and the sha256 of every data file of
   the deployment's partition, moved in one compare-and-swap ``MERGE`` that also
   releases the lease (:func:`toolkit.lake.state.move_pin`).

A crash anywhere before step 3 leaves the pin where it was: readers through pmtk
see the previous state of every table, and the next writer (the lease expires) takes
the same records again; its ``MERGE`` replaces whatever the crashed one had written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import pyarrow as pa

from toolkit.lake.location import LakeDamaged, Location, check_data_path, check_table_name
from toolkit.lake.precedence import instants, newest_per_id, staged_wins
from toolkit.lake.state import (
    Pin,
    append_history,
    move_pin,
    now_iso,
    owner_id,
    pin_of,
    release_lease,
    retrying,
    take_lease,
)
from toolkit.store.layout import declared_schemas, later, parent_key, schema_version
from toolkit.store.rawtable import RAW_SCHEMA, raw_table

ROW_GROUP_ROWS = 65_536
"""Rows per Parquet row group of a data file. The Parquet writer holds a whole row
group in memory before it encodes it, and its default (1,048,576 rows) made a large
table's write hold the table: 505,184 raw Appointments (their JSON) in one group. With
a fixed bound the memory a commit needs stops growing with the table."""


def _writer_properties() -> Any:
    from deltalake import WriterProperties

    return WriterProperties(compression="ZSTD", max_row_group_size=ROW_GROUP_ROWS)


WRITER = _writer_properties()
"""Data files are zstd-compressed, as the store's are, in row groups of at most
:data:`ROW_GROUP_ROWS` rows."""

Rows = pl.DataFrame | pl.LazyFrame | Sequence[pl.LazyFrame]
"""A table's new rows: one frame, or pieces of it (see :class:`Change`)."""


def pieces(rows: Rows) -> list[pl.LazyFrame]:
    """``rows`` as a list of lazy pieces (one piece when given one frame)."""
    if isinstance(rows, pl.DataFrame | pl.LazyFrame):
        return [rows.lazy()]
    return list(rows)


def whole(rows: Rows, schema: pl.Schema) -> pl.LazyFrame:
    """``rows`` as one lazy frame (an empty one of ``schema`` when given no piece)."""
    parts = pieces(rows)
    return pl.concat(parts, how="vertical") if parts else pl.LazyFrame(schema=schema)


OP = "_pmtk_op"
PART = "_pmtk_part"
"""Working columns of a staged change (never written): the marker, and the staged part."""


@dataclass(slots=True)
class Change:
    """What one commit writes for a resource of a deployment.

    Attributes
    ----------
    tables
        The new rows of every table (main, child, extension and raw), as flattened
        and validated, each with the column :data:`PART` (the order it was staged in:
        of two versions with the same ``lastUpdated`` the later part wins). A table
        may be given in pieces (a sync's staged parts, one scan each): they are then
        written one piece after another, so a commit holds one piece, not the table.
    deletes
        Ids the API said are gone (a 404/410 OperationOutcome).
    present
        Every id the deployment holds (its ``$export-ids`` answer, or a whole walk of
        its list), when known: a stored record missing from it is deleted, unless it
        was stored with a ``lastUpdated`` at or after ``present_since`` (the server's
        time when that list was taken), since such a record was written after the
        list was read (by a webhook, say) and the list says nothing about it.
    """

    tables: Mapping[str, Rows]
    deletes: set[str] = field(default_factory=set)
    present: set[str] | pl.Series | None = None
    present_since: str | None = None
    walked_from: Pin | None = None
    """The pin as it stood when the records were read (a sync's walk began): a record
    the lake held then but no longer holds when this commits was deleted meanwhile by
    another writer (a webhook's confirmed delete), after the walk had read it, so it is
    not written back (the lake keeps no tombstones; this is what stands for them)."""


def _no_ids() -> pl.Series:
    return pl.Series("id", [], dtype=pl.String)


@dataclass(slots=True)
class CommitResult:
    """What a commit did and the pin it left.

    The ids are kept as Polars Series (``upserted_ids``, ``stale_ids``,
    ``deleted_ids``, each sorted): a full sync of a million records holds them as
    Arrow strings, not as a million Python objects each. ``upserted``, ``stale`` and
    ``deleted`` give them as lists.
    """

    upserted_ids: pl.Series = field(default_factory=_no_ids)
    stale_ids: pl.Series = field(default_factory=_no_ids)
    deleted_ids: pl.Series = field(default_factory=_no_ids)
    written: bool = False
    pin: Pin | None = None

    @property
    def upserted(self) -> list[str]:
        """Ids whose staged version was written (new, or newer than the stored one)."""
        return list(self.upserted_ids.to_list())

    @property
    def stale(self) -> list[str]:
        """Ids left as they were: the lake holds a newer version."""
        return list(self.stale_ids.to_list())

    @property
    def deleted(self) -> list[str]:
        """Ids removed (stored, and gone from the deployment)."""
        return list(self.deleted_ids.to_list())


def lake_tables(resource_type: str) -> dict[str, pl.Schema]:
    """Every table a resource has in a lake (declared views, then the raw records)."""
    out = dict(declared_schemas(resource_type))
    out[raw_table(resource_type)] = RAW_SCHEMA
    for name in out:
        check_table_name(name)
    return out


def key_of(resource_type: str, table: str) -> str:
    """The column naming a row's record: ``id`` in the main and raw tables, else the parent."""
    return "id" if table in (resource_type, raw_table(resource_type)) else parent_key(resource_type)


def stats_columns(key: str) -> dict[str, str]:
    """A new table's configuration: Delta statistics for the record key only.

    The log keeps a removed file's statistics for ever (time travel reads them), so a
    rebind that removes a deployment's files would leave the minimum and maximum of
    every column in the log: names, birth dates. Only the key is needed (a ``MERGE``
    prunes files by it); the partition column needs none.
    """
    return {"delta.dataSkippingStatsColumns": key}


def to_delta(frame: pl.LazyFrame, deployment: str) -> pl.LazyFrame:
    """The rows as written: the deployment first, then the declared columns."""
    return frame.select(pl.lit(deployment, pl.String).alias("deployment"), pl.all())


STREAM_ROWS = 50_000
"""Rows per batch handed to delta-rs: a commit holds one batch, not the whole change."""


def stream(frames: Sequence[pl.LazyFrame]) -> pa.RecordBatchReader:
    """The frames one after another as one Arrow stream, computed batch by batch while
    delta-rs reads it (columns a frame lacks are null).

    A frame's query starts once the one before it has been read. Polars' streaming
    engine reads ahead of its consumer: given one query over a sync's staged parts it
    read them all before delta-rs took the first batch (866 MB for the large raw
    Appointment table, against 137 MB part by part), so a commit holds one piece.
    """
    shape = pl.concat([f.head(0) for f in frames], how="diagonal_relaxed").collect_schema()
    schema = pl.DataFrame(schema=shape).to_arrow().schema

    def batches() -> Any:
        for frame in frames:
            has = frame.collect_schema()
            aligned = frame.select(
                pl.col(c) if c in has else pl.lit(None, dtype).alias(c)
                for c, dtype in shape.items()
            )
            for part in aligned.collect_batches(chunk_size=STREAM_ROWS):
                yield from part.to_arrow().cast(schema).to_batches()

    return pa.RecordBatchReader.from_batches(schema, batches())


def empty_change(resource_type: str) -> Change:
    tables = {
        name: pl.DataFrame(schema=schema).with_columns(pl.lit(0, pl.Int64).alias(PART))
        for name, schema in lake_tables(resource_type).items()
    }
    return Change(tables)


def open_data_table(loc: Location, table: str) -> Any:
    from deltalake import DeltaTable

    uri = loc.table_uri("tables", table)
    loc.check_local_links("tables", table)
    if not DeltaTable.is_deltatable(uri, storage_options=loc.storage_options):
        return None
    return DeltaTable(uri, storage_options=loc.storage_options)


def partition_files(dt: Any, table: str, deployment: str) -> dict[str, int]:
    """``path -> size`` of the deployment's data files at the table's loaded version.

    Every path must be one of that partition's data files (:func:`check_data_path`).
    """
    actions = pa.table(dt.get_add_actions(flatten=True))
    paths = actions.column("path").to_pylist()
    sizes = actions.column("size_bytes").to_pylist()
    parts = (
        actions.column("partition.deployment").to_pylist()
        if "partition.deployment" in actions.column_names
        else [None] * len(paths)
    )
    out: dict[str, int] = {}
    for path, size, part in zip(paths, sizes, parts, strict=True):
        if part != deployment:
            continue
        problem = check_data_path(table, deployment, path)
        if problem is not None:
            raise LakeDamaged(problem)
        out[path] = int(size)
    return out


def _held_nothing() -> pl.DataFrame:
    return pl.DataFrame(schema={"id": pl.String, "last_updated": pl.String})


def _held(
    loc: Location, resource_type: str, deployment: str, version: int | None = None
) -> pl.DataFrame:
    """``id`` and ``last_updated`` of every record the deployment's raw table holds (its
    latest version, or ``version``), read once a commit: what is stored, what goes."""
    from deltalake import DeltaTable

    empty = _held_nothing()
    table = raw_table(resource_type)
    dt = open_data_table(loc, table)
    if dt is None:
        return empty
    if version is not None:
        uri = loc.table_uri("tables", table)
        dt = DeltaTable(uri, version=version, storage_options=loc.storage_options)
    if not partition_files(dt, table, deployment):
        return empty
    arrow = dt.to_pyarrow_table(
        filters=[("deployment", "=", deployment)], columns=["id", "last_updated"]
    )
    frame = pl.DataFrame(pl.from_arrow(arrow))
    return frame.select(pl.col("id").cast(pl.String), pl.col("last_updated").cast(pl.String))


def commit(
    loc: Location,
    deployment: str,
    resource_type: str,
    change: Change,
    *,
    pin: Pin,
    kind: str,
    lock_timeout: float = 60.0,
    counts: Mapping[str, int] | None = None,
    after_table: Any = None,
) -> CommitResult:
    """Commit ``change`` (see the module's docstring); ``pin`` carries the new marks.

    ``pin`` is the pin as the caller wants it after the commit (high-water mark and
    such); its versions, files and seq are filled in here. ``after_table`` (tests) is
    called with each table's name once its ``MERGE`` committed.
    """
    owner = owner_id()
    take_lease(loc, deployment, resource_type, owner, lock_timeout)
    try:
        result = _commit_locked(loc, deployment, resource_type, change, pin, after_table)
        assert result.pin is not None
        move_pin(loc, result.pin, result.pin.seq - 1, owner)
    except BaseException:
        with contextlib.suppress(Exception):
            release_lease(loc, deployment, resource_type, owner)
        raise
    history_counts = {
        "upserted": result.upserted_ids.len(),
        "stale": result.stale_ids.len(),
        "deleted": result.deleted_ids.len(),
        **dict(counts or {}),
    }
    append_history(loc, result.pin, kind, history_counts)
    return result


def _current_pin(loc: Location, deployment: str, resource_type: str, wanted: Pin) -> Pin:
    """The pin as committed now (it may have moved since the caller read it)."""
    now = pin_of(loc, deployment, resource_type)
    wanted.seq = now.seq
    wanted.versions = dict(now.versions)
    wanted.files = {t: dict(f) for t, f in now.files.items()}
    return now


def _commit_locked(
    loc: Location,
    deployment: str,
    resource_type: str,
    change: Change,
    wanted: Pin,
    after_table: Any,
) -> CommitResult:
    """Steps 1 and 2 of the module's docstring, under the lease; the pin to move."""

    now = _current_pin(loc, deployment, resource_type, wanted)
    if now.high_water_mark is not None:
        wanted.high_water_mark = later(now.high_water_mark, wanted.high_water_mark)
    result, keep = _decide(loc, deployment, resource_type, change, now.seq)
    touched = pl.concat([result.upserted_ids, result.deleted_ids]).unique().sort()
    wanted.schema_version = schema_version(resource_type)
    wanted.fetched_at = now_iso()
    if touched.len():
        for table, schema in lake_tables(resource_type).items():
            key = key_of(resource_type, table)
            winners = keep.lazy().rename({"id": key})
            rows = [
                piece.join(winners, on=[key, PART], how="semi").select(list(schema))
                for piece in pieces(change.tables[table])
            ]
            known = now.files.get(table, {})
            version, files = _write_table(loc, deployment, table, key, rows, touched, schema, known)
            wanted.versions[table] = version
            wanted.files[table] = files
            if after_table is not None:
                after_table(table)
        result.written = True
    wanted.seq = now.seq + 1
    result.pin = wanted
    return result


def _decide(
    loc: Location, deployment: str, resource_type: str, change: Change, seq: int
) -> tuple[CommitResult, pl.DataFrame]:
    """Which staged versions win (``id`` and part of each), which are stale, which ids go.

    ``seq`` is the resource's pin now: when other commits came after ``walked_from``,
    a staged record deleted by one of them is stale (:attr:`Change.walked_from`)."""
    raw = whole(
        change.tables[raw_table(resource_type)], pl.Schema({**RAW_SCHEMA, PART: pl.Int64()})
    ).select("id", "last_updated", PART)
    chosen = newest_per_id(raw.collect(), PART)
    # read once, and only when something is to be compared (an empty re-sync reads nothing)
    asked = chosen.height > 0 or bool(change.deletes) or change.present is not None
    held = _held(loc, resource_type, deployment) if asked else _held_nothing()
    stored = held.filter(pl.col("id").is_in(chosen["id"].implode()))
    wins = staged_wins(chosen, stored)
    since = change.walked_from
    if since is not None and since.seq != seq:
        absent = chosen["id"].filter(~chosen["id"].is_in(stored["id"].implode()))
        gone = _held_at(loc, resource_type, deployment, since, absent)
        wins = wins & ~chosen["id"].is_in(gone.implode())
    winners = chosen.filter(wins)
    result = CommitResult()
    result.upserted_ids = winners["id"].sort()
    result.stale_ids = chosen.filter(~wins)["id"].sort()
    deletes = _ids(change.deletes)
    if change.present is not None:
        missing = _missing(held, change.present, change.present_since)
        deletes = pl.concat([deletes, missing]).unique()
    result.deleted_ids = deletes.filter(
        deletes.is_in(held["id"].implode()) & ~deletes.is_in(result.upserted_ids.implode())
    ).sort()
    return result, winners.select("id", PART)


def _held_at(
    loc: Location, resource_type: str, deployment: str, pin: Pin, ids: pl.Series
) -> pl.Series:
    """Those of ``ids`` the deployment's raw table held at ``pin`` (its version then)."""
    version = pin.versions.get(raw_table(resource_type))
    if version is None or ids.len() == 0:
        return _no_ids()
    then = _held(loc, resource_type, deployment, version)["id"]
    return ids.filter(ids.is_in(then.implode()))


def _ids(ids: set[str] | pl.Series) -> pl.Series:
    """``ids`` as a String Series named ``id``."""
    if isinstance(ids, pl.Series):
        return ids.cast(pl.String).rename("id")
    return pl.Series("id", list(ids), dtype=pl.String)


def _missing(held: pl.DataFrame, present: set[str] | pl.Series, since: str | None) -> pl.Series:
    """Ids of ``held`` (the stored records) absent from ``present`` and stored before
    ``since`` (when known)."""

    frame = held.filter(~pl.col("id").is_in(_ids(present).implode()))
    if since is not None:
        at = instants(pl.lit(since))
        frame = frame.filter(
            instants(pl.col("last_updated")).is_null() | (instants(pl.col("last_updated")) < at)
        )
    return frame["id"].rename("id")


def _write_table(
    loc: Location,
    deployment: str,
    table: str,
    key: str,
    rows: Sequence[pl.LazyFrame],
    touched: pl.Series,
    schema: pl.Schema,
    known: Mapping[str, str],
) -> tuple[int, dict[str, str]]:
    """Replace the touched records' rows of one table (given in pieces, written one
    after another); its new version and file digests."""
    from deltalake import DeltaTable, write_deltalake

    uri = loc.table_uri("tables", table)
    new = [to_delta(piece, deployment) for piece in rows or [pl.LazyFrame(schema=schema)]]

    def write() -> int:
        dt = open_data_table(loc, table)
        if dt is None or not partition_files(dt, table, deployment):
            write_deltalake(
                uri,
                stream(new),
                mode="append",
                partition_by=["deployment"],
                storage_options=loc.storage_options,
                writer_properties=WRITER,
                configuration=stats_columns(key) if dt is None else None,
            )
        else:
            _merge(dt, deployment, key, new, touched, ["deployment", *schema])
        return int(DeltaTable(uri, storage_options=loc.storage_options).version())

    version = retrying(write, f"writing {deployment}/{table}")
    dt = DeltaTable(uri, version=version, storage_options=loc.storage_options)
    return version, _digests(loc, dt, table, deployment, known)


def _merge(
    dt: Any,
    deployment: str,
    key: str,
    new: Sequence[pl.LazyFrame],
    touched: pl.Series,
    columns: list[str],
) -> None:
    """One ``MERGE``: delete every row of the touched records, insert the winners' rows.

    The source holds a delete marker per touched id (matching all its stored rows)
    and the new rows (which match nothing, so they are inserted).
    """
    markers = pl.LazyFrame(
        {"deployment": deployment, key: touched},
        schema={"deployment": pl.String, key: pl.String},
    )
    source = [
        markers.with_columns(pl.lit("delete").alias(OP)),
        *(piece.with_columns(pl.lit("insert").alias(OP)) for piece in new),
    ]
    predicate = (
        f't."deployment" = \'{deployment}\' AND t."deployment" = s."deployment" '
        f'AND t."{key}" = s."{key}" AND s."{OP}" = \'delete\''
    )
    (
        dt.merge(
            stream(source),
            predicate=predicate,
            source_alias="s",
            target_alias="t",
            writer_properties=WRITER,
        )
        .when_matched_delete()
        .when_not_matched_insert(
            updates={f'"{c}"': f's."{c}"' for c in columns},
            predicate=f"s.\"{OP}\" = 'insert'",
        )
        .execute()
    )


def _digests(
    loc: Location, dt: Any, table: str, deployment: str, known: Mapping[str, str]
) -> dict[str, str]:
    """The sha256 of each of the partition's files: those of the last pin kept, new ones read.

    Delta never rewrites a data file in place (a change adds new files), so a file the
    last pin recorded keeps its digest; a file it did not record is hashed as written.
    """
    uri = loc.table_uri("tables", table)
    return {
        path: known.get(path) or loc.sha256(uri, path)
        for path in partition_files(dt, table, deployment)
    }
