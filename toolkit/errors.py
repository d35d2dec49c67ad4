"""Exceptions raised by pmtk. The whole tree, drawn once::

    PmtkError
    ├── ConfigurationError (ValueError)      bad or missing settings, unknown region
    │   └── InvalidId                        an id unfit for a URL path segment; nothing sent
    ├── ForeignLink (ValueError)             a URL off the configured origin; nothing sent
    ├── RequestValidationError (ValueError)  a write body broke a catalogue rule; nothing was sent
    ├── DataValidationError (ValueError)     a frame failed its pandera schema (.failure_cases)
    ├── TimeZoneError (ValueError)           no time zone follows from an address, or an unknown one
    ├── MixedCurrencyError (ValueError)      one total was asked of amounts in several currencies
    ├── MissingColumnError (ValueError)      a frame given to an analysis function lacks a column
    ├── ViewDefinitionError (ValueError)     a ViewDefinition is wrong (.path says where)
    ├── IncompleteResult                     a list walk ended short of Bundle.total, or looped
    │   └── PagingLoop                       a next link pointed back to a page already read
    ├── MalformedPage                        a page contradicts the request (type, total)
    │   ├── PageLimitExceeded                more pages than total and page size allow, or max_pages
    │   └── IgnoredFilter                    the server left a filter out of its self link
    ├── OutcomeUnknown                       POST or $book failed after sending; may have landed
    ├── TransportError                       the deployment could not be reached (after retries)
    │   ├── ConnectionFailed                 the name did not resolve or the connection was refused
    │   ├── ProtocolError                    the answer was not valid HTTP or could not be decoded
    │   ├── DeadlineExceeded                 a request took longer than its timeout, body included
    │   └── ResponseTooLarge                 a decoded response body passed the size cap
    └── ApiError                             the server answered an error (OperationOutcome)
        ├── RedirectRefused                  a 3xx other than a same-origin GET redirect
        ├── AuthError                        401 / 403
        ├── NotFound (KeyError)              404
        ├── MethodNotAllowed                 405
        ├── Conflict                         409 (for example a slot already booked)
        ├── ApiValidationError (ValueError)  400 / 413 / 422
        ├── RateLimited                      429 that survived every retry (.retry_after)
        └── ServerError                      5xx that survived every retry

Every message says what was wrong and where (method, path, field), and never
carries the client secret or an access token: :class:`PmtkError` passes its
arguments through :func:`toolkit.redaction.redact`, whatever a server echoed.
"""

from __future__ import annotations

from typing import Any

from toolkit.redaction import redact, redact_json

__all__ = [
    "ApiError",
    "ApiValidationError",
    "AuthError",
    "ConfigurationError",
    "Conflict",
    "ConnectionFailed",
    "DataValidationError",
    "DeadlineExceeded",
    "ForeignLink",
    "IgnoredFilter",
    "IgnoredFilterWarning",
    "IncompleteResult",
    "InvalidId",
    "MalformedPage",
    "MethodNotAllowed",
    "MissingColumnError",
    "MixedCurrencyError",
    "NotFound",
    "OutcomeUnknown",
    "PageLimitExceeded",
    "PagingLoop",
    "PmtkError",
    "ProtocolError",
    "RateLimited",
    "RedirectRefused",
    "RequestValidationError",
    "ResponseTooLarge",
    "ServerError",
    "TimeZoneError",
    "TransportError",
    "ViewDefinitionError",
    "error_for_status",
]


