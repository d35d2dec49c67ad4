"""Pure parsing of search values: instants with prefixes, integers, paths and depth limits."""

from __future__ import annotations

import calendar
import datetime as dt
import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import Any

from toolkit.mock.app.responses import PREFIXES, Problem4xx

_INSTANT = re.compile(
    r"(?P<y>[0-9]{4})(?:-(?P<m>[0-9]{2})(?:-(?P<d>[0-9]{2})"
    r"(?:T(?P<time>[0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,9})?)?)"
    r"(?P<tz>Z|[+-][0-9]{2}:[0-9]{2})?)?)?)?"
)


def _parse_instant(value: str) -> tuple[float, float]:
    """A FHIR date/date-time search value as a half-open [lo, hi) epoch range.

    Only FHIR's forms (``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD``, ``YYYY-MM-DDThh:mm[:ss[.f]]``
    with ``Z``, an offset or nothing for UTC), years 0001 to 9999. The upper bound
    is computed in epoch seconds, so ``9999-12-31`` works instead of overflowing.
    """
    match = _INSTANT.fullmatch(value)
    if match is None or match["y"] == "0000":
        msg = f"{value[:60]!r} is not a FHIR date or date-time (YYYY-MM-DDThh:mm:ssZ)"
        raise Problem4xx(400, "invalid", msg)
    try:
        year = int(match["y"])
        if match["m"] is None:
            lo = dt.datetime(year, 1, 1, tzinfo=dt.UTC).timestamp()
            hi = lo + (366 if calendar.isleap(year) else 365) * 86_400
        elif match["d"] is None:
            month = int(match["m"])
            lo = dt.datetime(year, month, 1, tzinfo=dt.UTC).timestamp()
            hi = lo + calendar.monthrange(year, month)[1] * 86_400
        elif match["time"] is None:
            day = dt.date(year, int(match["m"]), int(match["d"]))
            lo = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()
            hi = lo + 86_400
        else:
            moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=dt.UTC)
            lo = moment.timestamp()
            hi = lo + 1
    except (ValueError, OverflowError, OSError):
        msg = f"{value[:60]!r} is not a real calendar date or time"
        raise Problem4xx(400, "invalid", msg) from None
    return lo, hi


def _date_predicate(param: str, raw: str) -> Callable[[float | None], bool]:
    prefix = raw[:2] if raw[:2] in PREFIXES else "eq"
    value = raw[2:] if raw[:2] in PREFIXES else raw
    if not value:
        raise Problem4xx(400, "invalid", f"{param}={raw!r} has no date")
    lo, hi = _parse_instant(value)
    tests: dict[str, Callable[[float], bool]] = {
        "eq": lambda x: lo <= x < hi,
        "ne": lambda x: not lo <= x < hi,
        "gt": lambda x: x >= hi,
        "ge": lambda x: x >= lo,
        "lt": lambda x: x < lo,
        "le": lambda x: x < hi,
    }
    test = tests[prefix]
    return lambda x: x is not None and test(x)


def _last_segment(value: str) -> str:
    return value.rstrip("/").rsplit("/", 1)[-1]


def _depth_problem(value: Any, limit: int) -> str | None:
    """Why ``value`` nests deeper than ``limit`` arrays/objects, or None (iterative)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return f"the body nests deeper than {limit} levels of objects and arrays"
        stack.extend((child, depth + 1) for child in children)
    return None


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def _int_param(name: str, raw: str, lo: int, hi: int | None) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise Problem4xx(400, "invalid", f"{name} must be an integer, got {raw!r}") from None
    if value < lo or (hi is not None and value > hi):
        limit = f"{lo} to {hi}" if hi is not None else f"at least {lo}"
        raise Problem4xx(400, "invalid", f"{name} must be {limit}, got {value}")
    return value
