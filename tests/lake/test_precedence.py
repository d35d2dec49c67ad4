"""The lake's precedence rule against a plain oracle, at and beyond every size.

The oracle parses each ``lastUpdated`` with :func:`datetime.fromisoformat` and walks
the versions one by one in staged order, as the rule reads in words: newest instant
wins, a tie goes to the version staged later, an unknown time never beats a known one;
against the store, the staged version wins unless the stored one is strictly newer.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.lake.precedence import newest_per_id, staged_wins

BASE = datetime(2026, 11, 2, 3, 4, 5, tzinfo=UTC)
OFFSETS = [timedelta(0), timedelta(hours=11), timedelta(hours=-5, minutes=-30)]


def stamp(seconds: int, micros: int, offset: int) -> str:
    """One instant written in one of several equivalent forms (``Z``, ``+11:00``, ...)."""
    when = (BASE + timedelta(seconds=seconds, microseconds=micros)).astimezone(
        __import__("datetime").timezone(OFFSETS[offset])
    )
    text = when.isoformat()
    return text.replace("+00:00", "Z") if offset == 0 else text


def parse(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def oracle_newest(rows: list[tuple[str, str | None, int]]) -> dict[str, tuple[str | None, int]]:
    chosen: dict[str, tuple[str | None, int]] = {}
    for rid, text, part in sorted(rows, key=lambda r: r[2]):
        held = chosen.get(rid)
        if held is None:
            chosen[rid] = (text, part)
            continue
        old, new = parse(held[0]), parse(text)
        if old is not None and (new is None or new < old):
            continue  # the held one is strictly newer, or the new one's time is unknown
        chosen[rid] = (text, part)
    return chosen


def oracle_wins(new: str | None, stored: str | None) -> bool:
    old_at, new_at = parse(stored), parse(new)
    if old_at is None:
        return True
    return new_at is not None and new_at >= old_at


versions = st.tuples(
    st.sampled_from(["a", "b", "c", "d"]),
    st.one_of(
        st.none(),
        st.just("not a time"),
        st.builds(stamp, st.integers(0, 3), st.sampled_from([0, 1, 500_000]), st.integers(0, 2)),
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(versions, max_size=12),
    st.dictionaries(st.sampled_from("abcde"), versions.map(lambda v: v[1])),
)
def test_newest_and_wins_match_the_oracle(
    staged: list[tuple[str, str | None]], stored: dict[str, str | None]
) -> None:
    rows = [(rid, text, part) for part, (rid, text) in enumerate(staged, start=1)]
    raw = pl.DataFrame(
        rows, schema={"id": pl.String, "last_updated": pl.String, "p": pl.Int64}, orient="row"
    )
    chosen = newest_per_id(raw, "p")
    expected = oracle_newest(rows)
    assert {r["id"]: (r["last_updated"], r["p"]) for r in chosen.iter_rows(named=True)} == expected
    wins = staged_wins(chosen, stored)
    for row, won in zip(chosen.iter_rows(named=True), wins.to_list(), strict=True):
        rid = row["id"]
        want = True if rid not in stored else oracle_wins(row["last_updated"], stored[rid])
        assert won == want, (rid, row["last_updated"], stored.get(rid))


@pytest.mark.parametrize("n", [4_999, 5_000, 5_001, 20_000])
def test_no_limit_on_how_many_records_are_compared(n: int) -> None:
    """Every id decides alone at any size (a shortcut that stops at 5,000 would show)."""
    ids = [f"r{i}" for i in range(n)]
    older = [stamp(1, 0, i % 3) for i in range(n)]
    newer = [stamp(2, 0, (i + 1) % 3) for i in range(n)]
    raw = pl.DataFrame({"id": ids + ids, "last_updated": newer + older, "p": [1] * n + [2] * n})
    chosen = newest_per_id(raw, "p")
    assert chosen.height == n
    assert chosen["last_updated"].to_list() == [
        newer[i] for i in sorted(range(n), key=lambda i: ids[i])
    ]
    # the store holds the newer version of the last id only: exactly that one is stale
    stored = {ids[-1]: stamp(3, 0, 0)}
    wins = staged_wins(chosen, stored)
    assert wins.sum() == n - 1
    assert chosen.filter(~wins)["id"].to_list() == [ids[-1]]
