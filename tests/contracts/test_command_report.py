"""The report helpers behind ``pmtk check``: atomic writes, the target, console reasons."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from contracts import report as rp
from contracts.report import CheckRecord, ReportDirError, build_report, write_reports


def _report(*checks: CheckRecord, embedded: bool = False) -> dict[str, Any]:
    return build_report(
        target={"base_url": "http://127.0.0.1:1/main", "embedded_mock": embedded},
        started="2026-01-01T00:00:00+00:00",
        finished="2026-01-01T00:00:01+00:00",
        elapsed=1.0,
        checks=list(checks),
        observations={},
        requests=3,
    )


def test_a_failed_write_keeps_the_previous_reports_and_leaves_no_staging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in rp.REPORT_FILES:
        (tmp_path / name).write_text(f"old {name}")

    def disk_full(report: dict[str, Any], path: Path) -> None:
        path.write_text("half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rp, "write_html", disk_full)
    with pytest.raises(ReportDirError, match="No space left on device"):
        write_reports(_report(CheckRecord("auth.x", "auth")), tmp_path)
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {
        name: f"old {name}" for name in rp.REPORT_FILES
    }


def test_a_complete_write_replaces_all_three_files(tmp_path: Path) -> None:
    for name in rp.REPORT_FILES:
        (tmp_path / name).write_text("old")
    write_reports(_report(CheckRecord("auth.x", "auth"), embedded=True), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(rp.REPORT_FILES)
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["format"] == 2
    assert data["target"] == {"base_url": "http://127.0.0.1:1/main", "embedded_mock": True}
    assert "(the embedded mock)" in (tmp_path / "report.html").read_text()


def test_the_public_url_drops_userinfo_query_and_fragment() -> None:
    assert rp.public_url("https://me:pw@h.example:8443/main?k=1#f") == "https://h.example:8443/main"
    assert rp.public_url("http://[::1]:9/main") == "http://[::1]:9/main"


def test_a_failure_reason_is_one_line_that_counts_the_rest() -> None:
    message = "\n".join([f"problem {i}" for i in range(20)] + ["... and 7 more"])
    assert rp.failure_reason(message) == "problem 0 (+26 more in report.html)"
    assert rp.failure_reason("x" * 500).endswith("...")
    assert len(rp.failure_reason("x" * 500)) == rp.MAX_REASON_CHARS
    assert rp.failure_reason("") == "(no message)"


def test_the_summary_prints_markup_in_ids_and_reasons_as_text() -> None:
    failed = CheckRecord(
        "format.values[Organization]",
        "format",
        status="failed",
        message="[security] phone [/bold] '+61 x' is not a phone\nsecond",
    )
    buffer = io.StringIO()
    Console(file=buffer, width=200).print(rp.render_summary(_report(failed)))
    text = buffer.getvalue()
    line = next(ln for ln in text.splitlines() if ln.startswith("FAILED"))
    assert line == (
        "FAILED format.values[Organization]: [security] phone [/bold] '+61 x' is not a "
        "phone (+1 more in report.html)"
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "not JSON (Expecting value at line 1, column 1)"),
        (b'{"format": true, "checks": []}', "report format True is not one this pmtk reads (1, 2)"),
        (b'{"format": 2, "checks": {}}', "'checks' is a dict, not a list"),
    ],
)
def test_a_bad_baseline_is_named_with_its_fault(
    tmp_path: Path, content: bytes, expected: str
) -> None:
    path = tmp_path / "old.json"
    path.write_bytes(content)
    with pytest.raises(rp.BaselineError) as info:
        rp.read_baseline(path)
    assert str(info.value) == f"--baseline {path}: {expected}"
