"""The projected read of pages (``read_pages_projected``) against the general path.

``run_view`` on Bundle pages first tries the projected read: a schema of only the
top-level fields the view reads, inferred from a sample of the pages, every page
checked by msgspec against it, the decoded values re-encoded and read by Polars.
Anything it cannot read exactly sends the pages to the general path (Polars'
full read with the exact check, or the Python read that normalises). These tests
run the same view over the same hostile pages both ways and want the same
outcome: the same frame (schema and rows), or the same error, and the same
warnings. A seeded fuzzer mixes wrong JSON types, missing fields, nulls, extra
keys, partial dates, bytes that are not UTF-8, big numbers, other resource types
and pages that are not Bundles; the share of page sets the projected read
accepted is checked too, so that the comparison is not of the general path with
itself.
"""

from __future__ import annotations

import copy
import gc
import json
import random
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from tests.conftest import load_script
from tests.viewdefs.outcomes import Outcome, outcome
from toolkit.cli import app
from toolkit.errors import DataValidationError
from toolkit.viewdefs import load, load_view, resources_frame, run_view
from toolkit.viewdefs.declared import NOT_EXPORTED
from toolkit.viewdefs.definition import root_fields
from toolkit.viewdefs.load import read_pages_projected
from toolkit.viewdefs.runner import evaluate
from toolkit.views import flatten

URL = "https://terminology.halaxy.com/StructureDefinition/location-type"
STATUS = "https://terminology.halaxy.com/StructureDefinition/appointment-participant-status"

VIEW: dict[str, Any] = {
    "resource": "Appointment",
    "where": [{"path": "status.exists().not() or status != 'entered-in-error'"}],
    "select": [
        {
            "column": [
                {"name": "id", "path": "getResourceKey()"},
                {"name": "updated", "path": "meta.lastUpdated", "type": "dateTime"},
                {"name": "description", "path": "description", "type": "string"},
                {"name": "minutes", "path": "minutesDuration", "type": "integer"},
                {"name": "weight", "path": "priority", "type": "decimal"},
                {"name": "booked", "path": "isBooked", "type": "boolean"},
                {
                    "name": "location",
                    "path": f"extension('{URL}').value.ofType(code).first()",
                    "type": "code",
                },
                {
                    "name": "precision",
                    "path": "(start.where(matches('^.{4}$')).replaceMatches('^.*$', 'year') | "
                    "start.where(matches('^.{10}$')).replaceMatches('^.*$', 'day') | "
                    "start.where(matches('^(.{4}|.{10})$').not()).replaceMatches('^.*$', 'time')"
                    ").first()",
                    "type": "string",
                },
                {"name": "note", "path": "comment.ofType(string)", "type": "string"},
            ]
        },
        {
            "forEachOrNull": "participant",
            "column": [
                {"name": "actor", "path": "actor.getReferenceKey()"},
                {
                    "name": "status",
                    "path": f"modifierExtension.where(url = '{STATUS}').value.ofType(Coding).code",
                    "type": "code",
                },
            ],
        },
    ],
}

TEMPORAL: dict[str, Any] = {
    "resource": "Appointment",
    "select": [
        {
            "column": [
                {"name": "id", "path": "id", "type": "id"},
                {
                    "name": "start",
                    "path": "start",
                    "type": "dateTime",
                    "tag": [{"name": "ansi/type", "value": "TIMESTAMP WITH TIME ZONE"}],
                },
            ]
        }
    ],
}


