"""Each guard of the rules pinned by a hostile value: the live forms, references, ids, formats.

``test_rules.py`` shows each rule passing a good value and catching a bad one;
the tests here pin the edges a mutant moves (a flipped comparison, a dropped
guard, a wrong source), with expectations taken from the spec and from
``public-docs-facts.md`` ("Shapes seen on the live service"), never from what
pmtk happens to return. ``tools/mutation.py rules`` runs both files.
"""

from __future__ import annotations

import base64
from dataclasses import replace
from typing import Any

import pytest

from tests import samples
from toolkit import catalogue
from toolkit.rules import (
    Observation,
    Options,
    Violation,
    check_resource,
    check_value,
    format_problem,
    id_problem,
    reference_form,
    reference_problem,
)

READ = Options(mode="read")
CREATE = Options(mode="create")
CLOSED = Options(mode="create", closed=True)


def seen_with(**kwargs: Any) -> tuple[Options, list[Observation]]:
    seen: list[Observation] = []
    return Options(observe=seen.append, **kwargs), seen


def forms(seen: list[Observation], under: str = "") -> list[tuple[str, str]]:
    return [(o.path, o.value) for o in seen if o.kind == "form" and o.path.startswith(under)]


def where(violations: list[Violation]) -> list[tuple[str, str]]:
    return [(v.path, v.category) for v in violations]


# --------------------------------------------------------------------------- reference forms


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # the spec's form, unchanged
        ("/main/Patient/123", ("relative", "/main/Patient/123")),
        # the live service's absolute references (facts), on any host, http or https
        ("https://au-api.halaxy.com/main/Patient/123", ("absolute", "/main/Patient/123")),
        ("http://127.0.0.1:8080/main/Organization/CL-1", ("absolute", "/main/Organization/CL-1")),
        # Type/id, as the polymorphic search parameters take it (facts)
        ("Patient/123", ("type-id", "/main/Patient/123")),
        ("PractitionerRole/PR-1", ("type-id", "/main/PractitionerRole/PR-1")),
        # anything else is returned as sent
        ("/mainx/Patient/1", ("other", "/mainx/Patient/1")),
        ("main/Patient/1", ("other", "main/Patient/1")),
        ("https://host/api/Patient/1", ("other", "https://host/api/Patient/1")),
        ("https://host/main/Patient", ("other", "https://host/main/Patient")),
        ("https://host/main/Patient/1?x=1", ("other", "https://host/main/Patient/1?x=1")),
        (
            "https://host/main/Patient/1/_history/2",
            ("other", "https://host/main/Patient/1/_history/2"),
        ),
        ("ftp://host/main/Patient/1", ("other", "ftp://host/main/Patient/1")),
        ("xhttps://host/main/Patient/1", ("other", "xhttps://host/main/Patient/1")),
        ("patient/123", ("other", "patient/123")),
        ("P/1", ("other", "P/1")),
        ("Patient/1/2", ("other", "Patient/1/2")),
        ("Patient/1 ", ("other", "Patient/1 ")),
        ("x Patient/1", ("other", "x Patient/1")),
        ("123", ("other", "123")),
    ],
)
def test_reference_forms_of_the_live_service(text: str, want: tuple[str, str]) -> None:
    assert reference_form(text) == want


# --------------------------------------------------------------------------- live alternates

QUANTITY = catalogue.field_at("Referral", "limitQuantity.quantity")
DEFINITION = catalogue.field_at("Referral", "referralDefinition")
QPATH = "Referral.limitQuantity.quantity"
DPATH = "Referral.referralDefinition"


@pytest.mark.parametrize(
    ("value", "form"),
    [
        ({"value": 10}, "Quantity"),  # facts: "arrives as a Quantity object {"value": 10}"
        ({"value": 2.5, "unit": "visits"}, "Quantity"),
        (10, "number"),
        (7.0, "number"),
    ],
)
def test_limit_quantity_arrives_as_a_number_or_a_quantity_with_live_forms(
    value: Any, form: str
) -> None:
    options, seen = seen_with(live_forms=True)
    assert check_value(QUANTITY, value, options, path="q", field_path=QPATH) == []
    assert forms(seen) == [("q", f"value:{form}")]


