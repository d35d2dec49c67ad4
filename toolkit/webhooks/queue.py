"""The receiver's on-disk queue of acknowledged changes, its authentication and its counters."""

from __future__ import annotations

import collections
import contextlib
import hmac
import itertools
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from toolkit.redaction import redact_json, register
from toolkit.webhooks.events import (
    DEFAULT_MAX_QUEUE_BYTES,
    FILE_EVENTS,
    MAX_BATCH_EVENTS,
    WEBHOOK_DIR,
    Event,
    describe,
    note,
)


class AuthHeader:
    """The authentication header a webhook must carry; the value is a secret.

    Parameters
    ----------
    name
        The header name, e.g. ``"Authorization"``.
    value
        The exact value, e.g. ``"Bearer 5f1c..."``. Never shown by ``repr``.
    """

    def __init__(self, name: str, value: str) -> None:
        name = name.strip()
        if not re.fullmatch(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+", name):
            msg = f"the authentication header name {name[:40]!r} is not a valid HTTP header name"
            from toolkit.errors import ConfigurationError

            raise ConfigurationError(msg)
        if not value.strip():
            from toolkit.errors import ConfigurationError

            msg = f"the authentication header {name} needs a value"
            raise ConfigurationError(msg)
        self.name = name
        self._value = value.strip().encode()
        register(value.strip())  # never in a log line or a queue file, even echoed

    @classmethod
    def parse(cls, text: str) -> AuthHeader:
        """``"NAME:VALUE"`` (as ``curl -H`` takes it), e.g. ``"Authorization: Bearer s3cret"``."""
        name, sep, value = text.partition(":")
        if not sep:
            from toolkit.errors import ConfigurationError

            msg = "the authentication header must be NAME:VALUE, e.g. 'Authorization: Bearer ...'"
            raise ConfigurationError(msg)
        return cls(name, value)

    def __repr__(self) -> str:
        return f"AuthHeader(name={self.name!r}, value=<hidden>)"

    def matches(self, values: Sequence[str | bytes]) -> bool:
        """Whether exactly one value was sent and it is ours (compared in constant time).

        ``str`` values are taken as ASGI gives them (the raw bytes decoded as
        latin-1), so a UTF-8 secret compares byte for byte.
        """
        if len(values) != 1:
            return False
        sent = values[0]
        raw = sent.encode("latin-1", "replace") if isinstance(sent, str) else sent
        return hmac.compare_digest(raw.strip(), self._value)

    def value_for_sending(self) -> str:
        """The value, for a sender's configuration (tests, the mock); never log it."""
        return self._value.decode()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durable(path: Path, data: bytes) -> None:
    """``data`` at ``path``, fsynced and moved in whole (a crash leaves the old file or none)."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with tmp.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_dead_letter(folder: Path, name: str, payload: dict[str, Any]) -> Path:
    """Every dead letter is written here (one place to redact what it keeps)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    _write_durable(path, orjson.dumps(redact_json(payload), option=orjson.OPT_INDENT_2))
    _fsync_dir(folder)
    return path


@dataclass(slots=True)
class Change:
    """One queued change: the event, when it was first received, how often it was tried.

    Attributes
    ----------
    event
        The latest event announced for the record.
    first_ns
        ``time.time_ns()`` when the oldest unapplied event of the record was received.
    attempts
        Reads tried so far (a retry counts one more).
    last_error
        Why the last attempt failed (``None`` before any).
    received_at
        ISO time of the latest notification announcing it.
    """

    event: Event
    first_ns: int
    attempts: int = 0
    last_error: str | None = None
    received_at: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.event.resource_type, self.event.id)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.event.to_json(),
            "first_ns": self.first_ns,
            "attempts": self.attempts,
            "last_error": self.last_error,
            "received_at": self.received_at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Change:
        return cls(
            Event.from_json(data),
            int(data["first_ns"]),
            int(data.get("attempts") or 0),
            data.get("last_error"),
            str(data.get("received_at") or ""),
        )


_NAME = re.compile(r"(\d{20})-(\d{20})-(\d{8})-(\d+)e-(\d+)b-[0-9a-f]{8}\.json")


@dataclass(eq=False, slots=True)
class _Delivery:
    """One notification's changes waiting to be written by a group commit."""

    changes: list[Change]
    done: bool = False
    paths: list[Path] = field(default_factory=list)
    error: BaseException | None = None


DEFAULT_MAX_DEAD_LETTERS = 10_000
"""Dead letters kept at most; beyond, the oldest are removed and counted."""

