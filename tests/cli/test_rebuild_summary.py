"""``pmtk sync --rebuild`` says it read pages from the raw records and fetched none.

A rebuild sends no request; its summary used to say ``0 requests (3 pages)`` with a
``fetched`` column, as if pages had come from the API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import USER_AGENT

PMTK = Path(sys.executable).parent / "pmtk"


def _pmtk(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PMTK), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_a_rebuild_reports_pages_read_from_raw_and_none_fetched(tmp_path: Path) -> None:
    from toolkit.mock import serve

    env = {k: v for k, v in os.environ.items() if not k.startswith("PM_")}
    with serve(seed=0, scale="small") as dep:
        env.update(
            PM_BASE_URL=dep.base_url, PM_CLIENT_ID=dep.client_id,
            PM_CLIENT_SECRET=dep.client_secret, PM_USER_AGENT=USER_AGENT,
        )  # fmt: skip
        first = _pmtk(["sync", "--out", "store", "-r", "Referral"], tmp_path, env)
        assert first.returncode == 0, first.stderr
        text = _pmtk(["sync", "--out", "store", "--rebuild"], tmp_path, env)
        as_json = _pmtk(["sync", "--out", "store", "--rebuild", "--output", "json"], tmp_path, env)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == "pmtk sync --rebuild -> store"
    header = lines[1].split()
    assert "fetched" not in header and "read" in header and "raw" in header
    assert lines[-1].startswith("0 requests, 0 pages fetched: 2 pages read from the raw records")
    data = json.loads(as_json.stdout)
    assert (data["requests"], data["pages_fetched"], data["source"]) == (0, 0, "raw records")
