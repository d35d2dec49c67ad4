"""The records a list walk has read: each id's newest version and the pass it was last read in.

A walk must know every id it has read (to tell a repeat from a new record, to
count against ``Bundle.total`` and to recover from changes), so this index grows
with the collection. It stays a dict while it is small; past :data:`SPILL_AT`
ids it moves to a private temporary SQLite database on disk (deleted when
closed), whose page cache is bounded, so that walking half a million records
costs the same memory as walking fifty thousand.

>>> seen = Seen(spill_at=2)
>>> seen.lookup(["a", "b"])
{}
>>> seen.write({"a": (5, 0, 0, 1), "b": (None, 0, 1, 1), "c": (9, 0, 2, 1)})
>>> seen.spilled, len(seen), seen.lookup(["a", "z"]), seen.count_before(6)
(True, 3, {'a': (5, 0, 0, 1)}, 2)
>>> sorted(seen.versions())
[(0, 0), (0, 1), (0, 2)]
>>> seen.close()
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Collection, Iterator, Mapping, Sequence

from toolkit.errors import PmtkError

__all__ = ["SPILL_AT", "Seen", "Version"]

SPILL_AT = 20_000
"""Ids held in memory before the index moves to a temporary SQLite file."""

CACHE_KIB = 4096
"""The SQLite page cache of a spilled index, in KiB."""

_CHUNK = 500
"""Ids per ``IN (...)`` lookup (well under SQLite's limit on bound parameters)."""

Version = tuple[int | None, int, int, int]
"""``(meta.lastUpdated in microseconds or None, page index, position, pass number)``."""


class Seen:
    """id -> :data:`Version` of every record a walk has read (see the module docstring)."""

    def __init__(self, *, spill_at: int | None = None) -> None:
        self._spill_at = SPILL_AT if spill_at is None else spill_at
        self._can_spill = True
        self._memory: dict[str, Version] = {}
        self._db: sqlite3.Connection | None = None
        self._count = 0

    @property
    def spilled(self) -> bool:
        """Whether the index lives in its temporary SQLite file."""
        return self._db is not None

    def __len__(self) -> int:
        return self._count if self._db is not None else len(self._memory)

    def lookup(self, ids: Sequence[str]) -> dict[str, Version]:
        """The known versions of ``ids`` (unknown ids are left out)."""
        if self._db is None:
            memory = self._memory
            return {rid: memory[rid] for rid in ids if rid in memory}
        found: dict[str, Version] = {}
        unique = list(dict.fromkeys(ids))
        with _on_disk():
            for start in range(0, len(unique), _CHUNK):
                chunk = unique[start : start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                query = f"SELECT id, stamp, page, pos, pass FROM seen WHERE id IN ({marks})"
                for rid, stamp, page, pos, number in self._db.execute(query, chunk):
                    found[rid] = (stamp, page, pos, number)
        return found

    def write(self, rows: Mapping[str, Version], *, known: Collection[str] | None = None) -> None:
        """Set the versions of ``rows`` (new ids are added).

        ``known``: the ids of ``rows`` the index already holds, when the caller has
        just looked them up (saves a spilled index a second lookup).
        """
        if self._db is None:
            self._memory.update(rows)
            if self._can_spill and len(self._memory) > self._spill_at:
                try:
                    self._spill()
                except sqlite3.Error:
                    self._can_spill = False  # no temporary file: stay in memory (only larger)
            return
        with _on_disk():
            self._write_db(self._db, rows, self.lookup(list(rows)) if known is None else known)

    def _write_db(
        self, db: sqlite3.Connection, rows: Mapping[str, Version], known: Collection[str]
    ) -> None:
        self._count += sum(1 for rid in rows if rid not in known)
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO seen (id, stamp, page, pos, pass) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET stamp = excluded.stamp, page = excluded.page, "
            "pos = excluded.pos, pass = excluded.pass",
            ((rid, *version) for rid, version in rows.items()),
        )
        db.execute("COMMIT")

    def count_before(self, floor: int) -> int:
        """Records whose newest version has no time or one before ``floor`` (microseconds)."""
        if self._db is None:
            return sum(1 for v in self._memory.values() if v[0] is None or v[0] < floor)
        with _on_disk():
            row = self._db.execute(
                "SELECT count(*) FROM seen WHERE stamp IS NULL OR stamp < ?", (floor,)
            ).fetchone()
        return int(row[0])

    def versions(self) -> Iterator[tuple[int, int]]:
        """``(page index, position)`` of every id's newest version."""
        if self._db is None:
            for stamp_page_pos in self._memory.values():
                yield stamp_page_pos[1], stamp_page_pos[2]
            return
        with _on_disk():
            rows = self._db.execute("SELECT page, pos FROM seen").fetchall()
        yield from rows

    def close(self) -> None:
        """Drop the index (a spilled one's temporary file is deleted)."""
        self._memory = {}
        if self._db is not None:
            self._db.close()
            self._db = None

    def _spill(self) -> None:
        # "" opens a private temporary database on disk, deleted when it is closed.
        db = sqlite3.connect("", isolation_level=None, check_same_thread=False)
        try:
            self._fill(db)
        except sqlite3.Error:
            db.close()
            raise
        self._count = len(self._memory)
        self._memory = {}
        self._db = db

    def _fill(self, db: sqlite3.Connection) -> None:
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        db.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        db.execute(
            "CREATE TABLE seen (id TEXT PRIMARY KEY, stamp INTEGER, page INTEGER, "
            "pos INTEGER, pass INTEGER) WITHOUT ROWID"
        )
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO seen (id, stamp, page, pos, pass) VALUES (?, ?, ?, ?, ?)",
            ((rid, *version) for rid, version in self._memory.items()),
        )
        db.execute("COMMIT")


@contextlib.contextmanager
def _on_disk() -> Iterator[None]:
    """A failure of the temporary database (a full or vanished disk) as a :class:`PmtkError`."""
    try:
        yield
    except sqlite3.Error as exc:
        msg = f"the walk's index of ids read could not be kept on disk: {exc}"
        raise PmtkError(msg) from exc
