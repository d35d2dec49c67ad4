"""The referenced resources on the mock: consistent data, searches, and exact frames.

Each expectation is read from the raw JSON the mock serves over HTTP (plain ``json``,
not pmtk's views), then compared with what ``client.frame`` makes of the same data.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import httpx
import polars as pl
import pytest

from toolkit import Client
from toolkit.mock import Deployment

NEW_TYPES = (
    "PractitionerRole",
    "HealthcareService",
    "Invoice",
    "ReferralDefinition",
    "ChargeItemDefinition",
    "Slot",
)


def every_record(api: httpx.Client, path: str, **params: str) -> list[dict[str, Any]]:
    """Every record of a list (or of ``$find``), following ``next`` links by hand."""
    out: list[dict[str, Any]] = []
    url: str | None = path
    query: dict[str, str] | None = {"_count": "100", **params}
    while url is not None:
        bundle = api.get(url, params=query).json()
        assert bundle["resourceType"] == "Bundle", bundle
        out += [e["resource"] for e in bundle.get("entry", [])]
        url = next((ln["url"] for ln in bundle["link"] if ln["relation"] == "next"), None)
        query = None
    return out


def _id(reference: dict[str, Any]) -> str:
    return str(reference["reference"]).rsplit("/", 1)[-1]


@pytest.fixture(scope="module")
def raw(mock_deployment: Deployment) -> Iterator[dict[str, list[dict[str, Any]]]]:
    mock_deployment.reset_rate_limit()
    from tests.conftest import api_client

    with api_client(mock_deployment) as api:
        types = (*NEW_TYPES, "Practitioner", "Organization", "Appointment", "InvoiceLine")
        yield {t: every_record(api, t) for t in (*types, "Referral")}


@pytest.fixture(scope="module")
def client(mock_deployment: Deployment) -> Iterator[Client]:
    with Client(
        mock_deployment.base_url, mock_deployment.client_id, mock_deployment.client_secret
    ) as c:
        yield c


def test_each_role_links_its_practitioner_to_a_clinic_and_that_clinics_services(
    raw: dict[str, list[dict[str, Any]]],
) -> None:
    practitioners = {p["id"] for p in raw["Practitioner"]}
    orgs = {o["id"] for o in raw["Organization"]}
    provider = {s["id"]: _id(s["providedBy"]) for s in raw["HealthcareService"]}
    for role in raw["PractitionerRole"]:
        assert _id(role["practitioner"]) in practitioners
        clinic = _id(role["organization"])
        assert clinic in orgs
        if role["id"].startswith("PR-"):  # the group's own: at one of its clinics
            assert clinic.startswith("CL-")
            services = [_id(s) for s in role["healthcareService"]]
            assert services and all(provider[s] == clinic for s in services)


def test_each_appointment_names_existing_roles_patients_and_its_roles_services(
    raw: dict[str, list[dict[str, Any]]],
) -> None:
    roles = {r["id"]: r for r in raw["PractitionerRole"]}
    services = {s["id"] for s in raw["HealthcareService"]}
    for appt in raw["Appointment"]:
        actors = [p["actor"]["reference"] for p in appt["participant"]]
        role_ids = [a.rsplit("/", 1)[-1] for a in actors if "/PractitionerRole/" in a]
        assert len(role_ids) == 1, appt["id"]
        offered = {_id(s) for s in roles[role_ids[0]].get("healthcareService", [])}
        for ref in appt["supportingInformation"]:
            assert _id(ref) in services and _id(ref) in offered


def test_each_invoice_totals_the_sum_of_its_lines_and_bills_the_funder_or_patient(
    raw: dict[str, list[dict[str, Any]]],
) -> None:
    sums: dict[str, float] = defaultdict(float)
    funders: dict[str, list[str]] = defaultdict(list)
    for line in raw["InvoiceLine"]:
        invoice = _id(line["invoice"])
        sums[invoice] += sum(c["amount"]["value"] for c in line["unitPriceComponent"])
        for ext in line.get("extension", []):
            funders[invoice].append(_id(ext["valueReference"]))
    assert set(sums) == {i["id"] for i in raw["Invoice"]}  # no invoice without lines
    for invoice in raw["Invoice"]:
        assert invoice["totalGross"]["value"] == pytest.approx(sums[invoice["id"]])
        paid, balance = invoice["totalPaid"]["value"], invoice["totalBalance"]["value"]
        assert paid + balance == pytest.approx(invoice["totalGross"]["value"])
        recipient = invoice["recipient"]["reference"]
        if "/Organization/" in recipient:
            assert _id(invoice["recipient"]) in funders[invoice["id"]]
        else:
            assert _id(invoice["recipient"]) == _id(invoice["subject"])
        dt.date.fromisoformat(invoice["date"])  # a plain date (facts)


def test_every_referral_type_and_fee_has_its_definition(
    raw: dict[str, list[dict[str, Any]]],
) -> None:
    names = {d["name"] for d in raw["ReferralDefinition"]}
    by_id = {d["id"]: d["name"] for d in raw["ReferralDefinition"]}
    # the live form (facts): a Reference to the definition, its name as display
    used = {r["referralDefinition"]["display"] for r in raw["Referral"]}
    assert used and used <= names
    for r in raw["Referral"]:
        target = r["referralDefinition"]["reference"].rsplit("/", 1)[-1]
        assert by_id[target] == r["referralDefinition"]["display"]
    fees = {c["id"] for c in raw["ChargeItemDefinition"]}
    assert {line["definition"].rsplit("/", 1)[-1] for line in raw["InvoiceLine"]} <= fees


@pytest.mark.parametrize("rtype", NEW_TYPES)
def test_each_read_answers_the_listed_record(
    mock_api: httpx.Client, raw: dict[str, list[dict[str, Any]]], rtype: str
) -> None:
    for record in raw[rtype][:3]:
        assert mock_api.get(f"{rtype}/{record['id']}").json() == record


def test_invoices_search_by_created_date_and_by_recipient(
    mock_api: httpx.Client, raw: dict[str, list[dict[str, Any]]]
) -> None:
    invoices = raw["Invoice"]
    day = sorted(i["date"] for i in invoices)[len(invoices) // 2]
    found = {i["id"] for i in every_record(mock_api, "Invoice", created=f"ge{day}")}
    assert found == {i["id"] for i in invoices if i["date"] >= day}
    found = {i["id"] for i in every_record(mock_api, "Invoice", created=f"lt{day}")}
    assert found == {i["id"] for i in invoices if i["date"] < day}

    counts = Counter(i["recipient"]["reference"].split("/main/")[-1] for i in invoices)
    funder = next(r for r in counts if r.startswith("Organization/"))
    patient = next(r for r in counts if r.startswith("Patient/"))
    for recipient in (funder, patient):
        found = {i["id"] for i in every_record(mock_api, "Invoice", recipient=recipient)}
        assert len(found) == counts[recipient]
    both = every_record(mock_api, "Invoice", recipient=f"{funder},{patient}")
    assert len(both) == counts[funder] + counts[patient]


def test_a_bare_id_for_a_polymorphic_reference_search_is_refused_with_422(
    mock_api: httpx.Client,
) -> None:
    response = mock_api.get("Invoice", params={"recipient": "FD-3001"})
    assert response.status_code == 422
    outcome = response.json()
    assert outcome["resourceType"] == "OperationOutcome"
    assert "Organization/FD-3001" in outcome["issue"][0]["diagnostics"]


def _expected(rtype: str, record: dict[str, Any]) -> dict[str, Any]:
    """The main-table values of ``record``, read by hand from its JSON."""
    if rtype == "PractitionerRole":
        return {
            "active": record["active"],
            "practitioner_id": _id(record["practitioner"]),
            "organization_id": _id(record["organization"]),
        }
    if rtype == "HealthcareService":
        return {"name": record["name"], "provided_by_id": _id(record["providedBy"])}
    if rtype == "Invoice":
        return {
            "status": record["status"],
            "recipient_id": _id(record["recipient"]),
            "date": dt.date.fromisoformat(record["date"]),
            "total_gross_value": record["totalGross"]["value"],
            "total_paid_value": record["totalPaid"]["value"],
        }
    if rtype == "ReferralDefinition":
        return {
            "name": record["name"],
            "funder_id": _id(record["funder"]),
            "limit_quantity": record["limitQuantity"]["quantity"],
        }
    if rtype == "Slot":
        return {
            "start": dt.datetime.fromisoformat(record["start"]),
            "end": dt.datetime.fromisoformat(record["end"]),
            "status": record["status"],
            "practitioner_role_id": _id(record["practitionerRole"]),
            "healthcare_service_id": _id(record["healthcareService"]),
        }
    return {
        "title": record["title"],
        "code": record["code"],
        "price_value": record["price"]["value"],
    }


@pytest.mark.parametrize("rtype", NEW_TYPES)
def test_each_frame_is_complete_and_exact(
    client: Client, raw: dict[str, list[dict[str, Any]]], rtype: str
) -> None:
    frame = client.frame(rtype)
    records = raw[rtype]
    assert frame.get_column("id").to_list() == [r["id"] for r in records]
    columns = list(_expected(rtype, records[0]))
    expected = pl.DataFrame([_expected(rtype, r) for r in records], schema_overrides=None)
    assert frame.select(columns).to_dicts() == expected.select(columns).to_dicts()
    assert frame.get_column("extra").null_count() == frame.height  # nothing unread


def test_the_role_services_child_table_is_exact(
    client: Client, raw: dict[str, list[dict[str, Any]]]
) -> None:
    tables = client.frames("PractitionerRole")
    services = tables["practitioner_role_healthcare_service"]
    expected = [
        (role["id"], k, _id(s))
        for role in raw["PractitionerRole"]
        for k, s in enumerate(role.get("healthcareService", []))
    ]
    got = services.select("practitioner_role_id", "index", "healthcare_service_id").rows()
    assert got == expected


@pytest.mark.parametrize(
    ("value", "status", "says"),
    [
        ("Foo/1", 400, "cannot point at Foo"),
        ("/", 400, "neither an id nor Type/id"),
        ("Patient/", 400, "neither an id nor Type/id"),
        ("100251", 422, "give Type/id"),
    ],
)
def test_a_malformed_recipient_search_is_refused_naming_what_is_wrong(
    mock_api: httpx.Client, value: str, status: int, says: str
) -> None:
    response = mock_api.get("Invoice", params={"recipient": value})
    assert response.status_code == status
    assert says in response.json()["issue"][0]["diagnostics"]


def test_an_empty_search_value_is_ignored_and_an_absolute_reference_matches(
    mock_api: httpx.Client, raw: dict[str, list[dict[str, Any]]]
) -> None:
    total = len(raw["Invoice"])
    assert mock_api.get("Invoice", params={"recipient": ""}).json()["total"] == total
    slots = mock_api.get("Slot", params={"_count": 1}).json()["total"]
    assert mock_api.get("Slot", params={"status": ""}).json()["total"] == slots
    patient = raw["Invoice"][0]["subject"]["reference"].rsplit("/", 1)[-1]
    absolute = f"https://au-api.halaxy.com/main/Patient/{patient}"
    found = mock_api.get("Invoice", params={"recipient": absolute, "_count": 100}).json()
    expected = [i for i in raw["Invoice"] if i["recipient"]["reference"].endswith(f"/{patient}")]
    assert found["total"] == len(expected) > 0
