"""Write bodies are checked against the catalogue; a bad body is never sent."""

from __future__ import annotations

import base64

import httpx
import pydantic
import pytest

from toolkit import catalogue, writes
from toolkit.errors import RequestValidationError

GOOD_REFERRAL = {
    "coverage": {"reference": "/main/Coverage/77", "type": "Coverage"},
    "subject": {"reference": "/main/Patient/12", "type": "Patient"},
    "requester": {"reference": "/main/PractitionerRole/EP-5", "type": "PractitionerRole"},
    "created": "2026-11-21T09:00:00Z",
    "allocationType": "All fee types",
    "period": {"start": "2026-11-21", "end": "2027-11-20"},
    "attachments": [
        {
            "contentType": "application/pdf",
            "data": base64.b64encode(b"%PDF-1.7 letter").decode(),
            "title": "letter.pdf",
        }
    ],
}


def paths(exc: pytest.ExceptionInfo[RequestValidationError]) -> set[str]:
    return {p for p, _ in exc.value.problems}


def test_valid_referral_passes_and_gets_resource_type():
    body = writes.check_create("Referral", GOOD_REFERRAL)
    assert body["resourceType"] == "Referral"


def test_every_problem_is_listed_with_its_path():
    bad = {
        **GOOD_REFERRAL,
        "allocationType": "Everything",
        "performer": {"reference": "/main/Practitioner/EP-1", "type": "Practitioner"},
        "created": "2026-13-40T00:00:00Z",
        "limitMoney": {"amount": {"value": "ten", "currency": "XYZ"}},
        "attachments": [{"contentType": "text/plain", "data": "not base64!", "title": "a"}],
        "activ": True,
    }
    del bad["subject"]
    with pytest.raises(RequestValidationError) as info:
        writes.check_create("Referral", bad)
    assert paths(info) >= {
        "allocationType",
        "performer.reference",
        "created",
        "limitMoney.amount.value",
        "limitMoney.amount.currency",
        "attachments[0].contentType",
        "attachments[0].data",
        "activ",
        "subject",
    }
    assert "nothing was sent" in str(info.value)


def test_attachment_over_size_limit_is_rejected(monkeypatch):
    monkeypatch.setattr(catalogue, "MAX_ATTACHMENT_BYTES", 10)
    body = {**GOOD_REFERRAL}
    body["attachments"] = [
        {"contentType": "image/png", "data": base64.b64encode(b"x" * 11).decode(), "title": "p"}
    ]
    with pytest.raises(RequestValidationError, match="limit"):
        writes.check_create("Referral", body)


def test_attachment_missing_required_parts_is_rejected():
    body = {**GOOD_REFERRAL, "attachments": [{"contentType": "image/png"}]}
    with pytest.raises(RequestValidationError) as info:
        writes.check_create("Referral", body)
    assert paths(info) == {"attachments[0].data", "attachments[0].title"}


def test_organization_phone_and_country_formats_are_checked():
    body = {
        "name": "Smith Physio",
        "telecom": [{"system": "phone", "value": "+61 2 9876 5432", "use": "work"}],
        "address": [{"country": "Australia", "use": "work"}],
    }
    with pytest.raises(RequestValidationError) as info:
        writes.check_create("Organization", body)
    assert paths(info) == {"telecom[0].value", "address[0].country"}
    body["telecom"] = [{"system": "phone", "value": "+61298765432"}]
    body["address"] = [{"country": "AU"}]
    assert writes.check_create("Organization", body)["name"] == "Smith Physio"


def test_create_id_must_carry_a_create_prefix():
    with pytest.raises(RequestValidationError) as info:
        writes.check_create("Organization", {"name": "X", "id": "CL-1"})
    assert paths(info) == {"id"}
    writes.check_create("Organization", {"name": "X", "id": "SP-1"})


def test_coverage_requires_beneficiary_subscriber_payor():
    with pytest.raises(RequestValidationError) as info:
        writes.check_create("Coverage", {"status": "active"})
    assert paths(info) == {"beneficiary", "subscriber", "payor"}


def test_extension_fields_are_checked_in_their_extension():
    body = {
        "beneficiary": {"reference": "/main/Patient/1", "type": "Patient"},
        "subscriber": {"reference": "/main/Patient/1", "type": "Patient"},
        "payor": {"reference": "/main/Organization/FD-1", "type": "Organization"},
        "extension": [
            {"url": "coverage-payer", "valueCoding": {"code": "99", "display": "?"}},
            {"url": "coverage-patient-anonymous", "valueBoolean": "yes"},
        ],
        "coverage-organisation": {"reference": "/main/Organization/OG-1", "type": "Organization"},
    }
    with pytest.raises(RequestValidationError) as info:
        writes.check_create("Coverage", body)
    assert paths(info) == {
        "extension[0].valueCoding.code",
        "extension[1].valueBoolean",
        "coverage-organisation",
    }


def test_pydantic_models_are_accepted_as_bodies():
    class Org(pydantic.BaseModel):
        name: str
        active: bool | None = None

    assert writes.check_create("Organization", Org(name="Smith Physio")) == {
        "resourceType": "Organization",
        "name": "Smith Physio",
    }


