"""The conformance report's summary, checks and observations, and comparing two reports."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import polars as pl


def report_checks(report: Mapping[str, Any]) -> pl.DataFrame:
    """The checks of a contract-suite ``report.json`` as a table.

    Parameters
    ----------
    report
        A parsed ``report.json`` written by ``pmtk check`` (format 1).

    Returns
    -------
    pl.DataFrame
        One row per check: ``id``, ``category``, ``status`` (passed, failed or
        skipped), ``message`` (its first line), ``problems`` (lines in the
        message) and ``evidence`` (number of recorded exchanges), in report order.

    Examples
    --------
    >>> report = {"checks": [{"id": "auth.token", "category": "auth", "status": "passed",
    ...                       "message": "", "evidence": []}]}
    >>> report_checks(report).row(0)
    ('auth.token', 'auth', 'passed', '', 0, 0)
    """
    rows = []
    for check in report.get("checks") or []:
        message = str(check.get("message") or "")
        lines = [line for line in message.splitlines() if line.strip()]
        rows.append(
            {
                "id": str(check.get("id", "")),
                "category": str(check.get("category", "")),
                "status": str(check.get("status", "")),
                "message": lines[0] if lines else "",
                "problems": len(lines),
                "evidence": len(check.get("evidence") or []),
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "id": pl.String,
            "category": pl.String,
            "status": pl.String,
            "message": pl.String,
            "problems": pl.Int64,
            "evidence": pl.Int64,
        },
    )


def report_summary(checks: pl.DataFrame) -> pl.DataFrame:
    """Passed, failed and skipped checks per category.

    Parameters
    ----------
    checks
        The output of :func:`report_checks`.

    Returns
    -------
    pl.DataFrame
        ``category``, ``passed``, ``failed``, ``skipped``, ``total``, in the order
        the categories first appear in the report.
    """
    status = pl.col("status")
    return (
        checks.with_row_index("_order")
        .group_by("category")
        .agg(
            pl.col("_order").min(),
            (status == "passed").sum().cast(pl.Int64).alias("passed"),
            (status == "failed").sum().cast(pl.Int64).alias("failed"),
            (status == "skipped").sum().cast(pl.Int64).alias("skipped"),
            pl.len().cast(pl.Int64).alias("total"),
        )
        .sort("_order")
        .drop("_order")
    )


def report_observations(report: Mapping[str, Any]) -> pl.DataFrame:
    """The observations of a ``report.json`` (what was seen, not judged) as a table.

    Parameters
    ----------
    report
        A parsed ``report.json``.

    Returns
    -------
    pl.DataFrame
        ``observation`` and ``value`` (compact JSON text). Keys starting with ``_``
        are the suite's own scratch space and are left out.
    """
    observed = report.get("observations") or {}
    rows = [
        {"observation": str(key), "value": json.dumps(value, sort_keys=True, default=str)}
        for key, value in observed.items()
        if not str(key).startswith("_")
    ]
    return pl.DataFrame(rows, schema={"observation": pl.String, "value": pl.String})


def compare_reports(current: pl.DataFrame, baseline: pl.DataFrame) -> pl.DataFrame:
    """What changed between a baseline report and the current one, check by check.

    Parameters
    ----------
    current, baseline
        Outputs of :func:`report_checks`.

    Returns
    -------
    pl.DataFrame
        ``id``, ``baseline`` and ``current`` status and ``change``: ``new finding``
        (failed now, not before), ``fixed`` (failed before, passed now), ``still
        failing``, ``changed`` (any other status change), ``new check``,
        ``removed`` or ``same``; changes first.
    """
    left = baseline.select("id", pl.col("status").alias("baseline")).unique("id", keep="first")
    right = current.select("id", pl.col("status").alias("current")).unique("id", keep="first")
    both = left.join(right, on="id", how="full", coalesce=True)
    was, now = pl.col("baseline"), pl.col("current")
    change = (
        pl.when(was.is_null())
        .then(pl.lit("new check"))
        .when(now.is_null())
        .then(pl.lit("removed"))
        .when((now == "failed") & (was != "failed"))
        .then(pl.lit("new finding"))
        .when((was == "failed") & (now == "passed"))
        .then(pl.lit("fixed"))
        .when((was == "failed") & (now == "failed"))
        .then(pl.lit("still failing"))
        .when(was != now)
        .then(pl.lit("changed"))
        .otherwise(pl.lit("same"))
    )
    rank = {
        "new finding": 0,
        "fixed": 1,
        "still failing": 2,
        "changed": 3,
        "new check": 4,
        "removed": 5,
        "same": 6,
    }
    order = pl.col("change").replace_strict(rank, return_dtype=pl.Int64)
    return both.with_columns(change.alias("change")).sort([order, "id"])