@pytest.mark.parametrize(
    "value", [{"value": True}, {"value": "10"}, {"value": None}, {"unit": "x"}, True, "10", [10]]
)
def test_a_quantity_without_a_numeric_value_is_still_a_type_error(value: Any) -> None:
    options, seen = seen_with(live_forms=True)
    assert where(check_value(QUANTITY, value, options, path="q", field_path=QPATH)) == [
        ("q", "type")
    ]
    assert forms(seen) == []


def test_the_quantity_form_is_refused_without_live_forms() -> None:
    options, seen = seen_with()
    violations = check_value(QUANTITY, {"value": 10}, options, path="q", field_path=QPATH)
    assert where(violations) == [("q", "type")]
    assert violations[0].message == "expected an integer, got an object"
    assert violations[0].source == "pmtk"  # the integer type is pmtk's rule (rule sources)
    assert forms(seen) == []


@pytest.mark.parametrize(
    ("value", "form"),
    [
        ("GP referral", "string"),
        ({"display": "GP referral"}, "Reference"),  # facts: "a Reference object with a display"
        ({"reference": "/main/ReferralDefinition/3", "display": "GP"}, "Reference"),
        ({"reference": "/main/ReferralDefinition/3"}, "Reference"),
    ],
)
def test_referral_definition_arrives_as_a_string_or_a_reference(value: Any, form: str) -> None:
    options, seen = seen_with(live_forms=True)
    assert check_value(DEFINITION, value, options, path="d", field_path=DPATH) == []
    assert forms(seen) == [("d", f"value:{form}")]


@pytest.mark.parametrize(
    "value",
    [
        {},
        {"display": 5},
        {"reference": None, "display": "GP"},
        {"reference": "/main/ReferralDefinition/3", "display": ["GP"]},
        5,
        None,
        ["GP"],
    ],
)
def test_a_reference_without_string_parts_is_not_a_referral_definition(value: Any) -> None:
    options, seen = seen_with(live_forms=True)
    violations = check_value(DEFINITION, value, options, path="d", field_path=DPATH)
    assert where(violations) == [("d", "type")]
    assert forms(seen) == []


def test_a_reference_object_is_refused_as_referral_definition_without_live_forms() -> None:
    value = {"display": "GP referral"}
    assert where(check_value(DEFINITION, value, path="d", field_path=DPATH)) == [("d", "type")]


def test_live_alternates_apply_only_at_their_own_catalogue_path() -> None:
    options = Options(live_forms=True)
    other = catalogue.field_at("Referral", "period.start")
    assert where(check_value(other, {"value": 10}, options, path="s")) == [("s", "type")]


# --------------------------------------------------------------------------- references


def payor(reference: Any, **extra: Any) -> dict[str, Any]:
    return {
        "beneficiary": {"reference": "/main/Patient/1", "type": "Patient"},
        "subscriber": {"reference": "/main/Patient/1", "type": "Patient"},
        "payor": {"reference": reference, **extra},
    }


def test_a_wrong_target_breaks_the_reference_rule_and_a_bad_shape_the_fields_own() -> None:
    # Coverage.payor's targets are pmtk's rule; the field and its shape are the spec's.
    body = payor("/main/Practitioner/PR-1", type="Practitioner")
    [target] = check_resource("Coverage", body, CREATE)
    assert (target.path, target.category, target.source) == ("payor.reference", "reference", "pmtk")
    assert "points at Practitioner; allowed: Patient, Organization" in target.message
    body = payor("/main/Organization/CL-1", type="Organization")
    [prefix] = check_resource("Coverage", body, CREATE)
    assert prefix.source == "pmtk"
    assert "an Organization id" not in prefix.message  # the message names the prefixes
    assert prefix.message.endswith("a Organization id here starts with FD- or OG-")
    for shapeless in (
        "Organization/FD-1",
        "/main/Organization",
        "/api/Organization/FD-1",
        "/main/Organization/FD-1/x",
    ):
        [shape] = check_resource("Coverage", payor(shapeless), CREATE)
        assert (shape.path, shape.category, shape.source) == (
            "payor.reference",
            "reference",
            "spec",
        )
        assert shape.message.endswith(
            "does not have the shape /main/Patient/<id> or /main/Organization/FD-|OG-<id>"
        )


