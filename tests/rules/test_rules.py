"""The catalogue rules on hand-made JSON: each rule passes a good value and catches a bad one."""

from __future__ import annotations

import base64
import copy
import subprocess
import sys
from typing import Any

import pytest

from tests.samples import appointment, organization
from toolkit import catalogue
from toolkit.rules import Observation, Options, check_resource, check_value, id_problem

CREATE = Options(mode="create")
PATCH = Options(mode="patch")
READ = Options(mode="read")
CLOSED = Options(mode="create", closed=True)

ORG = organization()

REFERRAL: dict[str, Any] = {
    "coverage": {"reference": "/main/Coverage/7", "type": "Coverage"},
    "subject": {"reference": "/main/Patient/12", "type": "Patient"},
    "requester": {"reference": "/main/PractitionerRole/EP-5", "type": "PractitionerRole"},
    "created": "2026-11-21T09:00:00Z",
    "attachments": [
        {
            "contentType": "application/pdf",
            "data": base64.b64encode(b"%PDF letter").decode(),
            "title": "letter.pdf",
        }
    ],
}

APPT = appointment()


def found(resource: str, body: Any, options: Options = READ) -> list[tuple[str, str]]:
    return [(v.path, v.category) for v in check_resource(resource, body, options)]


def changed(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``base`` with ``value`` at a dotted path (``telecom.0.value``)."""
    out = copy.deepcopy(base)
    *parents, last = path.split(".")
    node: Any = out
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


def test_conforming_bodies_break_no_rule_in_any_mode() -> None:
    for options in (CREATE, PATCH, READ):
        new = options.mode == "create"
        assert found("Organization", {**ORG, "id": "SP-1"} if new else ORG, options) == []
        assert found("Appointment", APPT, options) == []
    assert found("Referral", REFERRAL, Options(mode="create", closed=True)) == []


# --------------------------------------------------------------------------- types


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("name", 5),
        ("telecom", {"system": "phone"}),
        ("telecom.0", "phone"),
        ("partOf", "/main/Organization/PG-1"),
        ("address.0.line", "1 Main St"),
    ],
)
def test_wrong_json_type_is_a_type_violation_at_its_path(path: str, value: Any) -> None:
    want = path.replace(".0", "[0]")
    assert found("Organization", changed(ORG, path, value)) == [(want, "type")]


def test_booleans_are_not_numbers_and_floats_are_not_integers() -> None:
    field = catalogue.field_at("Referral", "limitQuantity.quantity")
    assert check_value(field, 3, path="q") == []
    assert [v.category for v in check_value(field, True, path="q")] == ["type"]
    assert [v.category for v in check_value(field, 2.5, path="q")] == ["type"]
    money = catalogue.field_at("Referral", "limitMoney.amountUsed")
    assert check_value(money, 2.5, path="m") == []
    assert [v.message for v in check_value(money, False, path="m")] == [
        "expected a number, got boolean False"
    ]


# --------------------------------------------------------------------------- null per mode


def test_null_is_refused_on_create_deletes_on_patch_and_is_absent_on_read() -> None:
    body = {"name": "X", "active": None}
    assert found("Organization", body, CREATE) == [("active", "type")]
    assert found("Organization", body, PATCH) == []
    assert found("Organization", {**ORG, "active": None}, READ) == []


def test_null_for_a_required_field_is_a_missing_field() -> None:
    appt = changed(APPT, "end", None)
    assert found("Appointment", appt, CREATE) == [("end", "required")]
    assert found("Appointment", appt, READ) == [("end", "required")]


def test_null_is_a_value_where_the_enum_lists_it_and_is_observed() -> None:
    seen: list[Observation] = []
    line = {"resourceType": "InvoiceLine", "id": "1", "status": None}
    assert found("InvoiceLine", line, Options(mode="create", observe=seen.append)) == []
    assert [(o.kind, o.field_path, o.value) for o in seen if o.kind != "present"] == [
        ("enum", "InvoiceLine.status", "null")
    ]


def test_null_inside_an_array_is_not_a_deletion() -> None:
    body = {"name": "X", "telecom": [None]}
    assert found("Organization", body, PATCH) == [("telecom[0]", "type")]


# --------------------------------------------------------------------------- required


def test_create_required_applies_on_create_only() -> None:
    assert found("Coverage", {"status": "active"}, CREATE) == [
        ("beneficiary", "required"),
        ("subscriber", "required"),
        ("payor", "required"),
    ]
    assert found("Coverage", {"status": "active"}, PATCH) == []


def test_nested_required_fields_apply_even_in_a_patch() -> None:
    body = {"attachments": [{"contentType": "image/png"}]}
    assert found("Referral", body, PATCH) == [
        ("attachments[0].data", "required"),
        ("attachments[0].title", "required"),
    ]


def test_missing_required_field_is_reported_on_read() -> None:
    appt = copy.deepcopy(APPT)
    del appt["start"]
    violations = check_resource("Appointment", appt, READ)
    assert [(v.path, v.category, v.message) for v in violations] == [
        ("start", "required", "is required")
    ]


# --------------------------------------------------------------------------- enums


def test_value_outside_a_closed_enum_is_an_enum_violation() -> None:
    violations = check_resource("Organization", changed(ORG, "telecom.0.use", "pager"), READ)
    assert [(v.path, v.category) for v in violations] == [("telecom[0].use", "enum")]
    assert "'home', 'work', 'mobile'" in violations[0].message


def test_value_outside_an_open_enum_is_an_observation_not_a_violation() -> None:
    seen: list[Observation] = []
    appt = changed(APPT, "extension.0.valueCode", "home-visit")
    assert found("Appointment", appt, Options(mode="read", observe=seen.append)) == []
    assert (
        Observation(
            "open-enum", "Appointment.location-type", "extension[0].valueCode", "home-visit"
        )
        in seen
    )


def test_listed_enum_values_are_observed_by_catalogue_path() -> None:
    seen: list[Observation] = []
    check_resource("Organization", ORG, Options(mode="read", observe=seen.append))
    systems = [
        (o.path, o.value)
        for o in seen
        if o.field_path == "Organization.telecom.system" and o.kind == "enum"
    ]
    assert systems == [("telecom[0].system", "phone"), ("telecom[1].system", "email")]


# --------------------------------------------------------------------------- references


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("/main/Organization/PG-2", None),
        ("/main/Organization/CL-2", "a Organization id here starts with PG-"),
        ("/main/Patient/PG-2", "points at Patient; allowed: Organization"),
        ("Organization/PG-2", "does not have the shape /main/Organization/PG-<id>"),
        ("/main/Organization/PG-2/x", "does not have the shape"),
    ],
)
def test_reference_shape_target_and_prefix(reference: str, message: str | None) -> None:
    org = changed(ORG, "partOf", {"reference": reference, "type": "Organization"})
    violations = check_resource("Organization", org, READ)
    if message is None:
        assert violations == []
    else:
        assert [(v.path, v.category) for v in violations] == [("partOf.reference", "reference")]
        assert message in violations[0].message


def test_reference_type_must_agree_with_the_path_and_is_required_only_when_closed() -> None:
    mismatch = {"reference": "/main/Organization/PG-2", "type": "Patient"}
    assert found("Organization", changed(ORG, "partOf", mismatch)) == [("partOf.type", "reference")]
    untyped = {"name": "X", "partOf": {"reference": "/main/Organization/PG-2"}}
    assert found("Organization", untyped, CREATE) == []
    assert found("Organization", untyped, CLOSED) == [("partOf.type", "reference")]


def test_resolves_hook_is_asked_only_for_well_formed_references() -> None:
    asked: list[str] = []

    def resolves(reference: str) -> bool:
        asked.append(reference)
        return reference != "/main/Patient/13"

    options = Options(mode="create", resolves=resolves)
    assert found("Referral", REFERRAL, options) == []
    body = changed(REFERRAL, "subject.reference", "/main/Patient/13")
    assert found("Referral", body, options) == [("subject.reference", "reference")]
    body = changed(REFERRAL, "subject.reference", "/main/Patient")
    asked.clear()
    assert found("Referral", body, options) == [("subject.reference", "reference")]
    assert "/main/Patient" not in asked


# --------------------------------------------------------------------------- ids


def test_id_prefix_per_mode() -> None:
    assert found("Organization", changed(ORG, "id", "XX-1"), READ) == [("id", "prefix")]
    assert found("Organization", {"name": "X", "id": "CL-1"}, CREATE) == [("id", "prefix")]
    assert found("Organization", {"name": "X", "id": "SP-1"}, CREATE) == []
    no_id = {k: v for k, v in ORG.items() if k != "id"}
    assert found("Organization", no_id, READ) == [("id", "prefix")]
    assert (
        found("Organization", {"name": "X", "id": "CL-1"}, Options(server_fields=frozenset({"id"})))
        == []
    )
    org = catalogue.resource("Organization")
    assert id_problem(org, "CL-1") is None
    assert (
        id_problem(org, "CL 1")
        == "'CL 1' is not a Organization id (PG-<id> or CL-<id> or OG-<id> or FD-<id> or SP-<id>)"
    )


def test_resource_type_must_match_and_is_required_on_read() -> None:
    assert found("Organization", {**ORG, "resourceType": "Patient"}) == [("resourceType", "type")]
    no_type = {k: v for k, v in ORG.items() if k != "resourceType"}
    assert found("Organization", no_type, READ) == [("resourceType", "type")]
    assert found("Organization", {**no_type, "id": "SP-1"}, CREATE) == []


# --------------------------------------------------------------------------- formats


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("telecom.0.value", "+61 2 9876 5432"),
        ("address.0.country", "Australia"),
        ("address.0.country", "XX"),
    ],
)
def test_format_violations(path: str, value: str) -> None:
    want = path.replace(".0", "[0]")
    assert found("Organization", changed(ORG, path, value)) == [(want, "format")]


def test_real_calendar_dates_and_iso_currency() -> None:
    start = catalogue.field_at("Referral", "period.start")
    assert check_value(start, "2028-02-29", path="s") == []
    assert check_value(start, "2027-02-29", path="s")[0].message == (
        "'2027-02-29' is not a real calendar date"
    )
    created = catalogue.field_at("Referral", "created")
    assert check_value(created, "2026-11-21T09:00:00+10:00", path="c") == []
    assert [v.category for v in check_value(created, "2026-13-40T00:00:00Z", path="c")] == [
        "format"
    ]
    currency = catalogue.field_at("Referral", "limitMoney.amount.currency")
    assert check_value(currency, "AUD", path="c") == []
    assert "ISO 4217" in check_value(currency, "XYZ", path="c")[0].message


def test_format_when_applies_the_phone_rule_only_to_phone_systems() -> None:
    for system in ("phone", "sms", "fax"):
        org = changed(ORG, "telecom.1", {"system": system, "value": "a@b.example"})
        assert found("Organization", org) == [("telecom[1].value", "format")]
    for system in ("email", None):
        org = changed(ORG, "telecom.1", {"system": system, "value": "a@b.example"})
        assert found("Organization", org, PATCH) == []


# --------------------------------------------------------------------------- extensions


def test_extension_values_are_found_by_url_and_checked_at_their_json_path() -> None:
    body = {
        "beneficiary": {"reference": "/main/Patient/1", "type": "Patient"},
        "subscriber": {"reference": "/main/Patient/1", "type": "Patient"},
        "payor": {"reference": "/main/Organization/FD-1", "type": "Organization"},
        "extension": [
            {"url": "coverage-payer", "valueCoding": {"code": "99", "display": "?"}},
            {"url": "coverage-patient-anonymous", "valueBoolean": "yes"},
            {
                "url": "coverage-organisation",
                "valueReference": {"reference": "/main/Organization/XX-1", "type": "Organization"},
            },
        ],
    }
    assert found("Coverage", body, CREATE) == [
        ("extension[0].valueCoding.code", "enum"),
        ("extension[1].valueBoolean", "type"),
        ("extension[2].valueReference.reference", "reference"),
    ]


def test_value_coding_carries_the_code_of_a_code_field() -> None:
    seen: list[Observation] = []
    appt = changed(APPT, "participant.0.modifierExtension.0.valueCoding.code", "gone")
    assert found("Appointment", appt, Options(mode="read", observe=seen.append)) == []
    status = "Appointment.participant.appointment-participant-status"
    path = "participant[0].modifierExtension[0].valueCoding"
    assert Observation("open-enum", status, f"{path}.code", "gone") in seen
    appt = changed(APPT, "participant.0.modifierExtension.0.valueCoding", "booked")
    assert found("Appointment", appt) == [(path, "type")]
    appt = changed(APPT, "participant.0.modifierExtension.0.valueCoding.code", 7)
    assert found("Appointment", appt) == [(f"{path}.code", "type")]


def test_extension_in_the_wrong_container_or_without_its_value_key() -> None:
    moved = copy.deepcopy(APPT)
    part = moved["participant"][0]
    part["extension"] = part.pop("modifierExtension")
    assert found("Appointment", moved) == [("participant[0].extension[0]", "type")]
    keyless = changed(APPT, "extension.0", {"url": "location-type", "valueString": "clinic"})
    assert found("Appointment", keyless) == [("extension[0].valueCode", "required")]


def test_unknown_extension_urls_and_keys_are_reported_only_when_closed() -> None:
    body = {"name": "X", "extension": [{"url": "mystery", "valueCode": "x"}], "colour": "red"}
    assert found("Organization", body, CREATE) == []
    assert found("Organization", body, CLOSED) == [("extension", "unknown"), ("colour", "unknown")]
    flat = {**REFERRAL, "location-type": "clinic"}
    assert found("Referral", flat, CLOSED) == [("location-type", "unknown")]
    appt = {"start": APPT["start"], "end": APPT["end"], "location-type": "clinic"}
    violations = check_resource("Appointment", appt, CLOSED)
    assert [(v.path, v.category) for v in violations] == [("location-type", "unknown")]
    assert "extension[url='location-type'].valueCode" in violations[0].message


# --------------------------------------------------------------------------- attachments


def test_attachment_content_type_can_be_switched_off() -> None:
    body = changed(REFERRAL, "attachments.0.contentType", "text/plain")
    assert found("Referral", body, CREATE) == [("attachments[0].contentType", "attachment")]
    assert found("Referral", body, Options(check_attachment_types=False)) == []


def test_attachment_data_must_be_padded_base64_within_the_size_limit() -> None:
    for bad in ("not base64!", "QUJ", "**"):
        body = changed(REFERRAL, "attachments.0.data", bad)
        assert found("Referral", body, CREATE) == [("attachments[0].data", "format")]
    body = changed(REFERRAL, "attachments.0.data", base64.b64encode(b"x" * 11).decode())
    assert found("Referral", body, Options(max_attachment_bytes=11)) == []
    violations = check_resource("Referral", body, Options(max_attachment_bytes=10))
    assert [(v.path, v.category) for v in violations] == [("attachments[0].data", "attachment")]
    assert violations[0].message == "decodes to 11 bytes, more than the 10-byte limit"


def test_attachments_are_write_only_and_skipped_on_read() -> None:
    body = {**changed(REFERRAL, "attachments.0.data", "**"), "resourceType": "Referral", "id": "1"}
    assert found("Referral", body, READ) == []


# --------------------------------------------------------------------------- shapes and paths


def test_object_or_array_shape_is_accepted_where_listed_and_observed() -> None:
    seen: list[Observation] = []
    options = Options(
        mode="read", accept_arrays=frozenset({"Practitioner.name"}), observe=seen.append
    )
    pr = {"resourceType": "Practitioner", "id": "PR-1", "name": [{"family": "X", "use": "nope"}]}
    assert found("Practitioner", pr, options) == [("name[0].use", "enum")]
    assert [o.value for o in seen if o.kind == "shape"] == ["array"]
    assert found("Practitioner", pr, READ) == [("name", "type")]


def test_path_prefix_places_a_nested_resource() -> None:
    appt = {"start": "2026-11-23T10:00:00Z", "end": "nope"}
    violations = check_resource("Appointment", appt, CREATE, path="parameter[0].resource")
    assert [v.path for v in violations] == ["parameter[0].resource.end"]


def test_rules_import_only_the_standard_library_and_the_catalogue() -> None:
    code = (
        "import sys, toolkit.rules; "
        "print(sorted(m for m in ('httpx', 'starlette', 'polars', 'pydantic') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
