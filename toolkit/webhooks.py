"""Keep a store fresh without polling: a webhook receiver that applies each change.

The live service announces changes as webhooks (``public-docs-facts.md``, "Events"):
Patient create and update, Appointment and Invoice create, update and delete. Each
call's body is a FHIR Bundle of type ``history`` whose first entry is a
``SubscriptionStatus``; its ``notificationEvent[].focus`` references the changed
record. This module receives them and keeps a :mod:`toolkit.store` current::

    POST /<any path> --(auth header? size? history Bundle?)--> .webhooks/queue/<seq>.json
         (fsynced)   --> 202 Accepted
    worker thread: queue --(GET /main/<type>/<id>, one per changed record)-->
         toolkit.store.apply_changes (newest meta.lastUpdated wins) --> queue file removed

Why a queue on disk before the answer: the sender treats 202 as "delivered" and
will not send the event again, so an event must survive a crash from the moment
it is acknowledged. The worker removes a queue file only after the manifest
that includes its change is committed; a crash in between applies it again,
which is harmless (a GET of the current version, merged by id).

Why a GET instead of the payload: the payload may carry only the reference,
and the current version is what the store wants; a late or duplicated event
then fetches the same (or a newer) version, so order does not matter. A record
that answers 404 is removed from the store, whatever the event said. A delete
event (``request.method`` ``DELETE`` for the focus in the Bundle, or a topic or
event code naming a delete) removes the record without a request.

On start, :func:`listen` runs an incremental :func:`toolkit.store.sync` of the
announced resources, so changes made while the receiver was down are covered.
"""

from __future__ import annotations

import contextlib
import hmac
import itertools
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
import typer

from toolkit._options import BaseUrl, ClientId, ClientSecret

__all__ = [
    "ANNOUNCED",
    "DEFAULT_MAX_BODY_BYTES",
    "AuthHeader",
    "Event",
    "EventQueue",
    "Listener",
    "NotificationError",
    "listen",
    "listen_command",
    "parse_notification",
]

log = logging.getLogger("pmtk.listen")

ANNOUNCED: dict[str, tuple[str, ...]] = {
    "Patient": ("create", "update"),
    "Appointment": ("create", "update", "delete"),
    "Invoice": ("create", "update", "delete"),
}
"""The changes the live service announces, per resource type (public facts, "Events")."""

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
"""Largest notification accepted (413 beyond): an id-only notification is about 1 KB."""

MAX_BATCH_FILES = 500
"""Queue files applied in one store commit."""

MAX_QUEUE_FILES = 100_000
"""Queue files held before the receiver answers 503 (the sender then retries later)."""

APPLIED_MARKS = 10_000
"""Records whose last application time :class:`ListenerStats` keeps (oldest dropped)."""

WEBHOOK_DIR = ".webhooks"
_ID = re.compile(r"[A-Za-z0-9\-.]{1,64}")
_TYPE = re.compile(r"[A-Z][A-Za-z]{0,63}")
_MEDIA = frozenset({"application/json", "application/fhir+json", ""})


# --------------------------------------------------------------------------- parsing


