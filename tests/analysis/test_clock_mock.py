"""Local clocks end to end: the mock over loopback HTTP, read by the client, placed per clinic.

The embedded mock's small practice has clinics in Newtown NSW, Paddington QLD and
Fremantle WA. Each appointment's expected wall-clock start is computed here from
the offsets alone (written by hand, not by a time-zone library): Perth UTC+8 and
Brisbane UTC+10 all year; Sydney UTC+11 until 2026-04-04T16:00Z and again from
2026-10-03T16:00Z, UTC+10 in between (the data covers 2025-11 to 2026-12).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl
import pytest

from toolkit import Client, analysis

SYDNEY_WINTER = (
    dt.datetime(2026, 4, 4, 16, 0, tzinfo=dt.UTC),
    dt.datetime(2026, 10, 3, 16, 0, tzinfo=dt.UTC),
)


def _offset_hours(zone: str, instant: dt.datetime) -> int:
    if zone == "Australia/Perth":
        return 8
    if zone == "Australia/Brisbane":
        return 10
    assert zone == "Australia/Sydney", zone
    return 10 if SYDNEY_WINTER[0] <= instant < SYDNEY_WINTER[1] else 11


@pytest.fixture(autouse=True)
def _no_zone_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(analysis.PM_TIMEZONE, raising=False)


def test_mock_clinics_sit_in_sydney_brisbane_and_perth(mock_client: Client) -> None:
    orgs = mock_client.frames("Organization")
    zones = analysis.organization_zones(orgs["Organization"], orgs["organization_address"])
    clinics = zones.filter(pl.col("organization_id").str.starts_with("CL-"))
    assert clinics.select("organization_id", "time_zone").rows() == [
        ("CL-2001", "Australia/Sydney"),
        ("CL-2002", "Australia/Brisbane"),
        ("CL-2003", "Australia/Perth"),
    ]
    assert analysis.practice_country(orgs["Organization"], orgs["organization_address"]) == "AU"


def test_mock_appointments_are_read_on_their_own_clinic_clock(mock_client: Client) -> None:
    orgs = mock_client.frames("Organization")
    zones = analysis.organization_zones(orgs["Organization"], orgs["organization_address"])
    tables = mock_client.frames("Appointment")
    participant = tables["appointment_participant"]
    role_ids = (
        participant.filter(pl.col("actor_type") == "PractitionerRole")["actor_id"]
        .unique()
        .to_list()
    )
    roles = analysis.read_roles(mock_client, role_ids)
    assert roles.height == len(role_ids)  # every role was readable: no appointment guessed
    visits = analysis.appointment_visits(
        tables["Appointment"],
        participant,
        now=dt.datetime(2026, 11, 1, tzinfo=dt.UTC),
        zones=analysis.role_zones(roles, zones),
    )
    assert visits["time_zone"].null_count() == 0
    assert set(visits["clinic_id"].unique()) == {"CL-2001", "CL-2002", "CL-2003"}
    for start, zone, local, hour, weekday in visits.select(
        "start", "time_zone", "local", "hour", "weekday"
    ).iter_rows():
        wall = (start + dt.timedelta(hours=_offset_hours(zone, start))).replace(tzinfo=None)
        assert (local, hour, weekday) == (wall, wall.hour, wall.strftime("%a")), (start, zone)
    # the mock books 09:00-17:00 on each clinic's own clock: read on that clock, every
    # clinic works 09:00-16:59 on weekdays (in UTC, Sydney's 09:00 is 22:00 or 23:00)
    for zone in ("Australia/Sydney", "Australia/Brisbane", "Australia/Perth"):
        local = visits.filter(pl.col("time_zone") == zone)
        assert set(local["hour"].unique()) == set(range(9, 17)), zone
        assert set(local["weekday"].unique()) == {"Mon", "Tue", "Wed", "Thu", "Fri"}, zone
    utc_hours = set(visits["start"].dt.hour().unique())
    assert utc_hours & {22, 23}  # so reading in UTC would put Sydney's morning at night


class _ReadsOnly:
    """Only ``read``: what read_roles falls back to without a list."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def read(self, resource_type: str, record_id: str) -> dict[str, Any]:
        return self.client.read(resource_type, record_id)


def test_roles_come_from_one_list_walk_and_equal_the_reads_one_by_one(
    mock_client: Client,
) -> None:
    ids = ["PR-6003", "PR-6001", "EP-7002", "PR-6001", "PR-9999"]
    before = mock_client.requests_sent
    listed = analysis.read_roles(mock_client, ids)
    assert mock_client.requests_sent - before == 1  # 30 roles: one page
    before = mock_client.requests_sent
    read = analysis.read_roles(_ReadsOnly(mock_client), ids)
    assert mock_client.requests_sent - before == 4  # one read per distinct id
    assert listed["id"].to_list() == ["EP-7002", "PR-6001", "PR-6003"]  # PR-9999: absent
    assert listed.equals(read)


def test_roles_are_read_one_by_one_where_the_list_is_not_served() -> None:
    from tests.contracts.live_proxy import live_proxy
    from toolkit.mock import serve

    with (
        serve(test_controls=True) as dep,
        live_proxy(
            dep, secret="s3cret-x", token_text="t", missing=("/main/PractitionerRole",)
        ) as url,
        Client(url, "pmtk-demo", "s3cret-x") as client,
    ):
        roles = analysis.read_roles(client, ["PR-6002", "PR-6001"])
        assert client.requests_sent == 3  # the refused list, then two reads
    assert roles["id"].to_list() == ["PR-6001", "PR-6002"]
    assert roles["organization_id"].null_count() == 0


def test_a_clock_given_the_listed_roles_sends_no_role_request(mock_client: Client) -> None:
    orgs = mock_client.frames("Organization")
    roles = mock_client.frame("PractitionerRole")
    ids = ["PR-6001", "PR-6002", "EP-7001"]
    address = orgs["organization_address"]
    before = mock_client.requests_sent
    held = analysis.practice_clock(mock_client, orgs["Organization"], address, ids, roles=roles)
    assert mock_client.requests_sent == before
    walked = analysis.practice_clock(mock_client, orgs["Organization"], address, ids)
    assert mock_client.requests_sent == before + 1  # read_roles: one list walk
    assert held.roles.equals(walked.roles)
    # An empty table (a deployment that lists no roles) still looks the roles up.
    empty = analysis.practice_clock(
        mock_client, orgs["Organization"], address, ids, roles=roles.clear()
    )
    assert empty.roles.equals(walked.roles)
