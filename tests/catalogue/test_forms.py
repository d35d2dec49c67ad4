"""Alternative forms are catalogue data: one declaration, and every consumer follows it.

Issue 26: the tolerant reader's facts about fields that arrive in more than one form
lived in seven places. Now a field declares them (``Field.forms``) and
:mod:`toolkit.catalogue.forms` holds the one registry of form readers. The first test
adds a scratch ``Location`` type to a copy of the toolkit (its ``Resource`` and a
``@family`` module, the recipe's two files) whose ``name`` is declared a string that
may arrive as a Reference with a ``display`` and whose ``contact`` is one object that
may arrive as an array of them, then checks, over real loopback HTTP against the
mock, that the reader, the rules, the contract walk, the OpenAPI schema and the
mock's name search all read both forms. The same copy without the two ``forms=``
declarations must fail each of those checks: the declaration alone does it.

The other tests pin the derived tables against the facts ("Shapes seen on the live
service") and the registry's readers, classifiers and schemas on hostile values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.scratch import add_resource_type, copy_packages, probe
from toolkit import catalogue, rules
from toolkit.catalogue import Alternative, Field, forms
from toolkit.errors import UnknownName

LOCATION = """LOCATION = Resource(
    "Location",
    _common(
        Field("name", "string"FORMS_NAME),
        Field("contact", "object", fields=(Field("value", "string"),)FORMS_CONTACT),
        Field("status", "code", enum=("active", "inactive")),
    ),
    id_prefixes=("LO-",),
    source="spec",
    doc="A scratch type (tests/catalogue/test_forms.py).",
    endpoints=_endpoints("Location", ("list", "List Locations"), source="pmtk"),
    search=("name",),
)"""

FAMILY = """from __future__ import annotations

from toolkit.mock.data.base import Drawing, family, meta


@family("locations")
def add_locations(drawing: Drawing) -> None:
    coll = drawing.store.collection("Location")
    names = (
        "Site 1",
        {"reference": "/main/Organization/CL-1", "display": "Site 2", "type": "Organization"},
    )
    contacts = ({"value": "one"}, [{"value": "first"}, {"value": "second"}])
    for n, (name, contact) in enumerate(zip(names, contacts)):
        lid = f"LO-{n + 1}"
        record = {"resourceType": "Location", "id": lid, "meta": meta(1_790_000_000.0),
                  "name": name, "contact": contact, "status": "active"}
        coll.add(lid, record, updated=1_790_000_000.0)
"""

PROBE = """
import json
import httpx
from contracts.resource_schemas import resource_schema
from contracts.walker import Seen, walk_resource
from tests.scratch import add_resource_type, copy_packages, probe
from toolkit import catalogue, rules
from toolkit.catalogue import forms
from toolkit.client import Client
from toolkit.mock import serve

out = {}
with serve(seed=0, scale="small") as dep:
    with Client(dep.base_url, dep.client_id, dep.client_secret) as client:
        frame = client.frame("Location", errors="warn")
        out["frame"] = {
            row["id"]: {k: row.get(k) for k in ("name", "contact_value", "extra", "invalid")}
            for row in frame.to_dicts()
        }
        try:
            found = client.frame("Location", name="Site 2", errors="warn")
            out["found"] = sorted(found.get_column("id"))
        except Exception as exc:  # the control: what the search answers without the form
            out["found"] = type(exc).__name__
        records = [e["resource"] for e in client.request("GET", "Location").json()["entry"]]
out["served_contact"] = {r["id"]: r["contact"] for r in records}
out["served_name"] = {r["id"]: r["name"] for r in records}
out["rules"], out["walker"], out["forms"] = {}, {}, {}
seen = Seen()
for record in records:
    observed = []
    options = rules.Options(
        mode="read", live_forms=True, accept_arrays=forms.ACCEPT_ARRAYS, observe=observed.append
    )
    violations = rules.check_resource("Location", record, options)
    out["rules"][record["id"]] = sorted(f"{v.path}:{v.category}" for v in violations)
    out["forms"][record["id"]] = sorted(
        f"{o.field_path}:{o.value}" for o in observed if o.kind in ("form", "shape")
    )
    problems = walk_resource("Location", record, seen)
    out["walker"][record["id"]] = sorted(f"{p.path}:{p.category}" for p in problems)
