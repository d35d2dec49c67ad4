"""The OpenAPI document is generated from the catalogue, valid, and complete."""

from __future__ import annotations

import re

import yaml
from openapi_spec_validator import validate

from contracts.openapi import build_openapi, render_openapi
from toolkit import catalogue as cat


def test_generated_openapi_is_a_valid_3_1_document() -> None:
    doc = yaml.safe_load(render_openapi())
    assert doc["openapi"].startswith("3.1")
    validate(doc)


def test_every_spec_endpoint_is_an_operation_and_no_other_is() -> None:
    paths = build_openapi()["paths"]
    for endpoint in cat.ENDPOINTS:
        if endpoint.source == "spec":
            assert endpoint.method.lower() in paths[endpoint.path], endpoint
        else:  # schemathesis must never fail a deployment over an endpoint outside the spec
            assert endpoint.method.lower() not in paths.get(endpoint.path, {}), endpoint
    assert "/main/PractitionerRole" not in paths and "/main/Patient/{id}" not in paths


def test_list_operations_bound_count_and_declare_rate_limit_headers_and_429() -> None:
    doc = build_openapi()
    op = doc["paths"]["/main/Referral"]["get"]
    count = doc["components"]["parameters"]["count"]["schema"]
    assert (count["minimum"], count["maximum"]) == (1, cat.MAX_PAGE_SIZE)
    assert set(op["responses"]["200"]["headers"]) == set(cat.RATE_LIMIT_HEADERS)
    too_many = doc["components"]["responses"]["TooManyRequests"]
    assert too_many["headers"]["retry-after"]["required"] is True
    names = {p.get("name") for p in op["parameters"]}
    assert set(cat.SEARCH_PARAMETERS["Referral"]) <= names


def test_prefixes_enums_and_references_come_from_the_catalogue() -> None:
    schemas = build_openapi()["components"]["schemas"]
    pattern = schemas["Practitioner"]["properties"]["id"]["pattern"]
    assert re.match(pattern, "PR-12") and re.match(pattern, "EP-3")
    assert not re.match(pattern, "XP-12")
    alloc = schemas["Referral"]["properties"]["allocationType"]["enum"]
    assert alloc == ["Appointments only", "All fee types"]
    performer = schemas["Referral"]["properties"]["performer"]["properties"]["reference"]
    assert re.match(performer["pattern"], "/main/Practitioner/PR-1")
    assert not re.match(performer["pattern"], "/main/Practitioner/EP-1")


def test_token_endpoint_needs_no_bearer_and_resources_do() -> None:
    doc = build_openapi()
    assert doc["paths"]["/main/oauth/token"]["post"]["security"] == []
    assert doc["security"] == [{"bearer": []}]
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
