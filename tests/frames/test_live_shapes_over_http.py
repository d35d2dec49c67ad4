"""client.frame / client.frames over real loopback HTTP, against live-shaped pages.

A tiny Starlette app on 127.0.0.1 plays a deployment in the live service's forms:
it serves the corpus of ``tests/fixtures/live_shapes`` (written from the facts file,
not by pmtk's mock) as paged Bundles behind the OAuth token endpoint.
"""

from __future__ import annotations

import json
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from toolkit import catalogue
from toolkit.client import Client
from toolkit.errors import DataValidationError
from toolkit.schemas import PmtkDataWarning

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "live_shapes"
CLIENT_ID, SECRET, TOKEN = "live-client", "live-secret-never-shown", "live-token-never-shown"


def _app(base: list[str]) -> Starlette:
    """Each corpus page served one entry per page, so that the client walks ``next`` links."""

    async def token(request: Request) -> Response:
        body = await request.json()
        if body.get("client_secret") != SECRET or body.get("client_id") != CLIENT_ID:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        return JSONResponse({"token_type": "Bearer", "expires_in": 3600, "access_token": TOKEN})

    async def listing(request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            outcome = {"resourceType": "OperationOutcome", "issue": [{"severity": "error"}]}
            return JSONResponse(outcome, status_code=401)
        kind = request.path_params["kind"]
        bundle = json.loads((CORPUS / f"{kind}.json").read_bytes())
        entries = bundle["entry"]
        number = int(request.query_params.get("page", "1"))
        links = [{"relation": "self", "url": f"{base[0]}/{kind}?page={number}"}]
        if number < len(entries):
            links.append({"relation": "next", "url": f"{base[0]}/{kind}?page={number + 1}"})
        page = {
            "resourceType": "Bundle",
            "type": "searchset",
            "total": len(entries),
            "link": links,
            "entry": entries[number - 1 : number],
        }
        return JSONResponse(page, media_type="application/fhir+json")

    return Starlette(
        routes=[
            Route("/main/oauth/token", token, methods=["POST"]),
            Route("/main/{kind}", listing, methods=["GET"]),
        ]
    )


@pytest.fixture(scope="module")
def live_like() -> Iterator[str]:
    base: list[str] = []
    server = uvicorn.Server(
        uvicorn.Config(_app(base), host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started
    port = server.servers[0].sockets[0].getsockname()[1]
    base.append(f"http://127.0.0.1:{port}/main")
    try:
        yield base[0]
    finally:
        server.should_exit = True
        thread.join()


@pytest.fixture
def client(live_like: str) -> Iterator[Client]:
    with Client(
        live_like, CLIENT_ID, SECRET, user_agent="pmtk tests (tests@example.org)", progress=False
    ) as c:
        yield c


def _records(kind: str) -> list[dict[str, Any]]:
    return [e["resource"] for e in json.loads((CORPUS / f"{kind}.json").read_bytes())["entry"]]


@pytest.mark.parametrize("resource_type", catalogue.LISTED_RESOURCES)
def test_frames_in_warn_mode_keep_every_record_and_report_the_odd_ones(
    client: Client, resource_type: str
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tables = client.frames(resource_type, errors="warn")
    ids = [r["id"] for r in _records(resource_type)]
    assert tables[resource_type].get_column("id").to_list() == ids
    odd = {i for i in ids if i.endswith("odd")}
    reported = {
        rid
        for w in caught
        if isinstance(w.message, PmtkDataWarning)
        for rid in w.message.failure_cases.get_column("id").to_list()
    }
    assert reported == odd


def test_frame_raises_with_the_odd_records_id_and_column(client: Client) -> None:
    with pytest.raises(DataValidationError) as info:
        client.frame("Coverage")
    cases = info.value.failure_cases
    assert sorted(cases.select("id", "column", "failure_case").rows()) == [
        ("89odd", "dependent", "2"),
        ("89odd", "subscriber_number", "29501234"),
    ]
    assert SECRET not in str(info.value) and TOKEN not in str(info.value)


def test_live_form_values_arrive_through_the_client(client: Client) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PmtkDataWarning)
        parts = client.frame("Appointment", table="appointment_participant", errors="warn")
        coverage = client.frame("Coverage", errors="warn")
        practitioners = client.frame("Practitioner", errors="warn")
        patients = client.frame("Patient", errors="warn")
    assert parts.get_column("status").to_list() == ["booked", "attended", "cancelled", "arrived"]
    assert parts.get_column("invoice_id").to_list() == [None, "77001", None, None]
    assert coverage.get_column("payer_code").to_list() == ["30", "29"]
    assert coverage.get_column("organisation_id").to_list() == ["OG-5", None]
    assert practitioners.get_column("name_family").to_list() == ["Nguyen", "Patel", "Wong"]
    assert patients.get_column("status").to_list() == ["current", "archived"]
