"""The receiver's journal (``toolkit/webhooks/journal.py``) in-process, read with plain ``sqlite3``.

Expected behaviour comes from the module's docstrings and ``docs/store.md`` ("The
journal and its failure modes"): one row per change with an explicit state
(``queued`` -> ``claimed`` -> ``read`` -> gone once the store committed it; or back to
``queued`` due later, ``waiting`` one row per record, ``dead`` with the reason), every
move one transaction, the worker taking the changes due now oldest due first, the
latest announcement of a record winning, dead letters bounded in rows and bytes with
the oldest evicted and counted. The journal file is read with a second, plain
``sqlite3`` connection, so what a test sees is what a restarted receiver would find.

A crash is simulated at every state change in two ways: an exception raised inside
the step's transaction after its writes (the rows must be those before the step), and
the connection closed there (a process gone before its commit). Time is a fake clock
in the module under test (``journal.time``, and ``queue.time`` where the journal's row
insert lives), so due times are exact, not raced.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from toolkit.redaction import register
from toolkit.webhooks import journal as journal_module
from toolkit.webhooks import queue as queue_module
from toolkit.webhooks.events import Event
from toolkit.webhooks.journal import STATES, EventQueue, JournalError, Settled
from toolkit.webhooks.queue import Change

SECRET = "journal-bites-s3cret-\u00e9-9f2c"
"""Registered for redaction: it must never reach the journal file."""
register(SECRET)

T0 = 1_800_000_000_123_456_789
"""The fake clock's start (ns): 2027-01-15T08:00:00.123 UTC."""
SECOND = 1_000_000_000


class Clock:
    """Stands in for the modules' ``time``: ``time_ns`` and ``time`` from one counter."""

    def __init__(self) -> None:
        self.ns = T0

    def time_ns(self) -> int:
        return self.ns

    def time(self) -> float:
        return self.ns / 1e9


class Crash(Exception):
    """A failure inside a journal transaction (the process dies there)."""


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(journal_module, "time", fake)
    monkeypatch.setattr(queue_module, "time", fake)  # insert_changes stamps due_ns there
    return fake


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def queue(store: Path, clock: Clock) -> Iterator[EventQueue]:
    q = EventQueue(store)
    yield q
    with contextlib.suppress(Exception):
        q.close()


@pytest.fixture
def messages() -> Iterator[Callable[[], list[str]]]:
    """The receiver's log lines so far (formatted here: a broken format string fails)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    log = logging.getLogger("pmtk.listen")
    handler, level = Keep(logging.DEBUG), log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    yield lambda: [r.getMessage() for r in records]
    log.removeHandler(handler)
    log.setLevel(level)


def ev(rid: str, rtype: str = "Appointment", action: str | None = "update", n: int = 1) -> Event:
    return Event(rtype, rid, action, "2026-11-23T10:00:00Z", str(n))


def journal_path(store: Path) -> Path:
    return store / ".webhooks" / "journal.sqlite3"


def rows(store: Path) -> list[dict[str, Any]]:
    """Every row of the journal as a second process would read it (committed only)."""
    with contextlib.closing(sqlite3.connect(journal_path(store))) as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute("SELECT * FROM changes ORDER BY id")]


def view(store: Path) -> list[tuple[str, str, str, str | None]]:
    """``(state, type, id, eventNumber)`` of each row: what a crash must keep or lose whole."""
    return [
        (r["state"], r["rtype"], r["rid"], orjson.loads(r["event"])["event_number"])
        for r in rows(store)
    ]


def latest_per_record(batch: list[Change]) -> list[Change]:
    """A plain reading of "the latest announcement of a record wins": the last of each
    record in the order taken, its earlier rows merged into it."""
    merged: dict[tuple[str, str], Change] = {}
    for change in batch:
        earlier = merged.pop(change.key, None)
        if earlier is not None:
            change.rows = [*earlier.rows, *change.rows]
            change.first_ns = min(change.first_ns, earlier.first_ns)
        merged[change.key] = change
    return list(merged.values())


def iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="milliseconds")


# -- intake ----------------------------------------------------------------------------


def test_put_journals_each_event_queued_with_what_a_restart_needs(
    queue: EventQueue, store: Path
) -> None:
    events = [ev("101", n=1), ev("102", "Patient", "create", 2), ev("103", action=None, n=3)]
    assert queue.put(events, "2026-11-23T10:00:01Z") == 3
    got = rows(store)
    assert [(r["state"], r["rtype"], r["rid"]) for r in got] == [
        ("queued", "Appointment", "101"),
        ("queued", "Patient", "102"),
        ("queued", "Appointment", "103"),
    ]
    for row, event in zip(got, events, strict=True):
        assert orjson.loads(row["event"]) == event.to_json()
        assert (row["first_ns"], row["due_ns"], row["attempts"]) == (T0, T0, 0)
        assert row["last_error"] is None and row["record"] is None and row["gone"] == 0
        assert row["received_at"] == "2026-11-23T10:00:01Z"
        assert row["size"] == len(row["event"]) + 64  # the event and a row's overhead
        assert row["reason"] is None and row["dead_at"] is None
    assert queue.count() == 3
    assert queue.bytes() == sum(r["size"] for r in got)
    assert queue.states() == {"queued": 3, "claimed": 0, "read": 0, "waiting": 0, "dead": 0}
    assert queue.oldest_ns() == T0
    assert (queue.group_commits, queue.grouped) == (1, 1)


def test_nothing_to_put_writes_nothing_and_counts_no_commit(queue: EventQueue, store: Path) -> None:
    assert queue.put([], "2026-11-23T10:00:01Z") == 0
    assert rows(store) == []
    assert (queue.group_commits, queue.grouped) == (0, 0)
    assert queue.count() == 0 and queue.bytes() == 0 and queue.oldest_ns() is None
    assert queue.seconds_to_next_due() is None
    assert queue.states() == dict.fromkeys(STATES, 0)


def test_each_notification_alone_is_its_own_group_commit(queue: EventQueue) -> None:
    queue.put([ev("1")], "a")
    queue.put([ev("2"), ev("3")], "b")
    assert (queue.group_commits, queue.grouped) == (2, 2)
    assert queue.count() == 3


def test_a_secret_inside_an_event_never_reaches_the_journal(queue: EventQueue, store: Path) -> None:
    leaky = Event("Appointment", "7", "update", f"2026-11-23T10:00:00Z {SECRET}", "1")
    queue.put([leaky], "2026-11-23T10:00:01Z")
    data = journal_path(store).read_bytes() + b"".join(
        p.read_bytes() for p in journal_path(store).parent.glob("journal.sqlite3-*")
    )
    assert SECRET.encode() not in data
    assert orjson.loads(rows(store)[0]["event"])["timestamp"] == "2026-11-23T10:00:00Z <redacted>"


def _block_intake(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Hold the first intake transaction open until released: (inside, release)."""
    inside, release = threading.Event(), threading.Event()
    real = journal_module.insert_changes

    def slow(db: sqlite3.Connection, changes: Any, state: str, due_ns: Any = None) -> None:
        if not inside.is_set():
            inside.set()
            assert release.wait(10)
        real(db, changes, state, due_ns)

    monkeypatch.setattr(journal_module, "insert_changes", slow)
    return inside, release


