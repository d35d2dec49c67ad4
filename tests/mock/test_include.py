"""``_include`` on the mock's lists: matches, included records, errors, reference forms."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import api_client
from toolkit import catalogue
from toolkit.mock import serve


def _entries(bundle: dict[str, Any], mode: str) -> list[tuple[str, str]]:
    return [
        (e["resource"]["resourceType"], e["resource"]["id"])
        for e in bundle["entry"]
        if e.get("search", {}).get("mode") == mode
    ]


def _referenced(bundle: dict[str, Any], names: list[str]) -> set[tuple[str, str]]:
    """What the page's matches refer to along ``names``, read by the catalogue."""
    out: set[tuple[str, str]] = set()
    for entry in bundle["entry"]:
        if entry["search"]["mode"] == "match":
            for name in names:
                out |= set(catalogue.INCLUDES["Appointment"][name].references(entry["resource"]))
    return out


def test_includes_follow_the_matches_of_each_page_once(mock_api: httpx.Client) -> None:
    plain = mock_api.get("Appointment", params={"_count": 40, "page": 2}).json()
    names = ["Appointment:patient", "Appointment:actor:PractitionerRole"]
    query = [("_count", "40"), ("page", "2"), *(("_include", n) for n in names)]
    asked = mock_api.get("Appointment", params=query).json()
    # the matches, total and links are the plain page's; only the marks are new
    assert asked["total"] == plain["total"]
    assert _entries(asked, "match") == [
        ("Appointment", e["resource"]["id"]) for e in plain["entry"]
    ]
    assert [e["resource"] for e in asked["entry"][:40]] == [e["resource"] for e in plain["entry"]]
    included = _entries(asked, "include")
    assert len(included) == len(set(included)), "each included record once per page"
    assert set(included) == _referenced(asked, names)
    kinds = {k for k, _ in included}
    assert kinds == {"Patient", "PractitionerRole"}
    # an included record is the record a read returns
    kind, rid = included[0]
    read = mock_api.get(f"{kind}/{rid}").json()
    assert next(e["resource"] for e in asked["entry"] if e["resource"]["id"] == rid) == read


def test_comma_separated_and_repeated_includes_are_the_same(mock_api: httpx.Client) -> None:
    names = ["Appointment:patient", "Appointment:supporting-info"]
    repeated = mock_api.get("Appointment", params=[("_include", n) for n in names]).json()
    joined = mock_api.get("Appointment", params={"_include": ",".join(names)}).json()
    assert repeated["entry"] == joined["entry"]
    assert {k for k, _ in _entries(joined, "include")} == {"Patient", "HealthcareService"}


def test_an_include_free_page_keeps_its_bytes(mock_api: httpx.Client) -> None:
    page = mock_api.get("Appointment", params={"_count": 5}).content
    assert b'"search"' not in page
    assert page.count(b'{"resource":{') == 5


def test_actor_brings_in_both_types_and_actor_target_narrows(mock_api: httpx.Client) -> None:
    both = mock_api.get("Appointment", params={"_include": "Appointment:actor"}).json()
    narrow = mock_api.get("Appointment", params={"_include": "Appointment:actor:Patient"}).json()
    patient = mock_api.get("Appointment", params={"_include": "Appointment:patient"}).json()
    assert {k for k, _ in _entries(both, "include")} == {"Patient", "PractitionerRole"}
    assert _entries(narrow, "include") == _entries(patient, "include")
    assert {k for k, _ in _entries(narrow, "include")} == {"Patient"}


def test_summary_count_and_total_none_with_includes(mock_api: httpx.Client) -> None:
    counted = mock_api.get(
        "Appointment", params={"_summary": "count", "_include": "Appointment:patient"}
    ).json()
    assert counted["entry"] == [] and counted["total"] > 0


@pytest.mark.parametrize("value", ["Appointment:practitioner", "Patient:general-practitioner", ""])
def test_an_unknown_include_is_a_400_naming_the_valid_ones(fresh_mock: Any, value: str) -> None:
    with api_client(fresh_mock) as api:
        fresh_mock.touch_after("Appointment", ["10000001"], after_list_requests=1)
        answer = api.get("Appointment", params={"_include": value})
        assert answer.status_code == 400
        outcome = answer.json()
        assert outcome["resourceType"] == "OperationOutcome" and "entry" not in outcome
        text = outcome["issue"][0]["diagnostics"]
        assert repr(value) in text
        for name in catalogue.INCLUDES["Appointment"]:
            assert name in text
        modifier = api.get("Appointment", params={"_include:iterate": "Appointment:patient"})
        assert modifier.status_code == 400
        # nothing was listed: the touch armed for the first list page has not fired
        assert fresh_mock.pending_touches()["armed"][0]["seen"] == 0
        assert api.get("Appointment", params={"_count": 1}).status_code == 200
        assert fresh_mock.pending_touches()["armed"] == []


def test_a_type_without_reference_fields_takes_no_include(mock_api: httpx.Client) -> None:
    answer = mock_api.get("Practitioner", params={"_include": "Practitioner:name"})
    assert answer.status_code == 400
    assert "valid: none" in answer.json()["issue"][0]["diagnostics"]


@pytest.mark.parametrize("shapes", ["live", "spec"])
def test_references_resolve_in_either_form(shapes: str) -> None:
    """Live references are absolute (http://127.0.0.1:port/main/...), spec ones relative."""
    with serve(shapes=shapes) as dep, api_client(dep) as api:
        bundle = api.get(
            "InvoiceLine", params={"_count": 20, "_include": "InvoiceLine:invoice"}
        ).json()
        refs = [e["resource"]["invoice"]["reference"] for e in bundle["entry"][:20]]
        absolute = all(r.startswith(dep.base_url) for r in refs)
        assert absolute == (shapes == "live")
        assert not absolute or all(r.startswith("http://127.0.0.1:") for r in refs)
        wanted = {r.rsplit("/", 1)[-1] for r in refs}
        assert {rid for _, rid in _entries(bundle, "include")} == wanted


def test_a_reference_to_a_deleted_record_brings_nothing(fresh_mock: Any) -> None:
    with api_client(fresh_mock) as api:
        page = api.get("Coverage", params={"_count": 1, "_include": "Coverage:beneficiary"}).json()
        (kind, rid) = _entries(page, "include")[0]
        fresh_mock.delete("Patient", [rid])
        again = api.get("Coverage", params={"_count": 1, "_include": "Coverage:beneficiary"}).json()
    assert kind == "Patient"
    assert _entries(again, "include") == []
    assert _entries(again, "match") == _entries(page, "match")
