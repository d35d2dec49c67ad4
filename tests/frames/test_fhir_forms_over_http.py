"""FHIR R4's own forms through ``client.frame``/``client.frames`` over real loopback HTTP,
and into a store (issue 24).

A tiny Starlette app on 127.0.0.1 serves the hand-written resources of
:mod:`tests.frames.fhir_r4_forms` one per page behind the OAuth token endpoint,
so the client walks ``next`` links and every page is read on its own.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import tests.frames.fhir_r4_forms as forms
from tests.loopback import paged_api, serve
from toolkit.client import Client
from toolkit.schemas import PmtkDataWarning

CLIENT_ID, SECRET, TOKEN = "r4-client", "r4-secret-never-shown", "r4-token-never-shown"

RECORDS: dict[str, list[dict[str, Any]]] = {
    "Patient": [forms.patient()],
    "Coverage": [forms.coverage()],
    "Appointment": forms.appointments(),
    "Invoice": forms.invoices(),
}


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    app = paged_api(
        lambda kind: forms.bundle(*RECORDS[kind])["entry"],
        client_id=CLIENT_ID,
        secret=SECRET,
        token=TOKEN,
    )
    with serve(app) as port:
        yield f"http://127.0.0.1:{port}/main"


@pytest.fixture
def client(server_url: str) -> Iterator[Client]:
    with Client(
        server_url, CLIENT_ID, SECRET, user_agent="pmtk tests (tests@example.org)", progress=False
    ) as c:
        yield c


def test_frames_bring_every_extension_back_by_url(client: Client) -> None:
    tables = client.frames("Patient", errors="raise")
    ext = tables["patient_extension"]
    assert ext.filter(pl.col("url").str.ends_with("/indigenous-status")).get_column(
        "value"
    ).to_list() == ["4"]
    kinds = {kind for _, _, kind, _ in forms.VALUES}
    for base in ("resource", "name", "nested"):
        found = ext.filter(pl.col("url").str.starts_with(f"http://example.org/fhir/{base}/"))
        assert set(found.get_column("value_type").to_list()) == kinds
        assert found.get_column("value_json").null_count() == 0
    assert tables["Patient"].get_column("status").to_list() == ["current"]
    gp = tables["patient_general_practitioner"]
    assert gp.get_column("general_practitioner_type").to_list() == ["Organization", "Practitioner"]


def test_frame_of_the_extension_table_alone(client: Client) -> None:
    ext = client.frame("Patient", table="patient_extension")
    assert forms.MAIDEN in ext.get_column("url").to_list()


def test_a_walk_with_one_partial_date_returns_every_row_in_raise_mode(client: Client) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = client.frame("Appointment", errors="raise")
    assert df.get_column("id").to_list() == ["1", "2", "3"]
    assert df.get_column("created_precision").to_list() == ["time", "day", "time"]
    observed = [w.message for w in caught if isinstance(w.message, PmtkDataWarning)]
    assert len(observed) == 1 and "observation" in str(observed[0])
    with pytest.warns(PmtkDataWarning, match="date_precision"):
        invoices = client.frame("Invoice", errors="raise")
    assert [str(d) for d in invoices.get_column("date").to_list()] == [
        "2025-09-28",
        "2025-09-28",
        "2025-09-01",
    ]


def test_coverage_arrays_and_funder_type_through_the_client(client: Client) -> None:
    tables = client.frames("Coverage", errors="raise")
    assert tables["Coverage"].get_column("payor_id").to_list() == ["OG-2"]
    assert tables["coverage_payor"].get_column("payor_type").to_list() == [
        "Organization",
        "Patient",
    ]
    assert tables["coverage_identifier"].height == 2
    assert tables["coverage_extension"].get_column("url").to_list() == [forms.FUNDER_TYPE]


def test_the_store_keeps_the_extension_table(tmp_path: Path) -> None:
    from toolkit.mock import serve
    from toolkit.store import load, sync, upsert

    store = tmp_path / "store"
    with (
        serve(seed=0, scale="small", rate_limit=100_000) as dep,
        Client(
            base_url=dep.base_url,
            client_id=dep.client_id,
            client_secret=dep.client_secret,
            requests_per_minute=None,
            progress=False,
        ) as mock_client,
    ):
        sync(mock_client, store, resources=["Patient"], progress=False)
    before = load("Patient", store, table="patient_extension")
    assert isinstance(before, pl.DataFrame)
    record = {**forms.patient(), "meta": {"lastUpdated": "2099-01-01T00:00:00Z"}}
    upsert("Patient", [record], store)
    after = load("Patient", store, table="patient_extension")
    assert isinstance(after, pl.DataFrame)
    mine = after.filter(pl.col("patient_id") == "100001")
    assert mine.height == 3 + 1 + 3 * len(forms.VALUES) + 3
    assert forms.INDIGENOUS in mine.get_column("url").to_list()
    # Replacing the record replaces its rows, not adds to them.
    upsert("Patient", [{**record, "meta": {"lastUpdated": "2099-01-02T00:00:00Z"}}], store)
    again = load("Patient", store, table="patient_extension")
    assert isinstance(again, pl.DataFrame)
    assert again.filter(pl.col("patient_id") == "100001").height == mine.height
