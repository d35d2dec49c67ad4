"""Notebook 03 runs with ``PM_TIMEZONE`` set, as the README tells multi-zone practices to.

nbmake runs every notebook without it; this run sets it (the small embedded mock, so
it stays cheap) and checks the notebook put every appointment on that one clock while
still naming each appointment's clinic.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.notebooks import execute_notebook, notebook_paths

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"


def _text(nb: object) -> str:
    parts = []
    for cell in nb.cells:  # type: ignore[attr-defined]
        for output in cell.get("outputs", []):
            parts.append(str(output.get("text", "")))
            parts.extend(str(v) for v in output.get("data", {}).values())
    return "\n".join(parts)


def test_notebook_03_runs_with_pm_timezone_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PM_TIMEZONE", "Australia/Darwin")  # no mock clinic is in Darwin
    (path,) = notebook_paths(NOTEBOOK_DIR, ("03",))
    nb, error = execute_notebook(path, timeout=120)
    assert error is None, error
    text = _text(nb)
    assert "Australia/Darwin time" in text  # the one clock every chart says it shows
    assert "Australia/Perth" not in text  # no clinic's own zone leaks through
    assert "(unknown clinic)" not in text  # every appointment still has its clinic
