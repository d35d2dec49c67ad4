"""The receiver's journal: every acknowledged change and its state, in one SQLite database.

Each change is a row of ``.webhooks/journal.sqlite3`` (WAL mode, ``synchronous=FULL``)
with an explicit state, and every move between states is one transaction:

======================  ===========================================================
state                   meaning
======================  ===========================================================
``queued``              acknowledged; due at ``due_ns`` (a retry's is later)
``claimed``             taken by the worker, its read in flight
``read``                read; the record (or the API's word that it is gone) is
                        kept in the row until the store's commit, then the row goes
``waiting``             of a type no full sync has made a table for (one per record)
``dead``                cannot be applied; with the reason
======================  ===========================================================

The rows are the truth: a crash at any point leaves each change in the state its last
committed transaction gave it. On start, :meth:`EventQueue.recover` puts ``claimed``
rows back to ``queued`` (their reads are lost with the process); ``read`` rows are
applied from the record kept (the listener checks the store first, so a change whose
store commit landed before the crash is not applied again).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from toolkit.redaction import redact_json
from toolkit.webhooks.events import (
    DEFAULT_MAX_QUEUE_BYTES,
    MAX_BATCH_EVENTS,
    WEBHOOK_DIR,
    Event,
    describe,
    note,
)
from toolkit.webhooks.queue import Change, insert_changes, redacted

JOURNAL_FILE = "journal.sqlite3"
"""``.webhooks/journal.sqlite3``: the journal (with its ``-wal`` and ``-shm`` files)."""

STATES = ("queued", "claimed", "read", "waiting", "dead")

UNAPPLIED = ("queued", "claimed", "read", "waiting")
"""States of a change not yet applied (counted against the queue's byte cap)."""

DEFAULT_MAX_DEAD_LETTERS = 10_000
"""Dead letters kept at most; beyond, the oldest are removed and counted."""

DEFAULT_MAX_DEAD_BYTES = 64 * 1024 * 1024
"""Bytes of dead letters kept at most; beyond, the oldest are removed and counted."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS changes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    state TEXT NOT NULL CHECK (state IN ('queued', 'claimed', 'read', 'waiting', 'dead')),
    rtype TEXT NOT NULL,
    rid TEXT NOT NULL,
    event BLOB NOT NULL,
    first_ns INTEGER NOT NULL,
    due_ns INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    received_at TEXT NOT NULL DEFAULT '',
    size INTEGER NOT NULL,
    record BLOB,
    gone INTEGER NOT NULL DEFAULT 0,
    reason TEXT,
    dead_at TEXT
);
CREATE INDEX IF NOT EXISTS changes_by_state ON changes (state, due_ns, id);
CREATE INDEX IF NOT EXISTS changes_by_record ON changes (rtype, rid, state);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS migrated (name TEXT PRIMARY KEY);
"""


class JournalError(OSError):
    """The journal cannot be opened or written (a damaged file, a full disk)."""


@dataclass(slots=True)
class Settled:
    """What one batch's reads decided, written by :meth:`EventQueue.settle` at once."""

    read: list[tuple[Change, dict[str, Any] | None]] = field(default_factory=list)
    retry: list[tuple[Change, int]] = field(default_factory=list)
    hold: list[Change] = field(default_factory=list)
    dead: list[tuple[Change, str]] = field(default_factory=list)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")


@dataclass(eq=False, slots=True)
class _Delivery:
    """One notification's changes waiting to be written by a group commit."""

    changes: list[Change]
    done: bool = False
    error: BaseException | None = None


class EventQueue:
    """Acknowledged changes in the journal: queued, claimed, read, waiting or dead.

    Notifications that arrive together share one transaction (a group commit): while
    one thread commits a group, the others add theirs to the next one; :meth:`put`
    returns for every notification of the group only once its commit is durable.

    Parameters
    ----------
    store
        The store directory (the journal lives in its ``.webhooks/``).
    max_bytes
        Bytes of unapplied changes beyond which :meth:`over_cap` is true and the
        receiver answers 503.
    max_dead, max_dead_bytes
        Dead letters kept at most, in rows and bytes (the oldest are evicted, counted).
    """

    def __init__(
        self,
        store: Path,
        max_bytes: int = DEFAULT_MAX_QUEUE_BYTES,
        *,
        max_dead: int = DEFAULT_MAX_DEAD_LETTERS,
        max_dead_bytes: int = DEFAULT_MAX_DEAD_BYTES,
    ) -> None:
        base = store / WEBHOOK_DIR
        base.mkdir(parents=True, exist_ok=True)
        self.path = base / JOURNAL_FILE
        self.max_bytes = max_bytes
        self.max_dead = max(1, max_dead)
        self.max_dead_bytes = max(1, max_dead_bytes)
        self._lock = threading.RLock()
        self._conn = _connect(self.path)
        self._group = threading.Condition()
        self._arrived: list[_Delivery] = []
        self._committing = False
        # (unapplied rows not waiting, bytes unapplied, next due): set by refresh(), the last
        # step here, before anything reads it (the migration above does not)
        self._counts: tuple[int, int, int]
        self.group_commits = 0
        """Group commits made by :meth:`put` (one transaction each)."""
        self.grouped = 0
        """Notifications written by those commits."""
        from toolkit.webhooks.migrate import migrate_folders

        migrate_folders(self, base)
        self.refresh()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- transactions ----------------------------------------------------------------

    @contextlib.contextmanager
    def _transaction(self, step: str) -> Iterator[sqlite3.Connection]:
        """One transaction named ``step`` (the kill-point tests hook this by name)."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise JournalError(f"the journal {self.path} cannot be written: {exc}") from exc
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    msg = f"the journal {self.path} cannot be written ({step}): {exc}"
                    raise JournalError(msg) from exc
                raise
        self.refresh()

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return list(self._conn.execute(sql, args).fetchall())
            except sqlite3.Error as exc:
                raise JournalError(f"the journal {self.path} cannot be read: {exc}") from exc

    # -- counts ----------------------------------------------------------------------

    def refresh(self) -> None:
        """Count the unapplied changes again (another process may have changed the journal)."""
        now = time.time_ns()
        rows = self._query(
            "SELECT coalesce(sum(state != 'waiting'), 0), coalesce(sum(size), 0),"
            " min(CASE WHEN state = 'queued' AND due_ns > ? THEN due_ns END)"
            " FROM changes WHERE state IN ('queued', 'claimed', 'read', 'waiting')",
            (now,),
        )
        count, size, due = rows[0]
        self._counts = (int(count), int(size), int(due or 0))

    def count(self) -> int:
        """Changes queued, claimed or read and not yet applied, as last counted."""
        return self._counts[0]

    def bytes(self) -> int:
        """Bytes of unapplied changes (waiting ones included), as last counted."""
        return self._counts[1]

    def over_cap(self) -> bool:
        return self.bytes() >= self.max_bytes

    def seconds_to_next_due(self) -> float | None:
        """Seconds until the earliest retry falls due (``None``: none is waiting)."""
        due = self._counts[2]
        return None if not due else max(0.0, (due - time.time_ns()) / 1e9)

    def states(self) -> dict[str, int]:
        """Rows per state (every state named, zero when empty)."""
        found = dict(self._query("SELECT state, count(*) FROM changes GROUP BY state"))
        return {state: int(found.get(state, 0)) for state in STATES}

    def oldest_ns(self) -> int | None:
        """When the oldest unapplied change (waiting ones included) was first received."""
        rows = self._query(
            "SELECT min(first_ns) FROM changes WHERE state IN ('queued', 'claimed', 'read', "
            "'waiting')"
        )
        return None if rows[0][0] is None else int(rows[0][0])

    # -- intake ----------------------------------------------------------------------

    def put(self, events: Sequence[Event], received_at: str) -> int:
        """Journal ``events`` as queued, with those of notifications arriving meanwhile.

        They are committed (durably) once this returns: only then may the sender
        hear 202. Returns how many were written. Raises :class:`JournalError` when the
        group's commit failed; then nothing of the group may be acknowledged.
        """
        if not events:
            return 0
        now = time.time_ns()
        mine = _Delivery([Change(e, now, received_at=received_at) for e in events])
        group: list[_Delivery] = []
        with self._group:
            self._arrived.append(mine)
            while self._committing and not mine.done:
                self._group.wait()
            if not mine.done:
                group, self._arrived = self._arrived, []
                self._committing = True
        if group:
            self._commit_group(group)
        if mine.error is not None:
            msg = f"writing the event journal failed: {describe(mine.error)}"
            raise JournalError(msg) from mine.error
        return len(events)

    def _commit_group(self, group: list[_Delivery]) -> None:
        error: BaseException | None = None
        try:
            with self._transaction("intake") as db:
                for delivery in group:
                    insert_changes(db, delivery.changes, "queued")
        except BaseException as exc:  # every waiter must hear of it
            error = exc
        with self._group:
            for delivery in group:
                delivery.error = error
                delivery.done = True
            self._committing = False
            if error is None:
                self.group_commits += 1
                self.grouped += len(group)
            self._group.notify_all()

    def put_changes(self, changes: Sequence[Change], due_ns: int | None = None) -> None:
        """Journal changes as queued (due at ``due_ns``, default now): a revived change."""
        if not changes:
            return
        with self._transaction("requeue") as db:
            insert_changes(db, changes, "queued", due_ns)

    # -- the worker's moves ----------------------------------------------------------

    def take(self, max_events: int = MAX_BATCH_EVENTS) -> list[Change]:
        """Claim the queued changes due now, oldest due first, at most ``max_events``."""
        now = time.time_ns()
        due = self._query(
            "SELECT 1 FROM changes WHERE state = 'queued' AND due_ns <= ? LIMIT 1", (now,)
        )
        if not due:
            return []  # nothing to claim: no transaction
        with self._transaction("claim") as db:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM changes WHERE state = 'queued' AND due_ns <= ?"
                " ORDER BY due_ns, id LIMIT ?",
                (now, max(1, max_events)),
            ).fetchall()
            ids = [(row[0],) for row in rows]
            db.executemany("UPDATE changes SET state = 'claimed' WHERE id = ?", ids)
        return [_change(row) for row in rows]

    def settle(self, settled: Settled) -> None:
        """Record what a batch's reads decided, in one transaction: records read
        (``read``), retries (``queued`` again, due later), waiting and dead changes."""
        with self._transaction("read") as db:
            for change, record in settled.read:
                gone = record is None
                data = None if gone else orjson.dumps(record)
                _update(db, change, "state = 'read', record = ?, gone = ?", (data, int(gone)))
            for change, due in settled.retry:
                _update(
                    db,
                    change,
                    "state = 'queued', due_ns = ?, attempts = ?, last_error = ?",
                    (due, change.attempts, redacted(change.last_error)),
                )
            for change in settled.hold:
                self._hold(db, change)
            self._bury(db, settled.dead)

    def finish(self, applied: Sequence[Change], dead: Sequence[tuple[Change, str]] = ()) -> None:
        """The store committed ``applied``: their rows go; ``dead`` ones move to the dead
        letters. One transaction, made only after the store's commit."""
        with self._transaction("applied") as db:
            db.executemany(
                "DELETE FROM changes WHERE id = ?",
                [(row,) for change in applied for row in change.rows],
            )
            self._bury(db, dead)

    def unclaim(self, changes: Sequence[Change]) -> None:
        """Queue claimed or read changes again as they were (a store that cannot be
        written now; a batch dropped): their reads are forgotten, no attempt counted."""
        if not changes:
            return
        with self._transaction("unclaim") as db:
            for change in changes:
                _update(db, change, "state = 'queued', record = NULL, gone = 0", ())

    def recover(self) -> list[tuple[Change, dict[str, Any] | None]]:
        """After a crash: claimed changes queued again; the read ones with their records."""
        with self._transaction("recover") as db:
            db.execute("UPDATE changes SET state = 'queued' WHERE state = 'claimed'")
        rows = self._query(
            f"SELECT {_COLUMNS}, record, gone FROM changes WHERE state = 'read' ORDER BY id"
        )
        found: list[tuple[Change, dict[str, Any] | None]] = []
        for row in rows:
            record = None if row[-1] or row[-2] is None else orjson.loads(row[-2])
            found.append((_change(row[:-2]), record))
        return found

    # -- waiting ---------------------------------------------------------------------

    def _hold(self, db: sqlite3.Connection, change: Change) -> None:
        """One waiting row per record: the earliest receipt of its older ones kept."""
        event = change.event
        olders = db.execute(
            "SELECT id, first_ns FROM changes WHERE state = 'waiting' AND rtype = ? AND rid = ?",
            (event.resource_type, event.id),
        ).fetchall()
        for row, first in olders:
            change.first_ns = min(change.first_ns, int(first))
            db.execute("DELETE FROM changes WHERE id = ?", (row,))
        _update(db, change, "state = 'waiting', first_ns = ?", (change.first_ns,))

    def hold(self, change: Change) -> None:
        """Keep a change of a type without a full-synced table (one row per record)."""
        with self._transaction("waiting") as db:
            self._hold(db, change)

    def waiting(self) -> dict[str, int]:
        """Changes waiting for a full sync, per resource type."""
        rows = self._query(
            "SELECT rtype, count(*) FROM changes WHERE state = 'waiting' GROUP BY rtype"
        )
        return {str(rtype): int(n) for rtype, n in rows}

    def release(self, types: set[str]) -> int:
        """Queue the waiting changes of ``types`` (their table now exists); how many."""
        if not types:
            return 0
        marks = ", ".join("?" for _ in types)
        with self._transaction("release") as db:
            moved = db.execute(
                f"UPDATE changes SET state = 'queued', due_ns = ? "
                f"WHERE state = 'waiting' AND rtype IN ({marks})",
                (time.time_ns(), *sorted(types)),
            ).rowcount
        return int(moved)

    # -- dead letters ----------------------------------------------------------------

    def _bury(self, db: sqlite3.Connection, dead: Sequence[tuple[Change, str]]) -> None:
        for change, reason in dead:
            event = change.event
            payload = {
                "reason": reason,
                "dead_at": _iso(time.time()),
                "attempts": change.attempts,
                "last_error": change.last_error,
            }
            payload = redact_json(payload)
            _update(
                db,
                change,
                "state = 'dead', reason = ?, dead_at = ?, attempts = ?, last_error = ?, "
                "record = NULL, gone = 0",
                (payload["reason"], payload["dead_at"], change.attempts, payload["last_error"]),
            )
            note(
                logging.WARNING,
                "%s/%s moved to the dead letters after %d attempt(s): %s",
                event.resource_type,
                event.id,
                change.attempts,
                reason,
            )
        if dead:
            self._bound_dead(db)

    def bury(self, change: Change, reason: str) -> None:
        """Move a change that cannot be applied to the dead letters, with the reason."""
        with self._transaction("dead") as db:
            self._bury(db, [(change, reason)])

    def _bound_dead(self, db: sqlite3.Connection) -> None:
        """Remove the oldest dead letters beyond the bounds (the newest is always kept)
        and count them, in the transaction that buried the new ones."""
        count, total = db.execute(
            "SELECT count(*), coalesce(sum(size + length(coalesce(reason, ''))), 0) "
            "FROM changes WHERE state = 'dead'"
        ).fetchone()
        evicted = 0
        if count > self.max_dead or total > self.max_dead_bytes:
            for row, size in db.execute(
                "SELECT id, size + length(coalesce(reason, '')) FROM changes "
                "WHERE state = 'dead' ORDER BY dead_at, id"
            ).fetchall():
                if count <= 1 or (count <= self.max_dead and total <= self.max_dead_bytes):
                    break
                db.execute("DELETE FROM changes WHERE id = ?", (row,))
                count, total, evicted = count - 1, total - int(size), evicted + 1
        if evicted:
            db.execute(
                "INSERT INTO counters (name, value) VALUES ('evicted', ?) "
                "ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
                (evicted,),
            )
            note(
                logging.WARNING,
                "removed the %d oldest dead letter(s) to keep at most %d letters and %d bytes",
                evicted,
                self.max_dead,
                self.max_dead_bytes,
            )

    def dead_bytes(self) -> int:
        """The bytes the dead letters count against ``max_dead_bytes``."""
        rows = self._query(
            "SELECT coalesce(sum(size + length(coalesce(reason, ''))), 0) FROM changes "
            "WHERE state = 'dead'"
        )
        return int(rows[0][0])

    def dead(self) -> int:
        return int(self._query("SELECT count(*) FROM changes WHERE state = 'dead'")[0][0])

    def evicted(self) -> int:
        """Dead letters removed so far to keep the bounds."""
        rows = self._query("SELECT value FROM counters WHERE name = 'evicted'")
        return int(rows[0][0]) if rows else 0

    def dead_letters(self) -> list[dict[str, Any]]:
        """Each dead letter, oldest first: its row, record, attempts, when and why."""
        rows = self._query(
            "SELECT id, rtype, rid, event, attempts, dead_at, reason FROM changes "
            "WHERE state = 'dead' ORDER BY dead_at, id"
        )
        found: list[dict[str, Any]] = []
        for row, rtype, rid, event, attempts, dead_at, reason in rows:
            action = orjson.loads(event).get("action")
            found.append(
                {
                    "file": f"journal row {row}",
                    "record": f"{rtype}/{rid}",
                    "action": action,
                    "attempts": attempts,
                    "dead_at": dead_at,
                    "reason": str(reason),
                }
            )
        return found

    def requeue_dead(self) -> tuple[int, int]:
        """Queue every dead letter again, attempts reset: ``(requeued, 0)``."""
        with self._transaction("requeue") as db:
            moved = db.execute(
                "UPDATE changes SET state = 'queued', attempts = 0, last_error = NULL, "
                "reason = NULL, dead_at = NULL, due_ns = ? WHERE state = 'dead'",
                (time.time_ns(),),
            ).rowcount
        return int(moved), 0


_COLUMNS = "id, event, first_ns, attempts, last_error, received_at"


def _change(row: Sequence[Any]) -> Change:
    row_id, event, first_ns, attempts, last_error, received_at = row
    return Change(
        Event.from_json(orjson.loads(event)),
        int(first_ns),
        int(attempts),
        last_error,
        str(received_at or ""),
        rows=[int(row_id)],
    )


def _update(db: sqlite3.Connection, change: Change, assignments: str, args: Sequence[Any]) -> None:
    """Set ``assignments`` on the change's latest row; its older rows (the same record
    announced again, merged into it) go. A change made by hand gets a row first."""
    if not change.rows:
        insert_changes(db, [change], "queued")
    *older, latest = change.rows
    db.executemany("DELETE FROM changes WHERE id = ?", [(row,) for row in older])
    db.execute(f"UPDATE changes SET {assignments} WHERE id = ?", (*args, latest))
    change.rows = [latest]


def _connect(path: Path) -> sqlite3.Connection:
    """The journal, opened in WAL mode with every commit synced (created when missing)."""
    try:
        conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA temp_store=MEMORY")
        conn.executescript(_SCHEMA)
    except sqlite3.Error as exc:
        msg = (
            f"the event journal {path} cannot be opened ({describe(exc)}); move it aside "
            "to start an empty one (its unapplied changes are then healed by a catch-up sync)"
        )
        raise JournalError(msg) from exc
    if str(mode).lower() != "wal":
        conn.close()
        raise JournalError(f"the event journal {path} cannot use WAL mode (got {mode!r})")
    return conn
