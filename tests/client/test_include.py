"""``client.frames(..., include=[...])``: included tables from one walk.

Against the mock over loopback HTTP (equal to separate reads, de-duplicated across
pages, declared by its CapabilityStatement), and against hand-built pages in the
live service's forms (tests/fixtures/live_shapes, written from the facts file) whose
included entries carry no ``search.mode``, as some servers send them.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.client.conftest import FakeApi
from toolkit import catalogue
from toolkit.client import Client
from toolkit.errors import MalformedPage, UnknownName
from toolkit.include import UndeclaredInclude
from toolkit.listing import validated_frames
from toolkit.mock import Deployment

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "live_shapes"


@pytest.fixture
def client(mock_deployment: Deployment) -> Iterator[Client]:
    mock_deployment.reset_rate_limit()
    dep = mock_deployment
    with Client(dep.base_url, dep.client_id, dep.client_secret, progress=False) as c:
        yield c


def _by_id(df: pl.DataFrame) -> pl.DataFrame:
    """Rows in id order (then by every other plain column), so that the order read does not
    matter."""
    plain = [c for c, t in df.schema.items() if not isinstance(t, pl.List | pl.Struct)]
    return df.sort(plain, nulls_last=True)


def _separately(client: Client, kind: str, ids: list[str]) -> dict[str, pl.DataFrame]:
    """The tables of ``kind`` read the plain way: ``_id`` batches of 100."""
    parts = [client.frames(kind, id=ids[i : i + 100]) for i in range(0, len(ids), 100)]
    return {key: pl.concat([p[key] for p in parts]) for key in parts[0]}


def test_included_tables_equal_separate_reads(client: Client) -> None:
    names = ["Appointment:patient", "Appointment:actor"]
    sent = client.requests_sent
    tables = client.frames("Appointment", include=names, params={"date": "ge2026-11-01"})
    walk_requests = client.requests_sent - sent
    plain = client.frames("Appointment", params={"date": "ge2026-11-01"})
    for key, df in plain.items():
        assert_frame_equal(tables[key], df)
    appointments = plain["appointment_participant"]
    assert set(tables) == {
        *plain,
        *(t for t in tables if t.startswith(("patient", "practitioner_role"))),
        "Patient",
        "PractitionerRole",
    }
    for kind in ("Patient", "PractitionerRole"):
        wanted = sorted(
            set(appointments.filter(pl.col("actor_type") == kind).get_column("actor_id"))
        )
        assert sorted(tables[kind].get_column("id")) == wanted
        separate = _separately(client, kind, wanted)
        assert set(separate) == {k for k in tables if k == kind or k.startswith(_snake(kind))}
        for key, df in separate.items():
            assert tables[key].columns == df.columns
            assert_frame_equal(_by_id(tables[key]), _by_id(df))
    # one walk: the pages of Appointments (and the statement, read once per client)
    pages = -(-plain["Appointment"].height // catalogue.MAX_PAGE_SIZE)
    assert walk_requests == pages + 1


def _snake(kind: str) -> str:
    return {"Patient": "patient_", "PractitionerRole": "practitioner_role_"}[kind]


def test_included_records_met_on_several_pages_are_kept_once(client: Client) -> None:
    pages = list(
        client.pages("Appointment", include="Appointment:actor:PractitionerRole", count=20)
    )
    seen = [
        e["resource"]["id"]
        for page in pages
        for e in json.loads(page)["entry"]
        if e["search"]["mode"] == "include"
    ]
    assert len(seen) > len(set(seen)), "the same roles are included on several pages"
    tables = client.frames("Appointment", include="Appointment:actor:PractitionerRole", count=20)
    roles = tables["PractitionerRole"].get_column("id")
    assert roles.n_unique() == roles.len() == len(set(seen))
    assert "Patient" not in tables
    assert tables["Appointment"].height == client.last_summary.total  # type: ignore[union-attr]


def test_pages_passes_each_include_as_its_own_parameter(client: Client) -> None:
    names = ["Appointment:patient", "Appointment:supporting-info"]
    page = json.loads(next(client.pages("Appointment", include=names, count=5)))
    self_link = next(x["url"] for x in page["link"] if x["relation"] == "self")
    query = httpx.URL(self_link).params
    assert query.get_list("_include") == names
    kinds = {
        e["resource"]["resourceType"] for e in page["entry"] if e["search"]["mode"] == "include"
    }
    assert kinds == {"Patient", "HealthcareService"}


def test_an_unknown_include_raises_before_any_request(fake_api: FakeApi) -> None:
    client = fake_api.client()
    for name in ("Appointment:practitioner", "Patient:general-practitioner", "Appointment"):
        with pytest.raises(UnknownName) as caught:
            client.frames("Appointment", include=["Appointment:patient", name])
        assert repr(name) in str(caught.value)
        for valid in catalogue.INCLUDES["Appointment"]:
            assert valid in str(caught.value)
    with pytest.raises(UnknownName, match="it takes none"):
        client.frames("Practitioner", include="Practitioner:name")
    with pytest.raises(UnknownName):
        list(client.pages("Referral", include="Referral:patient"))
    assert fake_api.requests == [] and fake_api.token_requests == 0


def test_the_capability_statement_declares_includes(client: Client) -> None:
    declared = client.declared_includes()
    assert declared is not None
    for rtype, names in catalogue.INCLUDES.items():
        assert declared.get(rtype, set()) == set(names)


def _statement(includes: list[str] | None) -> dict[str, Any]:
    statement = copy.deepcopy(catalogue.capability_statement())
    for entry in statement["rest"][0]["resource"]:
        if entry["type"] == "Appointment":
            if includes is None:
                entry.pop("searchInclude")
            else:
                entry["searchInclude"] = includes
    return statement


def _appointments(request: httpx.Request) -> httpx.Response:
    body = json.loads((CORPUS / "Appointment.json").read_bytes())
    return httpx.Response(200, json=body)


@pytest.mark.parametrize("declared", [None, ["Appointment:actor"]])
def test_an_include_the_statement_does_not_declare_is_refused(
    fake_api: FakeApi, declared: list[str] | None
) -> None:
    fake_api.routes[("GET", "/main/metadata")] = lambda r: httpx.Response(
        200, json=_statement(declared)
    )
    fake_api.routes[("GET", "/main/Appointment")] = _appointments
    client = fake_api.client()
    with pytest.raises(UndeclaredInclude) as caught:
        client.frames("Appointment", include=["Appointment:actor", "Appointment:patient"])
    missing = ["Appointment:patient"] if declared else ["Appointment:actor", "Appointment:patient"]
    assert caught.value.undeclared == missing
    assert "Appointment:patient" in str(caught.value)
    assert fake_api.count(path="/main/Appointment") == 0
    # a declared include walks; so does any include when there is no statement (404)
    if declared:
        with pytest.warns(Warning):  # the corpus' odd values
            tables = client.frames("Appointment", include="Appointment:actor", errors="warn")
        assert "Patient" in tables
    del fake_api.routes[("GET", "/main/metadata")]
    fresh = fake_api.client()
    with pytest.warns(Warning):
        tables = fresh.frames("Appointment", include="Appointment:patient", errors="warn")
    assert set(tables) >= {"Appointment", "Patient", "patient_name"}
    assert fresh.declared_includes() is None


# --------------------------------------------------------------------------- hostile


def _entries(kind: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads((CORPUS / f"{kind}.json").read_bytes())["entry"]
    return [{"resource": e["resource"]} for e in entries]  # no fullUrl, no search.mode


def _unmarked_pages() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Two pages of the live corpus' Appointments, with Patients and PractitionerRoles
    mixed in unmarked; Patient 123 comes on both pages, newer (and renamed) on page 2."""
    appointments, patients, roles = (
        _entries("Appointment"),
        _entries("Patient"),
        _entries("PractitionerRole"),
    )
    newer = copy.deepcopy(patients[0])
    newer["resource"]["meta"]["lastUpdated"] = "2026-11-30T00:00:00Z"
    newer["resource"]["name"][1]["family"] = "Smith-Jones"
    base = "https://api.test/main/Appointment"
    pages = [
        {
            "resourceType": "Bundle",
            "type": "searchset",
            "total": 2,
            "link": [{"relation": "next", "url": f"{base}?page=2"}],
            "entry": [appointments[0], patients[0], *roles],
        },
        {
            "resourceType": "Bundle",
            "type": "searchset",
            "total": 2,
            "link": [],
            "entry": [newer, appointments[1], patients[1]],
        },
    ]
    return pages, [newer, patients[1]]


