"""Missed events noticed and healed: a sender that skips event numbers.

The vendor documents no retries (``public-docs-facts.md``, "Events"), so an event the
receiver never got is only visible as a hole in ``notificationEvent[].eventNumber``
or an ``eventsSinceSubscriptionStart`` ahead of what arrived. Here a change is made
on the real mock and its notification is *not* sent (the sender skips its number);
the receiver must notice the gap after its grace period, log the missing numbers,
show them in its status, and heal the store with an incremental sync.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest

from tests.conftest import api_client
from tests.listen.test_every_event_once import numbered, post
from toolkit.client import Client
from toolkit.store import load
from toolkit.webhooks import listen


@pytest.fixture
def api(dep: Any) -> Iterator[httpx.Client]:
    with api_client(dep) as c:
        yield c


def _described(store: Path, rid: str) -> str | None:
    rows = load("Appointment", store).filter(pl.col("id") == rid)
    value: str | None = rows["description"].item()
    return value


def _patch(api: httpx.Client, rid: str, text: str) -> None:
    answer = api.patch(
        f"Appointment/{rid}",
        json={"description": text},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert answer.status_code == 200, answer.text


def _until(check: Any, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("how", ["skipped-number", "count-ahead"])
def test_a_missed_event_is_noticed_logged_shown_and_healed_by_a_sync(
    store: Path, client: Client, api: httpx.Client, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    seen, missed = (str(i) for i in load("Appointment", store)["id"][30:32])
    text = f"changed while its event was lost ({how})"
    caplog.set_level(logging.INFO, logger="pmtk.listen")
    with listen(store, client=client, no_auth=True, catch_up=False, gap_grace=0.3) as receiver:
        assert post(receiver.url, numbered("Appointment", seen, 1)) == 202
        assert receiver.wait_idle(30)
        _patch(api, missed, text)  # event 2: never delivered
        if how == "skipped-number":
            assert post(receiver.url, numbered("Appointment", seen, 3)) == 202
            missing = [2]
        else:  # the status says 3 events happened; only 1 arrived
            assert post(receiver.url, numbered("Appointment", seen, 1, since=3)) == 202
            missing = [2, 3]
        assert _until(lambda: receiver.stats.gaps_healed == 1), receiver.status()
        assert _described(receiver.store, missed) == text
        events = receiver.status()["events"]
        assert events["last_gap"]["missing"] == missing, events
        assert events["last_gap"]["types"] == ["Appointment"]
        assert receiver.stats.gaps_healed == 1
    shown = ", ".join(str(n) for n in missing)
    assert any(f"never arrived: number(s) {shown}" in r.getMessage() for r in caplog.records)


def test_out_of_order_numbers_within_the_grace_period_are_no_gap(
    store: Path, client: Client
) -> None:
    rid = str(load("Appointment", store)["id"][33])
    with listen(store, client=client, no_auth=True, catch_up=False, gap_grace=60) as receiver:
        for number in (1, 3, 2):
            assert post(receiver.url, numbered("Appointment", rid, number)) == 202
        assert receiver.wait_idle(30)
        sub = next(iter(receiver.status()["events"]["subscriptions"].values()))
        assert sub["missing_count"] == 0 and sub["highest"] == 3
        assert receiver.stats.gaps_healed == 0


def test_a_gap_waiting_is_shown_by_status(store: Path, client: Client) -> None:
    rid = str(load("Appointment", store)["id"][34])
    with listen(store, client=client, no_auth=True, catch_up=False, gap_grace=600) as receiver:
        for number in (1, 4):
            assert post(receiver.url, numbered("Appointment", rid, number)) == 202
        assert receiver.wait_idle(30)
        sub = next(iter(receiver.status()["events"]["subscriptions"].values()))
        assert sub["missing"] == [2, 3] and sub["missing_count"] == 2
        from toolkit.webhooks.command import format_status

        lines = format_status(receiver.status())
        assert any(line.startswith("missing:      2 event(s) of ") for line in lines), lines
