"""FHIR R4 search, in one place: how a value of each search type matches a record.

Every search parameter of the catalogue goes through here by its declared type
(:func:`toolkit.catalogue.search_type`): ``string`` (:func:`string_matcher`),
``token`` (:func:`token_values`), ``reference`` (:func:`reference_values`) and
``date`` (:func:`date_matcher`); a comma inside one value is OR, and the mock's
listing ANDs repeated parameters. Also the plain parsing the other rooms share:
instants, integers, paths and depth limits.
"""

from __future__ import annotations

import calendar
import datetime as dt
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from toolkit.mock.app.responses import Problem4xx

_INSTANT = re.compile(
    r"(?P<y>[0-9]{4})(?:-(?P<m>[0-9]{2})(?:-(?P<d>[0-9]{2})"
    r"(?:T(?P<time>[0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,9})?)?)"
    r"(?P<tz>Z|[+-][0-9]{2}:[0-9]{2})?)?)?)?"
)


def parse_instant(value: str, what: str = "") -> tuple[float, float]:
    """A FHIR date/date-time search value as a half-open [lo, hi) epoch range.

    Only FHIR's forms (``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD``, ``YYYY-MM-DDThh:mm[:ss[.f]]``
    with ``Z``, an offset or nothing for UTC), years 0001 to 9999. The upper bound
    is computed in epoch seconds, so ``9999-12-31`` works instead of overflowing.
    """
    match = _INSTANT.fullmatch(value)
    if match is None or match["y"] == "0000":
        msg = (
            f"{what}, and {value[:60]!r} is not a FHIR date or date-time"
            if what
            else f"{value[:60]!r} is not a FHIR date or date-time"
        ) + " (YYYY, YYYY-MM, YYYY-MM-DD or YYYY-MM-DDThh:mm[:ss]Z)"
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
            clock = match["time"]
            hi = lo + (60 if len(clock) == 5 else 1 if len(clock) == 8 else 10 ** -(len(clock) - 9))
    except (ValueError, OverflowError, OSError):
        msg = f"{value[:60]!r} is not a real calendar date or time"
        raise Problem4xx(400, "invalid", msg) from None
    return lo, hi


DATE_PREFIXES = ("eq", "ne", "gt", "lt", "ge", "le", "sa", "eb", "ap")
"""FHIR R4's comparison prefixes of a date search (``ap`` is refused: see :func:`date_matcher`)."""

DAY = 86_400.0
"""The width of a stored value that is a plain date (``Invoice.date``): a whole UTC day."""


def or_values(raw: str) -> list[str]:
    r"""The values of one search parameter: a comma is FHIR's OR, ``\,`` a literal comma.

    >>> or_values("Kelly,Nguyen"), or_values("a\\,b,c"), or_values(" ,x, ")
    (['Kelly', 'Nguyen'], ['a,b', 'c'], ['x'])
    """
    out: list[str] = []
    current: list[str] = []
    chars = iter(raw)
    for c in chars:
        if c == "\\":
            nxt = next(chars, "")
            current.append(nxt if nxt == "," else c + nxt)
        elif c == ",":
            out.append("".join(current))
            current = []
        else:
            current.append(c)
    out.append("".join(current))
    return [v.strip() for v in out if v.strip()]


def date_matcher(param: str, raw: str, width: float = 1.0) -> Callable[[float | None], bool]:
    """FHIR R4's date search of one parameter value, as a test of one stored instant.

    Both sides are ranges (FHIR R4 3.1.1.4.4.1, facts): the value's precision gives the
    search range (``2025-09-30T17:45Z`` is the whole minute), and a stored instant ``x``
    is ``[x, x + width)`` truncated to its precision (``width`` 1 for a date-time served
    to the second, :data:`DAY` for a plain date). ``eq``: the stored range lies in the
    search range; ``ne``: not ``eq``; ``gt``/``lt``: the stored range reaches above/below
    the search range; ``ge``/``le``: ``gt``/``lt`` or ``eq``; ``sa``/``eb``: it starts after
    / ends before it. A comma is OR. ``ap`` is refused with 400 (FHIR leaves its width
    to the server and ties it to now: no answer would be reproducible).
    """
    tests = [_one_date(param, value) for value in or_values(raw)]
    if not tests:
        raise Problem4xx(400, "invalid", f"{param}={raw[:60]!r} has no date")

    def match(x: float | None) -> bool:
        if x is None:
            return False
        lo = math.floor(x / width) * width
        return any(test(lo, lo + width) for test in tests)

    return match