def _appointment(i: int) -> dict[str, Any]:
    return {
        "resourceType": "Appointment",
        "id": f"a{i}",
        "meta": {"lastUpdated": "2026-11-20T10:00:00+11:00", "versionId": "1"},
        "status": "booked",
        "description": f"Visit {i}",
        "start": "2026-01-05T08:00:00+10:00",
        "minutesDuration": 30 + i % 4 * 15,
        "priority": 0.5,
        "isBooked": True,
        "extension": [{"url": URL, "valueCode": "clinic" if i % 2 else "phone"}],
        "participant": [
            {
                "actor": {"reference": f"Patient/{i}", "type": "Patient"},
                "modifierExtension": [
                    {"url": STATUS, "valueCoding": {"system": "x", "code": "accepted"}}
                ],
            },
            {"actor": {"reference": "PractitionerRole/PR-1"}},
        ],
        "supportingInformation": [{"reference": "HealthcareService/7"}],
    }


NOT_UTF8 = "\udcff"  # written into a page as the byte 0xff (see _page)


def _mutations() -> list[Callable[[dict[str, Any]], None]]:
    def setter(*path: Any, value: Any) -> Callable[[dict[str, Any]], None]:
        def apply(res: dict[str, Any]) -> None:
            node: Any = res
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = copy.deepcopy(value)

        return apply

    def dropper(key: str) -> Callable[[dict[str, Any]], None]:
        return lambda res: res.pop(key, None)

    return [
        # wrong JSON types
        setter("minutesDuration", value="60"),
        setter("minutesDuration", value=1.5),
        setter("description", value=5),
        setter("isBooked", value="true"),
        setter("priority", value=2),
        setter("meta", value="2026-01-01"),
        setter("extension", value={"url": URL, "valueCode": "home"}),
        setter("participant", value={"actor": {"reference": "Patient/9"}}),
        setter("participant", 0, "actor", value="Patient/9"),
        setter("extension", 0, "valueCode", value=["a", "b"]),
        # missing fields and nulls
        dropper("meta"),
        dropper("participant"),
        dropper("extension"),
        dropper("status"),
        setter("description", value=None),
        setter("participant", value=None),
        setter("participant", value=[]),
        setter("participant", 0, value=None),
        setter("meta", value={}),
        setter("extension", value=[None]),
        # extra keys, at the top (read or not by the view) and nested
        setter("unknownTopField", value={"a": [1, 2]}),
        setter("comment", value="seen only here"),
        setter("commentString", value="a choice name"),
        setter("participant", 0, "period", value={"start": "2026"}),
        setter("extension", 0, "valueString", value="x"),
        setter("extension", value=[{"url": URL, "valueCoding": {"code": "c"}}]),
        setter("meta", "tag", value=[{"code": "t"}]),
        # partial and odd date-times, other statuses
        setter("start", value="2026"),
        setter("start", value="2026-01-05"),
        setter("start", value="2026-01-05T08:00:00.123+10:00"),
        setter("start", value="not a date"),
        setter("meta", "lastUpdated", value="2026-11"),
        setter("status", value="entered-in-error"),
        # numbers out of range, escapes, text that is not UTF-8
        setter("minutesDuration", value=2**70),
        setter("priority", value=1e308),
        setter("description", value='quote " and \\ and \u00e9 \U0001f600'),
        setter("description", value=f"bad {NOT_UTF8} byte"),
        setter("supportingInformation", 0, "display", value=f"unread {NOT_UTF8}"),
        # another resource type's fields
        setter("resourceType", value="Patient"),
    ]


def _page(resources: list[Any], **extra: Any) -> bytes:
    doc = {"resourceType": "Bundle", "type": "searchset", **extra}
    doc["entry"] = [r if r is None or "resource" in r else {"resource": r} for r in resources]
    text = json.dumps(doc, ensure_ascii=False)
    return text.encode("utf-8", "surrogateescape")


