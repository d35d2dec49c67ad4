"""Search keywords, tables, resource types and options are checked before any request."""

from __future__ import annotations

import httpx
import pytest

from toolkit.client import Client
from toolkit.errors import ConfigurationError, UnknownName


def _offline_client(seen: list[httpx.Request]) -> Client:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(500)

    return Client(
        "https://api.test/main",
        "id",
        "secret",
        transport=httpx.MockTransport(handler),
        progress=False,
    )


@pytest.mark.parametrize(
    ("call", "suggestion"),
    [
        (lambda c: c.frame("Appointment", dates="ge2026-11-01"), "did you mean 'date'"),
        (lambda c: c.frame("Appointment", pateint="123"), "did you mean 'patient'"),
        (lambda c: list(c.records("Referral", subjet="Patient/1")), "did you mean 'subject'"),
        (lambda c: list(c.pages("Coverage", last_update="gt2026")), "did you mean 'last_updated'"),
        (lambda c: c.frame("Apointment"), "did you mean 'Appointment'"),
        (lambda c: c.frame("Appointment", table="participant"), "appointment_participant"),
        (lambda c: c.read("Referal", "1"), "did you mean 'Referral'"),
    ],
)
def test_a_near_miss_is_refused_before_any_request(call, suggestion: str) -> None:
    seen: list[httpx.Request] = []
    with _offline_client(seen) as client, pytest.raises(UnknownName, match=suggestion):
        call(client)
    assert seen == []  # not even a token request


def test_an_unknown_name_is_a_configuration_error_and_a_key_error() -> None:
    seen: list[httpx.Request] = []
    with _offline_client(seen) as client, pytest.raises(UnknownName) as info:
        client.frame("Appointment", dates="ge2026-11-01")
    assert isinstance(info.value, ConfigurationError)
    assert isinstance(info.value, KeyError)
    assert "(known: " in str(info.value) and not str(info.value).startswith('"')


def test_a_bad_errors_option_is_refused_before_the_walk() -> None:
    seen: list[httpx.Request] = []
    with _offline_client(seen) as client, pytest.raises(ConfigurationError, match="errors="):
        client.frame("Referral", errors="ignore")  # type: ignore[arg-type]
    assert seen == []


def test_raw_params_pass_unchecked_as_the_escape_hatch(mock_client: Client) -> None:
    some = mock_client.frame("Appointment", date="ge2026-11-01")
    same = mock_client.frame("Appointment", params={"date": "ge2026-11-01"})
    everything = mock_client.frame("Appointment")
    assert some.height == same.height
    assert 0 < some.height < everything.height
