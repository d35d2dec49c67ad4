"""The mock's webhook sender: announces writes as the live service does.

The live service announces Patient create and update, and Appointment and
Invoice create, update and delete (``public-docs-facts.md``, "Events"). Each
announcement is a POST of a FHIR Bundle of type ``history`` whose first entry is
a ``SubscriptionStatus``; its ``notificationEvent[0].focus`` references the
changed record (id only: the receiver reads the record itself), its ``topic``
names the change (for example ``.../SubscriptionTopic/appointment-delete``), and a
delete also carries a history entry with ``request.method`` ``DELETE``.

Sending happens from a bounded queue on a small pool of background threads
(:data:`DEFAULT_CONCURRENCY`, one connection each), as Stripe and GitHub deliver:
several announcements are in flight at once, so one slow answer does not hold up
the rest. Announcements are taken and numbered (``eventNumber``) in the order of
the writes, but with more than one in flight they may arrive in another order; the
live service promises no order either (``public-docs-facts.md`` says nothing of it),
and a receiver that reads each record from the API does not need one. With a
concurrency of 1 the sender delivers strictly in write order, as before. A
receiver that is down or answers anything but 200, 201 or 202 is retried with
exponential backoff (each thread keeps its announcement until it is delivered).
Only loopback addresses are accepted as targets.
"""

from __future__ import annotations

import collections
import ipaddress
import logging
import ssl
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

from toolkit import catalogue

__all__ = ["ANNOUNCED", "DEFAULT_CONCURRENCY", "WebhookSender", "notification"]

ANNOUNCED: dict[str, frozenset[str]] = {
    rtype: frozenset(actions) for rtype, actions in catalogue.WEBHOOK_EVENTS.items()
}
"""Changes the live service announces, per resource type (the catalogue's fact)."""

TOPIC_BASE = "https://terminology.halaxy.com/SubscriptionTopic"
QUEUE_LIMIT = 10_000
"""Events held (queued or in flight) while the receiver is slow or down; more are
dropped (and counted)."""
FIRST_DELAY = 0.05
MAX_DELAY = 5.0
REFUSED_ATTEMPTS = 3
"""A receiver that refuses an event (4xx other than 408/429) gets it this many times."""
SUCCESS = frozenset({200, 201, 202})
USER_AGENT = "pmtk-mock-webhooks"
DEFAULT_CONCURRENCY = 8
"""Announcements in flight at once (one thread and one connection each)."""
MAX_CONCURRENCY = 64


log = logging.getLogger("pmtk.mock.webhooks")
"""Each refused or failed delivery is logged here (``pmtk mock`` prints it on stderr)."""


def _iso(epoch: float) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch))
    return f"{stamp}.{int(epoch * 1000) % 1000:03d}Z"


def notification(
    rtype: str,
    rid: str,
    action: str,
    *,
    number: int,
    origin: str,
    at: float,
    subscription: str = "pmtk-mock",
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
    subscription
        The subscription's id: one per sender, since its numbers count from 1 (a
        receiver keeps the numbers it has seen per subscription).
    """
    full = f"{origin}/main/{rtype}/{rid}"
    topic = f"{TOPIC_BASE}/{rtype.lower()}-{action}"
    status = _subscription_status(
        full, topic, number=number, origin=origin, at=at, subscription=subscription
    )
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


def _subscription_status(
    full: str, topic: str, *, number: int, origin: str, at: float, subscription: str
) -> dict[str, Any]:
    """The ``SubscriptionStatus`` opening a notification: event ``number`` on the record
    at the absolute reference ``full``, in ``topic``."""
    return {
        "resourceType": "SubscriptionStatus",
        "status": "active",
        "type": "event-notification",
        "eventsSinceSubscriptionStart": str(number),
        "notificationEvent": [
            {"eventNumber": str(number), "timestamp": _iso(at), "focus": {"reference": full}}
        ],
        "subscription": {"reference": f"{origin}/main/Subscription/{subscription}"},
        "topic": topic,
    }


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


def check_concurrency(concurrency: int) -> None:
    """Raise ValueError unless ``concurrency`` is 1 to :data:`MAX_CONCURRENCY`."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int):
        msg = f"the webhook concurrency must be a whole number, got {concurrency!r}"
        raise ValueError(msg)
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        msg = f"the webhook concurrency must be 1 to {MAX_CONCURRENCY}, got {concurrency}"
        raise ValueError(msg)


