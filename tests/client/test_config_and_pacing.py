"""Configuration from arguments and environment; client-side pacing."""

from __future__ import annotations

import pytest

import toolkit
from toolkit.client import Client, search_params
from toolkit.config import DEFAULT_USER_AGENT, PmtkConfigWarning, resolve_settings
from toolkit.errors import ConfigurationError
from toolkit.throttle import RetryPolicy, Throttle, parse_retry_after

ENV = ("PM_BASE_URL", "PM_CLIENT_ID", "PM_CLIENT_SECRET", "PM_USER_AGENT", "PM_REGION")


@pytest.fixture
def clean_env(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_missing_base_url_names_the_env_var(clean_env):
    with pytest.raises(ConfigurationError, match="PM_BASE_URL"):
        Client(client_id="a", client_secret="b")


@pytest.mark.parametrize(
    ("missing", "var"), [("id", "PM_CLIENT_ID"), ("secret", "PM_CLIENT_SECRET")]
)
def test_missing_credential_names_the_env_var(clean_env, missing, var):
    kwargs = {"base_url": "https://x.test/main", "client_id": "a", "client_secret": "b"}
    del kwargs["client_id" if missing == "id" else "client_secret"]
    with pytest.raises(ConfigurationError, match=var):
        Client(**kwargs)


def test_settings_come_from_the_environment(clean_env):
    clean_env.setenv("PM_BASE_URL", "https://x.test/main/")
    clean_env.setenv("PM_CLIENT_ID", "id-1")
    clean_env.setenv("PM_CLIENT_SECRET", "sec")
    clean_env.setenv("PM_USER_AGENT", "Acme (it@acme.test)")
    with Client() as client:
        assert client.base_url == "https://x.test/main"
        assert client.user_agent == "Acme (it@acme.test)"
        assert client.auth.token_url == "https://x.test/main/oauth/token"


def test_region_picks_the_regional_address_and_default_user_agent(clean_env):
    with pytest.warns(PmtkConfigWarning, match="PM_USER_AGENT"):
        s = resolve_settings(client_id="a", client_secret="b", region="eu")
    assert s.base_url == "https://eu-api.halaxy.com/main"
    assert s.user_agent == DEFAULT_USER_AGENT
    with pytest.raises(ConfigurationError, match="unknown region"):
        resolve_settings(client_id="a", client_secret="b", region="us")


def test_region_for_country():
    assert toolkit.region_for_country("GB") == "eu"
    assert toolkit.region_for_country("de") == "eu"
    assert toolkit.region_for_country("AU") == "au"
    assert toolkit.region_for_country("US") == "au"
    with pytest.raises(ConfigurationError):
        toolkit.region_for_country("XX")


def test_search_names_map_to_api_parameters():
    assert search_params(
        {"last_updated": "gt2026-01-01T00:00:00Z", "count": 50, "id": {"a"}, "sort": "-date"},
        {"_total": "accurate"},
    ) == {
        "_lastUpdated": "gt2026-01-01T00:00:00Z",
        "_count": "50",
        "_id": "a",
        "_sort": "-date",
        "_total": "accurate",
    }
    assert search_params({"practitioner_role": "PR-1", "emergency": True}) == {
        "practitioner-role": "PR-1",
        "emergency": "true",
    }


def test_count_outside_one_to_hundred_is_refused(fake_api):
    with fake_api.client() as client, pytest.raises(ConfigurationError, match="_count"):
        list(client.pages("Patient", count=500))


def test_sliding_window_waits_for_the_oldest_request(clock):
    throttle = Throttle(3, clock=clock, sleep=clock.sleep)
    for _ in range(3):
        assert throttle.acquire() == 0
        clock.now += 1
    assert throttle.acquire() == pytest.approx(57.0)
    assert throttle.waited == pytest.approx(57.0)


def test_window_widens_by_the_slowest_round_trip_so_the_server_never_sees_one_too_many(clock):
    # The server stamps request 1 on arrival, up to one round trip after we sent it:
    # request 4 must wait that long too, or it lands inside the server's window.
    throttle = Throttle(3, clock=clock, sleep=clock.sleep)
    for trip in (0.4, 0.1, 0.2):
        throttle.acquire()
        throttle.note_round_trip(trip)
        clock.now += 1
    assert throttle.acquire() == pytest.approx(57.4)


def test_round_trip_margin_is_capped_at_one_second(clock):
    throttle = Throttle(1, clock=clock, sleep=clock.sleep)
    throttle.acquire()
    throttle.note_round_trip(30.0)
    assert throttle.acquire() == pytest.approx(61.0)


def test_remaining_zero_holds_until_retry_after(clock):
    throttle = Throttle(500, clock=clock, sleep=clock.sleep)
    throttle.acquire()
    throttle.observe(200, {"x-ratelimit-remaining": "0", "retry-after": "5"})
    assert throttle.acquire() == pytest.approx(5.0)


def test_remaining_zero_without_retry_after_waits_for_own_window(clock):
    throttle = Throttle(500, clock=clock, sleep=clock.sleep)
    throttle.acquire()
    clock.now += 20
    throttle.observe(200, {"x-ratelimit-remaining": "0"})
    assert throttle.acquire() == pytest.approx(40.0)


def test_missing_retry_after_backs_off_growing(clock):
    throttle = Throttle(None, clock=clock, sleep=clock.sleep)
    policy = RetryPolicy()
    pauses = [throttle.on_rate_limited({}, policy) for _ in range(4)]
    assert pauses == [2.0, 4.0, 8.0, 16.0]


def test_retry_after_parsing():
    assert parse_retry_after("12") == 12.0
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after("999") == 120.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


def test_lazy_package_exports():
    assert toolkit.Client is Client
    assert "connect" in dir(toolkit)
    with pytest.raises(AttributeError):
        _ = toolkit.nope


def test_progress_bar_walk_completes_and_summary_is_printable(fake_api, make_bundle):
    import httpx

    fake_api.routes[("GET", "/main/Patient")] = lambda r: httpx.Response(
        200, json=make_bundle(["a", "b"], total=2)
    )
    with fake_api.client(progress=True) as client:
        assert len(list(client.pages("Patient"))) == 1
        assert "2/2 records in 1 pages" in str(client.last_summary)
