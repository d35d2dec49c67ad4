"""The catch-up walks beside the worker: changes apply while it runs, and it loses nothing.

A restarted listener's catch-up walks ``_lastUpdated`` from the store's bound in a
thread of its own and commits what it read through the worker's own path
(``toolkit.webhooks.catchup``). The client here is the real one over loopback, with
one seam: its list walks stop before handing on a page until the test lets them
go, so the test decides what happens between the walk's read and its commit.

Each test fails on the code before the change (where the catch-up was a store sync
run by the worker itself, holding the store for its whole walk) or on a slip in the
rules it keeps: a worker blocked by the walk, a deleted record written back, an
older version written over a newer one, a bound moved backwards.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest

from tests.conftest import api_client, describe
from tests.listen.conftest import notification
from toolkit.client import Client
from toolkit.store import load, read_manifest, verify
from toolkit.store.merge import drop_missing, record_catch_up
from toolkit.store.resume import later_since
from toolkit.webhooks import listen


@pytest.fixture
def api(dep: Any) -> Iterator[httpx.Client]:
    with api_client(dep) as c:
        yield c


class HeldWalks:
    """A :class:`toolkit.Client` whose list walks read each page, then wait for
    :attr:`go` before handing it on; :attr:`reached` is set once a page is waiting."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self.reached = threading.Event()
        self.go = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def walk(self, *args: Any, **kwargs: Any) -> Any:
        inner = self._client.walk(*args, **kwargs)
        held = self

        class Walk:
            @property
            def summary(self) -> Any:
                return inner.summary

            def __iter__(self) -> Iterator[Any]:
                for page in inner:
                    held.reached.set()
                    assert held.go.wait(60), "the test never let the walk go on"
                    yield page

        return Walk()


def _description(store: Path, rid: str) -> str | None:
    rows = load("Appointment", store).filter(pl.col("id") == rid)
    value: str | None = rows["description"].item() if rows.height else None
    return value


