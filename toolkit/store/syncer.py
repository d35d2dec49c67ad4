"""One resource's sync: fetch, stage, validate, merge and commit (:class:`_ResourceSyncer`)."""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from toolkit.errors import PmtkError
from toolkit.paging import FetchSummary, Page
from toolkit.store.layout import (
    _DATA_FILE_NAME,
    _data_name,
    _empty_tables,
    _fsync_file,
    _guard,
    _later,
    _load_manifest_for_write,
    _manifest_path,
    _mkdir,
    _now_iso,
    _parent_key,
    _read_json,
    _replace,
    _rmtree,
    _sha256,
    _sink_parquet,
    _update_manifest,
    _write_json,
    _write_parquet,
    schema_version,
)
from toolkit.store.raw import RAW_SCHEMA, raw_frame, raw_table
from toolkit.store.results import (
    COMPARE_LIMIT,
    PART_COLUMN,
    PREFETCH_PAGES,
    STAGING,
    STATE_FILE,
    VALIDATION_BATCH_ROWS,
    ErrorsMode,
    FileProblem,
    Mode,
    PageProgress,
    PageSource,
    ResourceSync,
    StoreWriteError,
    _os_errno,
)
from toolkit.store.resume import (
    _Checkpoint,
    _next_since,
    _Prefetch,
    _row_hashes,
    _since_after,
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
        self.raw = raw_table(resource_type)
        # the raw records are a table like the others: staged, merged by id, committed
        self.empty = {**_empty_tables(resource_type), self.raw: pl.DataFrame(schema=RAW_SCHEMA)}
        self.key = _parent_key(resource_type)
        self.stored: dict[str, Path] = {}
        """The committed file of each table, when an incremental sync builds on it."""
        self.cp: _Checkpoint | None = None
        """The checkpoint of the run under way (for reporting a failure)."""
        self.entry_before_failure: dict[str, Any] | None = None
        """The manifest entry the resource had when its run failed (restored for a type
        the deployment does not serve)."""
        self.sent_before: int | None = None
        self.walk_summary: FetchSummary | None = None
        """The summary of this run's walk, once it has begun."""
        """The client's request count when the run began (for reporting a failure)."""

    @property
    def mode(self) -> Mode:
        """The mode of the run under way (``"full"`` before it is decided)."""
        return self.cp.mode if self.cp is not None else "full"

    @property
    def staged_pages(self) -> int:
        """Pages staged and kept for the next run (every page, once the fetch ended)."""
        cp = self.cp
        if cp is None or not self.state_path.is_file():
            return 0
        return cp.pages_done

    # -- paths ---------------------------------------------------------------------

    def _final(self, table: str) -> Path:
        return self.stored[table]

    def _parts_dir(self, table: str) -> Path:
        return self.stage / table

    def _merged(self, table: str) -> Path:
        return self.stage / "merged" / f"{table}.parquet"

    def _save(self, cp: _Checkpoint) -> None:
        # Only the checkpoints that end the fetch are fsynced: losing a per-page one
        # to a power cut costs a re-fetch, never data (see _resume_point).
        _write_json(
            self.state_path,
            cp.to_json(),
            f"writing the {self.rt} sync checkpoint",
            durable=cp.phase != "fetch",
        )

    def _parts_readable(self, cp: _Checkpoint) -> bool:
        """Whether every part the checkpoint counts can be read (after a power cut, maybe not)."""
        for table in self.empty:
            for path in self._part_files(table):
                match = re.fullmatch(r"part-(\d+)\.parquet", path.name)
                if match is None or int(match.group(1)) > cp.parts:
                    continue
                try:
                    pl.read_parquet_schema(path)
                except (OSError, pl.exceptions.PolarsError, pl.exceptions.PanicException):
                    return False
        return True

    # -- planning ------------------------------------------------------------------

    def _previous(self) -> dict[str, Any] | None:
        if not _manifest_path(self.root).exists():
            return None
        entry = _load_manifest_for_write(self.root)["resources"].get(self.rt)
        return entry if isinstance(entry, dict) else None

    def _stored_ok(self, entry: Mapping[str, Any] | None, problems: list[FileProblem]) -> bool:
        """Whether an incremental sync can build on the stored data: same view, intact files.

        Verifying the checksums here matters: an incremental merge copies the
        stored rows into the new file, so a damaged file would otherwise come
        back under a fresh, valid checksum.
        """
        if (
            entry is None
            or entry.get("schema_version") != self.version
            or entry.get("high_water_mark") is None
        ):
            return False
        tables = entry.get("tables")
        if not isinstance(tables, dict) or set(tables) != set(self.empty):
            return False
        problems.extend(_verify_entry(self.root, self.rt, entry))
        if problems:
            return False
        self.stored = {t: self.root / str(tables[t]["path"]) for t in self.empty}
        return True

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
        if not self._parts_readable(cp):
            return None
        return cp

    # -- the run -------------------------------------------------------------------

    def run(self) -> ResourceSync:
        try:
            return self._run()
        except PmtkError:
            raise
        except (OSError, pl.exceptions.PolarsError) as exc:
            # A write step without its own _writing() context: still one clear line.
            err = _os_errno(exc)
            if err is None:
                raise
            where = Path(getattr(exc, "filename", None) or self.root)
            raise StoreWriteError(where, err, f"syncing {self.rt}", str(exc)) from exc

    def _run(self) -> ResourceSync:
        started = time.monotonic()
        previous = self._previous()
        cp = self._resume_point()
        if cp is not None and cp.phase == "commit":
            self._commit(cp)
            previous = self._previous()
            cp = None
        problems: list[FileProblem] = []
        stored_ok = self._stored_ok(previous, problems)
        if cp is not None and cp.mode == "incremental" and not stored_ok:
            cp = None  # it would merge into data that is gone or damaged
        resumed = cp is not None
        if cp is None:
            _rmtree(self.stage)
            incremental = not self.full and stored_ok
            cp = _Checkpoint(
                resource=self.rt,
                schema_version=self.version,
                mode="incremental" if incremental else "full",
                since=_next_since(previous) if incremental and previous else None,
                started_at=_now_iso(),
            )
            _mkdir(self.stage, f"staging {self.rt}")
            self._save(cp)
        self.cp = cp
        notify = getattr(self.on_page, "resumed", None)
        if resumed and callable(notify):  # the display says why the bar starts part-way
            notify(self.rt, cp.pages_done, cp.records)
        result = ResourceSync(resource=self.rt, mode=cp.mode, resumed=resumed)
        result.repaired = [p.path for p in problems]
        sent_before = self.sent_before = self.client.requests_sent
        try:
            if cp.phase == "fetch":
                result.pages = self._fetch(cp)
            result.requests = self.client.requests_sent - sent_before
            result.fetched = cp.records
            self._finish(cp, previous, result)
        except BaseException as exc:
            self._record_failure(previous, exc)
            raise
        result.elapsed = time.monotonic() - started
        return result

    def _record_failure(self, previous: dict[str, Any] | None, exc: BaseException) -> None:
        self.entry_before_failure = previous
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
        staged_before = cp.parts
        requested = 0
        with _Prefetch(self._pages(cp, first_page), PREFETCH_PAGES) as prefetch:
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
        summary = self.walk_summary
        # one walk, from the first page, into an empty stage, that read no id twice
        cp.unique = staged_before == 0 and summary is not None and not summary.recovered
        cp.phase = "merge"
        cp.next_url = None
        # The staged parts were written without fsync; the "merge" checkpoint is
        # durable and promises them all, so flush them first (one call, not one per page).
        sync_all = getattr(os, "sync", None)
        if sync_all is not None:
            sync_all()
        self._save(cp)
        return requested

    def _pages(self, cp: _Checkpoint, first_page: int) -> Iterator[Page]:
        """The pages of the walk from ``first_page``; notes the server's time at its start.

        When records change during a fresh walk, the client appends recovery
        pages (newer versions come later, so the merge's "newest part wins"
        keeps them). A resumed walk starts at ``first_page`` and tells the
        client how many records the pages before it hold, so that they count
        toward ``Bundle.total``: the last staged page is read again, so those
        are the full pages before it.
        """
        skipped = (first_page - 1) * cp.page_size
        walk = self.client.walk(
            self.rt, params=self._search(cp, first_page), skipped=skipped, progress=False
        )
        self.walk_summary = walk.summary
        for page in walk:
            if cp.server_time is None and first_page == 1:
                cp.server_time = walk.summary.started_at
            yield page

    def _drop_unrecorded_parts(self, cp: _Checkpoint) -> None:
        """Remove part files written after the last checkpoint (a crash mid-page)."""
        for table in self.empty:
            directory = self._parts_dir(table)
            _guard(directory)
            if not directory.is_dir():
                continue
            for path in directory.iterdir():
                match = re.fullmatch(r"part-(\d+)\.parquet", path.name)
                if match is None or int(match.group(1)) > cp.parts:
                    path.unlink(missing_ok=True)

    def _stage_pages(self, cp: _Checkpoint, pages: list[Page], page_number: int) -> None:
        """Flatten consecutive pages (from ``page_number``) into one part; checkpoint.

        The walk parsed each page once; its records give the count and the
        newest ``lastUpdated``, and the raw bytes go to the views' reader.
        """
        from toolkit import views

        last_updated: str | None = None
        n_entries = 0
        for page in pages:
            n_entries += len(page.records)
            for record in page.records:
                stamp = (record.get("meta") or {}).get("lastUpdated")
                if isinstance(stamp, str):
                    last_updated = _later(last_updated, stamp)
        tables = views.flatten_tables(self.rt, [page.raw for page in pages])
        tables[self.raw] = raw_frame(self.rt, [r for page in pages for r in page.records])
        part = cp.parts + 1
        for table, df in tables.items():
            if df.height == 0:
                continue
            directory = self._parts_dir(table)
            _mkdir(directory, f"staging {self.rt}")
            staged = df.with_columns(pl.lit(part, dtype=pl.Int32).alias(PART_COLUMN))
            _write_parquet(staged, directory / f"part-{part:06d}.parquet")
        last = pages[-1]
        cp.parts = part
        cp.pages_done = page_number + len(pages) - 1
        cp.records += n_entries
        if last.total is not None:
            cp.total = last.total
        cp.next_url = last.next
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

    def _repeated(self) -> pl.DataFrame:
        """``(id, _part)`` of the newest staged version of each record staged more than once.

        Usually empty (records changed during the walk, or a resume read its last
        page again): then every staged row is kept as it is, streaming, and
        memory does not grow with the number of records.
        """
        return (
            self._scan_parts(self.rt)
            .group_by("id")
            .agg(pl.len().alias("_n"), pl.col(PART_COLUMN).max())
            .filter(pl.col("_n") > 1)
            .select("id", PART_COLUMN)
            .collect(engine="streaming")
        )

    def _dedupe(self, table: str, repeated: pl.DataFrame) -> pl.LazyFrame:
        """The staged rows of ``table`` that belong to the newest version of each record."""
        scanned = self._scan_parts(table)
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

    def _new_file(self, table: str) -> Path:
        return self.stage / "new" / f"{table}.parquet"

    def _write_new(self, cp: _Checkpoint) -> None:
        """Sink the deduplicated staged rows of every table to one file each (streaming)."""
        _mkdir(self.stage / "new", f"merging the staged pages of {self.rt}")
        repeated = self._repeated() if not cp.unique else pl.DataFrame({"id": []})
        for table, empty in self.empty.items():
            _sink_parquet(
                self._dedupe(table, repeated).select(empty.columns).cast(empty.schema),
                self._new_file(table),
                f"merging the staged pages of {table}",
                durable=False,  # an intermediate: the merge and its checkpoint come after
            )

    def _new_rows(self, table: str) -> pl.LazyFrame:
        return pl.scan_parquet(self._new_file(table))

    def _validate_new(self) -> None:
        """Validate the new rows with the table's schema, a bounded batch at a time."""
        from toolkit import schemas

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
            key = "id" if table in (self.rt, self.raw) else self.key
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

    def _merge(self, cp: _Checkpoint) -> dict[str, dict[str, Any]]:
        """Write each table's merged dataset; return its manifest entry (path, rows, sha256)."""
        _mkdir(self.stage / "merged", f"merging {self.rt}")
        ids = self._new_rows(self.rt).select("id")
        tables: dict[str, dict[str, Any]] = {}
        for table, empty in self.empty.items():
            target = self._merged(table)
            if cp.mode == "incremental":
                key = "id" if table in (self.rt, self.raw) else self.key
                old = pl.scan_parquet(self._final(table)).join(
                    ids.rename({"id": key}), on=key, how="anti"
                )
                new = self._new_rows(table)
                frame = pl.concat([old.select(empty.columns), new.select(empty.columns)])
                _sink_parquet(frame.cast(empty.schema), target, f"writing the merged {table} table")
            else:
                # a full sync's new rows are the whole table, already in its columns and
                # dtypes: the file is moved, not written again (and never read whole)
                new_file = self._new_file(table)
                _fsync_file(new_file)
                _replace(new_file, target, f"writing the merged {table} table")
            digest = _sha256(target)
            tables[table] = {
                "path": f"{table}/{_data_name(digest)}",
                "rows": pl.scan_parquet(target).select(pl.len()).collect().item(),
                "bytes": target.stat().st_size,
                "sha256": digest,
            }
        return tables

    def _entry(
        self,
        cp: _Checkpoint,
        previous: Mapping[str, Any] | None,
        tables: Mapping[str, Mapping[str, Any]],
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
            "tables": {table: dict(info) for table, info in tables.items()},
        }

    def _finish(
        self, cp: _Checkpoint, previous: dict[str, Any] | None, result: ResourceSync
    ) -> None:
        self._write_new(cp)
        if self._unchanged(cp) and previous is not None:
            result.status = "unchanged"
            entry = self._entry(cp, previous, previous["tables"])
        else:
            try:
                self._validate_new()
            except PmtkError:
                # The staged pages hold the data that failed: resuming would fail on
                # them again even after the source is fixed, so the next run re-fetches.
                _rmtree(self.stage)
                raise
            entry = self._entry(cp, previous, self._merge(cp))
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
        """Move the merged files in beside the old ones, then switch the manifest.

        Safe to repeat after a crash at any point. Until the manifest is
        replaced it names the previous files, which nothing has touched, so a
        failure (a full disk, a read-only folder) leaves the store as it was.
        """
        if cp.entry is None:
            _rmtree(self.stage)
            return
        tables: dict[str, Any] = cp.entry["tables"]
        for table, info in tables.items():
            final = self.root / str(info["path"])
            merged = self._merged(table)
            if merged.is_file():
                _mkdir(final.parent, f"committing {table}")
                _replace(merged, final, f"committing {table}")
            if not final.is_file():
                # Neither staged nor committed (staging removed by hand): start over.
                _rmtree(self.stage)
                return
        _update_manifest(self.root, self.rt, cp.entry)
        self._remove_superseded(tables)
        _rmtree(self.stage)

    def _remove_superseded(self, tables: Mapping[str, Any]) -> None:
        """Delete the data files the manifest no longer names (previous versions)."""
        for table, info in tables.items():
            keep = (self.root / str(info["path"])).name
            directory = self.root / table
            _guard(directory)
            with contextlib.suppress(OSError):  # a leftover costs space, never correctness
                for path in directory.iterdir():
                    if path.name != keep and _DATA_FILE_NAME.fullmatch(path.name):
                        path.unlink()


def _check_table(
    root: Path, resource_type: str, table: str, info: Mapping[str, Any]
) -> FileProblem | None:
    """Compare one committed file with its recorded sha256 (``None`` when intact)."""
    rel = str(info.get("path", f"{table}/?"))
    path = root / rel
    expected = info.get("sha256")
    if not path.is_file():
        return FileProblem(resource_type, table, rel, "missing", expected if expected else None)
    if not isinstance(expected, str) or not expected:
        return FileProblem(resource_type, table, rel, "no checksum")
    try:
        actual = _sha256(path)
    except OSError as exc:
        return FileProblem(resource_type, table, rel, f"unreadable ({exc.strerror or exc})")
    if actual != expected:
        return FileProblem(resource_type, table, rel, "checksum mismatch", expected, actual)
    return None


def _verify_entry(root: Path, resource_type: str, entry: Mapping[str, Any]) -> list[FileProblem]:
    tables = entry.get("tables")
    if not isinstance(tables, dict):
        return []
    found = (
        _check_table(root, resource_type, table, info if isinstance(info, dict) else {})
        for table, info in tables.items()
    )
    return [p for p in found if p is not None]
