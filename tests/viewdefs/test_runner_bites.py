"""The runner's semantics, each on empty, missing, null and repeated input.

Every expected row here is worked out by hand from the SQL-on-FHIR v2
specification (ViewDefinition: ``select``, ``column``, ``forEach``,
``forEachOrNull``, ``repeat``, ``unionAll``, ``where``, ``constant``,
``%rowIndex``) and FHIRPath's rules, never read back from the runner:

- a ``where`` keeps a resource only when its path is ``true`` (false and empty
  drop it), and several ``where`` must all hold;
- ``forEach`` gives one row per item, none for an empty or absent collection;
  ``forEachOrNull`` gives one row of nulls there (``%rowIndex`` 0);
- a select's own columns, then its nested selects, then its ``unionAll``: rows
  are their cross product per focus, so a nested select with no row removes the
  focus' rows;
- ``unionAll`` gives each branch's rows, branch after branch, for each focus;
- ``repeat`` gives every item its paths reach at any depth, depth first, with
  ``%rowIndex`` counting them per resource;
- ``%rowIndex`` is the item's 0-based place in its own iteration, 0 at the top,
  inherited by a select without an iteration.

The row order the toolkit promises (docs/views.md: resources in input order, items
in collection order, a ``repeat`` depth first) is checked too: the parts of a
paged read are concatenated on that promise. The records are a few hand-built
resources, so that each mutant's run stays short.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import polars as pl
import pytest

from toolkit.errors import DataValidationError, ViewDefinitionError
from toolkit.viewdefs import load_view, resources_frame, run_view
from toolkit.viewdefs.runner import DEFAULT_MAX_ROWS, evaluate

# a: two names (the first with two given names), two telecoms, female, active
# b: an empty name array, male, inactive
# c: nothing but its id
# d: one name with no family, female, no active
PATIENTS: list[dict[str, Any]] = [
    {
        "resourceType": "Patient",
        "id": "a",
        "active": True,
        "gender": "female",
        "name": [{"family": "F1", "given": ["g1", "g2"]}, {"family": "F2"}],
        "telecom": [{"system": "phone", "value": "t1"}, {"system": "email", "value": "t2"}],
    },
    {"resourceType": "Patient", "id": "b", "active": False, "gender": "male", "name": []},
    {"resourceType": "Patient", "id": "c"},
    {"resourceType": "Patient", "id": "d", "gender": "female", "name": [{"given": ["x"]}]},
]


def _view(*selects: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"resource": "Patient", "select": list(selects), **extra}


def _rows(view: dict[str, Any], records: list[dict[str, Any]] | None = None, **kw: Any) -> Any:
    return run_view(view, PATIENTS if records is None else records, **kw).rows()


ID = {"column": [{"name": "id", "path": "id"}]}


def _col(name: str, path: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "path": path, **more}


# ---------------------------------------------------------------- where


def test_every_where_must_hold_not_only_the_first() -> None:
    female = {"path": "gender = 'female'"}
    active = {"path": "active"}
    assert _rows(_view(ID, where=[female])) == [("a",), ("d",)]
    assert _rows(_view(ID, where=[active])) == [("a",)]
    # d is female but has no active: the second where is empty, which drops it
    assert _rows(_view(ID, where=[female, active])) == [("a",)]
    assert _rows(_view(ID, where=[active, female])) == [("a",)]
    # a third where that holds nowhere leaves nothing, whichever place it takes
    never = {"path": "gender = 'other'"}
    assert _rows(_view(ID, where=[female, active, never])) == []
    assert _rows(_view(ID, where=[never, female, active])) == []


def test_a_where_that_is_empty_or_false_drops_the_resource() -> None:
    assert _rows(_view(ID, where=[{"path": "active = false"}])) == [("b",)]
    # no resource has birthDate: the path is empty for all, and keeps none
    assert _rows(_view(ID, where=[{"path": "birthDate.exists()"}])) == []
    assert _rows(_view(ID, where=[{"path": "{}"}])) == []
    assert _rows(_view(ID, where=[{"path": "name.exists()"}])) == [("a",), ("d",)]


def test_a_where_that_is_not_a_boolean_is_refused_naming_it() -> None:
    view = _view(ID, where=[{"path": "active"}, {"path": "gender"}])
    with pytest.raises(ViewDefinitionError) as caught:
        run_view(view, PATIENTS)
    assert caught.value.path == "where[1].path"
    message = str(caught.value)
    assert message.startswith("where[1].path: a where path must be a boolean")
    assert "a string" in message
    assert message.endswith(", in 'gender'")


# ---------------------------------------------------------------- forEach


def test_for_each_gives_a_row_per_item_and_none_for_empty_or_absent() -> None:
    view = _view(
        ID,
        {"forEach": "name", "column": [_col("i", "%rowIndex"), _col("family", "family")]},
    )
    # b's name is [], c has none: neither gives a row; d's one name has no family
    assert _rows(view) == [("a", 0, "F1"), ("a", 1, "F2"), ("d", 0, None)]


def test_for_each_over_an_empty_array_in_every_record_gives_no_row() -> None:
    records = [{"resourceType": "Patient", "id": "e", "name": []}]
    view = _view(ID, {"forEach": "name", "column": [_col("family", "family", type="string")]})
    frame = run_view(view, records)
    assert frame.rows() == []
    assert frame.schema == pl.Schema({"id": pl.String, "family": pl.String})
    or_null = _view(ID, {"forEachOrNull": "name", "column": [_col("family", "family")]})
    assert _rows(or_null, records) == [("e", None)]


def test_for_each_over_a_path_no_record_has_gives_no_row_or_a_null_row() -> None:
    # no resource has contact: the path is empty for every resource
    each = {"forEach": "contact", "column": [_col("i", "%rowIndex"), _col("n", "name.family")]}
    frame = run_view(_view(ID, each), PATIENTS)
    assert frame.rows() == []
    assert frame.columns == ["id", "i", "n"]
    or_null = {
        "forEachOrNull": "contact",
        "column": [_col("i", "%rowIndex", type="integer"), _col("n", "name.family")],
    }
    frame = run_view(_view(ID, or_null), PATIENTS)
    assert frame.rows() == [("a", 0, None), ("b", 0, None), ("c", 0, None), ("d", 0, None)]
    assert frame.schema["i"] == pl.Int64


def test_for_each_over_a_single_element_gives_one_row_where_it_is_present() -> None:
    view = _view(
        ID,
        {"forEach": "name.first()", "column": [_col("i", "%rowIndex"), _col("f", "family")]},
    )
    assert _rows(view) == [("a", 0, "F1"), ("d", 0, None)]
    view["select"][1]["forEachOrNull"] = view["select"][1].pop("forEach")
    assert _rows(view) == [("a", 0, "F1"), ("b", 0, None), ("c", 0, None), ("d", 0, None)]


def test_for_each_over_primitives_gives_each_value_as_this() -> None:
    view = _view(
        ID, {"forEach": "name.given", "column": [_col("g", "$this"), _col("i", "%rowIndex")]}
    )
    assert _rows(view) == [("a", "g1", 0), ("a", "g2", 1), ("d", "x", 0)]


def test_for_each_or_null_keeps_the_null_rows_in_resource_order() -> None:
    view = _view(
        ID,
        {"forEachOrNull": "name", "column": [_col("i", "%rowIndex"), _col("f", "family")]},
    )
    assert _rows(view) == [
        ("a", 0, "F1"),
        ("a", 1, "F2"),
        ("b", 0, None),
        ("c", 0, None),
        ("d", 0, None),
    ]


def test_for_each_or_null_gives_nulls_of_the_nested_columns_types() -> None:
    view = _view(
        ID,
        {
            "forEachOrNull": "name",
            "column": [_col("f", "family")],
            "select": [
                {"column": [_col("n", "given.count()", type="integer")]},
                {"forEachOrNull": "given", "column": [_col("g", "$this")]},
            ],
        },
    )
    frame = run_view(view, PATIENTS)
    assert frame.rows() == [
        ("a", "F1", 2, "g1"),
        ("a", "F1", 2, "g2"),
        ("a", "F2", 0, None),
        ("b", None, None, None),
        ("c", None, None, None),
        ("d", None, 1, "x"),
    ]
    assert frame.schema == pl.Schema(
        {"id": pl.String, "f": pl.String, "n": pl.Int64, "g": pl.String}
    )


def test_nested_for_each_multiplies_rows_with_an_index_per_level() -> None:
    view = _view(
        ID,
        {
            "forEach": "name",
            "column": [_col("ni", "%rowIndex"), _col("f", "family")],
            "select": [
                {"forEach": "given", "column": [_col("gi", "%rowIndex"), _col("g", "$this")]}
            ],
        },
    )
    # F2 has no given: its row goes (an inner cross product); d's name has one
    assert _rows(view) == [
        ("a", 0, "F1", 0, "g1"),
        ("a", 0, "F1", 1, "g2"),
        ("d", 0, None, 0, "x"),
    ]


def test_a_select_without_iteration_inherits_the_row_index() -> None:
    view = _view(
        ID,
        {
            "forEach": "telecom",
            "select": [{"column": [_col("inherited", "%rowIndex"), _col("v", "value")]}],
        },
    )
    assert _rows(view) == [("a", 0, "t1"), ("a", 1, "t2")]


# ---------------------------------------------------------------- selects and columns


def test_sibling_selects_are_a_cross_product_per_resource() -> None:
    view = _view(
        ID,
        {"forEach": "name", "column": [_col("f", "family")]},
        {"forEach": "telecom", "column": [_col("t", "value")]},
    )
    # only a has both; a sibling with no row removes the resource's rows
    assert _rows(view) == [
        ("a", "F1", "t1"),
        ("a", "F1", "t2"),
        ("a", "F2", "t1"),
        ("a", "F2", "t2"),
    ]


def test_columns_come_in_order_own_then_nested_then_union() -> None:
    view = _view(
        {
            "column": [_col("z", "id"), _col("a", "gender")],
            "select": [{"column": [_col("m", "active")]}, {"column": [_col("b", "'k'")]}],
            "unionAll": [{"column": [_col("u", "'one'")]}, {"column": [_col("u", "'two'")]}],
        },
        where=[{"path": "id = 'a' or id = 'b'"}],
    )
    frame = run_view(view, PATIENTS)
    assert frame.columns == ["z", "a", "m", "b", "u"]
    assert frame.rows() == [
        ("a", "female", True, "k", "one"),
        ("a", "female", True, "k", "two"),
        ("b", "male", False, "k", "one"),
        ("b", "male", False, "k", "two"),
    ]


def test_a_collection_column_is_a_list_on_every_input() -> None:
    view = _view(
        ID,
        {
            "column": [
                _col("families", "name.family", collection=True),
                _col("gender", "gender", collection=True),
                _col("nothing", "birthDate", collection=True, type="date"),
                _col("counts", "name.given.count()", collection=True),
            ]
        },
    )
    frame = run_view(view, PATIENTS)
    assert frame.rows() == [
        ("a", ["F1", "F2"], ["female"], [], [2]),
        ("b", [], ["male"], [], [0]),
        ("c", [], [], [], [0]),
        ("d", [], ["female"], [], [1]),
    ]
    assert frame.schema["families"] == pl.List(pl.String)
    assert frame.schema["nothing"] == pl.List(pl.String)
    assert frame.schema["counts"] == pl.List(pl.Int64)


def test_a_collection_column_takes_its_declared_type() -> None:
    records = [
        {"resourceType": "Patient", "id": "n", "identifier": [{"value": "7"}, {"value": "x"}]},
        {"resourceType": "Patient", "id": "m", "identifier": [{"value": "8"}]},
    ]
    view = _view(ID, {"column": [_col("v", "identifier.value", collection=True, type="integer")]})
    frame = run_view(view, records)
    # a value that is not an integer is null (FHIRPath's failed conversion is empty)
    assert frame.rows() == [("n", [7, None]), ("m", [8])]
    assert frame.schema["v"] == pl.List(pl.Int64)


def test_a_column_without_values_anywhere_is_null_of_its_type() -> None:
    view = _view(
        ID,
        {"column": [_col("b", "birthDate", type="integer"), _col("u", "birthDate")]},
    )
    frame = run_view(view, PATIENTS[:2])
    assert frame.rows() == [("a", None, None), ("b", None, None)]
    assert frame.schema == pl.Schema({"id": pl.String, "b": pl.Int64, "u": pl.String})


def test_a_column_of_one_value_from_a_collection_path_is_that_value() -> None:
    view = _view(ID, {"column": [_col("g", "name.given", type="string")]})
    # d has one given name, c and b none; a's two are refused below
    assert _rows(view, PATIENTS[1:]) == [("b", None), ("c", None), ("d", "x")]
    with pytest.raises(ViewDefinitionError) as caught:
        run_view(view, PATIENTS)
    assert caught.value.path == "select[1].column[0].path"
    assert str(caught.value) == (
        "select[1].column[0].path: 'name.given' gives up to 2 values in one row; "
        "a column that is not 'collection': true must give at most one"
    )


def test_a_column_of_many_values_is_refused_however_many() -> None:
    records = [{"resourceType": "Patient", "id": "t", "name": [{"given": ["1", "2", "3"]}]}]
    view = _view({"column": [_col("id", "id"), _col("g", "name.given", type="integer")]})
    with pytest.raises(ViewDefinitionError, match="gives up to 3 values in one row"):
        run_view(view, records)
    # one value of the collection path, cast to the declared type
    one = [{"resourceType": "Patient", "id": "t", "name": [{"given": ["12"]}]}]
    frame = run_view(view, one)
    assert frame.rows() == [("t", 12)]
    assert frame.schema["g"] == pl.Int64


def test_a_complex_element_cannot_be_a_column() -> None:
    view = _view(ID, {"forEach": "name", "column": [_col("n", "$this")]})
    with pytest.raises(ViewDefinitionError) as caught:
        run_view(view, PATIENTS)
    assert caught.value.path == "select[1].column[0].path"
    assert str(caught.value).startswith(
        "select[1].column[0].path: '$this' gives a complex element, which cannot be a column"
    )
    listed = _view(ID, {"column": [_col("n", "name", collection=True)]})
    with pytest.raises(ViewDefinitionError, match="complex element") as caught:
        run_view(listed, PATIENTS)
    assert caught.value.path == "select[1].column[0].path"


def test_text_becomes_the_declared_type_or_null() -> None:
    records = [
        {"resourceType": "Patient", "id": "1", "gender": "true", "language": "12"},
        {"resourceType": "Patient", "id": "2", "gender": "false", "language": "1.5"},
        {"resourceType": "Patient", "id": "3", "gender": "yes", "language": "x"},
    ]
    view = _view(
        ID,
        {
            "column": [
                _col("flag", "gender", type="boolean"),
                _col("n", "language", type="integer"),
                _col("d", "language", type="decimal"),
                _col("s", "gender", type="string"),
            ]
        },
    )
    frame = run_view(view, records)
    assert frame.rows() == [
        ("1", True, 12, 12.0, "true"),
        ("2", False, None, 1.5, "false"),
        ("3", None, None, None, "yes"),
    ]
    assert frame.schema == pl.Schema(
        {"id": pl.String, "flag": pl.Boolean, "n": pl.Int64, "d": pl.Float64, "s": pl.String}
    )


# ---------------------------------------------------------------- unionAll


def test_union_gives_branch_after_branch_for_each_resource() -> None:
    view = _view(
        ID,
        {
            "unionAll": [
                {"forEach": "telecom", "column": [_col("i", "%rowIndex"), _col("v", "value")]},
                {"forEach": "name", "column": [_col("i", "%rowIndex"), _col("v", "family")]},
            ]
        },
    )
    assert _rows(view) == [
        ("a", 0, "t1"),
        ("a", 1, "t2"),
        ("a", 0, "F1"),
        ("a", 1, "F2"),
        ("d", 0, None),
    ]


def test_union_with_every_branch_empty_gives_no_row() -> None:
    view = _view(
        ID,
        {
            "unionAll": [
                {"forEach": "contact", "column": [_col("v", "name.family")]},
                {"forEach": "name.where(family = 'none')", "column": [_col("v", "family")]},
            ]
        },
    )
    frame = run_view(view, PATIENTS)
    assert frame.rows() == []
    assert frame.columns == ["id", "v"]


def test_a_union_beside_a_nested_select_is_their_cross_product() -> None:
    view = _view(
        {
            "column": [_col("id", "id")],
            "select": [{"forEach": "name", "column": [_col("f", "family")]}],
            "unionAll": [
                {"column": [_col("u", "gender")]},
                {"forEach": "telecom", "column": [_col("u", "system")]},
            ],
        }
    )
    assert _rows(view) == [
        ("a", "F1", "female"),
        ("a", "F1", "phone"),
        ("a", "F1", "email"),
        ("a", "F2", "female"),
        ("a", "F2", "phone"),
        ("a", "F2", "email"),
        ("d", None, "female"),
    ]


def test_a_union_nested_in_a_union_branch_keeps_its_order() -> None:
    view = _view(
        ID,
        {
            "unionAll": [
                {
                    "unionAll": [
                        {"column": [_col("v", "'first'")]},
                        {"forEach": "name.given", "column": [_col("v", "$this")]},
                    ]
                },
                {"column": [_col("v", "'last'")]},
            ]
        },
    )
    assert _rows(view, [PATIENTS[0], PATIENTS[2]]) == [
        ("a", "first"),
        ("a", "g1"),
        ("a", "g2"),
        ("a", "last"),
        ("c", "first"),
        ("c", "last"),
    ]


# ---------------------------------------------------------------- repeat

QR: dict[str, Any] = {
    "resourceType": "QuestionnaireResponse",
    "id": "q1",
    "item": [
        {
            "linkId": "1",
            "item": [
                {"linkId": "1.1", "answer": [{"item": [{"linkId": "1.1.a"}]}]},
                {"linkId": "1.2", "item": [{"linkId": "1.2.1"}]},
            ],
        },
        {"linkId": "2", "answer": [{"item": [{"linkId": "2.a", "item": [{"linkId": "2.a.1"}]}]}]},
    ],
}
QR2: dict[str, Any] = {
    "resourceType": "QuestionnaireResponse",
    "id": "q2",
    "item": [{"linkId": "x"}],
}
QR_EMPTY: dict[str, Any] = {"resourceType": "QuestionnaireResponse", "id": "q3", "item": []}
QR_NONE: dict[str, Any] = {"resourceType": "QuestionnaireResponse", "id": "q4"}


def _qr_view(*paths: str, **select: Any) -> dict[str, Any]:
    return {
        "resource": "QuestionnaireResponse",
        "select": [
            ID,
            {
                "repeat": list(paths),
                "column": [_col("i", "%rowIndex", type="integer"), _col("link", "linkId")],
                **select,
            },
        ],
    }


def _depth_first(node: dict[str, Any], paths: list[str]) -> list[str]:
    """FHIRPath's repeat(), depth first, written plainly: each item, then what it reaches."""
    out: list[str] = []
    for path in paths:
        items: list[dict[str, Any]] = [node]
        for step in path.split("."):
            items = [child for item in items for child in item.get(step, [])]
        for item in items:
            out.append(item["linkId"])
            out.extend(_depth_first(item, paths))
    return out


