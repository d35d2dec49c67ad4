"""The one precedence rule against FHIR R4's own ``instant``, every function of both modules.

:mod:`toolkit.store.precedence` and :mod:`toolkit.lake.precedence` decide "which version
of a record is the newest" for every path of the store and the lake. These tests check
them against an oracle written here from FHIR R4's definition of ``instant``
(``YYYY-MM-DDThh:mm:ss(.sss...)(Z|+hh:mm|-hh:mm)``: FHIR's regular expression allows
the years 0001 to 9999, offsets to ±14:00, a fraction of 1 to 9 digits; seconds 00-59,
as the module's contract excludes the leap second), read piece by piece with plain
string checks and :mod:`calendar`, then parsed by :func:`datetime.fromisoformat`. The
stamps are hypothesis-generated around every boundary: offsets ±14:00 and one minute
beyond, fractions of 0 to 10 digits, second 59/60, hour 24, month 12/13, day 31 of a
30-day month, Feb 29 of leap and non-leap years, year 0000, whitespace, a lowercase
``z``, missing stamps and equal instants written differently.

The decisions over batches (repeated ids: the order of arrival decides ties) are
compared with a plain loop, and every vectorised (Polars) function agrees with the
scalar one row by row at sizes 0, 1 and beyond the store's 5,000-record shortcut.
"""

from __future__ import annotations

import calendar
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolkit.lake.precedence import instants, newest_per_id, staged_wins
from toolkit.store.precedence import (
    instant,
    instant_expr,
    newer,
    newer_expr,
    newest,
    one_version_each,
    replaces,
    stamp,
    winners,
    winning_records,
)

ASCII_DIGITS = "0123456789"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# derandomized: a mutant run decides the same way each time (the boundaries are also listed)
FAST = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


def _digits(text: str, width: int) -> bool:
    return len(text) == width and all(char in ASCII_DIGITS for char in text)


def fhir_instant(text: object) -> datetime | None:
    """A FHIR R4 instant checked piece by piece, then read by ``fromisoformat``; else None."""
    if not isinstance(text, str) or len(text) < len("2026-01-01T00:00:00Z"):
        return None
    date, clock = text[:10], text[11:]
    if text[10] != "T" or date[4] != "-" or date[7] != "-":
        return None
    if not (_digits(date[:4], 4) and _digits(date[5:7], 2) and _digits(date[8:], 2)):
        return None
    year, month, day = int(date[:4]), int(date[5:7]), int(date[8:])
    # FHIR's expression: ([0-9]([0-9]([0-9][1-9]|[1-9]0)|[1-9]00)|[1-9]000), no year 0000
    if year < 1 or not 1 <= month <= 12 or not 1 <= day <= calendar.monthrange(year, month)[1]:
        return None
    if len(clock) < 9 or clock[2] != ":" or clock[5] != ":":
        return None
    hh, mm, ss, rest = clock[0:2], clock[3:5], clock[6:8], clock[8:]
    if not (_digits(hh, 2) and _digits(mm, 2) and _digits(ss, 2)):
        return None
    if int(hh) > 23 or int(mm) > 59 or int(ss) > 59:  # no 24:00, no leap second
        return None
    fraction = ""
    if rest.startswith("."):
        end = 1
        while end < len(rest) and rest[end] in ASCII_DIGITS:
            end += 1
        fraction, rest = rest[1:end], rest[end:]
        if not 1 <= len(fraction) <= 9:
            return None
    if rest == "Z":
        offset = timedelta(0)
    elif len(rest) == 6 and rest[0] in "+-" and rest[3] == ":":
        if not (_digits(rest[1:3], 2) and _digits(rest[4:], 2)):
            return None
        oh, om = int(rest[1:3]), int(rest[4:])
        if om > 59 or oh > 14 or (oh == 14 and om != 0):
            return None
        offset = timedelta(hours=oh, minutes=om) * (-1 if rest[0] == "-" else 1)
    else:
        return None
    parsed = datetime.fromisoformat(text)  # Python 3.11 reads "Z" and truncates beyond µs
    assert parsed.utcoffset() == offset
    assert parsed.microsecond == int((fraction + "000000")[:6])
    return parsed


