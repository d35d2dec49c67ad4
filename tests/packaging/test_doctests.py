"""Docstring examples are tests: `uv run pytest` collects and runs them; a broken one fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

DOCTESTS_TODAY = 44
"""Doctest items under toolkit/ when this test was written; fewer means examples were lost."""


def _pytest(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    # The project's own settings (pyproject addopts) decide whether doctests are collected;
    # -n 0 only keeps this run small.
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def test_pytest_collects_every_doctest_of_the_toolkit(request: pytest.FixtureRequest) -> None:
    # In the whole run (`uv run pytest`), this session has collected them already: count
    # those rather than collect the toolkit a second time in a child process.
    toolkit = ROOT / "toolkit"
    here = [
        item
        for item in request.session.items
        if type(item).__name__ == "DoctestItem" and item.path.is_relative_to(toolkit)
    ]
    if len(here) >= DOCTESTS_TODAY:
        return
    out = _pytest("--collect-only", "-q", "toolkit")
    assert out.returncode == 0, out.stdout + out.stderr
    # Doctest items are named file::dotted.name, e.g. toolkit/http.py::toolkit.http.safe_id.
    doctests = [ln for ln in out.stdout.splitlines() if ln.startswith("toolkit/") and "::" in ln]
    assert len(doctests) >= DOCTESTS_TODAY, (
        f"{len(doctests)} doctests collected under toolkit/, expected at least "
        f"{DOCTESTS_TODAY}: is --doctest-modules still in pyproject's addopts?\n{out.stdout}"
    )


def test_a_broken_doctest_fails_the_run(tmp_path: Path) -> None:
    module = tmp_path / "broken_example.py"
    module.write_text('def two() -> int:\n    """\n    >>> two()\n    3\n    """\n    return 2\n')
    out = _pytest("-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), str(module))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "broken_example.two" in out.stdout
    assert "1 failed" in out.stdout
