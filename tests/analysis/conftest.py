"""Fixtures of the analysis tests that read the shared mock over loopback HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from toolkit import Client


@pytest.fixture(scope="module")
def mock_client(mock_deployment: Any) -> Iterator[Client]:
    """An unpaced client of the session's mock (its rate window emptied first)."""
    mock_deployment.reset_rate_limit()
    with Client(
        base_url=mock_deployment.base_url,
        client_id=mock_deployment.client_id,
        client_secret=mock_deployment.client_secret,
        requests_per_minute=None,
        progress=False,
    ) as client:
        assert client.base_url.startswith("http://127.0.0.1:")
        yield client
