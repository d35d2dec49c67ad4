"""The conform step and its extension table, against a plain walk of the JSON (issue 36).

``toolkit.views.conform`` brings a record that fails the exact check to the read
schema: alternative forms read as the canonical one, a value of the wrong JSON type
nulled and kept in ``invalid``, an unknown key kept in ``extra`` by path, and every
``extension`` / ``modifierExtension`` element at any depth that no column reads made
a row of ``<resource>_extension`` (docs/views.md, "Every extension kept, with its
url"). The expectations here come from FHIR R4 (an extension is an object with a
``url`` and at most one ``value[x]``, nested ones in its own ``extension``; a
primitive's extensions sit on ``_<name>``), the facts file ("Shapes seen on the live
service": full canonical urls matched on their last segment, a coded value as
``valueCoding``, ``valueCode`` or ``valueString``) and the catalogue's extension
columns, written out below by hand, not from pmtk's code.

The oracle (:func:`oracle`) is a plain recursive walk over the record listing every
extension element with its path, url, index and value, minus those a column reads;
hypothesis generates records of three resource types with extensions on the resource,
on elements, on primitives, inside unknown elements and nested, in read and unread
forms, and each must give exactly those rows, on the fast path and on the repair
path alike. ``tools/mutation.py conform`` runs these tests against mutants of
``toolkit/views/conform.py`` (see docs/testing.md).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.frames.fhir_r4_forms import VALUES
from toolkit.errors import DataValidationError
from toolkit.views import flatten, flatten_tables
from toolkit.views.conform import Conformer, as_bytes, iter_pages, outcome_text

LIVE = "https://terminology.halaxy.com/StructureDefinition/"
"""The live service's base of its extension urls (facts)."""

CODED = frozenset({"valueCoding", "valueCode", "valueString"})
"""The forms of a coded extension value (facts: "valueCoding, valueCode or valueString")."""

READ: dict[str, dict[str, dict[str, frozenset[str]]]] = {
    "Patient": {"extension": {"patient-status": CODED}},
    "Coverage": {
        "extension": {
            "coverage-patient-anonymous": frozenset({"valueBoolean"}),
            "coverage-payer": CODED,
            "coverage-organisation": frozenset({"valueReference"}),
        }
    },
    "Appointment": {
        "extension": {"location-type": CODED},
        "participant.modifierExtension": {"appointment-participant-status": CODED},
        "participant.extension": {"appointment-participant-invoice": frozenset({"valueReference"})},
    },
}
"""Resource → extension container (field path, no indices) → the url names its columns
read → the ``value[x]`` forms each is read in (docs/views.md's column tables)."""

READ_VALUES = {
    "valueReference": {"reference", "type"},
    "valueCoding": {"system", "code", "display"},
}
"""The keys a column reads of a read complex value; any other key is an unknown key
(``extra``, by path), as anywhere in a record."""

READ_ELEMENTS = {"Appointment": frozenset({"participant"})}
"""Top-level arrays whose items carry read extension containers."""

CONTAINERS = ("extension", "modifierExtension")

PRIMITIVES = frozenset(
    {
        *("boolean", "integer", "string", "decimal", "uri", "url", "canonical", "base64Binary"),
        *("instant", "date", "dateTime", "time", "code", "oid", "id", "markdown"),
        *("unsignedInt", "positiveInt", "uuid"),
    }
)
"""FHIR R4's primitive types, whose names start lower-case (``valueDateTime``: ``dateTime``)."""

TEXT_OF: dict[str, Any] = {
    "Coding": lambda v: v.get("code"),
    "CodeableConcept": lambda v: (v.get("coding") or [{}])[0].get("code"),
    "Reference": lambda v: v.get("reference"),
    "Identifier": lambda v: v.get("value"),
    "Quantity": lambda v: v.get("value"),
    "Money": lambda v: v.get("value"),
    "Period": lambda v: f"{v.get('start') or ''}/{v.get('end') or ''}",
    "Attachment": lambda v: v.get("url"),
    "HumanName": lambda v: v.get("family"),
    "Address": lambda v: v.get("text"),
}
"""The ``value`` column of a complex type (docs/views.md: "a Coding's or CodeableConcept's
code, a Reference's reference, an Identifier's or Quantity's value, a Period as
start/end"; an Attachment's url, a name's family, an address's text)."""


def fhir_type(key: str) -> str:
    name = key[len("value") :]
    lower = name[0].lower() + name[1:]
    return lower if lower in PRIMITIVES else name


def text_of(kind: str, value: Any) -> str | None:
    """The extension table's ``value`` of a well-formed value of FHIR type ``kind``."""
    if kind in PRIMITIVES:
        return value if isinstance(value, str) else orjson.dumps(value).decode()
    found = TEXT_OF[kind](value) if kind in TEXT_OF else None
    return found if found is None or isinstance(found, str) else orjson.dumps(found).decode()


Row = tuple[str, bool, int, str | None, str | None, str | None, str | None, Any]

NO_VALUE = "<no value[x]: value_json null>"
"""An extension without a ``value[x]`` (only nested ones): its ``value_json`` is null,
where a ``value[x]`` that is JSON null has the text ``null``."""


