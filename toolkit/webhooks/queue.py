"""The receiver's on-disk queue of accepted notifications, its authentication and its counters."""

from __future__ import annotations

import contextlib
import hmac
import itertools
import os
import re
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from toolkit.redaction import redact, redact_json, register
from toolkit.webhooks.events import MAX_BATCH_FILES, WEBHOOK_DIR, Event, log


class AuthHeader:
    """The authentication header a webhook must carry; the value is a secret.

    Parameters
    ----------
    name
        The header name, e.g. ``"Authorization"``.
    value
        The exact value, e.g. ``"Bearer 5f1c..."``. Never shown by ``repr``.
    """

    def __init__(self, name: str, value: str) -> None:
        name = name.strip()
        if not re.fullmatch(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+", name):
            msg = f"the authentication header name {name[:40]!r} is not a valid HTTP header name"
            from toolkit.errors import ConfigurationError

            raise ConfigurationError(msg)
        if not value.strip():
            from toolkit.errors import ConfigurationError

            msg = f"the authentication header {name} needs a value"
            raise ConfigurationError(msg)
        self.name = name
        self._value = value.strip().encode()
        register(value.strip())  # never in a log line or a queue file, even echoed

    @classmethod
    def parse(cls, text: str) -> AuthHeader:
        """``"NAME:VALUE"`` (as ``curl -H`` takes it), e.g. ``"Authorization: Bearer s3cret"``."""
        name, sep, value = text.partition(":")
        if not sep:
            from toolkit.errors import ConfigurationError

            msg = "the authentication header must be NAME:VALUE, e.g. 'Authorization: Bearer ...'"
            raise ConfigurationError(msg)
        return cls(name, value)

    def __repr__(self) -> str:
        return f"AuthHeader(name={self.name!r}, value=<hidden>)"

    def matches(self, values: Sequence[str | bytes]) -> bool:
        """Whether exactly one value was sent and it is ours (compared in constant time).

        ``str`` values are taken as ASGI gives them (the raw bytes decoded as
        latin-1), so a UTF-8 secret compares byte for byte.
        """
        if len(values) != 1:
            return False
        sent = values[0]
        raw = sent.encode("latin-1", "replace") if isinstance(sent, str) else sent
        return hmac.compare_digest(raw.strip(), self._value)

    def value_for_sending(self) -> str:
        """The value, for a sender's configuration (tests, the mock); never log it."""
        return self._value.decode()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class EventQueue:
    """Acknowledged events on disk: one fsynced JSON file per notification.

    Files are named ``<ns since epoch>-<counter>-<uuid>.json`` so that their
    sorted order is the order they were received in.
    """

    def __init__(self, store: Path) -> None:
        self.dir = store / WEBHOOK_DIR / "queue"
        self.failed_dir = store / WEBHOOK_DIR / "failed"
        self.dir.mkdir(parents=True, exist_ok=True)
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def put(self, events: Sequence[Event], received_at: str) -> Path:
        """Write ``events`` durably; return the queue file (it exists once this returns)."""
        with self._lock:
            n = next(self._counter)
        name = f"{time.time_ns():020d}-{n:08d}-{uuid.uuid4().hex[:8]}.json"
        data = orjson.dumps(
            redact_json({"received_at": received_at, "events": [e.to_json() for e in events]})
        )
        tmp = self.dir / f".{name}.tmp"
        try:
            with tmp.open("wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.dir / name)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        _fsync_dir(self.dir)
        return self.dir / name

    def pending(self, limit: int = MAX_BATCH_FILES) -> list[tuple[Path, list[Event], str]]:
        """The oldest queue files (up to ``limit``): ``(path, events, received_at)``."""
        names = sorted(p for p in os.listdir(self.dir) if p.endswith(".json"))[:limit]
        found: list[tuple[Path, list[Event], str]] = []
        for name in names:
            path = self.dir / name
            try:
                data = orjson.loads(path.read_bytes())
                events = [Event.from_json(e) for e in data["events"]]
                found.append((path, events, str(data.get("received_at"))))
            except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
                self.fail(path, f"unreadable queue file: {exc}")
        return found

    def count(self) -> int:
        return sum(1 for p in os.listdir(self.dir) if p.endswith(".json"))

    def done(self, paths: Sequence[Path]) -> None:
        """Forget applied files (their changes are committed in the store's manifest)."""
        for path in paths:
            path.unlink(missing_ok=True)
        _fsync_dir(self.dir)

    def fail(self, path: Path, reason: str) -> None:
        """Move a file that can never be applied aside, with the reason beside it."""
        reason = redact(reason)
        self.failed_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            os.replace(path, self.failed_dir / path.name)
            (self.failed_dir / f"{path.name}.reason.txt").write_text(reason + "\n")
        log.warning("event file %s set aside: %s", path.name, reason)

    def fail_event(self, event: Event, reason: str) -> None:
        """Record one event that cannot be applied (the rest of its file is applied)."""
        self.failed_dir.mkdir(parents=True, exist_ok=True)
        name = f"{time.time_ns():020d}-{event.resource_type}-{event.id}.json"
        payload = redact_json({"event": event.to_json(), "reason": reason})
        (self.failed_dir / name).write_bytes(orjson.dumps(payload))
        log.warning("%s/%s not applied: %s", event.resource_type, event.id, reason)


def _outcome(status: int, code: str, text: str, severity: str = "error") -> Any:
    from starlette.responses import Response

    body = orjson.dumps(
        {
            "resourceType": "OperationOutcome",
            "issue": [
                {"severity": severity, "code": code, "diagnostics": text, "details": {"text": text}}
            ],
        }
    )
    headers = {"www-authenticate": "Bearer"} if status == 401 else None
    return Response(body, status_code=status, media_type="application/fhir+json", headers=headers)


@dataclass(slots=True)
class ListenerStats:
    """Counters of a running :class:`Listener` (read them with ``listener.stats``)."""

    received: int = 0
    """Notifications acknowledged (202)."""
    refused: int = 0
    """Calls answered 4xx/5xx."""
    events_queued: int = 0
    ignored: int = 0
    """Events of a resource type the store has no table for (accepted, logged, not applied)."""
    applied: int = 0
    """Events applied to the store."""
    requests: int = 0
    """GET requests the worker sent to read changed records."""
    batches: int = 0
    failures: int = 0
    """Events set aside (a permanent error, or a record failing its schema)."""
    catch_up: str = "not run"
    applied_at: dict[str, float] = field(default_factory=dict)
    """``"Type/id" -> time.time()`` of the latest application (the last 10,000 records)."""


class _Retry(Exception):
    """A transient failure: keep the batch and try again later."""