def test_repeat_reaches_every_item_depth_first_by_each_path() -> None:
    paths = ["item", "answer.item"]
    expected = _depth_first(QR, paths)
    assert expected == ["1", "1.1", "1.1.a", "1.2", "1.2.1", "2", "2.a", "2.a.1"]
    rows = _rows(_qr_view(*paths), [QR, QR2, QR_EMPTY, QR_NONE])
    assert rows == [("q1", i, link) for i, link in enumerate(expected)] + [("q2", 0, "x")]
    # the first path alone: answers are not followed
    rows = _rows(_qr_view("item"), [QR, QR2])
    expected_items = _depth_first(QR, ["item"])
    assert expected_items == ["1", "1.1", "1.2", "1.2.1", "2"]
    assert rows == [*(("q1", i, link) for i, link in enumerate(expected_items)), ("q2", 0, "x")]


def test_repeat_follows_a_later_path_where_the_first_gives_nothing() -> None:
    # no item has a nested item: only answer.item goes deeper
    record = {
        "resourceType": "QuestionnaireResponse",
        "id": "q",
        "item": [{"linkId": "1", "answer": [{"item": [{"linkId": "1.a"}]}]}, {"linkId": "2"}],
    }
    assert _depth_first(record, ["item", "answer.item"]) == ["1", "1.a", "2"]
    rows = _rows(_qr_view("item", "answer.item"), [record])
    assert rows == [("q", 0, "1"), ("q", 1, "1.a"), ("q", 2, "2")]
    # the first path's items at the next level are all empty lists, not absent
    record2 = {
        "resourceType": "QuestionnaireResponse",
        "id": "r",
        "item": [
            {"linkId": "1", "item": [], "answer": [{"item": [{"linkId": "1.a", "item": []}]}]}
        ],
    }
    rows = _rows(_qr_view("item", "answer.item"), [record2])
    assert rows == [("r", 0, "1"), ("r", 1, "1.a")]


