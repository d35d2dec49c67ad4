"""``pmtk check`` run in-process against a deployment, and the checks its report failed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from toolkit.cli import app

runner = CliRunner()


def run_check(dep: Any, report_dir: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    """Exit code, ``report.json`` (empty if none) and output of ``pmtk check`` against ``dep``."""
    result = runner.invoke(
        app,
        [
            "check", "--base-url", dep.base_url, "--client-id", dep.client_id,
            "--client-secret", dep.client_secret, "--report-dir", str(report_dir),
            "--schema-examples", "1", "--test-controls", *extra,
        ],
        catch_exceptions=False,
    )  # fmt: skip
    path = report_dir / "report.json"
    return result.exit_code, json.loads(path.read_text()) if path.exists() else {}, result.output


def failed_checks(report: dict[str, Any]) -> dict[str, str]:
    """``check id -> category`` of every failed check of a report."""
    return {c["id"]: c["category"] for c in report.get("checks", []) if c["status"] == "failed"}
