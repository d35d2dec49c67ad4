"""The CapabilityStatement generated from the catalogue, and what differs from it."""

from __future__ import annotations

import copy

from tests.conftest import api_client
from toolkit import catalogue as cat
from toolkit.mock import serve


def test_the_mock_serves_the_generated_statement_with_no_difference() -> None:
    with serve() as dep, api_client(dep) as client:
        answer = client.get("metadata")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith(cat.FHIR_JSON)
    assert answer.json() == cat.capability_statement()
    assert cat.capability_differences(answer.json()) == []


def test_every_endpoint_and_search_parameter_is_declared() -> None:
    statement = cat.capability_statement()
    declared = cat.declared_search(statement)
    assert set(declared) == set(cat.LISTED_RESOURCES)
    for rtype, params in cat.SEARCH_PARAMETERS.items():
        assert set(params) <= declared[rtype]
    types = {r["type"]: r for r in statement["rest"][0]["resource"]}
    assert {op["name"] for op in types["Appointment"]["operation"]} == {"book", "find"}
    patchable = {t for t, r in types.items() if {"code": "patch"} in r["interaction"]}
    assert patchable == set(cat.PATCHABLE)


def test_differences_name_what_is_missing_and_what_is_extra() -> None:
    statement = cat.capability_statement()
    changed = copy.deepcopy(statement)
    resources = changed["rest"][0]["resource"]
    resources[:] = [r for r in resources if r["type"] != "Patient"]
    appointment = next(r for r in resources if r["type"] == "Appointment")
    appointment["searchParam"] = [p for p in appointment["searchParam"] if p["name"] != "date"]
    appointment["searchParam"].append({"name": "location", "type": "reference"})
    resources.append({"type": "Location", "interaction": [{"code": "read"}]})
    assert cat.capability_differences(changed) == [
        "Patient: in the catalogue, not declared by the server",
        "Location: declared by the server, not in the catalogue",
        "Appointment: searchParam date not declared",
        "Appointment: searchParam location declared, not in the catalogue",
    ]
    assert cat.capability_differences({"resourceType": "Bundle"}) == [
        "the answer is not a CapabilityStatement"
    ]
    assert cat.capability_differences("not json at all") == [
        "the answer is not a CapabilityStatement"
    ]


def test_every_listed_type_declares_its_includes() -> None:
    statement = cat.capability_statement()
    declared = cat.declared_includes(statement)
    assert {t: set(n) for t, n in cat.INCLUDES.items() if n} == {
        t: n for t, n in declared.items() if n
    }
    appointment = declared["Appointment"]
    assert {
        "Appointment:patient",
        "Appointment:actor",
        "Appointment:actor:PractitionerRole",
        "Appointment:supporting-info",
    } <= appointment
    assert {"InvoiceLine:subject", "InvoiceLine:invoice", "InvoiceLine:performer"} <= declared[
        "InvoiceLine"
    ]
    assert {"Referral:subject", "Referral:coverage"} <= declared["Referral"]
    assert {"Coverage:beneficiary", "Coverage:payor"} <= declared["Coverage"]
    assert {"Invoice:subject", "Invoice:recipient"} <= declared["Invoice"]
    assert {"PractitionerRole:practitioner", "PractitionerRole:organization"} <= declared[
        "PractitionerRole"
    ]
    # a type without reference fields (or only to itself) declares none
    assert declared["Practitioner"] == set() and declared["Organization"] == set()


def test_include_targets_follow_the_reference_fields() -> None:
    inc = cat.INCLUDES["Appointment"]
    assert inc["Appointment:actor"].targets == ("PractitionerRole", "Patient")
    assert inc["Appointment:actor:PractitionerRole"].targets == ("PractitionerRole",)
    assert inc["Appointment:patient"].path == ("participant", "actor")
    assert inc["Appointment:patient"].targets == ("Patient",)
    assert inc["Appointment:supporting-info"].targets == ("HealthcareService",)
    for rtype, names in cat.INCLUDES.items():
        for name, include in names.items():
            assert name.split(":")[0] == rtype
            field = cat.field_at(rtype, ".".join(include.path))
            assert field.ref is not None and set(include.targets) <= set(field.ref.types)
            assert rtype not in include.targets


def test_references_are_read_in_every_form() -> None:
    inc = cat.INCLUDES["Appointment"]["Appointment:actor"]
    record = {
        "participant": [
            {"actor": {"reference": "https://au-api.halaxy.com/main/PractitionerRole/PR-1"}},
            {"actor": {"reference": "/main/Patient/7"}},
            {"actor": {"reference": "Patient/8"}},
            {"actor": {"reference": "9", "type": "Patient"}},
            {"actor": {"reference": "http://127.0.0.1:8000/main/Invoice/1"}},
            {"actor": {"display": "nobody"}},
            "not an object",
        ]
    }
    assert inc.references(record) == [
        ("PractitionerRole", "PR-1"),
        ("Patient", "7"),
        ("Patient", "8"),
        ("Patient", "9"),
    ]
    assert inc.references({"participant": "garbled"}) == []


def test_differences_name_missing_and_extra_includes() -> None:
    changed = copy.deepcopy(cat.capability_statement())
    appointment = next(r for r in changed["rest"][0]["resource"] if r["type"] == "Appointment")
    appointment["searchInclude"] = [
        i for i in appointment["searchInclude"] if i != "Appointment:patient"
    ] + ["Appointment:practitioner", 7]
    assert cat.capability_differences(changed) == [
        "Appointment: searchInclude Appointment:patient not declared",
        "Appointment: searchInclude Appointment:practitioner declared, not in the catalogue",
    ]


def test_a_missing_fhir_standard_parameter_is_named_as_such() -> None:
    """A deployment without a FHIR-standard parameter no source says the vendor serves
    (``cat.FHIR_SEARCH``) is told apart from one without a vendor-confirmed one."""
    assert cat.FHIR_SEARCH["Appointment"] == ("status", "practitioner")
    changed = copy.deepcopy(cat.capability_statement())
    appointment = next(r for r in changed["rest"][0]["resource"] if r["type"] == "Appointment")
    appointment["searchParam"] = [
        p for p in appointment["searchParam"] if p["name"] not in ("status", "date")
    ]
    assert cat.capability_differences(changed) == [
        "Appointment: searchParam date not declared",
        "Appointment: searchParam status not declared (FHIR R4 standard, not known to be "
        "served by the vendor)",
    ]