def fhir_newer(a: object, b: object) -> bool:
    when_a, when_b = fhir_instant(a), fhir_instant(b)
    return when_a is not None and (when_b is None or when_a > when_b)


def micros(when: datetime | None) -> int | None:
    """Microseconds since the epoch (years 0 and 10000 in UTC have no Python datetime)."""
    return None if when is None else (when - EPOCH) // timedelta(microseconds=1)


def write(when: datetime, offset_minutes: int, digits: int, *, zulu: bool = True) -> str:
    """``when`` as a FHIR instant at a UTC offset with ``digits`` of fraction (junk past µs)."""
    local = when.astimezone(timezone(timedelta(minutes=offset_minutes)))
    text = (
        f"{local.year:04d}-{local.month:02d}-{local.day:02d}"
        f"T{local.hour:02d}:{local.minute:02d}:{local.second:02d}"
    )
    if digits:
        text += "." + (f"{local.microsecond:06d}" + "987")[:digits]
    if offset_minutes == 0 and zulu:
        return text + "Z"
    sign = "-" if offset_minutes < 0 else "+"
    hours, minutes = divmod(abs(offset_minutes), 60)
    return f"{text}{sign}{hours:02d}:{minutes:02d}"


# -- hypothesis stamps around every boundary ------------------------------------------

ZONES = [
    "Z", "z", "", "+00:00", "-00:00", "+14:00", "-14:00", "+14:01", "-14:01", "+15:00",
    "+13:59", "-13:59", "+05:30", "+05:60", "+5:30", "+0530", "Z ", "+14:00\n",
]  # fmt: skip


@st.composite
def texts(draw: st.DrawFn) -> object:
    """A stamp as a server or a damaged store might hold it; many are not FHIR instants."""
    if draw(st.integers(0, 24)) == 0:
        return draw(st.sampled_from([None, "", 20260301, 1.5, b"2026-03-01T12:00:00Z", "Z"]))
    year = draw(st.sampled_from([0, 1, 1900, 2000, 2024, 2025, 9999]) | st.integers(1, 9999))
    month = draw(st.sampled_from([0, 2, 4, 6, 9, 11, 12, 13]) | st.integers(1, 12))
    day = draw(st.sampled_from([0, 28, 29, 30, 31, 32]) | st.integers(1, 28))
    hour = draw(st.sampled_from([0, 23, 24]) | st.integers(0, 23))
    minute = draw(st.sampled_from([0, 59, 60]) | st.integers(0, 59))
    second = draw(st.sampled_from([0, 59, 60]) | st.integers(0, 59))
    text = f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
    digits = draw(st.integers(-1, 10))  # -1: no fraction, 0: a dot alone
    if digits >= 0:
        text += "." + draw(st.text(ASCII_DIGITS, min_size=digits, max_size=digits))
    oh, om = draw(st.integers(0, 15)), draw(st.sampled_from([0, 30, 45, 59, 60]))
    sign = draw(st.sampled_from("+-"))
    text += draw(st.sampled_from(ZONES) | st.just(f"{sign}{oh:02d}:{om:02d}"))
    lead, trail = (
        draw(st.sampled_from(["", "", "", " ", "\t"])),
        draw(st.sampled_from(["", "", "", " ", "\n"])),
    )
    return lead + text + trail


WHEN = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


@st.composite
def near(draw: st.DrawFn) -> object:
    """A stamp from a few nearby instants, written at any offset and precision, or unknown:
    equal instants written differently are frequent, so ties are frequent."""
    if draw(st.integers(0, 7)) == 0:
        return draw(texts())
    when = WHEN + timedelta(
        seconds=draw(st.integers(0, 3)), microseconds=draw(st.sampled_from([0, 1, 999_999]))
    )
    offset = draw(st.sampled_from([0, 0, 840, -840, 600, -300, 330, -45]))
    return write(when, offset, draw(st.integers(0, 9)), zulu=draw(st.booleans()))


def column(values: list[Any]) -> pl.DataFrame:
    """``values`` as a String column ``s`` (anything not a string as null)."""
    return pl.DataFrame({"s": [v if isinstance(v, str) else None for v in values]})


# -- one stamp ------------------------------------------------------------------------