class WebhookSender:
    """Posts announcements to one receiver from a pool of background threads.

    Parameters
    ----------
    url
        The receiver (loopback only).
    header
        ``(name, value)`` of the authentication header to send, or ``None``.
    origin
        The mock's own ``http://127.0.0.1:<port>``, for the focus references.
    concurrency
        Announcements in flight at once (1 delivers strictly in write order).
    """

    def __init__(
        self,
        url: str,
        header: tuple[str, str] | None,
        origin: str = "",
        concurrency: int = DEFAULT_CONCURRENCY,
    ) -> None:
        check_target(url)
        check_concurrency(concurrency)
        self.url = url
        self.concurrency = concurrency
        self.origin = origin
        self._header = header
        self._queue: collections.deque[_Pending] = collections.deque()
        lock = threading.Lock()
        self._work = threading.Condition(lock)  # senders wait here for an announcement
        self._settled = threading.Condition(lock)  # wait_sent waits here
        self._halt = threading.Event()  # ends a backoff pause early, only when stopping
        self._stop = False
        self._number = 0
        self.subscription = f"pmtk-mock-{uuid.uuid4().hex[:12]}"
        """This sender's subscription id (its event numbers count from 1)."""
        self.sent = 0
        self.retries = 0
        self.dropped = 0
        self.refused = 0
        self.most_in_flight = 0
        """The most announcements ever in flight at once (at most ``concurrency``)."""
        self._in_flight = 0
        self._tls: ssl.SSLContext | None = None
        self._threads = [
            threading.Thread(target=self._run, name=f"pmtk-mock-webhooks-{n}", daemon=True)
            for n in range(concurrency)
        ]

    def __repr__(self) -> str:  # the header value is a secret
        return f"WebhookSender(url={self.url!r})"

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, grace: float = 2.0) -> None:
        """Send what is queued for up to ``grace`` seconds, then stop."""
        self.wait_sent(grace)
        with self._work:
            self._stop = True
            self._work.notify_all()
        self._halt.set()
        deadline = time.monotonic() + grace + MAX_DELAY
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def announce(self, rtype: str, rid: str, action: str, at: float) -> bool:
        """Queue an announcement if the live service would send one; true when queued."""
        if action not in ANNOUNCED.get(rtype, frozenset()):
            return False
        with self._work:
            if len(self._queue) + self._in_flight >= QUEUE_LIMIT:
                self.dropped += 1
                return False
            self._queue.append(_Pending(rtype, rid, action, at))
            self._work.notify()
        return True

    def pending(self) -> int:
        """Announcements not yet delivered: queued and in flight."""
        with self._work:
            return len(self._queue) + self._in_flight

    def wait_sent(self, timeout: float) -> bool:
        """Wait until every queued announcement was delivered; true if it was."""
        deadline = time.monotonic() + timeout
        with self._settled:
            while self._queue or self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._settled.wait(left)
        return True

    def _run(self) -> None:
        headers: dict[bytes, bytes] = {
            b"Content-Type": catalogue.FHIR_JSON.encode(),
            b"User-Agent": USER_AGENT.encode(),
        }
        if self._header is not None:
            # bytes: httpx would encode a str as ASCII, and a secret may be UTF-8
            headers[self._header[0].encode()] = self._header[1].encode()
        with self._work:
            if self._tls is None:
                # built once: a TLS context costs a tenth of a second or more, and eight
                # threads building their own would hold up the first deliveries
                self._tls = ssl.create_default_context()
            tls = self._tls
        # one client (one keep-alive connection) per thread: nothing shared but the queue
        with httpx.Client(timeout=10.0, headers=headers, trust_env=False, verify=tls) as http:
            while True:
                with self._work:
                    while not self._queue and not self._stop:
                        self._work.wait()
                    if self._stop:
                        return
                    # numbered as taken, so eventNumber follows the order of the writes
                    item = self._queue.popleft()
                    self._in_flight += 1
                    self.most_in_flight = max(self.most_in_flight, self._in_flight)
                    self._number += 1
                    number = self._number
                try:
                    if not self._deliver(http, item, number):
                        return  # stopped while retrying
                finally:
                    with self._work:
                        self._in_flight -= 1
                        if not self._queue and not self._in_flight:
                            self._settled.notify_all()

    def _post(self, http: httpx.Client, body: bytes) -> tuple[int, str]:
        """One attempt: the status (0 when the receiver is down or unreachable, retried until
        it is back) and how to say it in the log."""
        try:
            status = http.post(self.url, content=body).status_code
        except httpx.HTTPError as exc:
            return 0, f"could not connect ({type(exc).__name__})"
        return status, f"answered {status}"

    def _deliver(self, http: httpx.Client, item: _Pending, number: int) -> bool:
        """Post one announcement until it is accepted or refused for good; false if stopped."""
        body = notification(
            item.rtype,
            item.rid,
            item.action,
            number=number,
            origin=self.origin,
            at=item.at,
            subscription=self.subscription,
        )
        delay = FIRST_DELAY
        refusals = 0
        failures = 0
        what = f"{item.rtype}/{item.rid} {item.action} (event {number})"
        while True:
            status, problem = self._post(http, body)
            if status in SUCCESS:
                with self._work:
                    self.sent += 1
                if failures:
                    log.warning("webhook %s delivered after %d failure(s)", what, failures)
                return True
            failures += 1
            if 400 <= status < 500 and status not in (408, 429):
                refusals += 1
                if refusals >= REFUSED_ATTEMPTS:
                    with self._work:
                        self.refused += 1
                    log.warning(
                        "webhook %s refused by %s: %s, %d times; not sent again",
                        what,
                        self.url,
                        problem,
                        refusals,
                    )
                    return True
            if failures == 1:
                log.warning(
                    "webhook %s to %s failed: %s; retrying with backoff", what, self.url, problem
                )
            with self._work:
                self.retries += 1
            if self._halt.wait(delay):
                return False
            delay = min(MAX_DELAY, delay * 2)