def bundle(*resources: Any) -> dict[str, Any]:
    return {
        "resourceType": "Bundle",
        "type": "searchset",
        "entry": [{"resource": r} for r in resources],
    }


def value_keys(element: dict[str, Any]) -> list[str]:
    """FHIR's ``value[x]``: ``value`` followed by a type name, which starts upper-case."""
    return [k for k in element if len(k) > 5 and k.startswith("value") and k[5].isupper()]


def element_path(path: str) -> str:
    """The element a path names: a primitive's extension holder ``_birthDate`` is ``birthDate``."""
    return ".".join(p.removeprefix("_") for p in path.split(".")) if path else ""


def is_read(resource: str, place: str | None, element: Any) -> bool:
    """Whether a column reads ``element`` of the container at ``place`` (None: no column's)."""
    names = READ[resource].get(place) if place is not None else None
    if names is None or not isinstance(element, dict) or not isinstance(element.get("url"), str):
        return False
    forms = names.get(element["url"].split("/")[-1])
    return forms is not None and all(k in forms for k in value_keys(element))


def oracle(resource: str, record: dict[str, Any]) -> tuple[list[Row], dict[str, Any]]:
    """The extension rows of ``record`` and what of its extension elements goes to ``extra``.

    Every element of every extension array, at any depth, is a row unless a column
    reads it (:func:`is_read`); an element that is not an object is kept in ``extra``
    under its path, and so is every key of an element beside its url, its first
    ``value[x]`` and its nested arrays (a second value, an ``id``).
    """
    rows: list[Row] = []
    extra: dict[str, Any] = {}

    def elements(array: list[Any], carrier: str, container: str, place: str | None, parent: Any):
        for i, element in enumerate(array):
            here = f"{carrier}.{container}[{i}]" if carrier else f"{container}[{i}]"
            if not isinstance(element, dict):
                extra[here] = element
                continue
            url = element.get("url") if isinstance(element.get("url"), str) else None
            keys = value_keys(element)
            read = is_read(resource, place, element)
            kept = {"url", *keys} if read else {"url", *keys[:1]}
            if not read:
                first = keys[0] if keys else None
                kind = fhir_type(first) if first else None
                value = element[first] if first else NO_VALUE
                text = text_of(kind, value) if kind else None
                rows.append(
                    (
                        element_path(carrier),
                        container == CONTAINERS[1],
                        i,
                        url,
                        parent,
                        kind,
                        text,
                        value,
                    )
                )
            for key, other in element.items():
                if key in CONTAINERS and isinstance(other, list):
                    elements(other, here, key, None, url)
                elif key not in kept:
                    extra[f"{here}.{key}"] = other
                elif read and key in READ_VALUES and isinstance(other, dict):
                    extra.update(
                        (f"{here}.{key}.{k}", v)
                        for k, v in other.items()
                        if k not in READ_VALUES[key]
                    )

    def walk(node: dict[str, Any], path: str, read_at: str | None) -> None:
        for key, other in node.items():
            sub = f"{path}.{key}" if path else key
            if key in CONTAINERS and isinstance(other, list):
                place = None if read_at is None else f"{read_at}.{key}" if read_at else key
                elements(other, path, key, place, None)
            elif isinstance(other, dict):
                walk(other, sub, None)
            elif isinstance(other, list):
                inner = key if not path and key in READ_ELEMENTS.get(resource, ()) else None
                for i, item in enumerate(other):
                    if isinstance(item, dict):
                        walk(item, f"{sub}[{i}]", inner)

    walk(record, "", "")
    return rows, extra


def coded(element: dict[str, Any]) -> Any:
    """A coded extension's value: its Coding's code, else its code, else its string."""
    coding = element.get("valueCoding")
    if isinstance(coding, dict) and coding.get("code") is not None:
        return coding["code"]
    return element.get("valueCode", element.get("valueString"))


def first_read(resource: str, array: Any, place: str, name: str) -> dict[str, Any] | None:
    """The first element of ``array`` a column reads with url ``name`` (the column takes it)."""
    for element in array if isinstance(array, list) else []:
        if is_read(resource, place, element) and element["url"].split("/")[-1] == name:
            return element
    return None


