"""A list of Referral records served in process the way a FHIR server pages it.

For the staging tests of ``tests/store/test_commit_bites.py`` (the mutation target
``commit``): a sync reads it as it reads :class:`toolkit.Client` (no HTTP, so a
sync of a few hundred records takes a fraction of a second), and a resumed sync
gets the pages from the one it asks for, as from the API.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from toolkit.paging import FetchSummary, Page
from toolkit.store import load, read_manifest

RT = "Referral"
CHILD = "referral_extension"
RAW = f"_raw_{RT}"
KEY = "referral_id"
VERSION_URL = "https://example.org/version"


def referral(rid: str, when: str, *notes: str) -> dict[str, Any]:
    """A Referral whose extensions (one child row each) carry ``notes``; none without."""
    rec: dict[str, Any] = {"resourceType": RT, "id": rid, "meta": {"lastUpdated": when}}
    if notes:
        rec["extension"] = [{"url": VERSION_URL, "valueString": n} for n in notes]
    return rec


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class PagedWalk:
    """One walk: ``_count`` records a page from page ``page``, ``_lastUpdated`` applied."""

    def __init__(
        self, records: list[dict[str, Any]], params: Mapping[str, Any], resource_type: str = RT
    ) -> None:
        bound = params.get("_lastUpdated")
        if bound is not None:
            op, when = str(bound)[:2], _instant(str(bound)[2:])
            assert op in ("gt", "ge"), bound
            records = [
                r
                for r in records
                if _instant(r["meta"]["lastUpdated"]) > when
                or (op == "ge" and _instant(r["meta"]["lastUpdated"]) == when)
            ]
        size = int(params.get("_count", 100))
        self.pages = [records[i : i + size] for i in range(0, len(records), size)] or [[]]
        self.first = int(params.get("page", 1))
        self.total = len(records)
        self.summary = FetchSummary(resource_type, started_at=None)
        # the client marks a walk whose recovery read an id again; the sync then de-duplicates
        self.summary.recovered = len({r["id"] for r in records}) < len(records)

    def __iter__(self) -> Iterator[Page]:
        last = len(self.pages)
        for n in range(self.first, last + 1):
            chunk = self.pages[n - 1]
            bundle = {
                "resourceType": "Bundle",
                "type": "searchset",
                "total": self.total,
                "entry": [{"resource": r} for r in chunk],
            }
            yield Page(
                raw=orjson.dumps(bundle),
                url=f"test:page={n}",
                bundle=bundle,
                records=chunk,
                total=self.total,
                next=f"test:page={n + 1}" if n < last else None,
                server_time=None,
            )
        self.summary.complete = True


class PagedSource:
    """A page source (``sync``'s client) serving ``records`` (of :data:`RT` unless told);
    ``walks`` keeps each walk's params."""

    def __init__(self, records: list[dict[str, Any]], resource_type: str = RT) -> None:
        self.resource_type = resource_type
        self.records = list(records)
        self.requests_sent = 0
        self.walks: list[dict[str, Any]] = []

    def walk(
        self,
        resource_type: str,
        /,
        *,
        params: Mapping[str, Any] | None = None,
        skipped: int = 0,
        progress: bool | None = None,
    ) -> PagedWalk:
        del skipped, progress
        assert resource_type == self.resource_type
        asked = dict(params or {})
        self.walks.append(asked)
        return PagedWalk(list(self.records), asked, resource_type)

    def export_ids(self, resource_type: str) -> set[str] | None:
        del resource_type
        return None


def contents(out: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table of the store's :data:`RT` as sorted rows: what it holds, in no order."""
    tables = read_manifest(out)["resources"][RT]["tables"]
    found = {}
    for table in tables:
        frame = load(RT, out, table=table)
        assert isinstance(frame, pl.DataFrame)
        found[table] = sorted(frame.rows(), key=repr)
    return found


def versions(out: Path) -> dict[str, tuple[str, list[str]]]:
    """``id -> (lastUpdated, notes)`` of each stored raw record (one row per record)."""
    raw = load(RT, out, table=RAW)
    assert isinstance(raw, pl.DataFrame)
    found = {}
    for blob in raw["json"]:
        rec = orjson.loads(blob)
        found[rec["id"]] = (
            rec["meta"]["lastUpdated"],
            [e["valueString"] for e in rec.get("extension", [])],
        )
    assert len(found) == raw.height
    return found


def child_notes(out: Path) -> dict[str, list[str]]:
    """``id -> the values of its child-table rows``, in their ``index`` order."""
    frame = load(RT, out, table=CHILD)
    assert isinstance(frame, pl.DataFrame)
    found: dict[str, list[str]] = {}
    for row in frame.sort(KEY, "index").iter_rows(named=True):
        found.setdefault(row[KEY], []).append(row["value"])
    return found
