"""Hostile views are refused at load time, as ViewDefinitionError naming the place.

Each case here raised something else before (a raw Polars error, RecursionError,
TypeError) or only after the data had been read.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolkit.errors import PmtkError, ViewDefinitionError
from toolkit.viewdefs import load_view, run_view


def _view(*selects: dict[str, Any]) -> dict[str, Any]:
    return {"resource": "Patient", "select": list(selects)}


def test_union_branches_that_differ_in_collection_are_refused() -> None:
    # one branch a collection column, the other a single value: Polars raised
    # "cannot cast List type" while running it
    view = _view(
        {
            "unionAll": [
                {"column": [{"name": "v", "path": "name.family", "collection": True}]},
                {"column": [{"name": "v", "path": "id"}]},
            ]
        }
    )
    with pytest.raises(ViewDefinitionError) as caught:
        load_view(view)
    assert caught.value.path == "select[0].unionAll[1]"
    assert isinstance(caught.value, PmtkError)
    with pytest.raises(ViewDefinitionError):
        run_view(view, [{"resourceType": "Patient", "id": "p1"}])


RECORDS = [{"resourceType": "Patient", "id": "p1", "gender": "female"}]


@pytest.mark.parametrize(
    "pattern",
    [
        "^(?=f)",  # look-ahead
        "(?<=f)e",  # look-behind
        "(?!m)ale",  # negative look-ahead
        r"(a)\1",  # back-reference
        "(",  # not a regex anywhere
    ],
)
@pytest.mark.parametrize("function", ["matches", "replaceMatches"])
def test_a_regex_polars_cannot_run_is_refused_at_load(pattern: str, function: str) -> None:
    args = f"'{pattern}'" if function == "matches" else f"'{pattern}', 'x'"
    path = f"gender.{function}({args})".replace("\\", "\\\\")
    view = _view({"column": [{"name": "id", "path": "id"}, {"name": "m", "path": path}]})
    with pytest.raises(ViewDefinitionError) as caught:
        load_view(view)
    assert caught.value.path == "select[0].column[1].path"
    assert "regular expression" in str(caught.value)


def test_a_regex_in_a_constant_is_checked_too() -> None:
    view = _view({"column": [{"name": "m", "path": "gender.matches(%p)"}]})
    view["constant"] = [{"name": "p", "valueString": "(?=f)"}]
    with pytest.raises(ViewDefinitionError, match="regular expression"):
        load_view(view)


def test_a_regex_polars_runs_is_kept() -> None:
    view = _view({"column": [{"name": "m", "path": "gender.matches('^f[a-z]+$')"}]})
    assert run_view(view, RECORDS).rows() == [(True,)]


def _nested_parentheses(n: int) -> str:
    return "(" * n + "id" + ")" * n


@pytest.mark.parametrize(
    ("path", "what"),
    [
        (_nested_parentheses(3000), "nests deeper"),
        (".".join(["name"] * 3000), "levels deep"),
        (" | ".join(["id"] * 5000), "levels deep"),
        ("-" * 3000 + "1", "nests deeper"),
        ("id.where(" * 2000 + "true" + ")" * 2000, "nests deeper"),
    ],
    ids=["3000 parentheses", "3000-step path", "5000-term union", "3000 signs", "2000 where"],
)
def test_a_path_too_deep_is_refused_with_its_place(path: str, what: str) -> None:
    for view in (
        _view({"column": [{"name": "x", "path": path}]}),
        {**_view({"column": [{"name": "x", "path": "id"}]}), "where": [{"path": path}]},
        _view({"forEach": path, "column": [{"name": "x", "path": "id"}]}),
    ):
        with pytest.raises(ViewDefinitionError, match=what) as caught:
            load_view(view)
        assert caught.value.path in {
            "select[0].column[0].path",
            "where[0].path",
            "select[0].forEach",
        }


def test_a_path_at_the_bound_runs() -> None:
    # 99 parentheses and a 90-step path still load and run
    view = _view(
        {
            "column": [
                {"name": "a", "path": _nested_parentheses(98)},
                {"name": "b", "path": ".".join(["name"] * 90) + ".exists()"},
            ]
        }
    )
    assert run_view(view, RECORDS).rows() == [("p1", False)]


def test_selects_nested_too_deep_are_refused() -> None:
    inner: dict[str, Any] = {"column": [{"name": "x", "path": "id"}]}
    for _ in range(3000):
        inner = {"select": [inner]}
    with pytest.raises(ViewDefinitionError, match="nested more than"):
        load_view(_view(inner))
    text = '{"resource": "Patient", "select": [' + '{"select": [' * 3000 + "]}" * 3000 + "]}"
    with pytest.raises(ViewDefinitionError):
        load_view(text)


def _wide_record(items: int) -> dict[str, Any]:
    # some 30 kB: one array of many small items
    return {
        "resourceType": "Patient",
        "id": "wide",
        "telecom": [{"system": "phone", "value": f"+61 3 9000 {i:05d}"} for i in range(items)],
    }


CARTESIAN = _view(
    {"column": [{"name": "id", "path": "id"}]},
    {"forEach": "telecom", "column": [{"name": "a", "path": "value"}]},
    {"forEach": "telecom", "column": [{"name": "b", "path": "value"}]},
    {"forEach": "telecom", "column": [{"name": "c", "path": "value"}]},
)


def test_a_cartesian_blow_up_stops_at_the_row_budget_naming_the_select() -> None:
    # three sibling forEach over 500 items: 125 million rows; the budget stops it at
    # the third select, before the join is made, by every read
    record = _wide_record(500)
    page = {"resourceType": "Bundle", "entry": [{"resource": record}]}
    assert len(json.dumps(record)) > 25_000
    for data in ([record], [json.dumps(page)]):
        with pytest.raises(ViewDefinitionError) as caught:
            run_view(CARTESIAN, data)
        assert caught.value.path == "select[3]"
        assert "125,000,000 rows" in str(caught.value)
        assert "row budget of 20,000,000" in str(caught.value)


def test_the_row_budget_is_configurable_and_counts_every_step() -> None:
    record = _wide_record(20)
    assert run_view(CARTESIAN, [record]).height == 8000
    assert run_view(CARTESIAN, [record], max_rows=8000).height == 8000
    with pytest.raises(ViewDefinitionError, match="8,000 rows") as caught:
        run_view(CARTESIAN, [record], max_rows=7999)
    assert caught.value.path == "select[3]"
    # a forEach's own items count too
    with pytest.raises(ViewDefinitionError, match="20 rows") as caught:
        run_view(CARTESIAN, [record], max_rows=19)
    assert caught.value.path == "select[1].forEach"
    # and a unionAll's rows
    union = _view(
        {
            "unionAll": [
                {"forEach": "telecom", "column": [{"name": "v", "path": "value"}]},
                {"forEach": "telecom", "column": [{"name": "v", "path": "system"}]},
            ]
        }
    )
    assert run_view(union, [record], max_rows=40).height == 40
    with pytest.raises(ViewDefinitionError, match="40 rows") as caught:
        run_view(union, [record], max_rows=39)
    assert caught.value.path == "select[0].unionAll"


def _deep_item(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"linkId": f"l{levels}"}
    for i in range(levels - 1, 0, -1):
        node = {"linkId": f"l{i}", "item": [node], "id": f"inner{i}"}
    return node


def _deep_text(levels: int) -> str:
    return '{"linkId": "l", "item": [' * (levels - 1) + '{"linkId": "l"}' + "]}" * (levels - 1)


REPEAT = _view(
    {"column": [{"name": "id", "path": "id"}]},
    {"repeat": ["item"], "column": [{"name": "link", "path": "linkId"}]},
)


@pytest.mark.parametrize("levels", [300, 2000])
@pytest.mark.parametrize("form", ["resources", "one page", "pages"])
def test_a_record_nested_too_deep_is_left_out_with_a_warning(levels: int, form: str) -> None:
    # it raised RecursionError or TypeError (orjson's depth limit) and failed the view
    from toolkit.schemas import PmtkDataWarning

    records = [
        {
            "resourceType": "Patient",
            "id": "p1",
            "item": [{"linkId": "a", "item": [{"linkId": "b"}]}],
        },
        {"resourceType": "Patient", "id": "deep", "item": [_deep_item(levels)]},
        {"resourceType": "Patient", "id": "p2"},
    ]
    data: Any = records
    if form != "resources":
        # written by hand: json.dumps itself cannot nest 2,000 levels
        texts = [json.dumps(r) for r in (records[0], records[2])]
        texts.insert(
            1, '{"resourceType": "Patient", "id": "deep", "item": [' + _deep_text(levels) + "]}"
        )
        entries = ['{"resource": ' + t + "}" for t in texts]
        groups = [entries] if form == "one page" else [[e] for e in entries]
        data = ['{"resourceType": "Bundle", "entry": [' + ", ".join(g) + "]}" for g in groups]
    with pytest.warns(PmtkDataWarning, match="1 Patient resource.*deeper than 64 levels.*: deep"):
        rows = run_view(REPEAT, data).rows()
    assert rows == [("p1", "a"), ("p1", "b")]


def test_a_record_at_the_depth_bound_is_read() -> None:
    # 31 nested items: 63 levels with the resource itself, every item reached
    record = {"resourceType": "Patient", "id": "p1", "item": [_deep_item(31)]}
    rows = run_view(REPEAT, [record]).rows()
    assert rows == [("p1", f"l{i}") for i in range(1, 32)]
    page = json.dumps({"resourceType": "Bundle", "entry": [{"resource": record}]})
    assert run_view(REPEAT, [page]).rows() == rows


def test_cut_deep_entries_keeps_the_others_as_sent() -> None:
    from toolkit.viewdefs.depth import cut_deep_entries

    entries = [
        {"resource": {"resourceType": "Patient", "id": "a", "note": '{["x'}},
        {"resource": {"resourceType": "Patient", "item": [_deep_item(80)], "id": "deep"}},
        {"resource": {"resourceType": "Patient", "id": "c"}},
    ]
    page = json.dumps({"resourceType": "Bundle", "link": [{"url": "x"}], "entry": entries})
    cut = cut_deep_entries(page.encode())
    assert cut is not None
    shallow, ids = cut
    assert ids == ["deep"]
    assert json.loads(shallow) == {
        "resourceType": "Bundle",
        "link": [{"url": "x"}],
        "entry": [entries[0], entries[2]],
    }
    assert cut_deep_entries(b'{"resourceType": "Bundle"}') is None


@pytest.mark.parametrize(
    "path",
    [
        "gender.matches('(?=f)')",
        "gender.replaceMatches('(a)\\\\1', 'x')",
        _nested_parentheses(3000),
    ],
    ids=["look-ahead", "back-reference", "3000 parentheses"],
)
def test_sync_refuses_a_hostile_view_before_it_fetches(path: str, tmp_path: Any) -> None:
    # exit 2 (usage) before any request: the base URL is a port nothing listens on,
    # and the store folder is never made
    from typer.testing import CliRunner

    from toolkit.cli import app

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_view({"column": [{"name": "x", "path": path}]})))
    out = tmp_path / "store"
    args = ["sync", "--out", str(out), "--base-url", "http://127.0.0.1:9", "--view", str(bad)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "select[0].column[0].path" in result.output
    assert "Traceback" not in result.output
    assert not out.exists()
