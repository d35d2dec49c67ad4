"""Creates and merge-patch updates, validated from the catalogue, over real HTTP."""

from __future__ import annotations

import base64
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import USER_AGENT, api_client, token_for
from toolkit.mock import Deployment, serve


def referral_body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "resourceType": "Referral",
        "coverage": {"reference": "/main/Coverage/200001", "type": "Coverage"},
        "subject": {"reference": "/main/Patient/100001", "type": "Patient"},
        "requester": {"reference": "/main/PractitionerRole/EP-7001", "type": "PractitionerRole"},
        "performer": {"reference": "/main/Practitioner/PR-6001", "type": "Practitioner"},
        "created": "2026-11-20T10:00:00Z",
        "period": {"start": "2026-11-20", "end": "2027-11-20"},
        "allocationType": "Appointments only",
        "active": True,
    }
    body.update(extra)
    return body


def attachment(**extra: Any) -> dict[str, Any]:
    item = {
        "contentType": "application/pdf",
        "data": base64.b64encode(b"%PDF-1.4 letter").decode(),
        "title": "letter.pdf",
    }
    item.update(extra)
    return item


COUNTRY = "Organization.address[0].country"


def _expressions(response: httpx.Response) -> list[str]:
    return [x for issue in response.json()["issue"] for x in issue.get("expression", [])]


def test_create_referral_answers_201_with_location(fresh_api: httpx.Client) -> None:
    response = fresh_api.post("Referral", json=referral_body())
    assert response.status_code == 201
    created = response.json()
    assert created["resourceType"] == "Referral" and created["id"]
    assert response.headers["location"].endswith(f"/main/Referral/{created['id']}")
    assert response.headers["location"].startswith("http://127.0.0.1:")


def test_created_referral_reads_back_and_is_listed(fresh_api: httpx.Client) -> None:
    before = fresh_api.get("Referral").json()["total"]
    created = fresh_api.post("Referral", json=referral_body(comment="new")).json()
    again = fresh_api.get(f"Referral/{created['id']}").json()
    assert again["comment"] == "new" and "lastUpdated" in again["meta"]
    assert fresh_api.get("Referral").json()["total"] == before + 1


def test_attachments_are_accepted_on_create_but_not_echoed(fresh_api: httpx.Client) -> None:
    response = fresh_api.post("Referral", json=referral_body(attachments=[attachment()]))
    assert response.status_code == 201
    assert "attachments" not in response.json()


def test_create_organization_gets_an_sp_id(fresh_api: httpx.Client) -> None:
    body = {
        "resourceType": "Organization",
        "name": "Bondi Family Practice",
        "telecom": [{"system": "phone", "value": "+61298765432", "use": "work"}],
        "address": [{"use": "work", "city": "Bondi", "country": "AU"}],
    }
    response = fresh_api.post("Organization", json=body)
    assert response.status_code == 201
    assert response.json()["id"].startswith("SP-")


def test_create_practitioner_gets_an_ep_id(fresh_api: httpx.Client) -> None:
    body = {"resourceType": "Practitioner", "name": {"given": ["Søren"], "family": "Andersen"}}
    response = fresh_api.post("Practitioner", json=body)
    assert response.status_code == 201
    assert response.json()["id"].startswith("EP-")


def test_create_coverage_on_the_trailing_slash_path(fresh_api: httpx.Client) -> None:
    body = {
        "resourceType": "Coverage",
        "beneficiary": {"reference": "/main/Patient/100003", "type": "Patient"},
        "subscriber": {"reference": "/main/Patient/100003", "type": "Patient"},
        "payor": {"reference": "/main/Organization/FD-3001", "type": "Organization"},
        "status": "active",
    }
    response = fresh_api.post("Coverage/", json=body)
    assert response.status_code == 201
    found = fresh_api.get("Coverage", params={"beneficiary": "100003"}).json()
    assert response.json()["id"] in [e["resource"]["id"] for e in found["entry"]]


