"""No quiet wrong frame: wrong types, more records than total, endless next chains."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.hostile.conftest import SECRET
from tests.loopback import bundle
from toolkit.client import Client
from toolkit.errors import IncompleteResult, MalformedPage, PageLimitExceeded

Handler = Callable[[httpx.Request], dict[str, Any]]


def _client(handler: Handler, sent: list[httpx.Request], **kwargs: Any) -> Client:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/oauth/token"):
            return httpx.Response(200, json={"access_token": "t", "expires_in": 900})
        sent.append(request)
        return httpx.Response(200, json=handler(request))

    return Client(
        "https://api.test/main",
        "c",
        SECRET,
        transport=httpx.MockTransport(handle),
        progress=False,
        **kwargs,
    )


def test_patients_served_for_appointments_are_an_error_not_an_empty_frame() -> None:
    ids = [str(i) for i in range(100)]
    sent: list[httpx.Request] = []
    with (
        _client(lambda r: bundle(ids, total=100), sent) as client,
        pytest.raises(MalformedPage, match=r"entry\[0\] is a 'Patient', not a Appointment"),
    ):
        client.frame("Appointment")
    assert len(sent) == 1


def test_included_entries_are_allowed_only_when_asked_and_not_counted() -> None:
    def page(request: httpx.Request) -> dict[str, Any]:
        body = bundle(["1", "2"], resource="Appointment", total=2)
        body["entry"].append(
            {"resource": {"resourceType": "Patient", "id": "p"}, "search": {"mode": "include"}}
        )
        return body

    sent: list[httpx.Request] = []
    with _client(page, sent) as client:
        records = list(client.records("Appointment", include="Appointment:patient"))
        assert [r["id"] for r in records] == ["1", "2"]
        assert client.last_summary is not None and client.last_summary.complete
        with pytest.raises(MalformedPage, match="not a Appointment"):
            list(client.records("Appointment"))  # not asked for: an error


def test_more_records_than_total_is_an_error() -> None:
    sent: list[httpx.Request] = []
    with (
        _client(lambda r: bundle([str(i) for i in range(15)], total=10), sent) as client,
        pytest.raises(MalformedPage, match=r"15 records read but the server announced 10"),
    ):
        client.frame("Patient")


def test_endless_next_chain_with_a_total_stops_after_what_total_allows() -> None:
    # every page brings new ids (no loop to see) and a next link, total says 100.
    def page(request: httpx.Request) -> dict[str, Any]:
        n = int(request.url.params.get("page", "1"))
        ids = [f"{n}-{i}" for i in range(10)]
        return bundle(ids, total=100, next_url=f"Patient?page={n + 1}")

    sent: list[httpx.Request] = []
    with _client(page, sent) as client, pytest.raises(MalformedPage):  # or PageLimitExceeded
        list(client.pages("Patient"))
    # 100 records at 10 a page: 10 pages, then the 11th passes total (or the 13th
    # would pass the page bound): the error comes at once, not after the 10,000 default
    assert 11 <= len(sent) <= 12


def test_endless_next_chain_with_records_within_total_hits_the_page_bound() -> None:
    # empty-ish pages of one fresh record each, total 1_000_000: the record count
    # never passes total, so only the page bound (total / first page size) stops it.
    def page(request: httpx.Request) -> dict[str, Any]:
        n = int(request.url.params.get("page", "1"))
        return bundle([str(n)], total=1_000_000, next_url=f"Patient?page={n + 1}")

    sent: list[httpx.Request] = []
    with (
        _client(page, sent, max_pages=25) as client,
        pytest.raises(PageLimitExceeded, match="max_pages=25") as info,
    ):
        list(client.pages("Patient"))
    assert info.value.limit == 25
    assert len(sent) == 25


def test_without_total_max_pages_applies_per_call() -> None:
    def page(request: httpx.Request) -> dict[str, Any]:
        n = int(request.url.params.get("page", "1"))
        return bundle([str(n)], next_url=f"Patient?page={n + 1}")

    sent: list[httpx.Request] = []
    with (
        _client(page, sent) as client,
        pytest.raises(PageLimitExceeded, match="Pass max_pages= to allow more"),
    ):
        list(client.pages("Patient", max_pages=7))
    assert len(sent) == 7


def test_a_short_walk_without_changes_still_raises_incomplete_result() -> None:
    sent: list[httpx.Request] = []

    def page(request: httpx.Request) -> dict[str, Any]:
        if request.url.params.get("_lastUpdated", "").startswith("lt"):
            return bundle(["1"], total=5)
        if request.url.params.get("_lastUpdated", "").startswith("ge"):
            return bundle([], total=0)
        return bundle(["1", "2"], total=5)

    with _client(page, sent) as client, pytest.raises(IncompleteResult) as info:
        client.frame("Patient")
    assert info.value.expected == 5