def snake(resource: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", resource).lower()


def actual(resource: str, tables: dict[str, pl.DataFrame], rid: str) -> tuple[list[Row], dict]:
    """The extension rows of record ``rid`` and the extension paths of its tables' ``extra``."""
    table = tables[f"{snake(resource)}_extension"].filter(pl.col(f"{snake(resource)}_id") == rid)
    rows = [
        (
            r["path"],
            r["modifier"],
            r["index"],
            r["url"],
            r["parent_url"],
            r["value_type"],
            r["value"],
            NO_VALUE if r["value_json"] is None else json.loads(r["value_json"]),
        )
        for r in table.to_dicts()
    ]
    keys = table.select("path", "modifier", "index")
    assert keys.is_unique().all()
    extra: dict[str, Any] = {}
    for name, frame in tables.items():
        if "extra" not in frame.columns or name.endswith("_extension"):
            continue
        id_column = "id" if "id" in frame.columns else f"{snake(resource)}_id"
        for text in frame.filter(pl.col(id_column) == rid).get_column("extra").to_list():
            extra |= orjson.loads(text) if text else {}
    # What is left of an unknown element (``contact``) keeps no extension array: each is rows.
    assert not [k for k, v in extra.items() if not EXTENSION_PATH.search(k) and holds_array(v)]
    return rows, {k: v for k, v in extra.items() if EXTENSION_PATH.search(k)}


EXTENSION_PATH = re.compile(r"(?:^|\.)(?:extension|modifierExtension)\[\d+\]")
"""A path inside an extension element: what the extension table's step put in ``extra``."""


def holds_array(value: Any) -> bool:
    """Whether ``value`` holds an extension array at any depth."""
    if isinstance(value, dict):
        return any(
            (k in CONTAINERS and isinstance(v, list)) or holds_array(v) for k, v in value.items()
        )
    return isinstance(value, list) and any(holds_array(v) for v in value)


def ordered(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (r[0], r[1], r[2]))


# ------------------------------------------------------------------ generated records


def urls(resource: str) -> st.SearchStrategy[Any]:
    """Known names bare, in the live service's full form and under another host (all read
    by the last segment), near misses (a suffix, a trailing slash), unknown urls, a url
    that is not a string."""
    names = sorted({n for by in READ[resource].values() for n in by})
    known = st.sampled_from(names).flatmap(
        lambda n: st.sampled_from(
            [
                n,
                LIVE + n,
                f"http://example.org/fhir/StructureDefinition/{n}",
                f"{n}x",
                f"{LIVE}{n}/",
            ]
        )
    )
    other = st.sampled_from(["http://example.org/fhir/seat", "u:a", "", None, 5])
    return st.one_of(known, known, other)


_MISSING = object()
_READ_FORMS = [v for v in VALUES if v[0] in CODED | {"valueBoolean", "valueReference"}]


def element(resource: str, depth: int) -> st.SearchStrategy[Any]:
    """One extension element: url, up to two value[x] (mostly the read forms), maybe an id
    or a key that only looks like a value, maybe nested elements; or not an object."""
    values = st.lists(
        st.sampled_from(_READ_FORMS * 3 + VALUES), max_size=2, unique_by=lambda v: v[0]
    )
    odd = st.dictionaries(st.sampled_from(["id", "valueset", "value"]), st.just("x"), max_size=1)
    nested = (
        st.tuples(st.sampled_from(CONTAINERS), st.lists(element(resource, depth - 1), max_size=2))
        if depth
        else st.just(None)
    )

    def build(url: Any, vals: list[Any], more: dict[str, Any], kids: Any) -> dict[str, Any]:
        out: dict[str, Any] = {} if url is _MISSING else {"url": url}
        out |= {key: value for key, value, _kind, _text in vals}
        out |= more
        if kids is not None:
            out[kids[0]] = kids[1]
        return out

    obj = st.builds(build, st.one_of(urls(resource), st.just(_MISSING)), values, odd, nested)
    return st.one_of(obj, obj, obj, obj, st.sampled_from(["text", 5, None]))


def array(resource: str) -> st.SearchStrategy[list[Any]]:
    return st.lists(element(resource, 2), max_size=3)


def maybe(resource: str) -> st.SearchStrategy[dict[str, Any]]:
    """``{"extension": [...]}``, ``{"modifierExtension": [...]}``, both or neither."""
    return st.dictionaries(st.sampled_from(CONTAINERS), array(resource), max_size=2)


def _patient() -> st.SearchStrategy[dict[str, Any]]:
    def build(top, name, given, birth, contact):
        record = {"resourceType": "Patient", "id": "p1", **top}
        if name is not None:
            record["name"] = [{"family": "Chalmers", "given": ["Peter", "James"], **name}]
            if given is not None:
                record["name"][0]["_given"] = [None, given]
        if birth is not None:
            record |= {"birthDate": "1974-12-25", "_birthDate": birth}
        if contact is not None:
            record["contact"] = [{"name": {"family": "du Marché", "_family": contact}}]
        return record

    r = "Patient"
    return st.builds(
        build, maybe(r), st.none() | maybe(r), st.none() | maybe(r), st.none() | maybe(r),
        st.none() | maybe(r),
    )  # fmt: skip


def _coverage() -> st.SearchStrategy[dict[str, Any]]:
    def build(top, period):
        record = {"resourceType": "Coverage", "id": "c1", "status": "active", **top}
        if period is not None:
            record["period"] = {"start": "2011-05-23", **period}
        return record

    return st.builds(build, maybe("Coverage"), st.none() | maybe("Coverage"))


def _appointment() -> st.SearchStrategy[dict[str, Any]]:
    def build(top, participants):
        return {
            "resourceType": "Appointment",
            "id": "a1",
            "start": "2025-09-29T09:00:00+10:00",
            **top,
            "participant": [{"actor": {"reference": "Patient/1"}, **p} for p in participants],
        }

    return st.builds(build, maybe("Appointment"), st.lists(maybe("Appointment"), max_size=2))


RECORDS = {"Patient": _patient(), "Coverage": _coverage(), "Appointment": _appointment()}

COLUMNS = {
    "Patient": [("Patient", None, "extension", "patient-status", "status", coded)],
    "Coverage": [
        ("Coverage", None, "extension", "coverage-payer", "payer_code", coded),
        (
            "Coverage",
            None,
            "extension",
            "coverage-patient-anonymous",
            "patient_anonymous",
            lambda e: e.get("valueBoolean"),
        ),
    ],
    "Appointment": [
        ("Appointment", None, "extension", "location-type", "location_type", coded),
        (
            "appointment_participant",
            "participant",
            "participant.modifierExtension",
            "appointment-participant-status",
            "status",
            coded,
        ),
    ],
}
"""(table, array its rows repeat, container, url name, column, value of the element)."""


def _check_columns(resource: str, record: dict[str, Any], tables: dict[str, pl.DataFrame]) -> None:
    for table, for_each, place, name, column, read in COLUMNS[resource]:
        holders = record.get(for_each, []) if for_each else [record]
        got = tables[table].get_column(column).to_list()
        assert len(got) == len(holders)
        for holder, value in zip(holders, got, strict=True):
            first = first_read(resource, holder.get(place.rsplit(".", 1)[-1]), place, name)
            # The column takes the first element of its url; one without a value is no value.
            if first is not None and value_keys(first):
                assert value == read(first), (column, first)
            elif first is None:
                assert value is None, column


def check(resource: str, record: dict[str, Any]) -> None:
    """``record``'s extension rows, extension leftovers and extension columns are the oracle's,
    read as sent, with another value of the record odd (the repair path for certain), and
    from the extension table read alone."""
    rows, extra = oracle(resource, record)
    tables = flatten_tables(resource, [bundle(record)])
    got_rows, got_extra = actual(resource, tables, record["id"])
    assert ordered(got_rows) == ordered(rows)
    assert got_extra == extra
    _check_columns(resource, record, tables)
    odd = {**record, "id": "odd", "meta": {"lastUpdated": 5}}
    tables = flatten_tables(resource, [bundle(odd)])
    assert ordered(actual(resource, tables, "odd")[0]) == ordered(rows)
    _check_columns(resource, odd, tables)
    table = f"{snake(resource)}_extension"
    alone = flatten(resource, [bundle(record)], table=table)
    assert ordered(actual(resource, {table: alone}, record["id"])[0]) == ordered(rows)


@pytest.mark.parametrize("resource", sorted(RECORDS))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_extension_is_a_row_unless_a_column_reads_it(resource: str, data: Any) -> None:
    check(resource, data.draw(RECORDS[resource]))


PS = LIVE + "patient-status"
SEAT = "http://example.org/fhir/seat"
CODING = {"system": "http://snomed.info/sct", "code": "186034007"}
REFERENCE = {"reference": "Organization/1", "display": "Gastroenterology"}


def patient(**fields: Any) -> tuple[str, dict[str, Any]]:
    return "Patient", {"resourceType": "Patient", "id": "p1", **fields}


def coverage(*extensions: Any) -> tuple[str, dict[str, Any]]:
    return "Coverage", {"resourceType": "Coverage", "id": "c1", "extension": list(extensions)}


def appointment(**fields: Any) -> tuple[str, dict[str, Any]]:
    start = "2025-09-29T09:00:00+10:00"
    return "Appointment", {"resourceType": "Appointment", "id": "a1", "start": start, **fields}


EDGES: dict[str, tuple[str, dict[str, Any]]] = {
    "empty arrays": patient(extension=[], modifierExtension=[], name=[{"extension": []}]),
    "null arrays": patient(extension=None, modifierExtension=None),
    "a null element": patient(extension=[None]),
    "elements that are not objects": patient(extension=["text", 5, ["x"], {"url": SEAT}]),
    "no url": patient(extension=[{"valueCode": "x"}]),
    "a null url": patient(extension=[{"url": None, "valueCode": "x"}]),
    "a url that is a number": patient(extension=[{"url": 5, "valueString": "x"}]),
    "a known url with no value": patient(extension=[{"url": "patient-status"}]),
    "a known url in a form no column reads": patient(extension=[{"url": PS, "valueBoolean": True}]),
    "a known url repeated": patient(
        extension=[{"url": PS, "valueCode": "current"}, {"url": PS, "valueCode": "archived"}]
    ),
    "an unknown url repeated": patient(
        extension=[{"url": SEAT, "valueInteger": 1}, {"url": SEAT, "valueInteger": 2}]
    ),
    "near misses of a known url": patient(
        extension=[
            {"url": PS + "x", "valueCode": "a"},
            {"url": PS + "/", "valueCode": "b"},
            {"url": "", "valueCode": "c"},
            {"url": "http://example.org/StructureDefinition/patient-status", "valueCode": "d"},
        ]
    ),
    "a known url with a read and an unread form": patient(
        extension=[{"url": PS, "valueCode": "current", "valueBoolean": True}]
    ),
    "a known url with two read forms": patient(
        extension=[{"url": PS, "valueString": "contact", "valueCode": "current"}]
    ),
    "another container's forms (each url reads its own)": coverage(
        {"url": LIVE + "coverage-payer", "valueBoolean": True},
        {"url": "coverage-patient-anonymous", "valueCoding": CODING},
        {"url": "coverage-organisation", "valueString": "abc"},
        {"url": "coverage-payer", "valueReference": REFERENCE},
    ),
    "each url in its own form": coverage(
        {"url": "coverage-payer", "valueCoding": {"code": "30"}},
        {"url": "coverage-patient-anonymous", "valueBoolean": False},
        {
            "url": LIVE + "coverage-organisation",
            "valueReference": {"reference": "Organization/OG-1"},
        },
    ),
    "element containers in unread forms": appointment(
        extension=[{"url": "location-type", "valueReference": REFERENCE}],
        participant=[
            {
                "modifierExtension": [
                    {"url": "appointment-participant-status", "valueBoolean": True},
                    {"url": "appointment-participant-status", "valueCode": "booked"},
                ],
                "extension": [
                    {"url": "appointment-participant-invoice", "valueCoding": CODING},
                    {"url": SEAT, "valueInteger": 4},
                ],
            },
            {"modifierExtension": [{"url": SEAT, "valueCode": "x"}]},
        ],
    ),
    "modifier extensions where no column reads one": appointment(
        modifierExtension=[{"url": SEAT, "valueBoolean": True}],
        participant=[{"extension": [{"url": "appointment-participant-status", "valueCode": "x"}]}],
    ),
    "nested three deep": patient(
        extension=[
            {
                "url": "u:1",
                "extension": [
                    {"url": "u:2", "modifierExtension": [{"url": "u:3", "valueString": "deep"}]},
                    {"url": 7, "extension": [{"url": "u:4", "valueInteger": 4}]},
                    {"extension": [{"url": "u:5", "valueBoolean": False}]},
                ],
            }
        ]
    ),
    "nested in a read element": patient(
        extension=[
            {"url": SEAT, "valueInteger": 1},
            {
                "url": PS,
                "valueCode": "archived",
                "id": "s1",
                "extension": [{"url": "since", "valueDate": "2024"}, "odd"],
                "modifierExtension": [{"url": "until", "valueDate": "2025"}],
            },
        ]
    ),
    "primitive holders": patient(
        birthDate="1974-12-25",
        _birthDate={"extension": [{"url": "u:t", "valueDateTime": "1974-12-25T14:35:45-05:00"}]},
        _gender={"id": "g1", "extension": [{"url": "u:g", "valueBoolean": True}]},
        name=[
            {
                "family": "Chalmers",
                "given": ["Peter", "James"],
                "_given": [None, {"extension": [{"url": "u:n", "valueString": "J"}]}],
            },
            {
                "given": ["A", "B"],
                "_given": [{"id": "a"}, {"extension": [{"url": "u:m", "valueString": "B"}]}],
            },
        ],
        contact=[{"name": {"_family": {"extension": [{"url": "u:p", "valueString": "VV"}]}}}],
    ),
    "inside known and unknown elements": (
        "Coverage",
        {
            "resourceType": "Coverage",
            "id": "c1",
            "extension": [{"url": SEAT, "valueString": "top"}],
            "period": {"start": "2011-05-23", "extension": [{"url": "u:p", "valueCode": "x"}]},
            "contact": [{"extension": [{"url": "u:c", "valueCode": "y"}], "note": "kept"}],
        },
    ),
    "keys beside the value": patient(
        extension=[
            {"url": SEAT, "valueString": "s", "valueset": 1, "value": 2, "id": "e1", "foo": [1]},
            {"url": SEAT, "extension": {"url": "not an array"}},
        ]
    ),
}


@pytest.mark.parametrize("case", sorted(EDGES))
def test_hand_picked_extensions_are_rows_unless_a_column_reads_them(case: str) -> None:
    check(*EDGES[case])


def _extras(tables: dict[str, pl.DataFrame]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, frame in tables.items():
        if "extra" in frame.columns:
            for text in frame.get_column("extra").to_list():
                out |= {f"{name}:{k}": v for k, v in (orjson.loads(text) if text else {}).items()}
    return out


def test_what_an_unknown_element_keeps_once_its_extensions_are_rows() -> None:
    # An object that held only extensions is gone (it was not sent empty); a primitive
    # holder array that held only extensions and nulls is gone; in one that holds more,
    # an item that held only extensions is null, in its place.
    ext = [{"url": "u:x", "valueString": "s"}]
    record = {
        "resourceType": "Patient",
        "id": "p1",
        "birthDate": "1974-12-25",
        "_birthDate": {"extension": ext},
        "_gender": {"id": "g1", "extension": ext},
        "photo": {},
        "name": [
            {"given": ["A", "B"], "_given": [None, {"extension": ext}]},
            {"given": ["A", "B"], "_given": [{"id": "a"}, {"extension": ext}]},
            {"given": ["A", "B"], "_given": [{"extension": ext}, {"extension": ext}]},
        ],
        "contact": [{"extension": ext}, {"name": {"_family": {"extension": ext}}, "gender": "x"}],
    }
    tables = flatten_tables("Patient", [bundle(record)])
    assert _extras(tables) == {
        "Patient:_gender": {"id": "g1"},
        "Patient:photo": {},
        "Patient:contact": [None, {"gender": "x"}],
        "patient_name:name[1]._given": [{"id": "a"}, None],
    }
    paths = tables["patient_extension"].get_column("path").to_list()
    assert paths == [
        "birthDate",
        "gender",
        "name[0].given[1]",
        "name[1].given[1]",
        "name[2].given[0]",
        "name[2].given[1]",
        "contact[0]",
        "contact[1].name.family",
    ]


# ------------------------------------------------------------------ the value column's text

TEXTS: list[tuple[str, Any, str | None]] = [
    # A Period by its bounds, either absent or null.
    ("valuePeriod", {"start": "2020-01-01"}, "2020-01-01/"),
    ("valuePeriod", {"end": "2021-06-30"}, "/2021-06-30"),
    ("valuePeriod", {"start": None, "end": "2021"}, "/2021"),
    ("valuePeriod", {"start": "2020", "end": None}, "2020/"),
    # A CodeableConcept by its first coding's code; an object with its own code is read
    # by that code; a coding list that gives no code falls back to the other keys.
    ("valueCodeableConcept", {"coding": [{"code": "a"}, {"code": "b"}], "text": "T"}, "a"),
    ("valueCodeableConcept", {"coding": [{"code": "a"}], "code": "own"}, "own"),
    ("valueCodeableConcept", {"coding": [], "text": "T"}, "T"),
    ("valueCodeableConcept", {"coding": ["a"], "text": "T"}, "T"),
    ("valueCodeableConcept", {"coding": [{"code": 5}], "text": "T"}, "T"),
    ("valueCodeableConcept", {"coding": [{"display": "D"}], "text": "T"}, "T"),
    ("valueCodeableConcept", {"coding": "a", "text": "T"}, "T"),
    # Other objects: the first of value, code, reference, url, text, display, family, id
    # that is a text or a number (a number as JSON; a boolean is no text).
    ("valueQuantity", {"value": 5, "code": "c"}, "5"),
    ("valueQuantity", {"value": 1.5, "unit": "kg"}, "1.5"),
    ("valueQuantity", {"value": True, "code": "c"}, "c"),
    ("valueQuantity", {"value": None, "code": "c"}, "c"),
    ("valueReference", {"display": "D", "reference": "R"}, "R"),
    ("valueAttachment", {"title": "A", "url": "U", "text": "T"}, "U"),
    ("valueAnnotation", {"display": "D", "text": "T"}, "T"),
    ("valueContactPoint", {"display": "D", "family": "F"}, "D"),
    ("valueHumanName", {"id": "i", "family": "F"}, "F"),
    ("valueMeta", {"id": 3}, "3"),
    ("valueRange", {"low": {"value": 1}}, None),
    ("valueRatio", {}, None),
    # Numbers as JSON, exactly: FHIR's decimal has no bound (an integer beyond 64 bits
    # failed the whole read, orjson refusing to write it).
    ("valueDecimal", 2**70, str(2**70)),
    ("valueQuantity", {"value": -(2**70), "unit": "mg"}, str(-(2**70))),
    ("valueQuantity", {"value": 1e16}, "1e16"),
    ("valueString", None, None),
    # Primitives as sent; a number or boolean as JSON; an array is no text.
    ("valueBoolean", True, "true"),
    ("valueInteger", 0, "0"),
    ("valueDecimal", 2.5, "2.5"),
    ("valueString", "", ""),
    ("valueString", ["a", "b"], None),
]


@pytest.mark.parametrize(("key", "value", "text"), TEXTS)
def test_the_value_column_reads_each_shape(key: str, value: Any, text: str | None) -> None:
    record = {"resourceType": "Patient", "id": "p1", "extension": [{"url": "u:x", key: value}]}
    (row,) = flatten("Patient", [bundle(record)], table="patient_extension").to_dicts()
    assert row["value"] == text
    assert json.dumps(json.loads(row["value_json"])) == json.dumps(value)  # exact
    assert row["value_type"] == fhir_type(key)


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        ("valueHumanName", "HumanName"),
        ("valueCodeableConcept", "CodeableConcept"),
        ("valueDateTime", "dateTime"),
        ("valueBase64Binary", "base64Binary"),
        ("valueUnsignedInt", "unsignedInt"),
        ("valueUuid", "uuid"),
        ("valueOid", "oid"),
        ("valueId", "id"),
        ("valueUrl", "url"),
        ("valueCanonical", "canonical"),
    ],
)
def test_the_value_type_is_the_fhir_type_name(key: str, kind: str) -> None:
    record = {"resourceType": "Patient", "id": "p1", "extension": [{"url": "u:x", key: "v"}]}
    (row,) = flatten("Patient", [bundle(record)], table="patient_extension").to_dicts()
    assert (row["value_type"], row["value"]) == (kind, "v")


