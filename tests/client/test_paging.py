"""A list walk over hand-written FHIR searchset Bundles, pinned so that a dropped guard fails.

The pages are built from FHIR R4's Bundle form (``type: searchset``, ``total``,
``link`` with ``relation``/``url``, ``entry.search.mode``) and the spec's paging
rules (``page``/``_count``, ``next`` links, ``Bundle.total``), not from pmtk's
own writer. The walk's ``fetch`` is a dictionary of pages, so a test costs
milliseconds; ``tools/mutation.py paging`` runs these tests against mutants of
``toolkit/paging.py`` and ``toolkit/page.py`` (see docs/testing.md).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from toolkit.errors import (
    ApiError,
    IgnoredFilter,
    IncompleteResult,
    MalformedPage,
    PageLimitExceeded,
    PagingLoop,
)
from toolkit.page import Page, ignored_filters, next_link, self_link
from toolkit.paging import DEFAULT_MAX_PAGES, PAGE_MARGIN, FetchSummary, Walk

BASE = "https://api.example.test/main/Patient"
DATE = "Thu, 26 Nov 2026 03:00:00 GMT"  # the Date header of every page: the walk's t0
BEFORE = "2026-11-20T10:00:00Z"  # a lastUpdated before t0: the record did not change


def patient(rid: str, updated: str = BEFORE) -> dict[str, Any]:
    return {"resourceType": "Patient", "id": rid, "meta": {"lastUpdated": updated}}


def bundle(
    ids: list[str],
    *,
    total: Any = None,
    next_url: str | None = None,
    self_url: str | None = None,
    entries: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A FHIR R4 searchset Bundle of Patients."""
    out: dict[str, Any] = {"resourceType": "Bundle", "type": "searchset"}
    if total is not None:
        out["total"] = total
    links = []
    if self_url is not None:
        links.append({"relation": "self", "url": self_url})
    if next_url is not None:
        links.append({"relation": "next", "url": next_url})
    out["link"] = links
    out["entry"] = (
        entries
        if entries is not None
        else [
            {"fullUrl": f"{BASE}/{i}", "resource": patient(i), "search": {"mode": "match"}}
            for i in ids
        ]
    )
    return out


class Server:
    """Pages by URL; records every GET it answers."""

    def __init__(self, pages: dict[str, dict[str, Any]], *, date: bool = True) -> None:
        self.pages = pages
        self.date = date
        self.gets: list[tuple[str, list[tuple[str, str]] | None]] = []

    def fetch(self, url: str, query: list[tuple[str, str]] | None) -> tuple[httpx.Response, Any]:
        if self.gets and "?page=" in url:
            # A next link is fetched as written: no query of the first request added.
            assert query is None, query
        self.gets.append((url, query))
        full = str(httpx.URL(url, params=query)) if query else url
        data = self.pages[full]
        response = httpx.Response(
            200,
            json=data,
            headers={"date": DATE} if self.date else {},
            request=httpx.Request("GET", full),
        )
        return response, data


def resolve(link: str, page_url: str) -> str:
    return str(httpx.URL(page_url).join(link))


def walk(server: Server, query: list[tuple[str, str]] | None = None, **kwargs: Any) -> Walk:
    return Walk(
        "Patient",
        BASE,
        query or [],
        fetch=server.fetch,
        resolve=resolve,
        summary=FetchSummary("Patient"),
        **kwargs,
    )


def records(w: Walk) -> list[str]:
    return [r["id"] for page in w for r in page.records]


def test_a_walk_follows_next_links_and_is_complete():
    server = Server(
        {
            BASE: bundle(["a", "b"], total=3, next_url=f"{BASE}?page=2"),
            # "c" was created during the walk (after t0): counted all the same.
            f"{BASE}?page=2": bundle(
                [], total=3, entries=[{"resource": patient("c", "2026-11-26T03:00:01Z")}]
            ),
        }
    )
    w = walk(server)
    assert records(w) == ["a", "b", "c"]
    assert w.summary.complete
    assert w.summary.pages == 2
    assert w.summary.records == 3
    assert w.summary.total == 3
    assert w.summary.started_at == "2026-11-26T03:00:00Z"
    assert not w.summary.recovered


def test_an_empty_page_that_links_to_a_next_page_stops_the_walk():
    server = Server(
        {
            BASE: bundle(["a"], next_url=f"{BASE}?page=2"),
            f"{BASE}?page=2": bundle([], total=2, next_url=f"{BASE}?page=3"),
            f"{BASE}?page=3": bundle(["b"]),
        }
    )
    server.pages[BASE]["total"] = 2
    with pytest.raises(IncompleteResult, match="empty but links to a next page") as err:
        records(walk(server))
    assert (err.value.expected, err.value.received) == (2, 1)
    assert [url for url, _ in server.gets] == [BASE, f"{BASE}?page=2"]


