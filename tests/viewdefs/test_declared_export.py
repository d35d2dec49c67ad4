"""The declared views exported as ViewDefinitions give the reader's tables.

On three kinds of pages: the mock's (live shapes, over HTTP), the hand-written
live-shape corpus (``tests/fixtures/live_shapes``, without its ``odd`` records,
which ``test_odd_values_are_read_alike_by_both_engines`` reads with the rest), and the
same corpus rewritten into the spec's shapes (bare
extension names, ``/main/Type/id`` references, a single name object, a number for
``limitQuantity.quantity``, a string ``referralDefinition``, a plain coding for
Organization ``type``).
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from tests.conftest import api_client
from toolkit import catalogue
from toolkit.catalogue import forms
from toolkit.cli import app
from toolkit.mock import Deployment
from toolkit.viewdefs import load_view, run_view
from toolkit.viewdefs.declared import NOT_EXPORTED, declared_view_definitions
from toolkit.views import VIEWS, flatten

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "live_shapes"


def _reader_table(resource_type: str, pages: list[bytes], table: str) -> pl.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # facts-rule warnings of the reader are not the point
        frame = flatten(resource_type, pages, table=table)
    frame = frame.drop([c for c in NOT_EXPORTED if c in frame.columns])
    # an empty collection: [] in SQL-on-FHIR, null in the reader (no element at all)
    return frame.with_columns(
        pl.col(c).fill_null(pl.lit([], dtype=frame.schema[c]))
        for c in frame.columns
        if isinstance(frame.schema[c], pl.List)
    )


def _assert_same(resource_type: str, pages: list[bytes]) -> int:
    rows = 0
    for table, view in declared_view_definitions(resource_type).items():
        got = run_view(view, pages)
        want = _reader_table(resource_type, pages, table)
        assert got.schema == want.schema, table
        assert got.to_dicts() == want.to_dicts(), table
        rows += got.height
    return rows


def _corpus(resource_type: str) -> dict[str, Any]:
    doc = json.loads((CORPUS / f"{resource_type}.json").read_bytes())
    doc["entry"] = [e for e in doc["entry"] if not e["resource"]["id"].endswith("odd")]
    return doc


def _spec_shape(value: Any, key: str = "") -> Any:
    if isinstance(value, list):
        return [_spec_shape(v, key) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _spec_shape(v, k) for k, v in value.items()}
    url = out.get("url")
    if key in {"extension", "modifierExtension"} and "terminology.halaxy.com" in str(url):
        out["url"] = str(url).rsplit("/", 1)[-1]
    if isinstance(out.get("reference"), str) and out["reference"].count("/") >= 1:
        kind, ident = out["reference"].rstrip("/").split("/")[-2:]
        out["reference"] = f"/main/{kind}/{ident}"
    return out


def _to_spec(resource_type: str, doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for entry in doc["entry"]:
        r = _spec_shape(entry["resource"])
        if resource_type == "Practitioner" and isinstance(r.get("name"), list):
            official = [n for n in r["name"] if n.get("use") == "official"] or r["name"]
            r["name"] = official[0]
        if resource_type == "Referral":
            q = r.get("limitQuantity", {}).get("quantity")
            if isinstance(q, dict):
                r["limitQuantity"]["quantity"] = q.get("value")
            d = r.get("referralDefinition")
            if isinstance(d, dict):
                r["referralDefinition"] = d.get("display") or d.get("reference")
        if resource_type == "Organization":
            r["type"] = [t["coding"][0] if "coding" in t else t for t in r.get("type", [])]
        entry["resource"] = r
    return doc


TYPES = [t for t in VIEWS if (CORPUS / f"{t}.json").exists()]


@pytest.mark.parametrize("resource_type", TYPES)
def test_live_shapes_give_the_reader_tables(resource_type: str) -> None:
    pages = [json.dumps(_corpus(resource_type)).encode()]
    assert _assert_same(resource_type, pages) > 0


@pytest.mark.parametrize("resource_type", TYPES)
def test_spec_shapes_give_the_reader_tables(resource_type: str) -> None:
    spec = _to_spec(resource_type, _corpus(resource_type))
    assert spec != _corpus(resource_type) or resource_type in {"Slot", "ChargeItemDefinition"}
    assert _assert_same(resource_type, [json.dumps(spec).encode()]) > 0


def test_mock_pages_over_http_give_the_reader_tables(mock_deployment: Deployment) -> None:
    mock_deployment.reset_rate_limit()
    total = 0
    with api_client(mock_deployment) as http:
        for resource_type in catalogue.LISTED_RESOURCES:
            pages: list[bytes] = []
            url: str | None = f"{resource_type}?_count=100"
            while url:
                response = http.get(url).raise_for_status()
                pages.append(response.content)
                links = response.json().get("link", [])
                url = next((x["url"] for x in links if x["relation"] == "next"), None)
            total += _assert_same(resource_type, pages)
    assert total > 1000


def test_every_declared_column_but_extra_and_invalid_is_exported() -> None:
    views = declared_view_definitions()
    for tables in VIEWS.values():
        for table in tables:
            if table.extensions:
                # the extension tables collect every depth: not one ViewDefinition
                assert table.name not in views
                continue
            checked = load_view(views[table.name])
            wanted = [c.name for c in table.columns if c.role not in NOT_EXPORTED]
            assert checked.column_names == wanted


def test_a_mixed_frame_of_both_shapes_still_reads_the_same_for_names() -> None:
    # the spec's single name object beside the live array, in one frame
    live = _corpus("Practitioner")
    spec = _to_spec("Practitioner", live)
    both = [json.dumps(live).encode(), json.dumps({**spec, "entry": spec["entry"][:1]}).encode()]
    view = declared_view_definitions("Practitioner")["Practitioner"]
    frame = run_view(view, both)
    assert frame.height == len(live["entry"]) + 1
    assert frame.get_column("name_family").null_count() == 0


def test_pmtk_views_export_writes_files_that_load(tmp_path: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(app, ["views", "export", "--out", str(tmp_path)])
    assert done.exit_code == 0, done.output
    files = sorted(tmp_path.glob("*.json"))
    assert {f.stem for f in files} == set(declared_view_definitions())
    for f in files:
        assert load_view(f).name == f.stem
    printed = runner.invoke(app, ["views", "export", "--resource", "Coverage"])
    assert [v["name"] for v in json.loads(printed.stdout)] == [
        "Coverage",
        "coverage_payor",
        "coverage_identifier",
    ]
    bad = runner.invoke(app, ["views", "export", "--resource", "Apointment"])
    assert bad.exit_code == 2 and "did you mean 'Appointment'" in bad.stderr


# A value in each alternative form, written from the facts ("Shapes seen on the live
# service") and FHIR R4, not from pmtk's readers.
_OTHER_FORM = {
    "quantity": {"value": 7, "unit": "appointments"},
    "reference": {"reference": "ReferralDefinition/3", "display": "GP referral"},
    "codeable-concept": {"coding": [{"system": "urn:s", "code": "c1", "display": "One"}]},
}


def _placed(path: str, many: bool, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    here = out
    *parents, last = path.split(".")
    for name in parents:
        here = here.setdefault(name, {})
    here[last] = [value] if many else value
    return out


@pytest.mark.parametrize(
    ("resource_type", "path"),
    sorted(forms.VIEW_FORMS),
    ids=[f"{r}.{p}" for r, p in sorted(forms.VIEW_FORMS)],
)
def test_every_declared_form_is_read_by_the_export_as_by_the_reader(
    resource_type: str, path: str
) -> None:
    # A form the catalogue declares is read by the reader (conform.py); the export
    # must read it too, through the form's own FHIRPath, or its columns go null.
    form = forms.VIEW_FORMS[(resource_type, path)]
    field = catalogue.RESOURCES[resource_type].field(path.split(".")[0])
    for name in path.split(".")[1:]:
        field = next(f for f in field.fields if f.name == name)
    record = {
        "resourceType": resource_type,
        "id": "r1",
        **_placed(path, field.many, _OTHER_FORM[form.name]),
    }
    pages = [json.dumps({"resourceType": "Bundle", "entry": [{"resource": record}]}).encode()]
    read = 0
    for table, view in declared_view_definitions(resource_type).items():
        got = run_view(view, pages)
        assert got.to_dicts() == _reader_table(resource_type, pages, table).to_dicts(), table
        read += sum(
            v is not None and v != []
            for row in got.to_dicts()
            for k, v in row.items()
            if k not in {"id", "index", f"{table.split('_')[0]}_id"}
        )
    assert read > 0, "no exported column read the value in its other form"


def _row_diffs(resource_type: str, pages: list[bytes]) -> set[tuple[str, str, str]]:
    """(table, id, column) of every cell where the runner and the reader differ."""
    out: set[tuple[str, str, str]] = set()
    for table, view in declared_view_definitions(resource_type).items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the runner reports odd values; not the point
            got = run_view(view, pages)
        want = _reader_table(resource_type, pages, table)
        assert got.schema == want.schema, table
        if got.height != want.height:
            out.add((table, "rows", f"{got.height} != {want.height}"))
            continue
        key = "id" if "id" in want.columns else want.columns[0]
        for a, b in zip(got.to_dicts(), want.to_dicts(), strict=True):
            out |= {(table, str(b[key]), c) for c in a if a[c] != b[c]}
    return out


def test_odd_values_are_read_alike_by_both_engines() -> None:
    # The corpus's odd records (a number as text, "yes" for a boolean, the spec's form
    # beside the live one) in the same frame as the rest: each engine keeps the
    # catalogue's type and reads every declared form. Two differences are left, both
    # by FHIRPath's rule that one value and an array of it are alike: an array where the
    # catalogue has one string reads as its item, and one object where it has an array
    # is a row (the reader reports both as odd, in `invalid`).
    found: set[tuple[str, str, str]] = set()
    for resource_type in TYPES:
        doc = json.loads((CORPUS / f"{resource_type}.json").read_bytes())
        found |= _row_diffs(resource_type, [json.dumps(doc).encode()])
    assert found == {
        ("HealthcareService", "8002odd", "name"),
        ("schedule_actor", "rows", "4 != 3"),
    }


def _referrals(quantities: list[Any], definitions: list[Any]) -> list[bytes]:
    entries = [
        {
            "resource": {
                "resourceType": "Referral",
                "id": f"R{i}",
                "limitQuantity": {"quantity": q},
                "referralDefinition": d,
            }
        }
        for i, (q, d) in enumerate(zip(quantities, definitions, strict=True))
    ]
    return [json.dumps({"resourceType": "Bundle", "entry": entries}).encode()]


LIVE_Q, LIVE_D = {"value": 6, "unit": "visits"}, {"display": "GP referral"}


@pytest.mark.parametrize(
    ("quantities", "definitions"),
    [
        # mostly live; a Reference without a display is read by its reference
        ([LIVE_Q, LIVE_Q, 4], [LIVE_D, {"reference": "ReferralDefinition/3"}, "Specialist"]),
        ([6, 5, LIVE_Q], ["GP", "Specialist", LIVE_D]),  # mostly the spec's
        ([LIVE_Q, 4], [LIVE_D, "Specialist"]),  # one of each
    ],
    ids=["mostly-live", "mostly-spec", "tie"],
)
def test_both_forms_in_one_frame_are_all_read(
    quantities: list[Any], definitions: list[Any]
) -> None:
    pages = _referrals(quantities, definitions)
    assert _row_diffs("Referral", pages) == set()
    view = declared_view_definitions("Referral")["Referral"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no value is read as null for its form
        got = run_view(view, pages)
    want_q = [q["value"] if isinstance(q, dict) else q for q in quantities]
    want_d = [
        d.get("display", d.get("reference")) if isinstance(d, dict) else d for d in definitions
    ]
    assert got.get_column("limit_quantity").to_list() == want_q
    assert got.get_column("referral_definition").to_list() == want_d


def test_a_view_written_for_the_live_form_reads_the_fewer_spec_values_too() -> None:
    # Mostly Quantities: the one bare number is read as a Quantity of it, so a view
    # written for the live form (``.value``) gets all three; so does the unit's absence.
    pages = _referrals([LIVE_Q, {"value": 2}, 4], [LIVE_D, LIVE_D, LIVE_D])
    view = {
        "resource": "Referral",
        "select": [{"column": [{"name": "q", "path": "limitQuantity.quantity.value"}]}],
    }
    assert run_view(view, pages).get_column("q").to_list() == [6, 2, 4]


def test_a_coding_beside_codeable_concepts_is_read_alike_by_both_engines() -> None:
    orgs = [
        {"resourceType": "Organization", "id": "O1", "type": [{"coding": [{"code": "a"}]}]},
        {"resourceType": "Organization", "id": "O2", "type": [{"coding": [{"code": "b"}]}]},
        {"resourceType": "Organization", "id": "O3", "type": [{"code": "c"}]},
    ]
    page = json.dumps({"resourceType": "Bundle", "entry": [{"resource": o} for o in orgs]})
    assert _row_diffs("Organization", [page.encode()]) == set()
    got = run_view(declared_view_definitions("Organization")["organization_type"], [page.encode()])
    assert got.get_column("code").to_list() == ["a", "b", "c"]


def test_the_catalogues_type_is_kept_however_few_values_have_it() -> None:
    # two texts and one number in minutesDuration (an integer in the spec): the number
    # is the value; the texts are the odd ones, read as null and reported
    appts = [
        {"resourceType": "Appointment", "id": "A1", "minutesDuration": "30"},
        {"resourceType": "Appointment", "id": "A2", "minutesDuration": "45"},
        {"resourceType": "Appointment", "id": "A3", "minutesDuration": 60},
    ]
    page = json.dumps({"resourceType": "Bundle", "entry": [{"resource": a} for a in appts]})
    view = {
        "resource": "Appointment",
        "select": [{"column": [{"name": "m", "path": "minutesDuration", "type": "integer"}]}],
    }
    with pytest.warns(Warning, match="2 Appointment value"):
        got = run_view(view, [page.encode()])
    assert got.get_column("m").to_list() == [None, None, 60]
    assert _row_diffs("Appointment", [page.encode()]) == set()


def test_a_type_the_catalogue_does_not_declare_keeps_the_majority_rule() -> None:
    # no catalogue type for Basic: the most common JSON type of the field is kept
    values = ["x", "y", 1]
    records = [{"resourceType": "Basic", "id": f"B{i}", "n": v} for i, v in enumerate(values)]
    with pytest.warns(Warning, match="1 Basic value"):
        got = run_view(
            {"resource": "Basic", "select": [{"column": [{"name": "n", "path": "n"}]}]}, records
        )
    assert got.get_column("n").to_list() == ["x", "y", None]


def test_a_tie_of_forms_goes_to_the_catalogues() -> None:
    # one Quantity and one bare number: the catalogue's form (the number) is the one
    # every value is read in, so a view of the number reads both
    pages = _referrals([LIVE_Q, 4], [LIVE_D, "Specialist"])
    view = {
        "resource": "Referral",
        "select": [
            {
                "column": [
                    {"name": "q", "path": "limitQuantity.quantity", "type": "integer"},
                    {"name": "d", "path": "referralDefinition", "type": "string"},
                ]
            }
        ],
    }
    got = run_view(view, pages)
    assert got.rows() == [(6, "GP referral"), (4, "Specialist")]


def test_the_general_read_brings_codings_and_codeable_concepts_to_one_form() -> None:
    # A text where the others have a boolean sends the frame to the general read; there the
    # one bare Coding among CodeableConcepts becomes a CodeableConcept of it, so a view
    # written for the CodeableConcepts (`type.coding.code`) reads all three
    orgs = [
        {"resourceType": "Organization", "id": "O1", "type": [{"coding": [{"code": "a"}]}]},
        {"resourceType": "Organization", "id": "O2", "type": [{"coding": [{"code": "b"}]}]},
        {"resourceType": "Organization", "id": "O3", "type": [{"code": "c"}], "active": "no"},
        {"resourceType": "Organization", "id": "O4", "active": True},
    ]
    view = {
        "resource": "Organization",
        "select": [
            {"column": [{"name": "id", "path": "id"}, {"name": "active", "path": "active"}]},
            {"forEach": "type", "column": [{"name": "code", "path": "coding.code"}]},
        ],
    }
    with pytest.warns(Warning, match="1 Organization value"):  # "no" for a boolean
        rows = run_view(view, orgs).rows()
    assert rows == [("O1", None, "a"), ("O2", None, "b"), ("O3", None, "c")]


def test_a_form_of_the_last_declared_resource_is_brought_to_one_form_too() -> None:
    # ReferralDefinition comes after every other declared resource: its Quantities
    # beside bare numbers are read, not nulled for their JSON type
    defs = [
        {"resourceType": "ReferralDefinition", "id": "D1", "limitQuantity": {"quantity": 5}},
        {"resourceType": "ReferralDefinition", "id": "D2", "limitQuantity": {"quantity": 6}},
        {
            "resourceType": "ReferralDefinition",
            "id": "D3",
            "limitQuantity": {"quantity": {"value": 7}},
        },
    ]
    view = declared_view_definitions("ReferralDefinition")["ReferralDefinition"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = run_view(view, defs)
    assert got.get_column("limit_quantity").to_list() == [5, 6, 7]
