"""The sync's bars on an 80-column terminal: why a bar waits, and that every bar ends."""

from __future__ import annotations

import dataclasses
import io
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from toolkit.retries import RetryNotice
from toolkit.store import PageProgress, SyncProgress, sync
from toolkit.throttle import RATE_LIMITED


def _terminal() -> Console:
    return Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None)


def _screen(display: SyncProgress) -> str:
    """The live view as an 80-column terminal draws it now."""
    console = Console(record=True, width=80, file=io.StringIO())
    console.print(display.progress.get_renderable())
    return console.export_text()


def test_a_wait_is_said_on_the_bar_itself_at_80_columns() -> None:
    display = SyncProgress("bars", console=_terminal())
    display.start("Appointment")
    display(PageProgress("Appointment", page=161, pages=161, records=16100, total=40986))
    display.wait(49.0, RATE_LIMITED)
    screen = _screen(display)
    (line,) = [row for row in screen.splitlines() if row.startswith("Appointment")]
    assert "waiting 49 s: rate limit (429)" in line or "waiting 48 s: rate limit (429)" in line
    assert "16100/40986" in line  # the count stays readable beside the wait
    # it counts down: the status is rendered from the clock, not frozen text
    render = display.progress.tasks[0].fields["status"]
    import time

    assert render(time.monotonic() + 10).startswith(("waiting 39 s", "waiting 38 s"))
    assert render(time.monotonic() + 60) == ""  # the wait is over: the bar comes back
    # The server says "no requests left" as it answers a page: the wait is announced
    # before that page is staged, and staging it must not wipe the wait off the bar.
    display(PageProgress("Appointment", page=162, pages=162, records=16200, total=40986))
    assert display.status("Appointment").startswith("waiting")
    display.wait(0.05, RATE_LIMITED)
    time.sleep(0.1)
    display(PageProgress("Appointment", page=163, pages=163, records=16300, total=40986))
    assert display.status("Appointment") == ""  # a page after the wait clears it


def test_a_retry_is_said_on_the_bar_with_its_countdown() -> None:
    display = SyncProgress("bars", console=_terminal())
    display.start("Coverage")
    display.retry(RetryNotice("http://127.0.0.1:9/main/Coverage", 2, 4.0, "ConnectError"))
    (line,) = [row for row in _screen(display).splitlines() if row.startswith("Coverage")]
    assert "connecting to 127.0.0.1:9" in line


class _DropsTotal(SyncProgress):
    """A display fed as by a server that gives no ``Bundle.total``; stops after ``stop`` pages."""

    def __init__(self, *args: Any, stop: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stop = stop
        self.seen = 0
        self.statuses: list[str] = []

    def __call__(self, event: PageProgress) -> None:
        self.seen += 1
        self.statuses.append(self.status(event.resource))
        super().__call__(dataclasses.replace(event, total=None))
        if self.stop is not None and self.seen == self.stop:
            raise KeyboardInterrupt


def test_after_a_resumed_sync_every_bar_ends_and_its_clock_stops(
    dep: Any, tmp_path: Path, new_client: Any
) -> None:
    store = tmp_path / "store"
    with new_client(dep) as client:
        first = _DropsTotal("bars", console=_terminal(), stop=3)
        with pytest.raises(KeyboardInterrupt):
            sync(client, store, resources=["Appointment"], progress=first)
        # even the interrupted bar stopped its clock when the display closed
        assert all(task.stop_time is not None for task in first.progress.tasks)
        again = _DropsTotal("bars", console=_terminal())
        summary = sync(client, store, resources=["Appointment", "Practitioner"], progress=again)
    assert summary["Appointment"].resumed
    # the resume said why the bar starts part-way, on the bar, before new pages came
    assert re.fullmatch(r"resuming after page \d+ \([\d,]+ records kept\)", again.statuses[0])
    for task in again.progress.tasks:
        assert task.total is not None and task.completed == task.total, task.description
        assert task.finished  # rich stops the clock of a finished task
    screen = _screen(again)
    assert "/?" not in screen
    fetched = summary["Appointment"].fetched
    staged_before = again.progress.tasks[0].completed - fetched
    assert staged_before >= 0
    assert f"{again.progress.tasks[0].completed}/{again.progress.tasks[0].completed}" in screen
