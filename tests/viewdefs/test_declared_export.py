"""The declared views exported as ViewDefinitions give the reader's tables.

On three kinds of pages: the mock's (live shapes, over HTTP), the hand-written
live-shape corpus (``tests/fixtures/live_shapes``, without its ``odd`` records,
whose values of another JSON type the two readers treat differently: see
docs/views.md), and the same corpus rewritten into the spec's shapes (bare
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
