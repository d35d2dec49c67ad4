"""$find (free slots as proposed Appointments) and $book (take a slot; 409 when taken)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

WINDOW = {"start": "2026-11-23T00:00:00Z", "end": "2026-11-28T00:00:00Z", "duration": "30"}


def book_body(role: str, start: str, end: str, patient: str = "100001") -> dict[str, Any]:
    return {
        "resourceType": "Parameters",
        "parameter": [
            {
                "name": "appt-resource",
                "resource": {
                    "resourceType": "Appointment",
                    "start": start,
                    "end": end,
                    "participant": [
                        {
                            "actor": {
                                "reference": f"https://mock.example/main/PractitionerRole/{role}",
                                "type": "PractitionerRole",
                            }
                        }
                    ],
                },
            },
            {
                "name": "patient-id",
                "valueReference": {"reference": f"/main/Patient/{patient}", "type": "Patient"},
            },
            {"name": "location-type", "valueCode": "clinic"},
            {"name": "status", "valueCode": "booked"},
        ],
    }


def _first_proposal(client: httpx.Client, **params: str) -> dict[str, Any]:
    bundle = client.get("Appointment/$find", params={**WINDOW, **params}).json()
    proposal: dict[str, Any] = bundle["entry"][0]["resource"]
    return proposal


def _role(proposal: dict[str, Any]) -> str:
    return str(proposal["participant"][0]["actor"]["reference"].rsplit("/", 1)[1])


@pytest.mark.parametrize("missing", ["start", "end", "duration"])
def test_find_without_a_required_parameter_gets_400(mock_api: httpx.Client, missing: str) -> None:
    params = {k: v for k, v in WINDOW.items() if k != missing}
    response = mock_api.get("Appointment/$find", params=params)
    assert response.status_code == 400
    assert response.json()["resourceType"] == "OperationOutcome"


def test_find_proposes_appointments_inside_the_window(mock_api: httpx.Client) -> None:
    bundle = mock_api.get("Appointment/$find", params={**WINDOW, "_count": 100}).json()
    assert bundle["resourceType"] == "Bundle" and bundle["total"] > 0
    for entry in bundle["entry"]:
        appt = entry["resource"]
        assert appt["resourceType"] == "Appointment"
        assert appt["id"].startswith("proposed-") and appt["id"].endswith("-30")
        assert "2026-11-23" <= appt["start"] < "2026-11-28" and appt["minutesDuration"] == 30


def test_find_filters_by_practitioner_role(mock_api: httpx.Client) -> None:
    bundle = mock_api.get(
        "Appointment/$find", params={**WINDOW, "practitioner-role": "PR-6002", "_count": 100}
    ).json()
    assert bundle["total"] > 0
    assert {_role(e["resource"]) for e in bundle["entry"]} == {"PR-6002"}


def test_find_first_available_gives_one_proposal_per_role(mock_api: httpx.Client) -> None:
    bundle = mock_api.get("Appointment/$find", params={**WINDOW, "show": "first-available"}).json()
    roles = [_role(e["resource"]) for e in bundle["entry"]]
    assert roles and len(roles) == len(set(roles))


def test_find_sorts_by_descending_start(mock_api: httpx.Client) -> None:
    bundle = mock_api.get("Appointment/$find", params={**WINDOW, "_sort": "-start"}).json()
    starts = [e["resource"]["start"] for e in bundle["entry"]]
    assert starts == sorted(starts, reverse=True)


def test_book_a_free_slot_answers_201_with_the_appointment(fresh_api: httpx.Client) -> None:
    slot = _first_proposal(fresh_api)
    response = fresh_api.post(
        "Appointment/$book", json=book_body(_role(slot), slot["start"], slot["end"])
    )
    assert response.status_code == 201
    appt = response.json()
    assert appt["start"] == slot["start"] and appt["end"] == slot["end"]
    assert response.headers["location"].endswith(f"/main/Appointment/{appt['id']}")
    assert fresh_api.get(f"Appointment/{appt['id']}").json() == appt


def test_booking_the_same_slot_twice_gets_409(fresh_api: httpx.Client) -> None:
    slot = _first_proposal(fresh_api)
    body = book_body(_role(slot), slot["start"], slot["end"])
    assert fresh_api.post("Appointment/$book", json=body).status_code == 201
    again = fresh_api.post("Appointment/$book", json={**body})
    assert again.status_code == 409
    assert again.json()["resourceType"] == "OperationOutcome"


def test_a_booked_slot_is_no_longer_proposed(fresh_api: httpx.Client) -> None:
    slot = _first_proposal(fresh_api, **{"practitioner-role": "PR-6001"})
    fresh_api.post("Appointment/$book", json=book_body("PR-6001", slot["start"], slot["end"]))
    after = _first_proposal(fresh_api, **{"practitioner-role": "PR-6001"})
    assert after["start"] > slot["start"]


def test_booking_off_the_slot_grid_gets_409(fresh_api: httpx.Client) -> None:
    body = book_body("PR-6001", "2026-11-23T09:10:00Z", "2026-11-23T09:40:00Z")
    assert fresh_api.post("Appointment/$book", json=body).status_code == 409


def test_book_without_parameters_resource_gets_400(mock_api: httpx.Client) -> None:
    response = mock_api.post("Appointment/$book", json={"resourceType": "Appointment"})
    assert response.status_code == 400


def test_book_with_an_unknown_patient_gets_422(mock_api: httpx.Client) -> None:
    slot = _first_proposal(mock_api)
    body = book_body(_role(slot), slot["start"], slot["end"], patient="999")
    assert mock_api.post("Appointment/$book", json=body).status_code == 422


def test_book_without_an_end_gets_422_naming_it(mock_api: httpx.Client) -> None:
    body = book_body("PR-6001", "2026-11-23T09:00:00Z", "2026-11-23T09:30:00Z")
    del body["parameter"][0]["resource"]["end"]
    response = mock_api.post("Appointment/$book", json=body)
    assert response.status_code == 422
    assert response.json()["issue"][0]["expression"] == ["Appointment.end"]
