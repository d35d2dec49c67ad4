"""One rule for every command's tables on a terminal: fit its width, lose no value.

A table too wide for the terminal used to be printed as whole lines, which the
terminal then wrapped mid-row at 80 columns (every row of the sync summary). Now a
text cell wraps, a number or a name never does: the table is laid out narrower when
it can be, else each row becomes one paragraph wrapped at spaces. On a pipe, whole
lines (tests/cli/test_terminal_and_pipe.py).
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from toolkit._cli import emit
from toolkit.store.results import ResourceSync, SyncSummary

NUMBER = re.compile(r"\d[\d,.]*")


def _summary() -> SyncSummary:
    summary = SyncSummary(out=Path("pmtk-store"), elapsed=60.3)
    for name, n, children, pages in [
        ("Organization", 23, 83, 1),
        ("Referral", 1641, 1641, 17),
        ("HealthcareService", 12, 12, 1),
        ("Appointment", 40986, 122958, 410),
    ]:
        summary.resources.append(
            ResourceSync(
                resource=name,
                mode="full",
                fetched=n,
                rows={name: n, "child": children},
                pages=pages,
                requests=pages,
                elapsed=53.5,
            )
        )
    summary.resources.append(
        ResourceSync(
            resource="Invoice",
            mode="incremental",
            status="failed",
            error="DataValidationError: invoice_line: 14 failure(s) in column total_gross_value",
        )
    )
    return summary


def _terminal(width: int) -> Console:
    """A terminal as toolkit._cli.make_console makes it: soft wrap, so a line longer than
    the terminal is left to the terminal, which breaks it anywhere (mid-number too)."""
    return Console(
        file=io.StringIO(), width=width, force_terminal=True, color_system=None, soft_wrap=True
    )


@pytest.mark.parametrize("width", [60, 80, 100])
def test_the_sync_summary_fits_the_terminal_and_keeps_every_value(width: int) -> None:
    console = _terminal(width)
    table = _summary().table()
    emit(console, table)
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert all(len(line) <= width for line in shown.splitlines()), shown
    assert "…" not in shown
    words = set(shown.split())
    for r in _summary().resources:
        assert r.resource in shown
        for number in (f"{r.fetched:,}", f"{r.elapsed:.1f}"):
            assert number in words or f"{number}," in words, (number, shown)
    assert "total_gross_value" in words


def test_a_table_that_fits_is_drawn_as_a_table() -> None:
    table = Table(title="pmtk check")
    for name in ("Category", "Passed", "Failed"):
        table.add_column(name)
    table.add_row("reference", "12", "0")
    console = _terminal(80)
    emit(console, table)
    assert "┃ Category" in console.file.getvalue()  # type: ignore[attr-defined]
