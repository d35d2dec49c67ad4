"""The SQL-on-FHIR v2 test suite run against this runner, and its report.

The suite (``tests/*.json`` of the FHIR/sql-on-fhir-v2 repository) is a folder
of files, each with ``resources`` and ``tests``; a test has a ``view`` and either
``expect`` (rows, compared in any order), ``expectCount`` or ``expectError``.
:func:`run_suite` runs every test and returns the report in the suite's own
format (``test-report.schema.json``): ``{"basic.json": {"tests": [{"name": ...,
"result": {"passed": true}}]}}``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.errors import PmtkError
from toolkit.viewdefs import run_view

__all__ = ["SuiteCase", "check_case", "iter_cases", "run_suite"]


@dataclass(frozen=True)
class SuiteCase:
    """One test of the suite: the file it is in, its title and tags, and the test itself."""

    file: str
    title: str
    tags: tuple[str, ...]
    test: dict[str, Any]
    resources: list[Any]
    """The test file's resources (dicts), or Bundle pages holding them."""

    @property
    def shareable(self) -> bool:
        """True for tests tagged ``shareable`` (the conformance set)."""
        return "shareable" in self.tags


def iter_cases(folder: str | Path) -> Iterator[SuiteCase]:
    """Every test of the suite in ``folder`` (the folder holding ``*.json``), in file order."""
    for path in sorted(Path(folder).glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        for test in doc.get("tests", []):
            tags = tuple(test.get("tags", []))
            yield SuiteCase(path.name, test["title"], tags, test, doc.get("resources", []))


def _canon(value: Any) -> Any:
    """A value compared by meaning: 5 and 5.0 are equal, key order does not matter."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        number = float(value)
        return round(number, 9) if math.isfinite(number) else number
    if isinstance(value, list):
        return [_canon(v) for v in value]
    if isinstance(value, dict):
        return {k: _canon(v) for k, v in value.items()}
    return str(value)


def _row_key(row: dict[str, Any]) -> str:
    return json.dumps(_canon(row), sort_keys=True)


def check_case(case: SuiteCase) -> str | None:
    """Run one test: None when it passes, else why it failed."""

    test = case.test
    try:
        frame = run_view(test["view"], case.resources)
    except PmtkError as exc:
        if test.get("expectError"):
            return None
        return f"unexpected error: {type(exc).__name__}: {exc}"
    if test.get("expectError"):
        return f"expected an error, got {frame.height} row(s)"
    if "expectColumns" in test and frame.columns != test["expectColumns"]:
        return f"expected columns {test['expectColumns']}, got {frame.columns}"
    rows = frame.to_dicts()
    if "expectCount" in test:
        if len(rows) != test["expectCount"]:
            return f"expected {test['expectCount']} row(s), got {len(rows)}"
        return None
    expected = test.get("expect", [])
    got_keys = sorted(_row_key(r) for r in rows)
    want_keys = sorted(_row_key(r) for r in expected)
    if got_keys != want_keys:
        return f"expected rows {expected}, got {rows}"
    return None


def run_suite(folder: str | Path) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Run every test in ``folder`` and return the report (``test-report.schema.json``)."""
    report: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for case in iter_cases(folder):
        failure = check_case(case)
        result: dict[str, Any] = {"passed": failure is None}
        if failure is not None:
            result["error"] = failure
        report.setdefault(case.file, {"tests": []})["tests"].append(
            {"name": case.title, "result": result}
        )
    return report
