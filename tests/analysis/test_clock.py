"""The practice's own clock and calendar: zones from addresses, DST, financial years, currency.

Every expected local time below is worked out by hand from the zone rules, written
next to the case:

* Sydney: AEDT (UTC+11) until 03:00 local on Sunday 2026-04-05 (16:00Z on the 4th),
  then AEST (UTC+10) until 02:00 local on Sunday 2026-10-04 (16:00Z on the 3rd).
* London: GMT until 01:00Z on Sunday 2026-03-29, then BST (UTC+1) until 01:00Z on
  Sunday 2026-10-25.
* Brisbane: UTC+10 all year. Perth: UTC+8 all year.

(2026-01-01 is a Thursday, so 2026-01-15 is a Thursday, 2026-06-30 a Tuesday and
the four changeover days above are Sundays.)
"""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

from toolkit import analysis
from toolkit.errors import MixedCurrencyError, PmtkError, TimeZoneError

UTC = dt.UTC


@pytest.fixture(autouse=True)
def _no_zone_override(monkeypatch: pytest.MonkeyPatch) -> None:
    """A PM_TIMEZONE of the machine running the tests must not change what they see."""
    monkeypatch.delenv(analysis.PM_TIMEZONE, raising=False)


def _at(*instants: dt.datetime) -> pl.DataFrame:
    return pl.DataFrame(
        {"id": [f"A{i}" for i in range(len(instants))], "start": list(instants)},
        schema={"id": pl.String, "start": pl.Datetime("us", "UTC")},
    )


def _fields(frame: pl.DataFrame) -> list[tuple[object, ...]]:
    return frame.select("local", "weekday", "hour", "date", "week", "month").rows()


# --------------------------------------------------------------------------- Sydney


def test_sydney_midnight_and_the_april_dst_end_follow_the_local_clock() -> None:
    instants = _at(
        dt.datetime(2026, 4, 4, 13, 30, tzinfo=UTC),  # +11: 00:30 Sun 5 Apr (UTC: Sat)
        dt.datetime(2026, 4, 4, 15, 30, tzinfo=UTC),  # +11: 02:30 Sun, the first 02:30
        dt.datetime(2026, 4, 4, 16, 30, tzinfo=UTC),  # +10: 02:30 Sun, the second 02:30
        dt.datetime(2026, 4, 5, 13, 30, tzinfo=UTC),  # +10: 23:30 Sun
        dt.datetime(2026, 4, 5, 14, 0, tzinfo=UTC),  # +10: 00:00 Mon 6 Apr, a new week
        dt.datetime(2026, 3, 31, 13, 30, tzinfo=UTC),  # +11: 00:30 Wed 1 Apr, a new month
    )
    out = analysis.local_times(instants, "start", tz="Australia/Sydney")
    sun, mon = dt.date(2026, 4, 5), dt.date(2026, 4, 6)
    week_of_sun = dt.date(2026, 3, 30)
    april = dt.date(2026, 4, 1)
    assert _fields(out) == [
        (dt.datetime(2026, 4, 5, 0, 30), "Sun", 0, sun, week_of_sun, april),
        (dt.datetime(2026, 4, 5, 2, 30), "Sun", 2, sun, week_of_sun, april),
        (dt.datetime(2026, 4, 5, 2, 30), "Sun", 2, sun, week_of_sun, april),
        (dt.datetime(2026, 4, 5, 23, 30), "Sun", 23, sun, week_of_sun, april),
        (dt.datetime(2026, 4, 6, 0, 0), "Mon", 0, mon, mon, april),
        (dt.datetime(2026, 4, 1, 0, 30), "Wed", 0, dt.date(2026, 4, 1), week_of_sun, april),
    ]
    assert out["time_zone"].unique().to_list() == ["Australia/Sydney"]
    assert out["id"].to_list() == instants["id"].to_list()  # the input order is kept


