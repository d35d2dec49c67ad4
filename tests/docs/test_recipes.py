"""``docs/architecture.md``'s fault and check recipes, followed on a scratch copy.

Issue 26: the recipes must list exactly the files a change needs. The resource-type
recipe is followed by ``tests/mock/test_name_search_forms.py``; this test follows "Add
a mock fault" and "Add a contract check" together, as a developer would, on a scratch
copy of the repository: a new contract category ``consistency`` with one check (an
Appointment's ``minutesDuration`` agrees with its ``start`` and ``end``) and a fault
profile that breaks exactly that rule. It edits only the files the recipes name, runs
the regenerate command, and then shows that

* the files that changed are exactly the ones the recipes list (and each is named in
  the recipes' text, so the recipes cannot drift away from what a change needs);
* the repository's own tests that the recipes point to accept the change unaided, run
  in the scratch copy: the fault's ``CHECKS`` entry observes it over loopback HTTP and
  fails on a faithful mock, the categories agree, the fault tables are current, and
  ``tests/contracts/test_suite_against_mock.py`` finds ``pmtk check`` failing it in the
  new category (the scratch's own mock, with the scratch's fault, served on 127.0.0.1);
* ``pmtk check --category consistency`` (the scratch's toolkit, in a process of its
  own) passes against this session's faithful mock over real HTTP.

Only the new category runs, and the regenerate run skips the pinned data digests (a
fault never changes the generated data; that block alone takes about 20 s).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from toolkit.mock import Deployment

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("toolkit", "contracts", "tools", "docs", "tests", "pyproject.toml", "conftest.py")
"""What the scratch copy holds: the code, its tests, the manuals and the regenerate script."""

CATEGORY = "consistency"
FAULT = "duration-mismatch"
CHECK_ID = "consistency.appointment-duration"

# ------------------------------------------------------------------ the recipes' edits

FAULT_CLASS = """

class DurationMismatch(Fault):
    name = "duration-mismatch"
    description = "Every 3rd Appointment's `minutesDuration` is 5 more than `end - start`"
    category = "consistency"
    touches = frozenset({"Appointment"})

    def break_record(self, rtype: str, index: int, record: dict[str, Any]) -> None:
        if index % 3 == 0 and isinstance(record.get("minutesDuration"), int):
            record["minutesDuration"] += 5
"""

FAULT_CHECK = """def duration_mismatch(dep: Deployment, client: httpx.Client) -> None:
    from datetime import datetime

    def minutes(r: dict[str, object]) -> float:
        start, end = (datetime.fromisoformat(str(r[k])) for k in ("start", "end"))
        return (end - start).total_seconds() / 60

    records = _entries(client, "Appointment", _count=100)
    wrong = [r["id"] for r in records if r.get("minutesDuration", minutes(r)) != minutes(r)]
    assert len(wrong) >= 3


