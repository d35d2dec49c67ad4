"""Where each catalogue rule comes from, and what the contract checks do with it."""

from __future__ import annotations

from contracts.walker import Seen, walk_resource
from toolkit.rule_sources import pinned_rows

# Pinned: a rule that moves to or from the spec must be a visible, reviewed change, with
# the frame checks that move with it. Written by `uv run python tools/regenerate.py`: after
# a catalogue change, run it and read this list's diff in review.
# generated: pinned-rules
NON_SPEC: dict[tuple[str, str, str, str], list[str]] = {
    ("Referral", "(create)", "required", "facts"): [],
    ("Referral", "meta", "all", "facts"): [
        "Referral.last_updated_precision full_precision (pmtk)",
    ],
    ("Referral", "limitQuantity.quantity", "type", "pmtk"): [],
    ("Referral", "priority", "all", "facts"): [],
    ("Appointment", "meta", "all", "facts"): [
        "Appointment.last_updated_precision full_precision (pmtk)",
    ],
    ("Appointment", "supportingInformation", "type", "facts"): [],
    ("Appointment", "location-type", "enum", "facts"): [],
    ("Appointment", "location-type", "encoding", "pmtk"): [],
    ("Appointment", "participant.type", "all", "facts"): [],
    ("Appointment", "participant.actor", "all", "facts"): [
        "appointment_participant.actor_id reference_id (pmtk)",
        "appointment_participant.actor_type reference_type (facts)",
    ],
    ("Appointment", "participant.appointment-participant-status", "enum", "facts"): [],
    ("Appointment", "participant.appointment-participant-status", "encoding", "facts"): [],
    ("Appointment", "participant.appointment-participant-invoice", "encoding", "facts"): [],
    ("Coverage", "(create)", "required", "facts"): [],
    ("Coverage", "meta", "all", "facts"): [
        "Coverage.last_updated_precision full_precision (pmtk)",
    ],
    ("Coverage", "status", "enum", "facts"): [
        "Coverage.status enum (facts)",
    ],
    ("Coverage", "payor", "reference", "pmtk"): [
        "Coverage.payor_id reference_id (pmtk)",
    ],
    ("Coverage", "coverage-patient-anonymous", "type", "pmtk"): [],
    ("Coverage", "coverage-patient-anonymous", "encoding", "pmtk"): [],
    ("Coverage", "coverage-payer", "encoding", "facts"): [],
    ("Coverage", "coverage-payer.code", "enum", "facts"): [
        "Coverage.payer_code enum (facts)",
    ],
    ("Coverage", "coverage-organisation", "encoding", "facts"): [],
    ("Coverage", "identifier.system", "all", "pmtk"): [],
    ("Coverage", "identifier.value", "all", "pmtk"): [],
    ("Organization", "(create)", "required", "pmtk"): [],
    ("Organization", "meta", "all", "facts"): [
        "Organization.last_updated_precision full_precision (pmtk)",
    ],
    ("Practitioner", "(create)", "required", "pmtk"): [],
    ("Practitioner", "meta", "all", "facts"): [
        "Practitioner.last_updated_precision full_precision (pmtk)",
    ],
    ("Practitioner", "identifier.value", "all", "facts"): [],
    ("Practitioner", "name.use", "enum", "pmtk"): [
        "Practitioner.name_use enum (pmtk)",
        "practitioner_name.use enum (pmtk)",
    ],
    ("Practitioner", "telecom.system", "enum", "pmtk"): [
        "practitioner_telecom.system enum (pmtk)",
    ],
    ("Practitioner", "telecom.use", "enum", "pmtk"): [
        "practitioner_telecom.use enum (pmtk)",
    ],
    ("Practitioner", "qualification.code", "all", "facts"): [],
    ("InvoiceLine", "meta", "all", "facts"): [
        "InvoiceLine.last_updated_precision full_precision (pmtk)",
    ],
    ("InvoiceLine", "resource.type", "all", "pmtk"): [
        "InvoiceLine.resource_type enum (pmtk)",
    ],
    ("InvoiceLine", "resource.display", "all", "pmtk"): [],
    ("InvoiceLine", "unitPriceComponent.amount.currency", "all", "pmtk"): [
        "invoice_line_price_component.amount_currency currency_code (pmtk)",
    ],
    ("InvoiceLine", "invoice-line-funder", "encoding", "pmtk"): [],
    ("Patient", "*", "all", "facts"): [
        "Patient.last_updated_precision full_precision (pmtk)",
        "Patient.gender enum (facts)",
        "Patient.birth_date_precision full_precision (pmtk)",
        "Patient.status enum (facts)",
        "Patient.name_use enum (facts)",
        "patient_name.use enum (facts)",
        "patient_telecom.system enum (facts)",
        "patient_telecom.value phone_format (facts)",
        "patient_telecom.use enum (facts)",
        "patient_address.use enum (facts)",
        "patient_address.type enum (facts)",
        "patient_address.country country_code (facts)",
        "patient_general_practitioner.general_practitioner_id reference_id (facts)",
        "patient_general_practitioner.general_practitioner_type reference_type (facts)",
    ],
    ("Invoice", "*", "all", "facts"): [
        "Invoice.last_updated_precision full_precision (pmtk)",
        "Invoice.status enum (facts)",
        "Invoice.subject_id reference_id (pmtk)",
        "Invoice.subject_type reference_type (pmtk)",
        "Invoice.recipient_id reference_id (pmtk)",
        "Invoice.recipient_type reference_type (pmtk)",
        "Invoice.date_precision full_precision (pmtk)",
        "Invoice.total_net_currency currency_code (facts)",
        "Invoice.total_gross_currency currency_code (facts)",
        "Invoice.total_balance_currency currency_code (facts)",
        "Invoice.total_paid_currency currency_code (facts)",
    ],
    ("HealthcareService", "*", "all", "pmtk"): [
        "HealthcareService.last_updated_precision full_precision (pmtk)",
        "HealthcareService.provided_by_id reference_id (pmtk)",
        "HealthcareService.provided_by_type reference_type (pmtk)",
    ],
    ("PractitionerRole", "*", "all", "pmtk"): [
        "PractitionerRole.last_updated_precision full_precision (pmtk)",
        "PractitionerRole.practitioner_id reference_id (pmtk)",
        "PractitionerRole.practitioner_type reference_type (pmtk)",
        "PractitionerRole.organization_id reference_id (pmtk)",
        "PractitionerRole.organization_type reference_type (pmtk)",
        "practitioner_role_healthcare_service.healthcare_service_id reference_id (pmtk)",
        "practitioner_role_healthcare_service.healthcare_service_type reference_type (pmtk)",
    ],
    ("ReferralDefinition", "*", "all", "pmtk"): [
        "ReferralDefinition.last_updated_precision full_precision (pmtk)",
        "ReferralDefinition.funder_id reference_id (pmtk)",
        "ReferralDefinition.funder_type reference_type (pmtk)",
        "ReferralDefinition.limit_money_currency currency_code (pmtk)",
    ],
    ("ChargeItemDefinition", "*", "all", "pmtk"): [
        "ChargeItemDefinition.last_updated_precision full_precision (pmtk)",
        "ChargeItemDefinition.price_currency currency_code (pmtk)",
    ],
    ("Slot", "*", "all", "pmtk"): [
        "Slot.last_updated_precision full_precision (pmtk)",
        "Slot.start not_nullable (pmtk)",
        "Slot.start_precision full_precision (pmtk)",
        "Slot.end not_nullable (pmtk)",
        "Slot.end_precision full_precision (pmtk)",
        "Slot.status enum (pmtk)",
        "Slot.practitioner_role_id reference_id (pmtk)",
        "Slot.practitioner_role_type reference_type (pmtk)",
        "Slot.healthcare_service_id reference_id (pmtk)",
        "Slot.healthcare_service_type reference_type (pmtk)",
        "Slot.schedule_id reference_id (pmtk)",
        "Slot.schedule_type reference_type (pmtk)",
    ],
    ("Schedule", "*", "all", "facts"): [
        "Schedule.last_updated_precision full_precision (pmtk)",
        "Schedule.planning_horizon_start_precision full_precision (pmtk)",
        "Schedule.planning_horizon_end_precision full_precision (pmtk)",
        "schedule_actor.actor_id reference_id (facts)",
        "schedule_actor.actor_type reference_type (facts)",
    ],
    ("Referral", "period.start", "precision", "pmtk"): [
        "Referral.period_start_precision full_precision (pmtk)",
    ],
    ("Referral", "period.end", "precision", "pmtk"): [
        "Referral.period_end_precision full_precision (pmtk)",
    ],
    ("Referral", "created", "precision", "pmtk"): [
        "Referral.created_precision full_precision (pmtk)",
    ],
    ("Appointment", "start", "precision", "pmtk"): [
        "Appointment.start_precision full_precision (pmtk)",
    ],
    ("Appointment", "end", "precision", "pmtk"): [
        "Appointment.end_precision full_precision (pmtk)",
    ],
    ("Appointment", "created", "precision", "pmtk"): [
        "Appointment.created_precision full_precision (pmtk)",
    ],
    ("Coverage", "period.start", "precision", "pmtk"): [
        "Coverage.period_start_precision full_precision (pmtk)",
    ],
    ("InvoiceLine", "enteredDate", "precision", "pmtk"): [
        "InvoiceLine.entered_date_precision full_precision (pmtk)",
    ],
}
# end generated: pinned-rules