def test_patch_allows_partial_and_null_but_checks_values():
    assert writes.check_patch("Referral", "12", {"active": False, "comment": None})
    with pytest.raises(RequestValidationError) as info:
        writes.check_patch("Referral", "12", {"active": "no"})
    assert paths(info) == {"active"}


@pytest.mark.parametrize("resource_type", ["Practitioner", "Organization"])
def test_patch_on_types_answering_405_is_refused_client_side(resource_type):
    with pytest.raises(RequestValidationError, match="405"):
        writes.check_patch(resource_type, "PR-1", {"active": False})


def test_book_parameters_are_built_from_keywords():
    body = writes.book_parameters(
        start="2026-11-23T09:00:00+10:00",
        end="2026-11-23T09:45:00+10:00",
        practitioner_role="PR-1234",
        patient="123",
        healthcare_service="9",
    )
    writes.check_book(body)
    appt = body["parameter"][0]["resource"]
    assert appt["minutesDuration"] == 45
    assert appt["participant"][0]["actor"]["reference"] == "/main/PractitionerRole/PR-1234"
    names = [p["name"] for p in body["parameter"]]
    assert names == [
        "appt-resource",
        "patient-id",
        "healthcare-service-id",
        "location-type",
        "status",
    ]


def test_book_rejects_end_before_start_and_bad_references():
    body = writes.book_parameters(
        start="2026-11-23T10:00:00Z",
        end="2026-11-23T09:00:00Z",
        practitioner_role="XX-1",
        patient="1",
    )
    with pytest.raises(RequestValidationError) as info:
        writes.check_book(body)
    assert "parameter[0].resource.end" in paths(info)
    assert "parameter[0].resource.participant[0].actor.reference" in paths(info)


def test_client_sends_nothing_for_an_invalid_body(fake_api):
    with fake_api.client() as client:
        with pytest.raises(RequestValidationError):
            client.create("Coverage", {"status": "unknown"})
        with pytest.raises(RequestValidationError):
            client.patch("Practitioner", "PR-1", {"active": False})
        with pytest.raises(RequestValidationError):
            client.book(start="2026-11-23T10:00:00Z", end="2026-11-23T11:00:00Z")
    assert fake_api.requests == []
    assert fake_api.token_requests == 0


def test_patch_is_sent_as_merge_patch(fake_api):
    seen: list[httpx.Request] = []

    def patch(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"resourceType": "Referral", "id": "12", "active": False})

    fake_api.routes[("PATCH", "/main/Referral/12")] = patch
    with fake_api.client() as client:
        assert client.patch("Referral", "12", {"active": False})["active"] is False
    assert seen[0].headers["Content-Type"] == "application/merge-patch+json"


def test_coverage_create_uses_the_spec_path_with_trailing_slash(fake_api):
    fake_api.routes[("POST", "/main/Coverage/")] = lambda r: httpx.Response(
        201, json={"resourceType": "Coverage", "id": "C1"}
    )
    body = {
        "beneficiary": {"reference": "/main/Patient/1", "type": "Patient"},
        "subscriber": {"reference": "/main/Patient/1", "type": "Patient"},
        "payor": {"reference": "/main/Patient/1", "type": "Patient"},
    }
    with fake_api.client() as client:
        assert client.create("Coverage", body)["id"] == "C1"


def test_book_keywords_are_the_booking_fields_once():
    # Client.book and book_write take their keywords from one TypedDict, so the two can
    # no longer drift: each field of Booking reaches the body built by book_parameters.
    import inspect
    import typing

    from toolkit import Client

    fields = set(writes.Booking.__optional_keys__)
    assert fields == {
        "start",
        "end",
        "practitioner_role",
        "patient",
        "healthcare_service",
        "location_type",
        "status",
        "description",
    }
    assert fields == set(inspect.signature(writes.book_parameters).parameters)
    hints = typing.get_type_hints(Client.book, include_extras=True)
    assert hints["booking"] == typing.Unpack[writes.Booking]
    write = writes.book_write(
        None,
        start="2026-11-23T09:00:00+10:00",
        end="2026-11-23T09:30:00+10:00",
        practitioner_role="PR-1234",
        patient="123",
        healthcare_service="9",
        location_type="home",
        status="pending",
        description="first visit",
    )
    parameter = {p["name"]: p for p in write.body["parameter"]}
    assert parameter["location-type"]["valueCode"] == "home"
    assert parameter["status"]["valueCode"] == "pending"
    assert parameter["appt-resource"]["resource"]["description"] == "first visit"
    assert parameter["healthcare-service-id"]["valueReference"]["reference"].endswith("/9")


def test_book_refuses_an_unknown_keyword_and_names_the_missing_ones(fake_api):
    with pytest.raises(TypeError, match="'practitioner'"):
        writes.book_write(None, practitioner="PR-1")  # type: ignore[call-arg]
    with pytest.raises(RequestValidationError) as info:
        writes.book_write(None, start="2026-11-23T10:00:00Z", patient="1")
    assert paths(info) == {"end", "practitioner_role"}
    with fake_api.client() as client, pytest.raises(TypeError, match="'practitioner'"):
        client.book(practitioner="PR-1")  # type: ignore[call-arg]
    assert fake_api.requests == []