def _odd_pages(rng: random.Random) -> list[bytes]:
    """A page set of 20-40 pages; some resources and pages made hostile."""
    muts = _mutations()
    pages: list[bytes] = []
    n = 0
    share = rng.choice([0.0, 0.0, 0.01, 0.05])  # of resources given one hostile value
    for _ in range(rng.randint(20, 40)):
        resources: list[Any] = []
        for _ in range(rng.randint(0, 6)):
            res = _appointment(n)
            n += 1
            if rng.random() < share:
                rng.choice(muts)(res)
            resources.append(res)
        if rng.random() < 0.02:
            resources.append(rng.choice([None, {"resource": None}, {"fullUrl": "x"}]))
        pages.append(_page(resources))
    roll = rng.random()
    where = rng.randrange(len(pages))
    if roll < 0.04:
        pages[where] = json.dumps({"resourceType": "OperationOutcome", "issue": []}).encode()
    elif roll < 0.07:
        pages[where] = pages[where][:-5]
    elif roll < 0.09:
        pages[where] = b"[" + pages[where] + b"]"
    elif roll < 0.11:
        pages[where] = json.dumps({"resourceType": "Bundle", "type": "searchset"}).encode()
    return pages


def _both(view: dict[str, Any], pages: list[bytes]) -> tuple[Outcome, Outcome]:
    checked = load_view(view)
    fast = outcome(run_view, checked, pages)
    general = outcome(lambda: evaluate(checked, resources_frame(pages, checked.resource, None)))
    return fast, general


def _accepted(view: dict[str, Any], pages: list[bytes]) -> bool:
    checked = load_view(view)
    roots = root_fields(checked)
    assert roots is not None
    return read_pages_projected(pages, checked.resource, roots) is not None


def test_clean_pages_take_the_projected_read_and_give_the_general_rows() -> None:
    pages = [_page([_appointment(10 * p + i) for i in range(10)]) for p in range(30)]
    assert _accepted(VIEW, pages)
    fast, general = _both(VIEW, pages)
    assert fast[0] == "ok" and len(fast[2]) == 600
    assert fast == general
    first, second = fast[2][2:4]  # a1's two participants
    assert first["id"] == second["id"] == "a1"
    assert first["location"] == "clinic" and first["minutes"] == 45 and first["booked"] is True
    assert first["precision"] == "time" and first["status"] == "accepted"
    assert second["actor"] == "PR-1" and second["status"] is None


@pytest.mark.parametrize("index", range(len(_mutations())))
def test_each_hostile_value_outside_the_sample_gives_the_general_outcome(index: int) -> None:
    # 30 pages: the sample is pages 0, 2, 4, ... (about 12 of them) and the last;
    # the value is on page 1, which the sample does not see
    pages = [_page([_appointment(3 * p + i) for i in range(3)]) for p in range(30)]
    res = _appointment(999)
    _mutations()[index](res)
    pages[1] = _page([_appointment(998), res])
    fast, general = _both(VIEW, pages)
    assert fast == general


@pytest.mark.parametrize("index", range(len(_mutations())))
def test_each_hostile_value_in_every_page_gives_the_general_outcome(index: int) -> None:
    pages = []
    for p in range(15):
        res = _appointment(p)
        _mutations()[index](res)
        pages.append(_page([_appointment(100 + p), res]))
    fast, general = _both(VIEW, pages)
    assert fast == general


@pytest.mark.parametrize(
    ("field", "value", "column", "want"),
    [
        ("description", "only on page 1", "description", "only on page 1"),  # top level
        ("commentString", "a choice", "note", "a choice"),  # a choice read by ofType
        ("reasonString", "a choice", "reason", "a choice"),  # a choice read by its name
        # nested: the sample's participants have no modifierExtension
        (
            "participant",
            [{"modifierExtension": [{"url": STATUS, "valueCoding": {"code": "no"}}]}],
            "status",
            "no",
        ),
    ],
)
def test_a_field_the_sample_never_showed_is_read_not_skipped(
    field: str, value: Any, column: str, want: str
) -> None:
    view = copy.deepcopy(VIEW)
    view["select"][0]["column"].append({"name": "reason", "path": "reason", "type": "string"})
    pages = []
    for p in range(30):  # the sample: about every other page, not page 1
        res = _appointment(p)
        res.pop("description")
        for part in res["participant"]:
            part.pop("modifierExtension", None)
        if p == 1:
            res[field] = value
        pages.append(_page([res]))
    frame = run_view(view, pages)
    assert frame.filter(pl.col("id") == "a1").get_column(column).to_list()[0] == want
    assert frame.get_column(column).drop_nulls().unique().to_list() == [want]
    fast, general = _both(view, pages)
    assert fast == general


