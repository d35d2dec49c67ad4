"""The weekday-and-hour heatmap (notebook 03) is on each clinic's own clock, counts beside rates.

The mock's clinics are in Sydney, Brisbane and Perth. A clinic opens at the same
local hour whatever its zone, so the heatmap must put a 09:00 appointment in
Perth and one in Sydney in the same cell, not eight and eleven hours apart as
UTC would. Over HTTP the expected cells are worked out here from hand-written
UTC offsets (``test_clock_mock._offset_hours``), not with pmtk's zone code.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter

import polars as pl
import pytest

from tests.analysis.test_clock import _appointments, _group, _roles
from tests.analysis.test_clock_mock import _offset_hours
from tests.conftest import MockVisits
from toolkit import analysis

UTC = dt.UTC
CLINIC_ZONES = {
    "CL-2001": "Australia/Sydney",
    "CL-2002": "Australia/Brisbane",
    "CL-2003": "Australia/Perth",
}


@pytest.fixture(autouse=True)
def _no_zone_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(analysis.PM_TIMEZONE, raising=False)


def test_nine_oclock_in_each_clinic_is_one_cell_with_its_count() -> None:
    organization, address = _group()
    zones = analysis.organization_zones(organization, address)
    roles = analysis.role_zones(_roles(), zones, default=analysis.practice_zone(zones))
    appointment, participant = _appointments(
        [
            ("B1", "PR-B", dt.datetime(2026, 1, 11, 23, 0, tzinfo=UTC)),  # BNE Mon 12 Jan 09:00
            ("P1", "PR-P", dt.datetime(2026, 1, 12, 1, 0, tzinfo=UTC)),  # PER Mon 12 Jan 09:00
            ("S1", "PR-S", dt.datetime(2026, 1, 11, 22, 0, tzinfo=UTC)),  # SYD Mon 12 Jan 09:00
            ("S2", "PR-S", dt.datetime(2026, 1, 12, 6, 0, tzinfo=UTC)),  # SYD Mon 12 Jan 17:00
        ]
    )
    participant = participant.with_columns(
        pl.Series("status", ["noshow", "fulfilled", "fulfilled", "fulfilled"])
    )
    visits = analysis.appointment_visits(
        appointment,
        participant,
        now=dt.datetime(2026, 11, 1, tzinfo=UTC),
        zones=roles,
        default_zone=analysis.practice_zone(zones),
    )
    slots = analysis.outcomes_by_slot(visits)
    assert slots.select("weekday", "hour", "appointments", "did_not_attend", "label").rows() == [
        ("Mon", 9, 3, 1, "33%\nn=3"),
        ("Mon", 17, 1, 0, "0%\nn=1"),
    ]


def test_the_mock_heatmap_counts_each_appointment_at_its_clinic_hour(
    mock_visits: MockVisits,
) -> None:
    # The notebook's chain (listed roles, the practice clock, visits), then the heatmap's cells.
    tables, roles, as_of, visits = (
        mock_visits.tables,
        mock_visits.roles,
        mock_visits.as_of,
        mock_visits.visits,
    )
    participant = tables["appointment_participant"]
    slots = analysis.outcomes_by_slot(visits)
    got = {(w, h): n for w, h, n in slots.select("weekday", "hour", "appointments").iter_rows()}

    # Expected, by hand: appointment -> role -> clinic -> fixed offsets.
    clinic_of = dict(roles.select("id", "organization_id").iter_rows())
    role_of = dict(
        participant.filter(pl.col("actor_type") == "PractitionerRole")
        .select("appointment_id", pl.col("actor_id").str.extract(r"([A-Z]{2}-\d+)$"))
        .unique("appointment_id", keep="first")
        .iter_rows()
    )
    expected: Counter[tuple[str, int]] = Counter()
    for rid, start in tables["Appointment"].select("id", "start").iter_rows():
        if start >= as_of:
            continue
        zone = CLINIC_ZONES[clinic_of[role_of[rid]]]
        wall = start + dt.timedelta(hours=_offset_hours(zone, start))
        expected[(wall.strftime("%a"), wall.hour)] += 1
    assert got == dict(expected)
    assert sum(got.values()) == visits.filter(pl.col("is_past")).height
    # every cell says how many appointments its rate rests on
    for label, n in slots.select("label", "appointments").iter_rows():
        assert label.endswith(f"\nn={n}")
