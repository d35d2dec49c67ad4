"""Thread pools whose workers can never hold up the interpreter's exit."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

_START_WITHIN = 30.0
"""Seconds the workers have to start; a pool that could not start them all keeps those it has."""


def daemon_pool(workers: int, name: str) -> ThreadPoolExecutor:
    """A :class:`ThreadPoolExecutor` whose ``workers`` threads are all started now, as daemons.

    ``ThreadPoolExecutor`` starts a worker lazily inside ``submit``, in the calling thread,
    and the worker inherits that thread's daemon flag. From the main thread, that makes a
    non-daemon thread which the interpreter joins at exit, and the pool only tells the
    workers it has *registered* to stop. A Ctrl-C that lands in ``Thread.start`` (which
    waits for the new thread to run: long on a loaded machine) comes between the start and
    the registration and leaves a worker that nobody stops: ``pmtk sync`` printed
    "interrupted" and then never exited.

    Here a short-lived daemon thread starts every worker. Python handles signals in the
    main thread only, so nothing cuts the start in two; and the workers inherit the daemon
    flag, so even a worker left over could not hold the exit. Each start is forced by a
    task that waits at a barrier until all ``workers`` are running (a finished task would
    let the pool reuse its idle thread instead of starting the next one).
    """
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
    barrier = threading.Barrier(workers)

    def arrive() -> None:
        try:
            barrier.wait(_START_WITHIN)
        except threading.BrokenBarrierError:
            return

    def start_all() -> None:
        for _ in range(workers):
            pool.submit(arrive)

    starter = threading.Thread(target=start_all, name=f"{name}-starter", daemon=True)
    starter.start()
    starter.join()
    return pool
