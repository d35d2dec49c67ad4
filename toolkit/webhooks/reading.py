"""The worker's reads of changed records: a part of :class:`~toolkit.webhooks.listener.Listener`.

Each batch taken from the journal is read with one GET per record (the latest change
of each), sent side by side to a pool of :data:`READERS` threads while the batch
before is committed; the answers are sorted into records read, retries with backoff,
changes waiting for a sync and dead letters, and the read rate they show sizes the
next batch. Only the API's own answer deletes (:func:`api_says_gone`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from toolkit.errors import (
    ApiError,
    AuthError,
    PmtkError,
    RateLimited,
    RedirectRefused,
    ServerError,
    TransportError,
)
from toolkit.webhooks.events import MAX_BATCH_EVENTS, Event, describe, note
from toolkit.webhooks.journal import EventQueue, Settled
from toolkit.webhooks.queue import Change, ListenerStats, Retry

RETRY_FIRST = 0.25
"""Seconds before a failed read is tried again; doubled each time up to :data:`RETRY_MAX`."""

RETRY_MAX = 900.0

READERS = 8
"""Record reads of one batch sent side by side."""

BATCH_SECONDS = 0.75
"""About the longest the reads of one batch may take: a batch is capped at what the
recent read rate gets through in this time, so a change never waits behind a long one."""

FIRST_BATCH = 4 * READERS
"""Changes in a batch before any read rate has been measured (a backlog after a restart)."""

LOCAL_RETRY = 0.2
"""Seconds before a read or a store commit that failed for want of file descriptors
(EMFILE, ENFILE: a storm of connections) is tried again; no attempt is counted."""


def out_of_descriptors(exc: BaseException) -> bool:
    """Whether ``exc`` or one of its causes is this process (or the system) running out
    of file descriptors."""
    import errno

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.EMFILE, errno.ENFILE):
            return True
        if "Too many open files" in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


class Reading:
    """The reading stage of a :class:`~toolkit.webhooks.listener.Listener`'s worker.

    A base of ``Listener``, which sets every attribute named below (its ``__init__``)
    and calls :meth:`_batch_cap`, :meth:`_start_reads`, :meth:`_collect` and
    :meth:`_drop` from its worker.
    """

    client: Any
    target: Any
    stats: ListenerStats
    queue: EventQueue
    max_attempts: int
    max_age: float
    _readers: ThreadPoolExecutor
    _read_rate: float | None
    _commit_seconds: float

    def _batch_cap(self) -> int:
        """Changes the next batch may hold: what the recent read rate gets through in
        :data:`BATCH_SECONDS`, or in the time a commit takes if that is longer (at
        least one round of :data:`READERS`).

        Reading for as long as the last commit takes keeps the pipeline bound by the
        reads: smaller batches would leave the reader idle behind the commits, each
        with its fixed cost, and the queue would grow.
        """
        rate = self._read_rate
        if rate is None:
            return FIRST_BATCH
        seconds = max(BATCH_SECONDS, self._commit_seconds)
        return max(READERS, min(MAX_BATCH_EVENTS, int(rate * seconds)))

    def _start_reads(self, batch: list[Change]) -> ReadBatch:
        """Send the batch's reads to the pool (side by side; the client paces them if it
        must) and return at once."""
        synced = self.target.synced_types()
        hold: list[Change] = []
        to_read: list[Change] = []
        for change in _latest(batch).values():
            if change.event.resource_type in synced:
                to_read.append(change)
            else:
                hold.append(change)
        started = time.monotonic()
        futures = [self._readers.submit(self._read, change) for change in to_read]
        self.stats.requests += len(futures)
        reading = ReadBatch(
            hold=hold,
            to_read=to_read,
            futures=futures,
            started=started,
            finished=started,
        )
        for future in futures:
            # when the last read answered, not when the batch was collected (after the
            # commit before it): the read rate must not count the wait for a commit
            future.add_done_callback(reading.answered)
        return reading

    def _drop(self, reading: ReadBatch) -> None:
        """Forget a batch being read (the caller queues its changes again)."""
        for future in reading.futures:
            if future.cancel():
                self.stats.requests -= 1  # never sent

    def _collect(self, reading: ReadBatch) -> ReadBatch:
        """Wait for the batch's reads; sort what they answered into commits, retries,
        waiting changes and dead letters, and journal that in one transaction (the
        records read are kept there until the store's commit)."""
        settled = Settled(hold=list(reading.hold))
        for change, future in zip(reading.to_read, reading.futures, strict=True):
            kind, value = future.result()
            event = change.event
            if kind == "again":
                change.last_error = value[:500]
                settled.retry.append((change, time.time_ns() + int(LOCAL_RETRY * 1e9)))
                continue
            if kind == "retry":
                self._failed(change, value, reading.retry, settled.dead)
                continue
            if kind == "dead":
                change.attempts += 1
                settled.dead.append((change, value))
                continue
            settled.read.append((change, value))
            ups, dels, done = reading.by_type.setdefault(event.resource_type, ([], [], []))
            if value is None:
                dels.append(event.id)
            else:
                if event.action == "delete":
                    note(
                        logging.INFO,
                        "delete of %s/%s not confirmed (the record is still served): "
                        "applied as an update",
                        event.resource_type,
                        event.id,
                    )
                ups.append(value)
            done.append(change)
        settled.retry += self._due(reading.retry)
        self.queue.settle(settled)
        self.stats.held += len(settled.hold)
        self.stats.failures += len(settled.dead)
        if reading.to_read:
            took = max(1e-3, reading.finished - reading.started)
            rate = len(reading.to_read) / took
            # Smoothed, so one slow round does not shrink the next batches to nothing.
            last = self._read_rate
            self._read_rate = rate if last is None else 0.5 * last + 0.5 * rate
        return reading

    def _due(self, retry: list[Change]) -> list[tuple[Change, int]]:
        """When each change whose read failed is due again (after its backoff).

        Journaled as soon as the reads answered, not after the batch's commit: the
        backoff runs while the batch commits, and a retried change does not wait for
        a commit it has no part in.
        """
        due: list[tuple[Change, int]] = []
        for change in retry:
            delay = min(RETRY_MAX, RETRY_FIRST * 2 ** (change.attempts - 1))
            due.append((change, time.time_ns() + int(delay * random.uniform(0.9, 1.1) * 1e9)))
        self.stats.retried += len(due)
        return due

    def _fetch(self, event: Event) -> dict[str, Any] | None:
        """The record's current version, ``None`` when the API says it is gone.

        Gone means the API's own word: a 404 or 410 whose body is a FHIR
        OperationOutcome sent as FHIR JSON (:func:`api_says_gone`). Any other
        answer that is not the API's (a gateway's HTML 404, a JSON 404 that is no
        OperationOutcome, a redirect off the API's origin) raises :class:`Retry`,
        as do failures that may pass (network, 5xx, 429, refused credentials);
        the API's own refusal (an OperationOutcome 400, 403, 422) raises its
        :class:`~toolkit.errors.PmtkError`.
        """

        try:
            record = self.client.read(event.resource_type, event.id)
        except (TransportError, ServerError, RateLimited, AuthError, RedirectRefused) as exc:
            # AuthError too: wrong credentials are fixed by the operator, and the
            # changes must still be there when they are.
            raise Retry(describe(exc)) from exc
        except ApiError as exc:
            if api_says_gone(exc):
                return None
            if not is_fhir_answer(exc):
                why = f"not the API's answer (no FHIR OperationOutcome): {describe(exc)}"
                raise Retry(why) from exc
            if exc.status >= 500 or exc.status in (408, 429):
                raise Retry(describe(exc)) from exc
            raise
        if record.get("id") != event.id:
            raise ApiError(
                200,
                method="GET",
                url=f"{event.resource_type}/{event.id}",
                diagnostics=f"the answer holds id {str(record.get('id'))[:40]!r}",
            )
        return dict(record)

    def _read(self, change: Change) -> tuple[str, Any]:
        """``("ok", record or None)``, ``("retry", reason)`` or ``("dead", reason)``."""

        try:
            return "ok", self._fetch(change.event)
        except Retry as exc:
            if out_of_descriptors(exc):
                return "again", str(exc)  # this process's shortage, not the API's
            return "retry", str(exc)
        except PmtkError as exc:  # refused for good (400, 403, an id the API rejects)
            return "dead", f"reading it failed: {describe(exc)}"
        except Exception as exc:  # unexpected: retried, and dead after the bound
            return "retry", describe(exc)

    def _failed(
        self, change: Change, reason: str, retry: list[Change], dead: list[tuple[Change, str]]
    ) -> None:
        """Count an attempt: retry the change later, or give up on it past the bounds."""
        change.attempts += 1
        change.last_error = reason[:500]
        age = time.time() - change.first_ns / 1e9
        if change.attempts >= self.max_attempts or age >= self.max_age:
            dead.append(
                (
                    change,
                    f"gave up after {change.attempts} attempt(s) over {age:.0f} s; "
                    f"last error: {reason}",
                )
            )
        else:
            retry.append(change)


@dataclass(eq=False, slots=True)
class ReadBatch:
    """A batch taken from the queue: its reads in flight, then what they answered."""

    hold: list[Change]
    to_read: list[Change]
    futures: list[Future[tuple[str, Any]]]
    started: float
    finished: float
    by_type: dict[str, tuple[list[dict[str, Any]], list[str], list[Change]]] = field(
        default_factory=dict
    )
    retry: list[Change] = field(default_factory=list)

    def answered(self, _future: Future[tuple[str, Any]]) -> None:
        self.finished = max(self.finished, time.monotonic())


FHIR_MEDIA_TYPES = frozenset({"application/fhir+json", "application/json"})


def is_fhir_answer(exc: Any) -> bool:
    """Whether an error answer is the API's own: an OperationOutcome sent as FHIR JSON.

    A gateway, proxy or load balancer in front of the API answers with its own
    pages (an nginx HTML 404, a plain-text 502, a JSON body of its own); those say
    nothing about the records behind it.
    """
    return getattr(exc, "outcome", None) is not None and (
        getattr(exc, "media_type", None) in FHIR_MEDIA_TYPES
    )


def api_says_gone(exc: Any) -> bool:
    """Whether an error answer is the API saying a record does not exist (any more):
    404 or 410 with an OperationOutcome in a FHIR JSON body. Nothing else deletes."""
    return getattr(exc, "status", None) in (404, 410) and is_fhir_answer(exc)


def _latest(batch: Sequence[Change]) -> dict[tuple[str, str], Change]:
    """The latest change of each record, in the order of its latest announcement.

    A record announced again keeps its first receipt time (its freshness is measured
    from the oldest unapplied announcement), the most attempts any copy had, and all
    their journal rows (which go together when it is applied).
    """
    latest: dict[tuple[str, str], Change] = {}
    for change in batch:
        earlier = latest.pop(change.key, None)  # keep the order of the latest announcement
        if earlier is not None:
            change.first_ns = min(change.first_ns, earlier.first_ns)
            change.attempts = max(change.attempts, earlier.attempts)
            change.rows = [*earlier.rows, *change.rows]
        latest[change.key] = change
    return latest
