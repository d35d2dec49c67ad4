"""A queued change (and its row in the journal: ``journal.py``), the receiver's
authentication and its counters."""

from __future__ import annotations

import contextlib
import hmac
import os
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from toolkit.errors import ConfigurationError
from toolkit.redaction import redact, redact_json, register
from toolkit.webhooks.events import (
    Event,
)

if TYPE_CHECKING:
    import sqlite3


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

            raise ConfigurationError(msg)
        if not value.strip():
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


def write_durable(path: Path, data: bytes) -> None:
    """``data`` at ``path``, fsynced and moved in whole (a crash leaves the old file or none)."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with tmp.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@dataclass(slots=True)
class Change:
    """One queued change: the event, when it was first received, how often it was tried.

    Attributes
    ----------
    event
        The latest event announced for the record.
    first_ns
        ``time.time_ns()`` when the oldest unapplied event of the record was received.
    attempts
        Reads tried so far (a retry counts one more).
    last_error
        Why the last attempt failed (``None`` before any).
    received_at
        ISO time of the latest notification announcing it.
    """

    event: Event
    first_ns: int
    attempts: int = 0
    last_error: str | None = None
    received_at: str = ""
    rows: list[int] = field(default_factory=list)
    """The journal rows holding it (more than one: the record announced again, merged)."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.event.resource_type, self.event.id)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.event.to_json(),
            "first_ns": self.first_ns,
            "attempts": self.attempts,
            "last_error": self.last_error,
            "received_at": self.received_at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Change:
        return cls(
            Event.from_json(data),
            int(data["first_ns"]),
            int(data.get("attempts") or 0),
            data.get("last_error"),
            str(data.get("received_at") or ""),
        )


def redacted(text: str | None) -> str | None:
    """``text`` with every registered secret hidden (a reason kept in the journal)."""
    return None if text is None else redact(text)


def insert_changes(
    db: sqlite3.Connection, changes: Sequence[Change], state: str, due_ns: int | None = None
) -> None:
    """Insert ``changes`` in ``state`` within the caller's transaction (also the migration's)."""
    now = time.time_ns()
    for change in changes:
        event = orjson.dumps(redact_json(change.event.to_json()))
        cursor = db.execute(
            "INSERT INTO changes (state, rtype, rid, event, first_ns, due_ns, attempts, "
            "last_error, received_at, size) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                state,
                change.event.resource_type,
                change.event.id,
                event,
                change.first_ns,
                now if due_ns is None else due_ns,
                change.attempts,
                redacted(change.last_error),
                change.received_at,
                len(event) + 64,
            ),
        )
        change.rows = [int(cursor.lastrowid or 0)]


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")


def outcome_response(status: int, code: str, text: str, severity: str = "error") -> Any:
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
    """Events of a resource type pmtk keeps no table of (accepted, logged, not queued)."""
    applied: int = 0
    """Changes applied to the store."""
    requests: int = 0
    """GET requests the worker sent to read changed records."""
    batches: int = 0
    retried: int = 0
    """Changes whose read failed and that were queued again for later."""
    held: int = 0
    """Changes set to wait for a full sync of their type."""
    failures: int = 0
    """Changes moved to the dead letters (a permanent error, too many attempts, a bad record)."""
    restarts: int = 0
    """Times the worker failed as a whole and was started again."""
    last_error: str | None = None
    last_error_at: float | None = None
    resolved_error: str | None = None
    """The last error cleared because the thing that failed has since succeeded."""
    resolved_error_at: float | None = None
    catch_up: str = "not run"
    gaps_healed: int = 0
    """Gaps in the event numbers healed by a sync of the types concerned."""
    applied_at: dict[str, float] = field(default_factory=dict)
    """``"Type/id" -> time.time()`` of the latest application (the last 10,000 records)."""


class Retry(Exception):
    """A transient failure: try again later."""
