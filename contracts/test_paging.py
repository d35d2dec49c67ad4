"""paging: follow ``next`` links to the end; no loop, no duplicate, total == rows."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from contracts.session import Exchange, ForeignOrigin
from contracts.suite import Recorder, Run, entries
from toolkit import catalogue as cat
from toolkit import page

RESOURCES = list(cat.LISTED_RESOURCES)

# The same reading of a Bundle's next link as the client's walk (toolkit.page).
next_link = page.next_link


def _page_key(url: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    parts = urlsplit(url)
    return parts.path, tuple(sorted(parse_qsl(parts.query)))


@dataclass
class _Walk:
    """What a walk of one list has seen so far."""

    resource: str
    raw_total: Any
    """``Bundle.total`` of the first page as sent (a count, or anything else)."""
    max_pages: int
    visited: set[tuple[str, tuple[tuple[str, str], ...]]]
    ids: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    page: int = 1
    stopped: bool = False
    """A finding ended the walk early (a foreign, looping or endless next link)."""

    @property
    def total(self) -> int | None:
        return self.raw_total if isinstance(self.raw_total, int) else None


def walk_pages(pm: Run, check: Recorder, resource: str, first: Exchange, count: int) -> None:
    """Follow next links from ``first``; record loops, duplicates and a wrong total."""
    bundle = first.json
    total = bundle.get("total") if isinstance(bundle, dict) else None
    walk = _Walk(
        resource,
        total,
        max_pages=math.ceil((total if isinstance(total, int) else 0) / count) + 3,
        visited={_page_key(first.url)},
    )
    ex = first
    while True:
        _count_records(check, walk, ex)
        url = _next_url(pm, check, walk, ex)
        if walk.stopped:
            return
        if url is None:
            break
        walk.page += 1
        ex = pm.session.get(url, operation=f"GET /main/{resource}")
        if ex.status != 200:
            check.fail(f"{resource}: following next to page {walk.page} answered {ex.status}", ex)
            return
    _judge_total(check, walk, ex, count)


def _count_records(check: Recorder, walk: _Walk, ex: Exchange) -> None:
    """Count the page's records; a record id already seen on an earlier page is a finding."""
    items = entries(ex.json)
    walk.rows += len(items)
    for item in items:
        rid = item.get("id") if isinstance(item, dict) else None
        if isinstance(rid, str):
            if rid in walk.ids:
                check.fail(
                    f"{walk.resource} id {rid} on page {walk.page} was already on page "
                    f"{walk.ids[rid]}",
                    ex,
                )
            walk.ids.setdefault(rid, walk.page)


def _next_url(pm: Run, check: Recorder, walk: _Walk, ex: Exchange) -> str | None:
    """The page's next link, resolved and checked; None at the end or after a finding.

    A link off the deployment's origin, back to a page already read, or past the pages
    that ``total`` allows is a finding that ends the walk (``walk.stopped``).
    """
    link = next_link(ex.json)
    if link is None:
        return None
    url = pm.session.url(link)
    problem = None
    try:
        pm.session.check_origin(url)
    except ForeignOrigin as exc:
        problem = f"page {walk.page}'s next link leaves the deployment: {exc}"
    else:
        if _page_key(url) in walk.visited:
            problem = f"page {walk.page}'s next link points back to a page already read: {link}"
        elif walk.page >= walk.max_pages:
            problem = f"still a next link after {walk.page} pages (total {walk.raw_total})"
    if problem is not None:
        check.fail(f"{walk.resource}: {problem}", ex)
        walk.stopped = True
        return None
    walk.visited.add(_page_key(url))
    return url


def _judge_total(check: Recorder, walk: _Walk, last: Exchange, count: int) -> None:
    """``Bundle.total`` must equal the records the walk counted."""
    if walk.total is not None:
        if walk.total != walk.rows:
            check.fail(
                f"{walk.resource}: Bundle.total is {walk.total} but {walk.rows} records came "
                f"in {walk.page} page(s)",
                last,
            )
    else:
        check.note(f"{walk.resource}: no Bundle.total")
    check.note(f"{walk.resource}: {walk.rows} records over {walk.page} page(s) of {count}")


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