@pytest.mark.parametrize("reference", [None, 5, ["/main/Patient/1"], {"reference": "x"}])
def test_a_reference_object_needs_a_string_reference(reference: Any) -> None:
    body = payor(reference, type="Patient")
    [v] = check_resource("Coverage", body, CREATE)
    assert (v.path, v.category, v.message) == (
        "payor.reference",
        "reference",
        "is required and must be a string",
    )
    assert v.source == "spec"


def test_a_reference_object_without_reference_is_one_violation_even_when_closed() -> None:
    [v] = check_resource("Coverage", {**payor(None), "payor": {"type": "Patient"}}, CLOSED)
    assert (v.path, v.category) == ("payor.reference", "reference")


def test_closed_references_allow_reference_type_and_display_only() -> None:
    body = payor("/main/Patient/1", type="Patient", display="Ann")
    assert check_resource("Coverage", body, CLOSED) == []
    body = payor("/main/Patient/1", type="Patient", display="Ann", id="7", identifier={})
    violations = check_resource("Coverage", body, CLOSED)
    assert sorted(where(violations)) == [("payor.id", "unknown"), ("payor.identifier", "unknown")]
    assert {v.source for v in violations} == {"pmtk"}
    assert {v.message for v in violations} == {"is not a field of a reference"}
    assert check_resource("Coverage", body, CREATE) == []  # only a closed check looks


def test_an_untyped_reference_names_the_allowed_types_when_closed() -> None:
    [v] = check_resource("Coverage", payor("/main/Patient/1"), CLOSED)
    assert (v.path, v.category, v.source) == ("payor.type", "reference", "pmtk")
    assert v.message == "is required: one of Patient, Organization"


def test_a_type_that_disagrees_with_the_path_is_reported_and_not_resolved() -> None:
    asked: list[str] = []

    def resolves(reference: str) -> bool:
        asked.append(reference)
        return reference == "/main/Patient/1"

    body = payor("/main/Patient/2", type="Organization")
    violations = check_resource("Coverage", body, Options(resolves=resolves))
    assert [(v.path, v.category, v.message, v.source) for v in violations] == [
        ("payor.type", "reference", "'Organization' does not match the reference", "spec")
    ]
    assert "/main/Patient/2" not in asked


def test_resolves_is_asked_for_typed_and_untyped_references_and_names_the_missing_one() -> None:
    asked: list[str] = []

    def resolves(reference: str) -> bool:
        asked.append(reference)
        return reference.endswith("/1")

    options = Options(resolves=resolves)
    assert check_resource("Coverage", payor("/main/Patient/1", type="Patient"), options) == []
    [v] = check_resource("Coverage", payor("/main/Organization/FD-2"), options)
    assert (v.path, v.category, v.message) == (
        "payor.reference",
        "reference",
        "/main/Organization/FD-2 does not exist",
    )
    assert v.source == "spec"
    assert "/main/Patient/1" in asked and "/main/Organization/FD-2" in asked


def test_live_references_are_checked_and_resolved_in_their_spec_form() -> None:
    asked: list[str] = []

    def resolves(reference: str) -> bool:
        asked.append(reference)
        return True

    options, seen = seen_with(live_forms=True, resolves=resolves)
    body = payor("https://au-api.halaxy.com/main/Organization/FD-9", type="Organization")
    assert check_resource("Coverage", body, options) == []
    assert asked[-1] == "/main/Organization/FD-9"
    assert forms(seen, "payor") == [("payor.reference", "reference:absolute")]
    seen.clear()
    assert check_resource("Coverage", payor("Patient/4", type="Patient"), options) == []
    assert asked[-1] == "/main/Patient/4"
    assert forms(seen, "payor") == [("payor.reference", "reference:type-id")]
    seen.clear()
    assert check_resource("Coverage", payor("/main/Patient/4", type="Patient"), options) == []
    assert forms(seen, "payor") == [("payor.reference", "reference:relative")]
    # without live forms the same absolute reference is a shape violation
    assert where(check_resource("Coverage", body, Options(resolves=resolves))) == [
        ("payor.reference", "reference")
    ]


