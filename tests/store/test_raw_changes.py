"""A webhook change reaches the raw records, not only the tables.

The raw-record table (``_raw_<Resource>``) is what ViewDefinitions read
(:func:`toolkit.store.raw_records`) and what ``pmtk sync --rebuild`` rebuilds every
table from. A change applied to the tables but not to it is silently wrong twice:
a user's view shows the old record, and a rebuild puts the old version back and
brings a deleted record back to life.

The store is synced from the embedded mock over loopback HTTP; the change is a
real merge-patch on the mock, read back with plain httpx (the record as the API
serves it), then applied as the webhook receiver applies it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import polars as pl
import pytest

from tests.conftest import api_client, describe, synced_store
from toolkit.store import apply_changes, load, verify
from toolkit.store.raw import raw_records, rebuild

RESOURCE = "Appointment"


@pytest.fixture
def api(dep: Any) -> Iterator[httpx.Client]:
    with api_client(dep) as c:
        yield c


@pytest.fixture
def store(dep: Any, tmp_path: Path) -> Path:
    return synced_store(dep, tmp_path / "store", [RESOURCE])


def _raw_by_id(store: Path) -> dict[str, dict[str, Any]]:
    records = [orjson.loads(r) for r in raw_records(store, RESOURCE)]
    return {r["id"]: r for r in records}


def _changed_on_the_mock(api: httpx.Client, rid: str, description: str) -> dict[str, Any]:
    describe(api, rid, description)
    served = api.get(f"{RESOURCE}/{rid}")
    assert served.status_code == 200, served.text
    record: dict[str, Any] = served.json()
    assert record["description"] == description
    return record


def test_an_applied_change_and_delete_reach_the_raw_records_and_survive_a_rebuild(
    store: Path, api: httpx.Client
) -> None:
    before = _raw_by_id(store)
    changed_id, deleted_id = sorted(before)[3], sorted(before)[4]
    served = _changed_on_the_mock(api, changed_id, "Changed by an event")

    apply_changes(RESOURCE, store, upserts=[served], deletes=[deleted_id])

    after = _raw_by_id(store)
    assert after[changed_id] == served  # the record exactly as the API served it
    assert deleted_id not in after
    assert set(after) == set(before) - {deleted_id}
    untouched = next(rid for rid in sorted(before) if rid not in (changed_id, deleted_id))
    assert after[untouched] == before[untouched]
    assert verify(store).ok

    # A rebuild from the raw records keeps the change and the deletion.
    rebuild(store, [RESOURCE], progress=False)
    frame = load(RESOURCE, store)
    assert frame.filter(pl.col("id") == deleted_id).height == 0
    row = frame.filter(pl.col("id") == changed_id)
    assert row["description"].to_list() == ["Changed by an event"]
    assert frame.height == len(before) - 1


def test_a_stale_change_leaves_the_raw_record_alone(store: Path) -> None:
    before = _raw_by_id(store)
    rid = sorted(before)[5]
    older = {**before[rid], "description": "An older version"}
    older["meta"] = {**older["meta"], "lastUpdated": "2000-01-01T00:00:00Z"}

    result = apply_changes(RESOURCE, store, upserts=[older])

    assert result.stale == [rid]
    assert _raw_by_id(store)[rid] == before[rid]