def _one_date(param: str, value: str) -> Callable[[float, float], bool]:
    prefix = value[:2] if value[:2].isalpha() else "eq"
    text = value[2:] if value[:2].isalpha() else value
    if prefix not in DATE_PREFIXES:
        known = ", ".join(DATE_PREFIXES[:-1])
        msg = f"{param}={value[:60]!r}: {prefix!r} is not a date prefix ({known})"
        raise Problem4xx(400, "invalid", msg)
    if prefix == "ap":
        msg = (
            f"{param}={value[:60]!r}: the ap (approximately) prefix is not supported; use ge and le"
        )
        raise Problem4xx(400, "not-supported", msg)
    if not text:
        raise Problem4xx(400, "invalid", f"{param}={value[:60]!r}: {prefix} needs a date after it")
    lo, hi = parse_instant(text, f"{param}={value[:60]!r}: {prefix} needs a date")
    tests: dict[str, Callable[[float, float], bool]] = {
        "eq": lambda s, e: lo <= s and e <= hi,
        "ne": lambda s, e: not (lo <= s and e <= hi),
        "gt": lambda s, e: e > hi,
        "lt": lambda s, e: s < lo,
        "ge": lambda s, e: e > hi or (lo <= s and e <= hi),
        "le": lambda s, e: s < lo or (lo <= s and e <= hi),
        "sa": lambda s, e: s >= hi,
        "eb": lambda s, e: e <= lo,
    }
    return tests[prefix]


def string_matcher(param: str, modifier: str, raw: str) -> Callable[[Iterable[str]], bool]:
    """FHIR R4's string search of one value over a record's texts (any of them matches).

    Default: a text, or a word of it, starts with the value, ignoring case and accents;
    ``:exact``: the whole text, as written; ``:contains``: anywhere, ignoring case and
    accents. A comma is OR.
    """
    values = or_values(raw)
    needles = [_fold(v) for v in values]

    def match(texts: Iterable[str]) -> bool:
        for text in texts:
            if modifier == "exact":
                if text in values:
                    return True
                continue
            folded = _fold(text)
            if modifier == "contains":
                if any(n in folded for n in needles):
                    return True
            elif any(w.startswith(n) for w in (folded, *folded.split()) for n in needles):
                return True
        return False

    return match


def token_values(raw: str) -> set[str]:
    """The codes of a token search (comma: any of); ``system|code`` compares the code."""
    return {v.rpartition("|")[2] for v in or_values(raw)}


def reference_values(
    rtype: str,
    param: str,
    modifier: str,
    raw: str,
    types: tuple[str, ...],
    prefixes: Mapping[str, tuple[str, ...]] | None = None,
) -> set[tuple[str, str]]:
    """The ``(type, id)`` pairs a reference search asks for (comma: any of).

    Each value is an id, ``Type/id`` or an absolute URL (its last two segments), and
    the ``:Type`` modifier types a bare id (``patient:Patient=123``). A type the
    parameter cannot point at, or one that contradicts the modifier, is a 400; a bare
    id of a parameter that may point at more than one type, without the modifier, is
    refused with 422 (facts, "Shapes seen on the live service").
    """
    if modifier and modifier not in types:
        msg = f"{rtype} search {param!r} takes no :{modifier} modifier (types: {', '.join(types)})"
        raise Problem4xx(400, "not-supported", msg)
    wanted: set[tuple[str, str]] = set()
    for item in or_values(raw):
        path = item.split("?", 1)[0]
        kind, _, rid = path.rpartition("/")
        kind = kind.rsplit("/", 1)[-1]
        if not rid:
            raise Problem4xx(400, "invalid", f"{param}={item!r} is neither an id nor Type/id")
        if kind and kind not in types:
            msg = f"{param}={item!r}: {rtype}.{param} cannot point at {kind} ({', '.join(types)})"
            raise Problem4xx(400, "invalid", msg)
        if kind and modifier and kind != modifier:
            msg = f"{param}:{modifier}={item!r} names a {kind}, not a {modifier}"
            raise Problem4xx(400, "invalid", msg)
        kind = kind or modifier
        if not kind and len(types) > 1:
            guess = next(
                (t for t, p in (prefixes or {}).items() if p and item.startswith(p)), types[0]
            )
            raise Problem4xx(
                422,
                "invalid",
                f"{param}={item!r}: {rtype}.{param} may be a {' or '.join(types)}; give Type/id "
                f"or {param}:{guess}, for example {guess}/{item}",
            )
        wanted.add((kind or types[0], rid))
    return wanted


def last_segment(value: str) -> str:
    return value.rstrip("/").rsplit("/", 1)[-1]


def depth_problem(value: Any, limit: int) -> str | None:
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


def int_param(name: str, raw: str, lo: int, hi: int | None) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise Problem4xx(400, "invalid", f"{name} must be an integer, got {raw!r}") from None
    if value < lo or (hi is not None and value > hi):
        limit = f"{lo} to {hi}" if hi is not None else f"at least {lo}"
        raise Problem4xx(400, "invalid", f"{name} must be {limit}, got {value}")
    return value