def test_a_live_reference_that_breaks_a_rule_names_both_forms() -> None:
    options = Options(live_forms=True)
    sent = "https://au-api.halaxy.com/main/Organization/CL-9"
    [v] = check_resource("Coverage", payor(sent, type="Organization"), options)
    assert v.message == (
        f"{sent!r} (/main/Organization/CL-9): a Organization id here starts with FD- or OG-"
    )
    assert v.source == "pmtk"  # a shaped reference: the target rule's source
    # a live type that disagrees with the path is still a mismatch
    [v] = check_resource("Coverage", payor("Patient/4", type="Organization"), options)
    assert (v.path, v.category) == ("payor.type", "reference")
    # an unrecognised form is kept as sent and has the spec's shape problem
    [v] = check_resource("Coverage", payor("patient/4", type="Patient"), options)
    assert v.source == "spec"
    assert v.message.startswith("'patient/4' does not have the shape")


def test_reference_problem_allows_a_target_without_prefixes_and_any_listed_prefix() -> None:
    ref = catalogue.field_at("Coverage", "payor").ref
    assert ref is not None
    assert reference_problem(ref, "/main/Patient/anything-1") is None
    assert reference_problem(ref, "/main/Organization/OG-1") is None
    assert reference_problem(ref, "/main/Organization/FD-1") is None
    assert reference_problem(ref, "/main/Patient/bad id") == (
        "'/main/Patient/bad id' does not have the shape "
        "/main/Patient/<id> or /main/Organization/FD-|OG-<id>"
    )


# --------------------------------------------------------------------------- ids and resource types


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "missing or non-string id None"),
        (5, "missing or non-string id 5"),
        ("", "missing or non-string id ''"),
        ("CL-1", None),
        (
            "XX-1",
            "'XX-1' is not a Organization id (PG-<id> or CL-<id> or OG-<id> or FD-<id> or SP-<id>)",
        ),
    ],
)
def test_id_problem_messages(value: Any, message: str | None) -> None:
    assert id_problem(catalogue.resource("Organization"), value) == message


def test_id_problem_checks_the_prefixes_asked_for_then_the_pattern() -> None:
    org = catalogue.resource("Organization")
    assert id_problem(org, "CL-1", ("SP-",)) == "'CL-1' does not start with an allowed prefix (SP-)"
    assert id_problem(org, "SP-1", ("SP-", "CL-")) is None
    assert id_problem(org, "CL-1", ("SP-", "CL-")) is None
    assert id_problem(org, "SP-1 x", ("SP-",)) is not None
    patient = catalogue.resource("Patient")
    assert id_problem(patient, "a.b-1") is None
    assert id_problem(patient, "a/b") == "'a/b' is not a Patient id (letters, digits, '.', '-')"


def test_a_body_that_is_not_an_object_is_one_type_violation() -> None:
    bodies: list[Any] = [[], "Patient", None, 5]
    for body in bodies:
        [v] = check_resource("Organization", body, READ, path="entry[0].resource")
        assert (v.path, v.category) == ("entry[0].resource", "type")
        assert v.message.startswith("expected a Organization object, got ")


def test_resource_type_and_id_violations_carry_their_sources_and_the_path_prefix() -> None:
    org = {"resourceType": "Organization", "id": "CL-1", "name": "X"}
    # a record of another type breaks the spec; a missing resourceType is a facts rule
    [v] = check_resource("Organization", {**org, "resourceType": "Patient"}, READ, path="p")
    assert (v.path, v.source, v.message) == (
        "p.resourceType",
        "spec",
        "expected 'Organization', got 'Patient'",
    )
    [v] = check_resource("Organization", {k: org[k] for k in ("id", "name")}, READ, path="p")
    assert (v.path, v.source) == ("p.resourceType", "facts")
    # on create, the id's prefix is pmtk's rule (create_source); on read it is the spec's
    [v] = check_resource("Organization", {**org, "id": "CL-1"}, CREATE, path="p")
    assert (v.path, v.category, v.source) == ("p.id", "prefix", "pmtk")
    [v] = check_resource("Organization", {**org, "id": "ZZ-1"}, READ, path="p")
    assert (v.path, v.category, v.source) == ("p.id", "prefix", "spec")
    # a patch checks the id's pattern, not a prefix list
    patch = Options(mode="patch")
    assert check_resource("Organization", {"id": "CL-1"}, patch) == []
    assert where(check_resource("Organization", {"id": "C L"}, patch)) == [("id", "prefix")]
    # a server-maintained resourceType is not checked
    skip = Options(server_fields=frozenset({"resourceType"}), mode="read")
    assert check_resource("Organization", {**org, "resourceType": "Patient"}, skip) == []


