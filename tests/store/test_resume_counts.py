"""After a resume, records are counted once: the bar and ``fetched`` match the rows stored.

A resumed walk reads its last staged page again (records may have moved between
pages meanwhile). Its records were counted when it was first staged; counting them
again showed ``1741/1641 records`` on the bar and ``fetched 1,741`` for 1,641 rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from toolkit.mock import serve
from toolkit.store import sync
from toolkit.store.results import PageProgress
from toolkit.store.syncer import ResourceSyncer

SMALL_PAGE = 10


def test_a_resumed_sync_counts_each_record_once(
    tmp_path: Path, new_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = ResourceSyncer._search

    def small_pages(self: ResourceSyncer, cp: Any, first_page: int) -> dict[str, Any]:
        cp.page_size = SMALL_PAGE  # several pages from the small mock, as 100 do from a large one
        return original(self, cp, first_page)

    monkeypatch.setattr(ResourceSyncer, "_search", small_pages)
    out = tmp_path / "store"
    with serve(seed=0, scale="small") as dep, new_client(dep) as client:
        seen: list[PageProgress] = []

        def stop_after_four_pages(event: PageProgress) -> None:
            seen.append(event)
            if event.pages >= 4:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            sync(client, out, ["Referral"], progress=stop_after_four_pages)
        seen.clear()
        summary = sync(client, out, ["Referral"], progress=seen.append)
    (result,) = summary.resources
    assert result.resumed
    rows = result.rows["Referral"]
    assert rows > 5 * SMALL_PAGE  # the resume had pages left to fetch
    assert result.fetched == rows  # not one page more (the page read twice)
    assert seen[-1].records == rows == seen[-1].total  # the bar ends at n/n, not (n+10)/n
    assert all(e.records <= rows for e in seen)
