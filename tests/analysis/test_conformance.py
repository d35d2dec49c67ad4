"""Contract-suite report tables and the comparison with a baseline."""

from __future__ import annotations

from typing import Any

import polars as pl

from toolkit import analysis


def _report(statuses: dict[str, str]) -> dict[str, Any]:
    return {
        "format": 1,
        "checks": [
            {
                "id": check_id,
                "category": check_id.split(".")[0],
                "status": status,
                "message": "first problem\nsecond problem" if status == "failed" else "",
                "evidence": [{"note": "x"}] if status == "failed" else [],
            }
            for check_id, status in statuses.items()
        ],
        "observations": {"collection_wrapper": {"Bundle": 7}, "_writes": {"scratch": 1}},
    }


def test_report_checks_keep_first_message_line_and_count_problems() -> None:
    checks = analysis.report_checks(_report({"auth.token": "passed", "prefix.ids": "failed"}))
    assert checks["id"].to_list() == ["auth.token", "prefix.ids"]
    failed = checks.row(1, named=True)
    assert (failed["message"], failed["problems"], failed["evidence"]) == ("first problem", 2, 1)


def test_report_summary_counts_statuses_per_category_in_report_order() -> None:
    checks = analysis.report_checks(
        _report({"paging.next": "passed", "auth.a": "failed", "auth.b": "skipped"})
    )
    assert analysis.report_summary(checks).rows() == [("paging", 1, 0, 0, 1), ("auth", 0, 1, 1, 2)]


def test_report_observations_leave_out_scratch_keys() -> None:
    obs = analysis.report_observations(_report({}))
    assert obs.rows() == [("collection_wrapper", '{"Bundle": 7}')]


def test_empty_report_gives_empty_typed_tables() -> None:
    checks = analysis.report_checks({})
    assert checks.is_empty()
    assert checks.schema["evidence"] == pl.Int64
    assert analysis.report_observations({}).is_empty()


def test_compare_reports_labels_each_kind_of_change() -> None:
    base = analysis.report_checks(
        _report({"a": "passed", "b": "failed", "c": "failed", "d": "passed", "e": "skipped"})
    )
    cur = analysis.report_checks(
        _report({"a": "passed", "b": "passed", "c": "failed", "d": "failed", "f": "passed"})
    )
    out = analysis.compare_reports(cur, base)
    assert dict(zip(out["id"], out["change"], strict=True)) == {
        "d": "new finding",
        "b": "fixed",
        "c": "still failing",
        "f": "new check",
        "e": "removed",
        "a": "same",
    }
    assert out["id"].to_list() == ["d", "b", "c", "f", "e", "a"]
