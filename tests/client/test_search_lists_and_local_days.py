"""A list repeats its search parameter (FHIR: AND); a practice's local day is two bounds.

FHIR reads ``date=ge2026-11-02&date=lt2026-11-09`` as the week and
``date=ge2026-11-02,lt2026-11-09`` as *any* of two open ranges (which servers refuse).
The expected rows are worked out here from the whole Appointment list with plain
Python (``zoneinfo``), not with pmtk's own date code.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest

import toolkit
from toolkit.client import Client
from toolkit.errors import ConfigurationError, TimeZoneError
from toolkit.listing import search_pairs, search_params

SYDNEY = zoneinfo.ZoneInfo("Australia/Sydney")


def _starts(client: Client, **search: object) -> dict[str, dt.datetime]:
    frame = client.frame("Appointment", **search)
    return dict(zip(frame["id"].to_list(), frame["start"].to_list(), strict=True))


@pytest.fixture(scope="module")
def every_start(mock_client: Client) -> dict[str, dt.datetime]:
    return _starts(mock_client)


def test_a_list_of_bounds_selects_the_week_both_bounds_applied(
    mock_client: Client, every_start: dict[str, dt.datetime]
) -> None:
    low = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
    high = dt.datetime(2026, 11, 9, tzinfo=dt.UTC)
    expected = {i for i, start in every_start.items() if low <= start < high}
    assert expected and len(expected) < len(every_start)
    got = _starts(mock_client, date=["ge2026-11-02", "lt2026-11-09"])
    assert set(got) == expected
    assert set(_starts(mock_client, date=("ge2026-11-02", "lt2026-11-09"))) == expected


def test_local_day_selects_the_practices_own_day(
    mock_client: Client, every_start: dict[str, dt.datetime]
) -> None:
    day = dt.date(2026, 11, 3)
    expected = {i for i, s in every_start.items() if s.astimezone(SYDNEY).date() == day}
    utc_day = {i for i, s in every_start.items() if s.date() == day}
    assert expected and expected != utc_day  # the mock works 09:00-17:00 UTC: 20:00-04:00 there
    got = _starts(mock_client, date=toolkit.local_day("2026-11-03", tz="Australia/Sydney"))
    assert set(got) == expected
    # date="2026-11-03" is the UTC day, as docs/client.md says.
    assert set(_starts(mock_client, date="2026-11-03")) == utc_day


def test_local_day_takes_pm_timezone_and_refuses_without_a_zone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.chdir(tmp_path)  # no .env here
    monkeypatch.setenv("PM_TIMEZONE", "Australia/Perth")  # UTC+8, no daylight saving
    assert toolkit.local_day(dt.date(2026, 1, 15)) == [
        "ge2026-01-14T16:00:00Z",
        "lt2026-01-15T16:00:00Z",
    ]
    monkeypatch.delenv("PM_TIMEZONE")
    with pytest.raises(TimeZoneError, match="pass tz="):
        toolkit.local_day("2026-01-15")
    with pytest.raises(TimeZoneError, match="'Sydney' is not an IANA"):
        toolkit.local_day("2026-01-15", tz="Sydney")
    with pytest.raises(ConfigurationError, match="calendar day"):
        toolkit.local_day(dt.datetime(2026, 1, 15, tzinfo=dt.UTC), tz="UTC")  # type: ignore[arg-type]


def test_a_list_repeats_a_set_ors_an_empty_list_is_refused() -> None:
    assert search_pairs({"date": ["ge2026-11-02", "lt2026-11-09"], "id": {"PT-1"}}) == [
        ("date", "ge2026-11-02"),
        ("date", "lt2026-11-09"),
        ("_id", "PT-1"),
    ]
    # A record has one id: a list of ids is any of them, never all of them (nothing).
    assert search_pairs({"ids": ["PT-1", "PT-2"]}) == [("_id", "PT-1,PT-2")]
    with pytest.raises(ConfigurationError, match="empty list"):
        search_pairs({"date": []})
    with pytest.raises(ConfigurationError, match="empty list"):
        search_pairs({"ids": []})
    with pytest.raises(ConfigurationError, match="search_pairs"):
        search_params({"date": ["ge2026-11-02", "lt2026-11-09"]})


def test_request_and_params_repeat_a_list_too() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/oauth/token"):
            return httpx.Response(200, json={"access_token": "t", "expires_in": 900})
        return httpx.Response(200, json={"resourceType": "Bundle", "entry": []})

    client = Client(
        "https://api.test/main", "id", "secret",
        transport=httpx.MockTransport(handler), progress=False,
    )  # fmt: skip
    with client:
        client.request("GET", "Appointment", params={"date": ["ge2026-11-02", "lt2026-11-09"]})
        list(client.pages("Appointment", params={"date": ["ge2026-11-02", "lt2026-11-09"]}))
    queries = [parse_qsl(urlsplit(str(r.url)).query) for r in seen if "Appointment" in r.url.path]
    for query in queries:
        assert [v for k, v in query if k == "date"] == ["ge2026-11-02", "lt2026-11-09"]
