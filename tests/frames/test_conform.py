"""The conform step: alternative forms read as the canonical one, a wrong JSON type nulled.

Each resource is written by hand in the forms FHIR R4 and the facts file give
("Shapes seen on the live service": a HumanName object where the spec has an
array, a Quantity ``{"value": ...}`` for a count, a Reference for a name, a
CodeableConcept around a Coding), with values of the wrong JSON type where a
column wants a number, a boolean or a text. ``toolkit.views.conform`` promises
that 1.5 is never truncated into an Int64 column, that a boolean is never read
as a number (Polars would do both), and that unknown keys at any depth go to
``extra`` by path. ``tools/mutation.py conform`` runs these tests against
mutants of ``toolkit/views/conform.py`` (see docs/testing.md).
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import polars as pl
import pytest

from toolkit.views import flatten, flatten_tables


def page(*resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "resourceType": "Bundle",
        "type": "searchset",
        "entry": [{"fullUrl": f"urn:uuid:{i}", "resource": r} for i, r in enumerate(resources)],
    }


def appointment(rid: str, **fields: Any) -> dict[str, Any]:
    return {"resourceType": "Appointment", "id": rid, "status": "booked", **fields}


def invalid(frame: pl.DataFrame, row: int) -> list[dict[str, Any]]:
    text = frame.get_column("invalid")[row]
    return [] if text is None else orjson.loads(text)


def extra(frame: pl.DataFrame, row: int) -> dict[str, Any]:
    text = frame.get_column("extra")[row]
    return {} if text is None else orjson.loads(text)


def test_a_fraction_is_never_truncated_into_an_integer_column():
    # Appointment.minutesDuration is a FHIR positiveInt.
    frame = flatten("Appointment", page(appointment("a1", minutesDuration=1.5)))
    assert frame.get_column("minutes_duration").to_list() == [None]
    assert invalid(frame, 0) == [
        {"path": "minutesDuration", "column": "minutes_duration", "value": 1.5}
    ]


def test_an_integral_float_is_an_integer():
    frame = flatten(
        "Appointment",
        page(appointment("a1", minutesDuration=30.0, description=7)),
    )
    assert frame.get_column("minutes_duration").to_list() == [30]
    assert frame.get_column("minutes_duration").dtype == pl.Int64
    assert [p["path"] for p in invalid(frame, 0)] == ["description"]


@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_is_not_read_into_a_number_column(value):
    frame = flatten("Appointment", page(appointment("a1", minutesDuration=value)))
    assert frame.get_column("minutes_duration").to_list() == [None]
    assert invalid(frame, 0)[0]["value"] is value


def test_a_boolean_is_not_read_into_a_float_column():
    line = {"resourceType": "InvoiceLine", "id": "l1", "quantity": True}
    frame = flatten("InvoiceLine", page(line))
    assert frame.get_column("quantity").to_list() == [None]
    assert invalid(frame, 0) == [{"path": "quantity", "column": "quantity", "value": True}]


def test_an_integer_reads_into_a_float_column_and_a_text_does_not():
    lines = [
        {"resourceType": "InvoiceLine", "id": "l1", "quantity": 2, "description": 5},
        {"resourceType": "InvoiceLine", "id": "l2", "quantity": "2"},
        {"resourceType": "InvoiceLine", "id": "l3", "quantity": 0.25, "status": 1},
    ]
    frame = flatten("InvoiceLine", page(*lines))
    assert frame.get_column("quantity").to_list() == [2.0, None, 0.25]
    assert frame.get_column("description").to_list() == [None, None, None]
    assert invalid(frame, 0) == [{"path": "description", "column": "description", "value": 5}]
    assert invalid(frame, 1) == [{"path": "quantity", "column": "quantity", "value": "2"}]


def test_the_int64_range_is_kept_at_its_edges_and_refused_beyond():
    # Forced through the repair by a wrong type beside it (description as a number).
    low, high = -(2**63), 2**63 - 1
    resources = [
        appointment("a1", minutesDuration=low, description=1),
        appointment("a2", minutesDuration=high, description=1),
        appointment("a3", minutesDuration=2**63, description=1),
        appointment("a4", minutesDuration=float(2**63), description=1),
    ]
    frame = flatten("Appointment", json.dumps(page(*resources)))
    assert frame.get_column("minutes_duration").to_list() == [low, high, None, None]
    assert sorted(p["path"] for p in invalid(frame, 2)) == ["description", "minutesDuration"]


@pytest.mark.parametrize("text", ["-9223372036854775809", "-1180591620717411303424", "1e30"])
@pytest.mark.parametrize("alone", [True, False])
def test_an_integer_beyond_64_bits_is_reported_exactly_never_rounded_into_range(
    text: str, alone: bool
) -> None:
    # JSON text, not Python numbers: an integer below -2**63 is exact in the page, and a
    # decoder that reads it as a double rounds it to -2**63, which fits an Int64 column.
    # Alone on a clean page and beside another record's wrong type (the repair path).
    other = "" if alone else ',{"resource":{"resourceType":"Appointment","id":"a2","status":1}}'
    raw = (
        '{"resourceType":"Bundle","type":"searchset","entry":[{"resource":'
        '{"resourceType":"Appointment","id":"a1","status":"booked","minutesDuration":'
        + text
        + "}}"
        + other
        + "]}"
    ).encode()
    frame = flatten("Appointment", [raw, raw])
    assert frame.get_column("minutes_duration").to_list()[0] is None
    text_of_invalid = frame.get_column("invalid")[0]
    assert text_of_invalid is not None
    # read with the standard library, which keeps big integers exact (orjson does not)
    reported = [p for p in json.loads(text_of_invalid) if p["path"] == "minutesDuration"]
    assert len(reported) == 1
    assert json.dumps(reported[0]["value"]) == json.dumps(json.loads(text))


@pytest.mark.parametrize("value", ["true", 1, 0.0])
def test_only_a_json_boolean_reads_into_a_boolean_column(value):
    org = {"resourceType": "Organization", "id": "o1", "active": value}
    frame = flatten("Organization", page(org, {**org, "id": "o2", "active": False}))
    assert frame.get_column("active").to_list() == [None, False]
    assert invalid(frame, 0) == [{"path": "active", "column": "active", "value": value}]
    assert invalid(frame, 1) == []


def test_a_text_column_refuses_an_object_and_an_array():
    resources = [
        appointment("a1", description={"text": "x"}),
        appointment("a2", description=["x"]),
        appointment("a3", description="check-up"),
    ]
    frame = flatten("Appointment", page(*resources))
    assert frame.get_column("description").to_list() == [None, None, "check-up"]
    assert invalid(frame, 0)[0]["value"] == {"text": "x"}
    assert invalid(frame, 1)[0]["value"] == ["x"]


def test_nested_unknown_keys_go_to_the_child_rows_extra_by_path():
    patient = {
        "resourceType": "Patient",
        "id": "p1",
        "gender": 5,
        "name": [{"family": "Chalmers", "given": ["Peter"], "period": {"start": "2020"}}],
        "telecom": [{"system": "phone", "value": "0491 570 006", "rank": 1}],
        "photo": [{"contentType": "image/png"}],
    }
    tables = flatten_tables("Patient", page(patient))
    names = tables["patient_name"]
    assert names.get_column("family").to_list() == ["Chalmers"]
    assert extra(names, 0) == {"name[0].period": {"start": "2020"}}
    assert extra(tables["patient_telecom"], 0) == {"telecom[0].rank": 1}
    assert extra(tables["Patient"], 0) == {"photo": [{"contentType": "image/png"}]}
    assert invalid(tables["Patient"], 0) == [{"path": "gender", "column": "gender", "value": 5}]


def test_an_empty_unknown_object_is_kept_as_it_was_sent():
    patient = {"resourceType": "Patient", "id": "p1", "gender": 5, "contact": {}, "photo": []}
    main = flatten_tables("Patient", page(patient))["Patient"]
    assert extra(main, 0) == {"contact": {}, "photo": []}


def test_a_single_human_name_object_reads_as_the_one_element_array():
    # The spec writes Patient.name as one HumanName; FHIR (and the live service) an array.
    spec_form = {
        "resourceType": "Patient",
        "id": "p1",
        "name": {"family": "Windsor", "use": "official"},
    }
    fhir_form = {**spec_form, "id": "p2", "name": [{"family": "Windsor", "use": "official"}]}
    tables = flatten_tables("Patient", page(spec_form, fhir_form))
    names = tables["patient_name"]
    assert names.get_column("patient_id").to_list() == ["p1", "p2"]
    assert names.get_column("family").to_list() == ["Windsor", "Windsor"]
    assert tables["Patient"].get_column("name_family").to_list() == ["Windsor", "Windsor"]


def test_coverage_payor_and_identifier_objects_read_as_arrays():
    coverage = {
        "resourceType": "Coverage",
        "id": "c1",
        "payor": {"reference": "Organization/CL-1"},
        "identifier": {"system": "urn:oid:1.2.36.1", "value": "123"},
        "dependent": 1,
    }
    tables = flatten_tables("Coverage", page(coverage))
    assert tables["coverage_payor"].get_column("payor_id").to_list() == ["CL-1"]
    assert tables["coverage_identifier"].get_column("value").to_list() == ["123"]
    assert [p["path"] for p in invalid(tables["Coverage"], 0)] == ["dependent"]


def test_a_quantity_is_read_by_its_value_and_its_unit_kept():
    referral = {
        "resourceType": "Referral",
        "id": "r1",
        "limitQuantity": {"quantity": {"value": 10, "unit": "visits"}, "quantityUsed": 2},
        "referralDefinition": {"reference": "ReferralDefinition/9", "display": "GP plan"},
    }
    frame = flatten("Referral", page(referral))
    assert frame.get_column("limit_quantity").to_list() == [10]
    assert frame.get_column("limit_quantity_used").to_list() == [2]
    assert frame.get_column("referral_definition").to_list() == ["GP plan"]
    assert extra(frame, 0) == {
        "limitQuantity.quantity.unit": "visits",
        "referralDefinition.reference": "ReferralDefinition/9",
    }


def test_a_quantity_without_a_value_is_a_wrong_type_and_a_bare_count_is_read():
    referrals = [
        {"resourceType": "Referral", "id": "r1", "limitQuantity": {"quantity": {"unit": "x"}}},
        {"resourceType": "Referral", "id": "r2", "limitQuantity": {"quantity": 4}, "active": 1},
        {"resourceType": "Referral", "id": "r3", "limitQuantity": {"quantity": {"value": 1.5}}},
    ]
    frame = flatten("Referral", page(*referrals))
    assert frame.get_column("limit_quantity").to_list() == [None, 4, None]
    assert invalid(frame, 0)[0]["value"] == {"unit": "x"}
    assert invalid(frame, 2)[0]["value"] == {"value": 1.5}


def test_a_reference_without_a_display_is_read_by_its_reference():
    referrals = [
        {"resourceType": "Referral", "id": "r1", "referralDefinition": {"reference": "RD/1"}},
        {
            "resourceType": "Referral",
            "id": "r2",
            "referralDefinition": {"reference": "RD/2", "display": 7},
        },
        {"resourceType": "Referral", "id": "r3", "referralDefinition": "Mental health plan"},
    ]
    frame = flatten("Referral", page(*referrals))
    assert frame.get_column("referral_definition").to_list() == [
        "RD/1",
        "RD/2",
        "Mental health plan",
    ]
    assert extra(frame, 1) == {"referralDefinition.display": 7}


def test_a_codeable_concept_reads_as_its_first_coding_and_keeps_the_rest():
    org = {
        "resourceType": "Organization",
        "id": "o1",
        "type": [
            {
                "coding": [
                    {
                        "system": "http://terminology.hl7.org/CodeSystem/organization-type",
                        "code": "prov",
                        "display": "Healthcare Provider",
                    },
                    {"code": "other"},
                ],
                "text": "Clinic",
            },
            {"system": "urn:spec-form", "code": "dept"},
            {"coding": [], "text": "nothing coded"},
            # The spec's Coding form with a coding list of its own: read as the Coding.
            {"system": "urn:spec-form", "code": "ward", "coding": [{"code": "other"}]},
        ],
    }
    types = flatten_tables("Organization", page(org))["organization_type"]
    assert types.get_column("code").to_list() == ["prov", "dept", None, "ward"]
    assert types.get_column("index").to_list() == [0, 1, 2, 3]
    assert types.get_column("display").to_list() == ["Healthcare Provider", None, None, None]
    assert extra(types, 3) == {"type[3].coding": [{"code": "other"}]}
    assert extra(types, 0) == {"type[0].text": "Clinic", "type[0].coding[1]": {"code": "other"}}
    assert extra(types, 1) == {}
    # An empty coding list is no code, but its text is not lost.
    assert extra(types, 2) == {"type[2].text": "nothing coded"}


def test_a_type_item_that_is_a_bare_code_is_a_wrong_type():
    org = {"resourceType": "Organization", "id": "o1", "type": ["prov"]}
    types = flatten_tables("Organization", page(org))["organization_type"]
    assert types.get_column("code").to_list() == [None]
    assert invalid(types, 0)[0]["value"] == "prov"


def test_an_unknown_modifier_extension_is_an_extension_row_not_extra():
    url = "http://example.org/fhir/StructureDefinition/do-not-contact"
    patient = {
        "resourceType": "Patient",
        "id": "p1",
        "gender": 5,
        "modifierExtension": [{"url": url, "valueBoolean": True}],
    }
    tables = flatten_tables("Patient", page(patient))
    rows = tables["patient_extension"]
    assert rows.get_column("url").to_list() == [url]
    assert rows.get_column("modifier").to_list() == [True]
    assert "modifierExtension" not in extra(tables["Patient"], 0)


def test_an_extension_with_a_read_and_an_unread_value_form_loses_neither():
    # FHIR allows one value[x] per extension; a sender that writes two is read
    # tolerantly: the extension is no column's (a form no column reads is in it), its
    # first form is the extension row's value, and the second is kept in extra.
    status = "https://terminology.halaxy.com/StructureDefinition/patient-status"
    for forms in (
        (("valueCode", "active"), ("valueBoolean", True)),
        (
            ("valueBoolean", True),
            ("valueCode", "active"),
        ),
    ):
        (first, one), (second, other) = forms
        patient = {"resourceType": "Patient", "id": "p1", "extension": [{"url": status}]}
        patient["extension"][0] |= {first: one, second: other}
        tables = flatten_tables("Patient", page(patient))
        assert tables["Patient"].get_column("status").to_list() == [None]
        row = tables["patient_extension"].row(0, named=True)
        assert (row["url"], row["value_json"]) == (status, json.dumps(one))
        assert extra(tables["Patient"], 0) == {f"extension[0].{second}": other}
