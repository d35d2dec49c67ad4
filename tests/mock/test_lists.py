"""List endpoints: FHIR searchset Bundles, paging, common and per-resource search parameters."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from toolkit import catalogue


def _ids(bundle: dict[str, Any]) -> list[str]:
    return [e["resource"]["id"] for e in bundle["entry"]]


def _link(bundle: dict[str, Any], relation: str) -> str | None:
    return next((x["url"] for x in bundle["link"] if x["relation"] == relation), None)


@pytest.mark.parametrize("resource", catalogue.LISTED_RESOURCES)
def test_list_returns_a_searchset_bundle_with_total_and_links(
    mock_api: httpx.Client, resource: str
) -> None:
    response = mock_api.get(resource)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/fhir+json")
    bundle = response.json()
    assert bundle["resourceType"] == "Bundle" and bundle["type"] == "searchset"
    assert bundle["total"] >= len(bundle["entry"]) > 0
    assert all(e["resource"]["resourceType"] == resource for e in bundle["entry"])
    assert all("lastUpdated" in e["resource"]["meta"] for e in bundle["entry"])
    assert _link(
        bundle,
        "self",
    ).startswith("http://127.0.0.1:")  # type: ignore[union-attr]
    assert _link(bundle, "last") is not None


def test_default_page_size_is_30(mock_api: httpx.Client) -> None:
    assert len(mock_api.get("Appointment").json()["entry"]) == 30


@pytest.mark.parametrize("count", ["0", "101", "ten", "-1"])
def test_count_outside_1_to_100_gets_400(mock_api: httpx.Client, count: str) -> None:
    response = mock_api.get("Appointment", params={"_count": count})
    assert response.status_code == 400
    assert response.json()["resourceType"] == "OperationOutcome"


def test_page_zero_gets_400(mock_api: httpx.Client) -> None:
    assert mock_api.get("Appointment", params={"page": "0"}).status_code == 400


def test_following_next_links_reads_every_record_exactly_once(mock_api: httpx.Client) -> None:
    url: str | None = "Referral?_count=40"
    seen: list[str] = []
    total = None
    while url:
        bundle = mock_api.get(url).json()
        total = bundle["total"]
        seen += _ids(bundle)
        url = _link(bundle, "next")
    assert len(seen) == total == len(set(seen))


def test_next_and_last_links_are_absolute_and_keep_the_query(mock_api: httpx.Client) -> None:
    bundle = mock_api.get("Appointment", params={"_count": 100, "date": "ge2026-01-01"}).json()
    nxt = _link(bundle, "next")
    assert nxt is not None and nxt.startswith(str(mock_api.base_url).rstrip("/"))
    assert "page=2" in nxt and "date=ge2026-01-01" in nxt and "_count=100" in nxt
    last = mock_api.get(_link(bundle, "last")).json()  # type: ignore[arg-type]
    assert _link(last, "next") is None and 0 < len(last["entry"]) <= 100


def test_page_past_the_end_is_empty_not_an_error(mock_api: httpx.Client) -> None:
    bundle = mock_api.get("Organization", params={"page": 999}).json()
    assert bundle["entry"] == [] and bundle["total"] > 0


def test_id_search_takes_a_comma_separated_list(mock_api: httpx.Client) -> None:
    bundle = mock_api.get("Organization", params={"_id": "PG-1000,CL-2001,FD-9999"}).json()
    assert sorted(_ids(bundle)) == ["CL-2001", "PG-1000"]


def test_last_updated_prefixes_bound_the_results(mock_api: httpx.Client) -> None:
    params = [("_lastUpdated", "ge2026-06-01"), ("_lastUpdated", "lt2026-07-01"), ("_count", "100")]
    bundle = mock_api.get("Coverage", params=params).json()
    stamps = [e["resource"]["meta"]["lastUpdated"] for e in bundle["entry"]]
    assert stamps and all("2026-06-01" <= s < "2026-07-01" for s in stamps)
    everything = mock_api.get("Coverage").json()["total"]
    assert bundle["total"] < everything


def test_sort_by_last_updated_descending(mock_api: httpx.Client) -> None:
    bundle = mock_api.get("Referral", params={"_sort": "-_lastUpdated", "_count": 50}).json()
    stamps = [e["resource"]["meta"]["lastUpdated"] for e in bundle["entry"]]
    assert stamps == sorted(stamps, reverse=True)


def test_sort_by_appointment_date(mock_api: httpx.Client) -> None:
    bundle = mock_api.get("Appointment", params={"_sort": "-date", "_count": 50}).json()
    starts = [e["resource"]["start"] for e in bundle["entry"]]
    assert starts == sorted(starts, reverse=True)


def test_unknown_sort_field_gets_400(mock_api: httpx.Client) -> None:
    assert mock_api.get("Referral", params={"_sort": "colour"}).status_code == 400


def test_appointment_date_search_with_prefixes(mock_api: httpx.Client) -> None:
    params = [("date", "ge2026-03-01"), ("date", "lt2026-03-08"), ("_count", "100")]
    bundle = mock_api.get("Appointment", params=params).json()
    starts = [e["resource"]["start"] for e in bundle["entry"]]
    assert starts and all("2026-03-01" <= s < "2026-03-08" for s in starts)


def test_appointment_date_eq_matches_one_day(mock_api: httpx.Client) -> None:
    bundle = mock_api.get("Appointment", params={"date": "eq2026-03-03"}).json()
    assert all(e["resource"]["start"].startswith("2026-03-03") for e in bundle["entry"])


def test_bad_date_value_gets_400(mock_api: httpx.Client) -> None:
    assert mock_api.get("Appointment", params={"date": "ge2026-13-45"}).status_code == 400


def test_appointment_patient_search(mock_api: httpx.Client) -> None:
    bundle = mock_api.get("Appointment", params={"patient": "Patient/100002"}).json()
    assert bundle["total"] > 0
    for entry in bundle["entry"]:
        actors = [p["actor"]["reference"] for p in entry["resource"]["participant"]]
        # live shapes: absolute references to the mock's own origin
        assert f"{str(mock_api.base_url).rstrip('/')}/Patient/100002" in actors


@pytest.mark.parametrize(
    ("resource", "param", "field"),
    [
        ("Referral", "subject", "subject"),
        ("Coverage", "beneficiary", "beneficiary"),
        ("InvoiceLine", "subject", "subject"),
    ],
)
def test_patient_reference_search(
    mock_api: httpx.Client, resource: str, param: str, field: str
) -> None:
    first = mock_api.get(resource, params={"_count": 1}).json()["entry"][0]["resource"]
    patient = first[field]["reference"].rsplit("/", 1)[1]
    bundle = mock_api.get(resource, params={param: patient}).json()
    assert bundle["total"] >= 1
    assert {e["resource"][field]["reference"] for e in bundle["entry"]} == {
        f"{str(mock_api.base_url).rstrip('/')}/Patient/{patient}"
    }


def test_patient_name_search_ignores_case_and_accents(mock_api: httpx.Client) -> None:
    bundle = mock_api.get("Patient", params={"given": "zoe", "_count": 100}).json()
    assert bundle["total"] > 0
    for entry in bundle["entry"]:
        givens = [g for n in entry["resource"]["name"] for g in n["given"]]
        assert "Zoë" in givens


def test_patient_family_search(mock_api: httpx.Client) -> None:
    bundle = mock_api.get("Patient", params={"family": "nguyen", "_count": 100}).json()
    assert bundle["total"] > 0
    assert all(e["resource"]["name"][0]["family"] == "Nguyễn" for e in bundle["entry"])


def test_organization_name_search(mock_api: httpx.Client) -> None:
    bundle = mock_api.get("Organization", params={"name": "medicare"}).json()
    assert [e["resource"]["name"] for e in bundle["entry"]] == ["Medicare"]


def test_total_none_leaves_total_out(mock_api: httpx.Client) -> None:
    bundle = mock_api.get("Referral", params={"_total": "none"}).json()
    assert "total" not in bundle and bundle["entry"]


def test_unknown_search_parameters_are_ignored(mock_api: httpx.Client) -> None:
    plain = mock_api.get("Referral").json()
    odd = mock_api.get("Referral", params={"colour": "blue", "_revinclude": "x"}).json()
    assert _ids(plain) == _ids(odd)
