"""The committed notebooks: numbered, introduced, using toolkit.connect(), without outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from toolkit.notebooks import default_notebook_dir, notebook_paths

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
EXPECTED = (
    "01_quickstart.ipynb",
    "02_referral_utilisation.ipynb",
    "03_appointments_attendance.ipynb",
    "04_revenue.ipynb",
    "05_conformance.ipynb",
)


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((NOTEBOOK_DIR / name).read_text(encoding="utf-8"))
    return data


def _source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def test_every_numbered_notebook_is_present_in_order() -> None:
    assert [p.name for p in notebook_paths(NOTEBOOK_DIR)] == list(EXPECTED)


def test_default_notebook_dir_is_the_checkout_folder() -> None:
    assert default_notebook_dir() == NOTEBOOK_DIR


def test_only_selects_by_name_prefix_and_unknown_prefix_is_an_error() -> None:
    assert [p.name for p in notebook_paths(NOTEBOOK_DIR, ["02", "04_"])] == [
        EXPECTED[1],
        EXPECTED[3],
    ]
    with pytest.raises(FileNotFoundError, match="99"):
        notebook_paths(NOTEBOOK_DIR, ["99"])


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_is_stored_without_outputs(name: str) -> None:
    for index, cell in enumerate(_load(name)["cells"]):
        if cell["cell_type"] != "code":
            continue
        assert cell.get("outputs") == [], f"{name} cell {index} has outputs"
        assert cell.get("execution_count") is None, f"{name} cell {index} has an execution count"


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_opens_with_what_you_will_learn_and_what_it_needs(name: str) -> None:
    """What it needs (settings for whoever runs it) is in the first cell or the next one;
    in a charting notebook, in the next one, which its report leaves out."""
    first, second = _load(name)["cells"][:2]
    assert first["cell_type"] == "markdown"
    assert "What you will learn" in _source(first)
    if name[:2] in ("02", "03", "04", "05"):
        assert "What it needs" not in _source(first)
        assert second["cell_type"] == "markdown" and "What it needs" in _source(second)
        assert "report-hide" in second["metadata"].get("tags", [])
    else:
        assert "What it needs" in _source(first)


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_reaches_its_deployment_through_connect(name: str) -> None:
    code = "\n".join(_source(c) for c in _load(name)["cells"] if c["cell_type"] == "code")
    assert "toolkit.connect(" in code
    assert "import pandas" not in code


@pytest.mark.parametrize("name", EXPECTED[1:4])
def test_analysis_notebooks_draw_titled_altair_charts(name: str) -> None:
    code = "\n".join(_source(c) for c in _load(name)["cells"] if c["cell_type"] == "code")
    assert "alt.Chart(" in code
    assert "title=" in code