def test_create_required_fields_say_so_with_the_create_source() -> None:
    [v] = check_resource("Organization", {}, CREATE)
    assert (v.path, v.category, v.message, v.source) == (
        "name",
        "required",
        "is required to create a Organization",
        "pmtk",
    )
    violations = check_resource("Referral", {}, CREATE)
    assert {v.source for v in violations} == {"facts"}
    assert sorted(v.path for v in violations) == ["coverage", "created", "requester", "subject"]


# --------------------------------------------------------------------------- formats


def test_format_messages_truncate_the_value_and_give_the_hint() -> None:
    long = "+" + "1" * 70 + "x"
    assert format_problem("phone", long) == (
        f"{long[:60]!r} is not a valid phone (+{{country code}}{{digits}}, no spaces, "
        "e.g. '+61298765432')"
    )
    assert format_problem("country", "au") == (
        "'au' is not a valid country (an ISO 3166 alpha-2 code such as 'AU')"
    )
    assert format_problem("country", "ZZ") == "'ZZ' is not an ISO 3166 alpha-2 country code"
    assert format_problem("currency", "ZZZ") == "'ZZZ' is not an ISO 4217 currency code"
    assert format_problem("currency", "AUD") is None
    assert format_problem("date-time", "2026-02-29T10:00:00Z") == (
        "'2026-02-29T10:00:00Z' is not a real calendar date-time"
    )
    assert format_problem("date-time", "2028-02-29T10:00:00Z") is None
    assert format_problem("date", "2026-02-28") is None


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("QUJD", True),
        ("QUI=", True),
        ("QQ==", True),
        ("", True),
        ("QUJ", False),
        ("QQ", False),
        ("QUJDR", False),
    ],
)
def test_base64_must_be_padded_to_four_characters(text: str, ok: bool) -> None:
    problem = format_problem("base64", text)
    if ok:
        assert problem is None
    else:
        assert problem == "is not valid base64 (standard alphabet, padded to 4 characters)"


@pytest.mark.parametrize(("data", "size"), [(b"A", 1), (b"AB", 2), (b"ABC", 3), (b"ABCD", 4)])
def test_the_attachment_limit_counts_decoded_bytes_with_padding(data: bytes, size: int) -> None:
    field = catalogue.field_at("Referral", "attachments.data")
    text = base64.b64encode(data).decode()
    assert check_value(field, text, Options(max_attachment_bytes=size), path="a") == []
    [v] = check_value(field, text, Options(max_attachment_bytes=size - 1), path="a")
    assert (v.category, v.message) == (
        "attachment",
        f"decodes to {size} bytes, more than the {size - 1}-byte limit",
    )


def test_the_default_attachment_limit_is_the_catalogues(monkeypatch: pytest.MonkeyPatch) -> None:
    field = catalogue.field_at("Referral", "attachments.data")
    text = base64.b64encode(b"12345").decode()
    assert check_value(field, text, path="a") == []
    monkeypatch.setattr(catalogue, "MAX_ATTACHMENT_BYTES", 4)
    assert where(check_value(field, text, path="a")) == [("a", "attachment")]
    assert check_value(field, text, Options(max_attachment_bytes=0 + 5), path="a") == []
    assert where(check_value(field, text, Options(max_attachment_bytes=0), path="a")) == [
        ("a", "attachment")
    ]


def test_format_when_skips_the_format_but_not_the_type() -> None:
    org = {"name": "X", "telecom": [{"system": "email", "value": 5}]}
    assert where(check_resource("Organization", org, CREATE)) == [("telecom[0].value", "type")]


# --------------------------------------------------------------------------- unknown keys (closed)

APPT: dict[str, Any] = {
    k: v for k, v in samples.appointment().items() if k not in ("resourceType", "id")
}
"""tests.samples' Appointment as a request body (no resourceType, no id)."""


def full(violations: list[Violation]) -> list[tuple[str, str, str, str]]:
    return [(v.path, v.category, v.message, v.source) for v in violations]


def test_closed_checks_accept_the_extension_containers_a_resource_declares() -> None:
    assert check_resource("Appointment", APPT, CLOSED) == []
    assert check_resource("Appointment", {**APPT, "resourceType": "Appointment"}, CLOSED) == []