CHECKS: dict["""

CHECK_MODULE = '''"""consistency: fields that restate each other agree (a scratch category)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from contracts.suite import Recorder, Run, entries


def _minutes(appt: Any) -> float | None:
    try:
        start = dt.datetime.fromisoformat(appt["start"])
        end = dt.datetime.fromisoformat(appt["end"])
    except (KeyError, TypeError, ValueError):
        return None
    return (end - start).total_seconds() / 60


@pytest.mark.pm_check("consistency.appointment-duration", "consistency")
def test_appointment_duration_matches_start_and_end(pm: Run, check: Recorder) -> None:
    ex = pm.session.get("/Appointment", params={"_count": 100})
    check.attach(ex)
    if ex.status != 200:
        check.fail(f"GET /Appointment answered {ex.status}", ex)
        return
    compared = 0
    for appt in entries(ex.json):
        stated, minutes = appt.get("minutesDuration"), _minutes(appt)
        if stated is None or minutes is None:
            continue
        compared += 1
        if stated != minutes:
            check.fail(
                f"Appointment/{appt.get('id')}: minutesDuration {stated}, "
                f"start to end {minutes:g} min",
                ex,
            )
    if compared == 0:
        check.note("no Appointment on page 1 has minutesDuration, start and end")
'''

CHECK_ROW = (
    "| `consistency.appointment-duration` | consistency | an Appointment's "
    "`minutesDuration` differs from its `end - start` |\n"
)

EXPECTED = {
    # Add a mock fault: the class, its CHECKS entry, and the two tables regenerated.
    "toolkit/mock/faults.py",
    "tests/mock/test_faults.py",
    "docs/mock.md",
    "docs/interfaces.md",
    # Add a contract check (a new category): the check, the category, its row.
    f"contracts/test_{CATEGORY}.py",
    "toolkit/catalogue/endpoints.py",
    "docs/contracts.md",
}
"""Every file the two recipes change, and nothing else."""


def _edit(path: Path, anchor: str, replacement: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(anchor) == 1, f"the recipe's anchor {anchor!r} moved in {path.name}"
    path.write_text(text.replace(anchor, replacement), encoding="utf-8")


def _scratch_repository(into: Path) -> None:
    """Copy the repository and follow the two recipes in it, touching only their files."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, into / name, ignore=ignore)
        else:
            shutil.copyfile(source, into / name)
    # Add a mock fault, step 1: one Fault subclass (defining it registers the profile).
    faults = into / "toolkit" / "mock" / "faults.py"
    faults.write_text(faults.read_text(encoding="utf-8") + FAULT_CLASS, encoding="utf-8")
    # Step 2: its observable effect in CHECKS.
    checks = into / "tests" / "mock" / "test_faults.py"
    _edit(checks, "CHECKS: dict[", FAULT_CHECK)
    _edit(
        checks,
        '    "relative-next-links": relative_next_links,\n',
        f'    "relative-next-links": relative_next_links,\n    "{FAULT}": duration_mismatch,\n',
    )
    # Add a contract check: the check module, the new category, its row in the manual.
    (into / "contracts" / f"test_{CATEGORY}.py").write_text(CHECK_MODULE, encoding="utf-8")
    _edit(
        into / "toolkit" / "catalogue" / "endpoints.py",
        '    "write",\n)',
        f'    "write",\n    "{CATEGORY}",\n)',
    )
    last_row = "| `write.double-booking-refused` | write |"
    contracts_md = into / "docs" / "contracts.md"
    lines = contracts_md.read_text(encoding="utf-8").splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.startswith(last_row)]
    assert len(at) == 1, "the checks table's last row moved in docs/contracts.md"
    lines.insert(at[0] + 1, CHECK_ROW)
    contracts_md.write_text("".join(lines), encoding="utf-8")


def _changed_files(scratch: Path) -> set[str]:
    """Files of the scratch copy that are new or differ from the repository's."""
    changed = set()
    for path in scratch.rglob("*"):
        rel = path.relative_to(scratch)
        if not path.is_file() or "__pycache__" in rel.parts or rel.suffix == ".pyc":
            continue
        original = ROOT / rel
        if not original.is_file() or original.read_bytes() != path.read_bytes():
            changed.add(rel.as_posix())
    return changed


def _files_the_recipes_name() -> set[str]:
    """Every path in backticks in the fault and check recipes of docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    recipes = text.split("## Recipes", 1)[1]
    sections = re.split(r"^### ", recipes, flags=re.MULTILINE)
    wanted = [s for s in sections if s.startswith(("Add a contract check", "Add a mock fault"))]
    assert len(wanted) == 2, "docs/architecture.md lost a recipe"
    named = set(re.findall(r"`([\w./<>-]+\.(?:py|md))`", "".join(wanted)))
    return {n.replace("<category>", CATEGORY) for n in named}


def _run(scratch: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """A Python process of the scratch copy (its toolkit, contracts and tests first)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    environment.update(PYTHONPATH=str(scratch), **env)
    return subprocess.run(
        [sys.executable, *args],
        cwd=scratch,
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


# The repository's own tests the recipes point to, by node id, in the scratch copy.
SCRATCH_TESTS = (
    "tests/mock/test_faults.py::test_every_fault_profile_has_an_observable_check",
    f"tests/mock/test_faults.py::test_fault_profile_breaks_its_rule[{FAULT}]",
    f"tests/mock/test_faults.py::test_without_the_fault_its_check_fails[{FAULT}]",
    "tests/contracts/test_categories.py",
    "tests/docs/test_regenerate.py::test_running_the_command_would_change_nothing[fault-table]",
    f"tests/contracts/test_suite_against_mock.py::test_fault_profile_is_reported_in_its_category[{FAULT}]",
)


def _passed(junit: Path) -> tuple[list[str], list[str]]:
    """The test names of a JUnit report that passed, and those that did not."""
    passed: list[str] = []
    other: list[str] = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        (other if len(case) else passed).append(name)
    return passed, other


def test_a_fault_and_a_check_added_by_the_recipes_alone_work(
    tmp_path: Path, mock_deployment: Deployment
) -> None:
    scratch = tmp_path / "repo"
    scratch.mkdir()
    _scratch_repository(scratch)

    # Step 3 of the fault recipe: the regenerate command rewrites the fault tables.
    regen = _run(scratch, "tools/regenerate.py", "--skip", "pinned-digests")
    assert regen.returncode == 0, regen.stderr[-3000:]
    assert "wrote docs/mock.md (fault-table)" in regen.stdout, regen.stdout

    changed = _changed_files(scratch)
    assert changed == EXPECTED, f"changed beyond the recipes: {sorted(changed ^ EXPECTED)}"
    unnamed = EXPECTED - _files_the_recipes_name()
    assert not unnamed, f"files a change needs that the recipes do not name: {sorted(unnamed)}"

    junit = tmp_path / "junit.xml"
    tests = _run(
        scratch,
        "-m",
        "pytest",
        "-o",
        "addopts=--import-mode=importlib -p no:cacheprovider",
        "-p",
        "no:xdist",
        "-p",
        "no:nbmake",
        "-q",
        f"--junitxml={junit}",
        *SCRATCH_TESTS,
    )
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    passed, other = _passed(junit)
    assert not other, other
    assert len(passed) >= len(SCRATCH_TESTS), passed
    assert any(FAULT in name and "test_suite_against_mock" in name for name in passed), passed

    # The new check, in its category alone, passes on a faithful mock (this session's).
    mock_deployment.reset_rate_limit()
    report_dir = tmp_path / "clean"
    run = _run(
        scratch,
        "-c",
        "import sys; from toolkit.cli import app; sys.argv[0] = 'pmtk'; app()",
        "check",
        "--base-url",
        mock_deployment.base_url,
        "--category",
        CATEGORY,
        "--report-dir",
        str(report_dir),
        PM_CLIENT_ID=mock_deployment.client_id,
        PM_CLIENT_SECRET=mock_deployment.client_secret,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
    assert report["scope"] == [CATEGORY]
    assert [(c["id"], c["status"]) for c in report["checks"]] == [(CHECK_ID, "passed")]
