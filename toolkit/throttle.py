"""Request pacing, ``Retry-After`` handling and the retry policy, written down once.

Three mechanisms keep a client inside the API's limit of 500 requests per
minute (a sliding window, spec section 8) without hammering it:

1. A client-side sliding window: :meth:`Throttle.acquire` waits until fewer than
   ``requests_per_minute`` requests were sent in the last 60 seconds.
2. The server's ``x-ratelimit-remaining`` header: when it reaches 0 (other
   processes may share the key), the throttle holds every request until the
   window frees, using ``retry-after`` when the response carries it and a
   cautious pause otherwise.
3. A 429 answer: the throttle holds every request for ``retry-after`` seconds
   (a number or an HTTP date, capped at :data:`MAX_RETRY_AFTER`), or for a
   growing pause when the header is missing.

The clock and the sleep function are injectable, so tests run instantly, or on
the mock deployment's virtual clock.

Every wait is announced before it starts to the listeners registered with
:meth:`Throttle.subscribe`, as ``listener(seconds, reason)``; ``pmtk sync`` uses it
to show "waiting 12 s: rate limit" instead of a progress bar frozen without a word.
The reasons are the constants :data:`PACING`, :data:`RATE_LIMITED` and
:data:`WINDOW_SPENT`.
"""

from __future__ import annotations

import contextlib
import email.utils
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from toolkit import catalogue

__all__ = [
    "MAX_RETRY_AFTER",
    "PACING",
    "RATE_LIMITED",
    "RETRY_STATUSES",
    "WINDOW_SPENT",
    "RetryPolicy",
    "Throttle",
    "WaitListener",
    "parse_retry_after",
]

WINDOW = float(catalogue.RATE_LIMIT_WINDOW_SECONDS)
"""Length of the API's sliding window in seconds (the catalogue's fact)."""

_RETRY_AFTER = catalogue.RETRY_AFTER_HEADER
_REMAINING = catalogue.RATE_LIMIT_HEADERS[1]  # x-ratelimit-remaining

MAX_ROUND_TRIP_MARGIN = 1.0
"""Cap on the latency margin added to the client's window, in seconds."""

MAX_RETRY_AFTER = 120.0
"""Longest server-directed wait honoured in one go, in seconds."""

RETRY_STATUSES = frozenset({502, 503, 504})
"""Statuses retried (with backoff) for idempotent requests. 429 is paced, not backed off."""

PACING = "rate limit pacing"
"""Wait reason: the client's own sliding window is full."""

RATE_LIMITED = "rate limit (429)"
"""Wait reason: the server answered 429 (waiting out ``retry-after`` or a growing pause)."""

WINDOW_SPENT = "rate limit (0 left)"
"""Wait reason: the server's ``x-ratelimit-remaining`` reached 0. Short, so that
``waiting 49 s: rate limit (0 left)`` fits the bar of an 80-column terminal whole."""

WaitListener = Callable[[float, str], None]
"""``listener(seconds, reason)``, called before the throttle sleeps."""


def wait_notice(seconds: float, reason: str) -> str:
    """How pmtk words a wait on a progress line: ``waiting 12 s: rate limit (429)``.

    Examples
    --------
    >>> wait_notice(11.6, RATE_LIMITED)
    'waiting 12 s: rate limit (429)'
    """
    return f"waiting {seconds:.0f} s: {reason}"


