"""Fault sequences the mock deployment cannot produce, scripted with httpx.MockTransport."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from toolkit.errors import (
    ApiError,
    ApiValidationError,
    AuthError,
    IncompleteResult,
    NotFound,
    OutcomeUnknown,
    PagingLoop,
    RateLimited,
    ServerError,
    TransportError,
)

BASE = "https://api.test/main"


def ok_patient(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"resourceType": "Patient", "id": "1"})


def test_expired_token_is_refreshed_once_and_request_replayed(fake_api, make_outcome):
    def patient(request: httpx.Request) -> httpx.Response:
        if request.headers["Authorization"] == "Bearer tok-never-shown-1":
            return make_outcome(401, "expired", "token expired")
        return ok_patient(request)

    fake_api.routes[("GET", "/main/Patient/1")] = patient
    with fake_api.client() as client:
        assert client.read("Patient", "1")["id"] == "1"
    assert fake_api.token_requests == 2
    assert fake_api.count("GET") == 2


def test_persistent_401_is_replayed_only_once(fake_api, make_outcome):
    fake_api.routes[("GET", "/main/Patient/1")] = lambda r: make_outcome(401, "login", "no")
    with fake_api.client() as client, pytest.raises(AuthError) as info:
        client.read("Patient", "1")
    assert info.value.status == 401
    assert info.value.code == "login"
    assert fake_api.count("GET") == 2
    assert fake_api.token_requests == 2


def test_token_is_reused_until_fifteen_minutes_minus_margin(fake_api, clock):
    fake_api.routes[("GET", "/main/Patient/1")] = ok_patient
    with fake_api.client(clock=clock, sleep=clock.sleep) as client:
        client.read("Patient", "1")
        clock.now += 839  # min(3600, 900) - 60 = 840 s of use
        client.read("Patient", "1")
        assert fake_api.token_requests == 1
        clock.now += 2
        client.read("Patient", "1")
        assert fake_api.token_requests == 2


def test_wrong_secret_raises_auth_error_naming_the_token_endpoint(fake_api, make_outcome):
    with fake_api.client() as client:
        client.auth.token_url = f"{BASE}/nope"  # the fake answers 404 with an outcome
        fake_api.routes[("POST", "/main/nope")] = lambda r: make_outcome(401, "login", "bad")
        with pytest.raises(AuthError, match="/main/nope"):
            client.read("Patient", "1")


def test_429_with_http_date_retry_after_is_waited_out(fake_api, clock, make_outcome):
    calls = {"n": 0}

    def patient(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] == 1:
            when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
            return make_outcome(429, "throttled", "slow down", headers={"retry-after": when})
        return ok_patient(request)

    fake_api.routes[("GET", "/main/Patient/1")] = patient
    with fake_api.client(clock=clock, sleep=clock.sleep) as client:
        client.read("Patient", "1")
        assert client.throttle.rate_limited == 1
    assert 27 <= sum(clock.slept) <= 31
    assert fake_api.count("GET") == 2


def test_429_with_seconds_retry_after_is_capped(fake_api, clock, make_outcome):
    calls = {"n": 0}

    def patient(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] == 1:
            return make_outcome(429, "throttled", "x", headers={"retry-after": "86400"})
        return ok_patient(request)

    fake_api.routes[("GET", "/main/Patient/1")] = patient
    with fake_api.client(clock=clock, sleep=clock.sleep) as client:
        client.read("Patient", "1")
    assert sum(clock.slept) == pytest.approx(120.0)


def test_endless_429_raises_rate_limited_after_bounded_waits(fake_api, clock, make_outcome):
    fake_api.routes[("GET", "/main/Patient/1")] = lambda r: make_outcome(
        429, "throttled", "x", headers={"retry-after": "3"}
    )
    with fake_api.client(clock=clock, sleep=clock.sleep) as client:
        with pytest.raises(RateLimited) as info:
            client.read("Patient", "1")
        waits = client.retry_policy.rate_limit_waits
    assert info.value.retry_after == 3.0
    # Every 429 but the last is waited out (retry-after: 3) before the next try; a
    # RateLimited that survived its waits is not retried again by the backoff.
    assert fake_api.count("GET") == waits + 1
    assert clock.slept == [3.0] * waits


def test_503_sequence_is_retried_until_success(fake_api, make_outcome):
    calls = {"n": 0}

    def patient(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        return make_outcome(503, "transient", "busy") if calls["n"] < 4 else ok_patient(request)

    fake_api.routes[("GET", "/main/Patient/1")] = patient
    with fake_api.client() as client:
        assert client.read("Patient", "1")["id"] == "1"
    assert fake_api.count("GET") == 4


def test_503_forever_exhausts_bounded_attempts_and_raises_server_error(fake_api, make_outcome):
    fake_api.routes[("GET", "/main/Patient/1")] = lambda r: make_outcome(503, "transient", "down")
    with fake_api.client() as client, pytest.raises(ServerError) as info:
        client.read("Patient", "1")
    assert info.value.status == 503
    assert info.value.diagnostics == "down"
    assert fake_api.count("GET") == 6


def test_500_is_not_retried(fake_api, make_outcome):
    fake_api.routes[("GET", "/main/Patient/1")] = lambda r: make_outcome(500, "exception", "bug")
    with fake_api.client() as client, pytest.raises(ServerError):
        client.read("Patient", "1")
    assert fake_api.count("GET") == 1


def test_post_read_timeout_is_outcome_unknown_and_sent_once(fake_api):
    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    fake_api.routes[("POST", "/main/Organization")] = timeout
    with fake_api.client() as client, pytest.raises(OutcomeUnknown, match="outcome is unknown"):
        client.create("Organization", {"name": "Smith Physio"})
    assert fake_api.count("POST", "/main/Organization") == 1


def test_post_503_is_outcome_unknown_and_not_retried(fake_api, make_outcome):
    fake_api.routes[("POST", "/main/Organization")] = lambda r: make_outcome(503, "x", "busy")
    with fake_api.client() as client, pytest.raises(OutcomeUnknown):
        client.create("Organization", {"name": "Smith Physio"})
    assert fake_api.count("POST") == 1


def test_post_connect_error_is_retried_because_nothing_was_sent(fake_api):
    calls = {"n": 0}

    def flaky(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] == 1:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(201, json={"resourceType": "Organization", "id": "SP-1"})

    fake_api.routes[("POST", "/main/Organization")] = flaky
    with fake_api.client() as client:
        assert client.create("Organization", {"name": "Smith Physio"})["id"] == "SP-1"
    assert calls["n"] == 2


def test_post_429_is_waited_out_and_resent(fake_api, clock, make_outcome):
    calls = {"n": 0}

    def limited(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] == 1:
            return make_outcome(429, "throttled", "x", headers={"retry-after": "2"})
        return httpx.Response(201, json={"resourceType": "Organization", "id": "SP-2"})

    fake_api.routes[("POST", "/main/Organization")] = limited
    with fake_api.client(clock=clock, sleep=clock.sleep) as client:
        assert client.create("Organization", {"name": "Smith Physio"})["id"] == "SP-2"
    assert clock.slept == [2.0]


def test_get_read_timeouts_exhaust_into_transport_error(fake_api):
    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    fake_api.routes[("GET", "/main/Patient/1")] = timeout
    with fake_api.client() as client, pytest.raises(TransportError, match="6 attempt"):
        client.read("Patient", "1")
    assert fake_api.count("GET") == 6


def test_operation_outcome_becomes_typed_error_with_code_and_diagnostics(fake_api):
    with fake_api.client() as client, pytest.raises(NotFound) as info:
        client.read("Patient", "404")
    assert info.value.code == "not-found"
    assert "GET /main/Patient/404" in info.value.diagnostics
    assert isinstance(info.value, KeyError)


def test_relative_and_absolute_next_links_are_followed(fake_api, make_bundle):
    def pages(request: httpx.Request) -> httpx.Response:
        page = request.url.params.get("page", "1")
        if page == "1":
            assert request.url.params["_count"] == "100"
            body = make_bundle(["a", "b"], total=5, next_url="/main/Patient?page=2")
        elif page == "2":
            body = make_bundle(["c", "d"], total=5, next_url="Patient?page=3")
        else:
            body = make_bundle(["e"], total=5)
        return httpx.Response(200, json=body)

    fake_api.routes[("GET", "/main/Patient")] = pages
    with fake_api.client() as client:
        ids = [r["id"] for r in client.records("Patient")]
        summary = client.last_summary
    assert ids == ["a", "b", "c", "d", "e"]
    assert summary is not None and summary.complete and summary.pages == 3
    assert summary.total == 5


def test_next_link_back_to_a_read_page_raises_paging_loop(fake_api, make_bundle):
    def pages(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("page") == "2":
            body = make_bundle(["c"], total=9, next_url=f"{BASE}/Patient?_count=100")
        else:
            body = make_bundle(["a", "b"], total=9, next_url=f"{BASE}/Patient?page=2")
        return httpx.Response(200, json=body)

    fake_api.routes[("GET", "/main/Patient")] = pages
    with fake_api.client() as client, pytest.raises(PagingLoop):
        list(client.pages("Patient"))


def test_page_repeating_every_id_raises_paging_loop(fake_api, make_bundle):
    def pages(request: httpx.Request) -> httpx.Response:
        page = int(request.url.params.get("page", "1"))
        return httpx.Response(
            200,
            json=make_bundle(["a", "b"], total=9, next_url=f"Patient?page={page + 1}"),
        )

    fake_api.routes[("GET", "/main/Patient")] = pages
    with fake_api.client() as client, pytest.raises(PagingLoop):
        list(client.pages("Patient"))
    assert fake_api.count("GET") == 2


def test_duplicate_ids_across_pages_raise_incomplete_result(fake_api, make_bundle):
    def pages(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("page") == "2":
            return httpx.Response(200, json=make_bundle(["b", "c"], total=4))
        body = make_bundle(["a", "b"], total=4, next_url="Patient?page=2")
        return httpx.Response(200, json=body)

    fake_api.routes[("GET", "/main/Patient")] = pages
    # b moved without a newer version and c's slot has no record: recovery
    # (changed since the start, then a count of the unchanged) cannot fill it.
    with fake_api.client() as client, pytest.raises(IncompleteResult, match="still lacks"):
        list(client.records("Patient"))


def test_walk_short_of_bundle_total_raises_incomplete_result(fake_api, make_bundle):
    fake_api.routes[("GET", "/main/Patient")] = lambda r: httpx.Response(
        200, json=make_bundle(["a", "b"], total=7)
    )
    with fake_api.client() as client, pytest.raises(IncompleteResult) as info:
        list(client.pages("Patient"))
    assert (info.value.expected, info.value.received) == (7, 2)


def test_error_answer_mid_walk_raises_instead_of_stopping(fake_api, make_bundle, make_outcome):
    def pages(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("page") == "2":
            return make_outcome(400, "invalid", "bad page")
        return httpx.Response(200, json=make_bundle(["a"], next_url="Patient?page=2"))

    fake_api.routes[("GET", "/main/Patient")] = pages
    with fake_api.client() as client:
        walk = client.pages("Patient")
        next(walk)
        with pytest.raises(ApiValidationError, match="bad page"):
            next(walk)


def test_operation_outcome_with_200_is_an_error_not_an_empty_list(fake_api, make_outcome):
    fake_api.routes[("GET", "/main/Patient")] = lambda r: make_outcome(200, "processing", "oops")
    with fake_api.client() as client, pytest.raises(ApiError, match="oops"):
        list(client.records("Patient"))


def test_dropped_connection_mid_page_is_retried_without_duplicates(fake_api, make_bundle):
    calls = {"n": 0}

    def pages(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] == 2:
            raise httpx.RemoteProtocolError("peer closed connection", request=request)
        if calls["n"] == 3:
            return httpx.Response(200, content=b'{"resourceType": "Bundle", "entr')
        page = request.url.params.get("page", "1")
        if page == "1":
            return httpx.Response(200, json=make_bundle(["a"], total=2, next_url="Patient?page=2"))
        return httpx.Response(200, json=make_bundle(["b"], total=2))

    fake_api.routes[("GET", "/main/Patient")] = pages
    with fake_api.client() as client:
        assert [r["id"] for r in client.records("Patient")] == ["a", "b"]
        summary = client.last_summary
    assert summary is not None and summary.retries == 2 and summary.requests == 4


def test_eight_threads_share_one_token_fetch(fake_api):
    fake_api.token_delay = 0.05
    fake_api.routes[("GET", "/main/Patient/1")] = ok_patient
    barrier = threading.Barrier(8)
    failures: list[BaseException] = []
    with fake_api.client() as client:

        def work() -> None:
            try:
                barrier.wait()
                client.read("Patient", "1")
            except BaseException as exc:  # collected and asserted below
                failures.append(exc)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert failures == []
    assert fake_api.token_requests == 1
    assert fake_api.count("GET") == 8


def test_eight_threads_after_a_401_refresh_once(fake_api, make_outcome):
    fake_api.token_delay = 0.02

    def patient(request: httpx.Request) -> httpx.Response:
        if request.headers["Authorization"] == "Bearer tok-never-shown-1":
            return make_outcome(401, "expired", "token expired")
        return ok_patient(request)

    fake_api.routes[("GET", "/main/Patient/1")] = patient
    fake_api.routes[("GET", "/main/Patient/0")] = ok_patient
    with fake_api.client() as client:
        # Prime with the first token, then let eight threads meet its refusal together.
        client.read("Patient", "0")
        barrier = threading.Barrier(8)
        errors: list[BaseException] = []

        def work() -> None:
            try:
                barrier.wait()
                client.read("Patient", "1")
            except BaseException as exc:  # collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert fake_api.token_requests == 2
