"""client.frame / client.frames over real loopback HTTP, against live-shaped pages.

A tiny Starlette app on 127.0.0.1 plays a deployment in the live service's forms:
it serves the corpus of ``tests/fixtures/live_shapes`` (written from the facts file,
not by pmtk's mock) as paged Bundles behind the OAuth token endpoint.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.loopback import paged_api, serve
from toolkit import catalogue
from toolkit.client import Client
from toolkit.errors import DataValidationError
from toolkit.schemas import PmtkDataWarning

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "live_shapes"
CLIENT_ID, SECRET, TOKEN = "live-client", "live-secret-never-shown", "live-token-never-shown"


@pytest.fixture(scope="module")
def live_like() -> Iterator[str]:
    """Each corpus page served one entry per page, so that the client walks ``next`` links."""

    def entries_of(kind: str) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = json.loads((CORPUS / f"{kind}.json").read_bytes())["entry"]
        return entries

    app = paged_api(entries_of, client_id=CLIENT_ID, secret=SECRET, token=TOKEN)
    with serve(app) as port:
        yield f"http://127.0.0.1:{port}/main"


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
