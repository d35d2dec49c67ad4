"""``pmtk check`` touches only what it checks, and ``--data all`` sees every record.

The target is a small deployment written from the spec (``tests/spec_server.py``),
which records every request it gets: no ``/_test/`` probe may reach it unless
``--test-controls`` says it is a mock. A run in a fresh working directory leaves no
``.hypothesis/`` there. A bad record beyond page 1 is found by ``--data all`` (with
its id) and not by the default sample, whose report says how much it read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.spec_server import (
    SpecDeployment,
    appointment,
    invoice_line,
    referral,
    serve_spec,
)
from toolkit.cli import app


@pytest.fixture
def target() -> Iterator[SpecDeployment]:
    records = {"Referral": [referral(f"R-{i}") for i in range(1, 4)]}
    with serve_spec(SpecDeployment(records=records)) as dep:
        yield dep


def _args(dep: SpecDeployment, report_dir: Path, *extra: str) -> list[str]:
    return [
        "check",
        *("--base-url", dep.base_url, "--client-id", dep.client_id),
        *("--report-dir", str(report_dir), "--schema-examples", "1"),
        *extra,
    ]


def test_no_test_control_request_reaches_a_deployment_and_no_hypothesis_folder_is_left(
    target: SpecDeployment, tmp_path: Path
) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PM_")}
    env.update(PM_CLIENT_SECRET=target.client_secret, XDG_CACHE_HOME=str(cache), COLUMNS="200")
    proc = subprocess.run(
        [
            *(sys.executable, "-c", "from toolkit.cli import app; app()"),
            *_args(target, cwd / "report", "--request-budget", "60"),
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # checked (with findings)
    paths = target.paths()
    assert paths[0] == "/main/oauth/token"  # the first request is the token, not a probe
    assert not [p for p in paths if "/_test/" in p]
    assert sorted(p.name for p in cwd.iterdir()) == ["report"]  # no .hypothesis
    report = json.loads((cwd / "report" / "report.json").read_text())
    assert report["observations"]["test_controls"] is False


def test_test_controls_are_probed_only_when_asked(target: SpecDeployment, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        _args(target, tmp_path, "--request-budget", "30", "--test-controls"),
        env={"PM_CLIENT_SECRET": target.client_secret},
        catch_exceptions=False,
    )
    assert result.exit_code in (0, 1), result.output
    assert "/main/_test/fault" in target.paths()  # asked for: probed (it answers 404 here)


@pytest.fixture
def bad_beyond_page_1() -> Iterator[SpecDeployment]:
    """150 invoice lines and 150 appointments in pages of 10; one bad record of each on
    page 13 and 14; one page answers 429 once."""
    lines = [invoice_line(str(5001 + i)) for i in range(150)]
    lines[124] = invoice_line("5125", status="void")  # not in the spec's enum
    appointments = [appointment(str(7001 + i)) for i in range(150)]
    del appointments[136]["start"]  # required by the spec
    records = {"InvoiceLine": lines, "Appointment": appointments}
    dep = SpecDeployment(records=records, page_size=10, throttle_once={("InvoiceLine", 5)})
    with serve_spec(dep) as served:
        yield served


def _run(dep: SpecDeployment, report_dir: Path, *extra: str) -> tuple[dict[str, Any], str]:
    result = CliRunner().invoke(
        app,
        _args(dep, report_dir, *extra),
        env={"PM_CLIENT_SECRET": dep.client_secret, "COLUMNS": "300"},
        catch_exceptions=False,
    )
    assert result.exit_code in (0, 1), result.output
    return json.loads((report_dir / "report.json").read_text()), result.output


def _check(report: dict[str, Any], check_id: str) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["id"] == check_id)


def test_data_all_reports_a_bad_record_beyond_page_1_with_its_id(
    bad_beyond_page_1: SpecDeployment, tmp_path: Path
) -> None:
    # 45 requests hold the first pages but not the 28 more of the walk: it is raised
    report, output = _run(bad_beyond_page_1, tmp_path, "--data", "all", "--request-budget", "45")
    enum = _check(report, "enum.values[InvoiceLine]")
    assert enum["status"] == "failed", enum["message"]
    assert "InvoiceLine/5125 status: 'void'" in enum["message"]
    fmt = _check(report, "format.values[Appointment]")
    assert fmt["status"] == "failed"
    assert "Appointment/7137 start: is required" in fmt["message"]
    checked = report["observations"]["data_checked"]
    assert checked["InvoiceLine"]["checked"] == 150 and checked["InvoiceLine"]["pages"] == 15
    assert "stopped" not in checked["InvoiceLine"]  # the 429 was waited out, not the end
    assert any("InvoiceLine/5125" in v for v in checked["InvoiceLine"]["violations"])
    assert report["observations"]["data_all_budget_raised_by"] >= 28
    assert "data checked: " in output and "150 of 150 InvoiceLine" in output
    statuses = [
        c["id"] for c in report["checks"] if c["status"] == "skipped" and "values[" in c["id"]
    ]
    assert "enum.values[InvoiceLine]" not in statuses


def test_the_default_sample_misses_it_and_says_how_much_it_checked(
    bad_beyond_page_1: SpecDeployment, tmp_path: Path
) -> None:
    report, output = _run(bad_beyond_page_1, tmp_path)
    enum = _check(report, "enum.values[InvoiceLine]")
    assert enum["status"] == "passed"  # page 1 only: the bad record is not seen
    assert "checked 10 of 150 InvoiceLine records (page 1 only" in enum["message"]
    assert report["observations"]["data_checked"]["InvoiceLine"]["checked"] == 10
    assert "10 of 150 InvoiceLine" in output and "--data all" in output
