"""Single-record reads and the integrity of references across the generated store."""

from __future__ import annotations

import httpx
import pytest

from toolkit import catalogue


def test_read_returns_one_resource_with_meta_last_updated(mock_api: httpx.Client) -> None:
    response = mock_api.get("Practitioner/PR-6001")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/fhir+json")
    body = response.json()
    assert body["resourceType"] == "Practitioner" and body["id"] == "PR-6001"
    assert body["meta"]["lastUpdated"].endswith("Z")


def test_unknown_id_gets_404_operation_outcome(mock_api: httpx.Client) -> None:
    response = mock_api.get("Referral/999999999")
    assert response.status_code == 404
    assert response.json()["resourceType"] == "OperationOutcome"


def test_unknown_resource_type_gets_404_operation_outcome(mock_api: httpx.Client) -> None:
    response = mock_api.get("Spaceship")
    assert response.status_code == 404
    assert response.json()["resourceType"] == "OperationOutcome"


def test_unsupported_method_gets_405_operation_outcome(mock_api: httpx.Client) -> None:
    response = mock_api.delete("Referral/300001")
    assert response.status_code == 405
    assert response.json()["resourceType"] == "OperationOutcome"


def _references(value: object) -> list[str]:
    out: list[str] = []
    if isinstance(value, dict):
        if isinstance(value.get("reference"), str):
            out.append(value["reference"])
        for v in value.values():
            out += _references(v)
    elif isinstance(value, list):
        for v in value:
            out += _references(v)
    return out


@pytest.mark.parametrize("resource", catalogue.LISTED_RESOURCES)
def test_every_reference_on_the_first_page_resolves(mock_api: httpx.Client, resource: str) -> None:
    bundle = mock_api.get(resource, params={"_count": 100}).json()
    refs = set(_references(bundle["entry"]))
    definitions = {
        e["resource"]["definition"] for e in bundle["entry"] if "definition" in e["resource"]
    }
    assert refs or resource in ("Practitioner", "Organization", "ChargeItemDefinition")
    base = str(mock_api.base_url)  # ends with /main/
    assert all(r.startswith(base) for r in refs)  # live shapes: absolute, to the mock itself
    assert all(d.startswith("/main/") for d in definitions)  # canonical, spec form
    for target in sorted(refs | definitions):
        response = mock_api.get(target.removeprefix(base).removeprefix("/main/"))
        assert response.status_code == 200, target