def test_a_next_link_back_to_a_page_already_read_is_a_loop():
    server = Server(
        {
            BASE: bundle(["a"], next_url=f"{BASE}?page=2"),
            f"{BASE}?page=2": bundle(["b"], next_url=f"{BASE}?page=1"),
        }
    )
    server.pages[BASE]["total"] = 9
    with pytest.raises(PagingLoop, match="points back") as err:
        records(walk(server, []))
    assert (err.value.expected, err.value.received) == (9, 2)


def test_a_page_of_versions_already_read_is_a_loop():
    server = Server(
        {
            BASE: bundle(["a", "b"], total=5, next_url=f"{BASE}?page=2"),
            f"{BASE}?page=2": bundle(["a", "b"], total=5, next_url=f"{BASE}?page=3"),
            f"{BASE}?page=3": bundle(["c"]),
        }
    )
    with pytest.raises(
        PagingLoop, match="repeats records already read, in the same versions: the next links loop"
    ) as err:
        records(walk(server))
    assert (err.value.expected, err.value.received) == (5, 2)


@pytest.mark.parametrize("total", [True, False, -1, 2.0, "2"])
def test_a_total_that_is_not_a_count_is_refused(total):
    # FHIR's Bundle.total is an unsignedInt; JSON true is not 1.
    server = Server({BASE: bundle(["a"], total=total)})
    with pytest.raises(MalformedPage, match=r"Bundle\.total is .*not a count") as err:
        records(walk(server))
    assert err.value.url == BASE


def test_a_total_of_zero_with_no_entries_is_complete():
    server = Server({BASE: bundle([], total=0)})
    w = walk(server)
    assert records(w) == []
    assert w.summary.complete
    assert w.summary.total == 0


def test_fewer_records_than_total_is_incomplete():
    server = Server({BASE: bundle(["a", "b"], total=3)})
    with pytest.raises(IncompleteResult, match=r"announced 3 records .* returned 2") as err:
        records(walk(server, recover=False))
    assert err.value.expected == 3
    assert err.value.received == 2
    assert "ids repeated" not in str(err.value)  # no id was read twice: only short


def test_more_unchanged_records_than_total_is_malformed():
    server = Server({BASE: bundle(["a", "b", "c"], total=2)})
    with pytest.raises(
        MalformedPage, match="did not change during the walk; the pages contradict their total"
    ) as err:
        records(walk(server))
    assert err.value.url == BASE


def test_exactly_total_records_is_not_too_many():
    server = Server({BASE: bundle(["a", "b"], total=2)})
    assert records(walk(server)) == ["a", "b"]


def test_an_entry_of_another_type_is_refused_without_include():
    entries = [{"resource": {"resourceType": "Practitioner", "id": "p"}}]
    server = Server({BASE: bundle([], entries=entries)})
    with pytest.raises(
        MalformedPage,
        match=r"entry\[0\] is a 'Practitioner', not a Patient \(and not an _include marked "
        r"search.mode 'include'\); a frame of it would silently lose records",
    ) as err:
        records(walk(server))
    assert err.value.url == BASE
    assert BASE in str(err.value)


def test_included_entries_are_kept_apart_and_not_counted():
    entries = [
        {"resource": patient("a"), "search": {"mode": "match"}},
        {"resource": {"resourceType": "Organization", "id": "o"}, "search": {"mode": "include"}},
        {"resource": patient("linked"), "search": {"mode": "include"}},  # Patient:link
        {"resource": {"resourceType": "Practitioner", "id": "p"}},  # unmarked, another type
        {
            "resource": {"resourceType": "OperationOutcome", "issue": []},
            "search": {"mode": "outcome"},
        },
    ]
    url = f"{BASE}?_include=Patient%3Aorganization"
    server = Server({url: bundle([], total=1, entries=entries)})
    w = walk(server, [("_include", "Patient:organization")])
    pages = list(w)
    assert [r["id"] for r in pages[0].records] == ["a"]
    assert [r["id"] for r in pages[0].included] == ["o", "linked", "p"]
    assert w.summary.records == 1
    assert w.summary.complete
    kept = pages[0].main_raw()
    assert b'"Organization"' not in kept
    assert b'"a"' in kept