@FAST
@given(st.lists(texts(), max_size=20))
def test_instant_is_fhirs_instant_in_both_forms(values: list[object]) -> None:
    expected = [fhir_instant(v) for v in values]
    for value, want in zip(values, expected, strict=True):
        got = instant(value)
        assert got == want, value
        assert got is None or got.utcoffset() == want.utcoffset()  # type: ignore[union-attr]
    frame = column(values).select(
        instant_expr(pl.col("s")).alias("when"), instants(pl.col("s")).alias("lake")
    )
    assert frame.schema["when"] == pl.Datetime("us", "UTC")
    got_us = frame.select(pl.col("when", "lake").dt.epoch("us"))
    assert got_us["when"].to_list() == [micros(w) for w in expected]
    assert got_us["lake"].to_list() == got_us["when"].to_list()


BOUNDARIES = {
    "2026-03-01T12:00:00+14:00": True,
    "2026-03-01T12:00:00-14:00": True,
    "2026-03-01T12:00:00+14:01": False,
    "2026-03-01T12:00:00-14:01": False,
    "2026-03-01T12:00:00+13:59": True,
    "2026-03-01T12:00:00+15:00": False,
    "2026-03-01T12:00:00-00:00": True,
    "2026-03-01T12:00:00+05:60": False,
    "2026-03-01T12:00:00+0530": False,
    "2026-03-01T12:00:00": False,
    "2026-03-01T12:00:00z": False,
    "2026-03-01t12:00:00Z": False,
    "2026-03-01T12:00:59Z": True,
    "2026-03-01T12:00:60Z": False,
    "2026-03-01T12:59:00Z": True,
    "2026-03-01T12:60:00Z": False,
    "2026-03-01T23:00:00Z": True,
    "2026-03-01T24:00:00Z": False,
    "2026-12-31T00:00:00Z": True,
    "2026-13-01T00:00:00Z": False,
    "2026-00-01T00:00:00Z": False,
    "2026-01-00T00:00:00Z": False,
    "2026-01-32T00:00:00Z": False,
    "2026-04-30T00:00:00Z": True,
    "2026-04-31T00:00:00Z": False,
    "2026-09-31T00:00:00Z": False,
    "2024-02-29T00:00:00Z": True,
    "2000-02-29T00:00:00Z": True,
    "2025-02-29T00:00:00Z": False,
    "1900-02-29T00:00:00Z": False,
    "0001-01-01T00:00:00Z": True,
    "0001-01-01T00:00:00+14:00": True,  # the year 0 in UTC: still a FHIR instant
    "9999-12-31T23:59:59-14:00": True,  # the year 10000 in UTC
    "0000-01-01T00:00:00Z": False,  # FHIR's years start at 0001
    "0000-12-31T23:59:59Z": False,
    "2026-03-01T12:00:00.Z": False,
    "2026-03-01T12:00:00.1Z": True,
    "2026-03-01T12:00:00.123456789Z": True,
    "2026-03-01T12:00:00.1234567890Z": False,
    " 2026-03-01T12:00:00Z": False,
    "2026-03-01T12:00:00Z ": False,
    "2026-03-01T12:00:00Z\n": False,
    "\u0662\u0660\u0662\u0666-03-01T12:00:00Z": False,  # Arabic-Indic digits
}


@pytest.mark.parametrize(("text", "known"), BOUNDARIES.items())
def test_each_boundary_is_known_or_unknown_as_fhir_says(text: str, known: bool) -> None:
    assert (fhir_instant(text) is not None) is known  # the oracle itself
    assert (instant(text) is not None) is known
    when = column([text]).select(instant_expr(pl.col("s")).dt.epoch("us"))["s"].to_list()
    assert when == [micros(fhir_instant(text))]


def test_the_year_0000_is_unknown_in_the_vectorised_rule_as_in_the_scalar_one() -> None:
    # Polars reads the year 0 where Python's datetime cannot: before the FHIR year rule
    # the frames took "0000-…" as the oldest known instant, the scalar rule as unknown,
    # so a sync's staged dedupe and its merge chose different versions of one record.
    zero, one, bad = "0000-06-01T00:00:00Z", "0000-01-01T00:00:00Z", "garbage"
    frame = pl.DataFrame({"a": [zero, zero, bad], "b": [one, bad, zero]})
    got = frame.select(newer_expr(pl.col("a"), pl.col("b")))["a"].to_list()
    assert got == [newer(zero, one), newer(zero, bad), newer(bad, zero)] == [False] * 3
    rows = pl.LazyFrame({"id": ["x", "x"], "s": [zero, one], "n": [1, 2]})
    kept = winners(rows, "id", "s", "n").collect()
    assert kept["n"].to_list() == [2]  # two unknowns: the later arrival