def test_repeat_over_nothing_gives_no_row_with_typed_columns() -> None:
    for records in ([QR_NONE], [QR_EMPTY, QR_NONE]):
        frame = run_view(_qr_view("item"), records)
        assert frame.rows() == []
        assert frame.schema == pl.Schema({"id": pl.String, "i": pl.Int64, "link": pl.String})


def test_repeat_with_a_nested_for_each_or_null_and_a_where() -> None:
    view = _qr_view("item", "answer.item")
    view["select"][1]["select"] = [
        {"forEachOrNull": "answer", "column": [_col("ai", "%rowIndex")]},
    ]
    rows = run_view(view, [QR]).rows()
    assert rows == [
        ("q1", 0, "1", 0),
        ("q1", 1, "1.1", 0),
        ("q1", 2, "1.1.a", 0),
        ("q1", 3, "1.2", 0),
        ("q1", 4, "1.2.1", 0),
        ("q1", 5, "2", 0),
        ("q1", 6, "2.a", 0),
        ("q1", 7, "2.a.1", 0),
    ]
    filtered = dict(view, where=[{"path": "id = 'q2'"}])
    assert run_view(filtered, [QR, QR2]).rows() == [("q2", 0, "x", 0)]


def _chain(levels: int) -> pl.DataFrame:
    """A resource whose ``a`` nests ``levels`` deep (``v`` = its depth), as a frame."""
    node: dict[str, Any] = {"v": levels}
    for depth in range(levels - 1, 0, -1):
        node = {"v": depth, "a": node}
    return pl.DataFrame({"__c": [{"resourceType": "Basic", "id": "r", "a": node}]})


