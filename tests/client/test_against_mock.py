"""The client against the real mock deployment over loopback."""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from toolkit import catalogue
from toolkit.client import Client, connect
from toolkit.errors import (
    AuthError,
    Conflict,
    IncompleteResult,
    NotFound,
    PagingLoop,
    RateLimited,
    RequestValidationError,
)
from toolkit.mock import serve
from toolkit.throttle import RetryPolicy


class VirtualTime:
    """Client clock and sleep that move the mock's virtual clock instead of waiting."""

    def __init__(self, dep: Any) -> None:
        self.dep = dep
        self.offset = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return time.monotonic() + self.offset

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.offset += seconds
        self.dep.advance_clock(seconds)


@pytest.fixture(scope="module")
def dep() -> Iterator[Any]:
    with serve(seed=0, scale="small", test_controls=True) as deployment:
        yield deployment


@pytest.fixture
def mock(dep: Any) -> Iterator[Any]:
    dep.set_fault(None)
    dep.reset_rate_limit()
    dep.reset_stats()
    yield dep
    dep.set_fault(None)


def client_for(dep: Any, **kwargs: Any) -> Client:
    kwargs.setdefault("progress", False)
    return Client(dep.base_url, dep.client_id, dep.client_secret, **kwargs)


def walk_ids(client: Client, resource_type: str, **search: Any) -> list[str]:
    return [r["id"] for r in client.records(resource_type, **search)]


@pytest.mark.parametrize("resource_type", catalogue.LISTED_RESOURCES)
def test_every_listed_resource_walks_to_bundle_total_with_unique_ids(mock, resource_type):
    with client_for(mock) as client:
        ids = walk_ids(client, resource_type)
        summary = client.last_summary
    assert summary is not None and summary.complete
    assert summary.total is not None and summary.total > 0
    assert len(ids) == summary.total == len(set(ids))


@pytest.mark.parametrize("resource_type", catalogue.LISTED_RESOURCES)
def test_frame_row_count_equals_bundle_total(mock, resource_type):
    with client_for(mock) as client:
        df = client.frame(resource_type)
        summary = client.last_summary
    assert summary is not None and df.height == summary.total
    assert df["id"].n_unique() == df.height


def test_frames_returns_main_and_child_tables(mock):
    with client_for(mock) as client:
        tables = client.frames("Appointment")
    assert "Appointment" in tables
    assert tables["Appointment"].height == client.last_summary.total
    assert any(key.startswith("appointment_") for key in tables)


def test_expired_token_on_virtual_clock_is_refreshed(mock):
    with client_for(mock) as client:
        client.read("Organization", walk_ids(client, "Organization")[0])
        mock.advance_clock(catalogue.TOKEN_LIFETIME_STATED + 1)
        assert len(walk_ids(client, "Practitioner")) > 0
        assert client.auth.token_requests == 2
        assert client.auth.replays == 1


def test_tokens_dying_early_are_recovered_by_one_replay(mock):
    mock.set_fault("tokens-die-early")
    with client_for(mock) as client:
        walk_ids(client, "Organization")
        mock.advance_clock(301)
        ids = walk_ids(client, "Coverage")
        assert len(ids) == client.last_summary.total
        assert client.auth.replays == 1


def test_429_storm_with_a_second_client_is_waited_out(mock):
    with serve(seed=0, scale="small", rate_limit=20, test_controls=True) as small:
        vt = VirtualTime(small)
        with client_for(small) as hog, client_for(small, clock=vt.clock, sleep=vt.sleep) as c:
            org = walk_ids(hog, "Organization")[0]
            for _ in range(19):  # the other process eats the whole budget
                hog.read("Organization", org)
            ids = walk_ids(c, "Appointment", count=50)
            summary = c.last_summary
        stats = small.stats()
    assert summary is not None and summary.complete
    assert len(ids) == summary.total == len(set(ids))
    assert summary.pages > 20  # more pages than one window allows
    assert summary.rate_limited >= 1 and summary.waited_seconds >= 60
    # Never hammer: at most one 429 per window refill.
    assert stats["responses_by_status"].get("429", 0) <= 3


def test_flaky_503_gives_a_complete_result_without_duplicates(mock):
    mock.set_fault("flaky-503")
    with client_for(mock) as client:
        ids = walk_ids(client, "Appointment")
        summary = client.last_summary
    assert len(ids) == summary.total == len(set(ids))
    assert summary.retries >= 1


def test_dropped_connections_give_a_complete_result_without_duplicates(mock):
    mock.set_fault("drop-connections")
    with client_for(mock) as client:
        ids = walk_ids(client, "InvoiceLine")
        summary = client.last_summary
    assert len(ids) == summary.total == len(set(ids))
    assert summary.retries >= 1


def test_relative_next_links_are_followed(mock):
    mock.set_fault("relative-next-links")
    with client_for(mock) as client:
        ids = walk_ids(client, "Appointment")
        assert len(ids) == client.last_summary.total == len(set(ids))


def test_paging_loop_is_detected(mock):
    mock.set_fault("paging-loop")
    with client_for(mock) as client, pytest.raises(PagingLoop):
        walk_ids(client, "Appointment")


def test_total_mismatch_raises_incomplete_result(mock):
    mock.set_fault("total-mismatch")
    with client_for(mock) as client, pytest.raises(IncompleteResult) as info:
        walk_ids(client, "Referral")
    assert info.value.expected == info.value.received + 5


def test_search_parameters_reach_the_server(mock):
    with client_for(mock) as client:
        all_ids = walk_ids(client, "Patient")
        some = walk_ids(client, "Patient", id=all_ids[:3])
        assert sorted(some) == sorted(all_ids[:3])
        with pytest.raises(NotFound):
            client.read("Patient", "does-not-exist")