def test_a_precision_beyond_the_microsecond_is_truncated_not_rounded() -> None:
    nine = "2026-03-01T12:00:00.999999999Z"
    assert instant(nine) == datetime(2026, 3, 1, 12, 0, 0, 999_999, tzinfo=UTC)
    assert not newer(nine, "2026-03-01T12:00:00.999999Z")
    assert newer("2026-03-01T12:00:01Z", nine)
    when = column([nine]).select(instant_expr(pl.col("s")))["s"].to_list()
    assert when == [datetime(2026, 3, 1, 12, 0, 0, 999_999, tzinfo=UTC)]


def test_instant_expr_reads_any_column_type_as_text() -> None:
    frame = pl.DataFrame({"n": [20260301, None], "c": ["2026-03-01T12:00:00+01:00", None]})
    got = frame.select(
        instant_expr(pl.col("n")).alias("n"),
        instant_expr(pl.col("c").cast(pl.Categorical)).alias("c"),
    )
    assert got["n"].to_list() == [None, None]
    assert got["c"].to_list() == [datetime(2026, 3, 1, 11, 0, 0, tzinfo=UTC), None]


def test_instant_expr_reads_each_row_by_the_fhir_format_whatever_the_first_row_is() -> None:
    # a damaged or foreign first row (a date alone, no offset, a space for the T) must not
    # set the format the others are read by: Polars would infer it from the first row
    for first in ["2026-03-01", "2026-03-01T12:00:00", "2026-03-01 12:00:00Z", "2026/03/01"]:
        texts_ = [first, "2026-03-01T12:00:00Z", "2026-03-01T12:00:00.5-01:00"]
        got = column(texts_).select(instant_expr(pl.col("s")).dt.epoch("us"))["s"].to_list()
        assert got == [micros(fhir_instant(t)) for t in texts_], first
        assert got[0] is None
        assert got[1] is not None


# -- two stamps -----------------------------------------------------------------------


@FAST
@given(st.lists(st.tuples(near(), near()), max_size=30))
def test_newer_replaces_newest_follow_fhir_in_both_forms(pairs: list[tuple[Any, Any]]) -> None:
    for a, b in pairs:
        want = fhir_newer(a, b)
        assert newer(a, b) is want, (a, b)
        assert replaces(a, b) is (not fhir_newer(b, a)), (a, b)
        assert newest(a, b) is (b if fhir_newer(b, a) else a), (a, b)
    left = [x if isinstance(x, str) else None for x, _ in pairs]
    right = [y if isinstance(y, str) else None for _, y in pairs]
    frame = pl.DataFrame({"a": left, "b": right}, schema={"a": pl.String, "b": pl.String})
    got = frame.select(newer_expr(pl.col("a"), pl.col("b")).alias("n"))["n"]
    assert got.dtype == pl.Boolean
    assert got.null_count() == 0
    assert got.to_list() == [fhir_newer(x, y) for x, y in zip(left, right, strict=True)]