def test_sydney_october_dst_start_skips_two_oclock() -> None:
    instants = _at(
        dt.datetime(2026, 10, 3, 15, 30, tzinfo=UTC),  # +10: 01:30 Sun 4 Oct
        dt.datetime(2026, 10, 3, 16, 0, tzinfo=UTC),  # +11: 03:00 Sun (02:00 never happens)
        dt.datetime(2026, 10, 4, 12, 59, tzinfo=UTC),  # +11: 23:59 Sun
        dt.datetime(2026, 10, 4, 13, 0, tzinfo=UTC),  # +11: 00:00 Mon 5 Oct
        dt.datetime(2026, 9, 30, 14, 30, tzinfo=UTC),  # +10: 00:30 Thu 1 Oct, a new month
    )
    out = analysis.local_times(instants, "start", tz="Australia/Sydney")
    assert out.select("local", "weekday", "hour").rows() == [
        (dt.datetime(2026, 10, 4, 1, 30), "Sun", 1),
        (dt.datetime(2026, 10, 4, 3, 0), "Sun", 3),
        (dt.datetime(2026, 10, 4, 23, 59), "Sun", 23),
        (dt.datetime(2026, 10, 5, 0, 0), "Mon", 0),
        (dt.datetime(2026, 10, 1, 0, 30), "Thu", 0),
    ]
    assert out["week"].to_list() == [dt.date(2026, 9, 28)] * 3 + [
        dt.date(2026, 10, 5),
        dt.date(2026, 9, 28),
    ]
    assert out["month"].to_list()[-1] == dt.date(2026, 10, 1)


# --------------------------------------------------------------------------- London


def test_london_march_change_and_the_uk_tax_year_follow_the_local_day() -> None:
    instants = _at(
        dt.datetime(2026, 3, 29, 0, 30, tzinfo=UTC),  # GMT: 00:30 Sun 29 Mar
        dt.datetime(2026, 3, 29, 1, 0, tzinfo=UTC),  # BST: 02:00 Sun (01:00 never happens)
        dt.datetime(2026, 3, 29, 23, 30, tzinfo=UTC),  # BST: 00:30 Mon 30 Mar, a new week
        dt.datetime(2026, 4, 5, 23, 30, tzinfo=UTC),  # BST: 00:30 Mon 6 Apr, a new tax year
    )
    out = analysis.local_times(instants, "start", tz="Europe/London").with_columns(
        analysis.financial_year("date", start=analysis.financial_year_start("GB")).alias("fy")
    )
    assert out.select("local", "weekday", "hour", "week", "fy").rows() == [
        (dt.datetime(2026, 3, 29, 0, 30), "Sun", 0, dt.date(2026, 3, 23), "FY2025-26"),
        (dt.datetime(2026, 3, 29, 2, 0), "Sun", 2, dt.date(2026, 3, 23), "FY2025-26"),
        (dt.datetime(2026, 3, 30, 0, 30), "Mon", 0, dt.date(2026, 3, 30), "FY2025-26"),
        (dt.datetime(2026, 4, 6, 0, 30), "Mon", 0, dt.date(2026, 4, 6), "FY2026-27"),
    ]


def test_london_october_change_repeats_one_oclock() -> None:
    instants = _at(
        dt.datetime(2026, 10, 24, 23, 30, tzinfo=UTC),  # BST: 00:30 Sun 25 Oct (UTC: Sat)
        dt.datetime(2026, 10, 25, 0, 30, tzinfo=UTC),  # BST: 01:30 Sun, the first 01:30
        dt.datetime(2026, 10, 25, 1, 30, tzinfo=UTC),  # GMT: 01:30 Sun, the second 01:30
        dt.datetime(2026, 10, 25, 23, 30, tzinfo=UTC),  # GMT: 23:30 Sun
    )
    out = analysis.local_times(instants, "start", tz="Europe/London")
    assert out.select("local", "weekday", "hour", "date").rows() == [
        (dt.datetime(2026, 10, 25, 0, 30), "Sun", 0, dt.date(2026, 10, 25)),
        (dt.datetime(2026, 10, 25, 1, 30), "Sun", 1, dt.date(2026, 10, 25)),
        (dt.datetime(2026, 10, 25, 1, 30), "Sun", 1, dt.date(2026, 10, 25)),
        (dt.datetime(2026, 10, 25, 23, 30), "Sun", 23, dt.date(2026, 10, 25)),
    ]


# --------------------------------------------------------------------------- a group in three zones


