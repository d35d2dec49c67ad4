"""pandera schemas built from the catalogue: each rule reports its failures."""

from __future__ import annotations

import warnings
from typing import Any

import polars as pl
import pytest

from toolkit import catalogue
from toolkit.errors import DataValidationError
from toolkit.schemas import PmtkDataWarning, schema_for, validate
from toolkit.views import VIEWS, flatten, flatten_tables


def ref(kind: str, rid: str) -> dict[str, str]:
    return {"reference": f"/main/{kind}/{rid}", "type": kind}


def bundle(*resources: dict[str, Any]) -> dict[str, Any]:
    return {"resourceType": "Bundle", "entry": [{"resource": r} for r in resources]}


def failures(df: pl.DataFrame, resource_type: str, table: str | None = None) -> pl.DataFrame:
    with pytest.raises(DataValidationError) as info:
        validate(df, resource_type, table=table)
    cases = info.value.failure_cases
    assert isinstance(cases, pl.DataFrame)
    return cases


def failing(cases: pl.DataFrame) -> set[tuple[str, str]]:
    return {(r["column"], str(r["failure_case"])) for r in cases.iter_rows(named=True)}


GOOD_REFERRAL: dict[str, Any] = {
    "resourceType": "Referral",
    "id": "1",
    "performer": ref("Practitioner", "PR-12"),
    "requester": ref("PractitionerRole", "EP-3"),
    "subject": ref("Patient", "44"),
    "allocationType": "All fee types",
    "expiryType": "standard",
    "limitMoney": {"amount": {"value": 50, "currency": "AUD"}},
}


@pytest.mark.parametrize("resource_type", catalogue.LISTED_RESOURCES)
def test_empty_tables_are_valid(resource_type: str) -> None:
    tables = flatten_tables(resource_type, [])
    for name, df in tables.items():
        table = None if name == resource_type else name
        assert validate(df, resource_type, table=table) is df


@pytest.mark.parametrize("resource_type", catalogue.LISTED_RESOURCES)
def test_every_view_column_is_in_its_schema(resource_type: str) -> None:
    for v in VIEWS[resource_type]:
        table = None if v.name == resource_type else v.name
        schema = schema_for(resource_type, table)
        assert list(schema.columns) == [c.name for c in v.columns]


def test_a_good_referral_passes() -> None:
    df = flatten("Referral", [bundle(GOOD_REFERRAL)])
    assert validate(df, "Referral").equals(df)


def test_enum_violation_is_reported() -> None:
    bad = {**GOOD_REFERRAL, "allocationType": "Everything"}
    cases = failures(flatten("Referral", [bundle(bad)]), "Referral")
    assert failing(cases) == {("allocation_type", "Everything")}


def test_invoice_line_status_allows_null_but_not_other_values() -> None:
    lines = [
        {"resourceType": "InvoiceLine", "id": "1", "status": None},
        {"resourceType": "InvoiceLine", "id": "2", "status": "locked"},
        {"resourceType": "InvoiceLine", "id": "3", "status": "paid"},
    ]
    cases = failures(flatten("InvoiceLine", [bundle(*lines)]), "InvoiceLine")
    assert failing(cases) == {("status", "paid")}


def test_id_prefix_violation_is_reported() -> None:
    page = bundle({"resourceType": "Practitioner", "id": "XP-1"})
    cases = failures(flatten("Practitioner", [page]), "Practitioner")
    assert ("id", "XP-1") in failing(cases)


def test_reference_to_the_wrong_prefix_is_reported() -> None:
    bad = {**GOOD_REFERRAL, "performer": ref("Practitioner", "EP-9")}
    cases = failures(flatten("Referral", [bundle(bad)]), "Referral")
    assert failing(cases) == {("performer_id", "EP-9")}


def test_reference_prefix_is_checked_per_target_type() -> None:
    coverages = [
        {"resourceType": "Coverage", "id": "1", "payor": ref("Organization", "FD-1")},
        {"resourceType": "Coverage", "id": "2", "payor": ref("Patient", "77")},
        {"resourceType": "Coverage", "id": "3", "payor": ref("Organization", "77")},
        {"resourceType": "Coverage", "id": "4", "payor": ref("Slot", "FD-1")},
    ]
    # The target types (Patient or Organization) are the spec's: a Slot fails the frame.
    # The funder prefixes FD-/OG- are pmtk's reading, so those are observations (a warning
    # carrying its own failure table), still checked per target type.
    with pytest.warns(PmtkDataWarning) as caught:
        cases = failures(flatten("Coverage", [bundle(*coverages)]), "Coverage")
    assert failing(cases) == {("payor_type", "Slot")}
    observed = caught[0].message.failure_cases  # type: ignore[union-attr]
    assert failing(observed) == {("payor_id", "77"), ("payor_id", "FD-1")}


