"""Fixtures of the lake tests: mock deployments over loopback and an independent oracle.

The oracle reads a deployment with plain ``httpx``, following the Bundle ``next``
links as the facts file describes them, and reads a lake with ``deltalake`` and
Polars alone: no pmtk code decides what either side holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.conftest import api_client
from toolkit.mock import serve


def ground_truth(dep: Any, resource: str) -> dict[str, str]:
    """``id -> meta.lastUpdated`` of every record the deployment lists (plain HTTP walk)."""
    out: dict[str, str] = {}
    with api_client(dep) as api:
        url: str | None = f"{resource}?_count=100"
        while url:
            bundle = api.get(url).raise_for_status().json()
            for entry in bundle.get("entry", []):
                record = entry["resource"]
                if record.get("resourceType") == resource:
                    out[record["id"]] = record["meta"]["lastUpdated"]
            url = next(
                (link["url"] for link in bundle.get("link", []) if link["relation"] == "next"), None
            )
    return out


def delta_rows(lake: str | Path, table: str, deployment: str, **options: Any) -> pl.DataFrame:
    """The table's rows of one deployment at the latest Delta version, read without pmtk."""
    frame = pl.read_delta(str(Path(lake) / "tables" / table), **options)
    return frame.filter(pl.col("deployment") == deployment)


@pytest.fixture
def two_mocks() -> Iterator[tuple[Any, Any]]:
    """Two deployments with different data (seeds 0 and 1), each its own process state."""
    with (
        serve(seed=0, scale="small", test_controls=True) as a,
        serve(seed=1, scale="small", test_controls=True) as b,
    ):
        yield a, b
