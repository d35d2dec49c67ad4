"""Rule sources: only the spec's rules fail a frame; the others are observations."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from toolkit.errors import DataValidationError
from toolkit.schemas import PmtkDataWarning, non_spec_rules, rules_markdown, validate
from toolkit.views import VIEWS, flatten

DOC = Path(__file__).resolve().parents[2] / "docs" / "views.md"

# Pinned on purpose: a rule that stops being the spec's must show up here, in review.
NON_SPEC_RULES = [
    ("appointment_participant", "actor_id", "reference_id", "pmtk"),
    ("appointment_participant", "actor_type", "reference_type", "facts"),
    ("Coverage", "status", "enum", "facts"),
    ("Coverage", "payer_code", "enum", "facts"),
    ("Coverage", "payor_id", "reference_id", "pmtk"),
    ("Practitioner", "name_use", "enum", "pmtk"),
    ("practitioner_name", "use", "enum", "pmtk"),
    ("practitioner_telecom", "system", "enum", "pmtk"),
    ("practitioner_telecom", "use", "enum", "pmtk"),
    ("InvoiceLine", "resource_type", "enum", "pmtk"),
    ("invoice_line_price_component", "amount_currency", "currency_code", "pmtk"),
    ("Patient", "gender", "enum", "facts"),
    ("Patient", "status", "enum", "facts"),
    ("Patient", "name_use", "enum", "facts"),
    ("patient_name", "use", "enum", "facts"),
    ("patient_telecom", "system", "enum", "facts"),
    ("patient_telecom", "value", "phone_format", "facts"),
    ("patient_telecom", "use", "enum", "facts"),
    ("patient_address", "use", "enum", "facts"),
    ("patient_address", "type", "enum", "facts"),
    ("patient_address", "country", "country_code", "facts"),
    ("patient_general_practitioner", "general_practitioner_id", "reference_id", "facts"),
    ("patient_general_practitioner", "general_practitioner_type", "reference_type", "facts"),
    # The referenced resources (spec 2.7, fields "not shown"): every rule is the facts' or pmtk's.
    ("Invoice", "status", "enum", "facts"),
    ("Invoice", "subject_id", "reference_id", "pmtk"),
    ("Invoice", "subject_type", "reference_type", "pmtk"),
    ("Invoice", "recipient_id", "reference_id", "pmtk"),
    ("Invoice", "recipient_type", "reference_type", "pmtk"),
    ("Invoice", "total_net_currency", "currency_code", "facts"),
    ("Invoice", "total_gross_currency", "currency_code", "facts"),
    ("Invoice", "total_balance_currency", "currency_code", "facts"),
    ("Invoice", "total_paid_currency", "currency_code", "facts"),
    ("HealthcareService", "provided_by_id", "reference_id", "pmtk"),
    ("HealthcareService", "provided_by_type", "reference_type", "pmtk"),
    ("PractitionerRole", "practitioner_id", "reference_id", "pmtk"),
    ("PractitionerRole", "practitioner_type", "reference_type", "pmtk"),
    ("PractitionerRole", "organization_id", "reference_id", "pmtk"),
    ("PractitionerRole", "organization_type", "reference_type", "pmtk"),
    ("practitioner_role_healthcare_service", "healthcare_service_id", "reference_id", "pmtk"),
    ("practitioner_role_healthcare_service", "healthcare_service_type", "reference_type", "pmtk"),
    ("ReferralDefinition", "funder_id", "reference_id", "pmtk"),
    ("ReferralDefinition", "funder_type", "reference_type", "pmtk"),
    ("ReferralDefinition", "limit_money_currency", "currency_code", "pmtk"),
    ("ChargeItemDefinition", "price_currency", "currency_code", "pmtk"),
    ("Slot", "start", "not_nullable", "pmtk"),
    ("Slot", "end", "not_nullable", "pmtk"),
    ("Slot", "status", "enum", "pmtk"),
    ("Slot", "practitioner_role_id", "reference_id", "pmtk"),
    ("Slot", "practitioner_role_type", "reference_type", "pmtk"),
    ("Slot", "healthcare_service_id", "reference_id", "pmtk"),
    ("Slot", "healthcare_service_type", "reference_type", "pmtk"),
]
# Every date and date-time column's precision: a partial date, or a date-time in a
# date column, is pmtk's reading of what FHIR allows, an observation (issue 24).
NON_SPEC_RULES += [
    (v.name, c.name, "full_precision", "pmtk")
    for v in (v for views in VIEWS.values() for v in views)
    for c in v.columns
    if c.role == "precision"
]


def bundle(*resources: dict[str, Any]) -> dict[str, Any]:
    return {"resourceType": "Bundle", "entry": [{"resource": r} for r in resources]}


def test_the_rules_that_are_not_the_specs_are_exactly_the_pinned_list() -> None:
    assert sorted(non_spec_rules()) == sorted(NON_SPEC_RULES)


def test_the_doc_lists_the_generated_non_spec_rules() -> None:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("<!-- non-spec rules: generated -->") + len(
        "<!-- non-spec rules: generated -->\n"
    )
    end = text.index("<!-- end of non-spec rules -->")
    assert text[start:end] == rules_markdown(), (
        "docs/views.md is stale: regenerate its non-spec rule list from rules_markdown()"
    )


def test_a_facts_enum_violation_warns_and_never_raises() -> None:
    # Coverage status values come from the facts; the spec says "not shown".
    coverages = [
        {"resourceType": "Coverage", "id": "C1", "status": "suspended"},
        {"resourceType": "Coverage", "id": "C2", "status": "active"},
    ]
    df = flatten("Coverage", [bundle(*coverages)])
    with pytest.warns(PmtkDataWarning, match="not the spec") as caught:
        assert validate(df, "Coverage", errors="raise") is df
    cases = caught[0].message.failure_cases  # type: ignore[union-attr]
    assert cases.select("id", "column", "failure_case").rows() == [("C1", "status", "suspended")]


def test_a_pmtk_enum_violation_warns_and_a_spec_one_raises_beside_it() -> None:
    line = {
        "resourceType": "InvoiceLine",
        "id": "L1",
        "resource": {"type": "bundle"},  # pmtk's own reading of a "not shown" item
        "status": "paid",  # the spec's enum
    }
    df = flatten("InvoiceLine", [bundle(line)])
    with (
        pytest.warns(PmtkDataWarning, match="resource_type"),
        pytest.raises(DataValidationError) as info,
    ):
        validate(df, "InvoiceLine")
    cases = info.value.failure_cases
    assert cases.select("id", "column", "failure_case").rows() == [("L1", "status", "paid")]


def test_a_wrong_json_type_in_a_facts_field_is_an_observation() -> None:
    patient = {"resourceType": "Patient", "id": "P1", "gender": 1}
    df = flatten("Patient", [bundle(patient)])
    assert df.get_column("gender").to_list() == [None]
    with pytest.warns(PmtkDataWarning) as caught:
        validate(df, "Patient")
    cases = caught[0].message.failure_cases  # type: ignore[union-attr]
    assert cases.select("id", "column", "check", "failure_case").rows() == [
        ("P1", "gender", "json_type: gender", "1")
    ]


def test_spec_valid_frames_give_no_warning() -> None:
    coverage = {"resourceType": "Coverage", "id": "C1", "status": "active"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        validate(flatten("Coverage", [bundle(coverage)]), "Coverage")
    assert isinstance(flatten("Coverage", []), pl.DataFrame)