def test_an_outcome_entry_about_the_search_is_skipped():
    entries = [
        {"resource": {"resourceType": "OperationOutcome"}, "search": {"mode": "outcome"}},
        {"resource": patient("a")},
    ]
    server = Server({BASE: bundle([], total=1, entries=entries)})
    assert records(walk(server)) == ["a"]


def test_an_outcome_entry_not_marked_outcome_is_refused():
    entries = [{"resource": patient("a")}, {"resource": {"resourceType": "OperationOutcome"}}]
    server = Server({BASE: bundle([], entries=entries)})
    with pytest.raises(MalformedPage, match=r"entry\[1\] is a 'OperationOutcome'"):
        records(walk(server))


@pytest.mark.parametrize(
    "entry",
    [{"fullUrl": "x"}, {"resource": "Patient/1"}, "not an object"],
)
def test_an_entry_without_a_resource_object_is_malformed(entry):
    server = Server({BASE: bundle([], entries=[entry])})
    with pytest.raises(MalformedPage, match=r"entry\[0\] has no resource") as err:
        records(walk(server))
    assert err.value.url == BASE


def test_entry_that_is_not_a_list_is_malformed():
    data = bundle([])
    data["entry"] = {"resource": patient("a")}
    server = Server({BASE: data})
    with pytest.raises(MalformedPage, match="not a list") as err:
        records(walk(server))
    assert err.value.url == BASE


@pytest.mark.parametrize("rid", [None, "", 7])
def test_a_record_without_an_id_is_malformed(rid):
    record = patient("x")
    record["id"] = rid
    server = Server({BASE: bundle([], entries=[{"resource": record}])})
    with pytest.raises(MalformedPage, match="has no id"):
        records(walk(server))


def test_an_operation_outcome_answer_is_an_api_error_with_its_text():
    outcome = {
        "resourceType": "OperationOutcome",
        "issue": [{"severity": "error", "code": "processing", "diagnostics": "index rebuilding"}],
    }
    server = Server({BASE: outcome})
    with pytest.raises(ApiError, match="index rebuilding") as err:
        records(walk(server))
    assert err.value.url == BASE


def test_pages_past_total_and_page_size_are_refused():
    # total 4 at 2 a page: 2 pages, + PAGE_MARGIN; the next links go on forever.
    # The records are new since t0 (created during the walk), so their number is explained.
    new = "2026-11-26T03:00:01Z"

    def two(n: int) -> list[dict[str, Any]]:
        return [{"resource": patient(f"r{2 * n - k}", new)} for k in (1, 0)]

    pages = {BASE: bundle([], total=4, next_url=f"{BASE}?page=2", entries=two(1))}
    for n in range(2, 10):
        pages[f"{BASE}?page={n}"] = bundle(
            [], total=4, next_url=f"{BASE}?page={n + 1}", entries=two(n)
        )
    with pytest.raises(PageLimitExceeded, match=r"Bundle.total 4 at 2 a page") as err:
        records(walk(Server(pages), recover=False))
    assert err.value.limit == 2 + PAGE_MARGIN
    assert err.value.url == f"{BASE}?page=5"
    # max_pages above the bound from total does not raise it; below it, it wins.
    with pytest.raises(PageLimitExceeded) as err:
        records(walk(Server(pages), recover=False, max_pages=10))
    assert err.value.limit == 2 + PAGE_MARGIN
    with pytest.raises(PageLimitExceeded, match="max_pages=3") as err:
        records(walk(Server(pages), recover=False, max_pages=3))
    assert err.value.limit == 3


def test_max_pages_bounds_a_walk_without_total():
    pages = {BASE: bundle(["r1"], next_url=f"{BASE}?page=2")}
    for n in range(2, 6):
        pages[f"{BASE}?page={n}"] = bundle([f"r{n}"], next_url=f"{BASE}?page={n + 1}")
    server = Server(pages)
    with pytest.raises(PageLimitExceeded, match="max_pages=3"):
        records(walk(server, max_pages=3))
    assert len(server.gets) == 3


def test_max_pages_equal_to_the_pages_is_enough():
    server = Server(
        {BASE: bundle(["a"], next_url=f"{BASE}?page=2"), f"{BASE}?page=2": bundle(["b"])}
    )
    assert records(walk(server, max_pages=2)) == ["a", "b"]


def test_default_page_bound_is_large():
    assert DEFAULT_MAX_PAGES >= 10_000


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_pages": 0}, "max_pages"),
        ({"skipped": -1}, "skipped"),
        ({"on_ignored_filter": "ignore"}, "ignored_filters"),
    ],
)
def test_bad_walk_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        walk(Server({}), **kwargs)


