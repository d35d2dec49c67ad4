"""``Listener.wait_idle`` never says idle while a change is still to be applied.

The worker releases a waiting change (its type now has a full-synced table) by
moving it from ``waiting`` to ``queued`` in one journal transaction; the queue's
count is cached and counted again only after that transaction. A check that read
the count first, and the waiting changes after, could see the change in neither
place (3 runs in 10 of ``test_delivery``'s waiting test failed that way). These
tests put the release exactly in each gap.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolkit.webhooks.events import Event
from toolkit.webhooks.listener import Listener
from toolkit.webhooks.queue import Change


class _Target:
    """A store target whose full-synced types are fixed."""

    def synced_types(self) -> set[str]:
        return {"Appointment"}


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[Listener]:
    made = Listener(
        tmp_path,
        None,
        auth_header=None,
        max_body_bytes=10_000,
        catch_up=False,
        errors="raise",
        target=_Target(),
    )
    made.caught_up.set()
    made._idle.set()  # the worker between batches
    yield made
    made.stop_worker()


def _hold_one(listener: Listener) -> None:
    event = Event("Appointment", "1", "update", "2026-11-23T10:00:00Z", "1")
    listener.queue.hold(Change(event, time.time_ns()))


def _release_after_first_call(listener: Listener, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's release runs right after whichever of the two reads comes first."""
    queue = listener.queue
    released = False

    def wrap(name: str) -> None:
        real = getattr(queue, name)

        def call(*args: Any) -> Any:
            nonlocal released
            answer = real(*args)
            if not released:
                released = True
                queue.release({"Appointment"})
            return answer

        monkeypatch.setattr(queue, name, call)

    wrap("count")
    wrap("waiting")


def test_a_release_between_the_two_reads_is_not_idle(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hold_one(listener)
    _release_after_first_call(listener, monkeypatch)
    assert listener.wait_idle(timeout=0.05) is False
    assert listener.queue.count() == 1  # the change is queued, not applied


def test_a_release_whose_count_is_not_refreshed_yet_is_not_idle(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hold_one(listener)
    queue = listener.queue
    # The release has committed; its refresh of the cached count has not run yet.
    monkeypatch.setattr(queue, "refresh", lambda: None)
    queue.release({"Appointment"})
    monkeypatch.undo()
    cached = queue._counts
    assert cached[0] == 0  # the stale count the check must not trust
    assert listener.wait_idle(timeout=0.05) is False


def test_nothing_queued_or_waiting_is_idle(listener: Listener) -> None:
    assert listener.wait_idle(timeout=1) is True


def test_a_change_waiting_for_a_type_not_synced_yet_is_idle(listener: Listener) -> None:
    event = Event("Invoice", "9", "update", "2026-11-23T10:00:00Z", "1")
    listener.queue.hold(Change(event, time.time_ns()))
    assert listener.wait_idle(timeout=1) is True  # it waits for a sync, not the worker
    _hold_one(listener)
    assert listener.wait_idle(timeout=0.05) is False  # its table exists: the worker's job
