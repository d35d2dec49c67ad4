"""Slots: the grid $find draws from, as records that follow every booking and cancel."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import httpx

from tests.conftest import USER_AGENT
from tests.mock.test_booking import book_body
from tests.mock.test_referenced_resources import every_record as _all
from tests.mock.test_shapes import LIVE_HOST
from toolkit.mock import Deployment

WINDOW = {"start": "2026-11-23T00:00:00Z", "end": "2026-11-28T00:00:00Z"}
MERGE = {"Content-Type": "application/merge-patch+json"}


def _key(resource: dict[str, Any], actor: dict[str, Any]) -> tuple[str, str]:
    start = dt.datetime.fromisoformat(resource["start"]).astimezone(dt.UTC)
    return actor["reference"].rsplit("/", 1)[-1], start.isoformat()


def test_every_weekday_unit_of_every_group_role_is_a_slot(mock_api: httpx.Client) -> None:
    roles = [r["id"] for r in _all(mock_api, "PractitionerRole") if r["id"].startswith("PR-")]
    first = mock_api.get("Slot", params={"_count": 1, "_sort": "start"}).json()
    weekdays = sum(
        1 for d in range(61) if (dt.date(2026, 11, 1) + dt.timedelta(days=d)).weekday() < 5
    )
    assert first["total"] == weekdays * 16 * len(roles)
    slot = first["entry"][0]["resource"]
    # the earliest: 09:00 on Monday 2 November in Sydney (daylight saving, UTC+11),
    # the easternmost clinic's clock
    assert slot["start"] == "2026-11-01T22:00:00Z" and slot["end"] == "2026-11-01T22:30:00Z"
    assert mock_api.get(f"Slot/{slot['id']}").json() == slot


def test_the_free_slots_are_exactly_what_find_proposes(mock_api: httpx.Client) -> None:
    window = {**WINDOW, "duration": "30"}
    proposals = _all(mock_api, "Appointment/$find", **window)
    proposed = {_key(p, p["participant"][0]["actor"]) for p in proposals}
    slots = _all(mock_api, "Slot", status="free", start=f"ge{WINDOW['start']}")
    free = {_key(s, s["practitionerRole"]) for s in slots if s["start"] < WINDOW["end"]}
    assert proposed and free == proposed
    busy = _all(mock_api, "Slot", status="busy", start=f"ge{WINDOW['start']}")
    assert busy and not {_key(s, s["practitionerRole"]) for s in busy} & proposed


def test_booking_turns_its_slots_busy_and_cancelling_frees_them_as_new_writes(
    fresh_api: httpx.Client,
) -> None:
    role = "PR-6001"
    find = {**WINDOW, "duration": "60", "practitioner-role": role}
    first = fresh_api.get("Appointment/$find", params=find).json()["entry"][0]["resource"]
    before = time.time() - 1
    since = {"_lastUpdated": f"ge{dt.datetime.fromtimestamp(before, dt.UTC).isoformat()}"}
    assert _all(fresh_api, "Slot", **since) == []

    booked = fresh_api.post("Appointment/$book", json=book_body(role, first["start"], first["end"]))
    assert booked.status_code == 201, booked.text
    changed = _all(fresh_api, "Slot", **since)
    start = int(dt.datetime.fromisoformat(first["start"]).timestamp())
    assert [s["id"] for s in changed] == [f"{role}-{start}", f"{role}-{start + 1800}"]
    assert all(s["status"] == "busy" for s in changed)
    page = fresh_api.get("Slot", params={"_count": 100}).json()
    assert page["total"] == len(_all(fresh_api, "Slot", **{"_total": "accurate"}))

    patch = {
        "participant": [
            {
                "actor": {"reference": f"{LIVE_HOST}/Patient/100001", "type": "Patient"},
                "modifierExtension": [
                    {"url": "appointment-participant-status", "valueCode": "cancelled"}
                ],
            }
        ]
    }
    appt = booked.json()["id"]
    response = fresh_api.patch(f"Appointment/{appt}", json=patch, headers=MERGE)
    assert response.status_code == 200, response.text
    again = _all(fresh_api, "Slot", **since)
    assert [s["id"] for s in again] == [s["id"] for s in changed]
    assert all(s["status"] == "free" for s in again)
    assert all(
        s["meta"]["lastUpdated"] >= c["meta"]["lastUpdated"]
        for s, c in zip(again, changed, strict=True)
    )


def test_deleting_a_booked_appointment_frees_its_slots_by_either_control(
    fresh_mock: Deployment, fresh_api: httpx.Client
) -> None:
    """The state frees the slot with the app's reading of the appointment, which both
    deletes pass in: ``Deployment.delete`` and the HTTP control."""
    role = "PR-6001"
    find = {**WINDOW, "duration": "30", "practitioner-role": role}
    offers = fresh_api.get("Appointment/$find", params=find).json()["entry"]

    def book(offer: dict[str, Any]) -> tuple[str, str]:
        first = offer["resource"]
        booked = fresh_api.post(
            "Appointment/$book", json=book_body(role, first["start"], first["end"])
        )
        assert booked.status_code == 201, booked.text
        start = int(dt.datetime.fromisoformat(first["start"]).timestamp())
        slot = f"{role}-{start}"
        assert fresh_api.get(f"Slot/{slot}").json()["status"] == "busy"
        return booked.json()["id"], slot

    appt, slot = book(offers[0])
    fresh_mock.delete("Appointment", [appt])
    assert fresh_api.get(f"Slot/{slot}").json()["status"] == "free"

    appt, slot = book(offers[1])
    deleted = httpx.post(
        f"{fresh_mock.base_url}/_test/delete",
        json={"type": "Appointment", "ids": [appt]},
        headers={"User-Agent": USER_AGENT},
    )
    assert deleted.status_code == 200, deleted.text
    assert fresh_api.get(f"Slot/{slot}").json()["status"] == "free"


def test_slots_search_by_status_and_sort_by_start(mock_api: httpx.Client) -> None:
    page = mock_api.get("Slot", params={"status": "busy", "_sort": "-start", "_count": 50}).json()
    starts = [e["resource"]["start"] for e in page["entry"]]
    assert starts == sorted(starts, reverse=True)
    assert {e["resource"]["status"] for e in page["entry"]} == {"busy"}
    both = mock_api.get("Slot", params={"status": "busy,free", "_count": 1}).json()["total"]
    assert both == mock_api.get("Slot", params={"_count": 1}).json()["total"]