# ------------------------------------------------------------------ a read extension's odd value


@pytest.mark.parametrize("url", ["patient-status", PS, "http://example.org/x/patient-status"])
def test_a_read_extension_with_a_wrong_type_names_its_column(url: str) -> None:
    record = {"resourceType": "Patient", "id": "p1", "extension": [{"url": url, "valueCode": 5}]}
    frame = flatten("Patient", [bundle(record)])
    assert frame.get_column("status").to_list() == [None]
    assert orjson.loads(frame.get_column("invalid")[0]) == [
        {"path": "extension[0].valueCode", "column": "status", "value": 5}
    ]
    assert flatten("Patient", [bundle(record)], table="patient_extension").height == 0


def test_a_participant_status_with_a_wrong_type_names_its_column() -> None:
    url = LIVE + "appointment-participant-status"
    appt = {
        "resourceType": "Appointment",
        "id": "a1",
        "participant": [
            {"modifierExtension": [{"url": url, "valueCoding": {"code": 5}}]},
            {"modifierExtension": [{"url": url, "valueCoding": {"code": "booked"}}]},
        ],
    }
    rows = flatten_tables("Appointment", [bundle(appt)])["appointment_participant"]
    assert rows.get_column("status").to_list() == [None, "booked"]
    assert orjson.loads(rows.get_column("invalid")[0]) == [
        {
            "path": "participant[0].modifierExtension[0].valueCoding.code",
            "column": "status",
            "value": 5,
        }
    ]


