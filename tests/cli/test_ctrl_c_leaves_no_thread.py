"""A Ctrl-C while a reader thread starts leaves no thread that holds the process's exit.

Seen under load: ``pmtk sync`` printed "interrupted ... staged page(s) kept" and then
never exited. The interpreter was joining a ``pmtk-read`` worker that the thread pool
had started but not yet registered when ``KeyboardInterrupt`` landed in
``Thread.start``, so the pool never told it to stop. Here the same moment is made
certain: a ``Thread.start`` that raises ``KeyboardInterrupt`` in the main thread right
after starting a reader thread, as the signal does when ``start`` waits for the new
thread on a loaded machine. The child process must then exit at once.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from toolkit._threads import daemon_pool

EXITS_WITHIN = 30
"""Seconds for a child that imports Polars and exits; a held exit never ends."""

CHILD = textwrap.dedent(
    """
    import threading

    import toolkit.views.reader as reader

    real_start = threading.Thread.start

    def start(self):
        real_start(self)
        in_main = threading.current_thread() is threading.main_thread()
        if self.name.startswith("pmtk-read_") and in_main:
            threading.Thread.start = real_start
            raise KeyboardInterrupt

    threading.Thread.start = start
    try:
        reader.executor().submit(int).result()
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    else:
        print("started", flush=True)
    """
)


def test_a_ctrl_c_while_a_reader_thread_starts_does_not_hold_the_exit() -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=EXITS_WITHIN
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the process did not exit after Ctrl-C: {exc.stdout!r} {exc.stderr!r}")
    assert done.returncode == 0, done.stderr
    # The readers start off the main thread: the Ctrl-C never lands inside one's start.
    assert done.stdout == "started\n"


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_a_daemon_pool_starts_every_worker_as_a_daemon_before_it_returns(workers: int) -> None:
    before = set(threading.enumerate())
    pool = daemon_pool(workers, "pmtk-test-pool")
    try:
        started = [t for t in threading.enumerate() if t not in before]
        assert sorted(t.name for t in started if t.name.startswith("pmtk-test-pool_")) == [
            f"pmtk-test-pool_{i}" for i in range(workers)
        ]
        assert all(t.daemon for t in started)
        assert sorted(pool.map(abs, [-3, -1, -2])) == [1, 2, 3]
    finally:
        pool.shutdown()


def test_no_pool_of_the_toolkit_starts_its_threads_from_the_caller() -> None:
    """Every thread pool of the toolkit is a :func:`daemon_pool` (or lives on a daemon thread)."""
    from pathlib import Path

    import toolkit

    root = Path(toolkit.__file__).parent
    allowed = {"_threads.py", "webhooks/listener.py"}  # the listener submits from its daemon worker
    found = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if "ThreadPoolExecutor(" in p.read_text() and str(p.relative_to(root)) not in allowed
    ]
    assert found == []
