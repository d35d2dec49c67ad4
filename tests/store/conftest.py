"""Fixtures of the store tests: a real mock over loopback and a store synced from it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import toolkit_client
from toolkit import catalogue
from toolkit.client import Client
from toolkit.store import SyncSummary, sync

RATE = 100_000
"""Requests per minute for the mock and the client: the tests are not about pacing."""


@dataclass
class Synced:
    """A store fully synced from ``dep``: its directory and the summary of the sync."""

    dep: Any
    path: Path
    summary: SyncSummary


def mock_total(client: Client, resource_type: str) -> int:
    """``Bundle.total`` the deployment announces for a list of every record."""
    pages = client.pages(resource_type, params={"_count": 1})
    try:
        first = next(pages)
    finally:
        pages.close()
    total = orjson.loads(first)["total"]
    assert isinstance(total, int)
    return total


@pytest.fixture(scope="module")
def dep() -> Iterator[Any]:
    """A small mock deployment with test controls, shared by a test module."""
    from toolkit.mock import serve

    with serve(seed=0, scale="small", rate_limit=RATE, test_controls=True) as deployment:
        yield deployment


@pytest.fixture
def client(dep: Any) -> Iterator[Client]:
    """A client of the module's deployment, closed after the test."""
    with toolkit_client(dep) as c:
        yield c


@pytest.fixture(scope="session")
def new_client() -> Any:
    """``tests.conftest.toolkit_client`` as a fixture."""
    return toolkit_client


@pytest.fixture(scope="session")
def total_of() -> Any:
    """``mock_total`` as a fixture."""
    return mock_total


@pytest.fixture(scope="module")
def synced(dep: Any, tmp_path_factory: pytest.TempPathFactory) -> Synced:
    """Every listed resource synced once, in full, into a fresh store."""
    path = tmp_path_factory.mktemp("store") / "pmtk-store"
    with toolkit_client(dep) as c:
        summary = sync(c, path, progress=False)
    assert [r.resource for r in summary.resources] == list(catalogue.LISTED_RESOURCES)
    return Synced(dep, path, summary)