def test_closed_checks_report_unknown_keys_with_pmtk_as_their_source() -> None:
    body = {**APPT, "colour": "red", "location-type": "clinic"}
    assert full(check_resource("Appointment", body, CLOSED)) == [
        ("colour", "unknown", "is not a field known to the catalogue", "pmtk"),
        (
            "location-type",
            "unknown",
            "is an extension field: send it as extension[url='location-type'].valueCode",
            "pmtk",
        ),
    ]
    nested = {**APPT, "participant": [{**APPT["participant"][0], "status": "booked"}]}
    assert full(check_resource("Appointment", nested, CLOSED)) == [
        ("participant[0].status", "unknown", "is not a field known to the catalogue", "pmtk")
    ]
    # a container the object does not use is no field of it
    org = {"name": "X", "modifierExtension": []}
    assert full(check_resource("Organization", org, CLOSED)) == [
        ("modifierExtension", "unknown", "is not a field known to the catalogue", "pmtk")
    ]
    # server fields are known at the top level only
    server = Options(mode="create", closed=True, server_fields=frozenset({"meta", "id"}))
    assert check_resource("Organization", {"name": "X", "id": "CL-1", "meta": {}}, server) == []


def test_unknown_keys_are_observed_not_reported_when_open() -> None:
    options, seen = seen_with()
    body = {**APPT, "colour": "red", "resourceType": "Appointment", "id": "7"}
    assert check_resource("Appointment", body, options) == []
    assert [(o.kind, o.field_path, o.path, o.value) for o in seen if o.kind == "unknown-key"] == [
        ("unknown-key", "Appointment", "colour", "colour")
    ]


def test_a_live_reference_to_a_type_not_allowed_says_which_type_and_what_is_allowed() -> None:
    sent = "https://au-api.halaxy.com/main/Practitioner/PR-1"
    [v] = check_resource("Coverage", payor(sent, type="Practitioner"), Options(live_forms=True))
    assert v.message == (
        f"{sent!r} (/main/Practitioner/PR-1): points at Practitioner; "
        "allowed: Patient, Organization"
    )
    [v] = check_resource("Coverage", payor("Organization/FD"), Options(live_forms=True))
    assert v.message == (
        "'Organization/FD' (/main/Organization/FD): a Organization id here starts with FD- or OG-"
    )


# ------------------------------------------------------------------ sources and observations

# Patient is described by the facts, not the spec: every rule it breaks is a facts rule.
PATIENT_BREAKS = [
    ({"gender": "robot"}, "gender", "enum"),
    ({"birthDate": "1990-02-30"}, "birthDate", "format"),
    ({"gender": None}, "gender", "type"),
    ({"name": [{"use": "nope"}]}, "name[0].use", "enum"),
    (
        {"generalPractitioner": [{"reference": "/main/Patient/1"}]},
        "generalPractitioner[0].reference",
        "reference",
    ),
    (
        {"generalPractitioner": [{"reference": "Practitioner/PR-1"}]},
        "generalPractitioner[0].reference",
        "reference",
    ),
    ({"generalPractitioner": [{"reference": 5}]}, "generalPractitioner[0].reference", "reference"),
    (
        {"generalPractitioner": [{"reference": "/main/Practitioner/PR-1", "type": "Organization"}]},
        "generalPractitioner[0].type",
        "reference",
    ),
    (
        {"generalPractitioner": {"reference": "/main/Practitioner/PR-1"}},
        "generalPractitioner",
        "type",
    ),
    ({"generalPractitioner": [None]}, "generalPractitioner[0]", "type"),
]


@pytest.mark.parametrize(("body", "path", "category"), PATIENT_BREAKS)
def test_every_rule_a_facts_resource_breaks_is_a_facts_rule(
    body: dict[str, Any], path: str, category: str
) -> None:
    named = {"name": [{"family": "Ng"}], **body}  # a create needs a name (pmtk)
    [v] = check_resource("Patient", named, CREATE)
    assert (v.path, v.category, v.source) == (path, category, "facts")


def test_a_missing_record_of_a_facts_resource_is_a_facts_rule() -> None:
    body = {
        "name": [{"family": "Ng"}],
        "generalPractitioner": [{"reference": "/main/Practitioner/PR-1"}],
    }
    [v] = check_resource("Patient", body, Options(resolves=lambda _ref: False))
    assert (v.category, v.message, v.source) == (
        "reference",
        "/main/Practitioner/PR-1 does not exist",
        "facts",
    )
    [v] = check_resource("Patient", [], READ)
    assert (v.message, v.source) == ("expected a Patient object, got an array", "facts")
    [v] = check_resource("Patient", {"resourceType": "Person", "id": "1"}, READ)
    assert (v.path, v.source) == ("resourceType", "facts")


