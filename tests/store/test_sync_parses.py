"""The sync path parses each page into Python objects once: the walk's parse is reused."""

from __future__ import annotations

import collections
import json
from typing import Any

import orjson
import pytest

from toolkit.store import sync

BUNDLE = b'{"resourceType":"Bundle"'


def _counting(parse: Any, seen: collections.Counter[bytes]) -> Any:
    def counted(data: Any, *args: Any, **kwargs: Any) -> Any:
        raw = data.encode() if isinstance(data, str) else bytes(data)
        if raw.lstrip().startswith(BUNDLE):
            seen[raw] += 1
        return parse(data, *args, **kwargs)

    return counted


@pytest.mark.parametrize("resource_type", ["Appointment", "Referral"])
def test_each_page_of_a_sync_is_parsed_once(
    dep: Any, new_client: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, resource_type: str
) -> None:
    parsed: collections.Counter[bytes] = collections.Counter()
    monkeypatch.setattr(orjson, "loads", _counting(orjson.loads, parsed))
    monkeypatch.setattr(json, "loads", _counting(json.loads, parsed))
    with new_client(dep) as client:
        summary = sync(client, tmp_path / "store", resources=[resource_type], progress=False)
    pages = summary[resource_type].pages
    assert pages >= 2  # a walk of several pages, so that a second parse would show
    assert sum(parsed.values()) == pages, "a page body was parsed more (or less) than once"
    assert set(parsed.values()) == {1}
