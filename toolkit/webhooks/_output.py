"""What ``pmtk listen`` prints, fit for where it goes (README "Output fits where it goes").

* On a terminal: the banner and ``--status`` with coloured labels, and the receiver's
  log lines on stderr, a warning in yellow and an error in red.
* On a pipe, in a file, or with ``NO_COLOR``/``TERM=dumb``: the same words as plain
  lines, never cut nor wrapped (one log record per line, so ``grep`` finds it).
* With ``--output json``: JSON Lines on stdout while the receiver runs (a
  ``listening`` object first, then one ``log`` object per record of the receiver and
  its worker, then ``stopped`` with the final status), or one JSON document for
  ``--status`` and ``--retry-dead``. Notices meant for a person (``listening until
  Ctrl-C``, errors) stay on stderr, so stdout holds JSON only.

Secrets never appear: the authentication header is shown by name only, and every
message passes through :mod:`toolkit.redaction` (which knows the header's value).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from toolkit._cli import make_console
from toolkit.redaction import redact, redact_json
from toolkit.webhooks.queue import AuthHeader

__all__ = [
    "JsonLines",
    "LineHandler",
    "banner_json",
    "banner_lines",
    "echo_json",
    "print_lines",
    "status_style",
]

PREFIX = "pmtk listen: "
"""What each log line of the receiver begins with on stderr."""

_LEVEL_STYLE = {logging.WARNING: "yellow", logging.ERROR: "bold red", logging.CRITICAL: "bold red"}


def _one_line(text: str) -> str:
    """``text`` on one line: a message with newlines would split one record over several."""
    return " ".join(text.split())


class LineHandler(logging.Handler):
    """Log records as ``pmtk listen: <message>`` lines on a rich console (stderr).

    A terminal shows warnings in yellow and errors in red; a plain console (a pipe,
    ``NO_COLOR``, ``TERM=dumb``) prints the same text without colour codes, and never
    wraps it. The message is one line; a traceback, when a record carries one (the
    worker failed), follows it.
    """

    def __init__(self, console: Any | None = None) -> None:
        super().__init__()
        self.console = console if console is not None else make_console(stderr=True)

    def emit(self, record: logging.LogRecord) -> None:
        from rich.text import Text

        try:
            line = Text(PREFIX + _one_line(redact(record.getMessage())))
            style = _LEVEL_STYLE.get(record.levelno)
            if style:
                line.stylize(style, len(PREFIX))
            self.console.print(line)
            if record.exc_info:
                trace = redact(logging.Formatter().formatException(record.exc_info))
                self.console.print(Text(trace))
        except Exception:  # a closed stream: logging's own report, never a crash
            self.handleError(record)


class JsonLines(logging.Handler):
    """Log records as JSON Lines: ``{"event": "log", "time", "level", "logger", "message"}``.

    Records are held until :meth:`flush_held`, so that the ``listening`` object is the
    first line even when the catch-up sync logs before the banner is printed.
    """

    def __init__(self, stream: IO[str] | None = None) -> None:
        super().__init__()
        self.stream = stream if stream is not None else sys.stdout
        self._held: list[dict[str, Any]] | None = []
        self._write_lock = threading.RLock()  # release() writes while holding it

    def emit(self, record: logging.LogRecord) -> None:
        try:
            item: dict[str, Any] = {
                "event": "log",
                "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                    timespec="milliseconds"
                ),
                "level": record.levelname.lower(),
                "logger": record.name,
                "message": redact(record.getMessage()),
            }
            if record.exc_info:
                item["exception"] = redact(logging.Formatter().formatException(record.exc_info))
            with self._write_lock:
                if self._held is not None:
                    self._held.append(item)
                    return
            self.write(item)
        except Exception:
            self.handleError(record)

    def write(self, item: dict[str, Any]) -> None:
        """One object, one line, flushed at once (a pipe would otherwise hold it)."""
        with self._write_lock:
            self.stream.write(json.dumps(redact_json(item), ensure_ascii=False) + "\n")
            self.stream.flush()

    def flush_held(self) -> None:
        """Write the records held so far, and every later one as it comes."""
        with self._write_lock:
            held, self._held = self._held or [], None
            for item in held:
                self.write(item)


def banner_lines(url: str, store: Path, header: AuthHeader | None) -> list[tuple[str, str]]:
    """The banner as ``(label, value)`` pairs: where it listens, the store, the auth (by name)."""
    shown = f"{header.name} (value hidden)" if header else "none (--no-auth: any caller accepted)"
    return [("webhook URL: ", url), ("store:       ", str(store)), ("auth header: ", shown)]


def banner_json(
    url: str, store: Path, header: AuthHeader | None, *, catch_up: bool
) -> dict[str, Any]:
    """The ``listening`` object of ``--output json``: never the header's value."""
    return {
        "event": "listening",
        "url": url,
        "store": str(store.resolve()),
        "auth_header": header.name if header else None,
        "no_auth": header is None,
        "catch_up": catch_up,
    }


def status_style(line: str) -> str | None:
    """The colour of a ``--status`` line on a terminal: red or yellow for what needs a look."""
    label, _, value = line.partition(":")
    value = value.strip()
    if label == "accepting" and value.startswith("no"):
        return "bold red"
    if label == "dead letters" and not value.startswith("0"):
        return "yellow"
    if label == "last error" and value != "-":
        return "red"
    if label == "waiting":
        return "yellow"
    return None


def print_lines(pairs: list[tuple[str, str]], console: Any | None = None) -> None:
    """``label value`` lines: the label bold and the value coloured on a terminal only."""
    from rich.text import Text

    console = console if console is not None else make_console()
    for label, value in pairs:
        line = Text(label, style="bold")
        line.append(redact(value), style=status_style(label.rstrip() + " " + value) or "")
        console.print(line)


def echo_json(document: dict[str, Any]) -> None:
    """One JSON document (or JSON Lines object) on stdout, redacted, flushed."""
    sys.stdout.write(json.dumps(redact_json(document), ensure_ascii=False) + "\n")
    sys.stdout.flush()
