"""A store's receiver as its ``.webhooks/`` folder shows it, with or without one running.

The receiver file says which process serves the store, on which address and port
(``pmtk listen --status`` asks that receiver; a take-over signals its process); and
:func:`disk_status` reads the queue, the dead letters and the last error from the
folder itself, which is all ``--status`` has when no receiver runs.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import orjson

from toolkit.webhooks.eventlog import EventLog
from toolkit.webhooks.events import WEBHOOK_DIR
from toolkit.webhooks.journal import EventQueue
from toolkit.webhooks.queue import write_durable

RECEIVER_FILE = "receiver.json"
"""Written into ``.webhooks/`` by a running receiver (its pid, address and port), removed
when it stops cleanly; ``pmtk listen --status`` finds the receiver of a store with it."""


def write_receiver_file(store: Path, host: str, port: int) -> None:
    """Say, in the store, that this process serves it on ``host:port``."""
    import os

    data = {"pid": os.getpid(), "host": host, "port": port, "started_at": time.time()}
    with contextlib.suppress(OSError):  # a status aid: the receiver serves without it
        write_durable(store / WEBHOOK_DIR / RECEIVER_FILE, orjson.dumps(data))


def remove_receiver_file(store: Path) -> None:
    """Forget the receiver file, if this process wrote it (another may serve meanwhile)."""
    import os

    path = store / WEBHOOK_DIR / RECEIVER_FILE
    with contextlib.suppress(OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        if int(orjson.loads(path.read_bytes())["pid"]) == os.getpid():
            path.unlink()


def receiver_info(store: Path) -> dict[str, Any] | None:
    """The receiver file's ``pid``, ``host`` and ``port`` while its process is alive;
    ``None`` when there is none or its process is gone (a crash leaves the file behind)."""
    import os

    path = store / WEBHOOK_DIR / RECEIVER_FILE
    try:
        data = orjson.loads(path.read_bytes())
        pid = int(data["pid"])
        found = {"pid": pid, "host": str(data["host"]), "port": int(data["port"])}
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # dead: the file is stale
    except PermissionError:
        pass  # alive, another user's
    except OSError:
        return None
    return found


def running_receiver(store: Path) -> tuple[str, int] | None:
    """``(host, port)`` of the receiver serving ``store``, from its file; ``None`` when
    there is none or its process is gone."""
    info = receiver_info(store)
    return None if info is None else (info["host"], info["port"])


def disk_status(store: Path, queue: EventQueue | None = None) -> dict[str, Any]:
    """The queue, waiting changes, dead letters and last error as the store's folder holds them.

    Works with no receiver running (``pmtk listen --status`` then reads this).
    """
    queue = queue if queue is not None else EventQueue(store)
    queue.refresh()
    oldest = queue.oldest_ns()
    due = queue.seconds_to_next_due()
    report: dict[str, Any] = {
        "store": str(store.resolve()),
        "queue": {
            "events": queue.count(),
            "bytes": queue.bytes(),
            "max_bytes": queue.max_bytes,
            "oldest_unapplied_age_s": None
            if oldest is None
            else round(max(0.0, time.time() - oldest / 1e9), 3),
            "next_retry_in_s": None if due is None else round(due, 3),
            "waiting_for_sync": queue.waiting(),
        },
        "dead_letters": queue.dead(),
        "dead_letters_evicted": queue.evicted(),
        "dead_letter_limits": {"letters": queue.max_dead, "bytes": queue.max_dead_bytes},
        "journal": str(queue.path),
        "journal_states": queue.states(),
        "events": EventLog(store / WEBHOOK_DIR).status(),
        "last_error": None,
    }
    path = store / WEBHOOK_DIR / "last-error.json"
    try:
        saved = orjson.loads(path.read_bytes())
        report["last_error"] = {
            "text": str(saved["text"]),
            "age_s": round(time.time() - float(saved["at"]), 1),
        }
    except FileNotFoundError:
        pass  # no error recorded yet
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        report["last_error"] = {"text": f"{path} is unreadable: {exc}", "age_s": None}
    return report
