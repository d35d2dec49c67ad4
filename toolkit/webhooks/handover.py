"""One worker per journal, and a restart without a pause: ``pmtk listen --take-over``.

A stop-and-start restart leaves the port closed while the old process stops and the
new one starts, and the new one's first commit then waits for its imports and its
first validation (pandera and what it pulls in: about 1.7 s on a 2-core machine).
The sender holds its deliveries meanwhile, so every change announced in those seconds
is late. ``--take-over`` starts the new receiver *before* the old one stops:

1. the new process does everything slow first: imports, the store's checks, one
   validation of no records per resource it keeps (:func:`warm_up`);
2. it binds the same port beside the old receiver (both sockets carry
   ``SO_REUSEPORT``, so the kernel shares new connections between them) and starts
   journalling deliveries at once; its worker does not run yet;
3. it asks the old process to stop (SIGINT, as Ctrl-C: the old one stops accepting,
   finishes its batch and exits; its unfinished changes stay in the journal);
4. once the old worker's lock (:class:`WorkerLock`) is free, it merges what the old
   receiver remembered of the event numbers (:meth:`EventLog.adopt`), then starts
   its worker, which recovers and applies the journal: the old process's leftovers
   and what it received itself.

The journal is SQLite, written by both receivers for those seconds (one transaction
per group of deliveries, each process waiting for the other's lock). Only one worker
ever runs on a journal: a second ``pmtk listen`` of the same store without
``--take-over`` is refused, because two workers would put each other's claimed
changes back in the queue and read them twice. The failure modes and their tests are
in ``docs/store.md`` ("Restarting without a pause").
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Iterable
from pathlib import Path

import filelock

from toolkit.errors import ConfigurationError
from toolkit.webhooks.events import WEBHOOK_DIR
from toolkit.webhooks.status import receiver_info

WORKER_LOCK = "worker.lock"
"""``.webhooks/worker.lock``: held by the process whose worker applies the journal."""

TAKE_OVER_WAIT = 180.0
"""Seconds ``--take-over`` waits for the old worker to stop (it finishes its batch and
any catch-up page first) before giving up (its own deliveries stay journalled)."""


class WorkerLock:
    """The journal's one-worker lock (``filelock``: ``flock`` on POSIX), never held twice.

    The operating system drops it when the holder dies, so a crash never leaves a
    journal locked.
    """

    def __init__(self, journal_root: Path) -> None:
        self.path = journal_root / WEBHOOK_DIR / WORKER_LOCK
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.is_symlink():
            raise ConfigurationError(f"{self.path} is a link; pmtk listen never follows one")
        self._lock = filelock.FileLock(self.path, thread_local=False, is_singleton=False)

    def take(self, timeout: float) -> bool:
        """Take the lock, waiting at most ``timeout`` seconds (``0``: not at all)."""
        try:
            self._lock.acquire(timeout=timeout, poll_interval=0.02)
        except filelock.Timeout:
            return False
        return True

    def release(self) -> None:
        if self._lock.is_locked:
            self._lock.release(force=True)


def refuse_second(journal_root: Path) -> ConfigurationError:
    """The error for a ``pmtk listen`` whose store (or lake deployment, whose journal
    is in ``journal_root``) another one keeps current."""
    other = receiver_info(journal_root)
    who = (
        f"pmtk listen (pid {other['pid']}, on {other['host']}:{other['port']})"
        if other
        else "pmtk listen"
    )
    return ConfigurationError(
        f"another {who} keeps {journal_root} current; stop it first, or start this one with "
        "--take-over to replace it without a pause (two workers on one journal would read "
        "each change twice)"
    )


def ask_to_stop(journal_root: Path) -> int | None:
    """Send the running receiver Ctrl-C (SIGINT); its pid, or ``None`` when none runs.

    Never this process: a receiver file naming it is a leftover of a stopped
    :func:`~toolkit.webhooks.listen` in the same interpreter.
    """
    other = receiver_info(journal_root)
    if other is None:
        return None
    pid = other["pid"]
    if pid == os.getpid():
        return None
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return None  # it ended meanwhile
    except PermissionError as exc:
        msg = f"pmtk listen (pid {pid}) keeps the store current but belongs to another user"
        raise ConfigurationError(msg) from exc
    return pid


def bind(host: str, port: int, *, take_over: bool) -> socket.socket:
    """A listening-ready socket on ``host:port`` that a later ``--take-over`` can share.

    ``SO_REUSEPORT`` lets the new receiver bind beside the old one. Without
    ``take_over`` the port is first bound plainly (and closed): a port another process
    holds is refused as before, and this receiver never silently shares a port with
    a receiver of some other store.
    """
    if not hasattr(socket, "SO_REUSEPORT"):
        if take_over:
            raise ConfigurationError("--take-over needs SO_REUSEPORT, which this system lacks")
        return _socket(host, port, shared=False)
    if port and not take_over:
        _socket(host, port, shared=False).close()  # taken: raises, nothing else is bound
    return _socket(host, port, shared=True)


def _socket(host: str, port: int, *, shared: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if shared:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        msg = f"the webhook receiver could not bind {host}:{port}: {exc.strerror or exc}"
        raise ConfigurationError(msg) from exc
    sock.set_inheritable(True)
    return sock


def warm_up(resource_types: Iterable[str]) -> float:
    """Flatten and validate no records of each type once: the imports and schema builds
    a first commit would otherwise pay while changes wait. Returns the seconds spent."""
    from toolkit.store.merge import warm

    began = time.monotonic()
    for rtype in sorted(resource_types):
        with contextlib.suppress(ConfigurationError):  # a type without a view: nothing to warm
            warm(rtype)
    return time.monotonic() - began