class PmtkError(Exception):
    """Base of every error pmtk raises on purpose.

    Its text arguments (so its ``str`` and ``repr``) are redacted: the configured
    secret and every issued token are replaced by ``<redacted>`` in each form a
    server may echo them in (see :mod:`toolkit.redaction`).
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.args = tuple(redact(a) if isinstance(a, str) else a for a in args)

    def __str__(self) -> str:
        return redact(super().__str__())


class ConfigurationError(PmtkError, ValueError):
    """A setting is missing, malformed or contradictory."""


class InvalidId(ConfigurationError):
    """An id unfit for one path segment (``.``, ``..``, ``/``, ``%``, ...). Nothing was sent."""


class ForeignLink(PmtkError, ValueError):
    """A URL that leads off the configured origin (scheme, host, port). It was not requested.

    ``url`` is the offending URL with any userinfo removed; ``origin`` the configured one.
    """

    def __init__(self, message: str, *, url: str, origin: str) -> None:
        self.url = url
        self.origin = origin
        super().__init__(message)


class UnknownName(ConfigurationError, KeyError):
    """An unknown resource type, table or search keyword; the message suggests the near miss.

    Also a :class:`KeyError`, as a missing key in a mapping would be.
    """

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


def unknown_name(kind: str, name: str, known: Any, where: str = "") -> UnknownName:
    """An :class:`UnknownName` for ``name``, with "did you mean" and the known names.

    Examples
    --------
    >>> str(unknown_name("search keyword", "dates", ["date", "patient"], " for Appointment"))
    "unknown search keyword 'dates' for Appointment: did you mean 'date'? (known: date, patient)"
    """
    import difflib

    names = sorted(str(k) for k in known)
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6) if isinstance(name, str) else []
    hint = f": did you mean {close[0]!r}?" if close else ":"
    return UnknownName(f"unknown {kind} {name!r}{where}{hint} (known: {', '.join(names)})")


class RequestValidationError(PmtkError, ValueError):
    """A write body broke a catalogue rule. It was not sent.

    ``problems`` lists ``(path, message)`` pairs, for example
    ``("attachments[0].contentType", "'text/plain' is not one of ...")``.
    """

    def __init__(self, resource_type: str, problems: list[tuple[str, str]]) -> None:
        self.resource_type = resource_type
        self.problems = problems
        lines = "\n".join(f"  - {path}: {message}" for path, message in problems)
        super().__init__(f"{resource_type} body is invalid, nothing was sent:\n{lines}")


class DataValidationError(PmtkError, ValueError):
    """A frame failed its pandera schema. ``failure_cases`` is a Polars DataFrame."""

    def __init__(self, message: str, failure_cases: Any) -> None:
        self.failure_cases = failure_cases
        super().__init__(message)


class TimeZoneError(PmtkError, ValueError):
    """No time zone follows from an organization's address, or a zone name is unknown.

    The message names the organization (or the setting) and how to fix it: an address
    state, ``PM_TIMEZONE`` or ``tz=``.
    """


class MixedCurrencyError(PmtkError, ValueError):
    """A single total was asked of amounts in more than one currency.

    ``currencies`` lists the currencies found; amounts are never added across them.
    """

    def __init__(self, message: str, currencies: list[str]) -> None:
        self.currencies = currencies
        super().__init__(message)


class ViewDefinitionError(PmtkError, ValueError):
    """A ViewDefinition that cannot run; ``path`` says where (``select[1].column[0].path``)."""

    def __init__(self, message: str, *, path: str = "") -> None:
        self.path = path
        super().__init__(message)


class MissingColumnError(PmtkError, ValueError):
    """A frame handed to an analysis function lacks a column the function needs.

    ``frame`` names the argument (``"roles"``, ``"invoice_lines"``), ``missing`` lists
    the absent columns and ``function`` the analysis function that refused the frame.
    Raised before any join runs, instead of a Polars ``ColumnNotFoundError`` from deep
    inside a query plan.
    """

    def __init__(self, message: str, *, frame: str, missing: list[str], function: str) -> None:
        self.frame = frame
        self.missing = missing
        self.function = function
        super().__init__(message)


class IncompleteResult(PmtkError):
    """A list walk did not return every record the server announced."""

    def __init__(self, message: str, *, expected: int | None = None, received: int = 0) -> None:
        self.expected = expected
        self.received = received
        super().__init__(message)


class PagingLoop(IncompleteResult):
    """A ``next`` link pointed back to a page that had already been read."""


class MalformedPage(PmtkError):
    """A list page contradicts the request: an entry of another type, more records than total.

    ``url`` is the page's URL; nothing of the walk is returned.
    """

    def __init__(self, message: str, *, url: str | None = None) -> None:
        self.url = url
        super().__init__(message)


class PageLimitExceeded(MalformedPage):
    """A walk went past the pages ``Bundle.total`` and the page size allow, or ``max_pages``."""

    def __init__(self, message: str, *, url: str | None = None, limit: int) -> None:
        self.limit = limit
        super().__init__(message, url=url)


class IgnoredFilter(MalformedPage):
    """The server ignored a search filter: its Bundle's ``self`` link leaves it out.

    FHIR's rule for unsupported search parameters; ``ignored`` names them. Raised
    before any record of the walk is returned (``ignored_filters="warn"`` warns instead).
    """

    def __init__(self, message: str, *, url: str | None = None, ignored: list[str]) -> None:
        self.ignored = ignored
        super().__init__(message, url=url)


class IgnoredFilterWarning(UserWarning):
    """A walk went on although the server ignored a filter (``ignored_filters="warn"``)."""


class OutcomeUnknown(PmtkError):
    """A non-idempotent request (POST, ``$book``) failed after it was sent.

    The server may or may not have applied it: check before sending it again.
    """


class TransportError(PmtkError):
    """The deployment could not be reached, even after the allowed retries."""


class ConnectionFailed(TransportError):
    """No connection could be made: the host name did not resolve, or the port refused.

    Not retried (the answer would be the same a second later). ``host`` is the host
    name, ``reason`` the operating system's words (``[Errno -2] Name or service not
    known``, ``[Errno 111] Connection refused``).
    """

    def __init__(self, message: str, *, host: str, reason: str) -> None:
        self.host = host
        self.reason = reason
        super().__init__(message)


class ProtocolError(TransportError):
    """The answer could not be read: not valid HTTP, or a body that would not decode.

    For example a broken gzip stream, or a ``Content-Encoding`` pmtk did not ask
    for (``br``). The library's exception is the ``__cause__``.
    """


class DeadlineExceeded(TransportError):
    """One request (connect, send, headers and the whole body) took longer than its deadline."""

    def __init__(self, message: str, *, url: str, limit: float) -> None:
        self.url = url
        self.limit = limit
        super().__init__(message)


class ResponseTooLarge(TransportError):
    """A response body, decoded, passed the size cap; reading stopped at the cap."""

    def __init__(self, message: str, *, url: str, limit: int) -> None:
        self.url = url
        self.limit = limit
        super().__init__(message)


class ApiError(PmtkError):
    """The server answered with an error status, usually with an OperationOutcome body."""

    def __init__(
        self,
        status: int,
        *,
        method: str,
        url: str,
        code: str | None = None,
        diagnostics: str | None = None,
        outcome: dict[str, Any] | None = None,
        media_type: str | None = None,
    ) -> None:
        self.status = status
        self.media_type = media_type
        """The answer's ``Content-Type`` without parameters, lower case (``None``: unknown)."""
        self.method = method
        self.url = redact(url)
        self.code = code
        self.diagnostics = redact(diagnostics) if diagnostics is not None else None
        self.outcome = redact_json(outcome) if outcome is not None else None
        detail = f" [{code}]" if code else ""
        text = f": {diagnostics}" if diagnostics else ""
        super().__init__(f"{method} {url} answered {status}{detail}{text}")

    def __str__(self) -> str:
        return str(self.args[0])


