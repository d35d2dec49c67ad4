"""The runner's own contract: inputs it takes, errors before data, types, shapes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from toolkit.errors import DataValidationError, PmtkError, ViewDefinitionError
from toolkit.schemas import PmtkDataWarning
from toolkit.viewdefs import load_view, resources_frame, run_view
from toolkit.viewdefs.compile import _matcher, _replacer

PATIENTS: list[dict[str, Any]] = [
    {
        "resourceType": "Patient",
        "id": "p1",
        "active": True,
        "name": [{"use": "official", "family": "Ng", "given": ["A", "B"]}, {"family": "Li"}],
        "extension": [
            {
                "url": "https://terminology.halaxy.com/StructureDefinition/patient-status",
                "valueString": "current",
            }
        ],
    },
    {"resourceType": "Patient", "id": "p2", "active": False, "name": [{"family": "Wu"}]},
    {"resourceType": "Patient", "id": "p3"},
]
BUNDLE = {
    "resourceType": "Bundle",
    "type": "searchset",
    "entry": [{"resource": r} for r in PATIENTS],
}

VIEW: dict[str, Any] = {
    "resource": "Patient",
    "select": [
        {"column": [{"name": "id", "path": "id", "type": "id"}]},
        {
            "forEachOrNull": "name",
            "column": [
                {"name": "family", "path": "family", "type": "string"},
                {"name": "given", "path": "given", "type": "string", "collection": True},
            ],
        },
    ],
}
ROWS = [
    {"id": "p1", "family": "Ng", "given": ["A", "B"]},
    {"id": "p1", "family": "Li", "given": []},
    {"id": "p2", "family": "Wu", "given": []},
    {"id": "p3", "family": None, "given": []},
]


def test_every_input_form_gives_the_same_rows(tmp_path: Path) -> None:
    page = json.dumps(BUNDLE, indent=2)  # pretty: newlines inside a page are fine
    path = tmp_path / "view.json"
    path.write_text(json.dumps(VIEW))

    class Model(BaseModel):
        resource: str
        select: list[dict[str, Any]]

    for view in (VIEW, json.dumps(VIEW), path, str(path), Model(**VIEW), load_view(VIEW)):
        for data in (
            [page.encode()],
            [page],
            BUNDLE,
            [BUNDLE],
            PATIENTS,
            iter(PATIENTS),
            [page.encode()[: len(page) // 2] + page.encode()[len(page) // 2 :]],
        ):
            frame = run_view(view, data)
            assert frame.to_dicts() == ROWS
            assert frame.schema == pl.Schema(
                {"id": pl.String, "family": pl.String, "given": pl.List(pl.String)}
            )


def test_the_declared_types_are_the_frame_types() -> None:
    view = {
        "resource": "Patient",
        "select": [
            {
                "column": [
                    {"name": "active", "path": "active", "type": "boolean"},
                    {"name": "n", "path": "name.count()", "type": "integer"},
                    {"name": "half", "path": "name.count() / 2", "type": "decimal"},
                    {"name": "flag", "path": "active", "type": "string"},
                    {"name": "untyped", "path": "id"},
                    {"name": "never", "path": "deceased.ofType(boolean)", "type": "boolean"},
                ]
            }
        ],
    }
    frame = run_view(view, PATIENTS)
    assert dict(frame.schema) == {
        "active": pl.Boolean,
        "n": pl.Int64,
        "half": pl.Float64,
        "flag": pl.String,
        "untyped": pl.String,
        "never": pl.Boolean,
    }
    assert frame.get_column("n").to_list() == [2, 1, 0]
    assert frame.get_column("flag").to_list() == ["true", "false", None]


def test_no_resources_gives_every_column_typed() -> None:
    for data in (
        [],
        [{"resourceType": "Bundle", "type": "searchset"}],
        [json.dumps({"resourceType": "Bundle"})],
    ):
        frame = run_view(VIEW, data)
        assert frame.height == 0
        assert frame.columns == ["id", "family", "given"]
        assert frame.schema["given"] == pl.List(pl.String)


def _exploding() -> Iterator[dict[str, Any]]:
    raise AssertionError("the data was read")
    yield {}  # pragma: no cover


@pytest.mark.parametrize(
    ("view", "where", "says"),
    [
        ({"select": VIEW["select"]}, "resource", "needs a resource type"),
        ({"resource": "Patient"}, "select", "non-empty list"),
        (
            {
                "resource": "Patient",
                "select": [{"column": [{"name": "x", "path": "name.frist()"}]}],
            },
            "select[0].column[0].path",
            "did you mean 'first'",
        ),
        (
            {
                "resource": "Patient",
                "select": [{"column": [{"name": "x", "path": "id", "type": "Reference"}]}],
            },
            "select[0].column[0].type",
            "not a FHIR primitive type",
        ),
        (
            {"resource": "Patient", "select": [{}, {"column": [{"name": "x", "path": "id = "}]}]},
            "select[0]",
            "needs a column",
        ),
        (
            {"resource": "Patient", "select": [{"column": [{"name": "x", "path": "id = "}]}]},
            "select[0].column[0].path",
            "is not FHIRPath",
        ),
        (
            {
                "resource": "Patient",
                "select": [{"column": [{"name": "x", "path": "id"}, {"name": "x", "path": "id"}]}],
            },
            "select[0].column[1].name",
            "used twice",
        ),
        (
            {
                "resource": "Patient",
                "select": [{"forEach": "name", "forEachOrNull": "name", "column": []}],
            },
            "select[0]",
            "only one of",
        ),
        (
            {"resource": "Patient", "select": [{"column": [{"name": "1x", "path": "id"}]}]},
            "select[0].column[0].name",
            "must be a letter",
        ),
        (
            {
                "resource": "Patient",
                "select": [{"column": [{"name": "x", "path": "id"}]}],
                "where": [{"path": "%nope"}],
            },
            "where[0].path",
            "unknown constant %nope",
        ),
        (
            {"resource": "Patient", "select": [{"column": [{"name": "x", "path": "ofType()"}]}]},
            "select[0].column[0].path",
            "takes 1 argument",
        ),
    ],
)
def test_a_wrong_view_is_refused_before_any_data_is_read(
    view: dict[str, Any], where: str, says: str
) -> None:
    with pytest.raises(ViewDefinitionError) as err:
        run_view(view, _exploding())
    assert err.value.path == where
    assert says in str(err.value)
    assert str(err.value).startswith(where)
    assert isinstance(err.value, PmtkError) and isinstance(err.value, ValueError)


def test_schema_faults_name_their_path() -> None:
    struct_column = {
        "resource": "Patient",
        "select": [{"column": [{"name": "n", "path": "name.first()"}]}],
    }
    with pytest.raises(ViewDefinitionError, match="complex element") as err:
        run_view(struct_column, PATIENTS)
    assert err.value.path == "select[0].column[0].path"
    not_bool = {**VIEW, "where": [{"path": "id"}]}
    with pytest.raises(ViewDefinitionError, match="must be a boolean") as err:
        run_view(not_bool, PATIENTS)
    assert err.value.path == "where[0].path"
    too_many = {
        "resource": "Patient",
        "select": [{"column": [{"name": "f", "path": "name.family"}]}],
    }
    with pytest.raises(ViewDefinitionError, match="up to 2 values"):
        run_view(too_many, PATIENTS)
    # one value per row is fine without collection
    one = {"resource": "Patient", "select": [{"column": [{"name": "f", "path": "name.family"}]}]}
    assert run_view(one, PATIENTS[1:]).to_dicts() == [{"f": "Wu"}, {"f": None}]


def test_pages_that_are_not_bundles_are_refused_with_their_number() -> None:
    outcome = {
        "resourceType": "OperationOutcome",
        "issue": [{"severity": "error", "code": "forbidden", "diagnostics": "no"}],
    }
    with pytest.raises(DataValidationError, match=r"page 1 is an OperationOutcome.*forbidden"):
        run_view(VIEW, [json.dumps(BUNDLE), json.dumps(outcome)])
    with pytest.raises(DataValidationError, match="page 0 is not JSON"):
        run_view(VIEW, [b"{not json"])
    with pytest.raises(DataValidationError, match="page 0 is not a Bundle"):
        run_view(VIEW, [b"[1, 2]"])


def test_other_resource_types_in_a_page_are_skipped() -> None:
    mixed = {
        "resourceType": "Bundle",
        "entry": [
            {"resource": PATIENTS[2]},
            {"resource": {"resourceType": "Practitioner", "id": "pr1", "name": {"family": "X"}}},
            {"search": {"mode": "include"}},
        ],
    }
    assert run_view(VIEW, [json.dumps(mixed)]).to_dicts() == [ROWS[-1]]


def test_the_spec_name_object_and_the_live_name_array_read_alike() -> None:
    view = {
        "resource": "Practitioner",
        "select": [
            {
                "column": [
                    {
                        "name": "family",
                        "path": "name.where(use = 'official').family.first()",
                        "type": "string",
                    }
                ]
            }
        ],
    }
    spec = [
        {"resourceType": "Practitioner", "id": "a", "name": {"use": "official", "family": "Ng"}}
    ]
    live = [
        {
            "resourceType": "Practitioner",
            "id": "a",
            "name": [{"use": "usual", "family": "N"}, {"use": "official", "family": "Ng"}],
        }
    ]
    assert run_view(view, spec).to_dicts() == run_view(view, live).to_dicts() == [{"family": "Ng"}]


def test_an_object_beside_an_array_reads_as_a_collection_of_one() -> None:
    mixed = [
        {"resourceType": "Practitioner", "id": "a", "name": {"family": "Ng"}},
        {"resourceType": "Practitioner", "id": "b", "name": [{"family": "Li"}, {"family": "Lu"}]},
    ]
    view = {
        "resource": "Practitioner",
        "select": [{"column": [{"name": "f", "path": "name.family", "collection": True}]}],
    }
    for data in (
        mixed,
        [json.dumps({"resourceType": "Bundle", "entry": [{"resource": r} for r in mixed]})],
    ):
        assert run_view(view, data).get_column("f").to_list() == [["Ng"], ["Li", "Lu"]]


def test_an_odd_json_type_is_null_and_reported_never_spreads_to_its_column() -> None:
    # Polars alone would make every actor the JSON text of its object (a string
    # beside objects), and every actor_id null: the check must catch that.
    appointments = [
        {
            "resourceType": "Appointment",
            "id": "a1",
            "participant": [{"actor": {"reference": "Patient/1"}}],
        },
        {
            "resourceType": "Appointment",
            "id": "a2",
            "participant": [{"actor": {"reference": "Patient/2"}}],
        },
        {"resourceType": "Appointment", "id": "a3", "participant": [{"actor": "Patient/3"}]},
    ]
    view = {
        "resource": "Appointment",
        "select": [
            {"column": [{"name": "id", "path": "id"}]},
            {
                "forEach": "participant",
                "column": [{"name": "actor_id", "path": "actor.getReferenceKey()"}],
            },
        ],
    }
    page = json.dumps({"resourceType": "Bundle", "entry": [{"resource": r} for r in appointments]})
    for data in (appointments, [page]):
        with pytest.warns(PmtkDataWarning, match="1 Appointment value") as caught:
            frame = run_view(view, data)
        assert frame.get_column("actor_id").to_list() == ["1", "2", None]
        cases = caught[0].message.failure_cases  # type: ignore[union-attr]
        assert cases.row(0, named=True) == {
            "id": "a3",
            "column": "participant.actor",
            "check": "json_type",
            "failure_case": '"Patient/3"',
        }


def test_the_frame_of_resources_is_one_struct_column() -> None:
    frame = resources_frame([json.dumps(BUNDLE)], "Patient")
    assert frame.columns == ["__c"]
    assert frame.height == 3
    assert isinstance(frame.schema["__c"], pl.Struct)


def test_where_and_boolean_logic_are_three_valued() -> None:
    view = {
        "resource": "Patient",
        "select": [
            {
                "column": [
                    {"name": "id", "path": "id"},
                    {"name": "a_or", "path": "active or name.exists()", "type": "boolean"},
                    {"name": "a_and", "path": "active and name.exists()", "type": "boolean"},
                    {"name": "implies", "path": "active implies name.exists()", "type": "boolean"},
                ]
            }
        ],
        "where": [{"path": "active.exists().not() or active"}],
    }
    assert run_view(view, PATIENTS).to_dicts() == [
        {"id": "p1", "a_or": True, "a_and": True, "implies": True},
        {"id": "p3", "a_or": None, "a_and": False, "implies": None},
    ]


def test_a_key_or_type_only_in_pages_outside_the_sample_is_still_read() -> None:
    # 40 pages: the projected read infers its schema from a sample of them; page 1 is
    # not in it and alone has a nested key and a top-level field the view reads
    def page(i: int, extra: dict[str, Any] | None = None) -> bytes:
        res: dict[str, Any] = {
            "resourceType": "Patient",
            "id": f"p{i}",
            "name": [{"family": f"F{i}"}],
        }
        res.update(extra or {})
        return json.dumps({"resourceType": "Bundle", "entry": [{"resource": res}]}).encode()

    view = {
        "resource": "Patient",
        "select": [
            {
                "column": [
                    {"name": "id", "path": "id"},
                    {"name": "given", "path": "name.given.first()"},
                    {"name": "gender", "path": "gender"},
                    {"name": "active", "path": "active", "type": "boolean"},
                ]
            }
        ],
    }
    pages = [page(i) for i in range(40)]
    pages[1] = page(1, {"name": [{"family": "F1", "given": ["G"]}], "gender": "other"})
    pages[2] = page(2, {"active": "yes"})  # another JSON type than the other three: reported
    for i in (3, 4, 5):
        pages[i] = page(i, {"active": True})
    with pytest.warns(PmtkDataWarning, match="p2 active"):
        frame = run_view(view, pages)
    assert frame.height == 40
    assert frame.row(1) == ("p1", "G", "other", None)
    assert frame.get_column("given").null_count() == 39
    assert frame.get_column("active").to_list()[2:6] == [None, True, True, True]


_TEXTS = st.lists(
    st.none() | st.text(alphabet=st.sampled_from(["a", "1", "-", "é", "\n", "\r", "T", ":"])),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(texts=_TEXTS)
def test_whole_text_replacements_match_the_regex_engine(texts: list[str | None]) -> None:
    # The compiler replaces ^.*$ without a regex (the exported views' precision
    # columns): on any text, line feeds and empty texts included, the result is
    # the regex engine's.
    frame = pl.DataFrame({"t": texts}, schema={"t": pl.String})
    text = pl.col("t")
    fast = frame.select(_replacer("^.*$", "year")(text)).to_series().to_list()
    assert fast == frame.select(text.str.replace_all("^.*$", "year")).to_series().to_list()


def test_other_replacements_still_use_the_regex_engine() -> None:
    frame = pl.DataFrame({"t": ["ab", "abc", None]})
    got = frame.select(_replacer("b(c)", "[$1]")(pl.col("t"))).to_series().to_list()
    assert got == ["ab", "a[c]", None]
    got = frame.select(_replacer("^.*$", "<$0>")(pl.col("t"))).to_series().to_list()
    assert got == ["<ab>", "<abc>", None]


@settings(max_examples=200, deadline=None)
@given(
    texts=_TEXTS,
    pattern=st.sampled_from(
        ["^.{4}$", "^.{0}$", "^.{1}$", "^(.{4}|.{7}|.{10})$", "^(.{2}|.{1})$", "^(.{3})$"]
    ),
)
def test_length_patterns_match_the_regex_engine(texts: list[str | None], pattern: str) -> None:
    # matches() of a pattern that only fixes the length counts characters (the
    # precision columns): on any text, line feeds, multi-byte characters and empty
    # texts included, the result is the regex engine's.
    frame = pl.DataFrame({"t": texts}, schema={"t": pl.String})
    text = pl.col("t")
    fast = frame.select(_matcher(pattern)(text)).to_series().to_list()
    assert fast == frame.select(text.str.contains(pattern)).to_series().to_list()


def test_other_patterns_still_use_the_regex_engine() -> None:
    frame = pl.DataFrame({"t": ["2026", "ab", "2026-01", None]})
    got = frame.select(_matcher("^[0-9]{4}$")(pl.col("t"))).to_series().to_list()
    assert got == [True, False, False, None]
    got = frame.select(_matcher("^.{4}")(pl.col("t"))).to_series().to_list()  # no end anchor
    assert got == [True, False, True, None]


def _shapes() -> dict[str, list[dict[str, Any]]]:
    """Patients whose fields have other JSON shapes from one input to the next."""
    return {
        "arrays": PATIENTS,
        "name an object": [
            {"resourceType": "Patient", "id": "q1", "active": True, "name": {"family": "Ng"}}
        ],
        "active as text": [
            {"resourceType": "Patient", "id": "r1", "active": "false", "name": [{"family": "Li"}]}
        ],
        "family an object": [
            {"resourceType": "Patient", "id": "s1", "name": [{"family": {"text": "Ng"}}]}
        ],
        "no name": [{"resourceType": "Patient", "id": "t1", "active": True}],
    }


SHAPED_VIEW: dict[str, Any] = {
    "resource": "Patient",
    "where": [{"path": "active.exists() or id = 'p3'"}],
    "select": [
        {"column": [{"name": "id", "path": "id", "type": "id"}]},
        {"column": [{"name": "active", "path": "active", "type": "boolean"}]},
        {
            "forEachOrNull": "name",
            "column": [{"name": "family", "path": "family", "type": "string"}],
        },
    ],
}


def _result(view: Any, data: list[dict[str, Any]]) -> Any:
    try:
        return run_view(view, data).to_dicts()
    except ViewDefinitionError as exc:
        return ("refused", exc.path, str(exc))


@pytest.mark.parametrize("bound", [1024, 2])
def test_one_view_over_inputs_of_other_types_gives_what_a_fresh_view_gives(
    bound: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the runner keeps a view's compiled paths by input type (runner._cached); a view
    # used again on other shapes, in any order and after a refusal, must not reuse them
    import toolkit.viewdefs.runner as runner

    monkeypatch.setattr(runner, "_CACHED", bound)
    shapes = _shapes()
    fresh = {name: _result(SHAPED_VIEW, data) for name, data in shapes.items()}
    assert fresh["family an object"][0] == "refused"
    assert fresh["name an object"] == [{"id": "q1", "active": True, "family": "Ng"}]
    assert fresh["active as text"] == [{"id": "r1", "active": False, "family": "Li"}]
    view = load_view(SHAPED_VIEW)
    order = [*shapes, *reversed(shapes), "family an object", "arrays", "family an object"]
    for name in order:
        assert _result(view, shapes[name]) == fresh[name], name
        assert len(view.compiled) <= bound
    assert view.compiled  # it did keep something


_PRECISION = (
    "(t.where(matches('^.{4}$')).replaceMatches('^.*$', 'year')"
    " | t.where(matches('^.{7}$')).replaceMatches('^.*$', 'month')"
    " | t.where(matches('^.{10}$')).replaceMatches('^.*$', 'day')"
    " | t.where(matches('^(.{4}|.{7}|.{10})$').not()).replaceMatches('^.*$', 'time')).first()"
)
FILTERED_MAPS: dict[str, Any] = {
    "resource": "Basic",
    "select": [
        {
            "column": [
                {"name": "precision", "path": _PRECISION, "type": "string"},
                {"name": "swap", "path": "t.where(startsWith('a')).replaceMatches('a', 'b')"},
                {"name": "odd", "path": "t.where(matches('^(.{4}|.{7})$').not()).matches('1')"},
                {"name": "same", "path": "t.where($this = 'aa').endsWith('a')"},
                {
                    "name": "many",
                    "path": "n.where(matches('^.{1}$')).replaceMatches('^.*$', 'x')",
                    "collection": True,
                },
            ]
        }
    ],
}


def _line(text: str) -> bool:
    """Rust's and Python's ``.`` alike: any character but a line feed."""
    return "\n" not in text


def _expected(t: str | None, n: list[str]) -> dict[str, Any]:
    """FILTERED_MAPS' row by Python's regex engine, written from FHIRPath's definitions."""
    if t is None:
        precision = swap = odd = same = None
    else:
        precision = next(
            (
                word
                for size, word in ((4, "year"), (7, "month"), (10, "day"))
                if len(t) == size and _line(t)
            ),
            None,
        )
        if precision is None and not re.fullmatch(r".{4}|.{7}|.{10}", t):
            precision = "time" if _line(t) else t
        swap = t.replace("a", "b") if t.startswith("a") else None
        odd = "1" in t if not re.fullmatch(r".{4}|.{7}", t) else None
        same = t.endswith("a") if t == "aa" else None
    many = ["x" for v in n if re.fullmatch(".", v)]
    return {"precision": precision, "swap": swap, "odd": odd, "same": same, "many": many}


@settings(max_examples=150, deadline=None)
@given(
    texts=st.lists(
        st.tuples(
            st.none() | st.text(alphabet=st.sampled_from(["a", "1", "-", "é", "\n", "T"])),
            st.lists(st.text(alphabet=st.sampled_from(["a", "\n", "é"]), max_size=2), max_size=3),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_a_map_of_a_filtered_value_is_the_map_where_the_filter_holds(
    texts: list[tuple[str | None, list[str]]],
) -> None:
    # x.where(c).f() compiles to f(x) where c holds (compile._map_before_where),
    # which shares work between the precision column's four branches; the rows
    # must be those FHIRPath defines, here computed with Python's regex engine
    resources = []
    for i, (t, n) in enumerate(texts):
        res: dict[str, Any] = {"resourceType": "Basic", "id": f"b{i}", "n": n or ["é"]}
        if t is not None:
            res["t"] = t
        resources.append(res)
    if all(t is None for t, _ in texts):
        resources.append({"resourceType": "Basic", "id": "typed", "t": "a", "n": ["é"]})
        texts = [*texts, ("a", ["é"])]
    got = run_view(FILTERED_MAPS, resources).to_dicts()
    assert got == [_expected(t, n or ["é"]) for t, n in texts]
