"""One redaction boundary: the configured secret and every issued token, removed from output.

A server may echo what it was sent: a token endpoint that puts the request body in
its 401 diagnostics, an API that quotes the ``Authorization`` header in an error.
Whatever pmtk then prints, logs or writes (an exception message, a log line, the
store's ``manifest.json``, the listener's queue and failed-event files, the
contract suite's report) passes through this module, which replaces every known
secret with ``<redacted>`` in each form it can take there:

* raw, JSON-escaped (ASCII and not), ``repr``-escaped, URL-encoded (path and
  form), HTML-escaped;
* base64 (standard and URL-safe, padded or not), alone and as the HTTP Basic
  ``base64(client_id:secret)``.

The registry is process-wide. The auth layer feeds it: the client secret when a
client is configured (:class:`toolkit.auth.ClientCredentialsAuth`), each access
token as it is issued, and the listener its webhook authentication value. The
contract suite registers its own. :func:`redact` works on text,
:func:`redact_json` on JSON-like data *before* it is serialised (a secret with a
quote, a backslash or non-ASCII characters no longer matches once escaped).
:class:`RedactingFilter` is installed on pmtk's loggers when this module is
imported.

Secrets shorter than :data:`MIN_LENGTH` (8) characters are not registered: no
real client secret or token is that short, and a test's ``"secret"`` would
otherwise blank that word in every later message of the process. Only the most
recent :data:`MAX_TOKENS` issued tokens are kept (a token lives 15 minutes; that
is days of a long-running listener), so that redaction stays fast; each secret's
forms are compiled once, when it is added, so an addition costs the same however many
are kept. A token longer than a request header can carry is refused before it gets
here (:data:`toolkit.auth.MAX_TOKEN_CHARS`).
"""

from __future__ import annotations

import base64
import html
import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, urlencode, urlsplit, urlunsplit

__all__ = [
    "LOGGERS",
    "MAX_TOKENS",
    "MIN_LENGTH",
    "REDACTED",
    "RedactingFilter",
    "Redactor",
    "install_log_filter",
    "logger",
    "redact",
    "redact_body",
    "redact_json",
    "redact_url",
    "register",
    "register_token",
    "secret_forms",
]

REDACTED = "<redacted>"
"""What a secret is replaced with."""

MIN_LENGTH = 8
"""Shortest form that is redacted."""

MAX_TOKENS = 256
"""Issued tokens kept in the registry (the oldest are forgotten first)."""

LOGGERS = (
    "toolkit",
    "toolkit.client",
    "toolkit.retries",
    "pmtk",
    "pmtk.listen",
    "pmtk.mock.webhooks",
    "httpx",
)
"""The loggers :class:`RedactingFilter` is installed on (a logger's filter sees only
records logged on that very logger, not those of its children)."""


def secret_forms(secret: str, *, client_id: str | None = None) -> list[str]:
    """Every form in which ``secret`` can land in an output, longest first.

    Raw, JSON-escaped (ASCII and not), ``repr``, URL-encoded (path and form), HTML- and
    XML-escaped, base64 (alone and as HTTP Basic ``client_id:secret``).

    Examples
    --------
    >>> forms = secret_forms('p"w/1-long', client_id="app")
    >>> 'p\\\\"w/1-long' in forms, "p%22w%2F1-long" in forms, "YXBwOnAidy8xLWxvbmc=" in forms
    (True, True, True)
    """
    forms = {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
        quote(secret, safe=""),
        quote(secret),
        quote_plus(secret),
        html.escape(secret),
        html.escape(secret, quote=False),
        base64.b64encode(secret.encode()).decode(),
        base64.urlsafe_b64encode(secret.encode()).decode(),
    }
    if client_id:
        basic = f"{client_id}:{secret}".encode()
        forms |= {base64.b64encode(basic).decode(), base64.urlsafe_b64encode(basic).decode()}
    forms |= {f.rstrip("=") for f in list(forms) if f.endswith("=")}
    return sorted((f for f in forms if len(f) >= MIN_LENGTH), key=len, reverse=True)


@dataclass(frozen=True, slots=True)
class _Compiled:
    """One secret's forms as one pattern, and its longest form's length."""

    longest: int
    pattern: re.Pattern[str]


def _compile(secret: str, client_id: str | None) -> _Compiled:
    forms = secret_forms(secret, client_id=client_id)  # longest first: no partial leftovers
    return _Compiled(len(forms[0]), re.compile("|".join(map(re.escape, forms))))


def _longest_first(compiled: _Compiled) -> int:
    return -compiled.longest


