"""Test controls under /main/_test (off unless test_controls=True) and FAULT_PROFILES."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import USER_AGENT, api_client
from toolkit import catalogue
from toolkit.errors import ConfigurationError
from toolkit.mock import FAULT_PROFILES, Deployment, Fault, serve

H = {"User-Agent": USER_AGENT}


def test_every_fault_profile_is_named_described_and_categorised() -> None:
    categories = set(catalogue.CONTRACT_CATEGORIES) | {None}
    for name, cls in FAULT_PROFILES.items():
        assert cls.name == name and cls.description and cls.category in categories, name


def test_a_fault_name_may_not_be_taken_twice() -> None:
    with pytest.raises(TypeError, match="unique name"):
        type("Again", (Fault,), {"name": "paging-loop"})
    assert FAULT_PROFILES["paging-loop"].__name__ == "PagingLoop"


def test_test_controls_are_404_unless_enabled() -> None:
    with serve() as dep:
        assert httpx.get(f"{dep.base_url}/_test/stats", headers=H).status_code == 404
        response = httpx.post(f"{dep.base_url}/_test/clock", json={"advance": 5}, headers=H)
        assert response.status_code == 404
        with pytest.raises(ConfigurationError):
            dep.advance_clock(5)


def test_clock_control_advances_the_virtual_clock(fresh_mock: Deployment) -> None:
    first = httpx.post(f"{fresh_mock.base_url}/_test/clock", json={"advance": 100}, headers=H)
    second = httpx.post(f"{fresh_mock.base_url}/_test/clock", json={"advance": 50}, headers=H)
    assert first.status_code == 200
    assert second.json()["offset"] == 150
    assert second.json()["now"] >= first.json()["now"]


def test_clock_control_rejects_a_non_number(fresh_mock: Deployment) -> None:
    response = httpx.post(f"{fresh_mock.base_url}/_test/clock", json={"advance": "x"}, headers=H)
    assert response.status_code == 400


def test_fault_control_switches_and_reports_profiles(fresh_mock: Deployment) -> None:
    url = f"{fresh_mock.base_url}/_test/fault"
    assert httpx.put(url, json={"profile": "wrong-content-type"}, headers=H).status_code == 200
    state = httpx.get(url, headers=H).json()
    assert state["profile"] == "wrong-content-type"
    assert set(state["profiles"]) == set(FAULT_PROFILES)
    with api_client(fresh_mock) as client:
        assert client.get("Patient").headers["content-type"] == "application/json"
        httpx.put(url, json={"profile": None}, headers=H)
        assert client.get("Patient").headers["content-type"].startswith("application/fhir+json")


def test_fault_control_rejects_an_unknown_profile(fresh_mock: Deployment) -> None:
    url = f"{fresh_mock.base_url}/_test/fault"
    assert httpx.put(url, json={"profile": "gremlins"}, headers=H).status_code == 400


def test_unknown_fault_at_start_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError), serve(fault="gremlins"):
        pass


def test_stats_count_api_requests_but_not_controls(fresh_mock: Deployment) -> None:
    base = fresh_mock.base_url
    httpx.post(f"{base}/_test/stats/reset", headers=H)
    with api_client(fresh_mock) as client:  # one token request
        client.get("Patient")
        client.get("Referral/nope")
    stats = httpx.get(f"{base}/_test/stats", headers=H).json()
    assert stats["requests"] == 3
    assert stats["responses_by_status"] == {"200": 2, "404": 1}
    assert stats["requests_by_path"]["/main/Patient"] == 1
    assert fresh_mock.stats() == stats


def test_rate_limit_reset_control_over_http() -> None:
    with serve(rate_limit=1, test_controls=True) as dep, api_client(dep) as client:
        client.get("Patient")
        assert client.get("Patient").status_code == 429
        httpx.post(f"{dep.base_url}/_test/rate-limit/reset", headers=H)
        assert client.get("Patient").status_code == 200