def test_an_item_with_an_odd_url_key_is_still_read_through_its_form() -> None:
    # Organization.type items are CodeableConcepts read as their first Coding; a stray
    # "url" key in one (not an extension) is an unknown key, and the form still applies.
    org = {
        "resourceType": "Organization",
        "id": "o1",
        "type": [{"coding": [{"code": "a"}], "url": "x"}],
    }
    types = flatten_tables("Organization", [bundle(org)])["organization_type"]
    assert types.get_column("code").to_list() == ["a"]
    assert orjson.loads(types.get_column("extra")[0]) == {"type[0].url": "x"}


# ------------------------------------------------------------------ one table's read


def _main_alone_and_in_full(resource: str, record: dict[str, Any]) -> tuple[dict, dict]:
    alone = flatten(resource, [bundle(record)]).row(0, named=True)
    full = flatten_tables(resource, [bundle(record)])[resource].row(0, named=True)
    return alone, full


def test_a_skipped_array_that_is_not_an_array_is_reported_by_the_main_table_alone() -> None:
    # The main Appointment table reads neither participant nor supportingInformation; it
    # still reports either when it is no array, as the full read does (docs/views.md).
    appt = {
        "participant": {"actor": {"reference": "Patient/1"}},
        "resourceType": "Appointment",
        "id": "a1",
        "supportingInformation": "HealthcareService/1",
        "description": "check-up",
    }
    alone, full = _main_alone_and_in_full("Appointment", appt)
    assert (alone["id"], alone["description"]) == ("a1", "check-up")
    expected = [
        {"path": "participant", "column": None, "value": {"actor": {"reference": "Patient/1"}}},
        {"path": "supportingInformation", "column": None, "value": "HealthcareService/1"},
    ]
    assert orjson.loads(alone["invalid"]) == orjson.loads(full["invalid"]) == expected


