"""The one precedence rule (toolkit.store.precedence) against a plain oracle (issue 33).

The oracle below parses FHIR instants by hand with :func:`datetime.strptime` (no
regular expression, nothing shared with the module) and decides with a plain loop.
Every scalar function and its vectorised form are compared with it, also at and
beyond the 5,000 records the store's no-change shortcut compares at most.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import polars as pl
import pytest

from toolkit.store import COMPARE_LIMIT
from toolkit.store.precedence import (
    instant,
    instant_expr,
    newer,
    newer_expr,
    newest,
    replaces,
    winners,
)

DIGITS = set("0123456789")


def oracle_instant(text: Any) -> datetime | None:
    """A FHIR instant by hand: ``YYYY-MM-DDThh:mm:ss[.f{1,9}](Z|±hh:mm)``, offsets to ±14:00."""
    if not isinstance(text, str):
        return None
    if text.endswith("Z"):
        main, offset = text[:-1], timedelta(0)
    else:
        main, tail = text[:-6], text[-6:]
        if len(tail) != 6 or tail[0] not in "+-" or tail[3] != ":":
            return None
        hh, mm = tail[1:3], tail[4:6]
        if not (set(hh) <= DIGITS and set(mm) <= DIGITS):
            return None
        if int(hh) > 14 or int(mm) > 59 or (int(hh) == 14 and int(mm) != 0):
            return None
        offset = timedelta(hours=int(hh), minutes=int(mm)) * (1 if tail[0] == "+" else -1)
    whole, _, fraction = main.partition(".")
    if "." in main and not (1 <= len(fraction) <= 9 and set(fraction) <= DIGITS):
        return None
    shape = "dddd-dd-ddTdd:dd:dd"
    if len(whole) != len(shape):
        return None
    for char, kind in zip(whole, shape, strict=True):
        if (kind == "d") != (char in DIGITS) or (kind != "d" and char != kind):
            return None
    try:
        base = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    micro = int((fraction + "000000")[:6]) if fraction else 0
    return base.replace(microsecond=micro, tzinfo=timezone(offset))


def oracle_newer(a: Any, b: Any) -> bool:
    when_a, when_b = oracle_instant(a), oracle_instant(b)
    if when_a is None:
        return False
    return when_b is None or when_a > when_b


def oracle_winners(rows: list[tuple[str, str | None, int]]) -> dict[str, int]:
    """id -> arrival of the winning version: rows taken in arrival order, the later
    one replacing the held one unless the held one is strictly newer."""
    held: dict[str, tuple[str | None, int]] = {}
    for rid, stamp, arrival in sorted(rows, key=lambda r: r[2]):
        if rid not in held or not oracle_newer(held[rid][0], stamp):
            held[rid] = (stamp, arrival)
    return {rid: arrival for rid, (_, arrival) in held.items()}


BASE = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def fhir(when: datetime, offset_minutes: int, digits: int) -> str:
    """``when`` written as a FHIR instant at another UTC offset and precision."""
    local = when.astimezone(timezone(timedelta(minutes=offset_minutes)))
    text = local.strftime("%Y-%m-%dT%H:%M:%S")
    if digits:
        text += "." + (f"{local.microsecond:06d}" + "789")[:digits]
    if offset_minutes == 0 and digits % 2 == 0:
        return text + "Z"
    sign = "+" if offset_minutes >= 0 else "-"
    hours, minutes = divmod(abs(offset_minutes), 60)
    return f"{text}{sign}{hours:02d}:{minutes:02d}"


NOT_INSTANTS = [
    None,
    "",
    "2026-03-01",
    "2026-03-01T12:00:00",  # no offset
    "2026-03-01T12:00:00Z\n",  # a trailing newline
    " 2026-03-01T12:00:00Z",
    "2026-03-01 12:00:00Z",
    "2026-03-01T12:00:60Z",  # a leap second: not representable
    "0000-03-01T12:00:00Z",  # FHIR's years start at 0001 (Polars reads a year 0)
    "2026-13-01T12:00:00Z",
    "2026-02-30T12:00:00Z",
    "2026-03-01T24:00:00Z",
    "2026-03-01T12:00:00+14:30",
    "2026-03-01T12:00:00.Z",
    "2026-03-01T12:00:00.1234567890Z",
    "2026-3-01T12:00:00Z",
    "\u0662\u0660\u0662\u0666-03-01T12:00:00Z",  # Arabic-Indic digits: a \\d would match them
    "garbage",
]


def _random_stamp(rng: random.Random) -> str | None:
    if rng.random() < 0.05:
        return rng.choice(NOT_INSTANTS)
    # few distinct instants, so that ties (also across offsets and precisions) are common
    when = BASE + timedelta(seconds=rng.randrange(40), microseconds=rng.choice([0, 500, 999_999]))
    offset = rng.choice([0, 0, 600, -300, 330, 840, -720, 45])
    return fhir(when, offset, rng.choice([0, 0, 3, 6, 9]))


# -- the scalar rule -----------------------------------------------------------------


def test_the_same_instant_at_other_offsets_and_precisions_is_a_tie() -> None:
    same = [
        "2026-03-01T12:00:00Z",
        "2026-03-01T12:00:00.000Z",
        "2026-03-01T22:00:00+10:00",
        "2026-03-01T06:30:00.000000000-05:30",
        "2026-03-02T02:00:00+14:00",
    ]
    for a in same:
        for b in same:
            assert not newer(a, b), (a, b)
            assert replaces(a, b)  # on a tie the later arrival wins
    assert newer("2026-03-01T12:00:00.001Z", "2026-03-01T22:00:00+10:00")
    assert not newer("2026-03-01T12:00:00.0000009Z", "2026-03-01T12:00:00Z")  # beyond the µs


def test_an_earlier_local_time_can_be_the_later_instant() -> None:
    # as text "11:00-05:00" sorts before "12:00Z"; as instants it is 4 hours later
    assert newer("2026-03-01T11:00:00-05:00", "2026-03-01T12:00:00Z")
    assert not replaces("2026-03-01T12:00:00Z", "2026-03-01T11:00:00-05:00")


@pytest.mark.parametrize("unknown", NOT_INSTANTS)
def test_an_unknown_stamp_is_never_newer_and_always_older(unknown: Any) -> None:
    known = "2000-01-01T00:00:00Z"
    assert instant(unknown) is None
    assert oracle_instant(unknown) is None
    assert not newer(unknown, known)
    assert newer(known, unknown)
    assert not newer(unknown, unknown)
    assert replaces(unknown, unknown)  # two unknowns: a tie, the later arrival wins
    assert not replaces(unknown, known)
    assert newest(known, unknown) == known
    assert newest(unknown, known) == known


def test_scalar_rule_agrees_with_the_oracle_on_many_pairs() -> None:
    rng = random.Random(33)
    stamps = [_random_stamp(rng) for _ in range(600)]
    for a, b in zip(stamps, reversed(stamps), strict=True):
        assert instant(a) == oracle_instant(a), a
        assert newer(a, b) is oracle_newer(a, b), (a, b)
        assert replaces(a, b) is (not oracle_newer(b, a)), (a, b)
        expected = b if oracle_newer(b, a) else a
        assert newest(a, b) == expected


# -- the vectorised rule, at and beyond the shortcut's limit ---------------------------


def _rows(n: int, seed: int) -> list[tuple[str, str | None, int]]:
    rng = random.Random(seed)
    ids = max(1, n // 3)  # about three versions per record
    arrivals = list(range(n))
    rng.shuffle(arrivals)
    return [(f"r{rng.randrange(ids)}", _random_stamp(rng), arrivals[i]) for i in range(n)]


@pytest.mark.parametrize("n", [COMPARE_LIMIT - 1, COMPARE_LIMIT, COMPARE_LIMIT + 1, 20_000])
def test_winners_match_the_oracle_at_and_beyond_the_limit(n: int) -> None:
    assert COMPARE_LIMIT == 5_000
    rows = _rows(n, seed=n)
    frame = pl.LazyFrame(
        rows, schema={"id": pl.String, "last_updated": pl.String, "_part": pl.Int64}, orient="row"
    )
    got = winners(frame, "id", "last_updated", "_part").collect()
    assert got.height == got["id"].n_unique()
    assert dict(zip(got["id"], got["_part"], strict=True)) == oracle_winners(rows)


@pytest.mark.parametrize("n", [COMPARE_LIMIT - 1, COMPARE_LIMIT, COMPARE_LIMIT + 1, 20_000])
def test_newer_expr_matches_the_scalar_rule_row_by_row(n: int) -> None:
    rng = random.Random(n + 1)
    a = [_random_stamp(rng) for _ in range(n)]
    b = [_random_stamp(rng) for _ in range(n)]
    frame = pl.DataFrame({"a": a, "b": b}, schema={"a": pl.String, "b": pl.String})
    got = frame.select(
        newer_expr(pl.col("a"), pl.col("b")).alias("newer"),
        instant_expr(pl.col("a")).alias("when"),
    )
    assert got["newer"].null_count() == 0
    assert got["newer"].to_list() == [oracle_newer(x, y) for x, y in zip(a, b, strict=True)]
    assert got["when"].to_list() == [oracle_instant(x) for x in a]


def test_the_module_imports_alone_without_side_effects(tmp_path: Any) -> None:
    import subprocess
    import sys

    code = (
        "import toolkit.store.precedence as p; "
        "print(p.newer('2026-01-01T00:00:01Z', '2026-01-01T00:00:00Z'))"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert (done.stdout.strip(), done.stderr) == ("True", "")
    assert not list(tmp_path.iterdir())  # nothing written
