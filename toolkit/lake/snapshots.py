"""What a reading process keeps of a local lake between two reads, and why it is safe.

Opening a Delta table replays its log, and decoding the pins reads the state table:
a few milliseconds each, paid again on every :func:`toolkit.lake.load` (a notebook
reads the same lake over and over). A committed Delta version never changes, so a
process may keep:

* the state table open, brought up to date on each read by ``update_incremental``
  (which reads only the log entries added since), and the pins decoded at each of
  its versions;
* each data table's file list at each version a pin names.

The one way a kept version could differ from the lake's is a lake removed and made
again at the same path (its versions numbered from 0 again), or a log file
rewritten. So each kept version is tied to its log file's identity (inode,
modification time, size): when that changed or the file is gone, the table is
opened afresh. Only local lakes are kept (an object store's listing costs more than
the open it would save), only :func:`toolkit.lake.load` uses this (``verify`` and
every writer open the tables afresh), and a data file's sha256 is still checked on
every read.
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from toolkit.lake.location import Location

T = TypeVar("T")

_KEEP = 256
"""Entries kept per cache; past that the oldest is dropped (a process reading many
lakes, or one lake through thousands of versions, stays bounded)."""

_lock = threading.Lock()
_open: dict[str, tuple[Any, tuple[int, int, int] | None]] = {}
_decoded: dict[tuple[str, int, tuple[int, int, int] | None], Any] = {}


def _log_identity(table_uri: str, version: int) -> tuple[int, int, int] | None:
    """The identity of a version's log file, ``None`` when there is none to compare."""
    try:
        st = os.stat(os.path.join(table_uri, "_delta_log", f"{version:020d}.json"))
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _bounded(cache: dict[Any, Any]) -> None:
    while len(cache) > _KEEP:
        cache.pop(next(iter(cache)))


def at_latest(
    loc: Location, table_uri: str, opener: Callable[[], Any], decode: Callable[[Any], T]
) -> T:
    """``decode(table)`` of the table at its latest version; for a local lake the table
    is kept open between calls and each version decoded once (a copy is returned)."""
    if not loc.local:
        return decode(opener())
    with _lock:
        kept = _open.get(table_uri)
        dt = None
        if kept is not None:
            dt, identity = kept
            if identity is None or _log_identity(table_uri, int(dt.version())) != identity:
                dt = None  # the lake was made again, or its log rewritten: open afresh
            else:
                try:
                    dt.update_incremental()
                except Exception:  # a log it cannot follow: open afresh
                    dt = None
        if dt is None:
            dt = opener()
        version = int(dt.version())
        identity = _log_identity(table_uri, version)
        _open[table_uri] = (dt, identity)
        _bounded(_open)
        return _decoded_once((table_uri, version, identity), lambda: decode(dt))


def at_version(
    loc: Location, table_uri: str, version: int, part: str, decode: Callable[[], T]
) -> T:
    """``decode()`` of a table at ``version`` (about ``part`` of it, say a deployment),
    computed once per process for a local lake (a copy is returned, so a caller may
    change what it gets)."""
    if not loc.local:
        return decode()
    identity = _log_identity(table_uri, version)
    with _lock:
        return _decoded_once((f"{table_uri}#{part}", version, identity), decode)


def _decoded_once(key: tuple[str, int, tuple[int, int, int] | None], decode: Callable[[], T]) -> T:
    """Under the lock: the kept value of ``key``, or ``decode()`` kept (when the version's
    log file has an identity to tie it to)."""
    if key[2] is None:
        return decode()
    if key not in _decoded:
        _decoded[key] = decode()
        _bounded(_decoded)
    return copy.deepcopy(_decoded[key])


def forget() -> None:
    """Drop everything kept (tests, or a caller that wants the next read from storage)."""
    with _lock:
        _open.clear()
        _decoded.clear()
