"""Every rate-limit reason fits the bar of an 80-column terminal whole, never cut.

``waiting 49 s: rate limit (server reports 0 requests left)`` was drawn as
``rate limit (server…``: the reason is what says why the bar does not move.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from toolkit.store import PageProgress, SyncProgress
from toolkit.throttle import PACING, RATE_LIMITED, WINDOW_SPENT, remaining_reason


@pytest.mark.parametrize("reason", [PACING, RATE_LIMITED, WINDOW_SPENT, remaining_reason(10)])
def test_a_wait_reason_is_shown_whole_at_80_columns(reason: str) -> None:
    display = SyncProgress("bars", console=Console(file=io.StringIO(), width=80))
    display.start("Appointment")
    display(PageProgress("Appointment", page=161, pages=161, records=16100, total=40986))
    display.wait(119.4, reason)
    screen = Console(record=True, width=80, file=io.StringIO())
    screen.print(display.progress.get_renderable())
    (line,) = [row for row in screen.export_text().splitlines() if row.startswith("Appointment")]
    assert f": {reason}" in line and "…" not in line, line
    assert "16100/40986" in line
