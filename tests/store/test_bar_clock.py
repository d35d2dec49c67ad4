"""A bar's clock runs until its resource ends, not until its last page arrives.

Rich stops a task's clock when its count first reaches the total. A resource whose
last page arrived at once and whose time then went to a wait and the merge ended on
``0:00:00`` beside a summary that said it took 53 s.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from toolkit.store import PageProgress, SyncProgress
from toolkit.store.results import ResourceSync


def test_the_clock_of_a_bar_stops_when_its_resource_ends() -> None:
    now = [100.0]
    display = SyncProgress(
        "bars", console=Console(file=io.StringIO(), width=80, force_terminal=True)
    )
    display.progress.get_time = lambda: now[0]  # the clock the bars read (rich's get_time)
    display.start("Organization")
    now[0] += 0.2
    display(PageProgress("Organization", page=1, pages=1, records=23, total=23))
    now[0] += 53.0  # a rate-limit wait and the merge, after the last page
    display.done(ResourceSync(resource="Organization", mode="full", fetched=23))
    (task,) = display.progress.tasks
    assert task.finished
    assert task.finished_time == pytest.approx(53.2)
