"""The receiving ASGI app and the listener that applies queued events to the store."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from toolkit.webhooks.events import (
    _MEDIA,
    ANNOUNCED,
    APPLIED_MARKS,
    MAX_QUEUE_FILES,
    Event,
    NotificationError,
    log,
    parse_notification,
)
from toolkit.webhooks.queue import AuthHeader, EventQueue, ListenerStats, _outcome, _Retry


def _make_app(listener: Listener) -> Any:
    """The receiver: one route that accepts every path and answers every method."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def receive(request: Request) -> Response:
        refusal = _refusal(listener, request)
        if refusal is None:
            body = await _read_body(request, listener.max_body_bytes)
            refusal = body if isinstance(body, Response) else None
        if refusal is not None:
            listener.stats.refused += 1
            return refusal
        assert isinstance(body, bytes)
        try:
            events = parse_notification(body)
        except NotificationError as exc:
            listener.stats.refused += 1
            log.warning("refused a webhook body: %s", exc)
            return _outcome(400, "structure", f"not a history Bundle notification: {exc}")
        kept = _storable(listener, events)
        if kept:
            refusal = await _enqueue(listener, kept)
            if refusal is not None:
                listener.stats.refused += 1
                return refusal
        listener.stats.received += 1
        text = f"queued {len(kept)} event(s)" + (
            f"; {len(events) - len(kept)} of a type the store does not hold, not applied"
            if len(kept) != len(events)
            else ""
        )
        return _outcome(202, "informational", text, severity="information")

    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    return Starlette(routes=[Route("/{path:path}", receive, methods=methods)])


def _refusal(listener: Listener, request: Any) -> Any:
    """The answer to a call refused before its body is read (method, auth, size, media)."""
    if request.method != "POST":
        return _outcome(405, "not-supported", "webhooks are delivered with POST")
    auth = listener.auth_header
    if auth is not None and not auth.matches(request.headers.getlist(auth.name)):
        log.warning("refused a webhook without the right %s header", auth.name)
        return _outcome(401, "login", f"missing or wrong {auth.name} header")
    limit = listener.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and not declared.isdigit():
        return _outcome(400, "invalid", "Content-Length is not a number")
    if declared is not None and int(declared) > limit:
        return _outcome(413, "too-costly", f"the body ({declared} bytes) exceeds {limit}")
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in _MEDIA:
        return _outcome(415, "not-supported", f"the body must be JSON, not {media[:60]!r}")
    return None


async def _read_body(request: Any, limit: int) -> Any:
    """The body (at most ``limit`` bytes), or the answer refusing it."""
    from starlette.requests import ClientDisconnect

    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                return _outcome(413, "too-costly", f"the body exceeds {limit} bytes")
    except ClientDisconnect:
        return _outcome(400, "incomplete", "the body was not sent in full")
    return bytes(body)


def _tables_of(store: Path, known: frozenset[str]) -> frozenset[str]:
    """The types whose events the listener applies: those the store holds, or, for a
    store that holds none yet, every type with a view (the catch-up syncs them).

    An event of a type the store was never synced with is not applied: a table made
    of webhook deliveries alone would look complete and hold a handful of records.
    """
    from toolkit.errors import PmtkError
    from toolkit.store import read_manifest

    try:
        held = frozenset(read_manifest(store).get("resources") or {})
    except PmtkError:
        return known
    return (held & known) or known


def _storable(listener: Listener, events: list[Event]) -> list[Event]:
    """The events of types the store holds; the others are counted and logged."""
    kept: list[Event] = []
    for event in events:
        if event.resource_type in listener.storable:
            kept.append(event)
            continue
        listener.stats.ignored += 1
        log.warning(
            "accepted %s/%s (%s) but not applied: the store has no %s table",
            event.resource_type,
            event.id,
            event.action or "change",
            event.resource_type,
        )
    return kept


async def _enqueue(listener: Listener, kept: list[Event]) -> Any:
    """Queue the events durably and wake the applier; the answer refusing them otherwise."""
    from starlette.concurrency import run_in_threadpool

    from toolkit.store import _now_iso

    if listener.queue.count() >= MAX_QUEUE_FILES:
        return _outcome(503, "transient", "the event queue is full; retry later")
    try:
        # the fsyncs run on a worker thread, so other calls are not held up
        await run_in_threadpool(listener.queue.put, kept, _now_iso())
    except OSError as exc:
        log.error("cannot write the event queue: %s", exc)
        return _outcome(503, "transient", "the event could not be stored; retry later")
    listener.stats.events_queued += len(kept)
    listener.wake.set()
    return None


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
        self.storable = _tables_of(store, frozenset(views.VIEWS))
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
        """Apply a batch of queued notifications: the latest event per record, by type."""
        from toolkit.errors import DataValidationError
        from toolkit.store import apply_changes

        for rtype, (ups, dels, evs) in self._changes(_latest(batch)).items():
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
            self._mark_applied(evs)
        self.queue.done([path for path, _events, _received in batch])
        self.stats.batches += 1

    def _changes(
        self, latest: dict[tuple[str, str], Event]
    ) -> dict[str, tuple[list[dict[str, Any]], list[str], list[Event]]]:
        """Per type: the records to upsert (one GET each), the ids to delete, their events."""
        from toolkit.errors import ApiError

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
        return by_type

    def _mark_applied(self, evs: list[Event]) -> None:
        """Remember when each record was applied (the newest :data:`APPLIED_MARKS`)."""
        now = time.time()
        marks = self.stats.applied_at
        for event in evs:
            mark = f"{event.resource_type}/{event.id}"
            marks.pop(mark, None)
            marks[mark] = now
        while len(marks) > APPLIED_MARKS:  # oldest first: dicts keep insertion order
            del marks[next(iter(marks))]
        self.stats.applied += len(evs)

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


def _latest(batch: Sequence[tuple[Path, list[Event], str]]) -> dict[tuple[str, str], Event]:
    """The latest event of each record, in the order of its latest announcement."""
    latest: dict[tuple[str, str], Event] = {}
    for _path, events, _received in batch:
        for event in events:
            key = (event.resource_type, event.id)
            latest.pop(key, None)  # keep the order of the latest announcement
            latest[key] = event
    return latest
