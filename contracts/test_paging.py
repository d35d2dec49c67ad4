"""paging: follow ``next`` links to the end; no loop, no duplicate, total == rows."""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from contracts.session import Exchange, ForeignOrigin
from contracts.suite import Recorder, Run, entries
from toolkit import catalogue as cat

RESOURCES = list(cat.LISTED_RESOURCES)


def next_link(bundle: Any) -> str | None:
    for link in (bundle or {}).get("link") or []:
        if isinstance(link, dict) and link.get("relation") == "next" and link.get("url"):
            return str(link["url"])
    return None


def _page_key(url: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    parts = urlsplit(url)
    return parts.path, tuple(sorted(parse_qsl(parts.query)))


def walk_pages(pm: Run, check: Recorder, resource: str, first: Exchange, count: int) -> None:
    """Follow next links from ``first``; record loops, duplicates and a wrong total."""
    bundle = first.json
    total = bundle.get("total") if isinstance(bundle, dict) else None
    max_pages = math.ceil((total if isinstance(total, int) else 0) / count) + 3
    visited = {_page_key(first.url)}
    ids: dict[str, int] = {}
    rows = 0
    page, ex = 1, first
    while True:
        items = entries(ex.json)
        rows += len(items)
        for item in items:
            rid = item.get("id") if isinstance(item, dict) else None
            if isinstance(rid, str):
                if rid in ids:
                    check.fail(
                        f"{resource} id {rid} on page {page} was already on page {ids[rid]}", ex
                    )
                ids.setdefault(rid, page)
        link = next_link(ex.json)
        if link is None:
            break
        url = pm.session.url(link)
        try:
            pm.session.check_origin(url)
        except ForeignOrigin as exc:
            check.fail(f"{resource}: page {page}'s next link leaves the deployment: {exc}", ex)
            return
        if _page_key(url) in visited:
            check.fail(
                f"{resource}: page {page}'s next link points back to a page already read: {link}",
                ex,
            )
            return
        if page >= max_pages:
            check.fail(f"{resource}: still a next link after {page} pages (total {total})", ex)
            return
        visited.add(_page_key(url))
        page += 1
        ex = pm.session.get(url, operation=f"GET /main/{resource}")
        if ex.status != 200:
            check.fail(f"{resource}: following next to page {page} answered {ex.status}", ex)
            return
    if isinstance(total, int):
        if total != rows:
            check.fail(
                f"{resource}: Bundle.total is {total} but {rows} records came in {page} page(s)",
                ex,
            )
    else:
        check.note(f"{resource}: no Bundle.total")
    check.note(f"{resource}: {rows} records over {page} page(s) of {count}")


@pytest.mark.pm_check("paging.walk", "paging")
@pytest.mark.parametrize("resource", RESOURCES)
def test_next_links_reach_every_record_once(pm: Run, check: Recorder, resource: str) -> None:
    sample = pm.sample()
    first = sample.bundles.get(resource)
    if first is None:
        pytest.skip(f"GET /main/{resource} failed; see schema.fields[{resource}]")
    walk_pages(pm, check, resource, first, cat.MAX_PAGE_SIZE)


@pytest.mark.pm_check("paging.small-pages", "paging")
def test_small_pages_reach_every_record_once(pm: Run, check: Recorder) -> None:
    sample = pm.sample()
    totals = {
        name: ex.json.get("total")
        for name, ex in sample.bundles.items()
        if isinstance(ex.json.get("total"), int)
    }
    if not totals or max(totals.values()) < 2:
        pytest.skip("no resource with two or more records")
    resource = max(totals, key=lambda n: totals[n])
    count = max(1, min(cat.MAX_PAGE_SIZE, math.ceil(min(totals[resource], 300) / 3)))
    first = pm.session.get(
        f"/{resource}", params={"_count": count}, operation=f"GET /main/{resource}"
    )
    if first.status != 200 or not isinstance(first.json, dict):
        check.fail(f"GET /main/{resource}?_count={count} answered {first.status}", first)
        return
    walk_pages(pm, check, resource, first, count)
    _observe_page_sizes(pm, resource, totals[resource])


def _observe_page_sizes(pm: Run, resource: str, total: int) -> None:
    default = pm.session.get(f"/{resource}", operation=f"GET /main/{resource}")
    above = pm.session.get(
        f"/{resource}", params={"_count": cat.MAX_PAGE_SIZE + 1}, operation=f"GET /main/{resource}"
    )
    sample = pm.sample().bundles[resource]
    n_default = len(entries(default.json))
    pm.observations["collection_wrapper"] = {
        "resource": resource,
        "keys": sorted(sample.json) if isinstance(sample.json, dict) else None,
        "default_page_size": n_default if total > n_default else f">= {n_default} (all records)",
        "documented_default_page_size": cat.DEFAULT_PAGE_SIZE,
        "max_page_size": len(entries(sample.json)) if total >= cat.MAX_PAGE_SIZE else None,
        "documented_max_page_size": cat.MAX_PAGE_SIZE,
        f"_count={cat.MAX_PAGE_SIZE + 1}": {
            "status": above.status,
            "records": len(entries(above.json)),
        },
    }