def _existing(client: Client, resource_type: str) -> dict[str, Any]:
    # records() returns after the whole walk (it keeps each id's newest
    # version), so one record is read from the first page of a raw request.
    page = client.request("GET", resource_type, params={"_count": 1}).json()
    record: dict[str, Any] = page["entry"][0]["resource"]
    return record


def test_writes_of_every_kind(mock):
    with client_for(mock) as client:
        referral = _existing(client, "Referral")
        coverage = _existing(client, "Coverage")
        org = client.create(
            "Organization",
            {
                "name": "Smith Physio",
                "telecom": [{"system": "phone", "value": "+61298765432", "use": "work"}],
                "address": [{"use": "work", "country": "AU", "city": "Sydney"}],
            },
        )
        assert org["id"].startswith("SP-")
        prac = client.create(
            "Practitioner", {"name": {"use": "official", "family": "Jones", "given": ["Ann"]}}
        )
        assert prac["id"].startswith("EP-")
        cov = client.create(
            "Coverage",
            {k: coverage[k] for k in ("beneficiary", "subscriber", "payor")},
        )
        assert client.read("Coverage", cov["id"])["id"] == cov["id"]
        new_ref = client.create(
            "Referral",
            {
                "coverage": {"reference": f"/main/Coverage/{cov['id']}", "type": "Coverage"},
                "subject": referral["subject"],
                "requester": referral["requester"],
                "created": "2026-11-21T09:00:00Z",
                "attachments": [
                    {
                        "contentType": "application/pdf",
                        "data": base64.b64encode(b"%PDF-1.7").decode(),
                        "title": "letter.pdf",
                    }
                ],
            },
        )
        patched = client.patch("Referral", new_ref["id"], {"comment": "seen", "active": False})
        assert patched["comment"] == "seen" and patched["active"] is False
        appt = _existing(client, "Appointment")
        moved = client.patch("Appointment", appt["id"], {"description": "moved"})
        assert moved["id"] == appt["id"] and moved["description"] == "moved"


def test_find_then_book_then_double_booking_conflicts(mock):
    start = datetime(2026, 11, 23, tzinfo=UTC)
    with client_for(mock) as client:
        proposals = client.find(start, start + timedelta(days=5), 30, show="first-available")
        assert proposals.height > 0
        row = proposals.row(0, named=True)
        patient = _existing(client, "Patient")["id"]
        assert row["practitioner_role"].startswith("PR-")
        slot = dict(
            start=row["start"],
            end=row["end"],
            practitioner_role=row["practitioner_role"],
            patient=patient,
            healthcare_service=row["healthcare_service"],
        )
        booked = client.book(**slot)
        assert booked["resourceType"] == "Appointment"
        with pytest.raises(Conflict):
            client.book(**slot)


def test_rejected_writes_send_nothing(mock):
    with client_for(mock) as client:
        client.read("Organization", walk_ids(client, "Organization")[0])
        before = mock.stats()["requests"]
        with pytest.raises(RequestValidationError):
            client.create("Organization", {"name": "X", "address": [{"country": "Australia"}]})
        with pytest.raises(RequestValidationError):
            client.create(
                "Referral",
                {"attachments": [{"contentType": "text/plain", "data": "eA==", "title": "a"}]},
            )
        with pytest.raises(RequestValidationError):
            client.patch("Practitioner", "PR-1", {"active": False})
        with pytest.raises(RequestValidationError):
            client.patch("Referral", "1", {"allocationType": "Everything"})
        assert mock.stats()["requests"] == before


def test_secrets_never_leak_against_the_mock(mock, caplog):
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    mock.set_fault("flaky-503")
    with client_for(mock) as client:
        walk_ids(client, "Referral")
        token = client.auth._token.reveal() if client.auth._token else ""
        texts += [repr(client), repr(client.auth), str(client.last_summary)]
        with pytest.raises(NotFound) as info:
            client.read("Patient", "nope")
        texts += [str(info.value), repr(info.value)]
    bad = Client(mock.base_url, mock.client_id, "wrong-secret-xyz", progress=False)
    with bad, pytest.raises(AuthError) as info2:
        bad.read("Patient", "1")
    texts += [str(info2.value), repr(info2.value), caplog.text]
    haystack = "\n".join(texts)
    assert token and token not in haystack
    assert mock.client_secret not in haystack
    assert "wrong-secret-xyz" not in haystack


def test_rate_limited_error_is_typed_when_waits_run_out():
    with serve(seed=0, scale="small", rate_limit=1, test_controls=True) as tiny:
        vt = VirtualTime(tiny)
        policy = RetryPolicy(rate_limit_waits=0)
        with client_for(tiny, retry_policy=policy, clock=vt.clock, sleep=vt.sleep) as client:
            client.throttle.observe = lambda status, headers: None  # ignore remaining=0
            walk_ids(client, "Practitioner")
            with pytest.raises(RateLimited) as info:
                walk_ids(client, "Organization")
    assert info.value.status == 429 and info.value.retry_after is not None


def test_connect_without_configuration_starts_the_embedded_mock(monkeypatch, capsys):
    for name in ("PM_BASE_URL", "PM_REGION", "PM_CLIENT_ID", "PM_CLIENT_SECRET"):
        monkeypatch.delenv(name, raising=False)
    with connect(progress=False) as client:
        assert len(walk_ids(client, "Organization")) > 0
    captured = capsys.readouterr()
    assert captured.out == ""  # a notice, not data: nothing on stdout
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "embedded mock deployment at http://127.0.0.1:" in err[0]
