"""Every path that merges versions follows the one precedence rule (issue 33).

A sync's staged pages (a record read twice in one walk, as a resumed or recovering
walk reads it) and its incremental merge into the stored tables (a webhook applied
a newer version than the list later returns) decide like
:func:`toolkit.store.precedence.replaces`, checked against the plain oracle of
``test_precedence.py``, at and beyond the 5,000 records the no-change shortcut
compares at most.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest

from tests.store.test_precedence import fhir, oracle_newer
from toolkit.page import Page
from toolkit.paging import FetchSummary
from toolkit.store import COMPARE_LIMIT, apply_changes, load, read_manifest, sync, verify

RT = "Referral"
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def record(rid: str, stamp: str, note: str) -> dict[str, Any]:
    return {
        "resourceType": RT,
        "id": rid,
        "meta": {"lastUpdated": stamp},
        "extension": [{"url": "https://example.org/version", "valueString": note}],
    }


class _Walk:
    def __init__(self, records: list[dict[str, Any]]) -> None:
        self.records = records
        self.summary = FetchSummary(RT, started_at=None)
        # the client marks a walk that read an id twice, so the sync de-duplicates it
        self.summary.recovered = len({r["id"] for r in records}) < len(records)

    def __iter__(self) -> Iterator[Page]:
        total = len(self.records)
        for start in range(0, max(total, 1), 100):
            chunk = self.records[start : start + 100]
            bundle = {"resourceType": "Bundle", "type": "searchset", "total": total}
            bundle["entry"] = [{"resource": r} for r in chunk]
            more = start + 100 < total
            yield Page(
                raw=orjson.dumps(bundle),
                url=f"test:{start}",
                bundle=bundle,
                records=chunk,
                total=total,
                next=f"test:{start + 100}" if more else None,
                server_time=None,
            )
        self.summary.complete = True


class ListSource:
    """A page source whose next walk serves ``records`` as they are (no request sent)."""

    def __init__(self) -> None:
        self.requests_sent = 0
        self.records: list[dict[str, Any]] = []

    def walk(self, resource_type: str, /, **_: Any) -> _Walk:
        assert resource_type == RT
        return _Walk(list(self.records))

    def export_ids(self, resource_type: str) -> set[str] | None:
        del resource_type
        return None


def stored_versions(out: Path) -> dict[str, tuple[str, str]]:
    """id -> (lastUpdated, version note) of every stored raw record."""
    raw = load(RT, out, table=f"_raw_{RT}")
    assert isinstance(raw, pl.DataFrame)
    found = {}
    for blob in raw["json"]:
        rec = orjson.loads(blob)
        found[rec["id"]] = (rec["meta"]["lastUpdated"], rec["extension"][0]["valueString"])
    assert len(found) == raw.height  # one row per record
    return found


def _sync(source: ListSource, out: Path, **options: Any) -> Any:
    return sync(source, out, resources=[RT], progress=False, **options)


def test_a_record_read_twice_keeps_its_newest_version_not_the_later_page(
    tmp_path: Path,
) -> None:
    out = tmp_path / "store"
    newer_first = fhir(T0 + timedelta(minutes=5), 600, 3)  # +10:00, later instant
    older_later = fhir(T0 + timedelta(minutes=1), -300, 0)  # -05:00, sorts after as text
    tie_a = fhir(T0, 0, 0)
    tie_b = fhir(T0, 840, 6)  # the same instant at +14:00
    source = ListSource()
    source.records = [
        record("moved", newer_first, "newest"),
        *[record(f"filler{i}", tie_a, "x") for i in range(150)],
        record("moved", older_later, "older, read later"),
        record("tied", tie_a, "tie, read first"),
        *[record(f"more{i}", tie_a, "x") for i in range(120)],
        record("tied", tie_b, "tie, read later"),
    ]
    _sync(source, out, full=True)
    versions = stored_versions(out)
    assert versions["moved"] == (newer_first, "newest")
    assert versions["tied"] == (tie_b, "tie, read later")  # a tie: the later arrival wins
    assert len(versions) == 2 + 150 + 120
    main = load(RT, out)
    assert isinstance(main, pl.DataFrame)
    assert main.height == len(versions)


@pytest.mark.parametrize("n", [COMPARE_LIMIT - 1, COMPARE_LIMIT, COMPARE_LIMIT + 1, 20_000])
def test_an_incremental_merge_keeps_a_newer_stored_version_at_any_size(
    tmp_path: Path, n: int
) -> None:
    out = tmp_path / "store"
    base = fhir(T0, 0, 0)
    ids = [f"r{i:05d}" for i in range(n)]
    source = ListSource()
    source.records = [record(rid, base, "v1") for rid in ids]
    _sync(source, out, full=True)
    # a webhook brings a newer version of every 7th record (at another UTC offset)
    hooked = {rid: fhir(T0 + timedelta(hours=1), 330, 3) for rid in ids[::7]}
    done = apply_changes(RT, out, upserts=[record(r, s, "hook") for r, s in hooked.items()])
    assert sorted(done.upserted) == sorted(hooked)
    # the list then lags: it returns v1 of everything, and a newer v3 of every 11th
    walked = {rid: (base, "v1") for rid in ids}
    walked.update({rid: (fhir(T0 + timedelta(hours=2), -720, 6), "v3") for rid in ids[::11]})
    source.records = [record(rid, s, note) for rid, (s, note) in walked.items()]
    summary = _sync(source, out)
    assert summary[RT].mode == "incremental"
    expected = {}
    for rid in ids:
        held = hooked.get(rid, base), "hook" if rid in hooked else "v1"
        incoming = walked[rid]
        expected[rid] = held if oracle_newer(held[0], incoming[0]) else incoming
    assert stored_versions(out) == expected
    main = load(RT, out)
    assert isinstance(main, pl.DataFrame)
    assert main.height == n
    assert verify(out).ok


@pytest.mark.parametrize("n", [COMPARE_LIMIT, COMPARE_LIMIT + 1])
def test_an_unchanged_resync_around_the_shortcut_limit_keeps_every_record(
    tmp_path: Path, n: int
) -> None:
    out = tmp_path / "store"
    source = ListSource()
    source.records = [record(f"r{i:05d}", fhir(T0, 0, 0), "v1") for i in range(n)]
    _sync(source, out, full=True)
    before = read_manifest(out)["resources"][RT]["tables"]
    inode = (out / before[RT]["path"]).stat().st_ino
    summary = _sync(source, out)
    after = read_manifest(out)["resources"][RT]["tables"]
    if n <= COMPARE_LIMIT:  # compared row by row: nothing is rewritten
        assert summary[RT].status == "unchanged"
        assert (out / after[RT]["path"]).stat().st_ino == inode
        assert after == before
    else:  # above the limit the tables are merged again: the same rows
        assert summary[RT].status == "updated"
        assert {t: i["rows"] for t, i in after.items()} == {t: i["rows"] for t, i in before.items()}
    assert len(stored_versions(out)) == n
