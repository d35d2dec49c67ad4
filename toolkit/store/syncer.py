"""One resource's sync (:class:`ResourceSyncer`): fetch pages into a :class:`Transaction`.

The syncer plans the run (resume, incremental or full), walks the list and
stages each batch of pages; the transaction
(:mod:`toolkit.store.transaction`) dedupes, validates, merges and commits them.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from toolkit import catalogue, views
from toolkit.errors import PmtkError
from toolkit.page import Page
from toolkit.paging import FetchSummary
from toolkit.store.layout import (
    later,
    load_manifest_for_write,
    manifest_path,
    now_iso,
    update_manifest,
)
from toolkit.store.precedence import one_version_each
from toolkit.store.rawtable import raw_frame
from toolkit.store.results import (
    PREFETCH_PAGES,
    ErrorsMode,
    FileProblem,
    Mode,
    PageProgress,
    PageSource,
    ResourceSync,
    StoreWriteError,
    os_errno,
)
from toolkit.store.resume import (
    Checkpoint,
    Prefetch,
    next_since,
    since_after,
)
from toolkit.store.transaction import Transaction, verify_entry


class ResourceSyncer:
    """Fetch one resource's pages into a :class:`Transaction`, then have it commit them."""

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
        self.txn = Transaction(root, resource_type)
        """The staging, journal and commit of this resource's run."""
        self.stored: dict[str, Path] = {}
        """The committed file of each table, when an incremental sync builds on it."""
        self.cp: Checkpoint | None = None
        """The checkpoint of the run under way (for reporting a failure)."""
        self.entry_before_failure: dict[str, Any] | None = None
        """The manifest entry the resource had when its run failed (restored for a type
        the deployment does not serve)."""
        self.sent_before: int | None = None
        """The client's request count when the run began (for reporting a failure)."""
        self.walk_summary: FetchSummary | None = None
        """The summary of this run's walk, once it has begun."""

    @property
    def mode(self) -> Mode:
        """The mode of the run under way (``"full"`` before it is decided)."""
        return self.cp.mode if self.cp is not None else "full"

    @property
    def staged_pages(self) -> int:
        """Pages staged and kept for the next run (every page, once the fetch ended)."""
        cp = self.cp
        if cp is None or not self.txn.journal.is_file():
            return 0
        return cp.pages_done

    # -- planning ------------------------------------------------------------------

    def _previous(self) -> dict[str, Any] | None:
        if not manifest_path(self.root).exists():
            return None
        entry = load_manifest_for_write(self.root)["resources"].get(self.rt)
        return entry if isinstance(entry, dict) else None

    def _stored_ok(self, entry: Mapping[str, Any] | None, problems: list[FileProblem]) -> bool:
        """Whether an incremental sync can build on the stored data: same view, intact files.

        Verifying the checksums here matters: an incremental merge copies the
        stored rows into the new file, so a damaged file would otherwise come
        back under a fresh, valid checksum.
        """
        if (
            entry is None
            or entry.get("schema_version") != self.txn.version
            or entry.get("high_water_mark") is None
        ):
            return False
        tables = entry.get("tables")
        if not isinstance(tables, dict) or set(tables) != set(self.txn.empty):
            return False
        problems.extend(verify_entry(self.root, self.rt, entry))
        if problems:
            return False
        self.stored = {t: self.root / str(tables[t]["path"]) for t in self.txn.empty}
        return True

    # -- the run -------------------------------------------------------------------

    def run(self) -> ResourceSync:
        try:
            return self._run()
        except PmtkError:
            raise
        except (OSError, pl.exceptions.PolarsError) as exc:
            # A write step without its own writing() context: still one clear line.
            err = os_errno(exc)
            if err is None:
                raise
            where = Path(getattr(exc, "filename", None) or self.root)
            raise StoreWriteError(where, err, f"syncing {self.rt}", str(exc)) from exc

    def _run(self) -> ResourceSync:
        started = time.monotonic()
        previous = self._previous()
        cp = self.txn.pending(full=self.full)
        if cp is not None and cp.phase == "commit":
            self.txn.commit(cp)
            previous = self._previous()
            cp = None
        problems: list[FileProblem] = []
        stored_ok = self._stored_ok(previous, problems)
        if cp is not None and cp.mode == "incremental" and not stored_ok:
            cp = None  # it would merge into data that is gone or damaged
        resumed = cp is not None
        if cp is None:
            incremental = not self.full and stored_ok
            cp = Checkpoint(
                resource=self.rt,
                schema_version=self.txn.version,
                mode="incremental" if incremental else "full",
                since=next_since(previous) if incremental and previous else None,
                started_at=now_iso(),
            )
            self.txn.begin(cp)
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
            failed_at=now_iso(),
            resumable=self.txn.journal.is_file(),
        )
        with contextlib.suppress(OSError):
            update_manifest(self.root, self.rt, entry)

    def _search(self, cp: Checkpoint, first_page: int) -> dict[str, Any]:
        params: dict[str, Any] = {"_count": cp.page_size}
        if first_page > 1:
            params["page"] = first_page
        if cp.since is not None:
            params[catalogue.LAST_UPDATED] = cp.since
        return params

    def _fetch(self, cp: Checkpoint) -> int:
        """Walk the search from the checkpoint, staging each page; return pages requested."""
        # On resume, the last staged page is read again: if records moved between
        # pages while the run was interrupted, the overlap (merged by id) keeps
        # them from falling into the gap.
        first_page = max(cp.pages_done, 1)
        if cp.pages_done >= 1:
            # The re-read page's records were counted when it was staged: count only the
            # full pages before it, or they count twice (1,741 fetched for 1,641 rows).
            cp.records = min(cp.records, (first_page - 1) * cp.page_size)
        self.txn.parts.drop_unrecorded(cp)
        staged_before = cp.parts
        requested = 0
        with Prefetch(self._pages(cp, first_page), PREFETCH_PAGES) as prefetch:
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
        self.txn.save(cp)
        return requested

    def _pages(self, cp: Checkpoint, first_page: int) -> Iterator[Page]:
        """The pages of the walk from ``first_page``; notes the server's time at its start.

        When records change during a fresh walk, the client appends recovery
        pages; the staged versions of a record read twice are decided by
        :mod:`toolkit.store.precedence` (the newest ``meta.lastUpdated``). A resumed
        walk starts at ``first_page`` and tells the client how many records the
        pages before it hold, so that they count toward ``Bundle.total``: the last
        staged page is read again, so those are the full pages before it.
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

    def _stage_pages(self, cp: Checkpoint, pages: list[Page], page_number: int) -> None:
        """Flatten consecutive pages (from ``page_number``) into one part; checkpoint.

        The walk parsed each page once; its records give the count and the
        newest ``lastUpdated``, and the raw bytes go to the views' reader.
        """

        last_updated: str | None = None
        records = [r for page in pages for r in page.records]
        for record in records:
            stamp = (record.get("meta") or {}).get("lastUpdated")
            if isinstance(stamp, str):
                last_updated = later(last_updated, stamp)
        # One version of a record per part: the parts' de-duplication picks among parts
        raws, kept = one_version_each([page.raw for page in pages], records)
        tables = views.flatten_tables(self.rt, raws)
        tables[self.txn.raw] = raw_frame(self.rt, [dict(r) for r in kept])
        part = cp.parts + 1
        self.txn.parts.write(part, tables)
        last = pages[-1]
        cp.parts = part
        cp.pages_done = page_number + len(pages) - 1
        cp.records += len(records)
        if cp.staged is not None or part == 1:  # unknown across a resume of an older pmtk's
            cp.staged = (cp.staged or 0) + tables[self.txn.raw].height
        if last.total is not None:
            cp.total = last.total
        cp.next_url = last.next
        cp.max_last_updated = later(cp.max_last_updated, last_updated)
        self.txn.save(cp)

    def _entry(
        self,
        cp: Checkpoint,
        previous: Mapping[str, Any] | None,
        tables: Mapping[str, Mapping[str, Any]],
    ) -> dict[str, Any]:
        hwm = cp.max_last_updated
        if cp.mode == "incremental" and previous is not None:
            hwm = later(previous.get("high_water_mark"), hwm)
        return {
            "status": "ok",
            "schema_version": self.txn.version,
            "high_water_mark": hwm,
            "server_time": cp.server_time,
            "next_since": since_after(hwm, cp.server_time),
            "fetched_at": now_iso(),
            "mode": cp.mode,
            "tables": {table: dict(info) for table, info in tables.items()},
        }

    def _finish(
        self, cp: Checkpoint, previous: dict[str, Any] | None, result: ResourceSync
    ) -> None:
        self.txn.write_new(cp)
        if self.txn.unchanged(cp, self.stored) and previous is not None:
            result.status = "unchanged"
            entry = self._entry(cp, previous, previous["tables"])
        else:
            self.txn.validate(self.errors)  # a failure drops the staged pages
            entry = self._entry(cp, previous, self.txn.merge(cp, self.stored))
        entry["last_sync"] = {
            "started_at": cp.started_at,
            "records_fetched": cp.records,
            "pages": result.pages,
            "status": result.status,
        }
        cp.phase = "commit"
        cp.entry = entry
        self.txn.save(cp)
        self.txn.commit(cp)
        result.rows = {t: v["rows"] for t, v in entry["tables"].items()}
        result.high_water_mark = entry["high_water_mark"]
