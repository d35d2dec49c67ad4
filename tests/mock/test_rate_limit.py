"""Sliding-window rate limit of 500 requests per 60 s per client, on the virtual clock."""

from __future__ import annotations

import httpx

from tests.conftest import api_client, token_for
from toolkit.mock import serve


def _exhaust(client: httpx.Client, n: int) -> None:
    for _ in range(n):
        assert client.get("Practitioner", params={"_count": 1}).status_code == 200


def test_authenticated_responses_carry_ratelimit_headers(mock_api: httpx.Client) -> None:
    first = mock_api.get("Organization")
    second = mock_api.get("Organization/PG-1000")
    assert first.headers["x-ratelimit-limit"] == "500"
    assert int(second.headers["x-ratelimit-remaining"]) == (
        int(first.headers["x-ratelimit-remaining"]) - 1
    )


def test_error_responses_after_auth_also_carry_ratelimit_headers(mock_api: httpx.Client) -> None:
    response = mock_api.get("Referral/does-not-exist")
    assert response.status_code == 404
    assert "x-ratelimit-remaining" in response.headers


def test_request_501_within_a_minute_gets_429_with_retry_after(fresh_api: httpx.Client) -> None:
    _exhaust(fresh_api, 500)
    response = fresh_api.get("Practitioner")
    assert response.status_code == 429
    assert response.json()["resourceType"] == "OperationOutcome"
    retry = response.headers["retry-after"]
    assert retry.isdigit() and 1 <= int(retry) <= 60
    assert response.headers["x-ratelimit-remaining"] == "0"


def test_window_slides_forward_with_the_virtual_clock() -> None:
    with serve(rate_limit=5, test_controls=True) as dep, api_client(dep) as client:
        _exhaust(client, 5)
        assert client.get("Practitioner").status_code == 429
        dep.advance_clock(61)
        assert client.get("Practitioner").status_code == 200


def test_retry_after_counts_the_seconds_until_a_slot_frees() -> None:
    with serve(rate_limit=3, test_controls=True) as dep, api_client(dep) as client:
        _exhaust(client, 3)
        dep.advance_clock(20)
        response = client.get("Practitioner")
        assert response.status_code == 429
        assert 39 <= int(response.headers["retry-after"]) <= 41


def test_refused_requests_do_not_extend_the_window() -> None:
    with serve(rate_limit=2, test_controls=True) as dep, api_client(dep) as client:
        _exhaust(client, 2)
        for _ in range(5):
            assert client.get("Practitioner").status_code == 429
        dep.advance_clock(60.5)
        assert client.get("Practitioner").status_code == 200


def test_token_endpoint_is_not_rate_limited() -> None:
    with serve(rate_limit=2, test_controls=True) as dep:
        for _ in range(5):
            token_for(dep)


def test_rate_limit_reset_control_empties_the_window() -> None:
    with serve(rate_limit=2, test_controls=True) as dep, api_client(dep) as client:
        _exhaust(client, 2)
        assert client.get("Practitioner").status_code == 429
        dep.reset_rate_limit()
        assert client.get("Practitioner").status_code == 200
