"""The runner's joins of sibling selects, by a gather where each row meets one row.

A resource's own columns beside a ``forEach`` (``id`` beside each participant) are
joined by gathering the one row of each resource beside its items, without a hash
join; anywhere else (an earlier select already multiplied or dropped rows) the join
is the general one. The expected rows are written out by hand from SQL-on-FHIR v2's
rule: sibling selects are a cross product per resource, in the order of the selects.
"""

from __future__ import annotations

from typing import Any

import pytest

from toolkit.errors import ViewDefinitionError
from toolkit.viewdefs import run_view

RECORDS: list[dict[str, Any]] = [
    # two names, no telecom: the first forEach gives 2 rows, the second none
    {"resourceType": "Patient", "id": "a", "name": [{"family": "A1"}, {"family": "A2"}]},
    # no name at all, two telecoms
    {"resourceType": "Patient", "id": "b", "telecom": [{"value": "b1"}, {"value": "b2"}]},
]


def _view(*selects: dict[str, Any]) -> dict[str, Any]:
    return {"resource": "Patient", "select": list(selects)}


def _each(path: str, name: str, column: str, *, or_null: bool = False) -> dict[str, Any]:
    key = "forEachOrNull" if or_null else "forEach"
    return {key: path, "column": [{"name": name, "path": column}]}


ID = {"column": [{"name": "id", "path": "id"}]}


def test_the_resources_columns_meet_each_of_its_items() -> None:
    view = _view(ID, _each("telecom", "t", "value"), _each("name", "n", "family", or_null=True))
    assert run_view(view, RECORDS).rows() == [("b", "b1", None), ("b", "b2", None)]


def test_rows_as_many_as_the_resources_but_not_one_each_take_the_general_join() -> None:
    # The names give 2 rows, both of resource a, beside 2 resources: as many rows as
    # the frame, but not one per resource. Each of a's names meets each of a's telecoms
    # (none), and b has no name: no row at all.
    view = _view(_each("name", "n", "family"), ID, _each("telecom", "t", "value"))
    assert run_view(view, RECORDS).rows() == []
    # with a's telecoms, each name meets each telecom, in order
    both = [{**RECORDS[0], "telecom": [{"value": "a1"}, {"value": "a2"}]}]
    assert run_view(view, both).rows() == [
        ("A1", "a", "a1"),
        ("A1", "a", "a2"),
        ("A2", "a", "a1"),
        ("A2", "a", "a2"),
    ]


def test_the_order_is_the_resources_then_their_items() -> None:
    records = [
        {
            "resourceType": "Patient",
            "id": str(i),
            "name": [{"family": f"{i}-{j}"} for j in range(i)],
        }
        for i in range(4)
    ]
    view = _view(ID, _each("name", "n", "family"))
    assert run_view(view, records).rows() == [
        (str(i), f"{i}-{j}") for i in range(4) for j in range(i)
    ]


def test_the_gathered_join_counts_against_the_row_budget() -> None:
    view = _view(ID, _each("telecom", "t", "value"))
    assert run_view(view, RECORDS, max_rows=2).height == 2
    with pytest.raises(ViewDefinitionError, match="reaches 2 rows") as caught:
        run_view(view, RECORDS, max_rows=1)
    assert caught.value.path in {"select[0]", "select[1]"}


def test_after_a_where_the_kept_resources_meet_their_own_items() -> None:
    # the where drops resource a: the keys of the rest no longer count from 0
    records = [*RECORDS, {"resourceType": "Patient", "id": "c", "telecom": [{"value": "c1"}]}]
    view = {**_view(ID, _each("telecom", "t", "value")), "where": [{"path": "id != 'a'"}]}
    assert run_view(view, records).rows() == [("b", "b1"), ("b", "b2"), ("c", "c1")]