def test_the_fields_own_source_is_the_least_authoritative_one() -> None:
    # Appointment.supportingInformation's array type and participant.actor are facts rules
    appt = {**APPT, "supportingInformation": {"reference": "/main/HealthcareService/1"}}
    assert full(check_resource("Appointment", appt, CREATE)) == [
        ("supportingInformation", "type", "expected an array, got an object", "facts")
    ]
    actor = {**APPT["participant"][0], "actor": {"reference": "PractitionerRole/PR-1"}}
    [v] = check_resource("Appointment", {**APPT, "participant": [actor]}, CREATE)
    assert (v.path, v.category, v.source) == (
        "participant[0].actor.reference",
        "reference",
        "facts",
    )
    [v] = check_resource("Coverage", {**payor("/main/Patient/1"), "status": "gone"}, CREATE)
    assert (v.path, v.category, v.source) == ("status", "enum", "facts")
    # a HealthcareService is pmtk's own: an id it refuses on create is pmtk's rule
    [v] = check_resource("HealthcareService", {"id": "a b"}, CREATE)
    assert (v.path, v.category, v.source) == ("id", "prefix", "pmtk")
    assert v.message.startswith("'a b' is not a HealthcareService id")


def test_null_messages_and_enums_that_list_null() -> None:
    line = {"resourceType": "InvoiceLine", "id": "1", "status": "paid"}
    [v] = check_resource("InvoiceLine", line, READ)
    assert v.message == (
        "'paid' is not one of 'voided', 'unassigned', 'write-off', 'locked' or null"
    )
    [v] = check_resource("Organization", {"name": "X", "telecom": [None]}, CREATE)
    assert full([v]) == [("telecom[0]", "type", "must not be null", "spec")]
    [v] = check_resource("Organization", {"name": 5}, CREATE)
    assert v.message == "expected a string, got integer 5"
    options, seen = seen_with(mode="create")
    check_resource("InvoiceLine", {"status": None}, options)
    assert Observation("enum", "InvoiceLine.status", "status", "null") in seen


def test_observations_name_the_catalogue_path_and_the_json_path() -> None:
    options, seen = seen_with(mode="read", live_forms=True)
    check_resource("Coverage", payor("Patient/4", type="Patient"), options)
    assert Observation("present", "Coverage.payor", "payor", "") in seen
    assert Observation("form", "Coverage.payor", "payor.reference", "reference:type-id") in seen
    options, seen = seen_with(live_forms=True)
    check_value(QUANTITY, {"value": 1}, options, path="q")
    assert seen[0] == Observation("present", "quantity", "q", "")
    options, seen = seen_with(accept_arrays=frozenset({"Organization.telecom"}))
    body = {"name": "X", "telecom": {"system": "phone", "value": "+61298765432", "use": "pager"}}
    violations = check_resource("Organization", body, options)
    assert full(violations) == [
        ("telecom.use", "enum", "'pager' is not one of 'home', 'work', 'mobile'", "spec")
    ]
    assert Observation("shape", "Organization.telecom", "telecom", "object") in seen
    listed = {"name": "X", "telecom": [{"system": "phone", "value": "+61298765432"}]}
    options, seen = seen_with(accept_arrays=frozenset({"Organization.telecom"}))
    assert check_resource("Organization", listed, options) == []
    assert Observation("shape", "Organization.telecom", "telecom", "array") in seen


def test_modes_decide_the_id_prefixes_and_the_create_requirements() -> None:
    [v] = check_resource("Organization", {"resourceType": "Organization", "id": "XX-1"}, READ)
    assert v.message == "'XX-1' does not start with an allowed prefix (PG-, CL-, OG-, FD-, SP-)"
    [v] = check_resource("Organization", {"name": "X", "id": "CL-1"}, CREATE)
    assert v.message == "'CL-1' does not start with an allowed prefix (SP-)"
    assert (
        check_resource("Organization", {"resourceType": "Organization", "id": "CL-1"}, READ) == []
    )
    assert check_resource("Appointment", {"description": "x"}, Options(mode="patch")) == []
    assert check_resource(catalogue.resource("Organization"), {"name": "X"}) == []