CHAIN = {
    "resource": "Basic",
    "select": [{"repeat": ["a"], "column": [_col("v", "v"), _col("i", "%rowIndex")]}],
}


def test_repeat_runs_at_its_depth_bound_and_is_refused_beyond() -> None:
    at = evaluate(load_view(CHAIN), _chain(64))
    assert at.get_column("v").to_list() == list(range(1, 65))
    assert at.get_column("i").to_list() == list(range(64))
    with pytest.raises(ViewDefinitionError) as caught:
        evaluate(load_view(CHAIN), _chain(65))
    assert caught.value.path == "select[0].repeat"
    assert str(caught.value) == "select[0].repeat: the repeat goes deeper than 64 levels"


# ---------------------------------------------------------------- constants


def test_constants_are_read_in_where_for_each_and_columns() -> None:
    view = _view(
        ID,
        {
            "forEach": "telecom.where(system = %sys)",
            "column": [_col("v", "value"), _col("k", "%tag"), _col("n", "%n + %rowIndex")],
        },
        constant=[
            {"name": "sys", "valueCode": "email"},
            {"name": "tag", "valueString": "T"},
            {"name": "n", "valueInteger": 10},
            {"name": "g", "valueCode": "female"},
        ],
        where=[{"path": "gender = %g"}],
    )
    assert _rows(view) == [("a", "t2", "T", 10)]