def test_phone_format_applies_only_to_phone_like_telecom() -> None:
    org = {
        "resourceType": "Organization",
        "id": "CL-1",
        "telecom": [
            {"system": "phone", "value": "+61 2 9876 5432"},
            {"system": "email", "value": "desk@example.org"},
            {"system": "fax", "value": "+61298765432"},
        ],
    }
    df = flatten("Organization", [bundle(org)], table="organization_telecom")
    cases = failures(df, "Organization", "organization_telecom")
    assert failing(cases) == {("value", "+61 2 9876 5432")}


def test_country_and_currency_codes_are_checked() -> None:
    org = {"resourceType": "Organization", "id": "CL-1", "address": [{"country": "Australia"}]}
    df = flatten("Organization", [bundle(org)], table="organization_address")
    assert failing(failures(df, "Organization", "organization_address")) == {
        ("country", "Australia")
    }
    bad = {**GOOD_REFERRAL, "limitMoney": {"amount": {"value": 1, "currency": "AUS"}}}
    cases = failures(flatten("Referral", [bundle(bad)]), "Referral")
    assert failing(cases) == {("limit_money_currency", "AUS")}


def test_missing_required_end_is_reported() -> None:
    appt = {"resourceType": "Appointment", "id": "1", "start": "2026-11-21T09:00:00Z"}
    cases = failures(flatten("Appointment", [bundle(appt)]), "Appointment")
    assert ("end", "None") in failing(cases)


def test_duplicate_ids_are_reported() -> None:
    df = flatten("Referral", [bundle(GOOD_REFERRAL, GOOD_REFERRAL)])
    assert ("id", "1") in failing(failures(df, "Referral"))


def test_error_message_summarises_column_check_count_and_examples() -> None:
    bad = [{**GOOD_REFERRAL, "id": str(i), "allocationType": "Everything"} for i in range(4)]
    with pytest.raises(DataValidationError) as info:
        validate(flatten("Referral", [bundle(*bad)]), "Referral")
    message = str(info.value)
    assert "allocation_type" in message
    assert "failed 4 time(s)" in message
    assert "'Everything'" in message


def test_warn_mode_warns_and_returns_the_frame() -> None:
    bad = {**GOOD_REFERRAL, "allocationType": "Everything"}
    df = flatten("Referral", [bundle(bad)])
    with pytest.warns(PmtkDataWarning, match="allocation_type") as record:
        out = validate(df, "Referral", errors="warn")
    assert out is df
    warning = record[0].message
    assert isinstance(warning, PmtkDataWarning)
    assert warning.failure_cases.get_column("column").to_list() == ["allocation_type"]


def test_warn_mode_is_silent_for_a_valid_frame() -> None:
    df = flatten("Referral", [bundle(GOOD_REFERRAL)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        validate(df, "Referral", errors="warn")


def test_a_lazy_frame_gets_its_data_checks() -> None:
    bad = {**GOOD_REFERRAL, "allocationType": "Everything"}
    lazy = flatten("Referral", [bundle(bad)]).lazy()
    with pytest.raises(DataValidationError, match="allocation_type"):
        validate(lazy, "Referral")


def test_a_wrong_dtype_is_reported() -> None:
    df = flatten("Referral", [bundle(GOOD_REFERRAL)]).with_columns(pl.col("active").cast(pl.Int8))
    cases = failures(df, "Referral")
    assert "active" in cases.get_column("column").to_list()


def test_participant_child_table_checks_actor_prefix_by_type() -> None:
    appt = {
        "resourceType": "Appointment",
        "id": "1",
        "start": "2026-11-21T09:00:00Z",
        "end": "2026-11-21T09:30:00Z",
        "participant": [
            {"actor": ref("PractitionerRole", "XX-1")},
            {"actor": ref("Patient", "5")},
        ],
    }
    df = flatten("Appointment", [bundle(appt)], table="appointment_participant")
    # The participant's actor comes from the facts: a warning, never an error.
    with pytest.warns(PmtkDataWarning, match="not the spec") as caught:
        assert validate(df, "Appointment", table="appointment_participant") is df
    (warning,) = caught
    cases = warning.message.failure_cases  # type: ignore[union-attr]
    assert failing(cases) == {("actor_id", "XX-1")}
    assert cases.get_column("id").to_list() == ["1"]


def test_unknown_errors_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="errors must be"):
        validate(flatten("Referral", []), "Referral", errors="ignore")  # type: ignore[arg-type]