def _serve_pages(fake_api: FakeApi, pages: list[dict[str, Any]]) -> None:
    def listing(request: httpx.Request) -> httpx.Response:
        number = int(request.url.params.get("page", "1"))
        return httpx.Response(200, json=pages[number - 1])

    fake_api.routes[("GET", "/main/Appointment")] = listing


def test_unmarked_included_entries_of_another_type_are_taken_as_included(
    fake_api: FakeApi,
) -> None:
    pages, newest_patients = _unmarked_pages()
    _serve_pages(fake_api, pages)
    client = fake_api.client()
    names = ["Appointment:patient", "Appointment:actor:PractitionerRole"]
    with pytest.warns(Warning):  # the corpus' odd values warn, as in a plain frame
        tables = client.frames("Appointment", include=names, errors="warn")
    summary = client.last_summary
    assert summary is not None and summary.complete and summary.records == 2
    assert tables["Appointment"].get_column("id").to_list() == ["9001", "9002odd"]
    # the included Patient tables are a plain read of the newest versions, once each
    with pytest.warns(Warning):
        expected = validated_frames(
            "Patient",
            [json.dumps({"resourceType": "Bundle", "entry": newest_patients}).encode()],
            errors="warn",
        )
    for key, df in expected.items():
        assert_frame_equal(_by_id(tables[key]), _by_id(df))
    assert "Smith-Jones" in tables["patient_name"].get_column("family").to_list()
    assert sorted(tables["PractitionerRole"].get_column("id")) == ["EP-77odd", "PR-1234"]


def test_unmarked_entries_of_another_type_are_refused_without_include(fake_api: FakeApi) -> None:
    pages, _ = _unmarked_pages()
    _serve_pages(fake_api, pages)
    with pytest.raises(MalformedPage, match="not a Appointment"):
        fake_api.client().frames("Appointment", errors="warn")


def test_an_included_entry_without_an_id_is_refused(fake_api: FakeApi) -> None:
    pages, _ = _unmarked_pages()
    del pages[0]["entry"][1]["resource"]["id"]
    _serve_pages(fake_api, pages)
    with pytest.raises(MalformedPage, match="included entry 0 has no resourceType and id"):
        fake_api.client().frames("Appointment", include="Appointment:patient", errors="warn")