class Redactor:
    """A set of secrets, each with one compiled pattern that finds all its forms.

    Adding a secret compiles that secret's forms only (a dozen strings), so the cost
    of an addition does not grow with the tokens already kept; :meth:`redact` runs
    the patterns one after another, the secret with the longest form first (so a
    form that contains another secret's is replaced whole). Thread-safe: the tuple of
    patterns is replaced (under a lock) when a secret is added and read without one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._secrets: dict[tuple[str, str | None], _Compiled] = {}
        self._tokens: OrderedDict[tuple[str, str | None], _Compiled] = OrderedDict()
        self._patterns: tuple[re.Pattern[str], ...] = ()

    def add(self, value: str, *, client_id: str | None = None, token: bool = False) -> None:
        """Register ``value`` (and its Basic form with ``client_id``); ``token`` bounds it.

        Tokens are kept up to :data:`MAX_TOKENS`, the oldest dropped first;
        configured secrets are kept for the life of the process.
        """
        if not isinstance(value, str) or len(value) < MIN_LENGTH:
            return
        key = (value, client_id)
        with self._lock:
            if key in self._tokens:
                self._tokens.move_to_end(key)
                return
            if key in self._secrets:
                return
        compiled = _compile(value, client_id)  # outside the lock: others keep redacting
        with self._lock:
            if token:
                self._tokens[key] = compiled
                while len(self._tokens) > MAX_TOKENS:
                    self._tokens.popitem(last=False)
            else:
                self._secrets[key] = compiled
            self._order()

    def _order(self) -> None:
        """Put the kept patterns in redaction order (the lock held; nothing compiled)."""
        kept = sorted([*self._secrets.values(), *self._tokens.values()], key=_longest_first)
        self._patterns = tuple(c.pattern for c in kept)

    def redact(self, text: str) -> str:
        """``text`` with every form of every registered secret replaced by ``<redacted>``."""
        patterns = self._patterns
        if not patterns or not text:
            return text
        for pattern in patterns:
            text = pattern.sub(REDACTED, text)
        return text

    def redact_json(self, obj: Any) -> Any:
        """A copy of JSON-like ``obj`` with every string (keys too) redacted.

        Run it before serialising, so that an escaped secret never needs finding.
        Mappings become dicts, lists and tuples lists; other values are kept.
        """
        if not self._patterns:
            return obj
        return self._walk(obj)

    def _walk(self, obj: Any) -> Any:
        if isinstance(obj, str):
            return self.redact(obj)
        if isinstance(obj, Mapping):
            return {
                (self.redact(k) if isinstance(k, str) else k): self._walk(v) for k, v in obj.items()
            }
        if isinstance(obj, (list, tuple)):
            return [self._walk(v) for v in obj]
        return obj

    def redact_body(self, body: str) -> str:
        """A request or response body redacted by structure: JSON, then form, then text."""
        try:
            parsed = json.loads(body)
        except ValueError:
            pass
        else:
            return json.dumps(self.redact_json(parsed), ensure_ascii=False)
        if "=" in body and " " not in body.strip():
            pairs = parse_qsl(body, keep_blank_values=True)
            if pairs:
                return self.redact(urlencode([(self.redact(k), self.redact(v)) for k, v in pairs]))
        return self.redact(body)

    def redact_url(self, url: str) -> str:
        """``url`` with secrets removed from its query values (decoded first) and elsewhere."""
        parts = urlsplit(url)
        if parts.query:
            pairs = parse_qsl(parts.query, keep_blank_values=True)
            query = urlencode([(self.redact(k), self.redact(v)) for k, v in pairs])
            parts = parts._replace(query=query)
        return self.redact(urlunsplit(parts))


REGISTRY = Redactor()
"""The process-wide registry every boundary uses."""


def register(secret: str, *, client_id: str | None = None) -> None:
    """Register a configured secret (a client secret, a webhook auth value) for redaction."""
    REGISTRY.add(secret, client_id=client_id)


def register_token(token: str) -> None:
    """Register an issued access token for redaction (the most recent :data:`MAX_TOKENS`)."""
    REGISTRY.add(token, token=True)


def redact(text: str) -> str:
    """``text`` with every registered secret, in every form, replaced by ``<redacted>``.

    Examples
    --------
    >>> register("hunter2/example", client_id="app")
    >>> redact("echo: hunter2/example, hunter2%2Fexample, aHVudGVyMi9leGFtcGxl")
    'echo: <redacted>, <redacted>, <redacted>'
    """
    return REGISTRY.redact(text)


def redact_json(obj: Any) -> Any:
    """A copy of JSON-like ``obj`` with every registered secret removed from every string."""
    return REGISTRY.redact_json(obj)


def redact_body(body: str) -> str:
    """A body redacted by structure (JSON, then form, then text)."""
    return REGISTRY.redact_body(body)


def redact_url(url: str) -> str:
    """A URL redacted in its query values (decoded first) and elsewhere."""
    return REGISTRY.redact_url(url)


class RedactingFilter(logging.Filter):
    """Redacts a log record's message (arguments merged in) and its formatted traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to logging's own error report
            return True
        record.msg = redact(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_FILTER = RedactingFilter()


def logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with the redacting filter installed."""
    log = logging.getLogger(name)
    if _FILTER not in log.filters:
        log.addFilter(_FILTER)
    return log


def install_log_filter() -> None:
    """Install :class:`RedactingFilter` on every logger in :data:`LOGGERS` (idempotent)."""
    for name in LOGGERS:
        logger(name)


install_log_filter()