class RedirectRefused(ApiError):
    """A 3xx pmtk does not follow: another origin, not a GET, too many hops, no ``Location``.

    A redirect's body is never read as data. ``location`` is the ``Location``
    header (``None`` when there was none), with any userinfo removed.
    """

    def __init__(self, *args: Any, location: str | None = None, **kwargs: Any) -> None:
        self.location = redact(location) if location is not None else None
        super().__init__(*args, **kwargs)


class AuthError(ApiError):
    """401 or 403: missing, invalid or expired token, wrong secret, missing permission."""


class NotFound(ApiError, KeyError):
    """404: no record with that id."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class MethodNotAllowed(ApiError):
    """405: the resource does not accept that method (for example PATCH on a Practitioner)."""


class Conflict(ApiError):
    """409: the write conflicts with the current state (for example a slot already booked)."""


class ApiValidationError(ApiError, ValueError):
    """400, 413 or 422: the server refused the request body or parameters."""


class RateLimited(ApiError):
    """429 that persisted through every retry. ``retry_after`` is in seconds, if given."""

    def __init__(self, *args: Any, retry_after: float | None = None, **kwargs: Any) -> None:
        self.retry_after = retry_after
        super().__init__(*args, **kwargs)


class ServerError(ApiError):
    """5xx that persisted through every retry."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: ApiValidationError,
    401: AuthError,
    403: AuthError,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: ApiValidationError,
    422: ApiValidationError,
    429: RateLimited,
}


def error_for_status(status: int) -> type[ApiError]:
    """The ApiError subclass for an HTTP status (5xx -> ServerError, other 4xx -> ApiError)."""
    if status >= 500:
        return ServerError
    return _BY_STATUS.get(status, ApiError)
