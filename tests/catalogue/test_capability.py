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
    appointment["searchParam"].append({"name": "practitioner", "type": "reference"})
    resources.append({"type": "Schedule", "interaction": [{"code": "read"}]})
    assert cat.capability_differences(changed) == [
        "Patient: in the catalogue, not declared by the server",
        "Schedule: declared by the server, not in the catalogue",
        "Appointment: searchParam date not declared",
        "Appointment: searchParam practitioner declared, not in the catalogue",
    ]
    assert cat.capability_differences({"resourceType": "Bundle"}) == [
        "the answer is not a CapabilityStatement"
    ]
    assert cat.capability_differences("not json at all") == [
        "the answer is not a CapabilityStatement"
    ]