def test_every_rule_not_from_the_spec_is_pinned_with_its_frame_checks() -> None:
    assert pinned_rows() == NON_SPEC


LINE = {
    "resourceType": "InvoiceLine",
    "id": "1",
    "resource": {"type": "fee", "display": "Consult"},
    "status": "locked",
    "subject": {"reference": "https://au-api.halaxy.com/main/Patient/7", "type": "Patient"},
    "context": {"reference": "Appointment/3", "type": "Appointment"},
}


def test_a_pmtk_enum_is_an_observation_and_a_spec_enum_a_failure() -> None:
    problems = walk_resource("InvoiceLine", LINE)
    assert [(p.category, p.source, p.field) for p in problems] == [
        ("enum", "pmtk", "InvoiceLine.resource.type")
    ]
    bad = walk_resource("InvoiceLine", {**LINE, "status": "paid"})
    assert ("enum", "spec") in {(p.category, p.source) for p in bad}


def test_absolute_and_type_id_references_are_accepted_and_counted_per_field() -> None:
    seen = Seen()
    for n in range(3):
        problems = walk_resource("InvoiceLine", {**LINE, "id": str(n)}, seen)
        assert [(p.category, p.source) for p in problems] == [("enum", "pmtk")]
    forms = {f["field"]: f for f in seen.reference_forms()}
    assert forms["InvoiceLine.subject"]["forms"] == {"absolute": 3}
    assert forms["InvoiceLine.context"]["forms"] == {"type-id": 3}
    wrong = {**LINE, "subject": {"reference": "https://x.example/main/Practitioner/PR-1"}}
    assert [(p.category, p.source) for p in walk_resource("InvoiceLine", wrong)][-1] == (
        "reference",
        "spec",
    )


