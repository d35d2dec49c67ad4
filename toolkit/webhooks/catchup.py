"""The listener's catch-up: an incremental walk that commits beside the worker.

After downtime the listener must fetch what changed while nobody listened. A
store's :func:`~toolkit.store.sync` does that holding the store's lock for its
whole walk, so every change that arrives meanwhile waits for the walk to end
(seconds for a restart after a busy minute, minutes after a day). The catch-up
here walks the same ``_lastUpdated`` search without the lock, in a thread of its
own, and writes what it read in slices through the same
:func:`~toolkit.store.apply_changes` the worker uses: to the store it is a burst of
announcements whose records came with them. Three rules keep it exactly as right
as a sync:

- **one commit at a time**: a slice and a worker batch never commit together
  (:class:`Guard` ``.lock``), and each slice writes only the records newer than
  what the store holds when it commits (:func:`toolkit.store.precedence.newer`),
  so an older version the walk read never replaces the newer one a webhook wrote;
- **no deleted record written back**: a record whose delete the worker
  confirmed after the walk began is left out of every slice
  (:meth:`Guard.deleted_meanwhile`; the worker notes a delete *before* it commits
  it, so a slice that ran first is deleted after it, and one that runs later sees
  the note);
- **the bound moves only forward, and only after everything was written**
  (:func:`~toolkit.store.merge.record_catch_up`); a failed walk moves nothing and
  is tried again, and deletes found through ``$export-ids`` spare every record
  stored at or after the walk's start (one created after the list was made).

What can fail, and the test that shows it handled, is in ``docs/webhooks.md``
("The catch-up beside the worker").
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolkit import catalogue

SLICE_RECORDS = 1_000
"""Records read by the catch-up before it commits them (one slice): the store is held
for one slice's commit at a time, and a long window never sits in memory whole."""

PAGE_SIZE = 100
"""Records per list page the catch-up asks for (the API's largest ``_count``)."""


class Stopped(Exception):
    """The listener stopped while a catch-up walked: what was committed stays, the
    bound is not moved."""


class Guard:
    """What lets a catch-up commit beside the worker.

    ``lock`` is held around every commit (the worker's batches and each catch-up
    slice); :meth:`noting_deletes` opens a note of the deletes the worker confirms
    while a walk runs, :meth:`note_deletes` adds to every open note (the worker calls
    it before it commits a delete).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._notes_lock = threading.Lock()
        self._notes: list[set[tuple[str, str]]] = []

    @contextlib.contextmanager
    def noting_deletes(self) -> Iterator[set[tuple[str, str]]]:
        note: set[tuple[str, str]] = set()
        with self._notes_lock:
            self._notes.append(note)
        try:
            yield note
        finally:
            with self._notes_lock:
                self._notes.remove(note)

    def note_deletes(self, resource_type: str, ids: Sequence[str]) -> None:
        if not ids:
            return
        with self._notes_lock:
            for note in self._notes:
                note.update((resource_type, rid) for rid in ids)

    def deleted_meanwhile(self, note: set[tuple[str, str]], resource_type: str, rid: str) -> bool:
        with self._notes_lock:
            return (resource_type, rid) in note


@dataclass(slots=True)
class Walked:
    """One resource's catch-up: records read, pages, records written, records deleted."""

    resource: str
    fetched: int = 0
    pages: int = 0
    written: int = 0
    deleted: int = 0
    moved: bool = False


class CatchUp:
    """One resource's catch-up walk into a target (a :class:`~toolkit.webhooks.target.StoreTarget`).

    ``stopping`` is polled between pages; ``errors`` is the listener's validation mode.
    """

    def __init__(
        self,
        target: Any,
        client: Any,
        guard: Guard,
        *,
        errors: str,
        stopping: Callable[[], bool],
        slice_records: int = SLICE_RECORDS,
    ) -> None:
        self.target = target
        self.client = client
        self.guard = guard
        self.errors = errors
        self.stopping = stopping
        self.slice_records = slice_records

    def run(self, resource_type: str, since: str) -> Walked:
        """Walk ``resource_type`` changed ``since`` (a ``_lastUpdated`` bound) and write it."""
        from toolkit.store.layout import now_iso
        from toolkit.store.precedence import newest, stamp

        done = Walked(resource_type)
        started_at = now_iso()
        mark: str | None = None
        with self.guard.noting_deletes() as deleted:
            walk = self.client.walk(
                resource_type,
                params={"_count": PAGE_SIZE, catalogue.LAST_UPDATED: since},
                progress=False,
            )
            held: list[Mapping[str, Any]] = []
            for page in walk:
                if self.stopping():
                    raise Stopped(resource_type)
                done.pages += 1
                done.fetched += len(page.records)
                for record in page.records:
                    when = stamp(record)
                    if isinstance(when, str):
                        mark = newest(mark, when)
                held += page.records
                if len(held) >= self.slice_records:
                    done.written += self._commit(resource_type, held, deleted)
                    held = []
            done.written += self._commit(resource_type, held, deleted)
            server_time = walk.summary.started_at
            if resource_type in catalogue.EXPORT_IDS and server_time is not None:
                present = self.client.export_ids(resource_type)
                if present is not None:
                    with self.guard.lock:
                        gone = self.target.drop_missing(resource_type, present, server_time)
                    done.deleted = len(gone)
        done.moved = self.target.record_catch_up(
            resource_type,
            newest=mark,
            server_time=server_time,
            started_at=started_at,
            fetched=done.fetched,
            pages=done.pages,
        )
        return done

    def _commit(
        self,
        resource_type: str,
        records: Sequence[Mapping[str, Any]],
        deleted: set[tuple[str, str]],
    ) -> int:
        """Write the slice's records newer than the stored ones; how many were written."""
        from toolkit.store.precedence import newer, stamp, winning_records

        if not records:
            return 0
        with self.guard.lock:
            kept = [
                r
                for r in winning_records(records)
                if isinstance(r.get("id"), str)
                and not self.guard.deleted_meanwhile(deleted, resource_type, str(r["id"]))
            ]
            stored = self.target.stamps(resource_type, [str(r["id"]) for r in kept])
            fresh = [
                r
                for r in kept
                if str(r["id"]) not in stored or newer(stamp(r), stored[str(r["id"])])
            ]
            if fresh:
                self.target.apply(resource_type, fresh, [], None, self.errors)
        return len(fresh)
