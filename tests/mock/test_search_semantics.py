"""The mock searches as FHIR servers do, over real loopback HTTP.

The parameters come from ``public-docs-facts.md`` (Patient ``email``, Appointment
``actor``, Slot ``practitioner``, ``practitioner-role``, ``start``, ``end``), the rule
for the others from FHIR: an unsupported parameter is ignored and left out of the
Bundle's ``self`` link, and refused with 400 under ``Prefer: handling=strict``.
Expected answers are computed here from the records the mock serves unfiltered.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.loopback import all_pages
from toolkit.client import Client
from toolkit.errors import IgnoredFilter


def _self(body: dict[str, Any]) -> httpx.URL:
    return httpx.URL(next(x["url"] for x in body["link"] if x["relation"] == "self"))


def _emails(patient: dict[str, Any]) -> list[str]:
    return [t["value"] for t in patient.get("telecom", []) if t.get("system") == "email"]


def test_patient_email_finds_exactly_the_patients_with_it(mock_api: httpx.Client) -> None:
    patients = all_pages(mock_api, "Patient")
    email = next(e for p in patients for e in _emails(p))
    holders = {p["id"] for p in patients if email.lower() in (e.lower() for e in _emails(p))}
    body = mock_api.get("Patient", params={"email": email.upper(), "_count": 1}).json()
    assert body["total"] == len(holders) >= 1
    assert body["entry"][0]["resource"]["id"] in holders
    assert _self(body).params["email"] == email.upper()
    nobody = mock_api.get("Patient", params={"email": "nobody@example.invalid"}).json()
    assert nobody["total"] == 0 and nobody["entry"] == []


def test_appointment_actor_takes_type_and_id(mock_api: httpx.Client) -> None:
    everything = all_pages(mock_api, "Appointment")
    patient = next(
        p["actor"]["reference"].rsplit("/", 1)[-1]
        for a in everything
        for p in a["participant"]
        if "/Patient/" in p["actor"]["reference"]
    )
    expected = {
        a["id"]
        for a in everything
        if any(p["actor"]["reference"].endswith(f"/Patient/{patient}") for p in a["participant"])
    }
    got = all_pages(mock_api, "Appointment", actor=f"Patient/{patient}")
    assert {a["id"] for a in got} == expected
    assert 0 < len(expected) < len(everything)
    role = mock_api.get("PractitionerRole", params={"_count": 1}).json()["entry"][0]["resource"]
    by_role = all_pages(
        mock_api, "Appointment", actor=f"PractitionerRole/{role['id']}", date="ge2026"
    )
    assert by_role and all(
        any(
            p["actor"]["reference"].endswith(f"/PractitionerRole/{role['id']}")
            for p in a["participant"]
        )
        for a in by_role
    )
    # a bare id of a polymorphic reference is refused (facts)
    assert mock_api.get("Appointment", params={"actor": patient}).status_code == 422


def test_slot_window_for_one_role_and_one_practitioner(mock_api: httpx.Client) -> None:
    role = mock_api.get("PractitionerRole", params={"_count": 1}).json()["entry"][0]["resource"]
    practitioner = role["practitioner"]["reference"].rsplit("/", 1)[-1]
    one_day = all_pages(
        mock_api,
        "Slot",
        **{"practitioner-role": role["id"], "start": "ge2026-11-02", "end": "le2026-11-03"},
    )
    assert one_day, "a weekday holds slots"
    first = min(s["start"] for s in one_day)
    lo = httpx.URL(f"http://x/?t={first}").params["t"]
    window = {
        "practitioner-role": f"PractitionerRole/{role['id']}",
        "start": f"ge{lo}",
        "end": f"le{_plus_hours(lo, 3)}",
    }
    body = mock_api.get("Slot", params={**window, "_count": 100}).json()
    slots = [e["resource"] for e in body["entry"]]
    assert body["total"] == len(slots) == 6  # three hours of 30-minute units
    assert all(s["practitionerRole"]["reference"].endswith(role["id"]) for s in slots)
    assert all(lo <= s["start"] and s["end"] <= _plus_hours(lo, 3) for s in slots)
    by_practitioner = mock_api.get(
        "Slot", params={**window, "practitioner-role": None, "practitioner": practitioner}
    ).json()
    assert by_practitioner["total"] == 6


def _plus_hours(instant: str, hours: int) -> str:
    import datetime as dt

    moment = dt.datetime.fromisoformat(instant.replace("Z", "+00:00")) + dt.timedelta(hours=hours)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_an_unsupported_parameter_is_ignored_and_left_out_of_self(mock_api: httpx.Client) -> None:
    plain = mock_api.get("Patient", params={"_count": 5}).json()
    body = mock_api.get("Patient", params={"colour": "red", "family": "", "_count": 5}).json()
    assert body["total"] == plain["total"]  # ignored, as FHIR servers do
    link = _self(body)
    assert "colour" not in link.params and "family" not in link.params
    assert link.params["_count"] == "5"
    for rel in ("next", "last"):
        other = next(x["url"] for x in body["link"] if x["relation"] == rel)
        assert "colour" not in httpx.URL(other).params
    # a supported one stays in self
    assert _self(mock_api.get("Patient", params={"family": "a"}).json()).params["family"] == "a"


@pytest.mark.parametrize("prefer", ["handling=strict", "return=minimal, handling=strict"])
def test_strict_handling_refuses_an_unsupported_parameter(
    mock_api: httpx.Client, prefer: str
) -> None:
    answer = mock_api.get("Patient", params={"colour": "red"}, headers={"Prefer": prefer})
    assert answer.status_code == 400
    outcome = answer.json()
    assert outcome["resourceType"] == "OperationOutcome" and "entry" not in outcome
    assert "colour" in outcome["issue"][0]["diagnostics"]
    supported = mock_api.get("Patient", params={"family": "a"}, headers={"Prefer": prefer})
    assert supported.status_code == 200
    lenient = mock_api.get(
        "Patient", params={"colour": "r"}, headers={"Prefer": "handling=lenient"}
    )
    assert lenient.status_code == 200
    find = mock_api.get(
        "Appointment/$find",
        params={"start": "2026-11-02", "end": "2026-11-03", "duration": 30, "colour": "r"},
        headers={"Prefer": prefer},
    )
    assert find.status_code == 400


def test_a_modifier_a_parameter_does_not_take_is_refused(mock_api: httpx.Client) -> None:
    assert mock_api.get("Slot", params={"status:not": "free"}).status_code == 400
    assert mock_api.get("Patient", params={"family:exact": "Nguyen"}).status_code == 200


def test_the_client_raises_when_the_mock_ignores_a_filter(mock_client: Client) -> None:
    with pytest.raises(IgnoredFilter, match="colour"):
        mock_client.frame("Patient", params={"colour": "red"})
    assert mock_client.frame("Patient", email="nobody@example.invalid").height == 0
    tagged = next(
        t["value"]
        for p in mock_client.records("Patient")
        for t in p.get("telecom", [])
        if t["system"] == "email" and "+" in t["value"]
    )
    # the "+" goes encoded (the vendor's page on request structure), and matches
    found = mock_client.frame("Patient", email=tagged)
    assert found.height == 1
