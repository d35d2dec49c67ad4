"""Clinic hours on each clinic's own clock, over real loopback HTTP.

A role works weekdays 09:00 to 17:00 where its clinic is. The clinic's time zone is
found here the way a reader finds it, from the address the mock serves
(``toolkit.analysis.clock.zone_for_address``), not from the mock's own table; every
Slot, every appointment and every ``$find`` proposal must then fall inside those
hours, and the clinics of different zones must open at different UTC times.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo

import httpx

from tests.conftest import MockVisits
from tests.loopback import all_pages
from toolkit.analysis.clock import zone_for_address


def _tail(reference: dict[str, Any]) -> str:
    return str(reference["reference"]).rsplit("/", 1)[-1]


def role_zones(api: httpx.Client) -> dict[str, ZoneInfo]:
    """Each group role's time zone, from its clinic's served address."""
    clinics = {
        o["id"]: o["address"][0]
        for o in all_pages(api, "Organization")
        if o["id"].startswith("CL-")
    }
    out: dict[str, ZoneInfo] = {}
    for role in all_pages(api, "PractitionerRole"):
        if "organization" in role and _tail(role["organization"]) in clinics:
            addr = clinics[_tail(role["organization"])]
            out[role["id"]] = ZoneInfo(zone_for_address(addr.get("state"), addr.get("country")))
    return out


def _local(instant: str, zone: ZoneInfo) -> dt.datetime:
    return dt.datetime.fromisoformat(instant.replace("Z", "+00:00")).astimezone(zone)


def _in_hours(start: str, end: str, zone: ZoneInfo) -> bool:
    lo, hi = _local(start, zone), _local(end, zone)
    opens = lo.replace(hour=9, minute=0, second=0)
    closes = lo.replace(hour=17, minute=0, second=0)
    return lo.weekday() < 5 and opens <= lo and hi <= closes and lo.date() == hi.date()


def test_slots_and_appointments_fall_in_their_clinics_local_hours(mock_api: httpx.Client) -> None:
    zones = role_zones(mock_api)
    assert {z.key for z in zones.values()} >= {
        "Australia/Sydney",
        "Australia/Brisbane",
        "Australia/Perth",
    }
    appointments = all_pages(mock_api, "Appointment")
    outside = []
    for a in appointments:
        role = next(
            _tail(p["actor"])
            for p in a["participant"]
            if "PractitionerRole" in p["actor"]["reference"]
        )
        if not _in_hours(a["start"], a["end"], zones[role]):
            outside.append((a["id"], role, a["start"]))
    assert appointments and outside == []
    week = {"start": "ge2026-11-23T00:00:00Z", "end": "le2026-11-28T00:00:00Z"}
    slots = all_pages(mock_api, "Slot", **week)
    assert slots
    for s in slots:
        assert _in_hours(s["start"], s["end"], zones[_tail(s["practitionerRole"])]), s


def test_find_proposes_only_working_hours_on_each_clock(mock_api: httpx.Client) -> None:
    zones = role_zones(mock_api)
    proposals = all_pages(
        mock_api,
        "Appointment/$find",
        start="2026-11-20T00:00:00Z",
        end="2026-11-24T00:00:00Z",
        duration=60,
    )
    assert proposals
    for p in proposals:
        assert _in_hours(p["start"], p["end"], zones[_tail(p["participant"][0]["actor"])]), p
    # no night slots: nothing proposed at 03:00 in Sydney (16:00 UTC the day before)
    sydney = [r for r, z in zones.items() if z.key == "Australia/Sydney"]
    night = all_pages(
        mock_api,
        "Appointment/$find",
        start="2026-11-23T14:00:00Z",
        end="2026-11-23T20:00:00Z",
        duration=30,
        **{"practitioner-role": sydney[0]},
    )
    assert night == []


def test_clinics_in_different_zones_open_at_different_utc_times(mock_api: httpx.Client) -> None:
    zones = role_zones(mock_api)
    first_open: dict[str, str] = {}
    for key in ("Australia/Sydney", "Australia/Perth"):
        role = next(r for r, z in zones.items() if z.key == key)
        slot = mock_api.get(
            "Slot",
            params={
                "practitioner-role": role,
                "_sort": "start",
                "_count": 1,
                "start": "ge2026-11-22T12:00:00Z",
            },
        ).json()["entry"][0]["resource"]
        first_open[key] = slot["start"]
    # Monday 23 November 09:00: Sydney is UTC+11 (summer time), Perth UTC+8
    assert first_open == {
        "Australia/Sydney": "2026-11-22T22:00:00Z",
        "Australia/Perth": "2026-11-23T01:00:00Z",
    }


def test_booking_at_utc_nine_in_sydney_is_off_the_grid(fresh_api: httpx.Client) -> None:
    """09:00 UTC is 20:00 in Sydney: no slot there to book."""
    from tests.mock.test_booking import book_body

    zones = role_zones(fresh_api)
    role = next(r for r, z in zones.items() if z.key == "Australia/Sydney")
    night = book_body(role, "2026-11-23T09:00:00Z", "2026-11-23T09:30:00Z")
    assert fresh_api.post("Appointment/$book", json=night).status_code == 409
    proposal = all_pages(
        fresh_api,
        "Appointment/$find",
        start="2026-11-23T00:00:00Z",
        end="2026-11-24T00:00:00Z",
        duration=30,
        **{"practitioner-role": role},
    )[0]
    day = book_body(role, proposal["start"], proposal["end"])
    assert fresh_api.post("Appointment/$book", json=day).status_code == 201


def test_notebook_three_pipeline_puts_every_visit_in_working_hours(
    mock_visits: MockVisits,
) -> None:
    """What notebook 03's heatmap computes (``toolkit.analysis``), on the mock's data:
    every appointment at 09:00-16:59 on a weekday of its clinic's clock, in three zones."""

    from toolkit import analysis

    tables, visits = mock_visits.tables, mock_visits.visits
    assert visits.height == tables["Appointment"].height
    assert set(visits["time_zone"]) == {"Australia/Sydney", "Australia/Brisbane", "Australia/Perth"}
    assert visits["hour"].min() == 9 and visits["hour"].max() == 16
    assert set(visits["weekday_number"]) == {1, 2, 3, 4, 5}
    by_slot = analysis.attendance_rates(visits, ["weekday_number", "weekday", "hour"])
    assert set(by_slot["hour"]) == set(range(9, 17))