def remaining_reason(remaining: int) -> str:
    """The wait reason when the server's ``x-ratelimit-remaining`` is down to ``remaining``.

    Examples
    --------
    >>> remaining_reason(0) == WINDOW_SPENT
    True
    """
    return f"rate limit ({remaining} left)"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The retry defaults of every client, in one place.

    Attributes
    ----------
    attempts
        Total attempts for a retryable request (first try included).
    wait_initial, wait_max, wait_jitter
        Exponential backoff between attempts (stamina's parameters), seconds.
    rate_limit_waits
        How many 429 answers in a row one request may wait out before
        :class:`~toolkit.errors.RateLimited` is raised.
    missing_retry_after
        First pause after a 429 without ``retry-after``; doubles each time, up to 60 s.
    """

    attempts: int = 6
    wait_initial: float = 0.5
    wait_max: float = 10.0
    wait_jitter: float = 1.0
    rate_limit_waits: int = 12
    missing_retry_after: float = 2.0


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``retry-after`` header (delta-seconds or HTTP date).

    Parameters
    ----------
    value
        The header value, or ``None``.
    now
        The current time, for HTTP dates (default: the wall clock, UTC).

    Returns
    -------
    float or None
        Non-negative seconds, capped at :data:`MAX_RETRY_AFTER`; ``None`` when
        the header is missing or unreadable.

    Examples
    --------
    >>> parse_retry_after("7")
    7.0
    >>> parse_retry_after("Sat, 21 Nov 2026 10:00:30 GMT",
    ...                   now=datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC))
    30.0
    >>> parse_retry_after("soon") is None
    True
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


class Throttle:
    """Client-side pacing shared by every thread of one client.

    Parameters
    ----------
    requests_per_minute
        Client-side sliding-window limit. ``None`` or 0 disables local pacing
        (server signals are still honoured).
    clock
        Monotonic clock in seconds.
    sleep
        Sleep function in seconds.

    Attributes
    ----------
    waited
        Total seconds spent waiting (pacing and 429s).
    rate_limited
        Number of 429 answers seen.

    Notes
    -----
    Listeners registered with :meth:`subscribe` are called with ``(seconds,
    reason)`` just before each sleep, in the thread that sleeps (a listener
    must be quick and thread-safe; its errors are ignored).
    """

    def __init__(
        self,
        requests_per_minute: int | None = catalogue.RATE_LIMIT_PER_MINUTE,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if requests_per_minute is not None and requests_per_minute < 0:
            msg = f"requests_per_minute must be 0 (no pacing) or more, got {requests_per_minute}"
            raise ValueError(msg)
        self.requests_per_minute = requests_per_minute or None
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._sent: deque[float] = deque()
        self._hold_until = 0.0
        self._hold_reason = RATE_LIMITED
        self._listeners: list[WaitListener] = []
        self._missing_streak = 0
        self._margin = 0.0
        self.waited = 0.0
        self.rate_limited = 0

    def __repr__(self) -> str:
        return f"Throttle(requests_per_minute={self.requests_per_minute})"

    def _delay(self, now: float) -> tuple[float, str]:
        """Seconds to wait before the next request, and why (the longer constraint wins)."""
        delay = max(0.0, self._hold_until - now)
        reason = self._hold_reason
        limit = self.requests_per_minute
        if limit is not None:
            # A request stays in the window for the round-trip margin too: the server
            # stamped it on arrival, up to one round trip after we sent it.
            while self._sent and self._sent[0] <= now - WINDOW - self._margin:
                self._sent.popleft()
            if len(self._sent) >= limit:
                oldest = self._sent[len(self._sent) - limit]
                pacing = oldest + WINDOW + self._margin - now
                if pacing > delay:
                    delay, reason = pacing, PACING
        return delay, reason

    def subscribe(self, listener: WaitListener) -> Callable[[], None]:
        """Call ``listener(seconds, reason)`` before every wait; returns the unsubscribe function.

        Examples
        --------
        >>> now = [0.0]
        >>> t = Throttle(None, clock=lambda: now[0], sleep=lambda s: now.append(now.pop() + s))
        >>> waits = []
        >>> stop = t.subscribe(lambda seconds, reason: waits.append((seconds, reason)))
        >>> t.hold(5.0, RATE_LIMITED)
        >>> t.acquire()
        5.0
        >>> stop()
        >>> waits
        [(5.0, 'rate limit (429)')]
        """
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def _announce(self, seconds: float, reason: str) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            # A display that fails must not stop the request it is only reporting on.
            with contextlib.suppress(Exception):
                listener(seconds, reason)

    def now(self) -> float:
        """The throttle's clock, for timing a round trip."""
        return self._clock()

    def note_round_trip(self, seconds: float) -> None:
        """Widen the window by the slowest round trip seen (capped at one second).

        The client stamps a request when it sends it, the server when it arrives.
        Without a margin, request ``limit + 1`` can reach the server exactly one
        window after request 1 was *sent* but before a window has passed since
        request 1 *arrived*, and earn a 429. Waiting an extra round trip (which
        is at least the one-way latency of the request a window ago) closes that gap.
        """
        with self._lock:
            self._margin = max(self._margin, min(max(seconds, 0.0), MAX_ROUND_TRIP_MARGIN))

    def acquire(self) -> float:
        """Wait until a request may be sent, then record it. Returns the seconds waited."""
        waited = 0.0
        while True:
            with self._lock:
                now = self._clock()
                delay, reason = self._delay(now)
                if delay <= 0:
                    self._sent.append(now)
                    self.waited += waited
                    return waited
            # Sleep outside the lock; re-check afterwards because other threads
            # (or a new 429) may have changed the picture meanwhile.
            self._announce(delay, reason)
            self._sleep(delay)
            waited += delay

    def hold(self, seconds: float, reason: str = RATE_LIMITED) -> None:
        """Hold every request of this client for ``seconds`` from now.

        ``reason`` is what listeners are told when a request then waits.
        """
        with self._lock:
            until = self._clock() + seconds
            if until >= self._hold_until:
                self._hold_until = until
                self._hold_reason = reason

    def on_rate_limited(self, headers: Mapping[str, str], policy: RetryPolicy) -> float:
        """Record a 429 answer and hold requests; returns the pause chosen, in seconds."""
        with self._lock:
            self.rate_limited += 1
        pause = parse_retry_after(headers.get(_RETRY_AFTER))
        if pause is None:
            self._missing_streak += 1
            pause = min(60.0, policy.missing_retry_after * 2 ** (self._missing_streak - 1))
        else:
            self._missing_streak = 0
        self.hold(pause, RATE_LIMITED)
        return pause

    def observe(self, status: int, headers: Mapping[str, str]) -> None:
        """Read the rate-limit headers of any answer and hold when the window is spent."""
        if status == 429:
            return
        self._missing_streak = 0
        remaining = headers.get(_REMAINING)
        if remaining is None:
            return
        try:
            left = int(remaining.strip())
        except ValueError:
            return
        if left > 0:
            return
        pause = parse_retry_after(headers.get(_RETRY_AFTER))
        if pause is None:
            pause = self._window_frees_in()
        self.hold(pause, WINDOW_SPENT)

    def _window_frees_in(self) -> float:
        """A cautious guess at when the server's window frees a slot.

        Our own oldest request in the window leaves it first, unless other
        processes sent older ones (then the next answer is a 429 whose
        ``retry-after`` is honoured). Never less than one second.
        """
        with self._lock:
            now = self._clock()
            while self._sent and self._sent[0] <= now - WINDOW:
                self._sent.popleft()
            if self._sent:
                return max(1.0, self._sent[0] + WINDOW + self._margin - now)
        return 1.0