# ---------------------------------------------------------------- the row budget


def test_a_for_each_stops_one_item_past_the_budget_naming_it() -> None:
    view = _view({"forEach": "name.given", "column": [_col("g", "$this")]})
    # a gives 2 items, d 1: 3 items (the frame of the 4 resources is no step)
    assert run_view(view, PATIENTS, max_rows=3).height == 3
    with pytest.raises(ViewDefinitionError) as caught:
        run_view(view, PATIENTS, max_rows=2)
    assert caught.value.path == "select[0].forEach"
    assert str(caught.value) == (
        "select[0].forEach: the items it iterates reaches 3 rows, more than the row budget "
        "of 2 (max_rows); a forEach, repeat or cross product of sibling selects over large "
        "arrays multiplies rows"
    )
    view["select"][0]["forEachOrNull"] = view["select"][0].pop("forEach")
    # forEachOrNull: 3 items and the null items of b and c, 5
    with pytest.raises(ViewDefinitionError, match="reaches 5 rows") as caught:
        run_view(view, PATIENTS, max_rows=4)
    assert caught.value.path == "select[0].forEachOrNull"
    assert run_view(view, PATIENTS, max_rows=5).height == 5


def test_the_budget_counts_the_cross_product_exactly() -> None:
    view = _view(
        {"forEach": "name", "column": [_col("f", "family")]},
        {"forEach": "telecom", "column": [_col("t", "value")]},
    )
    # 3 names (a 2, d 1), 3 rows; 2 telecoms of a, whose product with a's names is 4
    assert run_view(view, PATIENTS, max_rows=4).height == 4
    with pytest.raises(ViewDefinitionError) as caught:
        run_view(view, PATIENTS, max_rows=3)
    assert caught.value.path == "select[1]"
    assert str(caught.value).startswith(
        "select[1]: its cross product with the selects before it reaches 4 rows, "
        "more than the row budget of 3"
    )
    # the ids of 4 resources pass a budget of 4, not one of 3
    with_ids = _view(ID, {"forEach": "telecom", "column": [_col("t", "value")]})
    assert run_view(with_ids, PATIENTS, max_rows=4).height == 2
    with pytest.raises(ViewDefinitionError, match="reaches 4 rows") as caught:
        run_view(with_ids, PATIENTS, max_rows=3)
    assert caught.value.path == "select[0]"


def test_the_budget_counts_a_union_and_its_cross_product() -> None:
    view = _view(
        {
            "column": [_col("id", "id")],
            "select": [{"forEach": "name", "column": [_col("f", "family")]}],
            "unionAll": [
                {"column": [_col("u", "gender")]},
                {"forEach": "telecom", "column": [_col("u", "system")]},
            ],
        }
    )
    records = [PATIENTS[0]]
    # a: 2 names; union 1 + 2 = 3 rows; their product 6
    assert run_view(view, records, max_rows=6).height == 6
    with pytest.raises(ViewDefinitionError) as caught:
        run_view(view, records, max_rows=5)
    assert caught.value.path == "select[0].unionAll"
    assert "select[0].unionAll: its cross product with the selects before it reaches 6" in str(
        caught.value
    )
    with pytest.raises(ViewDefinitionError) as caught:
        run_view(view, records, max_rows=2)
    assert caught.value.path == "select[0].unionAll"
    assert "select[0].unionAll: the unionAll reaches 3 rows" in str(caught.value)


def test_the_budget_counts_every_item_a_repeat_reaches() -> None:
    paths = ["item", "answer.item"]
    view = _qr_view(*paths)
    assert run_view(view, [QR], max_rows=8).height == 8
    with pytest.raises(ViewDefinitionError) as caught:
        run_view(view, [QR], max_rows=7)
    assert caught.value.path == "select[1].repeat"
    assert "select[1].repeat: the items it reaches reaches 8 rows" in str(caught.value)


def test_the_budget_is_the_callers_only_for_that_call() -> None:
    view = load_view(_view(ID, {"forEach": "name.given", "column": [_col("g", "$this")]}))
    frame = resources_frame(PATIENTS, "Patient")
    with pytest.raises(ViewDefinitionError):
        evaluate(view, frame, max_rows=1)
    # the next call has the default budget again, and so has one passing None
    assert evaluate(view, frame).height == 3
    assert evaluate(view, frame, None).height == 3
    assert DEFAULT_MAX_ROWS == 20_000_000


def test_a_budget_of_zero_allows_only_nothing() -> None:
    view = _view(ID)
    assert run_view(view, [], max_rows=0).height == 0
    each = _view({"forEach": "name", "column": [_col("f", "family")]})
    with pytest.raises(ViewDefinitionError, match="reaches 3 rows"):
        run_view(each, PATIENTS, max_rows=0)


# ---------------------------------------------------------------- compiled paths


def test_the_compiled_paths_kept_by_a_view_are_bounded() -> None:
    view = load_view(_view(ID))
    frame = resources_frame(PATIENTS, "Patient")
    for n in range(1024):
        view.compiled[(f"elsewhere{n}", pl.Int8(), True)] = None
    assert evaluate(view, frame).rows() == [("a",), ("b",), ("c",), ("d",)]
    # the 1024 kept were dropped before the view's one column was added
    assert len(view.compiled) == 1
    # under the bound, nothing is dropped
    for n in range(1022):
        view.compiled[(f"elsewhere{n}", pl.Int8(), True)] = None
    assert evaluate(view, frame.head(1)).rows() == [("a",)]
    assert len(view.compiled) == 1023