def test_skipped_fields_that_are_arrays_or_null_are_not_odd_and_the_rest_is_read() -> None:
    # A skipped field first in the record, then the fields the table reads: all read.
    appt = {
        "participant": [{"actor": {"reference": "Patient/1"}}],
        "supportingInformation": None,
        "resourceType": "Appointment",
        "id": "a1",
        "description": 5,
        "minutesDuration": 30,
    }
    alone, full = _main_alone_and_in_full("Appointment", appt)
    assert (alone["id"], alone["minutes_duration"]) == ("a1", 30)
    expected = [{"path": "description", "column": "description", "value": 5}]
    assert orjson.loads(alone["invalid"]) == orjson.loads(full["invalid"]) == expected
    assert alone["extra"] is None


def test_a_nested_key_named_like_a_skipped_field_is_kept_in_extra() -> None:
    # "participant" is a top-level field the main table skips; inside meta it is an
    # unknown key like any other, kept by path.
    appt = {"resourceType": "Appointment", "id": "a1", "meta": {"participant": [1]}}
    alone, full = _main_alone_and_in_full("Appointment", appt)
    assert orjson.loads(alone["extra"]) == orjson.loads(full["extra"]) == {"meta.participant": [1]}


# ------------------------------------------------------------------ the Conformer at depth