def test_the_first_of_a_union_is_the_first_item_of_the_first_branch_that_has_one() -> None:
    # (a | b).first() is compiled as a coalesce of the branches' first items; the
    # union indexed with [0] is not, and must agree, including an integer branch
    # beside a decimal one and a collection branch
    pairs = {
        "text": "(description | status | extension.url)",
        "number": "(minutesDuration | priority)",
        "reversed": "(priority | minutesDuration)",
        "many": "(participant.actor.reference | description)",
        "empty": "(nothing | description | nothing)",
    }
    view = {
        "resource": "Appointment",
        "select": [
            {
                "column": [{"name": "id", "path": "id"}]
                + [{"name": f"{k}_first", "path": f"{p}.first()"} for k, p in pairs.items()]
                + [{"name": f"{k}_index", "path": f"{p}[0]"} for k, p in pairs.items()]
            }
        ],
    }
    resources = [_appointment(i) for i in range(4)]
    del resources[1]["description"]
    del resources[1]["minutesDuration"]
    del resources[2]["participant"]
    resources[3]["description"] = "booked"  # the same value as status: the union has one
    frame = run_view(view, [_page(resources)])
    for key in pairs:
        assert (
            frame.get_column(f"{key}_first").to_list() == frame.get_column(f"{key}_index").to_list()
        ), key
    assert frame.get_column("text_first").to_list() == ["Visit 0", "booked", "Visit 2", "booked"]
    assert frame.get_column("number_first").to_list() == [30.0, 0.5, 60.0, 75.0]
    assert frame.get_column("reversed_first").to_list() == [0.5, 0.5, 0.5, 0.5]
    assert frame.get_column("many_first").to_list() == [
        "Patient/0",
        "Patient/1",
        "Visit 2",
        "Patient/3",
    ]


def test_partial_dates_in_a_temporal_column_fail_alike(parts: str) -> None:
    pages = [_page([_appointment(p)]) for p in range(20)]
    fast, general = _both(TEMPORAL, pages)
    assert fast == general and fast[0] == "ok"
    doc = json.loads(pages[3])
    doc["entry"][0]["resource"]["start"] = "2026-01"
    pages[3] = json.dumps(doc).encode()
    fast, general = _both(TEMPORAL, pages)
    assert fast == general
    assert fast[0] == "error" and "2026-01" in fast[2]


def test_errors_in_several_parts_are_those_of_the_whole_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a part that raises makes run_view evaluate all the resources once more: the
    # error counts and shows the bad values of every part, not of the first
    monkeypatch.setattr(load, "_PART", 4)
    monkeypatch.setattr(load, "_CHUNK", 2)
    resources = [_appointment(i) for i in range(20)]
    resources[1]["start"] = "2026-01"
    resources[17]["start"] = "2026"
    pages = [_page(resources[i : i + 2]) for i in range(0, 20, 2)]
    checked = load_view(TEMPORAL)
    roots = root_fields(checked)
    assert roots is not None
    split = load.read_parts_projected(pages, checked.resource, roots, None)
    assert split is not None and len(split) == 5
    with pytest.raises(DataValidationError, match=r"2 value\(s\).*'2026-01', '2026'"):
        run_view(TEMPORAL, pages)


