"""A receiver's :class:`Listener` and its supervised worker, which applies queued changes.

The worker takes the journal's changes in batches, reads each changed record
(:mod:`toolkit.webhooks.reading`), commits what it read to the store's target and only
then forgets the changes; it catches up on start, heals gaps in the event numbers and
starts again after a failure. The receiver that queues the changes is
:mod:`toolkit.webhooks.receiver`; :func:`~toolkit.webhooks.listen` serves both.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import orjson

from toolkit import views
from toolkit.errors import DataValidationError, PmtkError
from toolkit.redaction import redact
from toolkit.webhooks.catchup import CatchUp, Guard, Walked
from toolkit.webhooks.eventlog import DEFAULT_GAP_GRACE, EventLog, Gap
from toolkit.webhooks.events import (
    ANNOUNCED,
    APPLIED_MARKS,
    DEFAULT_MAX_QUEUE_BYTES,
    WEBHOOK_DIR,
    describe,
    note,
)
from toolkit.webhooks.journal import DEFAULT_MAX_DEAD_BYTES, DEFAULT_MAX_DEAD_LETTERS, EventQueue
from toolkit.webhooks.queue import AuthHeader, Change, ListenerStats, Retry, write_durable
from toolkit.webhooks.reading import LOCAL_RETRY, READERS, ReadBatch, Reading, out_of_descriptors
from toolkit.webhooks.status import disk_status

DEFAULT_MAX_ATTEMPTS = 12
"""Reads of one change before it is moved to the dead letters."""

DEFAULT_MAX_AGE = 24 * 3600.0
"""Seconds a change may stay unapplied (retried) before it is moved to the dead letters."""

RESTART_FIRST = 0.5
"""Seconds before a failed worker is started again; doubled each time up to :data:`RESTART_MAX`."""

RESTART_MAX = 60.0

CATCH_UP_RETRY_FIRST = 1.0
"""Seconds before a failed catch-up (or gap-healing) sync is tried again; doubled each
time up to :data:`CATCH_UP_RETRY_MAX`."""

CATCH_UP_RETRY_MAX = 300.0

STORE_RETRY_MAX = 30.0


class Listener(Reading):
    """A running receiver and its worker (from :func:`listen`).

    The worker's record reads are those of its base, :class:`~toolkit.webhooks.reading.Reading`.

    Attributes
    ----------
    url
        ``http://127.0.0.1:<port>/webhook``: give it to the sender.
    port
        The bound port.
    store
        The store directory kept current.
    stats
        :class:`ListenerStats`.
    queue
        The :class:`EventQueue`: the journal of acknowledged changes.
    """

    def __init__(
        self,
        store: Path,
        client: Any,
        *,
        auth_header: AuthHeader | None,
        max_body_bytes: int,
        catch_up: bool,
        errors: Literal["raise", "warn"],
        max_queue_bytes: int = DEFAULT_MAX_QUEUE_BYTES,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_age: float = DEFAULT_MAX_AGE,
        bind_host: str = "127.0.0.1",
        public_hosts: Sequence[str] = (),
        gap_grace: float = DEFAULT_GAP_GRACE,
        max_dead_letters: int = DEFAULT_MAX_DEAD_LETTERS,
        max_dead_bytes: int = DEFAULT_MAX_DEAD_BYTES,
        target: Any = None,
    ) -> None:
        from toolkit.webhooks.target import StoreTarget  # the store: not at pmtk's start

        self.store = store
        self.target = StoreTarget(store) if target is None else target
        self.client = client
        self.auth_header = auth_header
        self.max_body_bytes = max_body_bytes
        self.catch_up = catch_up
        self.errors = errors
        self.max_attempts = max_attempts
        self.max_age = max_age
        self.bind_host = bind_host
        self.public_hosts = tuple(public_hosts)
        self.viewed = frozenset(views.VIEWS)
        self.queue = EventQueue(
            store, max_queue_bytes, max_dead=max_dead_letters, max_dead_bytes=max_dead_bytes
        )
        self.events = EventLog(store / WEBHOOK_DIR, gap_grace=gap_grace)
        self._init_runtime()
        self._load_error()  # after the statistics exist: it fills their last error in

    def _init_runtime(self) -> None:
        """The worker's state before it starts: statistics, events, back-off clocks, threads."""
        self.stats = ListenerStats()
        self.wake = threading.Event()
        self.caught_up = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._down_until: float | None = None  # monotonic time of the next restart
        self._sync_due: float | None = None  # monotonic time of the next catch-up try
        self.guard = Guard()  # commits one at a time; deletes noted for a catch-up's walk
        self._beside_worker = bool(getattr(self.target, "walks_beside_worker", False))
        self._catching_up: threading.Thread | None = None
        self._sync_delay = 0.0
        self._gap_due = 0.0  # monotonic time gaps may be healed again (after a failure)
        self._gap_delay = 0.0
        self._error_what: str | None = None
        self._started = False
        self.url = ""
        self.port = 0
        self._read_rate: float | None = None  # changes read a second, smoothed
        self._commit_seconds = 0.0  # a batch's commit and file removal, smoothed
        self._readers = ThreadPoolExecutor(READERS, thread_name_prefix="pmtk-listen-read")
        self._worker = threading.Thread(
            target=self._supervise, name="pmtk-listen-worker", daemon=True
        )

    def __repr__(self) -> str:
        return f"Listener(url={self.url!r}, store={str(self.store)!r})"

    # -- lifecycle -------------------------------------------------------------------

    def start_worker(self) -> None:
        self._started = True
        self._worker.start()

    def stop_worker(self) -> None:
        self._stop.set()
        self.wake.set()
        if self._started:
            self._worker.join(timeout=60)
        catching_up = self._catching_up
        if catching_up is not None:
            catching_up.join(timeout=60)  # it stops at its next page; what it wrote stays
        self._readers.shutdown(wait=False, cancel_futures=True)
        self.events.flush(force=True)

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait until the catch-up sync is done and no change is queued; true if it got there.

        Changes waiting for a full sync of their type and dead letters are not queued;
        waiting changes whose type a sync has since made a table for count as queued
        (the worker releases them on its next round).
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.caught_up.is_set() and self._idle.is_set() and self._nothing_to_apply():
                return True
            time.sleep(0.01)
        return False

    def _nothing_to_apply(self) -> bool:
        """No change queued, and none waiting whose type a sync has made a table for.

        The waiting changes are read first and the queue counted again after: the
        worker's release moves a change from waiting to queued between the two, and
        read in the other order (or by the count cached before the release) it would
        be in neither.
        """
        if set(self.queue.waiting()) & self.target.synced_types():
            return False
        self.queue.refresh()
        return self.queue.count() == 0

    def unavailable(self) -> tuple[str, int] | None:
        """Why a notification cannot be promised now, and the seconds to retry after."""
        down = self._down_until
        if self._started and (down is not None or not self._worker.is_alive()):
            wait = 10 if down is None else max(1, math.ceil(down - time.monotonic()) + 1)
            return "the worker that applies changes is restarting; retry later", wait
        if self.queue.over_cap():
            cap = self.queue.max_bytes
            return f"the event queue holds its limit of {cap} bytes; retry later", 30
        return None

    def record_error(self, what: str, exc: BaseException) -> None:
        """Keep the last error (for ``--status``), also on disk for when nobody runs."""

        text = redact(f"{what}: {describe(exc)}")[:1000]
        self._error_what = what
        self.stats.last_error = text
        self.stats.last_error_at = time.time()
        path = self.store / WEBHOOK_DIR / "last-error.json"
        # when the disk is the problem the error is still logged and kept in memory
        with contextlib.suppress(OSError):
            saved = {"text": text, "at": self.stats.last_error_at, "what": what}
            write_durable(path, orjson.dumps(saved))

    def _load_error(self) -> None:
        """The last error a previous run kept, so that its success clears it too."""
        with contextlib.suppress(OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            saved = orjson.loads((self.store / WEBHOOK_DIR / "last-error.json").read_bytes())
            self.stats.last_error = str(saved["text"])
            self.stats.last_error_at = float(saved["at"])
            what = saved.get("what")
            self._error_what = what if isinstance(what, str) else None

    def clear_error(self, what: str) -> None:
        """``what`` succeeded: the last error, if it was ``what`` failing, is no longer shown."""
        if self._error_what != what:
            return
        self._error_what = None
        self.stats.resolved_error = self.stats.last_error
        self.stats.resolved_error_at = time.time()
        self.stats.last_error = None
        self.stats.last_error_at = None
        with contextlib.suppress(OSError):
            (self.store / WEBHOOK_DIR / "last-error.json").unlink(missing_ok=True)

    # -- status ----------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What ``GET /status`` and ``pmtk listen --status`` show."""
        if not self._started or self._stop.is_set():
            worker = "stopped"
        elif self._down_until is not None or not self._worker.is_alive():
            worker = "restarting"
        elif not self.caught_up.is_set():
            worker = "catching up"
        else:
            worker = "running"
        busy = self.unavailable()
        try:
            report = disk_status(self.store, self.queue)
        except OSError as exc:
            # the folder cannot be read now (EMFILE, a vanished disk): the counts kept in
            # memory still say what is known
            report = self._memory_status(exc)
        report.update(
            {
                "worker": worker,
                "accepting": busy is None,
                "refusing_because": None if busy is None else busy[0],
                "restarts": self.stats.restarts,
                "received": self.stats.received,
                "applied": self.stats.applied,
                "retried": self.stats.retried,
                "refused": self.stats.refused,
                "requests": self.stats.requests,
                "catch_up": self.stats.catch_up,
                "events": self.events.status(),
            }
        )
        report["last_error"] = None
        report["resolved_error"] = None
        if self.stats.resolved_error is not None:
            report["resolved_error"] = {
                "text": self.stats.resolved_error,
                "resolved_s_ago": round(time.time() - (self.stats.resolved_error_at or 0.0), 1),
            }
        if self.stats.last_error is not None:
            report["last_error"] = {
                "text": self.stats.last_error,
                "age_s": round(time.time() - (self.stats.last_error_at or 0.0), 1),
            }
        return report

    def _memory_status(self, exc: OSError) -> dict[str, Any]:
        """The status part :func:`disk_status` gives, from the counts in memory."""
        return {
            "store": str(self.store.resolve()),
            "queue": {
                "events": self.queue.count(),
                "bytes": self.queue.bytes(),
                "max_bytes": self.queue.max_bytes,
                "oldest_unapplied_age_s": None,
                "next_retry_in_s": None,
                "waiting_for_sync": {},
            },
            "dead_letters": None,
            "journal": str(self.queue.path),
            "last_error": None,
            "disk_unreadable": describe(exc),
        }

    # -- the worker ------------------------------------------------------------------

    def _supervise(self) -> None:
        """Run the worker; when it fails, log why and start it again after a pause."""
        delay = 0.0
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self._work()
                return
            except Exception as exc:  # anything: the worker must come back
                if time.monotonic() - began > RESTART_MAX:
                    delay = 0.0  # it had run well for a while: start over from short pauses
                delay = min(RESTART_MAX, max(RESTART_FIRST, delay * 2))
                self._down_until = time.monotonic() + delay
                self.record_error("the worker failed", exc)
                note(
                    logging.ERROR,
                    "the worker failed (%s); restarting in %.1f s",
                    describe(exc),
                    delay,
                    exc=exc,
                )
                self._stop.wait(delay)
                self.stats.restarts += 1
                self._down_until = None

    def _work(self) -> None:
        self._catch_up_once()
        # A two-stage pipeline: while one batch is committed (in this thread), the
        # next one is read (in the pool). Reading never waits for a commit, and a
        # change waits for at most the batch in progress, not a read and a commit.
        # Two rules keep it safe:
        # - the next batch's reads start only once every read of the batch before
        #   has answered, so a later read of a record never answers before an
        #   earlier one;
        # - batches are committed in the order they were read, and when a commit
        #   fails the batch already read is dropped unapplied and both are queued
        #   again in the journal, taken again in queue order: an earlier read is
        #   never committed over a later one.
        self._recover()
        pending: ReadBatch | None = None  # read, waiting for its commit
        store_delay = 0.0
        while not self._stop.is_set():
            self.wake.clear()
            self._maintain()
            self._release_waiting()
            batch = self.queue.take(self._batch_cap())
            reading = self._start_reads(batch) if batch else None
            if reading is not None or pending is not None:
                self._idle.clear()
            if pending is not None:
                store_delay = self._commit_or_pause(pending, reading, store_delay)
                pending = None
                if store_delay:
                    continue  # everything is taken again, in queue order
            if reading is None:
                self._idle.set()
                due = self.queue.seconds_to_next_due()
                self.wake.wait(0.5 if due is None else min(0.5, due + 0.001))
                continue
            pending = self._collect(reading)

    def _catch_up_once(self) -> None:
        """The catch-up sync (or its skipping) before the first batch, once per receiver.

        A failed catch-up (the API not up yet) does not hold the queue up: it is tried
        again by :meth:`_maintain`, with backoff, until it succeeds.
        """
        if self.caught_up.is_set() or self._catching_up is not None:
            return
        if not self.catch_up:
            self.stats.catch_up = "skipped"
        self._run_catch_up()

    def _run_catch_up(self) -> None:
        """The catch-up (unless it is off): in a thread of its own where the target's walk
        commits beside the worker, else here. :attr:`caught_up` is set when its first
        attempt has ended, whatever the outcome."""
        if not self.catch_up:
            self.caught_up.set()
        elif self._beside_worker:
            self._start_catch_up()  # the worker applies changes meanwhile
        else:
            self._catch_up()
            self.caught_up.set()

    def _start_catch_up(self) -> None:
        running = self._catching_up
        if running is not None and running.is_alive():
            return

        def run() -> None:
            try:
                self._catch_up()
            finally:
                self.caught_up.set()
                self.wake.set()

        self._sync_due = None
        thread = threading.Thread(target=run, name="pmtk-listen-catch-up", daemon=True)
        self._catching_up = thread
        thread.start()

    def _maintain(self) -> None:
        """The worker's other duties between batches: a failed catch-up tried again, and
        gaps in the event numbers healed once their grace period has passed."""
        self.events.flush()  # what the last deliveries confirmed, at most SAVE_EVERY late
        due = self._sync_due
        if due is not None and time.monotonic() >= due:
            self._run_catch_up()
        if time.monotonic() >= self._gap_due:
            for gap in self.events.due_gaps():
                if not self._heal(gap):
                    break

    def _commit_or_pause(
        self, pending: ReadBatch, reading: ReadBatch | None, store_delay: float
    ) -> float:
        """Commit ``pending``: ``0.0``; or, when the store cannot be written now (a sync
        holds it, a full disk), queue both again unapplied, wait, and return the pause
        (doubled each time)."""
        try:
            self._commit_batch(pending)
        except Retry as exc:
            dropped = [c for _u, _d, done in pending.by_type.values() for c in done]
            if reading is not None:
                self._drop(reading)
                dropped += reading.to_read + reading.hold
            self.queue.unclaim(dropped)
            # out of descriptors (a storm of connections): a local shortage that ends
            # with the storm, tried again soon rather than after a growing pause
            short = out_of_descriptors(exc)
            delay = LOCAL_RETRY if short else min(STORE_RETRY_MAX, max(0.2, store_delay * 2))
            self.record_error("writing the store failed", exc)
            note(
                logging.WARNING,
                "writing the store failed (%s); trying again in %.1f s",
                describe(exc),
                delay,
            )
            self._stop.wait(delay)
            return delay
        return 0.0

    def _commit_batch(self, read: ReadBatch) -> None:
        """Commit what a batch read to the store, then (only then) forget its changes
        in the journal, in one transaction with those that failed their schema.

        Raises :class:`Retry` when the store cannot be written; then the journal
        still holds every change of the batch as read.
        """
        began = time.monotonic()
        applied: list[Change] = []
        dead: list[tuple[Change, str]] = []
        for rtype, (ups, dels, done) in read.by_type.items():
            # noted before the commit: a catch-up slice committed after it leaves them out
            self.guard.note_deletes(rtype, dels)
            with self.guard.lock:
                failed = self._commit(rtype, ups, dels, done)
            gone = {change.key for change, _reason in failed}
            applied += [change for change in done if change.key not in gone]
            dead += failed
        self.queue.finish(applied, dead)
        self.stats.failures += len(dead)
        self.stats.batches += 1
        self.clear_error("writing the store failed")
        self.clear_error("the worker failed")
        took = time.monotonic() - began
        self._commit_seconds = 0.5 * self._commit_seconds + 0.5 * took

    def _catch_up(self) -> None:
        held = self.target.synced_types()
        wanted = [t for t in ANNOUNCED if t in self.viewed and (t in held or not held)]
        try:
            text = self._sync(wanted)
        except Exception as exc:  # the receiver still serves; events queue meanwhile
            if self._stop.is_set():
                return  # stopped part-way: what was written stays, the bound did not move
            self._sync_delay = min(
                CATCH_UP_RETRY_MAX, max(CATCH_UP_RETRY_FIRST, self._sync_delay * 2)
            )
            self._sync_due = time.monotonic() + self._sync_delay
            self.stats.catch_up = (
                f"failed: {describe(exc)}"[:300] + f" (trying again in {self._sync_delay:.0f} s)"
            )
            self.record_error("the catch-up sync failed", exc)
            note(
                logging.ERROR,
                "catch-up sync failed: %s; trying again in %.0f s",
                describe(exc),
                self._sync_delay,
            )
            return
        self._sync_due = None
        self._sync_delay = 0.0
        self.stats.catch_up = "ok: " + text
        self.clear_error("the catch-up sync failed")
        note(logging.INFO, "catch-up sync: %s", self.stats.catch_up)

    def _sync(self, types: Sequence[str]) -> str:
        """An incremental sync of ``types``; what it did. Raises when any type failed."""

        walked: list[Walked] = []
        rest = list(types)
        if self._beside_worker:
            catch_up = CatchUp(
                self.target,
                self.client,
                self.guard,
                errors=self.errors,
                stopping=self._stop.is_set,
            )
            rest = []
            for rtype in types:
                since = self.target.since(rtype)
                if since is None:  # no table to walk into yet: a sync makes it
                    rest.append(rtype)
                else:
                    walked.append(catch_up.run(rtype, since))
        synced = self.target.sync(self.client, rest) if rest else []
        failed = [r for r in synced if r.status == "failed"]
        if failed:
            raise PmtkError("; ".join(f"{r.resource}: {r.error}" for r in failed)[:500])
        return ", ".join(
            [
                f"{w.resource} caught up ({w.fetched} fetched, {w.written} written"
                + (f", {w.deleted} deleted)" if w.deleted else ")")
                for w in walked
            ]
            + [f"{r.resource} {r.status} ({r.fetched} fetched)" for r in synced]
        )

    def _heal(self, gap: Gap) -> bool:
        """Log a gap and sync its types; true when healed (false: tried again later)."""
        shown = ", ".join(str(n) for n in gap.missing[:50])
        more = f" and {len(gap.missing) - 50} more" if len(gap.missing) > 50 else ""
        held = self.target.synced_types()
        types = sorted(t for t in gap.types if t in held) or sorted(
            t for t in ANNOUNCED if t in held and t in self.viewed
        )
        note(
            logging.WARNING,
            "events of %s never arrived: number(s) %s%s; syncing %s",
            gap.subscription,
            shown,
            more,
            ", ".join(types) or "nothing (no table synced yet)",
        )
        try:
            text = self._sync(types) if types else "nothing to sync"
        except Exception as exc:
            self._gap_delay = min(
                CATCH_UP_RETRY_MAX, max(CATCH_UP_RETRY_FIRST, self._gap_delay * 2)
            )
            self._gap_due = time.monotonic() + self._gap_delay
            self.record_error("healing missed events failed", exc)
            return False
        self._gap_delay = 0.0
        self.events.healed(gap)
        self.stats.gaps_healed += 1
        self.clear_error("healing missed events failed")
        note(logging.INFO, "missed events healed by a sync: %s", text)
        return True

    def _recover(self) -> None:
        """Apply the changes a crashed run had read but not seen committed (from the
        records the journal kept, no read again), unless the store already holds them:
        then they are only forgotten, never applied twice. Claimed ones are queued."""
        found = self.queue.recover()
        if not found:
            return
        read = ReadBatch(hold=[], to_read=[], futures=[], started=0.0, finished=0.0)
        landed: list[Change] = []
        stamps: dict[str, dict[str, str | None]] = {}
        for rtype in {change.event.resource_type for change, _record in found}:
            ids = [c.event.id for c, _r in found if c.event.resource_type == rtype]
            stamps[rtype] = self.target.stamps(rtype, ids)
        for change, record in found:
            if _in_store(stamps[change.event.resource_type], change.event.id, record):
                landed.append(change)
                continue
            ups, dels, done = read.by_type.setdefault(change.event.resource_type, ([], [], []))
            if record is None:
                dels.append(change.event.id)
            else:
                ups.append(record)
            done.append(change)
        note(
            logging.WARNING,
            "%d change(s) read before a crash: %d already in the store, %d applied now",
            len(found),
            len(landed),
            len(found) - len(landed),
        )
        self.queue.finish(landed)
        self._commit_batch(read)

    def _release_waiting(self) -> None:
        """Queue again the waiting changes of types a sync has now made a table for."""
        waiting = self.queue.waiting()
        if not waiting:
            return
        ready = set(waiting) & self.target.synced_types()
        if ready:
            moved = self.queue.release(ready)
            note(logging.INFO, "%d waiting change(s) of %s queued", moved, ", ".join(sorted(ready)))

    def _commit(
        self, rtype: str, ups: list[dict[str, Any]], dels: list[str], done: list[Change]
    ) -> list[tuple[Change, str]]:
        """Apply one type's changes in one commit; the changes that cannot be applied."""

        last = done[-1]
        try:
            event = {**last.event.to_json(), "received_at": last.received_at}
            result = self.target.apply(rtype, ups, dels, event, self.errors)
        except DataValidationError:
            failed = self._commit_one_by_one(rtype, ups, dels, done)
        except Exception as exc:
            # A busy or damaged store, a full disk: the changes stay queued until it
            # is repaired (the message says how) and are applied then.
            raise Retry(describe(exc)) from exc
        else:
            failed = []
            note(
                logging.INFO,
                "%s: %d written, %d deleted, %d already newer in the store",
                rtype,
                len(result.upserted),
                len(result.deleted),
                len(result.stale),
            )
        gone = {c.key for c, _reason in failed}
        self._mark_applied([c for c in done if c.key not in gone])
        return failed

    def _commit_one_by_one(
        self, rtype: str, ups: list[dict[str, Any]], dels: list[str], done: list[Change]
    ) -> list[tuple[Change, str]]:
        """Isolate the records that fail their schema; apply the others."""

        by_id = {c.event.id: c for c in done}
        failed: list[tuple[Change, str]] = []
        try:
            for record in ups:
                change = by_id[str(record["id"])]
                try:
                    self.target.apply(rtype, [record], [], change.event.to_json(), self.errors)
                except DataValidationError as exc:
                    failed.append((change, f"the record fails its schema: {exc}"))
            if dels:
                self.target.apply(rtype, [], dels, done[-1].event.to_json(), self.errors)
        except DataValidationError:
            raise
        except Exception as exc:
            raise Retry(describe(exc)) from exc
        return failed

    def _mark_applied(self, changes: list[Change]) -> None:
        """Remember when each record was applied (the newest :data:`APPLIED_MARKS`)."""
        now = time.time()
        marks = self.stats.applied_at
        for change in changes:
            mark = f"{change.event.resource_type}/{change.event.id}"
            marks.pop(mark, None)
            marks[mark] = now
        while len(marks) > APPLIED_MARKS:  # oldest first: dicts keep insertion order
            del marks[next(iter(marks))]
        self.stats.applied += len(changes)


def _in_store(stamps: dict[str, str | None], rid: str, record: dict[str, Any] | None) -> bool:
    """Whether the store holds what ``record`` says (``None``: the record absent)."""
    from toolkit.store.precedence import newer

    if record is None:
        return rid not in stamps
    if rid not in stamps:
        return False
    meta = record.get("meta")
    stamp = meta.get("lastUpdated") if isinstance(meta, dict) else None
    return stamp is not None and not newer(stamp, stamps[rid])