def _until(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def _announce(url: str, rid: str, *, delete: bool = False) -> None:
    body = notification(("Appointment", rid), delete=delete)
    answer = httpx.post(url, content=body, headers={"Content-Type": "application/fhir+json"})
    assert answer.status_code in (200, 201, 202), answer.text


def test_changes_apply_while_the_catch_up_walks(
    dep: Any, store: Path, api: httpx.Client, client: Client
) -> None:
    ids = load("Appointment", store)["id"].to_list()
    missed, live = str(ids[40]), str(ids[41])
    dep.advance_clock(5)
    describe(api, missed, "changed while nobody listened")
    held = HeldWalks(client)
    with listen(store, client=held, catch_up=True, no_auth=True) as receiver:
        assert held.reached.wait(30), receiver.stats.catch_up
        assert receiver.status()["worker"] == "catching up"
        describe(api, live, "announced during the catch-up")
        _announce(receiver.url, live)
        # applied while the walk still waits: the worker is not held by it
        assert _until(lambda: _description(store, live) == "announced during the catch-up", 15)
        assert _description(store, missed) != "changed while nobody listened"
        held.go.set()
        assert receiver.wait_idle(60), receiver.stats
        assert receiver.stats.catch_up.startswith("ok"), receiver.stats.catch_up
    assert _description(store, missed) == "changed while nobody listened"
    assert _description(store, live) == "announced during the catch-up"
    assert verify(store).ok


def test_a_record_deleted_while_the_catch_up_walks_is_not_written_back(
    dep: Any, store: Path, api: httpx.Client, client: Client
) -> None:
    rid = str(load("Appointment", store)["id"][50])
    dep.advance_clock(5)
    describe(api, rid, "read by the catch-up, then deleted")
    held = HeldWalks(client)
    with listen(store, client=held, catch_up=True, no_auth=True) as receiver:
        assert held.reached.wait(30)  # the page holding the record has been read
        dep.delete("Appointment", [rid])
        _announce(receiver.url, rid, delete=True)
        assert _until(lambda: rid not in load("Appointment", store)["id"].to_list(), 15)
        held.go.set()  # the walk now commits the version it read before the delete
        assert receiver.wait_idle(60), receiver.stats
        assert receiver.stats.catch_up.startswith("ok"), receiver.stats.catch_up
    assert rid not in load("Appointment", store)["id"].to_list()
    raw = load("Appointment", store, table="_raw_Appointment")
    assert rid not in raw["id"].to_list()


def _caught_up(text: str, resource: str) -> str:
    """``"(F fetched, W written…)"`` of ``resource`` in a catch-up's summary."""
    part = text.split(f"{resource} caught up ", 1)[1]
    return part[: part.index(")") + 1]


def test_the_catch_up_writes_only_newer_versions_and_moves_the_bound(
    dep: Any, store: Path, api: httpx.Client, client: Client
) -> None:
    with listen(store, client=client, catch_up=True, no_auth=True) as receiver:
        assert receiver.wait_idle(60), receiver.stats  # whatever other tests changed
    rid = str(load("Appointment", store)["id"][60])
    dep.advance_clock(5)
    describe(api, rid, "announced, then walked again")
    with listen(store, client=client, catch_up=False, no_auth=True) as receiver:
        _announce(receiver.url, rid)
        assert receiver.wait_idle(30), receiver.stats
    assert _description(store, rid) == "announced, then walked again"
    before = read_manifest(store)["resources"]["Appointment"]
    # the walk starts in a later second of the server's clock (its Date, whole seconds)
    # than the record's stamp, so its bound can be "after the record" (gt), not "ge"
    dep.advance_clock(2)
    with listen(store, client=client, catch_up=True, no_auth=True) as receiver:
        assert receiver.wait_idle(60), receiver.stats
        text = receiver.stats.catch_up
    # the walk read the record again, at the version already stored: nothing written
    assert _caught_up(text, "Appointment") == "(1 fetched, 0 written)", text
    after = read_manifest(store)["resources"]["Appointment"]
    assert after["tables"] == before["tables"]
    assert later_since(after["next_since"], before["next_since"]) == after["next_since"]
    assert after["next_since"] != before["next_since"]
    assert after["last_sync"]["by"] == "pmtk listen (catch-up)"
    # and the next restart starts from there: nothing changed, nothing fetched
    with listen(store, client=client, catch_up=True, no_auth=True) as receiver:
        assert receiver.wait_idle(60), receiver.stats
        text = receiver.stats.catch_up
    assert _caught_up(text, "Appointment") == "(0 fetched, 0 written)", text


def test_a_patient_deleted_while_nobody_listened_is_dropped_by_the_catch_up(
    dep: Any, store: Path, client: Client
) -> None:
    rid = str(load("Patient", store)["id"][5])
    dep.delete("Patient", [rid])
    with listen(store, client=client, catch_up=True, no_auth=True) as receiver:
        assert receiver.wait_idle(60), receiver.stats
        text = receiver.stats.catch_up
    assert _caught_up(text, "Patient").endswith(", 1 deleted)"), text  # not in $export-ids
    assert rid not in load("Patient", store)["id"].to_list()
    assert verify(store).ok


def test_the_bound_only_moves_forward(store: Path) -> None:
    entry = read_manifest(store)["resources"]["Appointment"]
    held = entry["next_since"]
    # a walk that began before the stored bound (a sync ran meanwhile) moves nothing
    moved = record_catch_up(
        store,
        "Appointment",
        newest=None,
        server_time="2000-01-01T00:00:00Z",
        started_at="2000-01-01T00:00:00Z",
        fetched=0,
        pages=0,
    )
    assert not moved
    assert read_manifest(store)["resources"]["Appointment"]["next_since"] == held
    moved = record_catch_up(
        store,
        "Appointment",
        newest="2099-06-01T00:00:00Z",
        server_time="2100-01-01T00:00:00Z",
        started_at="2100-01-01T00:00:00Z",
        fetched=0,
        pages=0,
    )
    assert moved
    entry = read_manifest(store)["resources"]["Appointment"]
    assert entry["next_since"] == "gt2099-06-01T00:00:00Z"


def test_later_since_agrees_with_a_plain_ordering() -> None:
    from datetime import datetime

    bounds = [
        "ge2026-01-01T00:00:00Z",
        "gt2026-01-01T00:00:00Z",
        "ge2026-01-01T10:00:00+10:00",  # the same instant as the first
        "ge2026-01-01T00:00:01Z",
        "gt2025-12-31T23:59:59.999999Z",
    ]

    def order(bound: str) -> tuple[datetime, int]:
        return datetime.fromisoformat(bound[2:]), 1 if bound[:2] == "gt" else 0

    for a in bounds:
        assert later_since(a, None) == a and later_since(None, a) == a
        for b in bounds:
            want = a if order(a) >= order(b) else b
            assert order(later_since(a, b) or "") == order(want), (a, b)


def test_drop_missing_spares_what_is_newer_than_the_list(store: Path) -> None:
    patients = load("Patient", store).sort("last_updated")
    old, new = str(patients["id"][0]), str(patients["id"][-1])
    assert patients["last_updated"][0] < patients["last_updated"][-1]
    bound = patients["last_updated"][-1].strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    present = set(patients["id"].to_list()) - {old, new}
    from toolkit.store.layout import locked

    with locked(store):
        gone = drop_missing(store, "Patient", present, older_than=bound)
    assert gone == [old]  # the one at the bound (made after the list) is kept
    assert new in load("Patient", store)["id"].to_list()