def test_full_extension_urls_and_any_coded_value_key_are_read() -> None:
    base = "https://terminology.halaxy.com/StructureDefinition/"
    for key, value in (
        ("valueCode", "clinic"),
        ("valueString", "clinic"),
        ("valueCoding", {"code": "clinic"}),
    ):
        appt = {
            "resourceType": "Appointment",
            "id": "1",
            "start": "2026-11-23T09:00:00Z",
            "end": "2026-11-23T09:30:00Z",
            "extension": [{"url": base + "location-type", key: value}],
        }
        seen = Seen()
        assert walk_resource("Appointment", appt, seen) == []
        assert seen.forms["Appointment.location-type"][f"value:{key}"] == 1
        assert seen.present["Appointment.location-type"] == 1


def test_a_field_absent_from_every_record_is_reported_with_the_unknown_url_beside_it() -> None:
    seen = Seen()
    appt = {
        "resourceType": "Appointment",
        "id": "1",
        "start": "2026-11-23T09:00:00Z",
        "end": "2026-11-23T09:30:00Z",
        "participant": [
            {"modifierExtension": [{"url": "participant-state", "valueCode": "booked"}]}
        ],
    }
    walk_resource("Appointment", appt, seen)
    missing = {m["field"]: m for m in seen.missing_everywhere()}
    status = missing["Appointment.participant.appointment-participant-status"]
    assert status["source"] == "spec"
    assert status["unknown_extensions_beside"] == ["participant-state"]
    assert "Appointment.start" not in missing