def _group() -> tuple[pl.DataFrame, pl.DataFrame]:
    """A practice group in Brisbane with clinics in Brisbane, Perth and Sydney."""
    organization = pl.DataFrame(
        {
            "id": ["PG-1", "CL-BNE", "CL-PER", "CL-SYD", "FD-9"],
            "name": ["Group", "Brisbane clinic", "Perth clinic", None, "A funder"],
        }
    )
    address = pl.DataFrame(
        {
            "organization_id": ["PG-1", "CL-BNE", "CL-PER", "CL-PER", "CL-SYD"],
            "index": [0, 0, 0, 1, 0],
            "use": ["billing", "work", "billing", "work", "work"],
            "type": ["postal", "physical", "postal", "physical", "both"],
            # the Perth clinic's billing office is in Sydney: its physical address decides
            "state": ["qld", "QLD", "NSW", "Western Australia", "N.S.W."],
            "country": ["AU", "AU", "AU", "au", "AU"],
        }
    )
    return organization, address


def _appointments(rows: list[tuple[str, str, dt.datetime]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    appointment = pl.DataFrame(
        {
            "id": [r[0] for r in rows],
            "start": [r[2] for r in rows],
            "end": [r[2] + dt.timedelta(minutes=30) for r in rows],
            "created": [r[2] - dt.timedelta(hours=2) for r in rows],
        }
    )
    participant = pl.DataFrame(
        {
            "appointment_id": [r[0] for r in rows],
            "actor_id": [f"/main/PractitionerRole/{r[1]}" for r in rows],
            "actor_type": ["PractitionerRole"] * len(rows),
            "status": ["booked"] * len(rows),
            "invoice_id": [None] * len(rows),
        },
        schema_overrides={"invoice_id": pl.String},
    )
    return appointment, participant


def _roles() -> pl.DataFrame:
    return analysis.role_organizations(
        [
            {"id": "PR-B", "organization": {"reference": "/main/Organization/CL-BNE"}},
            {
                "id": "PR-P",
                "organization": {"reference": "https://x.example/main/Organization/CL-PER"},
            },
            {"id": "PR-S", "organization": {"reference": "/main/Organization/CL-SYD"}},
            {"id": "PR-X", "organization": {"reference": "/main/Organization/CL-GONE"}},
        ]
    )


def test_clinic_zones_come_from_the_physical_work_address() -> None:
    zones = analysis.organization_zones(*_group())
    assert zones.select("organization_id", "organization", "time_zone").rows() == [
        ("CL-BNE", "Brisbane clinic", "Australia/Brisbane"),
        ("CL-PER", "Perth clinic", "Australia/Perth"),
        ("CL-SYD", "CL-SYD", "Australia/Sydney"),
        ("PG-1", "Group", "Australia/Brisbane"),
    ]
    assert analysis.practice_zone(zones) == "Australia/Brisbane"
    assert analysis.practice_country(*_group()) == "AU"


def test_brisbane_and_perth_appointments_are_each_read_in_their_own_zone() -> None:
    zones = analysis.organization_zones(*_group())
    roles = analysis.role_zones(_roles(), zones, default=analysis.practice_zone(zones))
    appointment, participant = _appointments(
        [
            ("B1", "PR-B", dt.datetime(2026, 1, 15, 0, 0, tzinfo=UTC)),  # BNE 10:00 Thu
            ("P1", "PR-P", dt.datetime(2026, 1, 15, 0, 0, tzinfo=UTC)),  # PER 08:00 Thu
            ("S1", "PR-S", dt.datetime(2026, 1, 15, 0, 0, tzinfo=UTC)),  # SYD 11:00 Thu (AEDT)
            ("B2", "PR-B", dt.datetime(2026, 1, 14, 22, 30, tzinfo=UTC)),  # BNE 08:30 Thu 15
            ("P2", "PR-P", dt.datetime(2026, 1, 14, 22, 30, tzinfo=UTC)),  # PER 06:30 Thu 15
            ("B3", "PR-B", dt.datetime(2026, 6, 30, 15, 30, tzinfo=UTC)),  # BNE 01:30 Wed 1 Jul
            ("P3", "PR-P", dt.datetime(2026, 6, 30, 15, 30, tzinfo=UTC)),  # PER 23:30 Tue 30 Jun
            ("X1", "PR-X", dt.datetime(2026, 6, 30, 15, 30, tzinfo=UTC)),  # no clinic zone: BNE
            ("S2", "PR-S", dt.datetime(2026, 10, 4, 0, 0, tzinfo=UTC)),  # SYD 11:00 (AEDT)
            ("B4", "PR-B", dt.datetime(2026, 10, 4, 0, 0, tzinfo=UTC)),  # BNE 10:00 (no DST)
        ]
    )
    visits = analysis.appointment_visits(
        appointment,
        participant,
        now=dt.datetime(2026, 11, 1, tzinfo=UTC),
        zones=roles,
        default_zone=analysis.practice_zone(zones),
    ).with_columns(analysis.financial_year("date").alias("fy"))
    got = {
        r[0]: r[1:]
        for r in visits.select("id", "clinic", "time_zone", "weekday", "hour", "date", "fy").rows()
    }
    assert got == {
        "B1": (
            "Brisbane clinic",
            "Australia/Brisbane",
            "Thu",
            10,
            dt.date(2026, 1, 15),
            "FY2025-26",
        ),
        "P1": ("Perth clinic", "Australia/Perth", "Thu", 8, dt.date(2026, 1, 15), "FY2025-26"),
        "S1": ("CL-SYD", "Australia/Sydney", "Thu", 11, dt.date(2026, 1, 15), "FY2025-26"),
        "B2": (
            "Brisbane clinic",
            "Australia/Brisbane",
            "Thu",
            8,
            dt.date(2026, 1, 15),
            "FY2025-26",
        ),
        "P2": ("Perth clinic", "Australia/Perth", "Thu", 6, dt.date(2026, 1, 15), "FY2025-26"),
        "B3": ("Brisbane clinic", "Australia/Brisbane", "Wed", 1, dt.date(2026, 7, 1), "FY2026-27"),
        "P3": ("Perth clinic", "Australia/Perth", "Tue", 23, dt.date(2026, 6, 30), "FY2025-26"),
        "X1": ("CL-GONE", "Australia/Brisbane", "Wed", 1, dt.date(2026, 7, 1), "FY2026-27"),
        "S2": ("CL-SYD", "Australia/Sydney", "Sun", 11, dt.date(2026, 10, 4), "FY2026-27"),
        "B4": (
            "Brisbane clinic",
            "Australia/Brisbane",
            "Sun",
            10,
            dt.date(2026, 10, 4),
            "FY2026-27",
        ),
    }
    # created two hours before the start: the same local day except B3, booked 23:30 on 30 June
    ahead = dict(visits.select("id", "booked_days_ahead").iter_rows())
    assert ahead["B3"] == 1 and ahead["P3"] == 0 and ahead["B1"] == 0


def test_weekday_and_hour_rates_group_on_local_time() -> None:
    # Both appointments are Wednesday 22:30 UTC; in Brisbane they are Thursday 08:30.
    appointment, participant = _appointments(
        [
            ("B1", "PR-B", dt.datetime(2026, 1, 14, 22, 30, tzinfo=UTC)),
            ("B2", "PR-B", dt.datetime(2026, 1, 21, 22, 30, tzinfo=UTC)),
        ]
    )
    visits = analysis.appointment_visits(
        appointment, participant, now=dt.datetime(2026, 11, 1, tzinfo=UTC), tz="Australia/Brisbane"
    )
    rates = analysis.attendance_rates(visits, ["weekday", "hour"])
    assert rates.select("weekday", "hour", "appointments").rows() == [("Thu", 8, 2)]
    weekly = analysis.weekly_volume(visits)
    assert weekly["week"].to_list() == [dt.date(2026, 1, 12), dt.date(2026, 1, 19)]


def test_tz_and_pm_timezone_override_every_clinic(monkeypatch: pytest.MonkeyPatch) -> None:
    zones = analysis.organization_zones(*_group())
    roles = analysis.role_zones(_roles(), zones)
    appointment, participant = _appointments(
        [
            ("B1", "PR-B", dt.datetime(2026, 1, 15, 0, 0, tzinfo=UTC)),
            ("P1", "PR-P", dt.datetime(2026, 1, 15, 0, 0, tzinfo=UTC)),
        ]
    )
    now = dt.datetime(2026, 11, 1, tzinfo=UTC)
    monkeypatch.setenv("PM_TIMEZONE", "Europe/London")
    from_env = analysis.appointment_visits(appointment, participant, now=now, zones=roles)
    assert from_env.select("time_zone", "hour").rows() == [("Europe/London", 0)] * 2
    explicit = analysis.appointment_visits(
        appointment, participant, now=now, zones=roles, tz="Pacific/Auckland"
    )  # NZDT, UTC+13 in January: 13:00
    assert explicit.select("time_zone", "hour").rows() == [("Pacific/Auckland", 13)] * 2
    assert analysis.organization_zones(*_group())["zone_source"].unique().to_list() == [
        "PM_TIMEZONE"
    ]


def test_an_override_zone_keeps_each_appointments_clinic(monkeypatch: pytest.MonkeyPatch) -> None:
    # PM_TIMEZONE (or tz=) changes the clock, not which clinic an appointment is at:
    # notebook 03 groups by clinic and crashed ("unable to find column clinic") when set.
    zones = analysis.organization_zones(*_group())
    roles = analysis.role_zones(_roles(), zones, default=analysis.practice_zone(zones))
    appointment, participant = _appointments(
        [
            ("B1", "PR-B", dt.datetime(2026, 1, 15, 0, 0, tzinfo=UTC)),
            ("P1", "PR-P", dt.datetime(2026, 1, 15, 0, 0, tzinfo=UTC)),
            ("X1", "PR-X", dt.datetime(2026, 1, 15, 0, 0, tzinfo=UTC)),
        ]
    )
    now = dt.datetime(2026, 11, 1, tzinfo=UTC)
    monkeypatch.setenv("PM_TIMEZONE", "Europe/London")
    for tz in (None, "Pacific/Auckland"):
        visits = analysis.appointment_visits(
            appointment, participant, now=now, zones=roles, default_zone="Australia/Perth", tz=tz
        )
        zone = tz or "Europe/London"
        assert visits.select("id", "clinic", "clinic_id", "time_zone").rows() == [
            ("B1", "Brisbane clinic", "CL-BNE", zone),
            ("P1", "Perth clinic", "CL-PER", zone),
            ("X1", "CL-GONE", "CL-GONE", zone),
        ]


def test_a_bad_pm_timezone_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PM_TIMEZONE", "Sydney")
    with pytest.raises(TimeZoneError, match=r"PM_TIMEZONE='Sydney' is not an IANA time zone"):
        analysis.local_times(_at(dt.datetime(2026, 1, 1, tzinfo=UTC)), "start")
    with pytest.raises(TimeZoneError, match=r"tz='../etc/passwd'"):
        analysis.check_zone("../etc/passwd")


def test_appointments_without_any_zone_are_refused_not_read_in_utc() -> None:
    zones = analysis.organization_zones(*_group())
    roles = analysis.role_zones(_roles(), zones)  # no default: PR-X has no zone
    appointment, participant = _appointments(
        [
            ("B1", "PR-B", dt.datetime(2026, 1, 15, 0, 0, tzinfo=UTC)),
            ("X1", "PR-X", dt.datetime(2026, 1, 15, 0, 0, tzinfo=UTC)),
        ]
    )
    now = dt.datetime(2026, 11, 1, tzinfo=UTC)
    with pytest.raises(
        TimeZoneError, match=r"1 rows have a 'start' but no 'time_zone' \(for example X1\)"
    ):
        analysis.appointment_visits(appointment, participant, now=now, zones=roles)
    with pytest.raises(TimeZoneError, match="set PM_TIMEZONE, or pass tz="):
        analysis.appointment_visits(appointment, participant, now=now)


# --------------------------------------------------------------------------- zones from addresses


@pytest.mark.parametrize(
    ("state", "country", "zone"),
    [
        ("NSW", "AU", "Australia/Sydney"),
        ("ACT", "AU", "Australia/Sydney"),
        ("VIC", "AU", "Australia/Melbourne"),
        ("Tasmania", "AU", "Australia/Hobart"),
        ("QLD", "AU", "Australia/Brisbane"),
        ("sa", "AU", "Australia/Adelaide"),
        ("NT", "AU", "Australia/Darwin"),
        ("WA", "AU", "Australia/Perth"),
        (None, "GB", "Europe/London"),
        ("Greater London", "GB", "Europe/London"),
        (None, "NZ", "Pacific/Auckland"),
        (None, "SG", "Asia/Singapore"),
        (None, "ie", "Europe/Dublin"),
    ],
)
def test_zone_for_address(state: str | None, country: str, zone: str) -> None:
    assert analysis.zone_for_address(state, country) == zone


@pytest.mark.parametrize(
    ("state", "country", "message"),
    [
        (None, "AU", r"CL-9: an Australian address with no state has no single time zone"),
        ("Tassie", "AU", r"CL-9: an Australian address with state 'Tassie'"),
        ("CA", "US", r"CL-9: country US has \d+ time zones \(America/New_York, "),
        (None, "XX", r"CL-9: country 'XX' is not an ISO 3166 code"),
        (None, None, r"CL-9: the address has no country"),
    ],
)
def test_an_address_without_one_zone_is_a_clear_error(
    state: str | None, country: str | None, message: str
) -> None:
    with pytest.raises(TimeZoneError, match=message) as caught:
        analysis.zone_for_address(state, country, where="CL-9")
    assert "PM_TIMEZONE" in str(caught.value)
    assert isinstance(caught.value, PmtkError) and isinstance(caught.value, ValueError)


def test_an_ambiguous_clinic_address_names_the_clinic() -> None:
    organization = pl.DataFrame({"id": ["CL-7"], "name": ["Somewhere"]})
    address = pl.DataFrame(
        {
            "organization_id": ["CL-7"],
            "index": [0],
            "use": ["work"],
            "type": ["physical"],
            "state": [None],
            "country": ["AU"],
        },
        schema_overrides={"state": pl.String},
    )
    with pytest.raises(TimeZoneError, match="Organization CL-7: an Australian address"):
        analysis.organization_zones(organization, address)
    assert analysis.organization_zones(organization, address, tz="Australia/Darwin").row(0) == (
        "CL-7",
        "Somewhere",
        "Australia/Darwin",
        "tz",
    )


def test_practice_zone_without_group_address_needs_clinics_to_agree() -> None:
    two = pl.DataFrame(
        {"organization_id": ["CL-1", "CL-2"], "time_zone": ["Australia/Perth", "Australia/Sydney"]}
    )
    with pytest.raises(TimeZoneError, match=r"2 zones \(Australia/Perth, Australia/Sydney\)"):
        analysis.practice_zone(two)


# --------------------------------------------------------------------------- financial years


@pytest.mark.parametrize(
    ("country", "day", "label"),
    [
        ("AU", dt.date(2026, 6, 30), "FY2025-26"),
        ("AU", dt.date(2026, 7, 1), "FY2026-27"),
        ("NZ", dt.date(2026, 3, 31), "FY2025-26"),
        ("NZ", dt.date(2026, 4, 1), "FY2026-27"),
        ("GB", dt.date(2026, 4, 5), "FY2025-26"),
        ("GB", dt.date(2026, 4, 6), "FY2026-27"),
        ("GB", dt.date(2026, 3, 7), "FY2025-26"),  # after the 6th, before April
        ("DE", dt.date(2026, 1, 1), "FY2026"),
        ("DE", dt.date(2026, 12, 31), "FY2026"),
        (None, dt.date(2026, 7, 1), "FY2026"),
        ("AU", dt.date(1999, 7, 1), "FY1999-00"),
        ("AU", dt.date(2000, 1, 1), "FY1999-00"),
    ],
)
def test_financial_year_labels(country: str | None, day: dt.date, label: str) -> None:
    start = analysis.financial_year_start(country)
    frame = pl.DataFrame({"d": [day, None]}, schema={"d": pl.Date})
    assert frame.select(analysis.financial_year("d", start=start))["d"].to_list() == [label, None]


def test_an_impossible_financial_year_start_is_refused() -> None:
    with pytest.raises(ValueError, match="day is out of range"):
        analysis.financial_year("d", start=(2, 30))


def test_revenue_by_financial_year_uses_the_local_entered_day() -> None:
    # Entered 30 June 14:30 UTC: 00:30 on 1 July in Brisbane, 22:30 on 30 June in Perth.
    lines = pl.DataFrame(
        {
            "id": ["L1", "L2"],
            "entered_date": [dt.datetime(2026, 6, 30, 14, 30, tzinfo=UTC)] * 2,
            "time_zone": ["Australia/Brisbane", "Australia/Perth"],
            "net_value": [100.0, 40.0],
            "currency": ["AUD", "AUD"],
            "line_status": ["open", "open"],
        }
    )
    local = analysis.local_times(lines, "entered_date").with_columns(
        analysis.financial_year("date").alias("financial_year")
    )
    out = analysis.revenue_by(local, "financial_year")
    assert out.select("financial_year", "currency", "billed").rows() == [
        ("FY2025-26", "AUD", 40.0),
        ("FY2026-27", "AUD", 100.0),
    ]


# --------------------------------------------------------------------------- currency


def _lines(currencies: list[str | None], values: list[float]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "net_value": values,
            "currency": currencies,
            "line_status": ["open"] * len(values),
            "month": [dt.date(2026, 7, 1)] * len(values),
        },
        schema_overrides={"currency": pl.String},
    )


def test_revenue_by_never_adds_currencies_together() -> None:
    out = analysis.revenue_by(_lines(["AUD", "NZD", "AUD"], [100.0, 70.0, 10.0]), "month")
    assert out.select("month", "currency", "billed").rows() == [
        (dt.date(2026, 7, 1), "AUD", 110.0),
        (dt.date(2026, 7, 1), "NZD", 70.0),
    ]


def test_a_single_total_of_two_currencies_is_a_typed_error() -> None:
    with pytest.raises(MixedCurrencyError, match=r"2 currencies \(AUD, NZD\)") as caught:
        analysis.revenue_total(_lines(["AUD", "NZD"], [100.0, 70.0]))
    assert caught.value.currencies == ["AUD", "NZD"]
    assert isinstance(caught.value, PmtkError)
    # an amount with no currency beside one with a currency is just as ambiguous
    with pytest.raises(MixedCurrencyError, match=r"\(none\), AUD"):
        analysis.revenue_total(_lines(["AUD", None], [100.0, 5.0]))


def test_a_single_total_ignores_lines_that_carry_no_amount() -> None:
    assert analysis.revenue_total(_lines(["AUD", None], [100.0, 0.0])) == (100.0, "AUD")
    assert analysis.revenue_total(_lines([None], [0.0])) == (0.0, None)


def test_a_line_priced_in_two_currencies_has_no_value() -> None:
    line = pl.DataFrame({"id": ["L1", "L2"], "quantity": [1.0, 1.0], "status": [None, None]})
    components = pl.DataFrame(
        {
            "invoice_line_id": ["L1", "L1", "L2"],
            "type": ["base", "tax", "base"],
            "amount_value": [100.0, 10.0, 50.0],
            "amount_currency": ["AUD", "NZD", "AUD"],
        }
    )
    with pytest.raises(MixedCurrencyError, match=r"1 invoice lines .* \(AUD, NZD\).*: lines L1$"):
        analysis.line_values(line, components)


def test_utilisation_summary_refuses_to_pool_money_across_currencies() -> None:
    referrals = pl.DataFrame(
        {
            "practice": ["A", "A"],
            "active": [True, True],
            "limit_quantity": [None, None],
            "limit_quantity_used": [None, None],
            "limit_quantity_offset": [None, None],
            "limit_money_value": [1000.0, 500.0],
            "limit_money_used": [100.0, 50.0],
            "limit_money_currency": ["AUD", "NZD"],
        },
        schema_overrides={
            c: pl.Int64 for c in ("limit_quantity", "limit_quantity_used", "limit_quantity_offset")
        },
    )
    with pytest.raises(MixedCurrencyError, match="limit_money_currency"):
        analysis.utilisation_summary(referrals, "practice")
    both = analysis.utilisation_summary(referrals, ["practice", "limit_money_currency"])
    assert sorted(both.select("limit_money_currency", "money_limit").rows()) == [
        ("AUD", 1000.0),
        ("NZD", 500.0),
    ]
