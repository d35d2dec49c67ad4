"""Live shapes (the default) and the spec's shapes, read and written over real HTTP.

The expected forms are written out from ``public-docs-facts.md`` ("Shapes seen on
the live service"), not taken from the mock's own constants.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import USER_AGENT, api_client
from tests.mock.test_booking import book_body
from toolkit.mock import Deployment, serve

SD = "https://terminology.halaxy.com/StructureDefinition/"
STATUS_SYSTEM = "https://au-api.halaxy.com/presets/CodeSystem/appointment-participant-status"
LIVE_HOST = "https://au-api.halaxy.com/main"


@pytest.fixture(scope="module")
def spec_mock() -> Iterator[Deployment]:
    with serve(seed=0, scale="small", shapes="spec", test_controls=True) as dep:
        yield dep


@pytest.fixture
def spec_api(spec_mock: Deployment) -> Iterator[httpx.Client]:
    spec_mock.reset_rate_limit()
    with api_client(spec_mock) as client:
        yield client


def _first(client: httpx.Client, rtype: str, **params: Any) -> dict[str, Any]:
    entry: dict[str, Any] = client.get(rtype, params={"_count": 100, **params}).json()["entry"]
    return entry  # type: ignore[return-value]


def _ext(container: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(x for x in container if x["url"].rsplit("/", 1)[-1] == name)


# --------------------------------------------------------------------------- live reads


def test_live_appointment_has_full_extension_urls_and_a_status_coding(
    mock_api: httpx.Client,
) -> None:
    appt = _first(mock_api, "Appointment")[0]["resource"]
    assert _ext(appt["extension"], "location-type")["url"] == SD + "location-type"
    for part in appt["participant"]:
        status = _ext(part["modifierExtension"], "appointment-participant-status")
        assert status["url"] == SD + "appointment-participant-status"
        coding = status["valueCoding"]
        assert coding["system"] == STATUS_SYSTEM
        assert coding["code"] in ("booked", "confirmed", "attended", "cancelled", "noshow")
        assert coding["display"]
    invoices = [
        _ext(p["extension"], "appointment-participant-invoice")
        for e in _first(mock_api, "Appointment")
        for p in e["resource"]["participant"]
        if "extension" in p
    ]
    assert invoices and all(i["url"] == SD + "appointment-participant-invoice" for i in invoices)


def test_live_references_are_absolute_urls_of_the_mock_itself(mock_api: httpx.Client) -> None:
    referral = _first(mock_api, "Referral")[0]["resource"]
    base = str(mock_api.base_url)  # http://127.0.0.1:<port>/main/
    for key in ("coverage", "subject", "requester", "performer"):
        reference = referral[key]["reference"]
        assert reference.startswith(base), reference
        assert mock_api.get(reference.removeprefix(base)).status_code == 200


def test_live_references_ignore_a_forged_host_header(mock_api: httpx.Client) -> None:
    bundle = mock_api.get("Referral", params={"_count": 1}, headers={"Host": "evil.example"})
    text = bundle.text
    assert "evil.example" not in text
    assert str(mock_api.base_url) in bundle.json()["entry"][0]["resource"]["subject"]["reference"]


def test_live_practitioner_name_is_an_array_of_human_names(mock_api: httpx.Client) -> None:
    for entry in _first(mock_api, "Practitioner"):
        names = entry["resource"]["name"]
        assert isinstance(names, list) and names
        for name in names:
            assert name["use"] in ("official", "usual")
            assert isinstance(name["given"], list) and isinstance(name["family"], str)
            assert isinstance(name.get("prefix", []), list)


def test_live_patients_have_usual_and_official_names_and_a_string_status(
    mock_api: httpx.Client,
) -> None:
    patients = [e["resource"] for e in _first(mock_api, "Patient")]
    both = [p for p in patients if {n["use"] for n in p["name"]} == {"official", "usual"}]
    assert both, "some patients carry a usual name beside the official one"
    for p in patients:
        status = _ext(p["extension"], "patient-status")
        assert status["url"] == SD + "patient-status"
        assert status["valueString"] in ("current", "contact", "archived", "blocked", "deceased")


def test_live_coverage_and_invoice_line_extensions_use_full_urls(mock_api: httpx.Client) -> None:
    urls = {x["url"] for e in _first(mock_api, "Coverage") for x in e["resource"]["extension"]}
    assert SD + "coverage-payer" in urls and SD + "coverage-patient-anonymous" in urls
    lines = _first(mock_api, "InvoiceLine")
    funders = [x for e in lines for x in e["resource"].get("extension", [])]
    assert funders and {x["url"] for x in funders} == {SD + "invoice-line-funder"}


# --------------------------------------------------------------------------- spec reads


def test_spec_shapes_serve_bare_names_single_name_objects_and_relative_refs(
    spec_api: httpx.Client,
) -> None:
    appt = _first(spec_api, "Appointment")[0]["resource"]
    assert appt["extension"][0]["url"] == "location-type"
    status = appt["participant"][1]["modifierExtension"][0]
    assert status == {
        "url": "appointment-participant-status",
        "valueCoding": {"code": status["valueCoding"]["code"]},
    }
    assert appt["participant"][1]["actor"]["reference"].startswith("/main/Patient/")
    practitioner = _first(spec_api, "Practitioner")[0]["resource"]
    assert isinstance(practitioner["name"], dict)


def test_both_shapes_hold_the_same_practice(mock_api: httpx.Client, spec_api: httpx.Client) -> None:
    live = _first(mock_api, "Referral")
    spec = _first(spec_api, "Referral")
    assert [e["resource"]["id"] for e in live] == [e["resource"]["id"] for e in spec]
    for a, b in zip(live, spec, strict=True):
        left, right = a["resource"], b["resource"]
        assert left["subject"]["reference"].endswith(right["subject"]["reference"])
        assert left["created"] == right["created"] and left["period"] == right["period"]


# --------------------------------------------------------------------------- writes


def _coverage(patient: str, **refs: str) -> dict[str, Any]:
    return {
        "resourceType": "Coverage",
        "beneficiary": {"reference": refs.get("b", f"/main/Patient/{patient}"), "type": "Patient"},
        "subscriber": {"reference": refs.get("s", f"/main/Patient/{patient}"), "type": "Patient"},
        "payor": {"reference": refs.get("p", "/main/Organization/FD-3001"), "type": "Organization"},
        "status": "active",
    }


@pytest.mark.parametrize("form", ["live-host", "mock-host", "spec"])
def test_writes_accept_absolute_and_relative_references(
    fresh_mock: Deployment, fresh_api: httpx.Client, form: str
) -> None:
    host = {"live-host": LIVE_HOST, "mock-host": fresh_mock.base_url, "spec": "/main"}[form]
    body = _coverage(
        "100004",
        b=f"{host}/Patient/100004",
        s=f"{host}/Patient/100004",
        p=f"{host}/Organization/FD-3002",
    )
    response = fresh_api.post("Coverage", json=body)
    assert response.status_code == 201, response.text
    stored = fresh_api.get(f"Coverage/{response.json()['id']}").json()
    # stored canonically: served as the mock's own absolute url, whatever form came in
    assert stored["beneficiary"]["reference"] == f"{fresh_mock.base_url}/Patient/100004"
    assert stored["payor"]["reference"] == f"{fresh_mock.base_url}/Organization/FD-3002"


def test_a_reference_on_another_path_is_still_refused(fresh_api: httpx.Client) -> None:
    body = _coverage("100004", b="https://au-api.halaxy.com/other/Patient/100004")
    response = fresh_api.post("Coverage", json=body)
    assert response.status_code == 422
    assert response.json()["issue"][0]["expression"] == ["Coverage.beneficiary.reference"]


@pytest.mark.parametrize(
    "payer",
    [
        {"url": SD + "coverage-payer", "valueCoding": {"code": "29", "display": "Patient"}},
        {"url": "coverage-payer", "valueCoding": {"code": "29", "display": "Patient"}},
        {"url": SD + "coverage-payer", "valueCode": "29"},
        {"url": "coverage-payer", "valueString": "29"},
    ],
)
def test_writes_accept_bare_or_full_urls_and_every_coded_form(
    fresh_api: httpx.Client, payer: dict[str, Any]
) -> None:
    body = {**_coverage("100005"), "extension": [payer]}
    response = fresh_api.post("Coverage", json=body)
    assert response.status_code == 201, response.text
    stored = fresh_api.get(f"Coverage/{response.json()['id']}").json()
    ext = stored["extension"][0]
    assert ext["url"] == SD + "coverage-payer"
    assert ext["valueCoding"]["code"] == "29" and "valueCode" not in ext


def test_a_bad_code_in_any_form_is_still_refused(fresh_api: httpx.Client) -> None:
    body = {**_coverage("100005"), "extension": [{"url": SD + "coverage-payer", "valueCode": "99"}]}
    before = fresh_api.get("Coverage", params={"_summary": "count"}).json()["total"]
    response = fresh_api.post("Coverage", json=body)
    assert response.status_code == 422
    assert fresh_api.get("Coverage", params={"_summary": "count"}).json()["total"] == before


def test_spec_deployment_stores_the_spec_forms(spec_mock: Deployment) -> None:
    with serve(seed=0, shapes="spec") as dep, api_client(dep) as client:
        body = _coverage("100004", b=f"{LIVE_HOST}/Patient/100004")
        body["extension"] = [{"url": SD + "coverage-payer", "valueCode": "29"}]
        created = client.post("Coverage", json=body).json()
        assert created["beneficiary"]["reference"] == "/main/Patient/100004"
        assert created["extension"] == [{"url": "coverage-payer", "valueCoding": {"code": "29"}}]
        two = {"name": [{"family": "A", "given": ["B"]}, {"family": "C", "given": ["D"]}]}
        refused = client.post("Practitioner", json={"resourceType": "Practitioner", **two})
        assert refused.status_code == 422
        one = {"resourceType": "Practitioner", "name": [{"family": "Ng", "given": ["Mai"]}]}
        assert client.post("Practitioner", json=one).json()["name"] == one["name"][0]


def test_live_deployment_stores_a_single_practitioner_name_as_an_array(
    fresh_api: httpx.Client,
) -> None:
    body = {"resourceType": "Practitioner", "name": {"use": "official", "family": "Ng"}}
    created = fresh_api.post("Practitioner", json=body).json()
    assert created["name"] == [{"use": "official", "family": "Ng"}]


# --------------------------------------------------------------------------- cancelling


def _book_free_slot(client: httpx.Client, role: str = "PR-6001") -> dict[str, Any]:
    window = {"start": "2026-11-23T00:00:00Z", "end": "2026-11-28T00:00:00Z", "duration": "30"}
    slot = client.get("Appointment/$find", params={**window, "practitioner-role": role}).json()
    first = slot["entry"][0]["resource"]
    booked = client.post("Appointment/$book", json=book_body(role, first["start"], first["end"]))
    assert booked.status_code == 201
    appt: dict[str, Any] = booked.json()
    return appt


@pytest.mark.parametrize(
    ("url", "value"),
    [
        (SD + "appointment-participant-status", {"valueCoding": {"code": "cancelled (no charge)"}}),
        ("appointment-participant-status", {"valueCode": "cancelled (no charge)"}),
    ],
)
def test_cancelling_the_patient_merges_by_actor_and_frees_the_slot(
    fresh_api: httpx.Client, url: str, value: dict[str, Any]
) -> None:
    appt = _book_free_slot(fresh_api)
    patient = next(p for p in appt["participant"] if "/Patient/" in p["actor"]["reference"])
    patch = {
        "participant": [
            {
                "actor": {"reference": f"{LIVE_HOST}/Patient/100001", "type": "Patient"},
                "modifierExtension": [{"url": url, **value}],
            }
        ]
    }
    response = fresh_api.patch(
        f"Appointment/{appt['id']}",
        json=patch,
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status_code == 200, response.text
    after = fresh_api.get(f"Appointment/{appt['id']}").json()
    assert len(after["participant"]) == 2  # the practitioner participant stays
    kinds = {p["actor"]["reference"].rsplit("/", 2)[-2] for p in after["participant"]}
    assert kinds == {"PractitionerRole", "Patient"}
    cancelled = next(p for p in after["participant"] if "/Patient/" in p["actor"]["reference"])
    assert cancelled["actor"] == patient["actor"]
    coding = _ext(cancelled["modifierExtension"], "appointment-participant-status")["valueCoding"]
    assert coding["code"] == "cancelled" and coding["system"] == STATUS_SYSTEM
    # the slot is free again: booking it once more succeeds
    again = fresh_api.post(
        "Appointment/$book", json=book_body("PR-6001", appt["start"], appt["end"], "100002")
    )
    assert again.status_code == 201, again.text


def test_a_participant_patch_without_an_actor_is_refused_and_changes_nothing(
    fresh_api: httpx.Client,
) -> None:
    appt = _book_free_slot(fresh_api)
    before = fresh_api.get(f"Appointment/{appt['id']}").json()
    patch = {"participant": [{"modifierExtension": [{"url": "appointment-participant-status"}]}]}
    response = fresh_api.patch(f"Appointment/{appt['id']}", json=patch)
    assert response.status_code == 422
    assert response.json()["issue"][0]["expression"] == [
        "Appointment.participant[0].actor.reference"
    ]
    assert fresh_api.get(f"Appointment/{appt['id']}").json() == before


def test_pmtk_mock_shapes_spec_serves_relative_references() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from toolkit.cli import app; app()",
            "mock",
            "--port",
            "0",
            "--shapes",
            "spec",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(4)]
        info = dict(line.split(":", 1) for line in lines)
        base_url = info["base URL"].strip()
        assert info["shapes"].strip() == "spec"
        token = httpx.post(
            f"{base_url}/oauth/token",
            json={
                "grant_type": "client_credentials",
                "client_id": info["client id"].strip(),
                "client_secret": info["client secret"].strip(),
            },
            headers={"User-Agent": USER_AGENT},
        ).json()["access_token"]
        headers = {"User-Agent": USER_AGENT, "Authorization": f"Bearer {token}"}
        referral = httpx.get(f"{base_url}/Referral/300001", headers=headers).json()
        assert referral["subject"]["reference"].startswith("/main/Patient/")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
