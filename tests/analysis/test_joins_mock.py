"""The joins end to end: the mock over loopback HTTP, read by the client, every id named.

The embedded mock links every appointment to a PR- role of one of its practitioners and
to one of its clinics' HealthcareServices, and writes each Invoice's totals as the sum of
its lines. These tests read it as a user would (``client.frame``) and check that the
joins leave no appointment without a practitioner name, no service id without a name
and no invoice with a gap.
"""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

from toolkit import Client, analysis


@pytest.fixture(scope="module")
def appointments(mock_client: Client) -> dict[str, pl.DataFrame]:
    return mock_client.frames("Appointment")


def test_every_mock_appointment_gets_a_practitioner_name_and_clinic(
    mock_client: Client, appointments: dict[str, pl.DataFrame]
) -> None:
    practitioners = mock_client.frame("Practitioner")
    organizations = mock_client.frame("Organization")
    roles = mock_client.frame("PractitionerRole")
    out = analysis.appointment_practitioners(
        appointments["Appointment"],
        appointments["appointment_participant"],
        roles,
        practitioners,
        organizations,
    )
    assert out.height == appointments["Appointment"].height > 0
    assert out["appointment_id"].to_list() == appointments["Appointment"]["id"].to_list()
    assert out.null_count().row(0, named=True) == dict.fromkeys(out.columns, 0)
    assert out["role_id"].str.starts_with("PR-").all()
    assert out["organization_id"].str.starts_with("CL-").all()
    # the names are the practitioners' own: built from their Practitioner records
    expected = analysis.practitioner_display_names(practitioners)
    checked = out.join(expected, on="practitioner_id", suffix="_expected")
    assert checked.height == out.height
    assert (checked["practitioner_name"] == checked["practitioner_name_expected"]).all()
    assert not out["practitioner_name"].str.contains(r"^(PR|EP)-").any()


def test_every_role_of_the_mock_is_named_referrers_at_their_practice(mock_client: Client) -> None:
    out = analysis.practitioner_names(
        mock_client.frame("PractitionerRole"),
        mock_client.frame("Practitioner"),
        mock_client.frame("Organization"),
    )
    assert out["practitioner_name"].null_count() == 0
    assert out["organization_name"].null_count() == 0
    referrers = out.filter(pl.col("role_id").str.starts_with("EP-"))
    assert referrers.height > 0
    assert referrers["organization_id"].str.starts_with("SP-").all()


def test_every_mock_service_id_resolves_to_a_name(
    mock_client: Client, appointments: dict[str, pl.DataFrame]
) -> None:
    services = mock_client.frame("HealthcareService")
    info = appointments["appointment_supporting_information"]
    out = analysis.service_names(appointments["Appointment"], info, services)
    assert out.height == appointments["Appointment"].height
    named = out.filter(pl.col("service_id").is_not_null())
    assert named.height > 0
    assert named["service_name"].null_count() == 0
    every_id = set(info["supporting_information_id"].drop_nulls())
    assert every_id <= set(services["id"])


def test_the_mock_reconciles_every_invoice_with_a_gap_of_exactly_zero(
    mock_client: Client,
) -> None:
    invoices = mock_client.frame("Invoice")
    lines = mock_client.frames("InvoiceLine")
    out = analysis.invoice_reconciliation(
        invoices, lines["InvoiceLine"], lines["invoice_line_price_component"]
    )
    assert out.height == invoices.height > 0
    assert out["lines"].sum() == lines["InvoiceLine"].height
    assert out["finding"].unique().to_list() == ["ok"]
    assert out["gross_gap"].to_list() == [0.0] * out.height
    assert out["net_gap"].to_list() == [0.0] * out.height


def test_mock_referral_types_all_match_a_definition(mock_client: Client) -> None:
    out = analysis.referral_types(
        mock_client.frame("Referral"), mock_client.frame("ReferralDefinition")
    )
    assert out["definition_id"].null_count() == 0
    assert out["definition_funder_id"].str.starts_with("FD-").all()


def test_mock_weekly_counts_per_practitioner_add_up_to_the_appointments(
    mock_client: Client, appointments: dict[str, pl.DataFrame]
) -> None:
    who = analysis.appointment_practitioners(
        appointments["Appointment"],
        appointments["appointment_participant"],
        mock_client.frame("PractitionerRole"),
        mock_client.frame("Practitioner"),
    )
    visits = analysis.appointment_visits(
        appointments["Appointment"],
        appointments["appointment_participant"],
        now=dt.datetime(2026, 11, 1, tzinfo=dt.UTC),
        tz="UTC",
    )
    weekly = analysis.appointments_per_practitioner_week(visits, who, fill_weeks=True)
    kept = visits.filter(pl.col("outcome") != "cancelled").height
    assert weekly["appointments"].sum() == kept
    assert set(weekly["practitioner"]) == set(who["practitioner_name"])
    assert (weekly["week"].dt.weekday() == 1).all()
    weeks = weekly["week"].n_unique()
    assert weekly.height == weeks * weekly["practitioner"].n_unique()