def test_an_extension_container_three_levels_deep_is_read_and_kept_by_its_paths() -> None:
    # No catalogue container sits this deep: a schema written here, as the reader builds
    # them (an extension container read as url plus the value keys its columns read).
    element = pl.Struct({"url": pl.String(), "valueCode": pl.String()})
    item = pl.Struct(
        {"extension": pl.List(element), "modifierExtension": pl.List(element), "note": pl.String()}
    )
    dtype = pl.Struct({"id": pl.String(), "a": pl.Struct({"b": pl.List(item)})})
    conformer = Conformer("Scratch", known_urls={"a.b.extension": {"k": frozenset({"valueCode"})}})
    record = {
        "id": "1",
        "a": {
            "b": [
                {
                    "extension": [
                        {"url": "http://x.org/k", "valueCode": "v"},
                        {"url": "u:other", "valueString": "s"},
                        {"url": "http://x.org/k", "valueCode": 5},
                    ],
                    # a container no column reads a url of: each element a row
                    "modifierExtension": [{"url": "http://x.org/k", "valueCode": "m"}],
                    "note": "n",
                }
            ]
        },
    }
    fixed = conformer.struct(record, dtype, "", "")
    assert fixed == {
        "id": "1",
        "a": {
            "b": [
                {
                    "extension": [
                        {"url": "http://x.org/k", "valueCode": "v"},
                        {"url": "http://x.org/k", "valueCode": None},
                    ],
                    "modifierExtension": [],
                    "note": "n",
                }
            ]
        },
    }
    assert conformer.extensions == [
        {
            "path": "a.b[0]",
            "modifier": False,
            "index": 1,
            "url": "u:other",
            "parent_url": None,
            "value_type": "string",
            "value": "s",
            "value_json": '"s"',
        },
        {
            "path": "a.b[0]",
            "modifier": True,
            "index": 0,
            "url": "http://x.org/k",
            "parent_url": None,
            "value_type": "code",
            "value": "m",
            "value_json": '"m"',
        },
    ]
    assert conformer.problems == [("a.b[0].extension[2].valueCode", "a.b.extension:k.valueCode", 5)]
    assert conformer.extra == {}


