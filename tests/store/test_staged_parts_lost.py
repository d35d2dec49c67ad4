"""A staged part removed behind a sync's back is never committed as a short table.

What two syncs at once did to the winner (issue 33): its staged pages removed while
it fetched, it committed 434 of 2,034 Appointments without a word. The lock now
keeps another pmtk from doing that; whatever else removes a part, the merge counts
the staged raw records against the checkpoint and refuses a shortfall.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import toolkit_client
from tests.store.conftest import mock_total
from toolkit.store import PageProgress, StoreError, load, sync, verify

RT = "Appointment"


def test_a_part_removed_during_the_fetch_fails_the_resource_not_the_data(
    dep: Any, tmp_path: Path
) -> None:
    out = tmp_path / "store"
    with toolkit_client(dep) as client:
        sync(client, out, resources=["Referral"], progress=False)
        calls = []

        def remove_first_part(progress: PageProgress) -> None:
            calls.append(progress)
            if len(calls) == 2:
                for part in (out / ".staging" / RT).glob("*/part-000001.parquet"):
                    part.unlink()

        with pytest.raises(StoreError, match=r"hold \d+ of the \d+ records fetched"):
            sync(client, out, resources=[RT], progress=remove_first_part)
        assert len(calls) >= 2
        with pytest.raises(StoreError, match=f"holds no {RT} data"):
            load(RT, out)
        assert verify(out).ok
        sync(client, out, resources=[RT], progress=False)  # the next run starts over
        total = mock_total(client, RT)
    stored = load(RT, out)
    assert stored.height == total