def test_a_resumed_walk_counts_the_records_before_it():
    server = Server({BASE: bundle(["c"], total=3)})
    w = walk(server, skipped=2)
    assert records(w) == ["c"]
    assert w.summary.complete


def test_a_resumed_walk_still_short_of_total_is_incomplete():
    server = Server({BASE: bundle(["c"], total=4)})
    with pytest.raises(IncompleteResult, match="after the 2 records before"):
        records(walk(server, skipped=2))


def test_a_filter_left_out_of_the_self_link_is_refused():
    sent = f"{BASE}?email=a%40b.test"
    server = Server({sent: bundle(["a"], self_url=f"{BASE}?_count=100")})
    with pytest.raises(IgnoredFilter, match="email"):
        records(walk(server, [("email", "a@b.test")]))


def test_a_filter_left_out_can_be_a_warning_noted_in_the_summary():
    sent = f"{BASE}?email=a%40b.test"
    server = Server({sent: bundle(["a"], total=1, self_url=BASE)})
    w = walk(server, [("email", "a@b.test")], on_ignored_filter="warn")
    with pytest.warns(Warning, match="ignored the filter"):
        assert records(w) == ["a"]
    assert w.summary.ignored_filters == ["email"]
    assert w.summary.filters_checked


def test_an_echoed_filter_passes():
    sent = f"{BASE}?email=a%40b.test"
    server = Server({sent: bundle(["a"], total=1, self_url=f"{BASE}?email=a@b.test&page=1")})
    w = walk(server, [("email", "a@b.test")])
    assert records(w) == ["a"]
    assert w.summary.filters_checked


def test_ignored_filters_counts_repeats_and_skips_paging_parameters():
    sent = f"{BASE}?date=ge2026-01-01&date=lt2026-02-01&_count=10&page=2&name="
    echoed = {"link": [{"relation": "self", "url": f"{BASE}?date=ge2026-01-01"}]}
    assert ignored_filters(sent, echoed) == ["date"]
    other_path = {"link": [{"relation": "self", "url": "https://api.example.test/main/x"}]}
    assert ignored_filters(sent, other_path) is None


def test_links_are_read_by_relation():
    data = {
        "link": [
            {"relation": "next", "url": ""},
            {"relation": "self", "url": "  "},
            {"relation": "next", "url": "/b"},
            {"relation": "self", "url": "/s"},
        ]
    }
    assert next_link(data) == "/b"
    assert self_link(data) == "/s"
    assert next_link({"link": [{"relation": "previous", "url": "/a"}]}) is None
    assert next_link(["not a bundle"]) is None


def test_server_time_falls_back_to_the_bundle_meta():
    data = bundle(["a"], total=1)
    data["meta"] = {"lastUpdated": "2026-11-26T04:00:00+01:00"}
    response = httpx.Response(200, json=data, request=httpx.Request("GET", BASE))
    page = Page.parse(response, data, "Patient", include=False)
    assert page.server_time == datetime(2026, 11, 26, 3, 0, tzinfo=UTC)
    assert page.total == 1
    assert page.next is None


def at(**params: str) -> str:
    return str(httpx.URL(BASE, params=params))


def test_a_changed_collection_is_recovered_with_last_updated_queries():
    # Record "b" changed after t0 and moved to page 2, so it is read twice and "c"
    # slid onto page 1 unseen: the walk asks for ge<t0>, counts lt<t0>, walks lt<t0>.
    changed = "2026-11-26T03:00:05Z"
    t0 = "2026-11-26T03:00:00Z"
    server = Server(
        {
            BASE: bundle(["a", "b"], total=3, next_url=f"{BASE}?page=2"),
            f"{BASE}?page=2": bundle([], total=3, entries=[{"resource": patient("b", changed)}]),
            at(_lastUpdated=f"ge{t0}"): bundle(
                [], total=1, entries=[{"resource": patient("b", changed)}]
            ),
            at(_lastUpdated=f"lt{t0}", _count="1"): bundle(["a"], total=2),
            at(_lastUpdated=f"lt{t0}"): bundle(["a", "c"], total=2),
        }
    )
    w = walk(server)
    pages = list(w)
    assert [p.phase for p in pages] == ["walk", "walk", "changed", "unchanged", "changed"]
    assert w.summary.recovered
    assert w.summary.complete
    assert w.summary.records == 3
    assert w.summary.total == 3  # the walk's total, not a recovery query's
    assert w.summary.started_at == t0
    raw = w.clean([p.raw for p in pages])
    kept = [
        e["resource"]["id"]
        for body in raw
        for e in httpx.Response(200, content=body).json()["entry"]
    ]
    assert sorted(set(kept)) == ["a", "b", "c"]
    assert kept.count("b") == 1


