"""A list walk's recovery, pinned so that a dropped guard or a shifted bound fails.

What a reviewer asks of paging recovery: a page that fails mid-walk and is
resumed, a next link that repeats or loops (written differently), a
``Bundle.total`` that lies, a page cut short, the recovery's ``_lastUpdated``
and ``_count`` queries, and the summary and dedupe a consumer reads after it.
The expectations come from FHIR R4's paging rules (``next`` links, ``total``,
``search.mode``), the facts (``_count`` and a 1-based ``page``; ``_count=1`` to
read a ``total``) and plain arithmetic, not from pmtk's own writer. The pages
and the server are ``test_paging.py``'s; ``tools/mutation.py paging`` runs both
files against every mutant of ``toolkit/paging.py`` and ``toolkit/page.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest

from tests.client.test_paging import BASE, BEFORE, Server, at, bundle, patient, records, walk
from toolkit.errors import (
    ApiError,
    IgnoredFilter,
    IgnoredFilterWarning,
    IncompleteResult,
    MalformedPage,
    PageLimitExceeded,
    PagingLoop,
)
from toolkit.page import Page, ignored_filters, micros, read_instant, record_stamp
from toolkit.paging import CLOCK_MARGIN, PAGE_MARGIN, FetchSummary, local_now

T0 = "2026-11-26T03:00:00Z"  # the Date header of every page of the Server
CHANGED = "2026-11-26T03:00:05Z"  # a lastUpdated after t0: changed during the walk


def entries(*records: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"resource": r, "search": {"mode": "match"}} for r in records]


def moved_b(total: int) -> dict[str, dict[str, Any]]:
    """A walk of a, b whose b changed after t0 and moved to page 2 (so it is read twice)."""
    return {
        BASE: bundle(["a", "b"], total=total, next_url=f"{BASE}?page=2"),
        f"{BASE}?page=2": bundle([], total=total, entries=entries(patient("b", CHANGED))),
        at(_lastUpdated=f"ge{T0}"): bundle([], total=1, entries=entries(patient("b", CHANGED))),
    }


# ---------------------------------------------------------------- a page that fails mid-walk


class Failing(Server):
    """A server whose GET of ``broken`` fails as a dropped connection would."""

    def __init__(self, pages: dict[str, dict[str, Any]], broken: str) -> None:
        super().__init__(pages)
        self.broken = broken

    def fetch(self, url: str, query: list[tuple[str, str]] | None) -> tuple[httpx.Response, Any]:
        if url == self.broken:
            self.gets.append((url, query))
            raise httpx.ReadError("connection reset")
        return super().fetch(url, query)


def test_a_page_that_fails_mid_walk_stops_it_incomplete_and_a_resumed_walk_finishes():
    pages = {
        BASE: bundle(["a", "b"], total=4, next_url=f"{BASE}?page=2"),
        f"{BASE}?page=2": bundle(["c", "d"], total=4),
    }
    first = walk(Failing(pages, f"{BASE}?page=2"))
    seen: list[str] = []
    with pytest.raises(httpx.ReadError):
        for page in first:
            seen += [r["id"] for r in page.records]
    assert seen == ["a", "b"]
    assert (first.summary.pages, first.summary.records) == (1, 2)
    assert not first.summary.complete
    # The retry resumes at the page that failed, counting the records read before it.
    server = Server(pages)
    again = walk(server, skipped=2)
    again.url = f"{BASE}?page=2"
    assert records(again) == ["c", "d"]
    assert again.summary.complete
    assert again.summary.records == 2
    assert [url for url, _ in server.gets] == [f"{BASE}?page=2"]


def test_a_resumed_walk_one_record_short_is_incomplete_with_its_counts():
    server = Server({BASE: bundle(["c", "d"], total=4)})
    with pytest.raises(IncompleteResult) as err:
        records(walk(server, skipped=1))
    assert (err.value.expected, err.value.received) == (4, 3)
    assert "announced 4 records (Bundle.total) but the walk returned 3 in 1 pages" in str(err.value)
    assert "after the 1 records before its first page" in str(err.value)


def test_a_resumed_walk_that_reaches_total_is_whole_without_recovery():
    # It never saw the pages before its own, so it cannot recover: a repeat is not chased.
    server = Server(
        {
            BASE: bundle(["c", "d"], total=4, next_url=f"{BASE}?page=2"),
            f"{BASE}?page=2": bundle([], total=4, entries=entries(patient("d", CHANGED))),
        }
    )
    w = walk(server, skipped=2)
    assert records(w) == ["c", "d", "d"]
    assert w.summary.complete
    assert not w.summary.recovered
    assert len(server.gets) == 2


def test_a_resumed_walk_without_total_is_whole():
    w = walk(Server({BASE: bundle(["c"])}), skipped=5)
    assert records(w) == ["c"]
    assert w.summary.complete
    assert w.summary.total is None


# ---------------------------------------------------------------- next links that loop


@pytest.mark.parametrize(
    "link",
    [
        "https://API.EXAMPLE.TEST/main/Patient?page=1",  # the host in another case
        f"{BASE}?page=1",  # page 1 written out
        f"{BASE}?page=2#more",  # itself, with a fragment
        "?page=2",  # itself, relative
    ],
)
def test_a_next_link_written_differently_that_points_back_is_a_loop(link):
    server = Server(
        {
            BASE: bundle(["a"], total=5, next_url=f"{BASE}?page=2"),
            f"{BASE}?page=2": bundle(["b"], total=5, next_url=link),
        }
    )
    with pytest.raises(PagingLoop, match="the next link of page 2 points back") as err:
        records(walk(server))
    assert (err.value.expected, err.value.received) == (5, 2)
    assert len(server.gets) == 2


def test_a_next_link_with_its_parameters_reordered_is_the_same_page():
    first = f"{BASE}?_count=1&name=x"
    server = Server(
        {
            first: bundle(["a"], total=3, next_url=f"{BASE}?name=x&_count=1&page=2"),
            f"{BASE}?name=x&_count=1&page=2": bundle(
                ["b"], total=3, next_url=f"{BASE}?page=1&name=x&_count=1"
            ),
        }
    )
    with pytest.raises(PagingLoop, match="points back"):
        records(walk(server, [("_count", "1"), ("name", "x")]))


def test_a_next_link_with_another_value_is_another_page():
    server = Server(
        {
            BASE: bundle(["a"], total=3, next_url=f"{BASE}?page=2&name="),
            f"{BASE}?page=2&name=": bundle(["b"], total=3, next_url=f"{BASE}?page=3"),
            f"{BASE}?page=3": bundle(["c"], total=3),
        }
    )
    w = walk(server)
    assert records(w) == ["a", "b", "c"]
    assert w.summary.complete


def test_a_page_of_repeats_ends_the_walk_even_with_a_fresh_next_link():
    server = Server(
        {
            BASE: bundle(["a", "b"], next_url=f"{BASE}?page=2"),
            f"{BASE}?page=2": bundle(["b", "a"], next_url=f"{BASE}?page=3"),
        }
    )
    with pytest.raises(PagingLoop, match=r"page 2 \(.*page=2\) repeats records") as err:
        records(walk(server))
    assert (err.value.expected, err.value.received) == (None, 2)


def test_a_page_with_one_new_record_among_repeats_is_not_a_loop():
    server = Server(
        {
            BASE: bundle(["a", "b"], total=3, next_url=f"{BASE}?page=2"),
            f"{BASE}?page=2": bundle(["b", "c"], total=3),
            # b read twice in the same version: recovery checks the unchanged count.
            at(_lastUpdated=f"ge{T0}"): bundle([], total=0),
            at(_lastUpdated=f"lt{T0}", _count="1"): bundle(["a"], total=3),
        }
    )
    w = walk(server)
    assert [p.phase for p in w] == ["walk", "walk", "changed"]
    assert w.summary.complete
    assert w.summary.recovered
    assert w.summary.records == 3


def test_an_empty_first_page_with_a_next_link_stops_the_walk():
    server = Server({BASE: bundle([], next_url=f"{BASE}?page=2")})
    with pytest.raises(IncompleteResult, match="page 1 is empty but links") as err:
        records(walk(server))
    assert (err.value.expected, err.value.received) == (None, 0)


# ---------------------------------------------------------------- a total that lies


def test_the_first_pages_total_is_the_walks_even_if_later_pages_say_otherwise():
    server = Server(
        {
            BASE: bundle(["a", "b"], total=3, next_url=f"{BASE}?page=2"),
            f"{BASE}?page=2": bundle(["c"], total=2),
        }
    )
    w = walk(server)
    assert records(w) == ["a", "b", "c"]
    assert w.summary.total == 3
    assert w.summary.complete


def test_a_total_above_the_records_is_checked_against_the_unchanged_count():
    # Nothing changed, but the walk read 2 of an announced 3: recovery asks how many
    # records are unchanged since t0; the server's own count (2) makes the walk whole.
    pages = {
        BASE: bundle(["a"], total=3, next_url=f"{BASE}?page=2"),
        f"{BASE}?page=2": bundle(["b"], total=3),
        at(_lastUpdated=f"ge{T0}"): bundle([], total=0),
        at(_lastUpdated=f"lt{T0}", _count="1"): bundle(["a"], total=2),
    }
    w = walk(Server(pages))
    assert [p.phase for p in w] == ["walk", "walk", "changed"]
    assert w.summary.complete
    assert w.summary.records == 2
    assert w.summary.total == 3  # as announced
    # When the count repeats the lie, two rounds cannot find the third record.
    pages[at(_lastUpdated=f"lt{T0}", _count="1")] = bundle(["a"], total=3)
    pages[at(_lastUpdated=f"lt{T0}")] = bundle(["a", "b"], total=3)
    with pytest.raises(IncompleteResult, match="still lacks 1 unchanged") as err:
        records(walk(Server(pages)))
    assert (err.value.expected, err.value.received) == (3, 2)
    # And without recovery it is short, the counts named.
    with pytest.raises(IncompleteResult, match=r"announced 3 .* returned 2 in 2 pages") as err:
        records(walk(Server(pages), recover=False))
    assert (err.value.expected, err.value.received) == (3, 2)


def test_records_created_during_the_walk_may_exceed_total():
    # n's lastUpdated is t0 itself: created during the walk, so not a contradiction;
    # the count other than total sends the walk to recovery, which finds it whole.
    server = Server(
        {
            BASE: bundle([], total=1, entries=entries(patient("a"), patient("n", T0))),
            at(_lastUpdated=f"ge{T0}"): bundle([], total=1, entries=entries(patient("n", T0))),
            at(_lastUpdated=f"lt{T0}", _count="1"): bundle(["a"], total=1),
        }
    )
    w = walk(server)
    assert records(w) == ["a", "n", "n"]
    assert w.summary.records == 2
    assert w.summary.complete


def test_a_record_without_lastupdated_is_not_explained_by_the_walks_time():
    record = {"resourceType": "Patient", "id": "x"}
    server = Server({BASE: bundle([], total=1, entries=entries(patient("a"), record))})
    with pytest.raises(MalformedPage, match="2 records read but the server announced 1"):
        records(walk(server))


def test_a_record_read_twice_in_one_pass_is_counted_once_against_total():
    # a moves during the walk (newer version on page 2): counted once, and the page
    # holding only its new version is not a loop.
    server = Server(
        {
            BASE: bundle(["a", "b"], total=2, next_url=f"{BASE}?page=2"),
            f"{BASE}?page=2": bundle([], total=2, entries=entries(patient("a", CHANGED))),
            at(_lastUpdated=f"ge{T0}"): bundle([], total=1, entries=entries(patient("a", CHANGED))),
            at(_lastUpdated=f"lt{T0}", _count="1"): bundle(["b"], total=1),
        }
    )
    w = walk(server)
    pages = list(w)
    assert [p.phase for p in pages] == ["walk", "walk", "changed"]
    assert w.summary.complete
    assert w.summary.records == 2


def test_a_changed_pass_that_returns_unchanged_records_beyond_its_total_is_malformed():
    pages = moved_b(3)
    pages[at(_lastUpdated=f"ge{T0}")] = bundle(["a"], total=0)
    with pytest.raises(MalformedPage, match="1 records read but the server announced 0"):
        records(walk(Server(pages)))


# ---------------------------------------------------------------- a page cut short


def test_pages_cut_short_are_followed_up_to_total_over_the_first_pages_size():
    # total 5 at 2 a page: ceil(5 / 2) = 3 pages, + PAGE_MARGIN; the server then
    # sends one record a page, each new (created after t0, so no count is refused).
    first = entries(patient("r1", CHANGED), patient("r2", CHANGED))
    pages = {BASE: bundle([], total=5, next_url=f"{BASE}?page=2", entries=first)}
    for n in range(2, 12):
        pages[f"{BASE}?page={n}"] = bundle(
            [], total=5, next_url=f"{BASE}?page={n + 1}", entries=entries(patient(f"s{n}", CHANGED))
        )
    server = Server(pages)
    with pytest.raises(PageLimitExceeded, match=r"Bundle\.total 5 at 2 a page allows 5") as err:
        records(walk(server, recover=False))
    assert err.value.limit == 3 + PAGE_MARGIN
    assert len(server.gets) == 3 + PAGE_MARGIN
    assert err.value.url == f"{BASE}?page={3 + PAGE_MARGIN + 1}"
    assert f"go on past {3 + PAGE_MARGIN} pages" in str(err.value)
    assert "Pass max_pages= to allow more" in str(err.value)


def test_a_short_last_page_ends_a_whole_walk():
    server = Server(
        {
            BASE: bundle(["a", "b"], total=3, next_url=f"{BASE}?page=2"),
            f"{BASE}?page=2": bundle(["c"], total=3),
        }
    )
    w = walk(server, max_pages=2)
    assert records(w) == ["a", "b", "c"]
    assert w.summary.complete


def test_a_total_of_zero_does_not_bound_the_pages_by_itself():
    # A first page of none has no size: the bound is max_pages, not a division by zero.
    server = Server({BASE: bundle([], total=0)})
    assert records(walk(server, max_pages=1)) == []


def test_max_pages_below_the_bound_from_total_is_named_as_max_pages():
    pages = {BASE: bundle(["a"], total=9, next_url=f"{BASE}?page=2")}
    for n in range(2, 5):
        pages[f"{BASE}?page={n}"] = bundle([f"r{n}"], total=9, next_url=f"{BASE}?page={n + 1}")
    with pytest.raises(PageLimitExceeded, match=r"go on past 2 pages; max_pages=2\.") as err:
        records(walk(Server(pages), max_pages=2))
    assert err.value.limit == 2


# ---------------------------------------------------------------- the recovery's queries


def test_the_recovery_queries_keep_the_filters_and_replace_page_and_count():
    query = [("name", "x"), ("_count", "2"), ("page", "1")]
    first = str(httpx.URL(BASE, params=query))
    changed = str(
        httpx.URL(BASE, params=[("name", "x"), ("_count", "2"), ("_lastUpdated", f"ge{T0}")])
    )
    count = str(
        httpx.URL(BASE, params=[("name", "x"), ("_lastUpdated", f"lt{T0}"), ("_count", "1")])
    )
    server = Server(
        {
            first: bundle(["a", "b"], total=3, next_url=f"{BASE}?name=x&_count=2&page=2"),
            f"{BASE}?name=x&_count=2&page=2": bundle(
                [], total=3, entries=entries(patient("b", CHANGED), patient("c"))
            ),
            changed: bundle([], total=1, entries=entries(patient("b", CHANGED))),
            count: bundle(["a"], total=2),
        }
    )
    w = walk(server, query)
    assert [p.phase for p in w] == ["walk", "walk", "changed"]
    assert [url for url, _ in server.gets[2:]] == [BASE, BASE]
    assert [q for _, q in server.gets[2:]] == [
        [("name", "x"), ("_count", "2"), ("_lastUpdated", f"ge{T0}")],
        [("name", "x"), ("_lastUpdated", f"lt{T0}"), ("_count", "1")],
    ]
    assert w.summary.complete
    assert w.summary.records == 3


def test_a_count_equal_to_the_unchanged_records_held_ends_the_recovery():
    pages = moved_b(2)
    pages[at(_lastUpdated=f"lt{T0}", _count="1")] = bundle(["a"], total=1)
    w = walk(Server(pages))
    assert [p.phase for p in w] == ["walk", "walk", "changed"]
    assert w.summary.complete
    assert w.summary.records == 2


def test_a_count_without_total_walks_the_unchanged_records_and_asks_once_more():
    pages = moved_b(3)
    pages[at(_lastUpdated=f"lt{T0}", _count="1")] = bundle(["a"])  # no total
    pages[at(_lastUpdated=f"lt{T0}")] = bundle(["a", "c"], total=2)
    server = Server(pages)
    w = walk(server)
    assert [p.phase for p in w] == ["walk", "walk", "changed", "unchanged", "changed"]
    assert w.summary.complete
    assert w.summary.records == 3
    assert w.summary.pages == 5
    count = at(_lastUpdated=f"lt{T0}", _count="1")
    fetched = [str(httpx.URL(u, params=q)) if q else u for u, q in server.gets]
    assert fetched.count(count) == 2


def test_a_recovery_without_server_time_bounds_its_queries_by_the_local_clock():
    # No Date header and no meta: t0 is the local clock less CLOCK_MARGIN, floored to the second.
    local = datetime(2026, 11, 26, 3, 2, 30, 900000, tzinfo=UTC)
    t0 = (local - CLOCK_MARGIN).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert t0 == "2026-11-26T03:00:30Z"
    changed = "2026-11-26T03:01:00Z"
    server = Server(
        {
            BASE: bundle(["a", "b"], total=2, next_url=f"{BASE}?page=2"),
            f"{BASE}?page=2": bundle([], total=2, entries=entries(patient("b", changed))),
            at(_lastUpdated=f"ge{t0}"): bundle([], total=1, entries=entries(patient("b", changed))),
            at(_lastUpdated=f"lt{t0}", _count="1"): bundle(["a"], total=1),
        },
        date=False,
    )
    w = walk(server, now=lambda: local)
    assert [p.phase for p in w] == ["walk", "walk", "changed"]
    assert w.summary.started_at == t0
    assert w.started_at == local - CLOCK_MARGIN
    assert w.summary.complete


def test_the_walks_time_is_floored_to_the_second_for_last_updated():
    data = bundle(["a"], total=1)
    data["meta"] = {"lastUpdated": "2026-11-26T04:00:00.999+01:00"}
    w = walk(Server({BASE: data}, date=False))
    assert records(w) == ["a"]
    assert w.summary.started_at == "2026-11-26T03:00:00Z"
    assert w.started_at == datetime(2026, 11, 26, 3, 0, 0, 999000, tzinfo=UTC)


def test_a_second_round_that_finds_them_all_is_complete():
    # Round 1's unchanged walk misses c (it moved again); round 2 counts it held.
    pages = moved_b(3)
    count = at(_lastUpdated=f"lt{T0}", _count="1")
    pages[count] = bundle(["a"], total=2)
    pages[at(_lastUpdated=f"lt{T0}")] = bundle(["a", "c"], total=2)
    w = walk(Server(pages))
    assert [p.phase for p in w] == ["walk", "walk", "changed", "unchanged", "changed"]
    assert w.summary.complete
    assert w.summary.records == 3


def test_an_incomplete_recovery_names_its_bound_and_counts():
    pages = moved_b(4)
    pages[at(_lastUpdated=f"lt{T0}", _count="1")] = bundle(["a"], total=3)
    pages[at(_lastUpdated=f"lt{T0}")] = bundle(["a", "c"], total=3)
    with pytest.raises(IncompleteResult) as err:
        records(walk(Server(pages)))
    assert str(err.value) == (
        f"Patient: records changed during the walk and recovery (_lastUpdated=ge/lt{T0}) "
        "still lacks 1 unchanged record(s)"
    )
    assert (err.value.expected, err.value.received) == (4, 3)


def test_a_walk_without_recovery_names_its_counts():
    with pytest.raises(IncompleteResult) as err:
        records(walk(Server(moved_b(3)), recover=False))
    assert str(err.value) == (
        "Patient: the server announced 3 records (Bundle.total) but the walk returned 2 "
        "in 2 pages and the collection changed during the walk (ids repeated)"
    )
    assert (err.value.expected, err.value.received) == (3, 2)


def test_a_version_older_than_the_one_held_does_not_replace_it():
    # The walk read b's newest version (page 2); the changed pass returns an older copy
    # (a lagging replica): b keeps its newest stamp, so it is not counted among the
    # records unchanged since t0, and the walk still looks for the missing c.
    stale = "2026-11-26T03:00:02Z"
    pages = moved_b(3)
    pages[at(_lastUpdated=f"ge{T0}")] = bundle([], total=1, entries=entries(patient("b", stale)))
    pages[at(_lastUpdated=f"lt{T0}", _count="1")] = bundle(["a"], total=2)
    pages[at(_lastUpdated=f"lt{T0}")] = bundle(["a", "c"], total=2)
    w = walk(Server(pages))
    pages_ = list(w)
    assert [p.phase for p in pages_] == ["walk", "walk", "changed", "unchanged", "changed"]
    raw = w.clean([p.raw for p in pages_])
    kept = [
        (e["resource"]["id"], e["resource"]["meta"]["lastUpdated"])
        for body in raw
        for e in orjson.loads(body)["entry"]
    ]
    assert sorted(kept) == [("a", BEFORE), ("b", CHANGED), ("c", BEFORE)]


# ---------------------------------------------------------------- dedupe after recovery


def test_clean_keeps_the_newest_version_and_included_entries_in_place():
    include = {
        "resource": {"resourceType": "Organization", "id": "o"},
        "search": {"mode": "include"},
    }
    url = f"{BASE}?_include=Patient%3Aorganization"
    first = bundle(
        [], total=2, next_url=f"{BASE}?page=2", entries=[*entries(patient("a")), include]
    )
    first["entry"].insert(1, {"resource": patient("b"), "search": {"mode": "match"}})
    server = Server(
        {
            url: first,
            f"{BASE}?page=2": bundle(
                [], total=2, entries=[include, *entries(patient("b", CHANGED))]
            ),
            at(_include="Patient:organization", _lastUpdated=f"ge{T0}"): bundle(
                [], total=1, entries=entries(patient("b", CHANGED))
            ),
            # the count's page holds its included Organization too: not a record
            at(_include="Patient:organization", _lastUpdated=f"lt{T0}", _count="1"): bundle(
                [], total=1, entries=[*entries(patient("a")), include]
            ),
        }
    )
    w = walk(server, [("_include", "Patient:organization")])
    pages = list(w)
    assert w.winners() == {0: {0}, 2: {0}}
    raw = w.clean([p.raw for p in pages])
    ids = [[e["resource"]["id"] for e in orjson.loads(body)["entry"]] for body in raw]
    assert ids == [["a", "o"], ["o"], ["b"]]  # ties: the later page wins
    assert raw[1] != pages[1].raw  # its superseded b removed


def test_clean_returns_pages_untouched_when_nothing_repeated():
    server = Server({BASE: bundle(["a", "b"], total=2)})
    w = walk(server)
    pages = [p.raw for p in w]
    out = w.clean(pages)
    assert out == pages
    assert out[0] is pages[0]


def test_clean_of_find_proposals_keeps_every_repeat():
    server = Server({BASE: bundle(["s1", "s1"], total=2)})
    w = walk(server, track_ids=False)
    pages = [p.raw for p in w]
    assert w.clean(pages) == pages


# ---------------------------------------------------------------- reading a page


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-26T03:00:00Z", datetime(2026, 11, 26, 3, tzinfo=UTC)),
        ("2026-11-26T04:00:00.5+01:00", datetime(2026, 11, 26, 3, 0, 0, 500000, tzinfo=UTC)),
        ("2026-11-26T03:00:00", datetime(2026, 11, 26, 3, tzinfo=UTC)),  # no zone: UTC
        ("2026-11-26", datetime(2026, 11, 26, tzinfo=UTC)),  # ten characters: read
        ("2026-11-2", None),  # nine: not an instant
        ("2026-13-26T03:00:00Z", None),
        (20261126, None),
        (None, None),
    ],
)
def test_read_instant(value, expected):
    assert read_instant(value) == expected


def test_record_stamp_and_micros():
    assert record_stamp({"meta": {"lastUpdated": "1970-01-01T00:00:00.000001Z"}}) == datetime(
        1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC
    )
    assert record_stamp({"meta": "2026-11-26T03:00:00Z"}) is None
    assert record_stamp({}) is None
    assert micros(None) is None
    assert micros(datetime(1970, 1, 1, tzinfo=UTC)) == 0
    assert micros(datetime(1970, 1, 1, 0, 0, 1, 2, tzinfo=UTC)) == 1_000_002
    assert micros(datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)) == -1


def parse(data: Any, headers: dict[str, str] | None = None, status: int = 200) -> Page:
    response = httpx.Response(
        status, json=data, headers=headers or {}, request=httpx.Request("GET", BASE)
    )
    return Page.parse(response, data, "Patient", include=False)


def test_an_unreadable_date_header_falls_back_to_the_bundle_meta():
    data = bundle(["a"])
    data["meta"] = {"lastUpdated": "2026-11-26T03:00:00Z"}
    assert parse(data, {"date": "not a date"}).server_time == datetime(2026, 11, 26, 3, tzinfo=UTC)
    assert parse(bundle(["a"]), {"date": "not a date"}).server_time is None
    noon = parse(bundle(["a"]), {"date": "Thu, 26 Nov 2026 12:00:00 +0100"}).server_time
    assert noon == datetime(2026, 11, 26, 11, tzinfo=UTC)
    assert noon.tzinfo is UTC


@pytest.mark.parametrize(
    ("data", "kind"), [(["a"], "list"), ({"resourceType": "Patient"}, "Patient"), ("x", "str")]
)
def test_an_answer_that_is_not_a_bundle_names_what_it_is(data, kind):
    with pytest.raises(ApiError) as err:
        parse(data, status=200)
    assert err.value.diagnostics == f"expected a Bundle, got {kind}"
    assert err.value.code is None
    assert err.value.status == 200
    assert err.value.url == BASE
    assert err.value.outcome == (data if isinstance(data, dict) else None)


def test_an_outcome_answer_without_diagnostics_keeps_the_default_text():
    outcome = {"resourceType": "OperationOutcome", "issue": [{"severity": "error", "code": "x"}]}
    with pytest.raises(ApiError) as err:
        parse(outcome)
    assert err.value.diagnostics == "expected a Bundle, got OperationOutcome"
    assert err.value.outcome == outcome


def test_main_raw_is_the_body_itself_without_included_entries():
    page = parse(bundle(["a"]))
    assert page.main_raw() is page.raw


def test_ignored_filters_resolves_a_relative_self_link_and_trailing_slash():
    sent = f"{BASE}?name=x&gender=female&_sort=name&empty=, "
    relative = {"link": [{"relation": "self", "url": "Patient/?name=y"}]}
    # "Patient/" relative to .../main/Patient resolves to .../main/Patient/: the same path.
    assert ignored_filters(sent, relative) == ["gender"]
    assert ignored_filters(sent, {"link": [{"relation": "self", "url": "?gender=f&name=x"}]}) == []


# ---------------------------------------------------------------- the summary


def test_the_summary_line_of_a_complete_walk():
    summary = FetchSummary(
        "Patient",
        pages=2,
        records=3,
        total=3,
        requests=4,
        retries=1,
        rate_limited=2,
        waited_seconds=1.26,
        elapsed_seconds=2.04,
        complete=True,
    )
    assert str(summary) == (
        "Patient: 3/3 records in 2 pages, 4 requests, 1 retries, 2 x 429, "
        "1.3 s waiting, 2.0 s elapsed (complete)"
    )


def test_the_summary_line_of_a_recovered_walk_that_ignored_filters():
    summary = FetchSummary(
        "Observation", records=5, recovered=True, ignored_filters=["code", "date"]
    )
    assert str(summary) == (
        "Observation: 5/? records in 0 pages, 0 requests, 0 retries, 0 x 429, 0.0 s waiting, "
        "0.0 s elapsed (incomplete, recovered from changes during the walk, the server "
        "ignored code, date)"
    )


def test_the_local_clock_is_utc_now():
    before = time.time()
    now = local_now()
    after = time.time()
    assert now.tzinfo is UTC
    assert before - 1e-3 <= now.timestamp() <= after + 1e-3
    assert abs(now - datetime.now(UTC)) < timedelta(seconds=5)


# ---------------------------------------------------------------- clocks and arguments


@pytest.fixture
def new_york(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The local zone five hours behind UTC: a bound written in local time would show."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("new_york")
def test_the_walks_time_is_written_in_utc_whatever_the_local_zone():
    w = walk(Server({BASE: bundle(["a"], total=1)}))
    assert records(w) == ["a"]
    assert w.summary.started_at == T0
    page = parse(bundle(["a"]), {"date": "Thu, 26 Nov 2026 12:00:00 +0100"})
    assert page.server_time is not None
    assert page.server_time.tzinfo is UTC


def test_without_any_clock_given_the_walk_starts_two_minutes_before_now():
    before = datetime.now(UTC)
    w = walk(Server({BASE: bundle(["a"], total=1)}, date=False))
    assert records(w) == ["a"]
    after = datetime.now(UTC)
    assert w.started_at is not None
    assert before - CLOCK_MARGIN <= w.started_at <= after - CLOCK_MARGIN


def test_a_walk_whose_first_page_fails_has_no_start():
    w = walk(Failing({}, BASE))
    assert w.started_at is None
    with pytest.raises(httpx.ReadError):
        records(w)
    assert w.started_at is None
    assert w.summary.started_at is None
    assert w.summary.pages == 0


def test_one_page_is_a_valid_bound():
    assert records(walk(Server({BASE: bundle(["a"])}), max_pages=1)) == ["a"]


def test_revinclude_entries_are_kept_apart_too():
    url = f"{BASE}?_revinclude=Observation%3Asubject"
    entries_ = [
        {"resource": patient("a"), "search": {"mode": "match"}},
        {"resource": {"resourceType": "Observation", "id": "o1"}},  # unmarked, another type
    ]
    w = walk(
        Server({url: bundle([], total=1, entries=entries_)}),
        [("_revinclude", "Observation:subject")],
    )
    pages = list(w)
    assert [r["id"] for r in pages[0].records] == ["a"]
    assert [r["id"] for r in pages[0].included] == ["o1"]
    assert w.summary.complete


def test_a_blank_parameter_is_part_of_a_pages_address():
    # The loop check compares next links as the server wrote them, blanks included.
    server = Server(
        {
            BASE: bundle(["a"], total=3, next_url=f"{BASE}?page=2&name="),
            f"{BASE}?page=2&name=": bundle(["b"], total=3, next_url=f"{BASE}?page=2"),
            f"{BASE}?page=2": bundle(["c"], total=3),
        }
    )
    assert records(walk(server)) == ["a", "b", "c"]


def test_an_answer_that_is_not_a_bundle_is_named_as_a_get():
    with pytest.raises(ApiError) as err:
        parse(["a"])
    assert err.value.method == "GET"


# ---------------------------------------------------------------- versions read twice


def test_a_record_without_an_id_names_the_page_and_position():
    record = {"resourceType": "Patient", "meta": {"lastUpdated": BEFORE}}
    server = Server({BASE: bundle([], entries=entries(patient("a"), record))})
    with pytest.raises(MalformedPage) as err:
        records(walk(server))
    assert str(err.value) == (
        f"Patient: {BASE}: record 1 has no id, so the walk cannot tell repeats from new records"
    )
    assert err.value.url == BASE


def test_a_page_with_one_new_and_one_moved_record_is_not_a_loop():
    server = Server(
        {
            BASE: bundle(["a", "b"], total=3, next_url=f"{BASE}?page=2"),
            f"{BASE}?page=2": bundle(
                [], total=3, entries=entries(patient("b", CHANGED), patient("c"))
            ),
            at(_lastUpdated=f"ge{T0}"): bundle([], total=1, entries=entries(patient("b", CHANGED))),
            at(_lastUpdated=f"lt{T0}", _count="1"): bundle(["a"], total=2),
        }
    )
    w = walk(server)
    assert [p.phase for p in w] == ["walk", "walk", "changed"]
    assert w.summary.complete
    assert w.summary.records == 3


@pytest.mark.parametrize(
    ("first", "again"),
    [
        ({"resourceType": "Patient", "id": "a"}, patient("a", CHANGED)),
        (patient("a", CHANGED), {"resourceType": "Patient", "id": "a"}),
    ],
)
def test_a_version_without_lastupdated_cannot_be_told_from_the_one_read(first, again):
    # Without a stamp on either copy the walk cannot call it a newer version: a page of
    # only that record is a page of repeats.
    server = Server(
        {
            BASE: bundle([], next_url=f"{BASE}?page=2", entries=entries(first)),
            f"{BASE}?page=2": bundle([], next_url=f"{BASE}?page=3", entries=entries(again)),
        }
    )
    with pytest.raises(PagingLoop, match=r"page 2 .* repeats records already read"):
        records(walk(server))


def test_find_proposals_short_of_their_total_are_incomplete():
    server = Server({BASE: bundle(["s1", "s1"], total=3)})
    with pytest.raises(IncompleteResult) as err:
        records(walk(server, track_ids=False))
    assert str(err.value) == (
        "Patient: the server announced 3 records (Bundle.total) but the walk returned 2 in 1 pages"
    )
    assert (err.value.expected, err.value.received) == (3, 2)


# ---------------------------------------------------------------- filters the server ignored


def test_an_ignored_filter_error_names_the_filters_and_the_page():
    sent = f"{BASE}?email=a%40b.test&gender=female"
    server = Server({sent: bundle(["a"], self_url=f"{BASE}?_count=100")})
    with pytest.raises(IgnoredFilter) as err:
        records(walk(server, [("email", "a@b.test"), ("gender", "female")]))
    assert err.value.ignored == ["email", "gender"]
    assert err.value.url == sent
    assert str(err.value) == (
        "Patient: the server ignored the filter(s) email, gender: its self link "
        f"({BASE}?_count=100) leaves them out, so the answer is not filtered by them"
    )


def test_an_ignored_filter_warning_is_of_its_own_category():
    sent = f"{BASE}?email=a%40b.test"
    server = Server({sent: bundle(["a"], total=1, self_url=BASE)})
    w = walk(server, [("email", "a@b.test")], on_ignored_filter="warn")
    with pytest.warns(IgnoredFilterWarning) as caught:
        assert records(w) == ["a"]
    assert [type(c.message) for c in caught] == [IgnoredFilterWarning]


# ---------------------------------------------------------------- more of reading a page


@pytest.mark.usefixtures("new_york")
def test_an_instant_without_a_zone_is_utc_whatever_the_local_zone():
    naive = read_instant("2026-11-26T03:00:00")
    assert naive == datetime(2026, 11, 26, 3, tzinfo=UTC)
    zoned = read_instant("2026-11-26T04:00:00+01:00")
    assert zoned is not None
    assert zoned.tzinfo is UTC


def test_micros_are_whole_integers():
    value = micros(datetime(2026, 11, 26, 3, 0, 0, 123457, tzinfo=UTC))
    assert type(value) is int
    assert value == 1_795_662_000_123_457


def test_an_outcome_answer_keeps_its_issue_code():
    outcome = {
        "resourceType": "OperationOutcome",
        "issue": [{"severity": "error", "code": "processing", "diagnostics": "index rebuilding"}],
    }
    with pytest.raises(ApiError) as err:
        parse(outcome, status=200)
    assert err.value.code == "processing"
    assert err.value.diagnostics == "index rebuilding"


def test_ignored_filters_reads_blank_echoes_trailing_slashes_and_short_values():
    # A filter echoed with a blank value is still echoed (values are not compared).
    assert (
        ignored_filters(f"{BASE}?name=x", {"link": [{"relation": "self", "url": "?name="}]}) == []
    )
    # A request path with a trailing slash is the same search as without.
    same = {"link": [{"relation": "self", "url": f"{BASE}?name=x"}]}
    assert ignored_filters(f"{BASE}/?name=x", same) == []
    # A one-letter code is a filter like any other.
    dropped = {"link": [{"relation": "self", "url": BASE}]}
    assert ignored_filters(f"{BASE}?gender=X", dropped) == ["gender"]


def test_clean_tells_a_patient_marked_include_from_a_record_and_keeps_untouched_pages():
    # Patient:link brings Patients marked include; an unmarked Organization is included
    # too. Neither is a record of the walk: positions count the records alone.
    url = f"{BASE}?_include=Patient%3Alink"
    linked = {"resource": patient("l", CHANGED), "search": {"mode": "include"}}
    org = {"resource": {"resourceType": "Organization", "id": "o"}}
    first = bundle(
        [],
        total=3,
        next_url=f"{BASE}?page=2",
        entries=[linked, org, *entries(patient("a"), patient("b"), patient("c"))],
    )
    server = Server(
        {
            url: first,
            f"{BASE}?page=2": bundle(
                [], total=3, entries=[linked, *entries(patient("c", CHANGED))]
            ),
            at(_include="Patient:link", _lastUpdated=f"ge{T0}"): bundle(
                [], total=1, entries=[linked, *entries(patient("c", CHANGED))]
            ),
            at(_include="Patient:link", _lastUpdated=f"lt{T0}", _count="1"): bundle(
                [], total=2, entries=[*entries(patient("a")), linked]
            ),
        }
    )
    w = walk(server, [("_include", "Patient:link")])
    pages = list(w)
    raw = w.clean([p.raw for p in pages])
    ids = [[e["resource"]["id"] for e in orjson.loads(body)["entry"]] for body in raw]
    assert ids == [["l", "o", "a", "b"], ["l"], ["l", "c"]]
    assert raw[2] is pages[2].raw  # nothing dropped: the page as received
