"""``POST /main/Patient`` and Patient ``active``: a production client's create-when-not-found.

The facts (client-observed): a booking site looks a patient up by email
(``GET /main/Patient?email=...&_count=1``), creates one with ``POST /main/Patient``
when none is found, and searches ``general-practitioner=Practitioner/<id>&active=true``.
Everything here goes over real loopback HTTP to ``toolkit.mock.serve``.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from tests.conftest import api_client, toolkit_client
from tests.listen.conftest import SECRET_HEADER, free_port
from tests.listen.test_mock_sender import Recorder
from toolkit import catalogue
from toolkit.errors import RequestValidationError
from toolkit.mock import Deployment, serve

EMAIL = "new.patient+web@example.com"


def patient_body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "resourceType": "Patient",
        "name": [{"use": "official", "given": ["Aroha"], "family": "Ngata-Whitlock"}],
        "telecom": [{"system": "email", "value": EMAIL}],
        "gender": "female",
        "birthDate": "1991-04-17",
        "generalPractitioner": [
            {"reference": "/main/Practitioner/PR-6001", "type": "Practitioner"}
        ],
    }
    body.update(extra)
    return body


def _ids(bundle: dict[str, Any]) -> list[str]:
    return [e["resource"]["id"] for e in bundle.get("entry", [])]


def test_the_catalogue_lists_post_patient_from_the_facts() -> None:
    endpoint = next(
        e for e in catalogue.ENDPOINTS if e.resource == "Patient" and e.kind == "create"
    )
    assert (endpoint.method, endpoint.path, endpoint.success) == ("POST", "/main/Patient", 201)
    assert endpoint.source == "facts"
    assert catalogue.CREATE_PATHS["Patient"] == "/main/Patient"


def test_create_when_not_found_then_found_by_search(fresh_api: httpx.Client) -> None:
    lookup = {"email": EMAIL, "_count": "1"}
    assert fresh_api.get("Patient", params=lookup).json()["total"] == 0
    before = fresh_api.get("Patient", params={"_summary": "count"}).json()["total"]
    response = fresh_api.post("Patient", json=patient_body(active=False))
    assert response.status_code == 201, response.text
    created = response.json()
    rid = created["id"]
    assert rid.isdigit() and int(rid) >= 100001 + before  # the mock's Patient id shape
    assert response.headers["location"].startswith("http://127.0.0.1:")
    assert response.headers["location"].endswith(f"/main/Patient/{rid}")
    assert created["active"] is True  # read-only (facts): set by the server, not the body
    assert fresh_api.get(f"Patient/{rid}").json()["name"][0]["family"] == "Ngata-Whitlock"
    assert _ids(fresh_api.get("Patient", params=lookup).json()) == [rid]
    by_gp = {"general-practitioner": "Practitioner/PR-6001", "active": "true"}
    assert rid in _ids(fresh_api.get("Patient", params={**by_gp, "_count": "100"}).json())
    assert fresh_api.get("Patient", params={"_summary": "count"}).json()["total"] == before + 1
    second = fresh_api.post("Patient", json=patient_body()).json()["id"]
    assert int(second) == int(rid) + 1


def test_a_bad_patient_body_is_a_4xx_outcome_and_stores_nothing(fresh_api: httpx.Client) -> None:
    before = fresh_api.get("Patient", params={"_summary": "count"}).json()["total"]
    bad_bodies = [
        patient_body(gender="sometimes"),
        patient_body(birthDate="1991-02-30"),
        patient_body(generalPractitioner=[{"reference": "/main/Practitioner/XX-1"}]),
        patient_body(name=None),
        {k: v for k, v in patient_body().items() if k != "name"},  # create needs a name
        patient_body(resourceType="Organization"),
        patient_body(extension=[{"url": "patient-status", "valueCode": "nope"}]),
        [patient_body()],
    ]
    for body in bad_bodies:
        response = fresh_api.post("Patient", json=body)
        assert 400 <= response.status_code < 500, (body, response.text)
        assert response.json()["resourceType"] == "OperationOutcome"
    malformed = fresh_api.post(
        "Patient", content=b'{"name": ', headers={"Content-Type": "application/json"}
    )
    assert malformed.status_code == 400
    assert fresh_api.get("Patient", params={"_summary": "count"}).json()["total"] == before


def test_patients_carry_active_and_search_by_it(mock_api: httpx.Client) -> None:
    everyone = mock_api.get("Patient", params={"_summary": "count"}).json()["total"]
    page = mock_api.get("Patient", params={"_count": "100"}).json()
    assert all(isinstance(e["resource"].get("active"), bool) for e in page["entry"])
    active = mock_api.get("Patient", params={"active": "true", "_summary": "count"}).json()
    inactive = mock_api.get("Patient", params={"active": "false", "_summary": "count"}).json()
    assert 0 < inactive["total"] < active["total"]
    assert active["total"] + inactive["total"] == everyone
    either = mock_api.get("Patient", params={"active": "true,false", "_summary": "count"})
    assert either.json()["total"] == everyone
    answer = mock_api.get("Patient", params={"active": "true"})
    assert "active=true" in answer.json()["link"][0]["url"]  # applied, so kept in self


def test_a_created_patient_is_announced_as_a_patient_create() -> None:
    """The facts: webhooks exist for Patient create and update; the mock announces its own."""
    port = free_port()
    name, value = SECRET_HEADER
    hook = f"http://127.0.0.1:{port}/hook"
    with (
        serve(scale="small", webhook=hook, webhook_header=f"{name}: {value}") as dep,
        api_client(dep) as api,
        Recorder(port) as recorder,
    ):
        rid = api.post("Patient", json=patient_body()).json()["id"]
        assert dep.webhooks_sent(10)
    (bundle,) = recorder.accepted()
    status = bundle["entry"][0]["resource"]
    assert status["topic"].endswith("patient-create")
    assert status["notificationEvent"][0]["focus"]["reference"].endswith(f"/Patient/{rid}")


def test_pmtks_client_creates_a_patient_and_checks_the_body_first(fresh_mock: Deployment) -> None:
    with toolkit_client(fresh_mock) as client:
        created = client.create("Patient", patient_body())
        assert client.read("Patient", created["id"])["birthDate"] == "1991-04-17"
        with pytest.raises(RequestValidationError, match="gender"):
            client.create("Patient", patient_body(gender="sometimes"))


def test_concurrent_patient_creates_each_get_their_own_id(fresh_mock: Deployment) -> None:
    """Second writers: four clients creating at once lose nothing and share no id."""
    ids: list[str] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        with api_client(fresh_mock) as client:
            for k in range(4):
                family = f"Concurrent{n}x{k}"
                answer = client.post("Patient", json=patient_body(name=[{"family": family}]))
                with lock:
                    ids.append(answer.json().get("id", f"failed {answer.status_code}"))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 16 and all(i.isdigit() for i in ids), ids
    with api_client(fresh_mock) as client:
        found = client.get("Patient", params={"family": "Concurrent", "_count": "100"}).json()
    assert sorted(_ids(found)) == sorted(ids)