def test_a_recovery_that_cannot_find_the_unchanged_records_is_incomplete():
    changed = "2026-11-26T03:00:05Z"
    t0 = "2026-11-26T03:00:00Z"
    server = Server(
        {
            BASE: bundle(["a", "b"], total=3, next_url=f"{BASE}?page=2"),
            f"{BASE}?page=2": bundle([], total=3, entries=[{"resource": patient("b", changed)}]),
            at(_lastUpdated=f"ge{t0}"): bundle(
                [], total=1, entries=[{"resource": patient("b", changed)}]
            ),
            at(_lastUpdated=f"lt{t0}", _count="1"): bundle(["a"], total=2),
            at(_lastUpdated=f"lt{t0}"): bundle(["a"], total=2),
        }
    )
    with pytest.raises(IncompleteResult, match="still lacks 1 unchanged"):
        records(walk(server))


def test_a_changed_collection_without_recovery_is_incomplete():
    changed = "2026-11-26T03:00:05Z"
    server = Server(
        {
            BASE: bundle(["a", "b"], total=3, next_url=f"{BASE}?page=2"),
            f"{BASE}?page=2": bundle([], total=3, entries=[{"resource": patient("b", changed)}]),
        }
    )
    with pytest.raises(IncompleteResult, match="changed during the walk"):
        records(walk(server, recover=False))


def test_the_default_phase_of_a_page_is_walk():
    data = bundle(["a"])
    response = httpx.Response(200, json=data, request=httpx.Request("GET", BASE))
    assert Page.parse(response, data, "Patient", include=False).phase == "walk"


def test_without_a_server_time_the_walk_starts_two_minutes_before_the_local_clock():
    server = Server({BASE: bundle(["a"], total=1)}, date=False)
    w = walk(server, now=lambda: datetime(2026, 11, 26, 3, 2, 30, tzinfo=UTC))
    assert records(w) == ["a"]
    assert w.summary.started_at == "2026-11-26T03:00:30Z"


def test_without_a_total_the_default_page_bound_applies(monkeypatch):
    import toolkit.paging

    monkeypatch.setattr(toolkit.paging, "DEFAULT_MAX_PAGES", 3)
    pages = {BASE: bundle(["r1"], next_url=f"{BASE}?page=2")}
    for n in range(2, 6):
        pages[f"{BASE}?page={n}"] = bundle([f"r{n}"], next_url=f"{BASE}?page={n + 1}")
    with pytest.raises(PageLimitExceeded, match="max_pages=3"):
        records(walk(Server(pages)))


def test_find_proposals_repeat_by_design_and_are_counted_not_deduplicated():
    # $find (track_ids=False): the same slot id may come back in two proposals.
    server = Server(
        {
            BASE: bundle(["s1", "s2"], total=4, next_url=f"{BASE}?page=2"),
            f"{BASE}?page=2": bundle(["s1", "s2"], total=4),
        }
    )
    w = walk(server, track_ids=False)
    assert records(w) == ["s1", "s2", "s1", "s2"]
    assert w.summary.records == 4
    assert w.summary.complete
    server = Server({BASE: bundle(["s1", "s2", "s3"], total=2)})
    with pytest.raises(MalformedPage, match="contradict their total"):
        records(walk(server, track_ids=False))


def test_an_unchanged_pass_that_contradicts_its_own_total_is_malformed():
    # The lt<t0> pass may only lose records; more than its total is a broken server.
    changed = "2026-11-26T03:00:05Z"
    t0 = "2026-11-26T03:00:00Z"
    server = Server(
        {
            BASE: bundle(["a", "b"], total=3, next_url=f"{BASE}?page=2"),
            f"{BASE}?page=2": bundle([], total=3, entries=[{"resource": patient("b", changed)}]),
            at(_lastUpdated=f"ge{t0}"): bundle(
                [], total=1, entries=[{"resource": patient("b", changed)}]
            ),
            at(_lastUpdated=f"lt{t0}", _count="1"): bundle(["a"], total=2),
            at(_lastUpdated=f"lt{t0}"): bundle(["a", "c", "d"], total=2),
        }
    )
    with pytest.raises(MalformedPage, match="contradict their total"):
        records(walk(server))