def test_extensions_inside_an_unknown_element_deep_down_keep_their_carrier() -> None:
    conformer = Conformer("Scratch")
    dtype = pl.Struct({"id": pl.String()})
    record = {
        "id": "1",
        "x": {"y": {"_z": {"extension": [{"url": "u:1", "valueString": "s"}], "id": "z"}}},
    }
    assert conformer.struct(record, dtype, "", "") == {"id": "1"}
    assert [(r["path"], r["url"]) for r in conformer.extensions] == [("x.y.z", "u:1")]
    assert conformer.extra == {"x": {"y": {"_z": {"id": "z"}}}}


# ------------------------------------------------------------------ pages


def test_a_page_is_bytes_text_or_a_mapping() -> None:
    assert as_bytes(b'{"a":1}') == b'{"a":1}'
    assert as_bytes(bytearray(b"[1]")) == b"[1]"
    assert as_bytes(memoryview(b"[2]")) == b"[2]"
    assert as_bytes('{"name":"Bénédicte"}') == '{"name":"Bénédicte"}'.encode()
    assert orjson.loads(as_bytes({"resourceType": "Bundle", "entry": []})) == {
        "resourceType": "Bundle",
        "entry": [],
    }
    for page, kind in ((5, "int"), (None, "NoneType"), (["x"], "list")):
        with pytest.raises(DataValidationError) as caught:
            as_bytes(page)
        assert str(caught.value) == (
            f"a page must be Bundle JSON as bytes, str or dict, not {kind}"
        )
        assert caught.value.failure_cases is None


def test_one_page_or_many() -> None:
    one = {"resourceType": "Bundle"}
    for page in (b"{}", bytearray(b"{}"), "{}", one):
        assert list(iter_pages(page)) == [page]
    view = memoryview(b"{}")
    assert list(iter_pages(view)) == [view]
    assert list(iter_pages([b"a", "b", one])) == [b"a", "b", one]
    assert list(iter_pages(p for p in ("a", "b"))) == ["a", "b"]
    assert list(iter_pages([])) == []
    with pytest.raises(DataValidationError, match="not int"):
        flatten("Patient", [b'{"resourceType":"Bundle"}', 5])


@pytest.mark.parametrize(
    ("row", "text"),
    [
        ({}, "no issue details"),
        ({"issue": None}, "no issue details"),
        ({"issue": []}, "no issue details"),
        ({"issue": [None, None]}, "no issue details"),
        (
            {"issue": [{"severity": "error", "code": "not-found", "diagnostics": "gone"}]},
            "error/not-found: gone",
        ),
        (
            {"issue": [{"severity": "error", "code": "x", "details": {"text": "why"}}]},
            "error/x: why",
        ),
        (
            {
                "issue": [
                    {"severity": "error", "code": "x", "diagnostics": "d", "details": {"text": "t"}}
                ]
            },
            "error/x: d",
        ),
        ({"issue": [{"severity": "error", "code": "x", "details": None}]}, "error/x:"),
        ({"issue": [{"severity": "error", "code": "x", "diagnostics": None}]}, "error/x:"),
        (
            {
                "issue": [
                    {"severity": "error", "code": "a", "diagnostics": "1"},
                    None,
                    {"severity": "warning", "code": "b", "diagnostics": "2"},
                    {"severity": "error", "code": "c", "diagnostics": "3"},
                ]
            },
            "error/a: 1; warning/b: 2",
        ),
    ],
)
def test_an_operation_outcome_is_told_by_its_first_three_issues(row: dict, text: str) -> None:
    assert outcome_text(row) == text


def test_an_operation_outcome_page_is_refused_with_its_issues() -> None:
    outcome = {
        "resourceType": "OperationOutcome",
        "issue": [
            {"severity": "error", "code": "forbidden", "diagnostics": "no permission"},
            {"severity": "information", "code": "informational", "details": {"text": "see log"}},
        ],
    }
    message = (
        "page 0 is an OperationOutcome (an error answer), not a Bundle: "
        "error/forbidden: no permission; information/informational: see log"
    )
    with pytest.raises(DataValidationError, match=re.escape(message)):
        flatten("Patient", [outcome])
