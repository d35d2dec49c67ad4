"""Attendance, slot utilisation and revenue on hand-made frames."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

from toolkit import analysis

NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)


def _visits() -> pl.DataFrame:
    appointment = pl.DataFrame(
        {
            "id": ["A1", "A2", "A3", "A4", "A5"],
            "start": [
                dt.datetime(2026, 11, 16, 9, tzinfo=dt.UTC),  # Monday
                dt.datetime(2026, 11, 16, 10, tzinfo=dt.UTC),
                dt.datetime(2026, 11, 17, 9, tzinfo=dt.UTC),  # Tuesday
                dt.datetime(2026, 11, 18, 9, tzinfo=dt.UTC),
                dt.datetime(2026, 11, 24, 9, tzinfo=dt.UTC),  # next week, upcoming
            ],
            "end": [
                dt.datetime(2026, 11, 16, 9, 30, tzinfo=dt.UTC),
                dt.datetime(2026, 11, 16, 10, 30, tzinfo=dt.UTC),
                dt.datetime(2026, 11, 17, 10, tzinfo=dt.UTC),
                dt.datetime(2026, 11, 18, 10, tzinfo=dt.UTC),
                dt.datetime(2026, 11, 24, 10, tzinfo=dt.UTC),
            ],
            "created": [
                dt.datetime(2026, 11, 6, 9, tzinfo=dt.UTC),  # 10 days ahead
                dt.datetime(2026, 11, 16, 8, tzinfo=dt.UTC),  # same day
                dt.datetime(2026, 11, 15, 9, tzinfo=dt.UTC),  # 2 days
                None,
                dt.datetime(2026, 11, 20, 9, tzinfo=dt.UTC),  # 4 days
            ],
        }
    )
    statuses = ["attended", "noshow", "cancelled", "booked", "booked"]
    practitioners = ["PR-1", "PR-1", "PR-2", "PR-2", "PR-1"]
    participant = pl.DataFrame(
        {
            "appointment_id": [a for a in appointment["id"] for _ in range(2)],
            "actor_id": [
                x
                for p in practitioners
                for x in (f"/main/PractitionerRole/{p}", "/main/Patient/P1")
            ],
            "actor_type": ["PractitionerRole", "Patient"] * 5,
            "status": [x for s in statuses for x in ("booked", s)],
            "invoice_id": [None] * 10,
        },
        schema_overrides={"invoice_id": pl.String},
    )
    return analysis.appointment_visits(appointment, participant, now=NOW, tz="UTC")


def test_visits_take_outcome_from_patient_and_label_unrecorded_and_upcoming() -> None:
    v = _visits()
    assert v["outcome"].to_list() == [
        "attended",
        "did not attend",
        "cancelled",
        "unrecorded",
        "upcoming",
    ]
    assert v["practitioner_id"].to_list() == ["PR-1", "PR-1", "PR-2", "PR-2", "PR-1"]
    assert v["patient_id"].unique().to_list() == ["P1"]
    assert v["weekday"].to_list()[:3] == ["Mon", "Mon", "Tue"]
    assert v["week"][0] == dt.date(2026, 11, 16)


def test_visits_fall_back_to_practitioner_status_without_a_patient_participant() -> None:
    appointment = pl.DataFrame(
        {"id": ["A1"], "start": ["2026-11-01T09:00:00Z"], "created": ["2026-10-01T09:00:00Z"]}
    )
    participant = pl.DataFrame(
        {
            "appointment_id": ["A1"],
            "actor_id": ["/main/PractitionerRole/PR-3"],
            "actor_type": ["PractitionerRole"],
            "status": ["cancelled"],
            "invoice_id": [None],
        },
        schema_overrides={"invoice_id": pl.String},
    )
    v = analysis.appointment_visits(appointment, participant, now=NOW, tz="UTC")
    assert v["outcome"].to_list() == ["cancelled"]
    assert v["lead_time_days"][0] == pytest.approx(31.0)


def test_attendance_rates_use_all_past_appointments_as_denominator() -> None:
    out = analysis.attendance_rates(_visits(), "practitioner_id")
    pr1 = out.row(0, named=True)
    assert pr1["practitioner_id"] == "PR-1"
    assert pr1["appointments"] == 2  # the upcoming one is left out
    assert pr1["attendance_rate"] == pytest.approx(0.5)
    assert pr1["dna_rate"] == pytest.approx(0.5)
    pr2 = out.row(1, named=True)
    assert pr2["cancellation_rate"] == pytest.approx(0.5)
    assert pr2["unrecorded"] == 1


def test_weekly_volume_counts_cancelled_separately() -> None:
    out = analysis.weekly_volume(_visits())
    assert out.rows() == [
        (dt.date(2026, 11, 16), 4, 3, 1),
        (dt.date(2026, 11, 23), 1, 1, 0),
    ]


def test_lead_time_summary_skips_missing_created() -> None:
    out = analysis.lead_time_summary(_visits())
    row = out.row(0, named=True)
    assert row["appointments"] == 4
    assert row["median_days"] == pytest.approx((2 + 4) / 2)
    assert row["same_day_share"] == pytest.approx(0.25)


def test_slot_utilisation_is_booked_over_booked_plus_free_minutes() -> None:
    proposed = pl.DataFrame(
        {
            "start": [dt.datetime(2026, 11, 24, 10, tzinfo=dt.UTC)] * 3,
            "end": [dt.datetime(2026, 11, 24, 10, 30, tzinfo=dt.UTC)] * 3,
            "practitioner_id": ["/main/PractitionerRole/PR-1", "PR-1", "PR-3"],
        }
    )
    out = analysis.slot_utilisation(
        _visits(),
        proposed,
        start=dt.datetime(2026, 11, 22, tzinfo=dt.UTC),
        end=dt.datetime(2026, 12, 6, tzinfo=dt.UTC),
    )
    rows = {r["practitioner_id"]: r for r in out.iter_rows(named=True)}
    assert rows["PR-1"]["booked_minutes"] == pytest.approx(60.0)
    assert rows["PR-1"]["free_minutes"] == pytest.approx(60.0)
    assert rows["PR-1"]["utilisation"] == pytest.approx(0.5)
    assert rows["PR-3"]["utilisation"] == pytest.approx(0.0)
    assert "PR-2" not in rows  # its appointments are all in the past


def _lines() -> pl.DataFrame:
    invoice_line = pl.DataFrame(
        {
            "id": ["L1", "L2", "L3", "L4"],
            "status": [None, "voided", "write-off", "locked"],
            "quantity": [2.0, 1.0, 1.0, None],
            "context_id": ["/main/Appointment/A1", "/main/Appointment/A2", None, None],
        },
        schema_overrides={"status": pl.String},
    )
    component = pl.DataFrame(
        {
            "invoice_line_id": ["L1", "L1", "L1", "L1", "L2", "L3", "L4", "L4"],
            "type": [
                "base",
                "surcharge",
                "discount",
                "informational",
                "base",
                "base",
                "base",
                "deduction",
            ],
            "amount_value": [100.0, 10.0, -5.0, 999.0, 50.0, 30.0, 80.0, 20.0],
            "amount_currency": ["AUD"] * 8,
        }
    )
    return analysis.line_values(invoice_line, component)


def test_line_values_apply_signs_by_magnitude_and_ignore_informational() -> None:
    lines = _lines()
    # L1: 2 * (100 + 10 - 5); L4: quantity missing counts as 1, deduction 20 given positive.
    assert lines["net_value"].to_list() == pytest.approx([210.0, 50.0, 30.0, 60.0])
    assert lines["discount"][0] == pytest.approx(-10.0)  # line totals: times quantity 2
    parts = lines.select(pl.sum_horizontal("base", "surcharge", "deduction", "discount", "tax"))
    assert parts.to_series().to_list() == pytest.approx(lines["net_value"].to_list())
    assert lines["deduction"][3] == pytest.approx(-20.0)
    assert lines["line_status"].to_list() == ["open", "voided", "write-off", "locked"]


def test_revenue_by_excludes_voided_and_reports_write_offs() -> None:
    lines = _lines().with_columns(pl.lit("all").alias("k"))
    out = analysis.revenue_by(lines, "k").row(0, named=True)
    assert out["lines"] == 3
    assert out["billed"] == pytest.approx(300.0)
    assert out["written_off"] == pytest.approx(30.0)
    assert out["excluded"] == pytest.approx(50.0)


def test_appointments_without_invoice_line_ignore_voided_lines() -> None:
    missing = analysis.appointments_without_invoice_line(_visits(), _lines())
    # A1 has a line; A2 (did not attend) has only a voided line; A3 is cancelled.
    assert missing["id"].to_list() == ["A2"]
