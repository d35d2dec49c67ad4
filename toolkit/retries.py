"""Readable retry notices: pmtk's own hook for stamina's instrumentation.

stamina's default hook logs every scheduled retry as the bare message
``stamina.retry_scheduled`` (the details ride in ``extra``) on the ``stamina``
logger at WARNING. With logging unconfigured, Python's last-resort handler then
prints that bare line, with nothing saying what was retried or why. pmtk
replaces stamina's logging (and structlog) hooks with :func:`on_retry`, which

* logs one readable INFO line on the ``toolkit.retries`` logger
  (``GET http://host/main/Referral failed (ConnectError); retry 2 in 1.5 s``), so
  nothing reaches an unconfigured console and ``logging.basicConfig(level=INFO)``
  shows it; and
* hands a :class:`RetryNotice` to every listener registered with
  :func:`listen`, which is how ``pmtk sync`` shows a "connecting to ... (retry 2/5
  in 1.5 s)" state in its progress display.

Other hooks (Prometheus, or any a user set) are kept. :func:`install` runs when
:mod:`toolkit.http` (the request pipeline, and so :mod:`toolkit.client`) is
imported, and is idempotent.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from stamina.instrumentation import RetryDetails, get_on_retry_hooks, set_on_retry_hooks

from toolkit import redaction

__all__ = ["RetryNotice", "install", "listen", "on_retry"]

log = redaction.logger("toolkit.retries")

RetryListener = Callable[["RetryNotice"], None]

# stamina's default hooks that print (or log) the bare ``stamina.retry_scheduled`` event.
_REPLACED_MODULES = (
    "stamina.instrumentation._logging",
    "stamina.instrumentation._structlog",
)


@dataclass(frozen=True, slots=True)
class RetryNotice:
    """One scheduled retry, in words.

    Attributes
    ----------
    url
        The URL of the request that failed, when the error carries it.
    retry
        Which retry this is (1 after the first failed attempt).
    wait
        Seconds until the next attempt.
    cause
        Short reason: the exception's class, plus the status of an HTTP error.
    """

    url: str | None
    retry: int
    wait: float
    cause: str

    def describe(self, attempts: int | None = None) -> str:
        """One line, e.g. ``retry 2/5 in 1.5 s (ConnectError)``.

        Parameters
        ----------
        attempts
            Total attempts allowed (first try included), to show ``retry n/m``.
        """
        of = f"/{attempts - 1}" if attempts is not None and attempts > 1 else ""
        return f"retry {self.retry}{of} in {self.wait:.1f} s ({self.cause})"


_lock = threading.Lock()
_listeners: list[RetryListener] = []


def _url_of(exc: BaseException) -> str | None:
    """The request URL an exception refers to (httpx errors and pmtk's ApiError)."""
    url = getattr(exc, "url", None)
    if isinstance(url, str):
        return url
    try:
        request = getattr(exc, "request", None)  # httpx.RequestError; raises when unset
    except RuntimeError:
        return None
    target = getattr(request, "url", None)
    return str(target) if target is not None else None


def _cause(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    name = type(exc).__name__.lstrip("_")
    return f"{name} {status}" if isinstance(status, int) else name


def on_retry(details: RetryDetails) -> None:
    """The stamina hook: one readable log line and a notice to every listener."""
    exc = details.caused_by
    notice = RetryNotice(
        url=_url_of(exc),
        retry=details.retry_num,
        wait=max(details.wait_for, 0.0),
        cause=_cause(exc),
    )
    log.info("%s failed; %s", notice.url or "a request", notice.describe())
    with _lock:
        listeners = list(_listeners)
    for listener in listeners:
        # A display that fails must not turn a retry into a crash of the request.
        with contextlib.suppress(Exception):
            listener(notice)


@contextlib.contextmanager
def listen(listener: RetryListener) -> Iterator[None]:
    """Call ``listener`` with a :class:`RetryNotice` for every retry inside the block.

    Retries of every pmtk client in the process are reported (stamina's hooks
    are process-wide); a listener that cares about one deployment compares
    :attr:`RetryNotice.url` with it.
    """
    install()
    with _lock:
        _listeners.append(listener)
    try:
        yield
    finally:
        with _lock:
            _listeners.remove(listener)


def install() -> None:
    """Make :func:`on_retry` stamina's retry hook instead of its bare logging line.

    Keeps any other hook (Prometheus, a user's own); safe to call repeatedly.
    """
    kept = [
        hook
        for hook in get_on_retry_hooks()
        if hook is not on_retry and getattr(hook, "__module__", "") not in _REPLACED_MODULES
    ]
    set_on_retry_hooks([*kept, on_retry])
