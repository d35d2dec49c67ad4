"""Run ``pmtk listen`` and SIGKILL it at one state change of its journal (tests only).

Usage: ``python tests/listen/killpoint.py STEP WHEN N listen [options...]``: the process
dies at the ``N``-th time it reaches ``STEP``, ``WHEN`` being

- ``before``: inside the step's transaction, its writes made and not committed (after
  a pause of 1 s, so that a receiver that answered before its commit is caught);
- ``after``: just after the commit, before anything else.

``STEP`` is a journal transaction (``intake``: a group of notifications queued;
``claim``: changes taken by the worker; ``read``: the reads' outcomes, records read,
retries, waiting and dead changes; ``applied``: the changes the store committed
forgotten; ``unclaim``, ``release``, ``requeue``) or ``store``: the store's own commit
(``toolkit.store.apply_changes``), killed before or after it.

The hooks wrap ``EventQueue._transaction`` and ``toolkit.store.apply_changes`` by name;
nothing in ``toolkit`` knows about them. A reviewer's slip that reorders two steps (a
202 before the intake commit, the journal forgetting a change before the store's
commit) loses a change at one of these points, which the tests then see.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

STEPS = ("intake", "claim", "read", "store", "applied", "release", "requeue", "unclaim")
WHEN = ("before", "after")


def _die() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def install(step: str, when: str, nth: int) -> None:
    """Make the ``nth`` arrival at ``step`` kill the process ``when`` it commits."""
    import toolkit.store
    from toolkit.webhooks.journal import EventQueue

    if step not in STEPS or when not in WHEN:
        msg = f"unknown step {step!r} or moment {when!r}"
        raise SystemExit(msg)
    lock = threading.Lock()
    seen = {"n": 0}

    def hit() -> bool:
        with lock:
            seen["n"] += 1
            return seen["n"] == nth

    real_transaction = EventQueue._transaction

    @contextlib.contextmanager
    def transaction(self: EventQueue, name: str) -> Iterator[Any]:
        fatal = name == step and hit()
        with real_transaction(self, name) as db:
            yield db
            if fatal and when == "before":
                time.sleep(1.0)
                _die()
        if fatal:
            _die()

    real_apply = toolkit.store.apply_changes

    def apply_changes(*args: Any, **kwargs: Any) -> Any:
        fatal = step == "store" and hit()
        if fatal and when == "before":
            _die()
        result = real_apply(*args, **kwargs)
        if fatal:
            _die()
        return result

    EventQueue._transaction = transaction  # type: ignore[method-assign,assignment]
    toolkit.store.apply_changes = apply_changes


if __name__ == "__main__":
    install(sys.argv[1], sys.argv[2], int(sys.argv[3]))
    sys.argv = ["pmtk", *sys.argv[4:]]
    from toolkit.cli import app

    app()