PATCH = Options(mode="patch")


def test_a_rule_is_only_as_strong_as_the_aspect_that_states_it() -> None:
    """A field whose type, format or members come from a weaker source than its resource's
    (spec < facts < pmtk) breaks a rule of that weaker source."""
    # Appointment.supportingInformation: one Reference in the spec, an array in the facts
    body = {**APPT, "supportingInformation": [None]}
    assert full(check_resource("Appointment", body, CREATE)) == [
        ("supportingInformation[0]", "type", "must not be null", "facts")
    ]
    # Referral.limitQuantity.quantity: untyped in the spec; pmtk reads it as an integer
    body = {"limitQuantity": {"quantity": "six"}}
    assert full(check_resource("Referral", body, PATCH)) == [
        ("limitQuantity.quantity", "type", "expected an integer, got string 'six'", "pmtk")
    ]
    # Appointment.participant.type (ATND) is seen only on the live service: its members too
    participant = {**APPT["participant"][0], "type": [{"coding": [{"code": 5}]}]}
    assert full(check_resource("Appointment", {**APPT, "participant": [participant]}, CREATE)) == [
        (
            "participant[0].type[0].coding[0].code",
            "type",
            "expected a string, got integer 5",
            "facts",
        )
    ]
    # an invoice line's price currency: the ISO 4217 format is pmtk's
    body = {"unitPriceComponent": [{"amount": {"value": 1, "currency": "dollars"}}]}
    assert full(check_resource("InvoiceLine", body, PATCH)) == [
        (
            "unitPriceComponent[0].amount.currency",
            "format",
            "'dollars' is not a valid currency (an ISO 4217 code such as 'AUD')",
            "pmtk",
        )
    ]
    # a Patient is a facts resource: its spec-formatted birthDate is a facts rule
    [v] = check_resource("Patient", {"birthDate": "1990-13-45"}, PATCH)
    assert (v.path, v.category, v.source) == ("birthDate", "format", "facts")


def test_a_live_form_and_a_value_inside_an_accepted_object_name_their_catalogue_path() -> None:
    options, seen = seen_with(mode="patch", live_forms=True)
    check_resource("Referral", {"limitQuantity": {"quantity": {"value": 6}}}, options)
    assert [o for o in seen if o.kind == "form"] == [
        Observation(
            "form", "Referral.limitQuantity.quantity", "limitQuantity.quantity", "value:Quantity"
        )
    ]
    # Organization.telecom sent as one object where an array is accepted: its values are
    # still checked (formats included) and observed under the field's catalogue path
    options, seen = seen_with(mode="create", accept_arrays=frozenset({"Organization.telecom"}))
    body = {"name": "X", "telecom": {"system": "phone", "value": "call me", "use": "work"}}
    [v] = check_resource("Organization", body, options)
    assert (v.path, v.category, v.source) == ("telecom.value", "format", "spec")
    assert [o for o in seen if o.kind == "enum"] == [
        Observation("enum", "Organization.telecom.system", "telecom.system", "phone"),
        Observation("enum", "Organization.telecom.use", "telecom.use", "work"),
    ]


def test_a_format_or_size_rule_of_a_weaker_source_carries_that_source() -> None:
    """The format aspect's own source, as for the type and the enum.

    No catalogue field states its format from a weaker source than its own yet, so
    the field is Referral's attachment data with its format taken from the facts.
    """
    data = catalogue.field_at("Referral", "attachments.data")
    facts_format = replace(data, aspects=(("format", "facts"),))
    [v] = check_value(facts_format, "not base64!", path="a")
    assert (v.path, v.category, v.source) == ("a", "format", "facts")
    text = base64.b64encode(b"12345").decode()
    [v] = check_value(facts_format, text, Options(max_attachment_bytes=4), path="a")
    assert full([v]) == [
        ("a", "attachment", "decodes to 5 bytes, more than the 4-byte limit", "facts")
    ]
    # the spec's own attachment limit ("each at most 200 MB decoded") is a spec rule
    [v] = check_value(data, text, Options(max_attachment_bytes=4), path="a")
    assert (v.category, v.source) == ("attachment", "spec")