@FAST
@given(
    st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.just(UTC),
    ),
    st.lists(st.tuples(st.integers(-840, 840), st.integers(0, 9), st.booleans()), min_size=2),
)
def test_one_instant_written_any_way_is_a_tie(
    when: datetime, forms: list[tuple[int, int, bool]]
) -> None:
    when = when.replace(microsecond=when.microsecond // 10 * 10)
    # written with fewer digits than the instant has, the text is an earlier instant
    written = [write(when, off, 6 + digits % 4, zulu=z) for off, digits, z in forms]
    for a in written:
        for b in written:
            assert not newer(a, b), (a, b)
            assert replaces(a, b)
            assert newest(a, b) is a
    frame = pl.DataFrame({"a": written, "b": written[::-1]})
    assert not frame.select(newer_expr(pl.col("a"), pl.col("b")).any()).item()
    later = write(when + timedelta(microseconds=1), forms[0][0], 6)
    assert all(newer(later, a) and not replaces(a, later) for a in written)
    assert all(newest(a, later) is later and newest(later, a) is later for a in written)


def test_unknown_against_unknown_is_a_tie_and_known_beats_unknown() -> None:
    known, unknowns = "0001-01-01T00:00:00Z", [None, "", "2026-03-01T12:00:60Z", 5]
    for u in unknowns:
        assert (newer(u, known), newer(known, u)) == (False, True)
        assert (replaces(u, known), replaces(known, u)) == (False, True)
        assert newest(known, u) is known and newest(u, known) is known  # type: ignore[arg-type]
        for v in unknowns:
            assert not newer(u, v) and replaces(u, v)
            assert newest(u, v) is u  # type: ignore[arg-type]


# -- batches with repeated ids ---------------------------------------------------------


def record(rid: object, when: object, note: int) -> dict[str, Any]:
    rec: dict[str, Any] = {"resourceType": "Patient", "note": note}
    if rid is not None:
        rec["id"] = rid
    if when is not None:
        rec["meta"] = {"lastUpdated": when}
    return rec


def plain_winners(records: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rule in words: in arrival order, a later version replaces the one held unless
    the held one is strictly newer; a record without a string id is kept; first places."""
    out: list[Mapping[str, Any]] = []
    for rec in records:
        rid = rec.get("id")
        if not isinstance(rid, str):
            out.append(rec)
            continue
        places = [i for i, held in enumerate(out) if held.get("id") == rid]
        if not places:
            out.append(rec)
            continue
        held = out[places[0]]
        if not fhir_newer(
            held.get("meta", {}).get("lastUpdated"), rec.get("meta", {}).get("lastUpdated")
        ):
            out[places[0]] = rec
    return out


batch = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", None, 7]), near() | st.none()), max_size=25
)


@FAST
@given(batch)
def test_winning_records_and_winners_decide_like_a_plain_loop(versions: list[Any]) -> None:
    records = [record(rid, when, n) for n, (rid, when) in enumerate(versions)]
    want = plain_winners(records)
    got = winning_records(records)
    assert [r["note"] for r in got] == [r["note"] for r in want]
    assert all(g is w for g, w in zip(got, want, strict=True))  # the records themselves
    keyed = [r for r in records if isinstance(r.get("id"), str)]
    frame = pl.LazyFrame(
        {
            "id": [r["id"] for r in keyed],
            "s": [s if isinstance(s := stamp(r), str) else None for r in keyed],
            "n": [r["note"] for r in keyed],
            "extra": [f"x{r['note']}" for r in keyed],
        },
        schema={"id": pl.String, "s": pl.String, "n": pl.Int64, "extra": pl.String},
    )
    chosen = winners(frame, "id", "s", "n").collect()
    assert chosen.columns == ["id", "s", "n", "extra"]
    kept = {r["id"]: r["note"] for r in want if isinstance(r.get("id"), str)}
    assert dict(zip(chosen["id"], chosen["n"], strict=True)) == kept
    assert chosen["extra"].to_list() == [f"x{n}" for n in chosen["n"]]
    lake = newest_per_id(frame.rename({"s": "last_updated"}).collect(), "n")
    assert lake["id"].to_list() == sorted(kept)
    assert dict(zip(lake["id"], lake["n"], strict=True)) == kept


def test_a_later_arrival_wins_a_tie_and_an_unknown_never_wins() -> None:
    t = "2026-03-01T12:00:00Z"
    same = "2026-03-01T22:00:00.000+10:00"
    older = "2026-03-01T11:59:59.999999Z"
    records = [
        record("tie", t, 0),
        record("old", t, 1),
        record("tie", same, 2),
        record("old", older, 3),
        record("unk", t, 4),
        record("unk", "2026-03-01T12:00:00", 5),
        record("unk", None, 6),
        {"id": "meta", "meta": "not an object", "note": 7},
        record("meta", None, 8),
        record(None, t, 9),
        record(None, t, 10),
    ]
    got = winning_records(records)
    assert [r["note"] for r in got] == [2, 1, 4, 8, 9, 10]
    assert winning_records([]) == []
    one = [record("a", None, 0)]
    assert winning_records(one) == one


def lake_rows(rows: list[tuple[str, str | None, int]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows,
        schema={"id": pl.String, "last_updated": pl.String, "part": pl.Int64},
        orient="row",
    ).with_columns(json=pl.lit("{}"))


def test_newest_per_id_keeps_three_columns_sorted_by_id() -> None:
    t0, t1 = "2026-03-01T12:00:00Z", "2026-03-01T12:00:01+00:00"
    raw = lake_rows(
        [("b", t1, 1), ("a", t0, 2), ("b", t0, 3), ("a", "2026-03-01T13:00:00+01:00", 4)]
    )
    got = newest_per_id(raw, "part")
    assert got.columns == ["id", "last_updated", "part"]
    assert got.rows() == [("a", "2026-03-01T13:00:00+01:00", 4), ("b", t1, 1)]
    assert newest_per_id(lake_rows([]), "part").rows() == []
    # rows are not in the order of arrival: the part number decides a tie, not the row
    late_first = lake_rows([("a", t0, 9), ("a", "2026-03-01T13:00:00+01:00", 3), ("b", None, 7)])
    late_first = pl.concat([late_first, lake_rows([("b", None, 2)])])
    assert newest_per_id(late_first, "part").rows() == [("a", t0, 9), ("b", None, 7)]


# -- the lake's question: does a staged version replace the stored one? --------------


@FAST
@given(
    st.lists(st.tuples(st.sampled_from("abcdef"), near()), max_size=12),
    st.lists(st.tuples(st.sampled_from("abcdefgh"), near()), max_size=12),
)
def test_staged_wins_follows_fhir_for_a_mapping_and_a_frame(
    staged: list[tuple[str, Any]], stored_rows: list[tuple[str, Any]]
) -> None:
    def text(v: object) -> str | None:
        return v if isinstance(v, str) else None

    chosen = lake_rows([(rid, text(w), n) for n, (rid, w) in enumerate(staged)])
    chosen = chosen.unique("id", keep="first", maintain_order=True)[::-1]  # any order
    stored = {rid: text(w) for rid, w in stored_rows}  # a repeated id: its last row
    frame = pl.DataFrame(
        [(rid, text(w)) for rid, w in stored_rows],
        schema={"id": pl.String, "last_updated": pl.String},
        orient="row",
    )
    want = [
        rid not in stored or not fhir_newer(stored[rid], new)
        for rid, new in zip(chosen["id"], chosen["last_updated"], strict=True)
    ]
    by_map = staged_wins(chosen, stored)
    by_frame = staged_wins(chosen, frame)
    assert by_map.to_list() == want
    assert by_frame.to_list() == want
    assert by_map.name == by_frame.name == "wins"


def test_staged_wins_on_empty_and_single_inputs() -> None:
    t = "2026-03-01T12:00:00Z"
    empty = lake_rows([])
    assert staged_wins(empty, {}).to_list() == []
    assert (
        staged_wins(
            empty, pl.DataFrame(schema={"id": pl.String, "last_updated": pl.String})
        ).to_list()
        == []
    )
    one = lake_rows([("a", t, 1)])
    assert staged_wins(one, {}).to_list() == [True]  # new
    assert staged_wins(one, {"a": None}).to_list() == [True]  # the stored time is unknown
    assert staged_wins(one, {"a": "2026-03-01T13:00:00+01:00"}).to_list() == [True]  # a tie
    assert staged_wins(one, {"a": "2026-03-01T12:00:00.000001Z"}).to_list() == [False]
    unknown = lake_rows([("a", None, 1)])
    assert staged_wins(unknown, {}).to_list() == [True]  # new, whatever its time
    assert staged_wins(unknown, {"a": None}).to_list() == [True]  # two unknowns: later wins
    assert staged_wins(unknown, {"a": t}).to_list() == [False]
    # a stored frame of other column types (a Categorical id, a Datetime-free text)
    held = pl.DataFrame({"id": ["a"], "last_updated": ["2026-03-01T12:00:01Z"]})
    held = held.with_columns(pl.col("id").cast(pl.Categorical))
    assert staged_wins(one, held).to_list() == [False]


# -- sizes 0, 1 and beyond the store's shortcut limit ----------------------------------


@pytest.mark.parametrize("n", [0, 1, 5_001])
def test_vectorised_and_scalar_agree_row_by_row_at_any_size(n: int) -> None:
    pool = [
        "2026-03-01T12:00:00Z",
        "2026-03-01T22:00:00.0000009+10:00",
        "2026-03-01T11:00:00-01:00",
        "2026-03-01T12:00:00.000001Z",
        "2026-03-01T12:00:00+14:01",
        "0000-03-01T12:00:00Z",
        None,
    ]
    a = [pool[i % len(pool)] for i in range(n)]
    b = [pool[(i * 3 + 1) % len(pool)] for i in range(n)]
    frame = pl.DataFrame({"a": a, "b": b}, schema={"a": pl.String, "b": pl.String})
    got = frame.select(newer_expr(pl.col("a"), pl.col("b")).alias("n"))["n"].to_list()
    assert got == [newer(x, y) for x, y in zip(a, b, strict=True)]
    assert got == [fhir_newer(x, y) for x, y in zip(a, b, strict=True)]
    ids = [f"r{i % max(1, n // 2)}" for i in range(n)]
    records = [record(rid, s, i) for i, (rid, s) in enumerate(zip(ids, a, strict=True))]
    scalar = {r["id"]: r["note"] for r in winning_records(records)}
    rows = pl.LazyFrame(
        {"id": ids, "s": a, "n": list(range(n))},
        schema={"id": pl.String, "s": pl.String, "n": pl.Int64},
    )
    chosen = winners(rows, "id", "s", "n").collect()
    assert dict(zip(chosen["id"], chosen["n"], strict=True)) == scalar
    lake = newest_per_id(rows.rename({"s": "last_updated"}).collect(), "n")
    assert dict(zip(lake["id"], lake["n"], strict=True)) == scalar
    held = {rid: b[i] for i, rid in enumerate(ids) if i % 3 == 0}
    shuffled = lake.sort("n", descending=True)  # not by id: the result follows its rows
    wins = staged_wins(shuffled, held).to_list()
    assert wins == [
        rid not in held or not fhir_newer(held[rid], new)
        for rid, new in zip(shuffled["id"], shuffled["last_updated"], strict=True)
    ]


# -- a record's stamp, and a staged part's pages --------------------------------------


def test_stamp_reads_meta_last_updated_or_none() -> None:
    assert stamp(None) is None
    assert stamp({}) is None
    assert stamp({"meta": None}) is None
    assert stamp({"meta": "2026-03-01T12:00:00Z"}) is None
    assert stamp({"meta": ["2026-03-01T12:00:00Z"]}) is None
    assert stamp({"meta": {}}) is None
    assert stamp({"meta": {"versionId": "1"}}) is None
    assert stamp({"meta": {"lastUpdated": 5}}) == 5  # as sent: an unknown, decided later
    assert stamp({"lastUpdated": "x", "meta": {"lastUpdated": "y"}}) == "y"


def _page(records: list[dict[str, Any]]) -> bytes:
    return orjson.dumps(
        {"resourceType": "Bundle", "type": "searchset", "entry": [{"resource": r} for r in records]}
    )


def test_one_version_each_keeps_the_pages_when_no_id_repeats() -> None:
    pages = [
        [record("a", "2026-03-01T12:00:00Z", 0)],
        [record("b", None, 1), record(None, None, 2)],
    ]
    raws = [_page(p) for p in pages]
    records = [r for p in pages for r in p]
    got_raws, kept = one_version_each(raws, records)
    assert got_raws == raws
    assert all(g is r for g, r in zip(got_raws, raws, strict=True))
    assert got_raws is not raws  # a new list: the caller's may change
    assert kept == records
    assert one_version_each([], []) == ([], [])


def test_one_version_each_rewrites_one_searchset_of_the_winners_when_an_id_repeats() -> None:
    first = record("a", "2026-03-01T12:00:01Z", 0)
    filler = record("b", "2026-03-01T12:00:00Z", 1)
    again = record("a", "2026-03-01T12:00:00Z", 2)  # read later, but older: loses
    raws = [_page([first, filler]), _page([again])]
    got_raws, kept = one_version_each(raws, [first, filler, again])
    assert kept == [first, filler]
    assert len(got_raws) == 1
    assert orjson.loads(got_raws[0]) == {
        "resourceType": "Bundle",
        "type": "searchset",
        "entry": [{"resource": first}, {"resource": filler}],
    }
