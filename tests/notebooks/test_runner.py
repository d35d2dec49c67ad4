"""The notebook runner CI and ``pmtk notebooks`` share: errors reported, kernels quiet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat

from toolkit.notebooks import kernel_manager_class

SCRIPT = """
import sys
from pathlib import Path
from toolkit.notebooks import execute_notebook
nb, error = execute_notebook(Path(sys.argv[1]), timeout=60)
print(repr([o.get("text") for o in nb.cells[0].outputs]))
print("ERROR:", error)
"""


def test_a_failing_cell_is_reported_and_the_kernel_prints_no_tcp_warning(tmp_path: Path) -> None:
    notebook = tmp_path / "01_broken.ipynb"
    first = nbformat.v4.new_code_cell("import os\nprint(os.getcwd())")
    # A stored output must not survive into the run.
    first.outputs = [nbformat.v4.new_output("stream", name="stdout", text="stale\n")]
    nb = nbformat.v4.new_notebook(cells=[first, nbformat.v4.new_code_cell("1 / 0")])
    nbformat.write(nb, notebook)
    completed = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(notebook)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert f"['{tmp_path}\\n']" in completed.stdout, "cells run in the notebook's folder"
    assert "stale" not in completed.stdout
    assert "ZeroDivisionError" in completed.stdout
    assert "1 / 0" in completed.stdout
    assert "without encryption" not in completed.stderr
    assert "Parent appears to have exited" not in completed.stderr


def test_kernels_are_started_with_curve_encryption() -> None:
    manager = kernel_manager_class()(kernel_name="python3")
    assert manager.transport_encryption == "auto"


def test_pytest_runs_notebooks_with_nbmake_and_prints_no_footer() -> None:
    root = Path(__file__).resolve().parents[2]
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-n", "0", "notebooks/01_quickstart.ipynb"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "01_quickstart.ipynb" in completed.stdout  # collected by nbmake
    assert "Learn more about nbmake" not in completed.stdout + completed.stderr
