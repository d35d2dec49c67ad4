"""Where each catalogue rule comes from, and what the contract checks do with it."""

from __future__ import annotations

import re
from pathlib import Path

from contracts.walker import Seen, walk_resource
from toolkit.rules import non_spec_rules, non_spec_rules_table

DOC = Path(__file__).parents[2] / "docs" / "contracts.md"
START, END = "<!-- non-spec-rules:start -->", "<!-- non-spec-rules:end -->"

# Pinned: a rule that moves to or from the spec must be a visible, reviewed change.
NON_SPEC = [
    ("Referral", "(create)", "required", "facts"),
    ("Referral", "meta", "all", "facts"),
    ("Referral", "limitQuantity.quantity", "type", "pmtk"),
    ("Referral", "priority", "all", "facts"),
    ("Appointment", "meta", "all", "facts"),
    ("Appointment", "supportingInformation", "type", "facts"),
    ("Appointment", "location-type", "enum", "facts"),
    ("Appointment", "location-type", "encoding", "pmtk"),
    ("Appointment", "participant.type", "all", "facts"),
    ("Appointment", "participant.actor", "all", "facts"),
    ("Appointment", "participant.appointment-participant-status", "enum", "facts"),
    ("Appointment", "participant.appointment-participant-status", "encoding", "facts"),
    ("Appointment", "participant.appointment-participant-invoice", "encoding", "facts"),
    ("Coverage", "(create)", "required", "facts"),
    ("Coverage", "meta", "all", "facts"),
    ("Coverage", "status", "enum", "facts"),
    ("Coverage", "payor", "reference", "pmtk"),
    ("Coverage", "coverage-patient-anonymous", "type", "pmtk"),
    ("Coverage", "coverage-patient-anonymous", "encoding", "pmtk"),
    ("Coverage", "coverage-payer", "encoding", "facts"),
    ("Coverage", "coverage-payer.code", "enum", "facts"),
    ("Coverage", "coverage-organisation", "encoding", "facts"),
    ("Coverage", "identifier.system", "all", "pmtk"),
    ("Coverage", "identifier.value", "all", "pmtk"),
    ("Organization", "(create)", "required", "pmtk"),
    ("Organization", "meta", "all", "facts"),
    ("Practitioner", "(create)", "required", "pmtk"),
    ("Practitioner", "meta", "all", "facts"),
    ("Practitioner", "identifier.value", "all", "facts"),
    ("Practitioner", "name.use", "enum", "pmtk"),
    ("Practitioner", "telecom.system", "enum", "pmtk"),
    ("Practitioner", "telecom.use", "enum", "pmtk"),
    ("Practitioner", "qualification.code", "all", "facts"),
    ("InvoiceLine", "meta", "all", "facts"),
    ("InvoiceLine", "resource.type", "all", "pmtk"),
    ("InvoiceLine", "resource.display", "all", "pmtk"),
    ("InvoiceLine", "unitPriceComponent.amount.currency", "all", "pmtk"),
    ("InvoiceLine", "invoice-line-funder", "encoding", "pmtk"),
    ("Patient", "*", "all", "facts"),
    ("Invoice", "*", "all", "facts"),
    ("HealthcareService", "*", "all", "pmtk"),
    ("PractitionerRole", "*", "all", "pmtk"),
    ("ReferralDefinition", "*", "all", "pmtk"),
    ("ChargeItemDefinition", "*", "all", "pmtk"),
    ("Slot", "*", "all", "pmtk"),
    ("Schedule", "*", "all", "facts"),
]


def test_every_rule_not_from_the_spec_is_pinned() -> None:
    assert [(r.resource, r.path, r.aspect, r.source) for r in non_spec_rules()] == NON_SPEC


def test_docs_list_the_non_spec_rules_as_generated() -> None:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(re.escape(START) + r"\n(.*?)" + re.escape(END), text, re.S)
    assert match, f"{DOC} lacks the generated section {START} ... {END}"
    assert match.group(1) == non_spec_rules_table(), (
        "docs/contracts.md is stale: paste toolkit.rules.non_spec_rules_table()"
    )


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
