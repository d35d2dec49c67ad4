"""The sync's page prefetcher on Ctrl-C: the interrupt does not wait for its worker.

The worker thread walks the pages, and the client's throttle sleeps in that thread
(a rate-limit wait can last a minute). A Ctrl-C in the consuming thread must not sit
that wait out: ``pmtk sync`` interrupted at a wait took 30 s to exit (the join's
timeout) before ``Prefetch.__exit__`` stopped waiting for the worker on an interrupt.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from toolkit.store.resume import Prefetch

WAIT = 10.0
"""Seconds the test gives Ctrl-C to take effect: far above an instant exit, below the
30 s that a join would wait (a liveness bound, not a speed target)."""


def _pages_then_a_long_wait(release: threading.Event, waiting: threading.Event) -> Iterator[int]:
    """Page 1, then a 'rate-limit wait' that lasts until the test releases it."""
    yield 1
    waiting.set()
    release.wait()
    yield 2


def test_ctrl_c_leaves_the_prefetch_without_waiting_for_a_worker_asleep_in_a_wait() -> None:
    release, waiting, left = threading.Event(), threading.Event(), threading.Event()
    seen: list[list[int]] = []
    outcome: list[BaseException] = []

    def consume() -> None:
        try:
            with Prefetch(_pages_then_a_long_wait(release, waiting), 8) as prefetch:
                for batch in prefetch.batches(8):
                    seen.append(batch)
                    assert waiting.wait(WAIT), "the worker never reached its wait"
                    raise KeyboardInterrupt
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)
        finally:
            left.set()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    try:
        assert left.wait(WAIT), "Ctrl-C waited for the prefetch worker's rate-limit wait"
        assert seen == [[1]]
        assert len(outcome) == 1 and isinstance(outcome[0], KeyboardInterrupt)
    finally:
        release.set()
        consumer.join(WAIT * 4)


def test_an_ordinary_error_still_waits_for_the_worker_to_stop() -> None:
    # Any other exception leaves through the join: the worker, woken, sees the stop
    # flag and ends before the caller goes on (and closes the client it uses).
    stopped = threading.Event()

    def pages() -> Iterator[int]:
        try:
            yield from range(100)
        finally:
            stopped.set()

    with pytest.raises(OSError), Prefetch(pages(), 2) as prefetch:
        for _batch in prefetch.batches(1):
            raise OSError("disk full")
    assert stopped.is_set()
