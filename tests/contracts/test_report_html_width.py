"""The HTML report stays within a 1280 px window: long examples wrap in their cells.

An observation's example (a URL, a JSON value with no space in 300 characters) made
the Observed table run off the page. Measured in headless Chromium with the network
blocked, at 1280 px: the page is no wider than the window.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from contracts.report import CheckRecord, build_report, write_html
from tests.notebooks.conftest import FLAGS, INSTALL, find_chromium

LONG = "Coverage/200001?payor=" + "OrganizationFD" * 21  # 300 characters, no space
MEASURE = (
    "<script>document.body.setAttribute('data-width', "
    "String(document.documentElement.scrollWidth));</script>"
)


def test_the_observed_table_fits_a_1280_px_window(tmp_path: Path) -> None:
    binary = find_chromium()
    if binary is None:
        pytest.skip(f"headless Chromium is not installed: {INSTALL}")
    observed = [
        {"field": "Coverage.payor", "rule": "reference-form", "source": "facts",
         "count": 102, "example": LONG},
    ]  # fmt: skip
    report = build_report(
        target={"base_url": "http://127.0.0.1:1/main", "embedded_mock": False},
        started="2026-11-28T00:00:00Z", finished="2026-11-28T00:01:00Z", elapsed=60.0,
        checks=[CheckRecord("reference.forms", "reference", "failed", LONG, [], observed)],
        observations={}, requests=3,
    )  # fmt: skip
    page = tmp_path / "report.html"
    write_html(report, page)
    page.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    with tempfile.TemporaryDirectory(prefix="pmtk-chromium-") as profile:
        done = subprocess.run(
            [binary, *FLAGS, "--window-size=1280,900", f"--user-data-dir={profile}",
             "--dump-dom", page.as_uri()],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    found = re.search(r'data-width="(\d+)"', done.stdout)
    assert found, done.stderr[-2000:]
    assert int(found.group(1)) <= 1280, found.group(1)