def _wait_for(predicate: Callable[[], bool], what: str) -> None:
    done = threading.Event()
    for _ in range(1000):
        if predicate():
            return
        done.wait(0.005)
    raise AssertionError(what)


def test_notifications_arriving_during_a_commit_share_the_next_one(
    queue: EventQueue, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inside, release = _block_intake(monkeypatch)
    answers: dict[str, int] = {}

    def deliver(name: str, events: list[Event]) -> None:
        answers[name] = queue.put(events, name)

    first = threading.Thread(target=deliver, args=("first", [ev("1")]))
    first.start()
    assert inside.wait(10)
    later = [
        threading.Thread(target=deliver, args=("second", [ev("2"), ev("3")])),
        threading.Thread(target=deliver, args=("third", [ev("4")])),
    ]
    for thread in later:
        thread.start()
    _wait_for(lambda: len(queue._arrived) == 2, "the later notifications did not wait")
    assert answers == {}  # nobody hears back before the commit
    assert rows(store) == []  # nothing committed yet
    release.set()
    for thread in [first, *later]:
        thread.join(10)
        assert not thread.is_alive()
    assert answers == {"first": 1, "second": 2, "third": 1}
    assert (queue.group_commits, queue.grouped) == (2, 3)
    assert sorted(r["rid"] for r in rows(store)) == ["1", "2", "3", "4"]
    assert {r["received_at"] for r in rows(store)} == {"first", "second", "third"}


def test_a_notification_arriving_during_the_second_group_commit_is_answered_too(
    queue: EventQueue, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three group commits in a row: every waiter is woken when its group is done, not
    only the next one (one left asleep would never answer its sender)."""
    gates = [threading.Event(), threading.Event()]
    inside = [threading.Event(), threading.Event()]
    real = journal_module.insert_changes
    calls = {"n": 0}

    def gated(db: sqlite3.Connection, changes: Any, state: str, due_ns: Any = None) -> None:
        n = calls["n"]
        calls["n"] += 1
        if n < len(gates):
            inside[n].set()
            assert gates[n].wait(10)
        real(db, changes, state, due_ns)

    monkeypatch.setattr(journal_module, "insert_changes", gated)
    answers: dict[str, int] = {}

    def deliver(name: str) -> threading.Thread:
        thread = threading.Thread(
            target=lambda: answers.update({name: queue.put([ev(name)], name)})
        )
        thread.start()
        return thread

    threads = [deliver("1")]
    assert inside[0].wait(10)
    threads += [deliver("2"), deliver("3")]
    _wait_for(lambda: len(queue._arrived) == 2, "the second group did not gather")
    gates[0].set()
    assert inside[1].wait(10)  # the second group commits
    threads.append(deliver("4"))
    _wait_for(lambda: len(queue._arrived) == 1, "the third group did not gather")
    gates[1].set()
    for thread in threads:
        thread.join(10)
    assert answers == {"1": 1, "2": 1, "3": 1, "4": 1}
    assert (queue.group_commits, queue.grouped) == (3, 4)
    assert sorted(r["rid"] for r in rows(store)) == ["1", "2", "3", "4"]


def test_a_failed_group_commit_fails_every_notification_of_the_group(
    queue: EventQueue, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inside, release = _block_intake(monkeypatch)
    real = journal_module.insert_changes
    errors: dict[str, str] = {}

    def deliver(name: str, events: list[Event]) -> None:
        try:
            queue.put(events, name)
        except JournalError as exc:
            errors[name] = str(exc)

    first = threading.Thread(target=deliver, args=("first", [ev("1")]))
    first.start()
    assert inside.wait(10)
    second = threading.Thread(target=deliver, args=("second", [ev("2")]))
    third = threading.Thread(target=deliver, args=("third", [ev("3")]))
    second.start()
    third.start()
    _wait_for(lambda: len(queue._arrived) == 2, "the later notifications did not wait")

    def full(db: sqlite3.Connection, changes: Any, state: str, due_ns: Any = None) -> None:
        real(db, changes, state, due_ns)  # written, then the disk fills
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(journal_module, "insert_changes", full)
    release.set()
    for thread in (first, second, third):
        thread.join(10)
        assert not thread.is_alive()
    assert set(errors) == {"second", "third"}  # the first group committed
    for text in errors.values():
        assert text.startswith("writing the event journal failed: JournalError: ")
        assert f"the journal {queue.path} cannot be written (intake)" in text
        assert "database or disk is full" in text
    assert [r["rid"] for r in rows(store)] == ["1"]
    assert (queue.group_commits, queue.grouped) == (1, 1)  # the failed group is not counted
    monkeypatch.setattr(journal_module, "insert_changes", real)
    done = threading.Thread(target=deliver, args=("after", [ev("5")]))
    done.start()
    done.join(10)
    assert not done.is_alive(), "a failed commit left the intake blocked"
    assert [r["rid"] for r in rows(store)] == ["1", "5"]
    assert (queue.group_commits, queue.grouped) == (2, 2)


def test_a_non_sqlite_failure_in_the_intake_is_named_and_nothing_is_kept(
    queue: EventQueue, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> None:
        raise MemoryError("no room for the event")

    monkeypatch.setattr(journal_module, "insert_changes", broken)
    with pytest.raises(JournalError) as caught:
        queue.put([ev("1")], "a")
    assert (
        str(caught.value) == "writing the event journal failed: MemoryError: no room for the event"
    )
    assert isinstance(caught.value.__cause__, MemoryError)
    assert rows(store) == [] and queue.count() == 0


# -- transactions ----------------------------------------------------------------------


def test_an_sqlite_error_in_a_move_is_a_journal_error_naming_the_step_and_rolls_back(
    queue: EventQueue, store: Path
) -> None:
    queue.put([ev("1")], "a")
    with pytest.raises(JournalError) as caught, queue._transaction("claim") as db:
        db.execute("UPDATE changes SET state = 'claimed'")
        db.execute("UPDATE changes SET state = 'nonsense'")  # the CHECK refuses it
    text = str(caught.value)
    assert text.startswith(f"the journal {queue.path} cannot be written (claim): ")
    assert "CHECK constraint failed" in text
    assert isinstance(caught.value.__cause__, sqlite3.IntegrityError)
    assert [r["state"] for r in rows(store)] == ["queued"]  # the first update rolled back
    queue.take()  # the connection is usable again (no transaction left open)
    assert [r["state"] for r in rows(store)] == ["claimed"]


MOVES: dict[str, Callable[[EventQueue, list[Change]], object]] = {
    # each public move and the name of its transaction (the kill-point hooks use them)
    "intake": lambda q, _c: q.put([ev("9")], "a"),
    "requeue": lambda q, c: q.put_changes([c[0]]),
    "claim": lambda q, _c: q.take(),
    "read": lambda q, c: q.settle(Settled(read=[(c[0], None)])),
    "applied": lambda q, c: q.finish([c[0]]),
    "unclaim": lambda q, c: q.unclaim([c[0]]),
    "recover": lambda q, _c: q.recover(),
    "waiting": lambda q, c: q.hold(c[0]),
    "release": lambda q, _c: q.release({"Appointment"}),
    "dead": lambda q, c: q.bury(c[0], "refused"),
    "requeue-dead": lambda q, _c: q.requeue_dead(),
}


@pytest.mark.parametrize("move", sorted(MOVES))
def test_a_move_the_disk_refuses_names_its_step_and_changes_nothing(
    move: str, queue: EventQueue, store: Path
) -> None:
    queue.put([ev("1"), ev("2"), ev("3"), ev("4")], "a")
    taken, held, buried = ([c] for c in queue.take(3))  # one of each state to move
    queue.hold(held[0])
    queue.bury(buried[0], "refused")
    before = rows(store)
    with contextlib.closing(sqlite3.connect(journal_path(store))) as db, db:
        for what in ("INSERT", "UPDATE", "DELETE"):
            db.execute(
                f"CREATE TRIGGER refuse_{what.lower()} BEFORE {what} ON changes "
                "BEGIN SELECT RAISE(ABORT, 'the disk says no'); END"
            )
    with pytest.raises(JournalError) as caught:
        MOVES[move](queue, taken)
    step = move.removesuffix("-dead")
    assert f"cannot be written ({step}): the disk says no" in str(caught.value)
    assert rows(store) == before


def test_any_other_failure_in_a_move_propagates_as_is_and_rolls_back(
    queue: EventQueue, store: Path
) -> None:
    queue.put([ev("1")], "a")
    with pytest.raises(Crash), queue._transaction("read") as db:
        db.execute("DELETE FROM changes")
        raise Crash
    assert len(rows(store)) == 1
    assert queue.count() == 1


def test_a_closed_journal_refuses_reads_and_moves_with_its_path(
    queue: EventQueue, store: Path
) -> None:
    queue.put([ev("1")], "a")
    queue.close()
    with pytest.raises(JournalError) as read:
        queue.states()
    assert str(read.value).startswith(f"the journal {queue.path} cannot be read: ")
    with pytest.raises(JournalError) as write:
        queue.release({"Appointment"})
    assert str(write.value).startswith(f"the journal {queue.path} cannot be written: ")
    assert isinstance(write.value.__cause__, sqlite3.ProgrammingError)
    assert len(rows(store)) == 1


def test_the_journal_is_a_wal_file_synced_at_every_commit(queue: EventQueue, store: Path) -> None:
    assert queue.path == journal_path(store)
    with contextlib.closing(sqlite3.connect(queue.path)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert queue._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert queue._conn.execute("PRAGMA temp_store").fetchone()[0] == 2  # MEMORY
    # a sync or a second receiver holding the file is waited for 30 s, not sqlite3's 5 s
    assert queue._conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
    assert queue._conn.isolation_level is None  # each move's BEGIN IMMEDIATE, none implicit


def test_a_damaged_journal_file_says_to_move_it_aside(store: Path, clock: Clock) -> None:
    path = journal_path(store)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a database at all, " * 100)
    with pytest.raises(JournalError) as caught:
        EventQueue(store)
    text = str(caught.value)
    assert text.startswith(f"the event journal {path} cannot be opened (DatabaseError: ")
    assert text.endswith(
        "); move it aside to start an empty one (its unapplied changes are then healed by a "
        "catch-up sync)"
    )


def test_a_file_system_that_refuses_wal_is_refused_by_name(
    store: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite answers ``PRAGMA journal_mode=WAL`` with the mode kept when it cannot change
    it (a network share without shared memory): the journal then refuses to start."""
    real = sqlite3.connect
    opened: list[Any] = []

    class NoWal:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn, self.closed = conn, False

        def execute(self, sql: str, *args: Any) -> Any:
            if sql.upper().replace(" ", "") == "PRAGMAJOURNAL_MODE=WAL":
                return self.conn.execute("SELECT 'delete'")
            return self.conn.execute(sql, *args)

        def executescript(self, sql: str) -> Any:
            return self.conn.executescript(sql)

        def close(self) -> None:
            self.closed = True
            self.conn.close()

    def connect(*args: Any, **kwargs: Any) -> NoWal:
        opened.append(NoWal(real(*args, **kwargs)))
        return opened[-1]

    monkeypatch.setattr(journal_module.sqlite3, "connect", connect)
    with pytest.raises(JournalError) as caught:
        EventQueue(store)
    path = journal_path(store)
    assert str(caught.value) == f"the event journal {path} cannot use WAL mode (got 'delete')"
    assert [c.closed for c in opened] == [True]


# -- counts ----------------------------------------------------------------------------


def test_count_leaves_out_waiting_and_dead_bytes_count_every_unapplied_state(
    queue: EventQueue, store: Path
) -> None:
    queue.put([ev("1"), ev("2"), ev("3", "Invoice"), ev("4"), ev("5")], "a")
    one, two, invoice, four, five = queue.take()
    queue.settle(Settled(read=[(two, {"resourceType": "Appointment", "id": "2"})]))
    queue.settle(Settled(hold=[invoice], dead=[(four, "refused: 400")]))
    queue.unclaim([five])  # one, two: claimed and read
    sizes = {r["rid"]: r["size"] for r in rows(store)}
    assert queue.states() == {"queued": 1, "claimed": 1, "read": 1, "waiting": 1, "dead": 1}
    assert queue.count() == 3  # queued, claimed, read
    assert queue.bytes() == sizes["1"] + sizes["2"] + sizes["3"] + sizes["5"]  # dead left out
    assert queue.waiting() == {"Invoice": 1}
    assert queue.dead() == 1
    assert one.event.id == "1"


def test_over_cap_at_the_cap_not_one_byte_below(store: Path, clock: Clock) -> None:
    probe = EventQueue(store)
    probe.put([ev("1")], "a")
    size = probe.bytes()
    probe.close()
    at = EventQueue(store, size)
    below = EventQueue(store, size + 1)
    assert at.max_bytes == size
    assert at.over_cap() and not below.over_cap()
    at.close()
    below.close()


def test_counts_are_of_the_journal_on_disk_after_refresh(store: Path, clock: Clock) -> None:
    mine, other = EventQueue(store), EventQueue(store)  # another process on the same file
    other.put([ev("1"), ev("2")], "a")
    assert mine.count() == 0  # as last counted
    mine.refresh()
    assert (mine.count(), mine.bytes()) == (2, other.bytes())
    mine.close()
    other.close()


def test_the_next_due_is_the_earliest_retry_not_a_change_due_now(
    queue: EventQueue, clock: Clock
) -> None:
    queue.put([ev("1"), ev("2"), ev("3")], "a")
    assert queue.seconds_to_next_due() is None  # all due now: nothing to wait for
    one, two, three = queue.take()
    queue.settle(Settled(retry=[(one, T0 + 5 * SECOND), (two, T0 + 2 * SECOND)]))
    assert queue.seconds_to_next_due() == 2.0
    clock.ns = T0 + 3 * SECOND  # past it: 0, never negative (not refreshed yet)
    assert queue.seconds_to_next_due() == 0.0
    queue.refresh()
    assert queue.seconds_to_next_due() == 2.0  # the other one, five seconds after T0
    assert three.event.id == "3"


def test_oldest_is_the_earliest_first_receipt_of_an_unapplied_change(
    queue: EventQueue, clock: Clock
) -> None:
    queue.put([ev("1")], "a")
    clock.ns += SECOND
    queue.put([ev("2", "Invoice")], "b")
    clock.ns += SECOND
    queue.put([ev("3")], "c")
    one, invoice, three = queue.take()
    queue.settle(Settled(hold=[invoice]))
    assert queue.oldest_ns() == T0
    queue.finish([one])
    assert queue.oldest_ns() == T0 + SECOND  # the waiting one counts
    queue.settle(Settled(dead=[(three, "refused")]))
    queue.finish([invoice])
    assert queue.oldest_ns() is None  # a dead letter is not unapplied


# -- the worker's moves ------------------------------------------------------------------


def test_take_claims_what_is_due_oldest_due_first_then_in_arrival_order(
    queue: EventQueue, store: Path, clock: Clock
) -> None:
    queue.put([ev("a"), ev("b")], "r1")
    a, b = queue.take()
    queue.settle(Settled(retry=[(a, T0 + 3 * SECOND), (b, T0 + 1 * SECOND)]))
    clock.ns = T0 + SECOND
    queue.put([ev("c"), ev("d")], "r2")  # due now, as b is: b arrived first
    queue.put_changes([Change(ev("e"), T0)], due_ns=T0 + 4 * SECOND)
    assert [c.event.id for c in queue.take()] == ["b", "c", "d"]  # a (due in 2 s) stays
    assert queue.take() == []
    clock.ns = T0 + 3 * SECOND  # a exactly due
    assert [c.event.id for c in queue.take()] == ["a"]
    clock.ns = T0 + 4 * SECOND - 1  # e due one nanosecond later
    assert queue.take() == []
    clock.ns += 1
    assert [c.event.id for c in queue.take()] == ["e"]
    assert {r["state"] for r in rows(store)} == {"claimed"}


def test_take_is_bounded_and_each_change_claimed_once(queue: EventQueue, store: Path) -> None:
    queue.put([ev(str(n)) for n in range(5)], "a")
    first = queue.take(2)
    assert [c.event.id for c in first] == ["0", "1"]
    assert [r["state"] for r in rows(store)] == ["claimed"] * 2 + ["queued"] * 3
    assert [c.event.id for c in queue.take(1)] == ["2"]
    assert [c.event.id for c in queue.take(0)] == ["3"]  # at least one a batch
    assert [c.event.id for c in queue.take()] == ["4"]
    assert queue.take() == []
    assert queue.count() == 5  # claimed, still unapplied


def test_take_gives_each_change_as_journaled(queue: EventQueue, store: Path) -> None:
    queue.put_changes(
        [Change(ev("9", "Invoice", "delete", 4), 12345, 3, "HTTP 503", "2026-11-23T10:00:09Z")]
    )
    (change,) = queue.take()
    assert change.event == ev("9", "Invoice", "delete", 4)
    assert (change.first_ns, change.attempts, change.last_error) == (12345, 3, "HTTP 503")
    assert change.received_at == "2026-11-23T10:00:09Z"
    assert change.rows == [rows(store)[0]["id"]]


def test_a_change_received_without_a_time_keeps_none(queue: EventQueue) -> None:
    queue.put([ev("1")], "")
    (change,) = queue.take()
    assert change.received_at == ""


def test_take_with_nothing_due_opens_no_transaction(
    queue: EventQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.put([ev("1", "Invoice")], "a")
    (invoice,) = queue.take()
    queue.hold(invoice)
    steps: list[str] = []
    real = EventQueue._transaction

    def named(self: EventQueue, step: str) -> Any:
        steps.append(step)
        return real(self, step)

    monkeypatch.setattr(EventQueue, "_transaction", named)
    assert queue.take() == []
    queue.unclaim([])
    queue.put_changes([])
    assert queue.release(set()) == 0
    assert steps == []


def test_settle_writes_every_outcome_of_a_batch(
    queue: EventQueue, store: Path, clock: Clock
) -> None:
    queue.put([ev("1"), ev("2", action="delete"), ev("3"), ev("4", "Invoice"), ev("5")], "a")
    read, gone, retried, invoice, refused = queue.take()
    retried.attempts, retried.last_error = 2, f"HTTP 503 from a proxy that echoed {SECRET}"
    refused.attempts, refused.last_error = 1, None
    clock.ns = T0 + 7
    record = {"resourceType": "Appointment", "id": "1", "description": "read \u00e9"}
    queue.settle(
        Settled(
            read=[(read, record), (gone, None)],
            retry=[(retried, T0 + 9 * SECOND)],
            hold=[invoice],
            dead=[(refused, "reading it failed: HTTP 400")],
        )
    )
    by_id = {r["rid"]: r for r in rows(store)}
    assert by_id["1"]["state"] == "read" and orjson.loads(by_id["1"]["record"]) == record
    assert by_id["1"]["gone"] == 0
    assert by_id["2"]["state"] == "read" and by_id["2"]["record"] is None
    assert by_id["2"]["gone"] == 1
    assert by_id["3"]["state"] == "queued" and by_id["3"]["due_ns"] == T0 + 9 * SECOND
    assert by_id["3"]["attempts"] == 2
    assert by_id["3"]["last_error"] == "HTTP 503 from a proxy that echoed <redacted>"
    assert by_id["4"]["state"] == "waiting"
    dead = by_id["5"]
    assert dead["state"] == "dead" and dead["reason"] == "reading it failed: HTTP 400"
    assert dead["dead_at"] == iso(T0 + 7) and dead["attempts"] == 1
    assert dead["last_error"] is None and dead["record"] is None
    assert queue.count() == 3 and queue.waiting() == {"Invoice": 1}
    assert SECRET.encode() not in journal_path(store).read_bytes()


def test_recover_queues_the_claimed_and_returns_the_read_with_their_records(
    queue: EventQueue, store: Path
) -> None:
    queue.put([ev("1"), ev("2"), ev("3"), ev("4")], "a")
    one, two, three, four = queue.take()
    record = {"resourceType": "Appointment", "id": "3"}
    queue.settle(Settled(read=[(three, record), (one, None)]))
    found = queue.recover()
    assert [(c.event.id, r) for c, r in found] == [("1", None), ("3", record)]  # row order
    assert [c.rows for c, _r in found] == [one.rows, three.rows]
    assert {r["rid"]: r["state"] for r in rows(store)} == {
        "1": "read",
        "2": "queued",
        "3": "read",
        "4": "queued",
    }
    assert [c.event.id for c in queue.take()] == ["2", "4"]
    assert two.rows != four.rows


def test_the_apis_word_that_a_record_is_gone_wins_over_a_record_kept(
    queue: EventQueue, store: Path
) -> None:
    queue.put([ev("1")], "a")
    (one,) = queue.take()
    queue.settle(Settled(read=[(one, {"resourceType": "Appointment", "id": "1"})]))
    with contextlib.closing(sqlite3.connect(journal_path(store))) as db, db:
        db.execute("UPDATE changes SET gone = 1")  # a row written by another version
    ((change, record),) = queue.recover()
    assert change.event.id == "1" and record is None


def test_finish_forgets_every_row_of_the_applied_and_buries_the_refused_at_once(
    queue: EventQueue, store: Path, messages: Callable[[], list[str]]
) -> None:
    queue.put([ev("1", n=1), ev("2"), ev("1", n=2), ev("3")], "a")
    batch = latest_per_record(queue.take())
    two, one, three = batch
    assert one.event.event_number == "2" and len(one.rows) == 2
    queue.settle(
        Settled(read=[(c, {"resourceType": "Appointment", "id": c.event.id}) for c in batch])
    )
    three.attempts = 1
    queue.finish([two, one], [(three, "the record fails its schema: x")])
    assert [(r["rid"], r["state"]) for r in rows(store)] == [("3", "dead")]
    assert rows(store)[0]["reason"] == "the record fails its schema: x"
    assert queue.count() == 0 and queue.dead() == 1
    assert messages() == [
        "Appointment/3 moved to the dead letters after 1 attempt(s): the record fails its schema: x"
    ]


def test_unclaim_queues_again_as_it_was_forgetting_the_read(
    queue: EventQueue, store: Path, clock: Clock
) -> None:
    queue.put([ev("1"), ev("2")], "a")
    one, two = queue.take()
    one.attempts = 4  # as journaled by an earlier retry; unclaim counts none
    queue.settle(Settled(read=[(one, None), (two, {"resourceType": "Appointment", "id": "2"})]))
    clock.ns += SECOND
    queue.unclaim([one, two])
    got = rows(store)
    assert [(r["state"], r["record"], r["gone"]) for r in got] == [("queued", None, 0)] * 2
    assert [r["attempts"] for r in got] == [0, 0]
    assert [r["due_ns"] for r in got] == [T0, T0]  # as it was: due, taken first again
    assert [c.event.id for c in queue.take()] == ["1", "2"]


# -- the latest announcement wins ------------------------------------------------------------


def test_within_a_batch_the_newest_announcement_of_a_record_wins(
    queue: EventQueue, store: Path
) -> None:
    # one notification announcing the record twice, and a later one announcing it again
    queue.put([ev("1", action="create", n=1), ev("2", n=2), ev("1", n=3)], "r1")
    queue.put([ev("1", action="delete", n=4)], "r2")
    taken = queue.take()
    assert [(c.event.id, c.event.event_number) for c in taken] == [
        ("1", "1"),
        ("2", "2"),
        ("1", "3"),
        ("1", "4"),
    ]
    two, one = latest_per_record(taken)
    assert (one.event.action, one.event.event_number) == ("delete", "4")
    assert one.rows == [r["id"] for r in rows(store) if r["rid"] == "1"]
    queue.settle(Settled(read=[(one, None), (two, {"resourceType": "Appointment", "id": "2"})]))
    kept = [r for r in rows(store) if r["rid"] == "1"]
    assert len(kept) == 1  # the older rows of the record went with the merge
    assert orjson.loads(kept[0]["event"])["event_number"] == "4"
    assert kept[0]["state"] == "read" and kept[0]["gone"] == 1
    assert one.rows == [kept[0]["id"]]
    ((back, record),) = [(c, r) for c, r in queue.recover() if c.event.id == "1"]
    assert back.event.event_number == "4" and record is None


def test_across_batches_the_newest_announcement_is_taken_last(
    queue: EventQueue, store: Path, clock: Clock
) -> None:
    queue.put([ev("1", n=1)], "r1")
    (old,) = queue.take()
    queue.settle(Settled(retry=[(old, T0 + 2 * SECOND)]))  # its read failed
    clock.ns = T0 + SECOND
    queue.put([ev("1", n=2)], "r2")  # announced again meanwhile
    (new,) = queue.take()
    assert new.event.event_number == "2"
    clock.ns = T0 + 2 * SECOND
    (retry,) = queue.take()
    assert retry.event.event_number == "1"  # the older one, later: its read is current anyway
    assert len(rows(store)) == 2


def test_a_record_waits_in_one_row_with_its_newest_event_and_first_receipt(
    queue: EventQueue, store: Path, clock: Clock
) -> None:
    queue.put([ev("7", "Invoice", "create", 1)], "r1")
    (first,) = queue.take()
    queue.hold(first)
    clock.ns = T0 + SECOND
    queue.put([ev("7", "Invoice", "update", 2), ev("7", "Patient", n=3)], "r2")
    queue.put([ev("8", "Invoice", n=4)], "r3")
    second, patient, other = queue.take()
    queue.settle(Settled(hold=[second, patient, other]))
    waiting = [r for r in rows(store) if r["state"] == "waiting"]
    assert [(r["rtype"], r["rid"]) for r in waiting] == [
        ("Invoice", "7"),
        ("Patient", "7"),
        ("Invoice", "8"),
    ]
    invoice = waiting[0]
    assert orjson.loads(invoice["event"])["event_number"] == "2"
    assert invoice["first_ns"] == T0  # the earliest receipt of the record kept
    assert second.first_ns == T0
    assert [r["first_ns"] for r in waiting[1:]] == [T0 + SECOND, T0 + SECOND]
    assert queue.waiting() == {"Invoice": 2, "Patient": 1}
    assert queue.count() == 0


def test_a_newer_hold_keeps_an_earlier_receipt_of_its_own(
    queue: EventQueue, store: Path, clock: Clock
) -> None:
    clock.ns = T0 + SECOND
    queue.put([ev("7", "Invoice", n=1)], "r1")
    (first,) = queue.take()
    queue.hold(first)
    queue.put_changes([Change(ev("7", "Invoice", n=2), T0)])  # received earlier, revived
    (second,) = queue.take()
    queue.hold(second)
    (row,) = rows(store)
    assert (row["first_ns"], orjson.loads(row["event"])["event_number"]) == (T0, "2")


def test_release_queues_the_waiting_of_the_types_named_due_now(
    queue: EventQueue, store: Path, clock: Clock
) -> None:
    queue.put([ev("1", "Invoice"), ev("2", "Patient"), ev("3", "Invoice")], "a")
    for change in queue.take():
        queue.hold(change)
    clock.ns = T0 + 5 * SECOND
    assert queue.release({"Invoice", "Referral"}) == 2
    assert queue.waiting() == {"Patient": 1}
    queued = [r for r in rows(store) if r["state"] == "queued"]
    assert [(r["rid"], r["due_ns"]) for r in queued] == [
        ("1", T0 + 5 * SECOND),
        ("3", T0 + 5 * SECOND),
    ]
    assert queue.count() == 2
    assert queue.release({"Invoice"}) == 0
    assert queue.release({"Patient", "Invoice"}) == 1
    assert queue.waiting() == {}


# -- dead letters ----------------------------------------------------------------------------


def _dead(queue: EventQueue, clock: Clock, *ids: str, reason: str = "refused") -> list[Change]:
    """Journal, claim and bury one change per id, one millisecond apart."""
    queue.put([ev(i) for i in ids], "a")
    taken = queue.take(len(ids))
    for change in taken:
        clock.ns += 1_000_000
        change.attempts = 12
        queue.bury(change, reason)
    return taken


def test_a_dead_letter_keeps_when_why_and_how_often(
    queue: EventQueue, store: Path, clock: Clock, messages: Callable[[], list[str]]
) -> None:
    queue.put([ev("1", action="delete")], "a")
    (change,) = queue.take()
    change.attempts, change.last_error = 12, f"HTTP 500 {SECRET}"
    clock.ns = T0 + 42 * 1_000_000
    queue.bury(change, f"gave up after 12 attempt(s) over 1800 s; last error: {SECRET}")
    (row,) = rows(store)
    assert row["state"] == "dead" and row["attempts"] == 12
    assert row["reason"] == "gave up after 12 attempt(s) over 1800 s; last error: <redacted>"
    assert row["last_error"] == "HTTP 500 <redacted>"
    assert row["dead_at"] == iso(T0 + 42 * 1_000_000) == "2027-01-15T08:00:00.165+00:00"
    assert queue.dead_letters() == [
        {
            "file": f"journal row {row['id']}",
            "record": "Appointment/1",
            "action": "delete",
            "attempts": 12,
            "dead_at": "2027-01-15T08:00:00.165+00:00",
            "reason": "gave up after 12 attempt(s) over 1800 s; last error: <redacted>",
        }
    ]
    assert queue.dead() == 1 and queue.count() == 0 and queue.evicted() == 0
    assert queue.dead_bytes() == row["size"] + len(row["reason"])
    assert messages() == [
        "Appointment/1 moved to the dead letters after 12 attempt(s): "
        "gave up after 12 attempt(s) over 1800 s; last error: <redacted>"
    ]


def test_a_change_made_by_hand_is_buried_with_a_row_of_its_own(
    queue: EventQueue, store: Path
) -> None:
    queue.bury(Change(ev("5", "Invoice"), 77, attempts=3), "gave up: 500")
    (row,) = rows(store)
    assert (row["state"], row["rtype"], row["rid"], row["first_ns"]) == ("dead", "Invoice", "5", 77)
    assert row["attempts"] == 3 and row["reason"] == "gave up: 500"


def test_dead_letters_are_listed_oldest_buried_first(queue: EventQueue, clock: Clock) -> None:
    queue.put([ev("1"), ev("2"), ev("3")], "a")
    one, two, three = queue.take()
    clock.ns += 1_000_000
    queue.bury(three, "third first")
    clock.ns += 1_000_000
    queue.settle(Settled(dead=[(one, "then one"), (two, "and two")]))  # the same moment
    assert [d["reason"] for d in queue.dead_letters()] == ["third first", "then one", "and two"]
    assert [d["record"] for d in queue.dead_letters()] == [
        "Appointment/3",
        "Appointment/1",
        "Appointment/2",
    ]


def test_dead_letters_beyond_the_count_lose_the_oldest_and_are_counted(
    store: Path, clock: Clock, messages: Callable[[], list[str]]
) -> None:
    queue = EventQueue(store, max_dead=3, max_dead_bytes=10**9)
    _dead(queue, clock, "1", "2", "3")
    assert queue.dead() == 3 and queue.evicted() == 0  # at the bound: all kept
    assert not [m for m in messages() if m.startswith("removed")]
    queue.put([ev("4"), ev("5")], "b")
    four, five = queue.take()
    queue.settle(Settled(dead=[(four, "refused"), (five, "refused")]))
    assert [d["record"] for d in queue.dead_letters()] == [
        "Appointment/3",
        "Appointment/4",
        "Appointment/5",
    ]
    assert queue.evicted() == 2
    assert [m for m in messages() if m.startswith("removed")] == [
        "removed the 2 oldest dead letter(s) to keep at most 3 letters and 1000000000 bytes"
    ]
    _dead(queue, clock, "6")
    assert queue.evicted() == 3  # counted across burials
    assert [d["record"] for d in queue.dead_letters()][-1] == "Appointment/6"
    queue.close()


def test_the_oldest_dead_letter_by_burial_goes_first_not_by_row(store: Path, clock: Clock) -> None:
    queue = EventQueue(store, max_dead=2)
    queue.put([ev("1"), ev("2"), ev("3")], "a")
    one, two, three = queue.take()
    clock.ns += 1_000_000
    queue.bury(three, "x")
    clock.ns += 1_000_000
    queue.bury(one, "x")
    clock.ns += 1_000_000
    queue.bury(two, "x")
    assert [d["record"] for d in queue.dead_letters()] == ["Appointment/1", "Appointment/2"]
    queue.close()


def test_dead_letters_beyond_the_bytes_lose_the_oldest_at_not_below_the_bound(
    store: Path, clock: Clock
) -> None:
    probe = EventQueue(store / "probe")
    _dead(probe, clock, "1", reason="r")
    each = probe.dead_bytes()  # one letter of this shape: its size and its reason
    probe.close()
    assert each == rows(store / "probe")[0]["size"] + 1

    exact = EventQueue(store / "exact", max_dead_bytes=2 * each)
    _dead(exact, clock, "1", "2", reason="r")
    assert exact.dead() == 2 and exact.evicted() == 0  # at the bound: kept
    assert exact.dead_bytes() == 2 * each
    exact.close()

    three = EventQueue(store / "three", max_dead_bytes=2 * each)
    three.put([ev("1"), ev("2"), ev("3")], "a")
    clock.ns += 1_000_000
    three.settle(Settled(dead=[(c, "r") for c in three.take()]))  # one burial of three
    assert [d["record"] for d in three.dead_letters()] == ["Appointment/2", "Appointment/3"]
    assert three.evicted() == 1 and three.dead_bytes() == 2 * each
    three.close()

    over = EventQueue(store / "over", max_dead_bytes=2 * each - 1)
    _dead(over, clock, "1", "2", reason="r")
    assert [d["record"] for d in over.dead_letters()] == ["Appointment/2"]
    assert over.evicted() == 1 and over.dead_bytes() == each
    over.close()


def test_the_newest_dead_letter_is_kept_whatever_the_bounds(store: Path, clock: Clock) -> None:
    queue = EventQueue(store, max_dead=0, max_dead_bytes=0)  # taken as 1 and 1
    assert (queue.max_dead, queue.max_dead_bytes) == (1, 1)
    _dead(queue, clock, "1", "2", "3")
    assert [d["record"] for d in queue.dead_letters()] == ["Appointment/3"]
    assert queue.evicted() == 2
    queue.close()


def test_one_dead_letter_allowed_keeps_exactly_one(store: Path, clock: Clock) -> None:
    queue = EventQueue(store, max_dead=1)
    _dead(queue, clock, "1")
    assert queue.dead() == 1 and queue.evicted() == 0
    _dead(queue, clock, "2")
    assert [d["record"] for d in queue.dead_letters()] == ["Appointment/2"]
    queue.close()


def test_retry_dead_queues_every_letter_due_now_with_attempts_reset(
    queue: EventQueue, store: Path, clock: Clock
) -> None:
    _dead(queue, clock, "1", "2")
    queue.put([ev("9")], "b")  # a live change: not touched
    live_due = clock.ns
    clock.ns = T0 + 60 * SECOND
    assert queue.requeue_dead() == (2, 0)
    dead_ids = {"1", "2"}
    for row in rows(store):
        if row["rid"] in dead_ids:
            assert (row["state"], row["attempts"], row["due_ns"]) == ("queued", 0, T0 + 60 * SECOND)
            assert row["last_error"] is None and row["reason"] is None and row["dead_at"] is None
        else:
            assert (row["state"], row["due_ns"]) == ("queued", live_due)
    assert queue.dead() == 0 and queue.dead_letters() == []
    assert queue.count() == 3
    assert [c.event.id for c in queue.take()] == ["9", "1", "2"]
    assert queue.requeue_dead() == (0, 0)


# -- a crash at every state change ---------------------------------------------------------


def _scenario(queue: EventQueue) -> Iterator[str]:
    """A change's every life, one journal step at a time; yields the step about to run."""
    yield "intake"
    queue.put(
        [ev("1", n=1), ev("2", n=2), ev("3", n=3), ev("4", "Invoice", n=4), ev("5", n=5)], "a"
    )
    yield "claim"
    one, two, three, invoice, five = queue.take()
    two.attempts, two.last_error = 1, "HTTP 503"
    five.attempts = 1
    yield "read"
    record = {"resourceType": "Appointment", "id": "1"}
    queue.settle(
        Settled(read=[(one, record), (three, None)], retry=[(two, T0)], hold=[invoice],
                dead=[(five, "refused: 400")])
    )  # fmt: skip
    yield "applied"
    queue.finish([one])
    yield "unclaim"
    queue.unclaim([three])
    yield "release"
    queue.release({"Invoice"})
    yield "requeue"
    queue.requeue_dead()
    queue.take()  # every change claimed again
    yield "recover"
    queue.recover()


STEPS = ["intake", "claim", "read", "applied", "unclaim", "release", "requeue", "recover"]
_Q, _C, _R, _W, _D = "queued", "claimed", "read", "waiting", "dead"
_A, _I = "Appointment", "Invoice"
BEFORE: dict[str, list[tuple[str, str, str, str]]] = {
    # the rows (state, type, id, eventNumber) before each step of the scenario, written
    # out by hand from docs/store.md ("The journal and its failure modes")
    "intake": [],
    "claim": [(_Q, _A, "1", "1"), (_Q, _A, "2", "2"), (_Q, _A, "3", "3"), (_Q, _I, "4", "4"),
              (_Q, _A, "5", "5")],
    "read": [(_C, _A, "1", "1"), (_C, _A, "2", "2"), (_C, _A, "3", "3"), (_C, _I, "4", "4"),
             (_C, _A, "5", "5")],
    "applied": [(_R, _A, "1", "1"), (_Q, _A, "2", "2"), (_R, _A, "3", "3"), (_W, _I, "4", "4"),
                (_D, _A, "5", "5")],
    "unclaim": [(_Q, _A, "2", "2"), (_R, _A, "3", "3"), (_W, _I, "4", "4"), (_D, _A, "5", "5")],
    "release": [(_Q, _A, "2", "2"), (_Q, _A, "3", "3"), (_W, _I, "4", "4"), (_D, _A, "5", "5")],
    "requeue": [(_Q, _A, "2", "2"), (_Q, _A, "3", "3"), (_Q, _I, "4", "4"), (_D, _A, "5", "5")],
    "recover": [(_C, _A, "2", "2"), (_C, _A, "3", "3"), (_C, _I, "4", "4"), (_C, _A, "5", "5")],
    "end": [(_Q, _A, "2", "2"), (_Q, _A, "3", "3"), (_Q, _I, "4", "4"), (_Q, _A, "5", "5")],
}  # fmt: skip


def _count(view_rows: list[tuple[str, str, str, str]]) -> dict[str, int]:
    counts = dict.fromkeys(STATES, 0)
    for state, *_rest in view_rows:
        counts[state] += 1
    return counts


def test_a_change_goes_through_the_states_the_docs_name(store: Path, clock: Clock) -> None:
    queue = EventQueue(store)
    seen = {at: view(store) for at in _scenario(queue)}
    seen["end"] = view(store)
    queue.close()
    assert seen == BEFORE


@pytest.mark.parametrize("how", ["exception", "closed"])
@pytest.mark.parametrize("step", STEPS)
def test_a_crash_inside_any_step_leaves_the_journal_as_before_it(
    step: str, how: str, store: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = EventQueue._transaction

    @contextlib.contextmanager
    def crashing(self: EventQueue, name: str) -> Iterator[sqlite3.Connection]:
        with real(self, name) as db:
            yield db
            if name == step:  # the step's writes made, not committed
                if how == "closed":
                    self._conn.close()
                else:
                    raise Crash(name)

    queue = EventQueue(store)
    monkeypatch.setattr(EventQueue, "_transaction", crashing)
    reached = []
    with pytest.raises((Crash, JournalError)):
        for at in _scenario(queue):
            reached.append(at)
    assert reached[-1] == step
    with contextlib.suppress(Exception):
        queue.close()
    assert view(store) == BEFORE[step]  # nothing of the step kept, nothing before it lost
    monkeypatch.setattr(EventQueue, "_transaction", real)
    again = EventQueue(store)  # the restart finds exactly the state before the step
    assert again.states() == _count(BEFORE[step])
    again.recover()
    after = view(store)
    assert _C not in {state for state, *_ in after}  # a claim lost with the process
    assert sorted(key for _s, *key in after) == sorted(key for _s, *key in BEFORE[step])
    again.close()


@pytest.mark.parametrize("step", STEPS)
def test_a_crash_just_after_any_step_keeps_its_commit(step: str, store: Path, clock: Clock) -> None:
    queue = EventQueue(store)
    scenario = _scenario(queue)
    for at in scenario:
        if at == step:
            break
    following = next(scenario, "end")  # the step runs and commits; then the process dies
    again = EventQueue(store)  # the restart, beside the dead process's idle connection
    assert view(store) == BEFORE[following]
    assert again.states() == _count(BEFORE[following])
    found = again.recover()
    assert [c.event.id for c, _r in found] == [
        rid for state, _t, rid, _n in BEFORE[following] if state == _R
    ]
    assert _C not in {state for state, *_ in view(store)}
    queue.close()
    again.close()