def test_malformed_json_gets_400(mock_api: httpx.Client) -> None:
    response = mock_api.post(
        "Referral", content=b'{"coverage": ', headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["resourceType"] == "OperationOutcome"


def test_missing_create_required_field_gets_422_naming_it(mock_api: httpx.Client) -> None:
    body = referral_body()
    del body["requester"]
    response = mock_api.post("Referral", json=body)
    assert response.status_code == 422
    assert "Referral.requester" in _expressions(response)


def test_attachment_with_a_bad_content_type_gets_422_at_its_path(mock_api: httpx.Client) -> None:
    body = referral_body(attachments=[attachment(), attachment(contentType="text/plain")])
    response = mock_api.post("Referral", json=body)
    assert response.status_code == 422
    assert _expressions(response) == ["Referral.attachments[1].contentType"]
    assert "text/plain" in response.json()["issue"][0]["diagnostics"]


def test_attachment_with_invalid_base64_gets_422(mock_api: httpx.Client) -> None:
    response = mock_api.post("Referral", json=referral_body(attachments=[attachment(data="**")]))
    assert response.status_code == 422
    assert _expressions(response) == ["Referral.attachments[0].data"]


def test_attachment_without_a_title_gets_422(mock_api: httpx.Client) -> None:
    item = attachment()
    del item["title"]
    response = mock_api.post("Referral", json=referral_body(attachments=[item]))
    assert response.status_code == 422
    assert _expressions(response) == ["Referral.attachments[0].title"]


def test_attachment_over_the_size_limit_gets_422() -> None:
    with serve(max_attachment_bytes=1000) as dep, api_client(dep) as client:
        big = attachment(data=base64.b64encode(b"x" * 1500).decode())
        response = client.post("Referral", json=referral_body(attachments=[big]))
    assert response.status_code == 422
    assert "Referral.attachments[0].data" in _expressions(response)


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"allocationType": "Everything"}, "Referral.allocationType"),
        ({"active": "yes"}, "Referral.active"),
        ({"created": "yesterday"}, "Referral.created"),
        ({"period": {"start": "2026-02-30"}}, "Referral.period.start"),
        ({"limitQuantity": {"quantity": 2.5}}, "Referral.limitQuantity.quantity"),
        (
            {"limitMoney": {"amount": {"value": 10, "currency": "XYZ"}}},
            "Referral.limitMoney.amount.currency",
        ),
        (
            {"performer": {"reference": "/main/Practitioner/EP-7001", "type": "Practitioner"}},
            "Referral.performer.reference",
        ),
        (
            {"subject": {"reference": "/main/Patient/999999", "type": "Patient"}},
            "Referral.subject.reference",
        ),
        (
            {"subject": {"reference": "/main/Patient/100001", "type": "Practitioner"}},
            "Referral.subject.type",
        ),
        ({"expiryType": None}, "Referral.expiryType"),
    ],
)
def test_rule_violations_get_422_naming_the_field(
    mock_api: httpx.Client, change: dict[str, Any], path: str
) -> None:
    response = mock_api.post("Referral", json=referral_body(**change))
    assert response.status_code == 422
    assert path in _expressions(response)


@pytest.mark.parametrize(
    ("telecom", "address", "path"),
    [
        ({"system": "phone", "value": "+61 2 9876 5432"}, {}, "Organization.telecom[0].value"),
        ({"system": "email", "value": "a@b.example"}, {"country": "Australia"}, COUNTRY),
        ({"system": "email", "value": "a@b.example"}, {"country": "XX"}, COUNTRY),
    ],
)  # fmt: skip
def test_organization_format_rules_get_422(
    mock_api: httpx.Client, telecom: dict[str, str], address: dict[str, str], path: str
) -> None:
    body = {"resourceType": "Organization", "name": "X", "telecom": [telecom], "address": [address]}
    response = mock_api.post("Organization", json=body)
    assert response.status_code == 422
    assert _expressions(response) == [path]


def test_failed_create_stores_nothing(fresh_api: httpx.Client) -> None:
    before = fresh_api.get("Referral").json()["total"]
    bad = referral_body(attachments=[attachment(contentType="text/html")])
    assert fresh_api.post("Referral", json=bad).status_code == 422
    assert fresh_api.get("Referral").json()["total"] == before


def test_create_on_a_resource_without_create_gets_405(mock_api: httpx.Client) -> None:
    assert mock_api.post("InvoiceLine", json={}).status_code == 405


