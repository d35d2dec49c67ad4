"""A webhook notification parsed and checked into events (what changed, of which record)."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from toolkit import catalogue
from toolkit.errors import InvalidId
from toolkit.origin import safe_id

log = logging.getLogger("pmtk.listen")


ANNOUNCED: dict[str, tuple[str, ...]] = catalogue.WEBHOOK_EVENTS
"""The changes the live service announces, per resource type (the catalogue's fact)."""


DEFAULT_MAX_BODY_BYTES = 1024 * 1024
"""Largest notification accepted (413 beyond): an id-only notification is about 1 KB."""


DEFAULT_MAX_QUEUE_BYTES = 256 * 1024 * 1024
"""Unapplied changes held on disk before the receiver answers 503 (the sender retries later)."""


MAX_BATCH_EVENTS = 500
"""Changes read and applied in one store commit: what bounds the worker's memory."""


FILE_EVENTS = 500
"""Changes per queue file: a large notification (or a group of notifications written
together) is split, so a batch holds at most about twice :data:`MAX_BATCH_EVENTS`
(each file costs one fsync before the 202, each group one more for the folder)."""


APPLIED_MARKS = 10_000
"""Records whose last application time :class:`ListenerStats` keeps (oldest dropped)."""


WEBHOOK_DIR = ".webhooks"


_TYPE = re.compile(r"[A-Z][A-Za-z]{0,63}")


MEDIA_TYPES = frozenset({"application/json", "application/fhir+json"})
"""Body types accepted (415 otherwise). Neither is CORS-safelisted, so a browser page
must ask a preflight first, which the receiver never grants (no CORS headers).
``application/fhir+json`` stays because a FHIR subscription delivers in it; a missing
type is refused: that is what a ``no-cors`` fetch with a Blob body sends."""


def note(level: int, msg: str, *args: object, exc: BaseException | None = None) -> None:
    """Every log line of the receiver and its worker goes through here (one place to redact)."""
    log.log(level, msg, *args, exc_info=exc)


def describe(exc: BaseException) -> str:
    """``Type: message``, followed by each cause (``__cause__``/``__context__``) in turn."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(parts) < 4:
        seen.add(id(current))
        parts.append(f"{type(current).__name__}: {current}"[:300])
        current = current.__cause__ or current.__context__
    return " <- caused by ".join(parts)


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
    if not _TYPE.fullmatch(rtype):
        raise NotificationError(where, f"{reference[:80]!r} does not name a valid <Type>/<id>")
    try:
        # the client's own rule for an id in a URL path, so nothing queued is refused later
        safe_id(rtype, rid)
    except InvalidId as exc:
        raise NotificationError(where, f"{reference[:80]!r}: {exc}") from None
    return rtype, rid


@dataclass(frozen=True, slots=True)
class Delivery:
    """A notification's events and what it says of its subscription.

    Attributes
    ----------
    events
        As :func:`parse_notification` returns them.
    subscription
        ``SubscriptionStatus.subscription.reference`` (``None`` when absent).
    events_since_start
        ``SubscriptionStatus.eventsSinceSubscriptionStart`` as a number, when given.
    """

    events: list[Event]
    subscription: str | None = None
    events_since_start: int | None = None


def parse_delivery(body: bytes) -> Delivery:
    """The :class:`Delivery` of a webhook body (raises :class:`NotificationError`)."""
    events = parse_notification(body)
    status = orjson.loads(body)["entry"][0]["resource"]
    reference = status.get("subscription")
    subscription = reference.get("reference") if isinstance(reference, dict) else None
    since = status.get("eventsSinceSubscriptionStart")
    count: int | None = None
    if isinstance(since, int | str) and not isinstance(since, bool):
        with contextlib.suppress(ValueError):
            count = int(str(since).strip())
    return Delivery(
        events,
        subscription[:500] if isinstance(subscription, str) else None,
        count if count is not None and 0 <= count < 2**62 else None,
    )


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
    bundle, entries = _history_bundle(body)
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
    deleted = _deleted_in(entries)
    return [
        _event(item, f"entry[0].resource.notificationEvent[{i}]", bundle, deleted, topic_action)
        for i, item in enumerate(notified)
    ]


def _history_bundle(body: bytes) -> tuple[dict[str, Any], list[Any]]:
    """The body as a ``history`` Bundle, and its (non-empty) entries."""
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
    return bundle, entries


def _deleted_in(entries: list[Any]) -> set[tuple[str, str]]:
    """``(type, id)`` of every entry after the status whose request is a DELETE."""
    deleted: set[tuple[str, str]] = set()
    for n, entry in enumerate(entries[1:], start=1):
        request = entry.get("request") if isinstance(entry, dict) else None
        if isinstance(request, dict) and str(request.get("method", "")).upper() == "DELETE":
            with contextlib.suppress(NotificationError):
                deleted.add(_split_reference(request.get("url"), f"entry[{n}].request.url"))
    return deleted


def _event(
    item: Any,
    where: str,
    bundle: dict[str, Any],
    deleted: set[tuple[str, str]],
    topic_action: str | None,
) -> Event:
    """One ``notificationEvent`` as an :class:`Event` (its action from the bundle if needed)."""
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
    return Event(
        rtype,
        rid,
        action,
        stamp if isinstance(stamp, str) else None,
        str(number) if isinstance(number, str | int) else None,
    )