out["form_report"] = seen.form_report()
props = resource_schema(catalogue.resource("Location"))["properties"]
out["schema"] = {"name": props["name"], "contact": props["contact"]}
print(json.dumps(out))
"""


def _scratch(into: Path, *, declared: bool) -> dict[str, Any]:
    """A toolkit copy with the scratch Location (its forms declared or not), probed."""
    copy_packages(into, "toolkit", "contracts")
    location = LOCATION.replace(
        "FORMS_NAME", ', forms=(Alternative("reference"),)' if declared else ""
    ).replace("FORMS_CONTACT", ', forms=(Alternative("one-or-many"),)' if declared else "")
    add_resource_type(into, "Location", location, FAMILY)
    result: dict[str, Any] = probe(into, PROBE, timeout=180)
    return result


def test_a_form_declared_on_a_scratch_field_is_followed_everywhere(tmp_path: Path) -> None:
    got = _scratch(tmp_path, declared=True)
    # The reader: the Reference read by its display, the rest kept in extra; the array
    # read as the array (its first entry gives the main table's column).
    site2 = got["frame"]["LO-2"]
    assert site2["name"] == "Site 2"
    extra = json.loads(site2["extra"])
    assert extra.keys() == {"name.reference", "name.type"}  # a live mock's is absolute
    assert extra["name.reference"].endswith("/main/Organization/CL-1")
    assert site2["contact_value"] == "first" and site2["invalid"] is None
    site1 = got["frame"]["LO-1"]
    assert (site1["name"], site1["contact_value"], site1["invalid"]) == ("Site 1", "one", None)
    # The mock's name search reads the display; a live mock serves the one contact as
    # the live service's array of them.
    assert got["found"] == ["LO-2"]
    assert got["served_contact"]["LO-1"] == [{"value": "one"}]
    # ... and serves the name in the declared live form: a Reference (display only, as the
    # scratch form names no target type), with no line of the mock naming Location.
    assert got["served_name"]["LO-1"] == {"display": "Site 1"}
    # The rules (live forms) and the contract walk accept both forms and report them.
    assert got["rules"] == {"LO-1": [], "LO-2": []}
    assert got["walker"] == {"LO-1": [], "LO-2": []}
    assert "Location.name:value:Reference" in got["forms"]["LO-2"]
    assert "Location.name:value:Reference" in got["forms"]["LO-1"]
    assert "Location.contact:array" in got["forms"]["LO-2"]
    assert got["form_report"]["Location.name"] == {"value:Reference": 2}
    # The OpenAPI document's schema takes either form.
    name, contact = got["schema"]["name"], got["schema"]["contact"]
    assert [alt["type"] for alt in name["anyOf"]] == ["string", "object"]
    assert [alt["type"] for alt in contact["anyOf"]] == ["object", "array"]


def test_without_the_declaration_every_consumer_refuses_the_other_form(tmp_path: Path) -> None:
    got = _scratch(tmp_path, declared=False)
    site2 = got["frame"]["LO-2"]
    assert site2["name"] is None and site2["invalid"] is not None
    assert got["found"] == []
    assert got["served_contact"]["LO-1"] == {"value": "one"}
    assert got["served_name"]["LO-1"] == "Site 1"
    assert "name:type" in got["rules"]["LO-2"] and "contact:type" in got["rules"]["LO-2"]
    assert "name:schema" in got["walker"]["LO-2"]
    assert got["rules"]["LO-1"] == [] and got["walker"]["LO-1"] == []
    assert "Location.name" not in got["form_report"]
    assert got["schema"]["name"] == {"type": "string"}
    assert got["schema"]["contact"]["type"] == "object"


# ------------------------------------------------------------------ the derived tables


def test_the_derived_tables_are_the_facts() -> None:
    """ "Shapes seen on the live service", as the catalogue now declares them."""
    assert set(forms.ACCEPT_ARRAYS) == {"Practitioner.name"}
    assert dict(forms.LIVE_ARRAYS) == {"Practitioner": {"name"}}
    assert set(forms.LIVE_ALTERNATES) == {
        "Referral.limitQuantity.quantity",
        "Referral.referralDefinition",
    }
    assert {
        res: [(".".join(path), alt.form, alt.target) for path, _many, alt, _f in items]
        for res, items in forms.CONVERTED.items()
    } == {
        "Referral": [
            ("referralDefinition", "reference", "ReferralDefinition"),
            ("limitQuantity.quantity", "quantity", None),
        ]
    }
    assert set(forms.NAMED_TARGETS) == {"ReferralDefinition"}
    assert set(forms.READ_AS_ARRAY) == {
        ("Practitioner", "name"),
        ("Coverage", "payor"),
        ("Coverage", "identifier"),
    }
    assert forms.PREFERRED == {
        ("Practitioner", "name"): ("use", "official"),
        ("Patient", "name"): ("use", "official"),
    }
    assert {key: f.__name__ for key, f in forms.READERS.items()} == {
        ("Organization", "type[]"): "_codeable_as_coding",
        ("Practitioner", "name"): "_one_as_array",
        ("Patient", "name"): "_one_as_array",
        ("Coverage", "payor"): "_one_as_array",
        ("Coverage", "identifier"): "_one_as_array",
        ("Referral", "limitQuantity.quantity"): "_quantity_value",
        ("Referral", "referralDefinition"): "_reference_display",
        ("ReferralDefinition", "limitQuantity.quantity"): "_quantity_value",
    }
    assert rules.LIVE_ALTERNATES is forms.LIVE_ALTERNATES


def test_an_unknown_form_name_is_refused_with_the_known_ones() -> None:
    field = Field("name", "string", forms=(Alternative("refrence"),))
    with pytest.raises(UnknownName, match="refrence"):
        forms.checked(field)
    with pytest.raises(UnknownName, match="reference"):
        forms.readings(field, "x")


def test_two_forms_of_one_value_are_refused_an_array_and_an_item_form_are_not() -> None:
    from toolkit.errors import ConfigurationError

    quantity = forms.FORMS["quantity"]
    twice = Field("q", "number", forms=(Alternative("quantity"), Alternative("reference")))
    declared = [("X", "q", (), twice, alt, quantity) for alt in twice.forms]
    with pytest.raises(ConfigurationError, match=r"X\.q: two alternative forms"):
        forms._readers(declared)
    array_and_item = Field("q", "number", many=True, forms=(Alternative("one-or-many"),))
    one_or_many = forms.FORMS["one-or-many"]
    pair = [
        ("X", "q", (), array_and_item, array_and_item.forms[0], one_or_many),
        ("X", "q", (), array_and_item, Alternative("quantity"), quantity),
    ]
    assert set(forms._readers(pair)) == {("X", "q"), ("X", "q[]")}


def test_reader_only_forms_stay_out_of_the_checker() -> None:
    payor = catalogue.field_at("Coverage", "payor")
    assert forms.checked(payor) == ()
    assert not forms.checked_array(payor)
    assert forms.array_schema(payor, {"type": "object"}) == {"type": "object"}
    name = catalogue.field_at("Practitioner", "name")
    assert forms.checked_array(name)
    assert forms.array_schema(name, {"type": "object"}) == {
        "anyOf": [{"type": "object"}, {"type": "array", "items": {"type": "object"}}]
    }
    assert forms.array_schema(name, {"type": "array", "items": {"type": "string"}}) == {
        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
    }


# ------------------------------------------------------------------ the registry on hostile values

READ_CASES: list[tuple[str, Any, Any, dict[str, Any]]] = [
    ("one-or-many", {"family": "A"}, [{"family": "A"}], {}),
    ("one-or-many", [{"family": "A"}], [{"family": "A"}], {}),
    ("one-or-many", "A", "A", {}),
    ("quantity", {"value": 10, "unit": "visits"}, 10, {"p.unit": "visits"}),
    ("quantity", {"unit": "visits"}, {"unit": "visits"}, {}),
    ("quantity", 7, 7, {}),
    ("reference", {"reference": "/main/X/1", "display": "GP"}, "GP", {"p.reference": "/main/X/1"}),
    ("reference", {"reference": "/main/X/1", "display": 5}, "/main/X/1", {"p.display": 5}),
    ("reference", "GP", "GP", {}),
    (
        "codeable-concept",
        {"coding": [{"code": "a"}, {"code": "b"}], "text": "t"},
        {"code": "a"},
        {"p.text": "t", "p.coding[1]": {"code": "b"}},
    ),
    ("codeable-concept", {"coding": []}, None, {}),
    (
        "codeable-concept",
        {"code": "a", "coding": [{"code": "b"}]},
        {"code": "a", "coding": [{"code": "b"}]},
        {},
    ),
    ("codeable-concept", {"coding": "not a list"}, {"coding": "not a list"}, {}),
]


@pytest.mark.parametrize(("form", "value", "canonical", "extra"), READ_CASES)
def test_each_reader_gives_the_canonical_form_and_keeps_the_rest(
    form: str, value: Any, canonical: Any, extra: dict[str, Any]
) -> None:
    kept: dict[str, Any] = {}
    assert forms.FORMS[form].read(value, "p", kept) == canonical
    assert kept == extra


@pytest.mark.parametrize(
    ("form", "value", "name"),
    [
        ("quantity", 3, "number"),
        ("quantity", 2.5, "number"),
        ("quantity", True, None),
        ("quantity", {"value": 3}, "Quantity"),
        ("quantity", {"value": False}, None),
        ("quantity", {"value": "3"}, None),
        ("quantity", "3", None),
        ("reference", "GP", "string"),
        ("reference", {"display": "GP"}, "Reference"),
        ("reference", {"reference": "/main/X/1"}, "Reference"),
        ("reference", {"display": 5}, None),
        ("reference", {}, None),
        ("reference", 5, None),
    ],
)
def test_each_classifier_names_the_form_or_none(form: str, value: Any, name: str | None) -> None:
    classify = forms.FORMS[form].classify
    assert classify is not None
    assert classify(value) == name


def test_the_rules_accept_a_declared_form_only_with_live_forms() -> None:
    quantity = catalogue.field_at("Referral", "limitQuantity.quantity")
    path = "Referral.limitQuantity.quantity"
    live = rules.Options(mode="read", live_forms=True)
    assert rules.check_value(quantity, {"value": 4}, live, path="q", field_path=path) == []
    strict = rules.check_value(quantity, {"value": 4}, rules.Options(), path="q", field_path=path)
    assert [v.category for v in strict] == ["type"]
    hostile = rules.check_value(quantity, {"value": "4"}, live, path="q", field_path=path)
    assert [v.category for v in hostile] == ["type"]


def test_readings_reads_items_of_an_array_field_and_skips_what_no_form_changes() -> None:
    org_type = catalogue.field_at("Organization", "type")
    coded = [{"coding": [{"code": "a"}]}, {"code": "b"}]
    assert forms.readings(org_type, coded) == [coded, [{"code": "a"}, {"code": "b"}]]
    assert forms.readings(org_type, {"coding": [{"code": "a"}]}) == [{"coding": [{"code": "a"}]}]
    name = catalogue.field_at("Patient", "name")
    assert forms.readings(name, [{"family": "A"}]) == [[{"family": "A"}]]
    assert forms.readings(name, {"family": "A"}) == [{"family": "A"}, [{"family": "A"}]]