def test_patch_referral_merges_and_moves_last_updated(fresh_api: httpx.Client) -> None:
    before = fresh_api.get("Referral/300001").json()
    response = fresh_api.patch(
        "Referral/300001",
        json={"comment": "patched", "limitQuantity": {"quantityOffset": 3}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status_code == 200
    after = response.json()
    assert after["comment"] == "patched"
    assert after["limitQuantity"]["quantityOffset"] == 3
    assert after["limitQuantity"]["quantity"] == before["limitQuantity"]["quantity"]
    assert after["meta"]["lastUpdated"] > before["meta"]["lastUpdated"]
    assert fresh_api.get("Referral/300001").json() == after


def test_patch_with_null_removes_the_field(fresh_api: httpx.Client) -> None:
    response = fresh_api.patch(
        "Referral/300001",
        content=b'{"priority": null}',
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status_code == 200 and "priority" not in response.json()


@pytest.mark.parametrize("resource", ["Appointment/10000001", "Coverage/200001"])
def test_patch_accepts_plain_application_json(fresh_api: httpx.Client, resource: str) -> None:
    response = fresh_api.patch(
        resource, json={"extension": None} if "Cov" in resource else {"description": "moved room"}
    )
    assert response.status_code == 200


def test_patch_with_another_content_type_gets_415(mock_api: httpx.Client) -> None:
    response = mock_api.patch(
        "Referral/300001", content=b"{}", headers={"Content-Type": "text/plain"}
    )
    assert response.status_code == 415


@pytest.mark.parametrize("path", ["Practitioner/PR-6001", "Organization/CL-2001"])
def test_patch_on_practitioner_or_organization_gets_405_with_empty_body(
    mock_api: httpx.Client, path: str
) -> None:
    response = mock_api.patch(path, json={"active": False})
    assert response.status_code == 405
    assert response.content == b""


def test_invalid_patch_gets_422_and_changes_nothing(mock_api: httpx.Client) -> None:
    before = mock_api.get("Appointment/10000002").json()
    response = mock_api.patch("Appointment/10000002", json={"end": None})
    assert response.status_code == 422
    assert "Appointment.end" in _expressions(response)
    assert mock_api.get("Appointment/10000002").json() == before


def test_patch_on_an_unknown_id_gets_404(mock_api: httpx.Client) -> None:
    assert mock_api.patch("Referral/1", json={"comment": "x"}).status_code == 404


def _raw_post(dep: Deployment, headers: str) -> bytes:
    host, port = dep.base_url.split("//")[1].split("/")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(headers.encode())
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
        return reply


def test_body_over_the_limit_is_refused_from_content_length_before_reading() -> None:
    with serve(max_body_bytes=1024) as dep:
        token = token_for(dep)
        reply = _raw_post(
            dep,
            "POST /main/Referral HTTP/1.1\r\nHost: x\r\n"
            f"User-Agent: {USER_AGENT}\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nContent-Length: 300000000\r\n\r\n",
        )
    assert reply.startswith(b"HTTP/1.1 413")
    assert b"OperationOutcome" in reply


def test_chunked_body_over_the_limit_is_cut_off_with_413() -> None:
    sent = []

    def chunks() -> Iterator[bytes]:
        for _ in range(64):
            sent.append(1)
            yield b" " * 16384

    with serve(max_body_bytes=64 * 1024) as dep, api_client(dep) as client:
        response = client.post(
            "Referral", content=chunks(), headers={"Content-Type": "application/json"}
        )
    assert response.status_code == 413
    assert response.json()["resourceType"] == "OperationOutcome"


def test_concurrent_creates_and_patches_lose_nothing(fresh_mock: Deployment) -> None:
    errors: list[int] = []

    def worker(n: int) -> None:
        with api_client(fresh_mock) as client:
            for k in range(5):
                r = client.post("Referral", json=referral_body(comment=f"{n}-{k}"))
                if r.status_code != 201:
                    errors.append(r.status_code)
                r = client.patch(f"Referral/{300001 + n}", json={"comment": f"w{n}-{k}"})
                if r.status_code != 200:
                    errors.append(r.status_code)

    with api_client(fresh_mock) as client:
        before = client.get("Referral").json()["total"]
        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        listed = client.get("Referral", params={"_count": 100, "_sort": "-_lastUpdated"}).json()
        assert listed["total"] == before + 40
        comments = {e["resource"].get("comment") for e in listed["entry"]}
        assert {f"{n}-{k}" for n in range(8) for k in range(5)} <= comments
        for n in range(8):
            assert client.get(f"Referral/{300001 + n}").json()["comment"] == f"w{n}-4"
