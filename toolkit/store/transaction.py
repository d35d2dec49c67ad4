"""A store transaction (:class:`Transaction`): stage, validate, commit with a journal, verify.

A transaction changes one resource's tables in a store. Its rows are staged
under ``.staging/<Resource>/`` (one part file per staged batch and table),
deduplicated by id, validated, merged with the stored tables and committed:
each new file is moved in beside the one it replaces under its sha256 name,
then the manifest, which names the files, is replaced. The journal
(``state.json``, a :class:`~toolkit.store.resume.Checkpoint`) records the
commit before it starts, so a crash at any point is rolled forward by the
next writer (:meth:`Transaction.recover`); until the manifest is replaced it
names the previous files, which nothing has touched. :func:`check_table` and
:func:`verify_entry` compare committed files with their recorded sha256.

A sync (:mod:`toolkit.store.syncer`) fetches pages into a transaction;
:func:`toolkit.store.apply_changes` stages its records in a transaction of its
own (``.staging/.changes-<Resource>/``) and commits them directly.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from toolkit.errors import PmtkError
from toolkit.store.layout import (
    DATA_FILE_NAME,
    data_name,
    empty_tables,
    fsync_file,
    guard,
    mkdir,
    parent_key,
    read_json,
    replace,
    rmtree,
    schema_version,
    sha256,
    sink_parquet,
    update_manifest,
    write_json,
    write_parquet,
)
from toolkit.store.paths import path_problem, table_path
from toolkit.store.precedence import newer_expr, winners
from toolkit.store.rawtable import RAW_SCHEMA, raw_table
from toolkit.store.results import (
    COMPARE_LIMIT,
    PART_COLUMN,
    STAGING,
    STATE_FILE,
    VALIDATION_BATCH_ROWS,
    ErrorsMode,
    FileProblem,
    StoreError,
)
from toolkit.store.resume import Checkpoint, row_hashes


class StagedParts:
    """The part files of a transaction: one per staged batch and table, ``<table>/part-N.parquet``.

    A part's rows carry its number (``_part``): when a record was staged more
    than once, the newest part's version is the one kept.
    """

    def __init__(self, txn: Transaction) -> None:
        self.stage = txn.stage
        self.rt = txn.rt
        self.raw = txn.raw
        self.key = txn.key
        self.empty = txn.empty

    def _dir(self, table: str) -> Path:
        return self.stage / table

    def files(self, table: str) -> list[Path]:
        """The part files of ``table``, oldest first."""
        directory = self._dir(table)
        if not directory.is_dir():
            return []
        return sorted(directory.glob("part-*.parquet"))

    def readable(self, cp: Checkpoint) -> bool:
        """Whether every part the checkpoint counts can be read (after a power cut, maybe not)."""
        for table in self.empty:
            for path in self.files(table):
                match = re.fullmatch(r"part-(\d+)\.parquet", path.name)
                if match is None or int(match.group(1)) > cp.parts:
                    continue
                try:
                    pl.read_parquet_schema(path)
                except (OSError, pl.exceptions.PolarsError, pl.exceptions.PanicException):
                    return False
        return True

    def drop_unrecorded(self, cp: Checkpoint) -> None:
        """Remove part files written after the last checkpoint (a crash mid-page)."""
        for table in self.empty:
            directory = self._dir(table)
            guard(directory)
            if not directory.is_dir():
                continue
            for path in directory.iterdir():
                match = re.fullmatch(r"part-(\d+)\.parquet", path.name)
                if match is None or int(match.group(1)) > cp.parts:
                    path.unlink(missing_ok=True)

    def write(self, part: int, tables: Mapping[str, pl.DataFrame]) -> None:
        """Write the rows of each table as part ``part`` (not fsynced: see the merge checkpoint)."""
        for table, df in tables.items():
            if df.height == 0:
                continue
            directory = self._dir(table)
            mkdir(directory, f"staging {self.rt}")
            staged = df.with_columns(pl.lit(part, dtype=pl.Int32).alias(PART_COLUMN))
            write_parquet(staged, directory / f"part-{part:06d}.parquet")

    def _scan(self, table: str) -> pl.LazyFrame:
        files = self.files(table)
        if not files:
            return (
                self.empty[table].lazy().with_columns(pl.lit(0, dtype=pl.Int32).alias(PART_COLUMN))
            )
        return pl.scan_parquet(files)

    def repeated(self) -> pl.DataFrame:
        """``(id, _part)`` of the winning staged version of each record staged more than once.

        Usually empty (records changed during the walk, or a resume read its last
        page again): then every staged row is kept as it is, streaming, and
        memory does not grow with the number of records. The winner is the
        newest ``meta.lastUpdated``, the later part on a tie
        (:func:`toolkit.store.precedence.winners`).
        """
        again = (
            self._scan(self.rt)
            .group_by("id")
            .agg(pl.len().alias("_n"))
            .filter(pl.col("_n") > 1)
            .select("id")
            .collect(engine="streaming")
        )
        if again.height == 0:
            return pl.DataFrame(schema={"id": pl.String, PART_COLUMN: pl.Int32})
        if self.raw in self.empty:
            stamps = self._scan(self.raw).select("id", "last_updated", PART_COLUMN)
        else:
            stamp = pl.col("last_updated").dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
            stamps = self._scan(self.rt).select("id", stamp, PART_COLUMN)
        versions = stamps.join(again.lazy(), on="id", how="semi")
        won = winners(versions, "id", "last_updated", PART_COLUMN)
        return won.select("id", PART_COLUMN).collect()

    def dedupe(self, table: str, repeated: pl.DataFrame) -> pl.LazyFrame:
        """The staged rows of ``table`` that belong to the newest version of each record."""
        scanned = self._scan(table)
        if repeated.height == 0:
            return scanned.drop(PART_COLUMN)
        key = "id" if table in (self.rt, self.raw) else self.key
        once = scanned.filter(~pl.col(key).is_in(repeated["id"].implode()))
        newest = scanned.join(
            repeated.lazy().rename({"id": key}), on=[key, PART_COLUMN], how="semi"
        )
        if table in (self.rt, self.raw):
            newest = newest.unique(subset=["id"], keep="any")
        return pl.concat([once, newest]).drop(PART_COLUMN)


class Transaction:
    """One resource's change to a store: staged rows, validated, merged, committed.

    Parameters
    ----------
    root
        The store directory (its lock held by the caller).
    resource_type
        The resource whose tables change.
    stage
        The staging folder; default ``.staging/<Resource>`` (a sync's, with its journal).
    tables
        The empty frames of the tables the transaction writes; default every
        table of the resource's view and its raw records table.
    """

    def __init__(
        self,
        root: Path,
        resource_type: str,
        *,
        stage: Path | None = None,
        tables: Mapping[str, pl.DataFrame] | None = None,
    ) -> None:
        self.root = root
        self.rt = resource_type
        self.stage = stage if stage is not None else root / STAGING / resource_type
        self.journal = self.stage / STATE_FILE
        """The checkpoint file: the fetch's progress, then the commit under way."""
        self.version = schema_version(resource_type)
        self.raw = raw_table(resource_type)
        if tables is None:
            # the raw records are a table like the others: staged, merged by id, committed
            tables = {**empty_tables(resource_type), self.raw: pl.DataFrame(schema=RAW_SCHEMA)}
        self.empty = dict(tables)
        self.key = parent_key(resource_type)
        self.parts = StagedParts(self)
        """The staged part files."""

    # -- the journal -----------------------------------------------------------------

    def save(self, cp: Checkpoint) -> None:
        """Replace the journal with ``cp``."""
        # Only the checkpoints that end the fetch are fsynced: losing a per-page one
        # to a power cut costs a re-fetch, never data (see pending).
        write_json(
            self.journal,
            cp.to_json(),
            f"writing the {self.rt} sync checkpoint",
            durable=cp.phase != "fetch",
        )

    def pending(self, *, full: bool = False) -> Checkpoint | None:
        """The journalled checkpoint to resume from (a commit always), or ``None``."""
        if not self.journal.is_file():
            return None
        try:
            data = read_json(self.journal)
            if not isinstance(data, dict):
                return None  # JSON, but no checkpoint (damaged, or written by hand)
            cp = Checkpoint.from_json(data)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if cp.resource != self.rt or cp.schema_version != self.version:
            return None
        if cp.phase == "commit":
            return cp  # always rolled forward: the datasets may already be half swapped
        if full and cp.mode != "full":
            return None
        if not self.parts.readable(cp):
            return None
        return cp

    def recover(self) -> None:
        """Finish a commit that a crash interrupted, before anything else changes the resource."""
        cp = self.pending()
        if cp is not None and cp.phase == "commit":
            self.commit(cp)

    def begin(self, cp: Checkpoint) -> None:
        """Start over in an empty staging folder, journalling ``cp``."""
        rmtree(self.stage)
        mkdir(self.stage, f"staging {self.rt}")
        self.save(cp)

    def cleanup(self) -> None:
        """Remove the staging folder and everything in it (the journal too)."""
        rmtree(self.stage)

    # -- dedupe and validation -------------------------------------------------------

    def _new_file(self, table: str) -> Path:
        return self.stage / "new" / f"{table}.parquet"

    def write_new(self, cp: Checkpoint) -> None:
        """Sink the deduplicated staged rows of every table to one file each (streaming).

        Staged parts that hold fewer raw records than the checkpoint counts (a part
        file removed behind the sync's back) are refused and the staging folder
        removed, so that the next run starts over instead of committing a short table.
        """
        self._check_staged(cp)
        mkdir(self.stage / "new", f"merging the staged pages of {self.rt}")
        repeated = self.parts.repeated() if not cp.unique else pl.DataFrame({"id": []})
        for table, empty in self.empty.items():
            sink_parquet(
                self.parts.dedupe(table, repeated).select(empty.columns).cast(empty.schema),
                self._new_file(table),
                f"merging the staged pages of {table}",
                durable=False,  # an intermediate: the merge and its checkpoint come after
            )

    def _check_staged(self, cp: Checkpoint) -> None:
        if cp.staged is None or self.raw not in self.empty:
            return
        files = self.parts.files(self.raw)
        rows = pl.scan_parquet(files).select(pl.len()).collect().item() if files else 0
        if rows != cp.staged:
            self.cleanup()
            msg = (
                f"the staged pages of {self.rt} in {self.root} hold {rows} of the "
                f"{cp.staged} records fetched (a part file went missing); nothing of "
                f"{self.rt} was committed; run the same command again to fetch it anew"
            )
            raise StoreError(msg)

    def _new_rows(self, table: str) -> pl.LazyFrame:
        return pl.scan_parquet(self._new_file(table))

    def validate(self, errors: ErrorsMode) -> None:
        """Validate the new rows with the table's schema, a bounded batch at a time.

        A failure removes the staging folder: the staged pages hold the data
        that failed, and resuming would fail on them again even after the
        source is fixed, so the next run re-fetches.
        """
        from toolkit import schemas

        try:
            for table in self.empty:
                if table == self.raw:
                    continue  # the records as sent: the tables built from them are validated
                scan = self._new_rows(table)
                height = scan.select(pl.len()).collect().item()
                for offset in range(0, max(height, 1), VALIDATION_BATCH_ROWS):
                    frame = scan.slice(offset, VALIDATION_BATCH_ROWS).collect()
                    schemas.validate(
                        frame,
                        self.rt,
                        table=None if table == self.rt else table,
                        errors=errors,
                    )
        except PmtkError:
            self.cleanup()
            raise

    # -- merge -----------------------------------------------------------------------

    def unchanged(self, cp: Checkpoint, stored: Mapping[str, Path]) -> bool:
        """Whether every staged row is already in ``stored`` as is (an incremental no-op)."""
        if cp.mode != "incremental":
            return False
        if cp.records == 0:
            return True
        if cp.records > COMPARE_LIMIT:
            return False
        ids = self._new_rows(self.rt).select("id")
        for table in self.empty:
            key = "id" if table in (self.rt, self.raw) else self.key
            new = self._new_rows(table).collect()
            old = (
                pl.scan_parquet(stored[table])
                .join(ids.rename({"id": key}), on=key, how="semi")
                .collect()
            )
            if new.height != old.height or new.schema != old.schema:
                return False
            if row_hashes(new) != row_hashes(old):
                return False
        return True

    def _replacing(self, stored: Mapping[str, Path]) -> pl.LazyFrame:
        """The ids whose staged version replaces the stored one (``id``).

        Every staged id, except those whose stored version is strictly newer
        (:func:`toolkit.store.precedence.newer`: a webhook applied it after the walk
        read an older one); those keep their stored rows in every table.
        """
        ids = self._new_rows(self.rt).select("id")
        if self.raw not in self.empty:
            return ids
        staged = self._new_rows(self.raw).select("id", "last_updated")
        held = pl.scan_parquet(stored[self.raw]).select("id", pl.col("last_updated").alias("_held"))
        kept = (
            staged.join(held, on="id", how="inner")
            .filter(newer_expr(pl.col("_held"), pl.col("last_updated")))
            .select("id")
        )
        return ids.join(kept, on="id", how="anti")

    def _merged(self, table: str) -> Path:
        return self.stage / "merged" / f"{table}.parquet"

    def merge(self, cp: Checkpoint, stored: Mapping[str, Path]) -> dict[str, dict[str, Any]]:
        """Write each table's merged dataset; return its manifest entry (path, rows, sha256).

        An incremental run merges the new rows by id into the ``stored`` files.
        """
        mkdir(self.stage / "merged", f"merging {self.rt}")
        ids = self._replacing(stored) if cp.mode == "incremental" else pl.LazyFrame()
        tables: dict[str, dict[str, Any]] = {}
        for table, empty in self.empty.items():
            target = self._merged(table)
            if cp.mode == "incremental":
                key = "id" if table in (self.rt, self.raw) else self.key
                by_key = ids.rename({"id": key})
                old = pl.scan_parquet(stored[table]).join(by_key, on=key, how="anti")
                new = self._new_rows(table).join(by_key, on=key, how="semi")
                frame = pl.concat([old.select(empty.columns), new.select(empty.columns)])
                sink_parquet(frame.cast(empty.schema), target, f"writing the merged {table} table")
            else:
                # a full sync's new rows are the whole table, already in its columns and
                # dtypes: the file is moved, not written again (and never read whole)
                new_file = self._new_file(table)
                fsync_file(new_file)
                replace(new_file, target, f"writing the merged {table} table")
            tables[table] = file_info(table, target)
        return tables

    # -- commit ----------------------------------------------------------------------

    def commit(self, cp: Checkpoint) -> None:
        """Move the merged files in beside the old ones, then switch the manifest.

        Safe to repeat after a crash at any point. Until the manifest is
        replaced it names the previous files, which nothing has touched, so a
        failure (a full disk, a read-only folder) leaves the store as it was.
        """
        if cp.entry is None:
            rmtree(self.stage)
            return
        tables: dict[str, Any] = cp.entry["tables"]
        for table, info in tables.items():
            final = table_path(self.root, self.rt, table, info)  # a forged journal: refused
            merged = self._merged(table)
            if merged.is_file():
                mkdir(final.parent, f"committing {table}")
                replace(merged, final, f"committing {table}")
            if not final.is_file():
                # Neither staged nor committed (staging removed by hand): start over.
                rmtree(self.stage)
                return
        update_manifest(self.root, self.rt, cp.entry)
        self.remove_superseded(tables)
        rmtree(self.stage)

    def publish(self, table: str, staged: Path) -> dict[str, Any]:
        """Move a staged file of ``table`` in under its sha256 name; return its manifest entry.

        The manifest still names the previous file: the caller switches it.
        """
        info = file_info(table, staged)
        final = self.root / str(info["path"])
        mkdir(final.parent, f"committing {table}")
        replace(staged, final, f"committing {table}")
        return info

    def remove_superseded(self, tables: Mapping[str, Any]) -> None:
        """Delete the data files the manifest no longer names (previous versions)."""
        for table, info in tables.items():
            if not isinstance(info, dict) or path_problem(self.rt, table, info) is not None:
                continue  # never delete outside the resource's own table folders
            keep = (self.root / str(info["path"])).name
            directory = self.root / table
            guard(directory)
            with contextlib.suppress(OSError):  # a leftover costs space, never correctness
                for path in directory.iterdir():
                    if path.name != keep and DATA_FILE_NAME.fullmatch(path.name):
                        path.unlink()


def file_info(table: str, path: Path) -> dict[str, Any]:
    """What the manifest records of a data file of ``table``: its name, rows, bytes and sha256."""
    digest = sha256(path)
    return {
        "path": f"{table}/{data_name(digest)}",
        "rows": pl.scan_parquet(path).select(pl.len()).collect().item(),
        "bytes": path.stat().st_size,
        "sha256": digest,
    }


# -- verify --------------------------------------------------------------------------


def entry_tables(resource_type: str, entry: Mapping[str, Any]) -> Mapping[str, Any]:
    """The tables a manifest entry names; a ``tables`` that is not an object names none.

    Such an entry (damaged, or forged) leaves the resource's data unreachable: it
    stands for its main table with no file, so that it is reported ``missing``
    rather than passed as intact with nothing checked.
    """
    tables = entry.get("tables")
    if tables is None:
        return {}
    return tables if isinstance(tables, dict) else {resource_type: {}}


def check_table(
    root: Path, resource_type: str, table: str, info: Mapping[str, Any]
) -> FileProblem | None:
    """Compare one committed file with its recorded sha256 (``None`` when intact).

    A path that breaks :func:`toolkit.store.paths.path_problem` (outside its
    table's folder, absolute, another table's) is a problem too: nothing there is read.
    """
    rel = str(info.get("path", f"{table}/?"))
    if isinstance(info.get("path"), str):
        outside = path_problem(resource_type, table, info)
        if outside is not None:
            return FileProblem(resource_type, table, rel, outside)
    path = root / rel
    expected = info.get("sha256")
    if not path.is_file():
        return FileProblem(resource_type, table, rel, "missing", expected if expected else None)
    if not isinstance(expected, str) or not expected:
        return FileProblem(resource_type, table, rel, "no checksum")
    try:
        actual = sha256(path)
    except OSError as exc:
        return FileProblem(resource_type, table, rel, f"unreadable ({exc.strerror or exc})")
    if actual != expected:
        return FileProblem(resource_type, table, rel, "checksum mismatch", expected, actual)
    return None


def verify_entry(root: Path, resource_type: str, entry: Mapping[str, Any]) -> list[FileProblem]:
    """Every problem of the committed files a manifest entry names (empty when intact)."""
    tables = entry_tables(resource_type, entry)
    found = (
        check_table(root, resource_type, table, info if isinstance(info, dict) else {})
        for table, info in tables.items()
    )
    return [p for p in found if p is not None]
