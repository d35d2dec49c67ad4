"""Live-shaped pages (tests/fixtures/live_shapes, written from the facts file) read fully.

Every form the facts give for the live service reads into the same columns as the
spec's form, no page is refused, and every odd value (a value of an unexpected JSON
type) is null in its column, kept in ``invalid`` and reported by validation with its
record id and column: as a failure where the rule is the spec's, as a
``PmtkDataWarning`` where it comes from the facts.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from toolkit import catalogue
from toolkit.errors import DataValidationError
from toolkit.schemas import PmtkDataWarning, validate
from toolkit.views import flatten, flatten_tables

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "live_shapes"


def odd_values(resource_type: str) -> set[tuple[Any, ...]]:
    """``(resource, table, id, column, raw value as JSON, spec rule?)`` of a page's odd values.

    Each page's expectations sit beside it, in ``<Type>.odd.json`` (hand-written with
    the page: adding a type adds its two files, and no table here).
    """
    rows = json.loads((CORPUS / f"{resource_type}.odd.json").read_bytes())
    return {(resource_type, r["table"], r["id"], r["column"], r["value"], r["spec"]) for r in rows}


def page(resource_type: str) -> bytes:
    return (CORPUS / f"{resource_type}.json").read_bytes()


def rows(df: pl.DataFrame, key: str = "id") -> dict[str, dict[str, Any]]:
    return {r[key]: r for r in df.iter_rows(named=True)}


def reported(resource_type: str, table: str, df: pl.DataFrame) -> set[tuple[Any, ...]]:
    """``(resource, table, id, column, value, spec?)`` of every failure and observation."""
    out: set[tuple[Any, ...]] = set()
    name = None if table == resource_type else table
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            validate(df, resource_type, table=name)
        except DataValidationError as exc:
            for r in exc.failure_cases.iter_rows(named=True):
                out.add((resource_type, table, r["id"], r["column"], r["failure_case"], True))
    for w in caught:
        assert isinstance(w.message, PmtkDataWarning)
        for r in w.message.failure_cases.iter_rows(named=True):
            out.add((resource_type, table, r["id"], r["column"], r["failure_case"], False))
    return out


def test_the_corpus_covers_every_listed_resource() -> None:
    pages = {p.stem for p in CORPUS.glob("*.json") if not p.name.endswith(".odd.json")}
    assert pages == set(catalogue.LISTED_RESOURCES)
    assert {p.name.removesuffix(".odd.json") for p in CORPUS.glob("*.odd.json")} == pages


@pytest.mark.parametrize("resource_type", catalogue.LISTED_RESOURCES)
def test_every_record_of_every_page_is_read(resource_type: str) -> None:
    raw = page(resource_type)
    ids = [e["resource"]["id"] for e in json.loads(raw)["entry"]]
    tables = flatten_tables(resource_type, [raw])
    assert tables[resource_type].get_column("id").to_list() == ids
    # One table read alone gives that table of flatten_tables, odd values included.
    for name, df in tables.items():
        alone = flatten(resource_type, [raw], table=None if name == resource_type else name)
        assert alone.equals(df), name


@pytest.mark.parametrize("resource_type", catalogue.LISTED_RESOURCES)
def test_every_odd_value_is_reported_with_its_record_id_and_column(resource_type: str) -> None:
    tables = flatten_tables(resource_type, [page(resource_type)])
    found: set[tuple[Any, ...]] = set()
    for name, df in tables.items():
        found |= reported(resource_type, name, df)
    # Each odd value is reported once, by the table that holds its column.
    assert found == odd_values(resource_type)


def test_appointment_live_forms_fill_the_participant_columns() -> None:
    tables = flatten_tables("Appointment", [page("Appointment")])
    main = rows(tables["Appointment"])
    assert main["9001"]["location_type"] == "telehealth"  # full url, valueCode
    assert main["9002odd"]["location_type"] == "clinic"  # bare url
    assert main["9002odd"]["minutes_duration"] is None
    assert main["9002odd"]["extra"] is None
    # An unknown nested key is kept by the row it belongs to, under its full path.
    extra = tables["appointment_participant"].get_column("extra").to_list()
    assert extra == [None, None, '{"participant[0].period":{"start":"2026-11-22T09:00:00Z"}}', None]
    parts = tables["appointment_participant"].select(
        "appointment_id", "index", "actor_id", "actor_type", "status", "invoice_id"
    )
    assert parts.rows() == [
        ("9001", 0, "PR-1234", "PractitionerRole", "booked", None),  # valueCoding, full url
        ("9001", 1, "123", "Patient", "attended", "77001"),  # absolute references
        ("9002odd", 0, "PR-1234", "PractitionerRole", "cancelled", None),  # valueCode
        ("9002odd", 1, None, None, "arrived", None),  # valueString; actor of a wrong type
    ]
    support = tables["appointment_supporting_information"]
    assert support.get_column("supporting_information_id").to_list() == ["3"]


def test_coverage_payer_and_organisation_come_from_full_url_extensions() -> None:
    cov = rows(flatten("Coverage", [page("Coverage")]))
    assert (cov["88"]["payer_code"], cov["88"]["payer_display"]) == (
        "30",
        "Organisation (new invoice)",
    )
    assert cov["88"]["organisation_id"] == "OG-5"
    assert cov["88"]["patient_anonymous"] is False
    # Type/id reference without a type: the type comes from the reference.
    assert (cov["88"]["payor_id"], cov["88"]["payor_type"]) == ("FD-1", "Organization")
    assert (cov["89odd"]["payer_code"], cov["89odd"]["payer_display"]) == ("29", None)
    assert cov["89odd"]["subscriber_number"] is None
    assert json.loads(cov["89odd"]["invalid"]) == [
        {"path": "subscriberID", "column": "subscriber_number", "value": 29501234},
        {"path": "dependent", "column": "dependent", "value": 2},
    ]


def test_patient_status_and_official_names() -> None:
    tables = flatten_tables("Patient", [page("Patient")])
    patients = rows(tables["Patient"])
    assert patients["123"]["status"] == "current"  # valueString under the full url
    assert patients["124odd"]["status"] == "archived"  # valueCode under the bare name
    assert (patients["123"]["name_given"], patients["123"]["name_use"]) == (["Rebecca"], "official")
    assert patients["124odd"]["name_family"] == "Brown"  # one object, the spec's form
    names = tables["patient_name"].select("patient_id", "index", "use").rows()
    assert names == [("123", 0, "usual"), ("123", 1, "official"), ("124odd", 0, "official")]


def test_practitioner_names_as_an_array_or_one_object() -> None:
    tables = flatten_tables("Practitioner", [page("Practitioner")])
    pr = rows(tables["Practitioner"])
    assert (pr["PR-12"]["name_given"], pr["PR-12"]["name_prefix"]) == (
        ["Katherine", "Anne"],
        ["Dr"],
    )
    assert pr["EP-7"]["name_family"] == "Patel"  # the spec's single object
    assert pr["PR-13odd"]["name_family"] == "Wong"  # no official entry: the first
    names = tables["practitioner_name"].select("practitioner_id", "index", "use", "family")
    assert names.rows() == [
        ("PR-12", 0, "usual", "Nguyen"),
        ("PR-12", 1, "official", "Nguyen"),
        ("EP-7", 0, "official", "Patel"),
        ("PR-13odd", 0, None, "Wong"),
    ]
    assert tables["practitioner_identifier"].get_column("value").to_list() == ["123456"]
    qualification = tables["practitioner_qualification"].row(0, named=True)
    assert qualification["code_system"] == catalogue.PROFESSION_SYSTEM


def test_referral_quantity_and_definition_in_their_live_forms() -> None:
    ref = rows(flatten("Referral", [page("Referral")]))
    assert ref["301"]["limit_quantity"] == 10  # {"value": 10}
    assert ref["302odd"]["limit_quantity"] == 6  # a plain number, the spec's form
    assert ref["301"]["referral_definition"] == "GP Management Plan"  # a Reference's display
    assert ref["302odd"]["referral_definition"] == "Specialist referral"
    # Nothing the Reference carried is lost.
    assert json.loads(ref["301"]["extra"]) == {
        "referralDefinition.reference": "/main/ReferralDefinition/4"
    }
    assert (ref["301"]["coverage_id"], ref["301"]["requester_id"]) == ("88", "EP-7")
    assert ref["301"]["subject_id"] == "5"


def test_invoice_line_and_organization_live_forms() -> None:
    line = rows(flatten("InvoiceLine", [page("InvoiceLine")]))["L-501"]
    assert (line["funder_id"], line["performer_id"], line["invoice_id"]) == (
        "FD-1",
        "PR-12",
        "77001",
    )
    org = flatten_tables("Organization", [page("Organization")])
    # A CodeableConcept ({"coding": [...]}) and the spec's flat form read alike.
    assert org["organization_type"].select("organization_id", "code").rows() == [
        ("CL-2", "prov"),
        ("FD-9odd", "ins"),
    ]
    assert rows(org["Organization"])["CL-2"]["part_of_id"] == "PG-1"
