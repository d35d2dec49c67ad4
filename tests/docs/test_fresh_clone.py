"""A new user's first hour: a fresh clone runs the README's two commands.

The quickstart says that on a machine with Python and uv, ``uv run pmtk check`` and
``uv run pytest`` do all the set-up. This clones the committed tree, runs the first
command exactly as written (nothing configured: it must check the embedded mock and
say so), and asks the second to collect the suite (running it would recurse).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_fresh_clone_runs_the_quickstart(tmp_path: Path) -> None:
    uv = shutil.which("uv")
    assert uv is not None, "uv must be on PATH (.ci/run installs it)"
    clone = tmp_path / "pmtk"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    (tmp_path / "shared").symlink_to(ROOT.parent / "shared")
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("PM_", "VIRTUAL_ENV"))}
    env.pop("PYTEST_XDIST_WORKER", None)

    check = subprocess.run(
        [uv, "run", "pmtk", "check"], cwd=clone, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-3000:]
    assert "embedded mock" in check.stderr
    assert "conformant" in check.stdout
    report = json.loads((clone / "pmtk-report" / "report.json").read_text())
    assert report["target"]["embedded_mock"] is True

    collect = subprocess.run(
        [uv, "run", "pytest", "--co", "-q", "-n", "0"], cwd=clone, env=env,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert collect.returncode == 0, collect.stdout[-2000:] + collect.stderr[-2000:]
    assert re.search(r"\d{3,} tests collected", collect.stdout), collect.stdout[-500:]
