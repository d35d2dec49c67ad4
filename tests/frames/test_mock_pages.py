"""Real pages from the mock deployment flatten and validate cleanly."""

from __future__ import annotations

import httpx
import pytest

from toolkit import catalogue
from toolkit.schemas import validate
from toolkit.views import flatten, flatten_tables


def fetch_pages(client: httpx.Client, resource_type: str, limit: int = 5) -> list[bytes]:
    pages: list[bytes] = []
    url: str | None = f"{resource_type}?_count=100"
    while url and len(pages) < limit:
        response = client.get(url)
        response.raise_for_status()
        pages.append(response.content)
        links = response.json().get("link", [])
        url = next((link["url"] for link in links if link.get("relation") == "next"), None)
    return pages


@pytest.mark.parametrize("resource_type", catalogue.LISTED_RESOURCES)
def test_mock_pages_flatten_and_validate(mock_api: httpx.Client, resource_type: str) -> None:
    pages = fetch_pages(mock_api, resource_type)
    tables = flatten_tables(resource_type, pages)
    main = tables[resource_type]
    assert main.height > 0
    extra = main.get_column("extra")
    if resource_type == "Referral":
        # The live referralDefinition is a Reference (facts): its display is the
        # column's name, its reference (the ReferralDefinition's address) is kept in extra.
        assert extra.str.json_decode().struct.fields == ["referralDefinition.reference"]
    else:
        assert extra.null_count() == main.height, extra[0]
    for name, df in tables.items():
        validate(df, resource_type, table=None if name == resource_type else name)


@pytest.mark.parametrize("resource_type", catalogue.LISTED_RESOURCES)
def test_one_table_read_alone_equals_that_table_of_flatten_tables(
    mock_api: httpx.Client, resource_type: str
) -> None:
    # flatten(table=...) reads only the fields that table uses (a slimmer schema).
    pages = fetch_pages(mock_api, resource_type, limit=3)
    tables = flatten_tables(resource_type, pages)
    for name, expected in tables.items():
        alone = flatten(resource_type, pages, table=None if name == resource_type else name)
        assert alone.equals(expected), name
