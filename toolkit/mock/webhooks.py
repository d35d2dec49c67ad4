"""The mock's webhook sender: announces writes as the live service does.

The live service announces Patient create and update, and Appointment and
Invoice create, update and delete (``public-docs-facts.md``, "Events"). Each
announcement is a POST of a FHIR Bundle of type ``history`` whose first entry is
a ``SubscriptionStatus``; its ``notificationEvent[0].focus`` references the
changed record (id only: the receiver reads the record itself), its ``topic``
names the change (for example ``.../SubscriptionTopic/appointment-delete``), and a
delete also carries a history entry with ``request.method`` ``DELETE``.

Sending happens on one background thread from a bounded queue, in the order of
the writes; a receiver that is down or answers anything but 200, 201 or 202 is
retried with exponential backoff (the event stays first in line). Only loopback
addresses are accepted as targets.
"""

from __future__ import annotations

import collections
import ipaddress
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

from toolkit import catalogue

__all__ = ["ANNOUNCED", "WebhookSender", "notification"]

ANNOUNCED: dict[str, frozenset[str]] = {
    "Patient": frozenset({"create", "update"}),
    "Appointment": frozenset({"create", "update", "delete"}),
    "Invoice": frozenset({"create", "update", "delete"}),
}
"""Changes the live service announces, per resource type."""

TOPIC_BASE = "https://terminology.halaxy.com/SubscriptionTopic"
QUEUE_LIMIT = 10_000
"""Events held while the receiver is slow or down; more are dropped (and counted)."""
FIRST_DELAY = 0.05
MAX_DELAY = 5.0
REFUSED_ATTEMPTS = 3
"""A receiver that refuses an event (4xx other than 408/429) gets it this many times."""
SUCCESS = frozenset({200, 201, 202})
USER_AGENT = "pmtk-mock-webhooks"


def _iso(epoch: float) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch))
    return f"{stamp}.{int(epoch * 1000) % 1000:03d}Z"


def notification(
    rtype: str, rid: str, action: str, *, number: int, origin: str, at: float
) -> bytes:
    """The JSON body announcing one change (a ``history`` Bundle).

    Parameters
    ----------
    rtype, rid
        The changed record.
    action
        ``"create"``, ``"update"`` or ``"delete"``.
    number
        ``eventNumber`` (and ``eventsSinceSubscriptionStart``): counts from 1.
    origin
        ``http://127.0.0.1:<port>``: references are absolute, as the live service sends.
    at
        Epoch seconds of the change.
    """
    topic = f"{TOPIC_BASE}/{rtype.lower()}-{action}"
    full = f"{origin}/main/{rtype}/{rid}"
    status = {
        "resourceType": "SubscriptionStatus",
        "status": "active",
        "type": "event-notification",
        "eventsSinceSubscriptionStart": str(number),
        "notificationEvent": [
            {"eventNumber": str(number), "timestamp": _iso(at), "focus": {"reference": full}}
        ],
        "subscription": {"reference": f"{origin}/main/Subscription/pmtk-mock"},
        "topic": topic,
    }
    entries: list[dict[str, Any]] = [
        {"fullUrl": f"urn:uuid:{uuid.uuid4()}", "resource": status},
    ]
    if action == "delete":
        entries.append({"fullUrl": full, "request": {"method": "DELETE", "url": f"{rtype}/{rid}"}})
    bundle = {
        "resourceType": "Bundle",
        "id": str(uuid.uuid4()),
        "type": "history",
        "timestamp": _iso(at),
        "entry": entries,
    }
    return orjson.dumps(bundle)


