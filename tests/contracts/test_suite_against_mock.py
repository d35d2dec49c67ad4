"""The contract suite against the mock: every fault is caught in its category.

The clean mock's run with every opt-in (it passes) is ``clean_run`` in
``tests/contracts/test_command.py``, one run of the whole suite that the console-script
tests there share; its 90-second target is ``tests/benchmarks/bench_check.py``.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from toolkit.cli import app
from toolkit.mock import FAULT_PROFILES, serve

FAULTS = sorted(name for name, p in FAULT_PROFILES.items() if p.category is not None)
runner = CliRunner()


def _check(dep: Any, report_dir: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    result = runner.invoke(
        app,
        [
            "check",
            "--base-url",
            dep.base_url,
            "--client-id",
            dep.client_id,
            "--client-secret",
            dep.client_secret,
            "--report-dir",
            str(report_dir),
            "--schema-examples",
            "1",
            "--test-controls",  # every mock here is served with its /_test/ controls
            *extra,
        ],
        catch_exceptions=False,
    )
    report_path = report_dir / "report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    return result.exit_code, report, result.output


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_profile_is_reported_in_its_category(fault: str, tmp_path: Path) -> None:
    category = FAULT_PROFILES[fault].category
    # Only the fault's own category runs (the other categories' checks are deselected):
    # each fault is still caught by the checks that own it, in a fraction of the time.
    extra = ["--request-budget", "200", "--category", str(category)]
    if category == "rate-limit":
        extra.append("--probe-rate-limit")
    if category == "write":
        extra.append("--allow-writes")
    with serve(test_controls=True, fault=fault) as dep:
        code, report, output = _check(dep, tmp_path, *extra)
    failed = {c["category"] for c in report.get("checks", []) if c["status"] == "failed"}
    assert code == 1, output
    assert category in failed, f"{fault}: failed categories {sorted(failed)}"
    assert report["scope"] == [category]


def test_a_category_run_checks_only_that_category_and_says_so(tmp_path: Path) -> None:
    # bad-phone breaks the format category; a run of prefix and enum alone cannot see it,
    # and must not read as a whole-contract verdict.
    assert FAULT_PROFILES["bad-phone"].category == "format"
    with serve(test_controls=True, fault="bad-phone") as dep:
        code, report, output = _check(dep, tmp_path, "--category", "prefix", "--category", "enum")
    assert code == 0, output
    assert report["scope"] == ["prefix", "enum"]
    assert {c["category"] for c in report["checks"]} == {"prefix", "enum"}
    assert set(report["summary"]["by_category"]) == {"prefix", "enum"}
    assert "conformant (only prefix, enum checked)" in output
    assert "(only prefix, enum)" in output  # the table's title


def test_an_unknown_category_is_refused_before_any_request(tmp_path: Path) -> None:
    with serve(test_controls=True) as dep:
        before = dep.stats()
        code, report, output = _check(dep, tmp_path / "r", "--category", "speed")
        after = dep.stats()
    assert code == 2
    assert "--category 'speed': must be one of auth, token-lifetime" in output
    assert report == {}
    assert before == after


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_deployment_exits_2_with_a_clear_message(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/main"
    result = runner.invoke(
        app,
        [
            "check",
            "--base-url",
            url,
            "--client-id",
            "x",
            "--client-secret",
            "s3cret-value",
            "--report-dir",
            str(tmp_path),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 2
    assert "unreachable" in result.output
    assert "s3cret-value" not in result.output


def test_base_url_without_credentials_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["check", "--base-url", "http://127.0.0.1:9/main"], env={})
    assert result.exit_code == 2


def test_report_files_redact_the_secret_and_tokens(tmp_path: Path) -> None:
    with serve(test_controls=True, fault="any-secret-accepted") as dep:
        code, report, _ = _check(dep, tmp_path)
        secret = dep.client_secret
    assert code == 1
    for name in ("report.json", "junit.xml", "report.html"):
        text = (tmp_path / name).read_text()
        assert secret not in text
        assert "eyJ" not in text  # no JWT (access token) anywhere
    evidence = [e for c in report["checks"] for e in c["evidence"]]
    assert evidence and all("curl" in e for e in evidence if "request" in e)


def test_baseline_comparison_lists_new_and_fixed_findings(tmp_path: Path) -> None:
    # Both runs check the format category alone: the comparison is by check id, and the
    # finding that bad-phone makes (and the clean mock fixes) is a format check's.
    scope = ("--category", "format")
    with serve(test_controls=True, fault="bad-phone") as dep:
        code, _, _ = _check(dep, tmp_path / "a", *scope)
    assert code == 1
    with serve(test_controls=True) as dep:
        code, second, _ = _check(
            dep, tmp_path / "b", *scope, "--baseline", str(tmp_path / "a" / "report.json")
        )
    assert code == 0
    assert "format.values[Organization]" in second["baseline"]["fixed"]
    assert second["summary"]["new_findings"] == []


def test_a_deployment_without_the_fhir_standard_searches_is_observed_not_failed(
    tmp_path: Path,
) -> None:
    """The FHIR-standard searches no source says the vendor serves (``FHIR_SEARCH``:
    Appointment ``status``...) are observations when a deployment lacks them, never a
    failure: ``vendor-search-only`` ignores them and leaves them out of its metadata."""
    with serve(test_controls=True, fault="vendor-search-only") as dep:
        code, report, output = _check(dep, tmp_path, "--category", "schema")
    assert code == 0, output
    observed = [o for c in report["checks"] for o in c.get("observed", [])]
    texts = [o["example"] for o in observed if o["rule"] == "capability"]
    assert (
        "Appointment: searchParam practitioner, status not declared (FHIR R4 standard, "
        "not known to be served by the vendor)"
    ) in texts
    assert not any("searchParam date" in t for t in texts)
    assert all(c["status"] != "failed" for c in report["checks"])
