"""The official SQL-on-FHIR v2 test suite, every test, and its report file.

The suite lives beside the checkout (``../shared/sql-on-fhir-v2``, from the
FHIR/sql-on-fhir-v2 repository, MIT licence); ``PMTK_SOF_SUITE`` may name another
folder. When it is absent these tests are skipped with a message saying where it
was looked for.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

from tests.viewdefs.outcomes import outcome
from toolkit.viewdefs import View, _read_items, load, load_view, run_view
from toolkit.viewdefs.definition import root_fields
from toolkit.viewdefs.runner import evaluate
from toolkit.viewdefs.suite import SuiteCase, check_case, iter_cases, run_suite

ROOT = Path(__file__).resolve().parents[2]
SUITE = Path(os.environ.get("PMTK_SOF_SUITE", ROOT.parent / "shared" / "sql-on-fhir-v2"))
TESTS = SUITE / "tests"
COMMITTED_REPORT = ROOT / "docs" / "sof-test-report.json"
BUILD_REPORT = ROOT / "build" / "sof-test-report.json"

CASES: list[SuiteCase] = list(iter_cases(TESTS)) if TESTS.is_dir() else []
MISSING = f"the SQL-on-FHIR v2 suite is not at {TESTS} (set PMTK_SOF_SUITE to its folder)"


@pytest.mark.skipif(not CASES, reason=MISSING)
@pytest.mark.parametrize(
    "case", CASES or [None], ids=[f"{c.file}:{c.title}" for c in CASES] or ["absent"]
)
def test_suite_case(case: SuiteCase) -> None:
    failure = check_case(case)
    assert failure is None, f"{case.file} {case.title!r} ({', '.join(case.tags)}): {failure}"


@pytest.mark.skipif(not CASES, reason=MISSING)
def test_suite_has_the_documented_size() -> None:
    # the issue counts 134 tests, 123 of them shareable; a changed suite should be noticed
    assert len(CASES) == 134
    assert sum(c.shareable for c in CASES) == 123


@pytest.mark.skipif(not CASES, reason=MISSING)
def test_report_is_written_valid_and_matches_the_committed_one() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    report = run_suite(TESTS)
    schema = json.loads((SUITE / "test-report.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(report, schema)
    BUILD_REPORT.parent.mkdir(exist_ok=True)
    BUILD_REPORT.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    results = [t["result"]["passed"] for f in report.values() for t in f["tests"]]
    assert len(results) == 134 and all(results)
    committed = json.loads(COMMITTED_REPORT.read_text(encoding="utf-8"))
    assert committed == report, (
        "docs/sof-test-report.json is stale: copy build/sof-test-report.json"
    )


@pytest.mark.skipif(not CASES, reason=MISSING)
def test_the_committed_report_validates_against_the_schema() -> None:
    import jsonschema

    schema = json.loads((SUITE / "test-report.schema.json").read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema)
    validator.check_schema(schema)
    committed = json.loads(COMMITTED_REPORT.read_text(encoding="utf-8"))
    assert list(validator.iter_errors(committed)) == []
    assert sum(len(f["tests"]) for f in committed.values()) == len(CASES)
    # the check can fail: a result without "passed", an unknown key, an empty file entry
    first = next(iter(committed))
    for broken in (
        {first: {"tests": [{"name": "x", "result": {}}]}},
        {first: {"tests": [{"name": "x", "result": {"passed": True}}], "extra": 1}},
        {first: {"tests": []}},
        {first: {"tests": [{"name": 1, "result": {"passed": True}}]}},
    ):
        assert list(validator.iter_errors(broken)), broken


@pytest.mark.skipif(not CASES, reason=MISSING)
def test_every_case_passes_from_pages_read_in_parts_of_one_resource(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # run_view evaluates Bundle pages part by part and joins the parts' rows; with a
    # part per resource, every forEach, repeat, unionAll, where and error of the
    # suite crosses part boundaries, and must still give the expected outcome
    monkeypatch.setattr(load, "_PART", 1)
    monkeypatch.setattr(load, "_CHUNK", 1)
    split = 0
    for case in CASES:
        pages = [
            json.dumps({"resourceType": "Bundle", "entry": [{"resource": r}]})
            for r in case.resources
        ]
        failure = check_case(dataclasses.replace(case, resources=pages))
        assert failure is None, f"{case.file} {case.title!r} from pages in parts: {failure}"
        view = load_view(case.test["view"]) if not case.test.get("expectError") else None
        roots = root_fields(view) if view is not None else None
        if view is not None and roots is not None:
            raw = [p.encode() for p in pages]
            parts = load.read_parts_projected(raw, view.resource, roots, None)
            split += parts is not None and len(parts) > 1
    # the projected read, in several parts, took most of the suite's page sets
    assert split >= 80, split


def test_a_wrong_expectation_fails() -> None:
    # the checker itself can fail: a row too many, a wrong value, a missing error
    resources = [{"resourceType": "Patient", "id": "p1"}]
    view = {"resource": "Patient", "select": [{"column": [{"name": "id", "path": "id"}]}]}
    good = SuiteCase(
        "x.json", "ok", ("shareable",), {"view": view, "expect": [{"id": "p1"}]}, resources
    )
    assert check_case(good) is None
    for test in (
        {"view": view, "expect": [{"id": "p2"}]},
        {"view": view, "expect": [{"id": "p1"}, {"id": "p1"}]},
        {"view": view, "expectError": True},
        {"view": view, "expect": [{"id": "p1"}], "expectColumns": ["x"]},
        {"view": view, "expectCount": 2},
        {"view": {"select": []}, "expect": []},
    ):
        assert check_case(SuiteCase("x.json", "bad", (), test, resources)) is not None


def _mutate(value: Any, rng: random.Random) -> Any:
    """``value`` with one hostile change somewhere inside (a resource's ``resourceType`` kept)."""
    roll = rng.random()
    if isinstance(value, dict):
        keys = [k for k in value if k != "resourceType"]
        if keys and roll < 0.35:
            key = rng.choice(keys)
            value[key] = _mutate(value[key], rng)
        elif roll < 0.5:
            value["zzUnknown"] = rng.choice([1, "x", {"a": 1}, [1], None, True])
        elif keys and roll < 0.65:
            value[rng.choice(keys)] = None
        return value
    if isinstance(value, list):
        if value and roll < 0.5:
            i = rng.randrange(len(value))
            value[i] = _mutate(value[i], rng)
        elif roll < 0.6:
            value.append(None)
        elif value and roll < 0.75:
            return value[0]  # an array given as its single value
        return value
    return rng.choice([value, 5, "5", 1.5, True, None, {"x": value}, [value], "2026-01", 2**70])


@pytest.mark.skipif(not CASES, reason=MISSING)
def test_hostile_suite_resources_give_the_same_outcome_by_every_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every suite view over its resources made hostile (other JSON types, unknown
    # keys, nulls, arrays as single values, empty resources), as Bundle pages of
    # random sizes read in random parts: run_view (the projected read, or the
    # general one when it refuses) must give the general read's rows, errors and
    # warnings. A value of an odd type in a field the view does not read is
    # reported by neither (the general read keeps only the view's fields).
    rng = random.Random(2027)
    compared = refused = 0
    for case in CASES:
        if case.test.get("expectError"):
            continue
        view = load_view(case.test["view"])
        roots = root_fields(view)
        resources = copy.deepcopy(case.resources)
        for res in resources:
            if rng.random() < 0.5:
                _mutate(res, rng)
        resources += rng.choice([[], [{}], [{"resourceType": view.resource}]])
        rng.shuffle(resources)
        size = rng.choice([1, 2, 3, 50])
        pages = [
            json.dumps({"resourceType": "Bundle", "entry": [{"resource": r} for r in chunk]})
            for chunk in (resources[i : i + size] for i in range(0, len(resources), size))
        ]
        part, chunk = rng.choice([(1, 1), (2, 1), (40_000, 2_048)])
        monkeypatch.setattr(load, "_PART", part)
        monkeypatch.setattr(load, "_CHUNK", chunk)
        got = outcome(run_view, view, pages)
        general = outcome(_general, view, pages, roots)
        assert got == general, f"{case.file} {case.title!r}"
        # keeping only the view's fields changes no row and no error
        whole = outcome(_general, view, pages, None)
        assert general[:3] == whole[:3], f"{case.file} {case.title!r}"
        compared += 1
        refused += roots is not None and _refused(pages, view.resource, roots)
    assert compared >= 100 and refused >= 20, (compared, refused)


def _general(view: View, pages: list[str], fields: set[str] | None) -> Any:
    """The general read (pages parsed, resources normalised) and the view over it."""
    return evaluate(view, _read_items(pages, view.resource, fields))


def _refused(pages: list[str], resource_type: str, roots: set[str]) -> bool:
    """True when the projected read sends these pages to the general one."""
    raw = [p.encode() for p in pages]
    return load.read_parts_projected(raw, resource_type, roots, None) is None
