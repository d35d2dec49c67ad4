"""The catalogue walker on hand-made JSON: one rule broken at a time."""

from __future__ import annotations

import copy
from typing import Any

from contracts.walker import Seen, walk_resource
from tests.samples import appointment, organization

ORG = organization()
APPT = appointment()


def _categories(resource: str, data: Any) -> list[str]:
    return [p.category for p in walk_resource(resource, data)]


def test_conforming_records_have_no_problems() -> None:
    assert walk_resource("Organization", ORG) == []
    assert walk_resource("Appointment", APPT) == []


def test_phone_with_spaces_is_a_format_problem_but_email_is_not_a_phone() -> None:
    org = copy.deepcopy(ORG)
    org["telecom"][0]["value"] = "+61 2 9876 5432"
    assert _categories("Organization", org) == ["format"]


def test_country_name_instead_of_iso_code_is_a_format_problem() -> None:
    org = copy.deepcopy(ORG)
    org["address"][0]["country"] = "Australia"
    assert _categories("Organization", org) == ["format"]


def test_wrong_id_prefix_is_a_prefix_problem() -> None:
    org = copy.deepcopy(ORG)
    org["id"] = "XX-1"
    assert _categories("Organization", org) == ["prefix"]


def test_enum_outside_the_list_is_an_enum_problem() -> None:
    org = copy.deepcopy(ORG)
    org["telecom"][0]["use"] = "pager"
    assert _categories("Organization", org) == ["enum"]


def test_reference_to_the_wrong_prefix_is_a_reference_problem() -> None:
    org = copy.deepcopy(ORG)
    org["partOf"]["reference"] = "/main/Organization/CL-2"
    assert _categories("Organization", org) == ["reference"]


def test_extension_encoded_reference_is_checked() -> None:
    appt = copy.deepcopy(APPT)
    ext = appt["participant"][0]["extension"][0]
    ext["valueReference"]["reference"] = "/main/Patient/9"
    assert _categories("Appointment", appt) == ["reference"]


def test_missing_required_end_is_a_format_problem() -> None:
    appt = copy.deepcopy(APPT)
    del appt["end"]
    assert _categories("Appointment", appt) == ["format"]


def test_impossible_date_time_is_a_format_problem() -> None:
    appt = copy.deepcopy(APPT)
    appt["start"] = "2026-02-30T09:00:00Z"
    assert _categories("Appointment", appt) == ["format"]


def test_open_enum_value_outside_the_list_is_only_observed() -> None:
    appt = copy.deepcopy(APPT)
    appt["extension"][0]["valueCode"] = "home-visit"
    seen = Seen()
    assert walk_resource("Appointment", appt, seen) == []
    assert seen.open_enum_outside["Appointment.location-type"]["home-visit"] == 1


def test_practitioner_name_array_is_an_observation_not_a_failure() -> None:
    seen = Seen()
    pr = {
        "resourceType": "Practitioner",
        "id": "PR-1",
        "name": [{"use": "official", "family": "X"}],
    }
    assert walk_resource("Practitioner", pr, seen) == []
    assert seen.shapes["Practitioner.name"]["array"] == 1


def test_enum_report_lists_values_never_seen() -> None:
    seen = Seen()
    walk_resource("Organization", ORG, seen)
    report = seen.enum_report()["Organization.telecom.system"]
    assert report["seen"] == ["email", "phone"]
    assert "fax" in report["never_seen"]
