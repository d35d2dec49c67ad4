"""Scratch copies of the repository's packages, changed the way a recipe says, and run.

Tests that add a resource type or a form to pmtk (``docs/architecture.md``'s
recipes) work on a copy in ``tmp_path``, never on the checkout, and run the copy in
a child Python process whose ``PYTHONPATH`` puts it first.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def copy_packages(into: Path, *packages: str) -> None:
    """Copy ``packages`` (``toolkit``, ``contracts``, ...) of the checkout into ``into``."""
    for package in packages:
        shutil.copytree(
            ROOT / package, into / package, ignore=shutil.ignore_patterns("__pycache__")
        )


def add_resource_type(into: Path, name: str, declaration: str, family: str) -> None:
    """Add a resource type to the copy in ``into`` by the recipe: its two files.

    ``declaration`` is the ``Resource`` assignment to the upper-case ``name``,
    written before the catalogue's ``RESOURCES``; ``family`` is the mock's
    ``@family`` module, written as ``toolkit/mock/data/<name>s.py``.
    """
    resources = into / "toolkit" / "catalogue" / "resources.py"
    text = resources.read_text(encoding="utf-8")
    head = "RESOURCES: dict[str, Resource] = {"
    tail = "        SCHEDULE,\n    )"
    assert text.count(head) == 1 and text.count(tail) == 1, "the recipe's anchors moved"
    constant = name.upper()
    text = text.replace(head, f"{declaration}\n\n{head}")
    text = text.replace(tail, f"        SCHEDULE,\n        {constant},\n    )")
    resources.write_text(text, encoding="utf-8")
    (into / "toolkit" / "mock" / "data" / f"{name.lower()}s.py").write_text(
        family, encoding="utf-8"
    )


def probe(into: Path, code: str, timeout: float) -> Any:
    """Run ``code`` in a child Python of the copy; the JSON on its last line of output."""
    run = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(into)},
        cwd=into,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])