def test_parts_give_the_rows_of_one_evaluation_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # forEachOrNull rows, the where filter and the row order across parts of 7
    resources = [_appointment(i) for i in range(50)]
    for i in range(0, 50, 9):
        resources[i]["status"] = "entered-in-error"
    pages = [_page(resources[i : i + 3]) for i in range(0, 50, 3)]
    whole = run_view(VIEW, pages)
    monkeypatch.setattr(load, "_PART", 7)
    monkeypatch.setattr(load, "_CHUNK", 2)
    checked = load_view(VIEW)
    roots = root_fields(checked)
    assert roots is not None
    split = load.read_parts_projected(pages, checked.resource, roots, None)
    assert split is not None and len(split) == 6
    assert_frame_equal(run_view(VIEW, pages), whole)
    assert whole.height == 2 * (50 - 6)


@pytest.fixture(params=["one part", "parts of 5"])
def parts(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The projected read in one part, or in parts of 5 resources (chunks of 3).

    ``run_view`` evaluates each part on a reader thread while the next is decoded;
    with the default sizes (some 40,000 resources a part) these page sets fit in one.
    """
    if request.param != "one part":
        monkeypatch.setattr(load, "_PART", 5)
        monkeypatch.setattr(load, "_CHUNK", 3)
    return str(request.param)


def test_fuzzed_page_sets_give_the_general_outcome(parts: str) -> None:
    rng = random.Random(27)
    accepted = 0
    kinds: set[str] = set()
    for _ in range(60):
        pages = _odd_pages(rng)
        fast, general = _both(VIEW, pages)
        assert fast == general
        kinds.add(fast[0])
        accepted += _accepted(VIEW, pages)
    # both the projected read and the fallback were exercised, and both outcomes seen
    assert 10 <= accepted <= 50, accepted
    assert kinds == {"ok", "error"}


def _bench_pages(n: int, odd_share: float) -> list[bytes]:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_frames.py"
    module = load_script(path, "_bench_frames_for_fast_read")
    pages: list[bytes] = module.pages(n, 100, seed=3, odd_share=odd_share)
    return pages


def test_the_exported_appointment_view_gives_the_reader_table_on_bench_pages(
    tmp_path: Path,
) -> None:
    done = CliRunner().invoke(app, ["views", "export", "--out", str(tmp_path)])
    assert done.exit_code == 0, done.output
    view = json.loads((tmp_path / "Appointment.json").read_text())
    # 5,000 Appointments: several reader threads' blocks, chunks of re-encoded resources
    pages = _bench_pages(5_000, 0.0)
    assert _accepted(view, pages)
    got = run_view(view, pages)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = flatten("Appointment", pages, table="Appointment")
    want = want.drop([c for c in NOT_EXPORTED if c in want.columns])
    assert got.schema == want.schema
    assert got.height == 5_000
    assert got.to_dicts() == want.to_dicts()
    # with 1 % odd values the projected read gives way, and the runner still agrees
    odd = _bench_pages(2_000, 0.01)
    fast, general = _both(view, odd)
    assert fast == general


@pytest.mark.parametrize("case", ["clean", "a page refused", "an error", "collector off"])
def test_the_cycle_collector_is_paused_while_decoding_and_restored(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the decode pauses Python's cycle collector (load._collector_paused); whatever
    # happens, the caller finds it as it left it
    pages = [_page([_appointment(3 * p + i) for i in range(3)]) for p in range(20)]
    if case == "a page refused":
        pages[15] = _page([{"resourceType": "Appointment", "id": 5}])
    during: list[bool] = []
    check = load._check_page

    def spy(raw: bytes, *args: Any) -> Any:
        during.append(gc.isenabled())
        if case == "an error" and len(during) == 10:
            raise KeyboardInterrupt
        return check(raw, *args)

    monkeypatch.setattr(load, "_check_page", spy)
    checked = load_view(VIEW)
    roots = root_fields(checked)
    assert roots is not None
    was = gc.isenabled()
    try:
        if case == "collector off":
            gc.disable()
        if case == "an error":
            with pytest.raises(KeyboardInterrupt):
                load.read_parts_projected(pages, checked.resource, roots, None)
        else:
            got = load.read_parts_projected(pages, checked.resource, roots, None)
            assert (got is None) == (case == "a page refused")
        assert during and not any(during)
        assert gc.isenabled() == (case != "collector off")
    finally:
        if was:
            gc.enable()


NULL_ITEMS_VIEW: dict[str, Any] = {
    "resource": "Patient",
    "select": [
        {"column": [{"name": "id", "path": "id"}]},
        {"column": [{"name": "first", "path": "telecom.value.first()"}]},
        {"column": [{"name": "n", "path": "telecom.count()", "type": "integer"}]},
        {"forEach": "telecom", "column": [{"name": "value", "path": "value"}]},
    ],
}


@pytest.mark.parametrize("parts", [1, 40_000])
def test_a_null_item_of_an_array_is_no_item_by_every_read(
    parts: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # FHIR JSON has no null items and to FHIRPath a collection holds none: a null in
    # an array gives no forEach row and is not the first item, whichever read takes
    # the pages (the projected read and Polars' whole read used to keep it as a
    # null element: a row of nulls)
    monkeypatch.setattr(load, "_PART", parts)
    monkeypatch.setattr(load, "_CHUNK", 1)
    clean = [
        {"resourceType": "Patient", "id": f"p{i}", "telecom": [{"value": f"t{i}"}]}
        for i in range(30)
    ]
    hostile = copy.deepcopy(clean)
    hostile[7]["telecom"] = [None, {"value": "t7"}, None]
    pages = [_page(hostile[i : i + 3]) for i in range(0, 30, 3)]
    rows = [{"id": f"p{i}", "first": f"t{i}", "n": 1, "value": f"t{i}"} for i in range(30)]
    assert run_view(NULL_ITEMS_VIEW, pages).to_dicts() == rows
    checked = load_view(NULL_ITEMS_VIEW)
    assert evaluate(checked, resources_frame(pages, "Patient")).to_dicts() == rows
    assert evaluate(checked, resources_frame(hostile, "Patient")).to_dicts() == rows
    # the exact checks refuse the pages with the null items, and only those
    roots = root_fields(checked)
    assert roots is not None
    assert read_pages_projected(pages, "Patient", roots) is None
    assert load.read_pages(pages, "Patient") is None
    clean_pages = [_page(clean[i : i + 3]) for i in range(0, 30, 3)]
    assert read_pages_projected(clean_pages, "Patient", roots) is not None
    assert load.read_pages(clean_pages, "Patient") is not None


def test_a_nested_field_the_view_reads_but_the_sample_never_showed_is_not_skipped() -> None:
    # the projected read keeps of each element only the children the view reads
    # (toolkit.viewdefs.reads); a child it reads that no sampled page had (here
    # name.given, on page 1, which the sample of 30 pages skips) must send the pages to
    # the general read, not be skipped as a key the view does not read
    view = {
        "resource": "Patient",
        "select": [
            {"column": [{"name": "id", "path": "id"}]},
            {
                "forEach": "name",
                "column": [
                    {"name": "family", "path": "family"},
                    {"name": "given", "path": "given.first()"},
                ],
            },
        ],
    }

    def patient(n: int) -> dict[str, Any]:
        name: dict[str, Any] = {"family": f"f{n}", "use": "official"}
        if n == 15:
            name["given"] = ["g"]
        return {"resourceType": "Patient", "id": f"p{n}", "name": [name]}

    pages = [_page([patient(10 * p + i) for i in range(10)]) for p in range(30)]
    assert 1 not in {int(i * len(pages) / load._SAMPLE_PAGES) for i in range(12)}
    frame = run_view(view, pages)
    general = evaluate(load_view(view), resources_frame(pages, "Patient", None))
    assert_frame_equal(frame, general)
    assert frame.filter(pl.col("id") == "p15").get_column("given").to_list() == ["g"]
