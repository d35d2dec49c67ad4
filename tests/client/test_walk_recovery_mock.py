"""A walk during which the mock touches records returns every record exactly once.

The mock's touch control (docs/mock.md) moves a record to the end of the default
list order in the middle of a walk: a plain page walk then sees it twice and misses
the record that slid into the page already read.
"""

from __future__ import annotations

import orjson
import pytest

from toolkit import seen
from toolkit.client import Client
from toolkit.mock import serve
from toolkit.store import load, sync

UA = "pmtk-tests (tests@example.invalid)"


def _ids_in_order(client: Client) -> list[str]:
    raw = client.pages("Appointment", count=50)
    return [e["resource"]["id"] for page in raw for e in orjson.loads(page).get("entry", [])]


@pytest.mark.parametrize("spill_at", [None, 100], ids=["in-memory", "spilled"])
def test_a_walk_with_records_touched_mid_walk_returns_each_once_in_its_new_version(
    spill_at: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With spill_at=100 the walk's index of ids moves to its SQLite file after two pages.
    spills: list[bool] = []
    if spill_at is not None:
        monkeypatch.setattr(seen, "SPILL_AT", spill_at)
        close = seen.Seen.close

        def noting_close(self: seen.Seen) -> None:
            spills.append(self.spilled)
            close(self)

        monkeypatch.setattr(seen.Seen, "close", noting_close)
    with (
        serve(seed=0, scale="small", test_controls=True) as dep,
        Client(dep.base_url, dep.client_id, dep.client_secret, user_agent=UA) as client,
    ):
        order = _ids_in_order(client)
        expected = set(order)
        # After page 2 of the next walk, touch one record already read and one ahead.
        dep.touch_after("Appointment", [order[3], order[130]], after_list_requests=2)
        frame = client.frame("Appointment", count=50)
        summary = client.last_summary
        assert summary is not None and summary.recovered
        assert dep.pending_touches() == {"armed": []}  # the touch really fired mid-walk
        assert frame.height == len(expected) == frame["id"].n_unique()
        assert set(frame["id"]) == expected
        touched = frame.filter(frame["id"].is_in([order[3], order[130]]))
        latest = frame["last_updated"].max()
        assert touched["last_updated"].to_list() == [latest, latest]
    if spill_at is not None:
        assert spills and all(spills), "the walk's index never spilled to disk"


def test_a_store_sync_during_changes_stores_each_record_once(tmp_path) -> None:
    with (
        serve(seed=0, scale="small", test_controls=True) as dep,
        Client(dep.base_url, dep.client_id, dep.client_secret, user_agent=UA) as client,
    ):
        order = _ids_in_order(client)
        dep.touch_after("Appointment", [order[5]], after_list_requests=1)
        sync(client, tmp_path / "store", resources=["Appointment"], progress=False)
    stored = load("Appointment", tmp_path / "store")
    assert stored.height == len(order) == stored["id"].n_unique()


def test_a_resumed_walk_counts_the_records_before_its_first_page() -> None:
    """``client.walk(skipped=...)``: whole when its records and ``skipped`` reach ``total``."""
    from toolkit.errors import IncompleteResult

    with (
        serve(seed=0, scale="small") as dep,
        Client(dep.base_url, dep.client_id, dep.client_secret, user_agent=UA) as client,
    ):
        params = {"_count": 50, "page": 3}
        walk = client.walk("Appointment", params=params, skipped=100)
        records = sum(len(page.records) for page in walk)
        summary = walk.summary
        assert summary.complete and summary.total == records + 100
        assert summary.started_at is not None
        short = client.walk("Appointment", params=params, skipped=99)
        try:
            list(short)
        except IncompleteResult as exc:
            assert exc.expected == summary.total and exc.received == records + 99
        else:
            raise AssertionError("a resumed walk one record short passed as whole")