DEFAULT_MAX_DEAD_BYTES = 64 * 1024 * 1024
"""Bytes of dead letters kept at most; beyond, the oldest are removed and counted."""

EVICTED_FILE = "dead-evicted.json"
"""``.webhooks/dead-evicted.json``: how many dead letters were removed to keep the bounds."""

TMP_MAX_AGE = 3600.0
"""Seconds after which a half-written ``.*.tmp`` file in the queue (a crash between
the write and the rename) is removed when a queue is opened: it was never acknowledged."""


@dataclass(frozen=True, slots=True)
class _Entry:
    """A queue file as its name describes it (nothing read)."""

    path: Path
    key_ns: int  # received (a new change) or due (a retry): the file is taken from then on
    first_ns: int
    events: int
    size: int


class EventQueue:
    """Acknowledged changes on disk, and the ones that wait, are retried or are dead.

    ``queue/`` holds fsynced JSON files of at most :data:`FILE_EVENTS` changes named
    ``<key ns>-<first ns>-<seq>-<n>e-<bytes>b-<rand>.json``: the key is the time the
    file was received or, for a retry, the time it is due, so the sorted names are
    the order to take them in, and the counts come from the names without reading.
    ``waiting/`` keeps one change per record of a type no full sync has made a table
    for; ``dead/`` the changes that cannot be applied, with the reason.

    Notifications that arrive together share their fsyncs (a group commit, as a
    database's log does): while one thread writes and fsyncs a group, the others
    add theirs to the next group; that group's changes go into as few files as
    :data:`FILE_EVENTS` allows, each fsynced, then the folder is fsynced once, and
    only then does :meth:`put` return for every notification of the group. At tens
    of deliveries a second on a busy disk that is what keeps the intake from
    becoming a one-fsync-pair-at-a-time queue in front of the receiver.

    Parameters
    ----------
    store
        The store directory (the folders live in its ``.webhooks/``).
    max_bytes
        Bytes of unapplied changes (queued and waiting) beyond which
        :meth:`over_cap` is true and the receiver answers 503.
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
        self.max_dead = max(1, max_dead)
        self.max_dead_bytes = max(1, max_dead_bytes)
        self._evicted_path = base / EVICTED_FILE
        self._dead_lock = threading.Lock()
        self._dead_cache: collections.deque[tuple[Path, int]] | None = None
        self.dir = base / "queue"
        self.waiting_dir = base / "waiting"
        self.dead_dir = base / "dead"
        for folder in (self.dir, self.waiting_dir, self.dead_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._events = 0
        self._bytes = 0
        self._waiting_bytes = 0
        self._next_due: int | None = None
        self._group = threading.Condition()  # guards _arrived and _committing
        self._arrived: list[_Delivery] = []
        self._committing = False
        self.group_commits = 0
        """Group commits made by :meth:`put` (each: its files' fsyncs, one folder fsync)."""
        self.grouped = 0
        """Notifications written by those commits (``grouped / group_commits`` per fsync pair)."""
        self._sweep_tmp()
        self.refresh()
        self._refresh_waiting()

    # -- counts ----------------------------------------------------------------------

    def _entries(self) -> list[_Entry]:
        found: list[_Entry] = []
        for name in os.listdir(self.dir):
            matched = _NAME.fullmatch(name)
            if matched:
                key, first, _seq, events, size = (int(g) for g in matched.groups())
                found.append(_Entry(self.dir / name, key, first, events, size))
        found.sort(key=lambda e: e.path.name)
        return found

    def refresh(self) -> list[_Entry]:
        """List the queue and set the counts from the names (another process may add files)."""
        entries = self._entries()
        now = time.time_ns()
        with self._lock:
            self._events = sum(e.events for e in entries)
            self._bytes = sum(e.size for e in entries)
            later = [e.key_ns for e in entries if e.key_ns > now]
            self._next_due = min(later) if later else None
        return entries

    def _sweep_tmp(self) -> None:
        """Remove half-written files a crash left before their rename (never acknowledged)."""
        cutoff = time.time() - TMP_MAX_AGE
        for folder in (self.dir, self.waiting_dir, self.dead_dir):
            for path in folder.glob(".*.tmp"):
                with contextlib.suppress(OSError):
                    if path.stat().st_mtime < cutoff:
                        path.unlink()

    def _refresh_waiting(self) -> None:
        size = 0
        for path in self.waiting_dir.glob("*.json"):
            with contextlib.suppress(OSError):
                size += path.stat().st_size
        with self._lock:
            self._waiting_bytes = size

    def count(self) -> int:
        """Changes queued (due or not), as last counted."""
        with self._lock:
            return self._events

    def bytes(self) -> int:
        """Bytes of unapplied changes on disk (queued and waiting), as last counted."""
        with self._lock:
            return self._bytes + self._waiting_bytes

    def over_cap(self) -> bool:
        return self.bytes() >= self.max_bytes

    def seconds_to_next_due(self) -> float | None:
        """Seconds until the earliest retry falls due (``None``: none is waiting)."""
        with self._lock:
            due = self._next_due
        return None if due is None else max(0.0, (due - time.time_ns()) / 1e9)

    # -- writing ---------------------------------------------------------------------

    def _write(self, changes: Sequence[Change], key_ns: int) -> Path:
        data = orjson.dumps(redact_json({"changes": [c.to_json() for c in changes]}))
        first = min(c.first_ns for c in changes)
        with self._lock:
            seq = next(self._counter) % 100_000_000
        name = (
            f"{key_ns:020d}-{first:020d}-{seq:08d}-{len(changes)}e-{len(data)}b-"
            f"{uuid.uuid4().hex[:8]}.json"
        )
        _write_durable(self.dir / name, data)
        with self._lock:
            self._events += len(changes)
            self._bytes += len(data)
            if key_ns > time.time_ns() and (self._next_due is None or key_ns < self._next_due):
                self._next_due = key_ns
        return self.dir / name

    def put(self, events: Sequence[Event], received_at: str) -> list[Path]:
        """Write ``events`` durably, with those of notifications arriving meanwhile.

        They are on disk, fsynced (file and folder), once this returns: only then may
        the sender hear 202. Returns the files of the group commit that wrote them
        (they may hold other notifications' changes too). Raises the ``OSError`` of
        a commit that failed; then nothing of the group may be acknowledged.
        """
        if not events:
            return []
        now = time.time_ns()
        mine = _Delivery([Change(e, now, received_at=received_at) for e in events])
        group: list[_Delivery] = []
        with self._group:
            self._arrived.append(mine)
            while self._committing and not mine.done:
                self._group.wait()
            if not mine.done:
                # Nobody is writing: this thread writes everything that has arrived,
                # its own notification and any that came while the last group was
                # being fsynced.
                group, self._arrived = self._arrived, []
                self._committing = True
        if group:
            self._commit_group(group)
        if mine.error is not None:
            if group:
                raise mine.error
            msg = f"writing the event queue failed: {describe(mine.error)}"
            raise OSError(msg) from mine.error
        return mine.paths

    def _commit_group(self, group: list[_Delivery]) -> None:
        """Write ``group`` as files of at most :data:`FILE_EVENTS` changes, fsync the folder
        once, and release every thread waiting for it (with the error, if one failed)."""
        changes = [change for delivery in group for change in delivery.changes]
        paths: list[Path] = []
        error: BaseException | None = None
        try:
            for i in range(0, len(changes), FILE_EVENTS):
                chunk = changes[i : i + FILE_EVENTS]
                paths.append(self._write(chunk, min(c.first_ns for c in chunk)))
            _fsync_dir(self.dir)
        except BaseException as exc:  # every waiter must hear of it, then it is raised
            error = exc
        with self._group:
            for delivery in group:
                delivery.paths = paths
                delivery.error = error
                delivery.done = True
            self._committing = False
            if error is None:
                self.group_commits += 1
                self.grouped += len(group)
            self._group.notify_all()

    def put_changes(self, changes: Sequence[Change], due_ns: int | None = None) -> None:
        """Queue changes again (a retry due at ``due_ns``, a released or revived change)."""
        key = time.time_ns() if due_ns is None else due_ns
        for i in range(0, len(changes), FILE_EVENTS):
            self._write(changes[i : i + FILE_EVENTS], key)
        if changes:
            _fsync_dir(self.dir)

    # -- reading ---------------------------------------------------------------------

    def take(
        self, max_events: int = MAX_BATCH_EVENTS, skip: frozenset[Path] = frozenset()
    ) -> list[tuple[Path, list[Change]]]:
        """The files due now, oldest key first, up to about ``max_events`` changes.

        ``skip``: files already taken and not yet :meth:`done` (a batch still being
        committed while the next one is read).
        """
        now = time.time_ns()
        found: list[tuple[Path, list[Change]]] = []
        total = 0
        for entry in self.refresh():
            if entry.key_ns > now or total >= max_events:
                break
            if entry.path in skip:
                continue
            try:
                data = orjson.loads(entry.path.read_bytes())
                changes = [Change.from_json(c) for c in data["changes"]]
            except FileNotFoundError:
                continue  # taken by a --retry-dead run or removed meanwhile
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                self._bury_file(entry.path, f"unreadable queue file: {exc}")
                continue
            found.append((entry.path, changes))
            total += len(changes)
        return found

    def done(self, paths: Sequence[Path]) -> None:
        """Forget files whose changes are applied, retried, waiting or dead (all on disk)."""
        for path in paths:
            path.unlink(missing_ok=True)
        if paths:
            _fsync_dir(self.dir)
        self.refresh()

    # -- waiting, dead ---------------------------------------------------------------

    def hold(self, change: Change) -> None:
        """Keep a change of a type without a full-synced table (one file per record)."""
        path = self.waiting_dir / f"{change.event.resource_type}-{change.event.id}.json"
        with contextlib.suppress(FileNotFoundError, orjson.JSONDecodeError, KeyError):
            held = Change.from_json(orjson.loads(path.read_bytes()))
            change.first_ns = min(change.first_ns, held.first_ns)
        _write_durable(path, orjson.dumps(redact_json(change.to_json())))
        _fsync_dir(self.waiting_dir)
        self._refresh_waiting()

    def waiting(self) -> dict[str, int]:
        """Changes waiting for a full sync, per resource type."""
        counts: dict[str, int] = {}
        for path in self.waiting_dir.glob("*.json"):
            rtype = path.name.split("-", 1)[0]
            counts[rtype] = counts.get(rtype, 0) + 1
        return counts

    def release(self, types: set[str]) -> int:
        """Queue the waiting changes of ``types`` (their table now exists); how many."""
        moved = 0
        for path in sorted(self.waiting_dir.glob("*.json")):
            if path.name.split("-", 1)[0] not in types:
                continue
            try:
                change = Change.from_json(orjson.loads(path.read_bytes()))
            except FileNotFoundError:
                continue
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                self._bury_file(path, f"unreadable waiting file: {exc}")
                continue
            self.put_changes([change])
            path.unlink(missing_ok=True)
            moved += 1
        if moved:
            _fsync_dir(self.waiting_dir)
            self._refresh_waiting()
        return moved

    def bury(self, change: Change, reason: str) -> None:
        """Move a change that cannot be applied to ``dead/``, with the reason."""
        event = change.event
        name = f"{time.time_ns():020d}-{event.resource_type}-{event.id}.json"
        payload = {
            "change": change.to_json(),
            "reason": reason,
            "dead_at": _iso(time.time()),
            "first_received": _iso(change.first_ns / 1e9),
        }
        self._bound_dead(write_dead_letter(self.dead_dir, name, payload))
        note(
            logging.WARNING,
            "%s/%s moved to the dead letters after %d attempt(s): %s",
            event.resource_type,
            event.id,
            change.attempts,
            reason,
        )

    def _bury_file(self, path: Path, reason: str) -> None:
        """A file that cannot be read: kept whole among the dead letters, with the reason."""
        try:
            raw = path.read_bytes().decode("utf-8", "replace")
        except OSError:
            raw = ""
        written = write_dead_letter(
            self.dead_dir,
            f"{time.time_ns():020d}-unreadable.json",
            {"file": path.name, "content": raw[:100_000], "reason": reason},
        )
        self._bound_dead(written)
        path.unlink(missing_ok=True)
        note(logging.WARNING, "queue file %s set aside: %s", path.name, reason)

    def dead(self) -> int:
        return sum(1 for p in os.listdir(self.dead_dir) if p.endswith(".json"))

    def _bound_dead(self, written: Path | None = None) -> None:
        """Remove the oldest dead letters beyond :attr:`max_dead` files or
        :attr:`max_dead_bytes` bytes, and count them in ``dead-evicted.json``.

        Names start with the time of death, so the sorted names are oldest first. The
        newest letter is always kept, however large.
        """
        with self._dead_lock:
            if self._dead_cache is None:  # read once; then kept up to date here
                self._dead_cache = collections.deque()
                for path in sorted(self.dead_dir.glob("*.json")):
                    with contextlib.suppress(OSError):
                        self._dead_cache.append((path, path.stat().st_size))
            elif written is not None:
                with contextlib.suppress(OSError):
                    self._dead_cache.append((written, written.stat().st_size))
            letters = self._dead_cache
            total = sum(size for _path, size in letters)
            evicted = 0
            while len(letters) > 1 and (
                len(letters) > self.max_dead or total > self.max_dead_bytes
            ):
                path, size = letters.popleft()
                total -= size
                try:
                    path.unlink()
                except FileNotFoundError:
                    continue  # requeued or removed by someone else: not an eviction
                evicted += 1
            if not evicted:
                return
            _fsync_dir(self.dead_dir)
            count = self.evicted() + evicted
            _write_durable(
                self._evicted_path, orjson.dumps({"evicted": count, "last_at": _iso(time.time())})
            )
        note(
            logging.WARNING,
            "removed the %d oldest dead letter(s) to keep at most %d letters and %d bytes "
            "(%d removed so far)",
            evicted,
            self.max_dead,
            self.max_dead_bytes,
            count,
        )

    def evicted(self) -> int:
        """Dead letters removed so far to keep the bounds (from ``dead-evicted.json``)."""
        try:
            return int(orjson.loads(self._evicted_path.read_bytes())["evicted"])
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return 0

    def dead_letters(self) -> list[dict[str, Any]]:
        """Each dead letter, oldest first: file, record, attempts, when and why."""
        found: list[dict[str, Any]] = []
        for path in sorted(self.dead_dir.glob("*.json")):
            try:
                data = orjson.loads(path.read_bytes())
            except FileNotFoundError:
                continue
            except (OSError, orjson.JSONDecodeError) as exc:
                found.append({"file": path.name, "reason": f"unreadable: {exc}"})
                continue
            change = data.get("change") if isinstance(data, dict) else None
            entry: dict[str, Any] = {"file": path.name}
            if isinstance(change, dict):
                entry["record"] = f"{change.get('type')}/{change.get('id')}"
                entry["action"] = change.get("action")
                entry["attempts"] = change.get("attempts")
            entry["dead_at"] = data.get("dead_at") if isinstance(data, dict) else None
            entry["reason"] = str(data.get("reason")) if isinstance(data, dict) else "?"
            found.append(entry)
        return found

    def requeue_dead(self) -> tuple[int, int]:
        """Queue every dead letter again, attempts reset: ``(requeued, unreadable kept)``."""
        requeued = kept = 0
        for path in sorted(self.dead_dir.glob("*.json")):
            try:
                data = orjson.loads(path.read_bytes())
                change = Change.from_json(data["change"])
            except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                kept += 1  # an unreadable queue file: nothing to queue; left for a person
                continue
            change.attempts = 0
            change.last_error = None
            self.put_changes([change])
            path.unlink(missing_ok=True)
            requeued += 1
        if requeued:
            _fsync_dir(self.dead_dir)
        return requeued, kept

    def oldest_ns(self) -> int | None:
        """When the oldest unapplied change (queued or waiting) was first received."""
        firsts = [e.first_ns for e in self._entries()]
        for path in self.waiting_dir.glob("*.json"):
            with contextlib.suppress(OSError, orjson.JSONDecodeError, KeyError, TypeError):
                firsts.append(int(orjson.loads(path.read_bytes())["first_ns"]))
        return min(firsts) if firsts else None


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")


def _outcome(status: int, code: str, text: str, severity: str = "error") -> Any:
    from starlette.responses import Response

    body = orjson.dumps(
        {
            "resourceType": "OperationOutcome",
            "issue": [
                {"severity": severity, "code": code, "diagnostics": text, "details": {"text": text}}
            ],
        }
    )
    headers = {"www-authenticate": "Bearer"} if status == 401 else None
    return Response(body, status_code=status, media_type="application/fhir+json", headers=headers)


@dataclass(slots=True)
class ListenerStats:
    """Counters of a running :class:`Listener` (read them with ``listener.stats``)."""

    received: int = 0
    """Notifications acknowledged (202)."""
    refused: int = 0
    """Calls answered 4xx/5xx."""
    events_queued: int = 0
    ignored: int = 0
    """Events of a resource type pmtk keeps no table of (accepted, logged, not queued)."""
    applied: int = 0
    """Changes applied to the store."""
    requests: int = 0
    """GET requests the worker sent to read changed records."""
    batches: int = 0
    retried: int = 0
    """Changes whose read failed and that were queued again for later."""
    held: int = 0
    """Changes set to wait for a full sync of their type."""
    failures: int = 0
    """Changes moved to the dead letters (a permanent error, too many attempts, a bad record)."""
    restarts: int = 0
    """Times the worker failed as a whole and was started again."""
    last_error: str | None = None
    last_error_at: float | None = None
    resolved_error: str | None = None
    """The last error cleared because the thing that failed has since succeeded."""
    resolved_error_at: float | None = None
    catch_up: str = "not run"
    gaps_healed: int = 0
    """Gaps in the event numbers healed by a sync of the types concerned."""
    applied_at: dict[str, float] = field(default_factory=dict)
    """``"Type/id" -> time.time()`` of the latest application (the last 10,000 records)."""


class _Retry(Exception):
    """A transient failure: try again later."""
