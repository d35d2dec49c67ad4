"""Run ``pmtk listen`` and SIGKILL it at one step of its N-th intake group commit (tests only).

Usage: ``python tests/listen/killpoint.py STEP N listen [options...]`` where ``STEP`` is

- ``before-file-fsync``: a queue file's bytes are written, not yet fsynced or renamed;
- ``before-folder-fsync``: the files are fsynced and renamed, the folder not fsynced;
- ``before-answer``: the folder is fsynced, and no sender has heard 202 yet.

Only the intake's writes to ``.webhooks/queue/`` are counted (the tests hold the store's
lock, so the worker writes nothing there). The hooks wrap the queue module's own calls
of ``os.fsync`` and ``_fsync_dir``; nothing in ``toolkit`` knows about them.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

STEPS = ("before-file-fsync", "before-folder-fsync", "before-answer")


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def install(step: str, nth: int) -> None:
    """Wrap the queue module's fsyncs so that the ``nth`` group commit dies at ``step``."""
    from toolkit.webhooks import queue

    if step not in STEPS:
        msg = f"unknown step {step!r}; one of {', '.join(STEPS)}"
        raise SystemExit(msg)
    lock = threading.Lock()
    seen = {"files": 0, "folders": 0}

    def in_queue(path: str) -> bool:
        return Path(path).parent.name == "queue" and Path(path).parent.parent.name == ".webhooks"

    class _Os:
        """``os`` for the queue module, with a counted ``fsync``."""

        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        def fsync(self, fd: int) -> None:
            target = os.readlink(f"/proc/self/fd/{fd}")
            if step == "before-file-fsync" and in_queue(target):
                with lock:
                    seen["files"] += 1
                    if seen["files"] == nth:
                        _die()
            os.fsync(fd)

    real_fsync_dir = queue._fsync_dir

    def fsync_dir(path: Path) -> None:
        counted = step != "before-file-fsync" and path.name == "queue"
        if counted:
            with lock:
                seen["folders"] += 1
                hit = seen["folders"] == nth
            if hit and step == "before-folder-fsync":
                _die()
        real_fsync_dir(path)
        if counted and hit and step == "before-answer":
            _die()

    queue.os = _Os()  # type: ignore[assignment]
    queue._fsync_dir = fsync_dir


if __name__ == "__main__":
    install(sys.argv[1], int(sys.argv[2]))
    sys.argv = ["pmtk", *sys.argv[3:]]
    from toolkit.cli import app

    app()