class NotificationError(ValueError):
    """A webhook body is not a notification this receiver understands (answered 400)."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True, slots=True)
class Event:
    """One change announced by a notification.

    Attributes
    ----------
    resource_type, id
        The changed record (from ``focus.reference``).
    action
        ``"create"``, ``"update"``, ``"delete"`` or ``None`` when the payload
        does not say (a GET then decides: 404 means deleted).
    timestamp
        ``notificationEvent[].timestamp`` (or the Bundle's), when given.
    event_number
        ``notificationEvent[].eventNumber``, when given.
    """

    resource_type: str
    id: str
    action: str | None = None
    timestamp: str | None = None
    event_number: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.resource_type,
            "id": self.id,
            "action": self.action,
            "timestamp": self.timestamp,
            "event_number": self.event_number,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Event:
        return cls(
            resource_type=str(data["type"]),
            id=str(data["id"]),
            action=data.get("action"),
            timestamp=data.get("timestamp"),
            event_number=data.get("event_number"),
        )


def _action_in(text: Any) -> str | None:
    """``create``/``update``/``delete`` when a topic, code or method names one."""
    if not isinstance(text, str):
        return None
    lowered = text.lower()
    for word, action in (
        ("delete", "delete"),
        ("create", "create"),
        ("update", "update"),
        ("post", "create"),
        ("put", "update"),
    ):
        if re.search(rf"(^|[^a-z]){word}($|[^a-z])", lowered):
            return action
    return None


def _split_reference(reference: Any, where: str) -> tuple[str, str]:
    """``(type, id)`` from the last two path segments of any reference form."""
    if not isinstance(reference, str) or not reference.strip():
        raise NotificationError(where, "must be a reference string such as /main/Patient/123")
    parts = [p for p in reference.strip().split("?")[0].split("/") if p]
    if len(parts) >= 4 and parts[-2] == "_history":  # Type/id/_history/n
        parts = parts[:-2]
    if len(parts) < 2:
        raise NotificationError(where, f"{reference[:80]!r} does not name <Type>/<id>")
    rtype, rid = parts[-2], parts[-1]
    if not _TYPE.fullmatch(rtype) or not _ID.fullmatch(rid):
        raise NotificationError(where, f"{reference[:80]!r} does not name a valid <Type>/<id>")
    return rtype, rid


def parse_notification(body: bytes) -> list[Event]:
    """The events of a webhook body (a ``history`` Bundle led by a SubscriptionStatus).

    A heartbeat or handshake (no ``notificationEvent``) yields no event.

    Parameters
    ----------
    body
        The raw request body.

    Returns
    -------
    list of Event
        In the order of ``notificationEvent``.

    Raises
    ------
    NotificationError
        Naming the first thing that is wrong and where (for example
        ``entry[0].resource.resourceType``).

    Examples
    --------
    >>> body = b'''{"resourceType": "Bundle", "type": "history", "entry": [{"resource": {
    ...   "resourceType": "SubscriptionStatus", "type": "event-notification",
    ...   "notificationEvent": [{"eventNumber": "3",
    ...     "focus": {"reference": "https://au-api.halaxy.com/main/Patient/123"}}]}}]}'''
    >>> [(e.resource_type, e.id, e.event_number) for e in parse_notification(body)]
    [('Patient', '123', '3')]
    """
    try:
        bundle = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise NotificationError("body", f"not valid JSON ({exc})") from None
    if not isinstance(bundle, dict):
        raise NotificationError("body", "must be a JSON object (a FHIR Bundle)")
    if bundle.get("resourceType") != "Bundle":
        raise NotificationError(
            "resourceType", f"must be 'Bundle', got {bundle.get('resourceType')!r:.60}"
        )
    if bundle.get("type") != "history":
        raise NotificationError("type", f"must be 'history', got {bundle.get('type')!r:.60}")
    entries = bundle.get("entry")
    if not isinstance(entries, list) or not entries:
        raise NotificationError("entry", "must be a non-empty array")
    first = entries[0].get("resource") if isinstance(entries[0], dict) else None
    if not isinstance(first, dict) or first.get("resourceType") != "SubscriptionStatus":
        kind = first.get("resourceType") if isinstance(first, dict) else None
        raise NotificationError(
            "entry[0].resource.resourceType", f"must be 'SubscriptionStatus', got {kind!r:.60}"
        )
    if first.get("type") in ("handshake", "heartbeat", "query-status"):
        return []
    notified = first.get("notificationEvent", [])
    if not isinstance(notified, list):
        raise NotificationError("entry[0].resource.notificationEvent", "must be an array")
    topic_action = _action_in(first.get("topic"))
    deleted: set[tuple[str, str]] = set()
    for n, entry in enumerate(entries[1:], start=1):
        request = entry.get("request") if isinstance(entry, dict) else None
        if isinstance(request, dict) and str(request.get("method", "")).upper() == "DELETE":
            with contextlib.suppress(NotificationError):
                deleted.add(_split_reference(request.get("url"), f"entry[{n}].request.url"))
    events: list[Event] = []
    for i, item in enumerate(notified):
        where = f"entry[0].resource.notificationEvent[{i}]"
        if not isinstance(item, dict):
            raise NotificationError(where, "must be an object")
        focus = item.get("focus")
        if not isinstance(focus, dict):
            raise NotificationError(f"{where}.focus", "must be a reference object")
        rtype, rid = _split_reference(focus.get("reference"), f"{where}.focus.reference")
        if isinstance(focus.get("type"), str) and focus["type"] != rtype:
            raise NotificationError(
                f"{where}.focus.type", f"{focus['type']!r:.40} disagrees with the reference"
            )
        action = "delete" if (rtype, rid) in deleted else None
        for code in item.get("extension") or []:
            if action is None and isinstance(code, dict):
                action = _action_in(code.get("valueCode") or code.get("valueString"))
        action = action or topic_action
        stamp = item.get("timestamp") or bundle.get("timestamp")
        number = item.get("eventNumber")
        events.append(
            Event(
                rtype,
                rid,
                action,
                stamp if isinstance(stamp, str) else None,
                str(number) if isinstance(number, str | int) else None,
            )
        )
    return events


# --------------------------------------------------------------------------- auth header


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


# --------------------------------------------------------------------------- the queue


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
        data = orjson.dumps({"received_at": received_at, "events": [e.to_json() for e in events]})
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
        self.failed_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            os.replace(path, self.failed_dir / path.name)
            (self.failed_dir / f"{path.name}.reason.txt").write_text(reason + "\n")
        log.warning("event file %s set aside: %s", path.name, reason)

    def fail_event(self, event: Event, reason: str) -> None:
        """Record one event that cannot be applied (the rest of its file is applied)."""
        self.failed_dir.mkdir(parents=True, exist_ok=True)
        name = f"{time.time_ns():020d}-{event.resource_type}-{event.id}.json"
        payload = {"event": event.to_json(), "reason": reason}
        (self.failed_dir / name).write_bytes(orjson.dumps(payload))
        log.warning("%s/%s not applied: %s", event.resource_type, event.id, reason)


# --------------------------------------------------------------------------- receiver


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


def _make_app(listener: Listener) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def receive(request: Request) -> Response:
        stats = listener.stats
        if request.method != "POST":
            stats.refused += 1
            return _outcome(405, "not-supported", "webhooks are delivered with POST")
        auth = listener.auth_header
        if auth is not None and not auth.matches(request.headers.getlist(auth.name)):
            stats.refused += 1
            log.warning("refused a webhook without the right %s header", auth.name)
            return _outcome(401, "login", f"missing or wrong {auth.name} header")
        limit = listener.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            stats.refused += 1
            if not declared.isdigit():
                return _outcome(400, "invalid", "Content-Length is not a number")
            return _outcome(413, "too-costly", f"the body ({declared} bytes) exceeds {limit}")
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media not in _MEDIA:
            stats.refused += 1
            return _outcome(415, "not-supported", f"the body must be JSON, not {media[:60]!r}")
        body = bytearray()
        try:
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    stats.refused += 1
                    return _outcome(413, "too-costly", f"the body exceeds {limit} bytes")
        except ClientDisconnect:
            stats.refused += 1
            return _outcome(400, "incomplete", "the body was not sent in full")
        try:
            events = parse_notification(bytes(body))
        except NotificationError as exc:
            stats.refused += 1
            log.warning("refused a webhook body: %s", exc)
            return _outcome(400, "structure", f"not a history Bundle notification: {exc}")
        kept: list[Event] = []
        for event in events:
            if event.resource_type in listener.storable:
                kept.append(event)
            else:
                stats.ignored += 1
                log.warning(
                    "accepted %s/%s (%s) but not applied: the store has no %s table",
                    event.resource_type,
                    event.id,
                    event.action or "change",
                    event.resource_type,
                )
        if kept:
            if listener.queue.count() >= MAX_QUEUE_FILES:
                stats.refused += 1
                return _outcome(503, "transient", "the event queue is full; retry later")
            from starlette.concurrency import run_in_threadpool

            from toolkit.store import _now_iso

            try:
                # the fsyncs run on a worker thread, so other calls are not held up
                await run_in_threadpool(listener.queue.put, kept, _now_iso())
            except OSError as exc:
                stats.refused += 1
                log.error("cannot write the event queue: %s", exc)
                return _outcome(503, "transient", "the event could not be stored; retry later")
            stats.events_queued += len(kept)
            listener.wake.set()
        stats.received += 1
        text = f"queued {len(kept)} event(s)" + (
            f"; {len(events) - len(kept)} of a type the store does not hold, not applied"
            if len(kept) != len(events)
            else ""
        )
        return _outcome(202, "informational", text, severity="information")

    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    return Starlette(routes=[Route("/{path:path}", receive, methods=methods)])


# --------------------------------------------------------------------------- worker


class _Retry(Exception):
    """A transient failure: keep the batch and try again later."""


class Listener:
    """A running receiver and its worker (from :func:`listen`).

    Attributes
    ----------
    url
        ``http://127.0.0.1:<port>/webhook``: give it to the sender.
    port
        The bound port.
    store
        The store directory kept current.
    stats
        :class:`ListenerStats`.
    """

    def __init__(
        self,
        store: Path,
        client: Any,
        *,
        auth_header: AuthHeader | None,
        max_body_bytes: int,
        catch_up: bool,
        errors: Literal["raise", "warn"],
    ) -> None:
        from toolkit import views

        self.store = store
        self.client = client
        self.auth_header = auth_header
        self.max_body_bytes = max_body_bytes
        self.catch_up = catch_up
        self.errors = errors
        self.storable = frozenset(views.VIEWS)
        self.queue = EventQueue(store)
        self.stats = ListenerStats()
        self.wake = threading.Event()
        self.caught_up = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self.url = ""
        self.port = 0
        self._worker = threading.Thread(target=self._run, name="pmtk-listen-worker", daemon=True)

    def __repr__(self) -> str:
        return f"Listener(url={self.url!r}, store={str(self.store)!r})"

    # -- lifecycle -------------------------------------------------------------------

    def start_worker(self) -> None:
        self._worker.start()

    def stop_worker(self) -> None:
        self._stop.set()
        self.wake.set()
        self._worker.join(timeout=60)

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait until the catch-up sync is done and the queue is empty; true if it got there."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.caught_up.is_set() and self._idle.is_set() and self.queue.count() == 0:
                return True
            time.sleep(0.01)
        return False

    # -- the worker ------------------------------------------------------------------

    def _run(self) -> None:
        if self.catch_up:
            self._catch_up()
        else:
            self.stats.catch_up = "skipped"
        self.caught_up.set()
        delay = 0.0
        while not self._stop.is_set():
            self.wake.clear()
            batch = self.queue.pending()
            if not batch:
                self._idle.set()
                self.wake.wait(0.5)
                continue
            self._idle.clear()
            try:
                self._apply(batch)
                delay = 0.0
            except Exception as exc:  # the worker must outlive any one failure
                delay = min(30.0, max(0.2, delay * 2))
                reason = str(exc) if isinstance(exc, _Retry) else f"{type(exc).__name__}: {exc}"
                log.warning("applying events failed (%s); retrying in %.1f s", reason, delay)
                self._stop.wait(delay)

    def _catch_up(self) -> None:
        from toolkit.store import sync

        wanted = [t for t in ANNOUNCED if t in self.storable]
        try:
            summary = sync(self.client, self.store, resources=wanted, progress=False)
        except Exception as exc:  # the receiver still serves; events queue meanwhile
            self.stats.catch_up = f"failed: {type(exc).__name__}: {exc}"[:300]
            log.error("catch-up sync failed: %s", exc)
            return
        self.stats.catch_up = "ok: " + ", ".join(
            f"{r.resource} {r.status} ({r.fetched} fetched)" for r in summary.resources
        )
        log.info("catch-up sync: %s", self.stats.catch_up)

    def _fetch(self, event: Event) -> dict[str, Any] | None:
        """The record's current version, ``None`` when it is gone (404/410)."""
        from toolkit.errors import (
            ApiError,
            AuthError,
            NotFound,
            RateLimited,
            ServerError,
            TransportError,
        )

        self.stats.requests += 1
        try:
            record = self.client.read(event.resource_type, event.id)
        except NotFound:
            return None
        except (TransportError, ServerError, RateLimited, AuthError) as exc:
            # AuthError too: wrong credentials are fixed by the operator, and the
            # events must still be there when they are.
            raise _Retry(f"{type(exc).__name__}: {exc}") from exc
        except ApiError as exc:
            if exc.status == 410:
                return None
            raise
        if record.get("id") != event.id:
            raise ApiError(
                200,
                method="GET",
                url=f"{event.resource_type}/{event.id}",
                diagnostics=f"the answer holds id {str(record.get('id'))[:40]!r}",
            )
        return dict(record)

    def _apply(self, batch: Sequence[tuple[Path, list[Event], str]]) -> None:
        from toolkit.errors import ApiError, DataValidationError
        from toolkit.store import apply_changes

        latest: dict[tuple[str, str], Event] = {}
        for _path, events, _received in batch:
            for event in events:
                key = (event.resource_type, event.id)
                latest.pop(key, None)  # keep the order of the latest announcement
                latest[key] = event
        by_type: dict[str, tuple[list[dict[str, Any]], list[str], list[Event]]] = {}
        for (rtype, rid), event in latest.items():
            ups, dels, evs = by_type.setdefault(rtype, ([], [], []))
            if event.action == "delete":
                dels.append(rid)
                evs.append(event)
                continue
            try:
                record = self._fetch(event)
            except ApiError as exc:
                self.queue.fail_event(event, f"reading it failed: {exc}")
                self.stats.failures += 1
                continue
            if record is None:
                dels.append(rid)
            else:
                ups.append(record)
            evs.append(event)
        for rtype, (ups, dels, evs) in by_type.items():
            if not evs:
                continue
            last = {**evs[-1].to_json(), "received_at": batch[-1][2]}
            try:
                done = apply_changes(
                    rtype,
                    self.store,
                    upserts=ups,
                    deletes=dels,
                    event=last,
                    errors=self.errors,
                )
                log.info(
                    "%s: %d written, %d deleted, %d already newer in the store",
                    rtype,
                    len(done.upserted),
                    len(done.deleted),
                    len(done.stale),
                )
            except DataValidationError:
                self._apply_one_by_one(rtype, ups, dels, evs)
            except Exception as exc:
                # A busy or damaged store, a full disk: the events stay queued until
                # it is repaired (the message says how) and are applied then.
                raise _Retry(f"{type(exc).__name__}: {exc}") from exc
            now = time.time()
            marks = self.stats.applied_at
            for event in evs:
                mark = f"{event.resource_type}/{event.id}"
                marks.pop(mark, None)
                marks[mark] = now
            while len(marks) > APPLIED_MARKS:  # oldest first: dicts keep insertion order
                del marks[next(iter(marks))]
            self.stats.applied += len(evs)
        self.queue.done([path for path, _events, _received in batch])
        self.stats.batches += 1

    def _apply_one_by_one(
        self, rtype: str, ups: list[dict[str, Any]], dels: list[str], evs: list[Event]
    ) -> None:
        """Isolate the records that fail their schema; apply the others."""
        from toolkit.errors import DataValidationError
        from toolkit.store import apply_changes

        by_id = {e.id: e for e in evs}
        for record in ups:
            event = by_id[str(record["id"])]
            try:
                apply_changes(
                    rtype,
                    self.store,
                    upserts=[record],
                    event=event.to_json(),
                    errors=self.errors,
                )
            except DataValidationError as exc:
                self.queue.fail_event(event, f"the record fails its schema: {exc}")
                self.stats.failures += 1
        if dels:
            apply_changes(rtype, self.store, deletes=dels, event=evs[-1].to_json())


# --------------------------------------------------------------------------- public API


@contextlib.contextmanager
def listen(
    store: str | os.PathLike[str] = "pmtk-store",
    *,
    client: Any = None,
    port: int = 0,
    auth_header: AuthHeader | str | None = None,
    catch_up: bool = True,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    errors: Literal["raise", "warn"] = "raise",
    log_level: str = "warning",
) -> Iterator[Listener]:
    """Receive webhooks on 127.0.0.1 and keep the store at ``store`` current.

    Parameters
    ----------
    store
        The store directory (missing, empty or a pmtk store). The event queue
        lives in its ``.webhooks/`` folder.
    client
        A :class:`toolkit.Client` used for the catch-up sync and one GET per
        changed record; ``None`` uses :func:`toolkit.connect`.
    port
        Port on 127.0.0.1 (``0`` picks a free one; see ``listener.port``).
    auth_header
        The authentication header every webhook must carry, as an
        :class:`AuthHeader` or ``"NAME:VALUE"``; ``None`` accepts any caller.
    catch_up
        Run an incremental sync of the announced resources first (events that
        arrive meanwhile are queued and applied after it).
    max_body_bytes
        Larger bodies are refused with 413.
    errors
        ``"raise"``: a record that fails its schema is set aside in
        ``.webhooks/failed/`` (the others are applied); ``"warn"``: it is stored
        anyway and a :class:`toolkit.schemas.PmtkDataWarning` is emitted.

    Yields
    ------
    Listener
        ``listener.url`` to configure in the sender, ``listener.stats``.

    Raises
    ------
    toolkit.store.NotAStore
        ``store`` is not empty and not a pmtk store (nothing written).
    """
    import uvicorn

    from toolkit.errors import ConfigurationError
    from toolkit.store import _claim, _init_manifest, _locked

    root = Path(store)
    _claim(root)
    with _locked(root):
        _claim(root)
        _init_manifest(root)
    header = AuthHeader.parse(auth_header) if isinstance(auth_header, str) else auth_header
    owned = None
    if client is None:
        import toolkit

        owned = client = toolkit.connect()
    listener = Listener(
        root,
        client,
        auth_header=header,
        max_body_bytes=max_body_bytes,
        catch_up=catch_up,
        errors=errors,
    )
    config = uvicorn.Config(
        _make_app(listener),
        host="127.0.0.1",
        port=port,
        log_level=log_level,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=2,
        server_header=False,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="pmtk-listen", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    try:
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                server.should_exit = True
                msg = f"the webhook receiver could not start on 127.0.0.1:{port}"
                raise ConfigurationError(msg)
            time.sleep(0.005)
        bound = port
        for srv in server.servers:
            for sock in srv.sockets:
                bound = sock.getsockname()[1]
        listener.port = bound
        listener.url = f"http://127.0.0.1:{bound}/webhook"
        listener.start_worker()
        yield listener
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listener.stop_worker()
        if owned is not None:
            owned.close()


def listen_command(
    store: Annotated[
        Path, typer.Option("--store", "-s", help="Store directory to keep current.")
    ] = Path("pmtk-store"),
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0 picks a free one).")] = 8090,
    auth_header: Annotated[
        str | None,
        typer.Option(
            "--auth-header",
            envvar="PM_WEBHOOK_AUTH_HEADER",
            help="NAME:VALUE every webhook must carry (prefer the environment variable).",
            show_default=False,
        ),
    ] = None,
    catch_up: Annotated[
        bool, typer.Option("--catch-up/--no-catch-up", help="Run an incremental sync first.")
    ] = True,
    base_url: BaseUrl = None,
    client_id: ClientId = None,
    client_secret: ClientSecret = None,
    max_body_bytes: Annotated[
        int, typer.Option(help="Largest webhook body accepted (413 beyond).")
    ] = DEFAULT_MAX_BODY_BYTES,
) -> None:
    """Receive webhooks on 127.0.0.1 and keep a Parquet store current until Ctrl-C."""
    from toolkit.errors import ConfigurationError, PmtkError

    logging.basicConfig(level=logging.INFO, format="pmtk listen: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per GET is noise
    try:
        header = AuthHeader.parse(auth_header) if auth_header else None
        import toolkit

        kwargs = {
            k: v
            for k, v in (
                ("base_url", base_url),
                ("client_id", client_id),
                ("client_secret", client_secret),
            )
            if v
        }
        with (
            toolkit.connect(**kwargs) as client,
            listen(
                store,
                client=client,
                port=port,
                auth_header=header,
                catch_up=catch_up,
                max_body_bytes=max_body_bytes,
            ) as listener,
        ):
            typer.echo(f"webhook URL: {listener.url}")
            typer.echo(f"store:       {store}")
            typer.echo(
                "auth header: "
                + (f"{header.name} (value hidden)" if header else "none (any caller accepted)")
            )
            typer.echo("listening until Ctrl-C", err=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                typer.echo("stopping", err=True)
    except ConfigurationError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except PmtkError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
