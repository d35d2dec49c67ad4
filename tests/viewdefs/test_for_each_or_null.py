"""``forEachOrNull`` gives one row of nulls when its collection is empty, by every read.

SQL-on-FHIR v2 (ViewDefinition, "forEachOrNull"): "Same as forEach, but produces a
single row with null values in the nested expression if the collection is empty."
An array that exists but where no item passes a ``where`` is an empty collection
exactly as an absent array is. The runner gave no row at all for it (Polars'
``explode`` drops an empty list unless told otherwise), on every read, since every
read ends in the same iteration; the official suite has no such case.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolkit.viewdefs import load, load_view, resources_frame, run_view
from toolkit.viewdefs.definition import root_fields
from toolkit.viewdefs.runner import evaluate

RECORDS: list[dict[str, Any]] = [
    {
        "resourceType": "Patient",
        "id": "match",
        "gender": "female",
        "name": [{"use": "official", "family": "Ng"}, {"use": "usual", "family": "Li"}],
    },
    # the array exists, no item matches: one row of nulls
    {"resourceType": "Patient", "id": "nomatch", "gender": "male", "name": [{"use": "usual"}]},
    # the array is absent: one row of nulls (the runner already did this)
    {"resourceType": "Patient", "id": "absent", "gender": "other"},
    # the array is empty: one row of nulls
    {"resourceType": "Patient", "id": "empty", "gender": "unknown", "name": []},
]

WHERE_VIEW: dict[str, Any] = {
    "resource": "Patient",
    "select": [
        {"column": [{"name": "id", "path": "id"}]},
        {
            "forEachOrNull": "name.where(use = 'official')",
            "column": [{"name": "family", "path": "family"}],
        },
    ],
}
WHERE_ROWS = [("match", "Ng"), ("nomatch", None), ("absent", None), ("empty", None)]

# a nested select and a unionAll under the forEachOrNull: their columns are null too
NESTED_VIEW: dict[str, Any] = {
    "resource": "Patient",
    "select": [
        {"column": [{"name": "id", "path": "id"}]},
        {
            "forEachOrNull": "name.where(family.exists())",
            "column": [{"name": "use", "path": "use"}],
            "select": [{"column": [{"name": "family", "path": "family"}]}],
        },
    ],
}
NESTED_ROWS = [
    ("match", "official", "Ng"),
    ("match", "usual", "Li"),
    ("nomatch", None, None),
    ("absent", None, None),
    ("empty", None, None),
]

# the x.where(c).f() rewrite of a singleton: gender.where(...).replaceMatches(...)
REWRITE_VIEW: dict[str, Any] = {
    "resource": "Patient",
    "select": [
        {"column": [{"name": "id", "path": "id"}]},
        {
            "forEachOrNull": "gender.where($this = 'female').replaceMatches('fe', 'FE')",
            "column": [{"name": "g", "path": "$this"}],
        },
    ],
}
REWRITE_ROWS = [("match", "FEmale"), ("nomatch", None), ("absent", None), ("empty", None)]

CASES = [(WHERE_VIEW, WHERE_ROWS), (NESTED_VIEW, NESTED_ROWS), (REWRITE_VIEW, REWRITE_ROWS)]


def _pages(records: list[dict[str, Any]], per_page: int) -> list[bytes]:
    chunks = [records[i : i + per_page] for i in range(0, len(records), per_page)]
    return [
        json.dumps({"resourceType": "Bundle", "entry": [{"resource": r} for r in c]}).encode()
        for c in chunks
    ]


@pytest.mark.parametrize(("view", "rows"), CASES)
def test_an_empty_collection_gives_one_row_of_nulls_by_every_read(
    view: dict[str, Any], rows: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = load_view(view)
    roots = root_fields(checked)
    assert roots is not None
    # resources (dicts): the general read
    assert run_view(view, RECORDS).rows() == rows
    pages = _pages(RECORDS, 2)
    # pages: the projected read, evaluated in one part
    assert load.read_pages_projected(pages, "Patient", roots) is not None
    assert run_view(view, pages).rows() == rows
    # Polars' whole read of the pages, checked exact
    assert load.read_pages(pages, "Patient") is not None
    assert evaluate(checked, resources_frame(pages, "Patient")).rows() == rows
    # the general read's normalisation (a single value where others have an array)
    assert evaluate(checked, load.read_resources(RECORDS, "Patient")).rows() == rows
    # part by part: one resource a part, each evaluated alone
    monkeypatch.setattr(load, "_PART", 1)
    monkeypatch.setattr(load, "_CHUNK", 1)
    single = _pages(RECORDS, 1)
    parts = load.read_parts_projected(single, "Patient", roots, lambda f: evaluate(checked, f))
    assert parts is not None and len(parts) == len(RECORDS)
    assert run_view(view, single).rows() == rows


@pytest.mark.parametrize("match", [True, False])
def test_one_record_alone_gives_its_row(match: bool) -> None:
    # a part of only non-matching records (every list empty) gives its rows of nulls too
    record = RECORDS[0] if match else RECORDS[1]
    expected = [("match", "Ng")] if match else [("nomatch", None)]
    assert run_view(WHERE_VIEW, [record]).rows() == expected
    assert run_view(WHERE_VIEW, _pages([record], 1)).rows() == expected


def test_for_each_still_gives_no_row_for_an_empty_collection() -> None:
    view = json.loads(json.dumps(WHERE_VIEW))
    view["select"][1]["forEach"] = view["select"][1].pop("forEachOrNull")
    assert run_view(view, RECORDS).rows() == [("match", "Ng")]
    assert run_view(view, _pages(RECORDS, 2)).rows() == [("match", "Ng")]