def check_target(url: str) -> None:
    """Raise ValueError unless ``url`` is an http(s) URL on a loopback address."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        msg = f"the webhook URL must be http://127.0.0.1:<port>/..., got {url[:80]!r}"
        raise ValueError(msg)
    host = parts.hostname
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        msg = f"the mock sends webhooks to loopback addresses only, not {host[:60]!r}"
        raise ValueError(msg)


def split_header(text: str | None) -> tuple[str, str] | None:
    """``"NAME:VALUE"`` as a pair (``None`` for no header); ValueError when malformed."""
    if text is None:
        return None
    name, sep, value = text.partition(":")
    if not sep or not name.strip() or not value.strip():
        msg = "the webhook header must be NAME:VALUE, e.g. 'Authorization: Bearer ...'"
        raise ValueError(msg)
    if any(ord(c) < 32 or ord(c) == 127 for c in text) or " " in name.strip():
        msg = "the webhook header name or value holds a space or control character"
        raise ValueError(msg)
    return name.strip(), value.strip()


@dataclass(slots=True)
class _Pending:
    rtype: str
    rid: str
    action: str
    at: float


class WebhookSender:
    """Posts announcements to one receiver from a background thread.

    Parameters
    ----------
    url
        The receiver (loopback only).
    header
        ``(name, value)`` of the authentication header to send, or ``None``.
    origin
        The mock's own ``http://127.0.0.1:<port>``, for the focus references.
    """

    def __init__(self, url: str, header: tuple[str, str] | None, origin: str = "") -> None:
        check_target(url)
        self.url = url
        self.origin = origin
        self._header = header
        self._queue: collections.deque[_Pending] = collections.deque()
        self._cond = threading.Condition()
        self._stop = False
        self._number = 0
        self.sent = 0
        self.retries = 0
        self.dropped = 0
        self.refused = 0
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="pmtk-mock-webhooks", daemon=True)

    def __repr__(self) -> str:  # the header value is a secret
        return f"WebhookSender(url={self.url!r})"

    def start(self) -> None:
        self._thread.start()

    def stop(self, grace: float = 2.0) -> None:
        """Send what is queued for up to ``grace`` seconds, then stop."""
        self.wait_sent(grace)
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=grace + MAX_DELAY)

    def announce(self, rtype: str, rid: str, action: str, at: float) -> bool:
        """Queue an announcement if the live service would send one; true when queued."""
        if action not in ANNOUNCED.get(rtype, frozenset()):
            return False
        with self._cond:
            if len(self._queue) >= QUEUE_LIMIT:
                self.dropped += 1
                return False
            self._queue.append(_Pending(rtype, rid, action, at))
            self._cond.notify_all()
        return True

    def pending(self) -> int:
        with self._cond:
            return len(self._queue)  # the one being sent stays first in line until delivered

    def wait_sent(self, timeout: float) -> bool:
        """Wait until every queued announcement was delivered; true if it was."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def _run(self) -> None:
        headers: dict[bytes, bytes] = {
            b"Content-Type": catalogue.FHIR_JSON.encode(),
            b"User-Agent": USER_AGENT.encode(),
        }
        if self._header is not None:
            # bytes: httpx would encode a str as ASCII, and a secret may be UTF-8
            headers[self._header[0].encode()] = self._header[1].encode()
        with httpx.Client(timeout=10.0, headers=headers, trust_env=False) as http:
            while True:
                with self._cond:
                    while not self._queue and not self._stop:
                        self._cond.wait()
                    if self._stop:
                        return
                    item = self._queue[0]
                    self._busy = True
                    self._number += 1
                    number = self._number
                body = notification(
                    item.rtype, item.rid, item.action, number=number, origin=self.origin, at=item.at
                )
                delay = FIRST_DELAY
                refusals = 0
                while True:
                    try:
                        status = http.post(self.url, content=body).status_code
                    except httpx.HTTPError:
                        status = 0  # down or unreachable: retried until it is back
                    if status in SUCCESS:
                        self.sent += 1
                        break
                    if 400 <= status < 500 and status not in (408, 429):
                        refusals += 1
                        if refusals >= REFUSED_ATTEMPTS:
                            self.refused += 1
                            break
                    self.retries += 1
                    with self._cond:
                        if self._stop:
                            return
                        self._cond.wait(delay)
                    delay = min(MAX_DELAY, delay * 2)
                with self._cond:
                    self._queue.popleft()
                    self._busy = False
                    self._cond.notify_all()
