"""Free slots kept beside the notebooks' store: no ``$find`` on a rerun while fresh, and
asked again whenever the kept answer could be wrong (docs/notebooks.md, "Free slots").

The requests are counted by the mock (its own counters, by path), not by pmtk.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import api_client
from toolkit.client import Client
from toolkit.find_cache import CACHE_FOLDER, FIND_MAX_AGE, cached_find
from toolkit.mock import Deployment, serve
from toolkit.notebook_data import NotebookData
from toolkit.store import sync

START, END = "2026-11-02T00:00:00Z", "2026-11-06T00:00:00Z"


@pytest.fixture(scope="module")
def dep() -> Iterator[Deployment]:
    """A mock of this module's own: one test books over it (touches an appointment)."""
    with serve(seed=0, scale="small", test_controls=True, rate_limit=1_000_000) as deployment:
        yield deployment


@pytest.fixture
def client(dep: Deployment) -> Iterator[Client]:
    with Client(
        dep.base_url, dep.client_id, dep.client_secret, requests_per_minute=None, progress=False
    ) as c:
        yield c


@pytest.fixture(scope="module")
def synced(dep: Deployment, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("find") / "store"
    with Client(
        dep.base_url, dep.client_id, dep.client_secret, requests_per_minute=None, progress=False
    ) as c:
        sync(c, folder, resources=["Appointment"], progress=False)
    return folder


@pytest.fixture
def store(synced: Path, tmp_path: Path) -> Path:
    """A copy of the synced store, with nothing kept yet."""
    return Path(shutil.copytree(synced, tmp_path / "store"))


def _finds(dep: Deployment) -> int:
    """``$find`` requests the mock answered since its counters were reset."""
    return sum(n for path, n in dep.stats()["requests_by_path"].items() if "$find" in path)


def _served(dep: Deployment) -> set[str]:
    """The proposal ids ``$find`` serves for the window, read over plain HTTP."""
    ids: set[str] = set()
    with api_client(dep) as http:
        url: str | None = f"Appointment/$find?start={START}&end={END}&duration=30"
        while url:
            page = http.get(url).raise_for_status().json()
            ids |= {e["resource"]["id"] for e in page.get("entry", [])}
            url = next((x["url"] for x in page.get("link", []) if x["relation"] == "next"), None)
    return ids


def test_a_rerun_on_a_fresh_store_asks_no_find(
    dep: Deployment, client: Client, store: Path
) -> None:
    data = NotebookData(store)
    dep.reset_stats()
    first = data.find(client, START, END, 30)
    asked = _finds(dep)
    assert asked >= 1 and first.requests == asked and not first.cached
    assert set(first.slots["id"].to_list()) == _served(dep)
    dep.reset_stats()
    again = data.find(client, START, END, 30)
    assert _finds(dep) == 0 and again.requests == 0 and again.cached
    assert again.slots.equals(first.slots)
    assert again.fetched_at == first.fetched_at
    later = first.fetched_at + dt.timedelta(minutes=7)
    line = again.line(now=later)
    assert "kept from an earlier run" in line and "(7 minutes ago)" in line
    assert f"{first.fetched_at:%H:%M} UTC" in line


@pytest.mark.parametrize(
    ("minutes", "asked"),
    [(FIND_MAX_AGE / 60 - 1, False), (FIND_MAX_AGE / 60 + 1, True), (-5, True)],
    ids=["younger than max_age", "older than max_age", "a clock gone backwards"],
)
def test_kept_slots_are_asked_again_once_stale(
    dep: Deployment, client: Client, store: Path, minutes: float, asked: bool
) -> None:
    first = cached_find(client, store, START, END, 30)
    dep.reset_stats()
    now = first.fetched_at + dt.timedelta(minutes=minutes)
    again = cached_find(client, store, START, END, 30, now=now)
    assert (_finds(dep) > 0) is asked
    assert again.cached is not asked


def test_another_question_is_asked_not_answered_from_the_kept_one(
    dep: Deployment, client: Client, store: Path
) -> None:
    cached_find(client, store, START, END, 30)
    dep.reset_stats()
    other = cached_find(client, store, START, END, 60)
    assert _finds(dep) > 0 and not other.cached
    assert set(other.slots["minutes_duration"].unique().to_list()) <= {60}


def test_slots_are_asked_again_after_an_appointment_changed(
    dep: Deployment, client: Client, store: Path
) -> None:
    cached_find(client, store, START, END, 30)
    appointment = pl.read_parquet(next((store / "Appointment").glob("*.parquet")))["id"][0]
    dep.touch("Appointment", [appointment])  # a booking moved: the free time may differ
    sync(client, store, resources=["Appointment"], progress=False)
    dep.reset_stats()
    again = cached_find(client, store, START, END, 30)
    assert _finds(dep) > 0 and not again.cached


@pytest.mark.parametrize("damage", ["garbage data", "cut metadata", "edited data"])
def test_a_damaged_kept_answer_is_asked_again_never_read(
    dep: Deployment, client: Client, store: Path, damage: str
) -> None:
    first = cached_find(client, store, START, END, 30)
    (meta,) = (store / CACHE_FOLDER).glob("*.json")
    data = meta.with_suffix(".parquet")
    if damage == "garbage data":
        data.write_bytes(b"not parquet")
    elif damage == "cut metadata":
        meta.write_text(meta.read_text()[:20])
    else:  # a valid Parquet file with one slot fewer: its sha256 no longer matches
        first.slots.head(first.slots.height - 1).write_parquet(data)
    dep.reset_stats()
    again = cached_find(client, store, START, END, 30)
    assert _finds(dep) > 0 and not again.cached
    assert again.slots.equals(first.slots)
    assert json.loads(meta.read_text())["sha256"]  # the answer was kept again, whole