def test_one_view_gives_each_place_its_own_compiled_path() -> None:
    # the same path text at two places and two forEach of one input type
    view = load_view(
        _view(
            ID,
            {"forEach": "name", "column": [_col("f", "family")]},
            {"forEach": "telecom", "column": [_col("t", "value")]},
            where=[{"path": "name.exists()"}, {"path": "telecom.exists()"}],
        )
    )
    frame = resources_frame(PATIENTS, "Patient")
    expected = [("a", "F1", "t1"), ("a", "F1", "t2"), ("a", "F2", "t1"), ("a", "F2", "t2")]
    assert evaluate(view, frame).rows() == expected
    # again from the cache
    assert evaluate(view, frame).rows() == expected


# ---------------------------------------------------------------- temporal columns

DATE_TAG = [{"name": "ansi/type", "value": "DATE"}]
STAMP_TAG = [{"name": "ansi/type", "value": "TIMESTAMP WITH TIME ZONE"}]


def _dated(values: list[str | None]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, value in enumerate(values):
        record: dict[str, Any] = {"resourceType": "Patient", "id": f"p{i}"}
        if value is not None:
            record["birthDate"] = value
            record["deceasedDateTime"] = value
        out.append(record)
    return out


def test_a_date_column_is_parsed_and_a_bad_one_named() -> None:
    view = _view(ID, {"column": [_col("born", "birthDate", type="date", tag=DATE_TAG)]})
    frame = run_view(view, _dated(["2001-02-03", None]))
    assert frame.rows() == [("p0", date(2001, 2, 3)), ("p1", None)]
    assert frame.schema["born"] == pl.Date
    bad = ["2001-02-30", "2001-02", "x", "2001-13-01", "2001-01-01"]
    with pytest.raises(DataValidationError) as caught:
        run_view(view, _dated(bad))
    assert str(caught.value) == (
        "column 'born' (select[1].column[0].tag): 4 value(s) are not a date: "
        "'2001-02-30', '2001-02', 'x'"
    )
    cases = caught.value.failure_cases
    assert cases.rows() == [("born", v) for v in bad[:4]]
    assert cases.columns == ["column", "failure_case"]


def test_a_date_time_column_is_parsed_to_utc_and_a_bad_one_named() -> None:
    view = _view(
        ID, {"column": [_col("at", "deceased.ofType(dateTime)", type="dateTime", tag=STAMP_TAG)]}
    )
    values = [
        "2020-01-02T03:04:05+10:00",
        "2020-01-02T03:04:05.250Z",
        None,
        "2020-01-01T23:00:00-02:30",
    ]
    frame = run_view(view, _dated(values))
    assert frame.get_column("at").to_list() == [
        datetime(2020, 1, 1, 17, 4, 5, tzinfo=UTC),
        datetime(2020, 1, 2, 3, 4, 5, 250000, tzinfo=UTC),
        None,
        datetime(2020, 1, 2, 1, 30, tzinfo=UTC),
    ]
    with pytest.raises(DataValidationError) as caught:
        run_view(view, _dated(["2020-01-02T03:04:05", "2020-01-02", "2020-01-02T03:04:05Z"]))
    assert str(caught.value) == (
        "column 'at' (select[1].column[0].tag): 2 value(s) are not a date-time with a "
        "time zone: '2020-01-02T03:04:05', '2020-01-02'"
    )


# ---------------------------------------------------------------- places named in errors


def test_a_column_path_that_cannot_compile_is_named_with_its_text() -> None:
    view = _view(ID, {"forEach": "name", "column": [_col("f", "family"), _col("x", "family + 1")]})
    with pytest.raises(ViewDefinitionError) as caught:
        run_view(view, PATIENTS)
    assert caught.value.path == "select[1].column[1].path"
    message = str(caught.value)
    assert message.startswith("select[1].column[1].path: ")
    assert message.endswith(", in 'family + 1'")


def test_an_iteration_path_that_cannot_compile_is_named() -> None:
    each = _view(ID, {"forEach": "name.family + 1", "column": [_col("f", "$this")]})
    with pytest.raises(ViewDefinitionError) as caught:
        run_view(each, PATIENTS)
    assert caught.value.path == "select[1].forEach"
    assert str(caught.value).startswith("select[1].forEach: ")
    # the message quotes the path (it quoted '' before)
    assert str(caught.value).endswith(", in 'name.family + 1'")
    or_null = _view(ID, {"forEachOrNull": "gender + 1", "column": [_col("f", "$this")]})
    with pytest.raises(ViewDefinitionError) as caught:
        run_view(or_null, PATIENTS)
    assert caught.value.path == "select[1].forEachOrNull"
    assert str(caught.value).endswith(", in 'gender + 1'")
    repeat = _qr_view("item", "linkId + 1")
    with pytest.raises(ViewDefinitionError) as caught:
        run_view(repeat, [QR])
    assert caught.value.path == "select[1].repeat[1]"
    assert str(caught.value).startswith("select[1].repeat[1]: ")
    assert str(caught.value).endswith(", in 'linkId + 1'")
    nested = _view(
        {"select": [{"unionAll": [ID, {"forEach": "gender + 1", "column": [_col("id", "$this")]}]}]}
    )
    with pytest.raises(ViewDefinitionError) as caught:
        run_view(nested, PATIENTS)
    assert caught.value.path == "select[0].select[0].unionAll[1].forEach"
    assert str(caught.value).endswith(", in 'gender + 1'")


def test_the_resource_is_read_where_it_is_the_focus_and_only_there() -> None:
    # %resource at the top: in a column, a nested select, a union branch, a forEach path
    view = _view(
        {
            "column": [_col("id", "%resource.id")],
            "select": [{"column": [_col("key", "%resource.getResourceKey()")]}],
            "unionAll": [
                {"column": [_col("g", "%resource.gender")]},
                {"forEach": "%resource.telecom", "column": [_col("g", "system")]},
            ],
        },
        where=[{"path": "%resource.id = 'a' or id = 'c'"}],
    )
    assert _rows(view) == [
        ("a", "a", "female"),
        ("a", "a", "phone"),
        ("a", "a", "email"),
        ("c", "c", None),
    ]
    inside = _view(ID, {"forEach": "name", "column": [_col("r", "%resource.id")]})
    with pytest.raises(ViewDefinitionError, match="only supported where the focus") as caught:
        run_view(inside, PATIENTS)
    assert caught.value.path == "select[1].column[0].path"
    # a forEachOrNull's null row is not the resource either
    null_row = _view(ID, {"forEachOrNull": "contact", "column": [_col("r", "%resource.id")]})
    with pytest.raises(ViewDefinitionError, match="only supported where the focus"):
        run_view(null_row, PATIENTS)
    # nor an item of a forEachOrNull, where every resource has one
    items = _view(ID, {"forEachOrNull": "name", "column": [_col("r", "%resource.id")]})
    with pytest.raises(ViewDefinitionError, match="only supported where the focus") as caught:
        run_view(items, PATIENTS[:1])
    assert caught.value.path == "select[1].column[0].path"
    in_repeat = _qr_view("item")
    in_repeat["select"][1]["column"].append(_col("r", "%resource.id"))
    with pytest.raises(ViewDefinitionError, match="only supported where the focus") as caught:
        run_view(in_repeat, [QR])
    assert caught.value.path == "select[1].column[2].path"


def test_a_view_compiles_each_path_once_for_every_run_over_one_input_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from toolkit.viewdefs import runner

    calls: list[str] = []
    real = runner.compile_path

    def counted(path: Any, scope: Any) -> Any:
        calls.append(scope.where)
        return real(path, scope)

    monkeypatch.setattr(runner, "compile_path", counted)
    view = load_view(
        _view(
            ID,
            {"forEach": "name", "column": [_col("f", "family")]},
            where=[{"path": "gender.exists()"}],
        )
    )
    frame = resources_frame(PATIENTS, "Patient")
    first = evaluate(view, frame).rows()
    assert first == [("a", "F1"), ("a", "F2"), ("d", None)]
    assert sorted(calls) == [
        "select[0].column[0].path",
        "select[1].column[0].path",
        "select[1].forEach",
        "where[0].path",
    ]
    calls.clear()
    assert evaluate(view, frame).rows() == first
    assert calls == []


def test_a_many_valued_column_over_no_row_is_empty() -> None:
    view = _view(ID, {"column": [_col("g", "name.given")]}, where=[{"path": "id = 'none'"}])
    frame = run_view(view, PATIENTS)
    assert frame.rows() == []
    assert frame.columns == ["id", "g"]


def test_an_empty_collection_column_has_its_declared_item_type() -> None:
    view = _view(
        ID,
        {
            "column": [
                _col("n", "birthDate", collection=True, type="integer"),
                _col("b", "birthDate", collection=True, type="boolean"),
            ]
        },
    )
    frame = run_view(view, PATIENTS[:1])
    assert frame.rows() == [("a", [], [])]
    assert frame.schema == pl.Schema(
        {"id": pl.String, "n": pl.List(pl.Int64), "b": pl.List(pl.Boolean)}
    )


# ---------------------------------------------------------------- repeat, more shapes


def test_repeat_goes_on_by_a_later_path_where_the_first_has_no_item_at_that_depth() -> None:
    # r1 gives nested items a type; the where keeps only r2, whose items have none,
    # so at r2's first depth the first path reaches nothing and answer.item goes on
    r1 = {
        "resourceType": "QuestionnaireResponse",
        "id": "r1",
        "item": [{"linkId": "n", "item": [{"linkId": "n.1"}]}],
    }
    r2 = {
        "resourceType": "QuestionnaireResponse",
        "id": "r2",
        "item": [{"linkId": "1", "answer": [{"item": [{"linkId": "1.a"}]}]}],
    }
    view = dict(_qr_view("item", "answer.item"), where=[{"path": "id = 'r2'"}])
    assert _depth_first(r2, ["item", "answer.item"]) == ["1", "1.a"]
    assert _rows(view, [r1, r2]) == [("r2", 0, "1"), ("r2", 1, "1.a")]


def test_repeat_puts_the_first_paths_whole_subtree_before_the_next_paths() -> None:
    record = {
        "resourceType": "QuestionnaireResponse",
        "id": "q",
        "item": [
            {
                "linkId": "1",
                "item": [{"linkId": "1.1", "item": [{"linkId": "1.1.1"}]}, {"linkId": "1.2"}],
                "answer": [{"item": [{"linkId": "1.a", "item": [{"linkId": "1.a.1"}]}]}],
            }
        ],
    }
    expected = _depth_first(record, ["item", "answer.item"])
    assert expected == ["1", "1.1", "1.1.1", "1.2", "1.a", "1.a.1"]
    rows = _rows(_qr_view("item", "answer.item"), [record])
    assert rows == [("q", i, link) for i, link in enumerate(expected)]
    # the other way round: answers first
    expected = _depth_first(record, ["answer.item", "item"])
    assert expected == ["1", "1.a", "1.a.1", "1.1", "1.1.1", "1.2"]
    rows = _rows(_qr_view("answer.item", "item"), [record])
    assert rows == [("q", i, link) for i, link in enumerate(expected)]


def test_the_resource_is_not_the_focus_of_a_repeat_path() -> None:
    with pytest.raises(ViewDefinitionError, match="only supported where the focus") as caught:
        run_view(_qr_view("%resource.item"), [QR])
    assert caught.value.path == "select[1].repeat[0]"


def test_a_date_column_refuses_a_date_time_or_another_layout() -> None:
    view = _view(ID, {"column": [_col("born", "birthDate", type="date", tag=DATE_TAG)]})
    for value in ("2001-02-03T04:05:06+00:00", "2001/02/03", "03-02-2001", "20010203"):
        with pytest.raises(DataValidationError, match="1 value\\(s\\) are not a date: ") as caught:
            run_view(view, _dated([value]))
        assert caught.value.failure_cases.rows() == [("born", value)]


def test_the_resource_is_not_the_focus_of_a_repeat_column_even_with_no_item() -> None:
    view = _qr_view("item")
    view["select"][1]["column"].append(_col("r", "%resource.id"))
    for records in ([QR], [QR_NONE]):
        with pytest.raises(ViewDefinitionError, match="only supported where the focus") as caught:
            run_view(view, records)
        assert caught.value.path == "select[1].column[2].path"


def test_an_untyped_column_takes_its_datas_type_at_every_depth_and_branch() -> None:
    # docs/views.md: "A column without a type takes the type of its data". A repeat
    # depth or a unionAll branch where the path has no data used to make it text
    # ("true"), since each depth and branch is evaluated on its own schema.
    record = {
        "resourceType": "QuestionnaireResponse",
        "id": "q",
        "item": [{"linkId": "1", "required": True, "item": [{"linkId": "1.1"}]}],
    }
    repeat = {
        "resource": "QuestionnaireResponse",
        "select": [{"repeat": ["item"], "column": [_col("l", "linkId"), _col("r", "required")]}],
    }
    frame = run_view(repeat, [record])
    assert frame.rows() == [("1", True), ("1.1", None)]
    assert frame.schema == pl.Schema({"l": pl.String, "r": pl.Boolean})
    patient = {
        "resourceType": "Patient",
        "id": "a",
        "name": [{"family": "F"}],
        "communication": [{"preferred": True}],
    }
    union = _view(
        {
            "unionAll": [
                {"forEach": "name", "column": [_col("p", "preferred")]},
                {"forEach": "communication", "column": [_col("p", "preferred")]},
            ]
        }
    )
    frame = run_view(union, [patient])
    assert frame.rows() == [(None,), (True,)]
    assert frame.schema == pl.Schema({"p": pl.Boolean})
    # with no data anywhere, an untyped column is text
    frame = run_view(repeat, [])
    assert frame.schema == pl.Schema({"l": pl.String, "r": pl.String})
    frame = run_view(union, [{"resourceType": "Patient", "id": "b"}])
    assert frame.schema == pl.Schema({"p": pl.String})


def test_the_budget_counts_the_rows_a_join_gives_not_the_sizes_of_its_sides() -> None:
    named = {"resourceType": "Patient", "id": "n", "name": [{"family": "N"}]}
    reached = {"resourceType": "Patient", "id": "t", "telecom": [{"value": "1"}, {"value": "2"}]}
    names = _view({"forEach": "name", "column": [_col("f", "family")]})
    # one name row: the join of the two resources' keys with it gives one row, not two
    assert run_view(names, [named, reached], max_rows=1).rows() == [("N",)]
    both = _view(
        {"forEach": "name", "column": [_col("f", "family")]},
        {"forEach": "telecom", "column": [_col("t", "value")]},
    )
    # n's name and t's telecoms share no resource: the cross product has no row
    assert run_view(both, [named, reached], max_rows=2).rows() == []
    with pytest.raises(ViewDefinitionError, match="reaches 2 rows") as caught:
        run_view(both, [named, reached], max_rows=1)
    assert caught.value.path == "select[1].forEach"
    # a budget of 0 allows a view that gives nothing
    assert run_view(both, [], max_rows=0).rows() == []


def test_a_complex_element_column_says_what_to_name_instead() -> None:
    view = _view({"column": [_col("n", "name.first()")]})
    with pytest.raises(ViewDefinitionError) as caught:
        run_view(view, PATIENTS)
    assert str(caught.value) == (
        "select[0].column[0].path: 'name.first()' gives a complex element, which cannot be "
        "a column: name one of its primitive children"
    )


def test_text_of_a_collection_becomes_booleans_item_by_item() -> None:
    records = [
        {"resourceType": "Patient", "id": "1", "name": [{"given": ["true", "false", "x"]}]},
        {"resourceType": "Patient", "id": "2", "name": [{"given": ["false"]}]},
    ]
    listed = _view(ID, {"column": [_col("b", "name.given", type="boolean", collection=True)]})
    frame = run_view(listed, records)
    assert frame.rows() == [("1", [True, False, None]), ("2", [False])]
    assert frame.schema["b"] == pl.List(pl.Boolean)
    # one value of a collection path, not a collection column
    single = _view(ID, {"column": [_col("b", "name.given", type="boolean")]})
    frame = run_view(single, records[1:])
    assert frame.rows() == [("2", False)]
    assert frame.schema["b"] == pl.Boolean


def test_a_where_path_that_cannot_compile_is_named_with_its_text() -> None:
    view = _view(ID, where=[{"path": "active"}, {"path": "gender + 1"}])
    with pytest.raises(ViewDefinitionError) as caught:
        run_view(view, PATIENTS)
    assert caught.value.path == "where[1].path"
    assert str(caught.value).startswith("where[1].path: ")
    assert str(caught.value).endswith(", in 'gender + 1'")


def test_the_row_index_of_every_iteration_is_an_integer() -> None:
    single = _view({"forEach": "name.first()", "column": [_col("i", "%rowIndex")]})
    many = _view({"forEach": "name", "column": [_col("i", "%rowIndex")]})
    none = _view({"forEachOrNull": "contact", "column": [_col("i", "%rowIndex")]})
    top = _view({"column": [_col("i", "%rowIndex")]})
    for view in (single, many, none, top):
        assert run_view(view, PATIENTS).schema == pl.Schema({"i": pl.Int64})


def test_an_untyped_number_column_holding_integers_and_decimals_by_depth_is_decimal() -> None:
    # each repeat depth has its own schema: an integer at one and a decimal at another
    # are one column of decimals, as FHIRPath's integer converts to decimal
    record = {
        "resourceType": "QuestionnaireResponse",
        "id": "q",
        "item": [{"linkId": "1", "w": 2, "item": [{"linkId": "1.1", "w": 1.5}]}],
    }
    view = {
        "resource": "QuestionnaireResponse",
        "select": [{"repeat": ["item"], "column": [_col("l", "linkId"), _col("w", "w")]}],
    }
    frame = run_view(view, [record])
    assert frame.rows() == [("1", 2.0), ("1.1", 1.5)]
    assert frame.schema["w"] == pl.Float64
