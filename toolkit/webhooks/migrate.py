"""Moving a receiver's file queue (``queue/``, ``waiting/``, ``dead/``) into its journal.

A receiver upgraded in place finds the folders an older pmtk wrote. Every readable
file is imported in one transaction that also records its name in ``migrated``; only
after that commit are the files removed. A crash before the commit leaves the files
(imported again next time, nothing lost); a crash after it leaves files whose names
the journal already holds (removed next time, not imported twice). A file that cannot
be read is left where it is and named in a warning.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from toolkit.webhooks.events import note
from toolkit.webhooks.queue import Change, insert_changes

if TYPE_CHECKING:
    from toolkit.webhooks.journal import EventQueue

FOLDERS = ("queue", "waiting", "dead")
"""The folders of the file queue an older receiver kept in ``.webhooks/``."""

EVICTED_FILE = "dead-evicted.json"


def _read(folder: str, path: Path) -> list[tuple[Change, str | None, str | None]]:
    """``(change, reason, dead_at)`` of each change a file of ``folder`` holds."""
    data = orjson.loads(path.read_bytes())
    if folder == "queue":
        return [(Change.from_json(c), None, None) for c in data["changes"]]
    if folder == "waiting":
        return [(Change.from_json(data), None, None)]
    return [(Change.from_json(data["change"]), str(data["reason"]), data.get("dead_at"))]


def _found(base: Path) -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    for folder in FOLDERS:
        directory = base / folder
        if directory.is_dir() and not directory.is_symlink():
            found += [(folder, p) for p in sorted(directory.glob("*.json")) if p.is_file()]
    return found


def migrate_folders(queue: EventQueue, base: Path) -> int:
    """Import the file queue under ``base`` into ``queue``'s journal; changes imported."""
    found = _found(base)
    evicted = base / EVICTED_FILE
    if not found and not evicted.is_file():
        return 0
    done = {row[0] for row in queue._query("SELECT name FROM migrated")}
    imported = 0
    left: list[str] = []
    with queue._transaction("migrate") as db:
        for folder, path in found:
            name = f"{folder}/{path.name}"
            if name in done:
                continue
            try:
                changes = _read(folder, path)
            except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                left.append(f"{name} ({exc})")
                continue
            for change, reason, dead_at in changes:
                _import(db, folder, change, reason, dead_at)
                imported += 1
            db.execute("INSERT INTO migrated (name) VALUES (?)", (name,))
        if EVICTED_FILE not in done:
            _import_evicted(db, evicted)
    _remove(base, found, left)
    if imported:
        note(logging.WARNING, "moved %d change(s) of the file queue into the journal", imported)
    for name in left:
        note(logging.WARNING, "file queue entry %s cannot be read: left where it is", name)
    return imported


def _import(
    db: sqlite3.Connection, folder: str, change: Change, reason: str | None, dead_at: Any
) -> None:
    state = {"queue": "queued", "waiting": "waiting", "dead": "dead"}[folder]
    insert_changes(db, [change], state)
    if state == "dead":
        db.execute(
            "UPDATE changes SET reason = ?, dead_at = ? WHERE id = ?",
            (reason, str(dead_at or ""), change.rows[0]),
        )


def _import_evicted(db: sqlite3.Connection, path: Path) -> None:
    """The count of evicted dead letters, from the old ``dead-evicted.json`` (then removed)."""
    try:
        count = int(orjson.loads(path.read_bytes())["evicted"])
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return
    db.execute(
        "INSERT INTO counters (name, value) VALUES ('evicted', ?) "
        "ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
        (count,),
    )
    db.execute("INSERT OR IGNORE INTO migrated (name) VALUES (?)", (EVICTED_FILE,))


def _remove(base: Path, found: list[tuple[str, Path]], left: list[str]) -> None:
    """Remove the imported files (after the commit), then the folders left empty."""
    kept = {entry.split(" ", 1)[0] for entry in left}
    for folder, path in found:
        if f"{folder}/{path.name}" not in kept:
            path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        (base / EVICTED_FILE).unlink(missing_ok=True)
    for folder in FOLDERS:
        directory = base / folder
        with contextlib.suppress(OSError):
            for tmp in directory.glob(".*.tmp"):  # a half-written file, never acknowledged
                tmp.unlink()
            directory.rmdir()  # only when empty
