"""A user's ViewDefinition, written from the facts file's shapes, against the mock over HTTP.

The expected rows come from the mock's raw JSON, walked by hand here with
``httpx`` (``next`` links followed, nothing of pmtk's reader involved); the rows
from pmtk come through ``client.frame(..., view=...)`` and ``toolkit.run_view``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import toolkit
from tests.conftest import api_client
from toolkit.client import Client
from toolkit.errors import ViewDefinitionError
from toolkit.mock import Deployment

HALAXY = "https://terminology.halaxy.com/StructureDefinition/"

PATIENT_VIEW: dict[str, Any] = {
    "resourceType": "ViewDefinition",
    "resource": "Patient",
    "constant": [{"name": "status_url", "valueUri": HALAXY + "patient-status"}],
    "select": [
        {
            "column": [
                {"name": "id", "path": "getResourceKey()", "type": "id"},
                {
                    "name": "status",
                    "path": "extension(%status_url).value.ofType(string).first()",
                    "type": "code",
                },
                {
                    "name": "official_family",
                    "path": "name.where(use = 'official').family.first()",
                    "type": "string",
                },
                {"name": "given", "path": "name.first().given.join(' ')", "type": "string"},
            ]
        }
    ],
}

PARTICIPANT_VIEW: dict[str, Any] = {
    "resourceType": "ViewDefinition",
    "resource": "Appointment",
    "select": [
        {"column": [{"name": "appointment_id", "path": "id", "type": "id"}]},
        {
            "forEach": "participant",
            "column": [
                {"name": "index", "path": "%rowIndex", "type": "integer"},
                {"name": "actor_type", "path": "actor.type", "type": "code"},
                {"name": "actor_id", "path": "actor.getReferenceKey()", "type": "id"},
                {
                    "name": "status",
                    "path": (
                        "modifierExtension.where(url = '"
                        + HALAXY
                        + "appointment-participant-status').value.ofType(Coding).code.first()"
                    ),
                    "type": "code",
                },
                {
                    "name": "attender",
                    "path": "type.coding.where(code = 'ATND').exists()",
                    "type": "boolean",
                },
            ],
        },
    ],
    "where": [{"path": "participant.exists()"}],
}


def _raw_records(dep: Deployment, resource_type: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    with api_client(dep) as http:
        url: str | None = f"{resource_type}?_count=100"
        while url:
            bundle = http.get(url).raise_for_status().json()
            records.extend(e["resource"] for e in bundle.get("entry", []))
            url = next(
                (link["url"] for link in bundle.get("link", []) if link["relation"] == "next"), None
            )
    return records


def _status(ext_list: list[dict[str, Any]] | None, name: str) -> Any:
    for ext in ext_list or []:
        if ext["url"] == HALAXY + name:
            value = ext.get("valueCoding", {}).get("code") if "valueCoding" in ext else None
            return value if value is not None else ext.get("valueString")
    return None


@pytest.fixture
def client(mock_deployment: Deployment) -> Iterator[Client]:
    mock_deployment.reset_rate_limit()
    with Client(
        mock_deployment.base_url,
        mock_deployment.client_id,
        mock_deployment.client_secret,
        progress=False,
    ) as c:
        yield c


def test_an_extension_by_its_full_url_gives_the_expected_rows(
    client: Client, mock_deployment: Deployment
) -> None:
    frame = client.frame("Patient", view=PATIENT_VIEW)
    expected = []
    for r in _raw_records(mock_deployment, "Patient"):
        names = r.get("name") or []
        official = [n.get("family") for n in names if n.get("use") == "official"]
        expected.append(
            {
                "id": r["id"],
                "status": _status(r.get("extension"), "patient-status"),
                "official_family": official[0] if official else None,
                "given": " ".join(names[0].get("given", [])) if names else "",
            }
        )
    assert frame.columns == ["id", "status", "official_family", "given"]
    assert frame.to_dicts() == expected
    # the shapes the test is about are really there
    assert frame.get_column("status").null_count() < frame.height
    assert set(frame.get_column("status").drop_nulls()) <= {
        "current",
        "contact",
        "archived",
        "blocked",
        "deceased",
    }


def test_participants_with_their_status_via_for_each(
    client: Client, mock_deployment: Deployment
) -> None:
    frame = client.frame("Appointment", view=PARTICIPANT_VIEW)
    expected = []
    for r in _raw_records(mock_deployment, "Appointment"):
        for i, p in enumerate(r.get("participant") or []):
            actor = p.get("actor") or {}
            codes = [c.get("code") for t in p.get("type", []) for c in t.get("coding", [])]
            expected.append(
                {
                    "appointment_id": r["id"],
                    "index": i,
                    "actor_type": actor.get("type"),
                    "actor_id": actor["reference"].rsplit("/", 1)[-1]
                    if "reference" in actor
                    else None,
                    "status": _status(p.get("modifierExtension"), "appointment-participant-status"),
                    "attender": "ATND" in codes,
                }
            )
    assert frame.to_dicts() == expected
    assert frame.get_column("status").null_count() == 0
    assert {"Patient", "PractitionerRole"} <= set(frame.get_column("actor_type"))


def test_run_view_on_the_client_pages_gives_the_same_frame(client: Client) -> None:
    pages = list(client.pages("Appointment"))
    assert toolkit.run_view(PARTICIPANT_VIEW, pages).equals(
        client.frame("Appointment", view=PARTICIPANT_VIEW)
    )


def test_a_wrong_view_fails_before_any_request() -> None:
    # a client aimed at a port nobody listens on: any request would be a TransportError
    with Client("http://127.0.0.1:9/main", "id", "secret", progress=False) as c:
        bad = {**PATIENT_VIEW, "select": [{"column": [{"name": "x", "path": "name.fist()"}]}]}
        with pytest.raises(ViewDefinitionError) as err:
            c.frame("Patient", view=bad)
        assert err.value.path == "select[0].column[0].path"
        with pytest.raises(ViewDefinitionError, match="of Patient, asked for Appointment"):
            c.frame("Appointment", view=PATIENT_VIEW)


def test_the_raw_walk_sees_what_the_mock_serves(mock_deployment: Deployment) -> None:
    # guards the oracle above: it must not be empty or stop at the first page
    records = _raw_records(mock_deployment, "Appointment")
    assert len(records) > 100
    assert len({r["id"] for r in records}) == len(records)
