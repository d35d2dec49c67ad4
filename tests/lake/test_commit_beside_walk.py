"""A lake sync commits each resource on a thread while it walks the next one.

A commit costs no wall time beside a walk that waits on the request budget. What
must still hold, each shown here over loopback HTTP against the mock:

* the commit runs while the next walk does (else nothing is gained);
* one commit at a time, in the order the resources were walked;
* a commit that fails stops the sync with its error; the resource walked meanwhile
  is not committed and keeps its staged pages, so the next run resumes both walks;
* a walk that fails while a commit runs: the commit ends (its pin moved) before the
  sync raises, and a failure of both names both.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import toolkit_client
from tests.lake.conftest import ground_truth
from toolkit import lake
from toolkit.lake.commit import lake_tables

FIRST, SECOND = "Organization", "Appointment"


class Watching:
    """A client whose list walks are seen: which resource is walked, and when each ends."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.walking: str | None = None
        self.started = {FIRST: threading.Event(), SECOND: threading.Event()}
        self.ended = {FIRST: threading.Event(), SECOND: threading.Event()}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def walk(self, resource_type: str, **options: Any) -> Any:
        self.walking = resource_type
        self.started[resource_type].set()
        return _Ending(self.inner.walk(resource_type, **options), self.ended[resource_type])

    def breaking(self, resource: str) -> Any:
        """An ``after_part`` hook: the network goes away during ``resource``'s walk."""

        def broken(part: int) -> None:
            if self.walking == resource:
                raise ConnectionError("the network went away")

        return broken


class _Ending:
    """A walk that sets ``ended`` once its last page has been taken."""

    def __init__(self, walk: Any, ended: threading.Event) -> None:
        self.walk, self.ended = walk, ended

    def __getattr__(self, name: str) -> Any:
        return getattr(self.walk, name)

    def __iter__(self) -> Any:
        yield from self.walk
        self.ended.set()


def _sync(client: Any, where: Path, **options: Any) -> lake.LakeSyncSummary:
    return lake.sync(client, where, deployment="north", resources=[FIRST, SECOND], **options)


def test_a_resource_is_committed_while_the_next_is_walked_one_commit_at_a_time(
    tmp_path: Path, mock_deployment: Any
) -> None:
    where = tmp_path / "lake"
    committed: list[str] = []
    overlapped: list[bool] = []

    with toolkit_client(mock_deployment) as client:
        watching = Watching(client)

        def after_table(table: str) -> None:
            committed.append(table)
            if table == FIRST:  # the first resource's first table: its commit is under way
                # the next walk runs meanwhile, to its end; a commit of the second
                # resource started now would come between the first one's tables
                overlapped.append(watching.ended[SECOND].wait(60))
                time.sleep(0.3)

        summary = _sync(watching, where, after_table=after_table)
    assert overlapped == [True], "the second resource was not walked during the first's commit"
    firsts = set(lake_tables(FIRST))
    assert committed[: len(firsts)] == [t for t in committed if t in firsts]
    assert set(committed) == firsts | set(lake_tables(SECOND))
    for resource in (FIRST, SECOND):
        assert summary[resource].upserted == len(ground_truth(mock_deployment, resource))
        held = lake.load(resource, where, deployment="north")
        assert set(held["id"]) == set(ground_truth(mock_deployment, resource))


@pytest.mark.parametrize("failing", [FIRST, SECOND])
def test_a_failed_commit_stops_the_sync_and_the_walks_not_committed_resume(
    tmp_path: Path, mock_deployment: Any, failing: str
) -> None:
    where = tmp_path / "lake"

    def full_disk(table: str) -> None:
        if table == failing:
            raise OSError(28, "No space left on device")

    with toolkit_client(mock_deployment) as client:
        with pytest.raises(OSError, match="No space left"):
            _sync(client, where, after_table=full_disk)
        # the first commit that fails is the last: the second resource was walked
        # while the first one's commit ran, and is not committed when that one failed
        committed = [p.resource for p in lake.pins(where, "north")]
        assert committed == ([] if failing == FIRST else [FIRST])
        again = _sync(client, where)
    for resource in (FIRST, SECOND):
        # a walk not committed kept its pages: the next run resumes it
        resumed = again[resource].resumed_from_page is not None
        assert resumed == (resource not in committed), resource
        held = lake.load(resource, where, deployment="north")
        truth = ground_truth(mock_deployment, resource)
        assert held.height == len(truth) and set(held["id"]) == set(truth), resource


def test_a_walk_that_fails_beside_a_commit_lets_the_commit_end_first(
    tmp_path: Path, mock_deployment: Any
) -> None:
    where = tmp_path / "lake"

    with toolkit_client(mock_deployment) as client:
        watching = Watching(client)

        def slow(table: str) -> None:
            if table == FIRST:
                time.sleep(1.0)  # the commit is still under way when the walk fails

        with pytest.raises(ConnectionError):
            _sync(watching, where, after_table=slow, after_part=watching.breaking(SECOND))
    # raised only once the first resource's commit had ended: its pin moved
    assert [p.resource for p in lake.pins(where, "north")] == [FIRST]


def test_a_walk_and_a_commit_that_both_fail_are_both_named(
    tmp_path: Path, mock_deployment: Any
) -> None:
    where = tmp_path / "lake"

    with toolkit_client(mock_deployment) as client:
        watching = Watching(client)

        def full_disk(table: str) -> None:
            if table == FIRST:
                watching.started[SECOND].wait(60)
                raise OSError(28, "No space left on device")

        with pytest.raises(ConnectionError) as raised:
            _sync(watching, where, after_table=full_disk, after_part=watching.breaking(SECOND))
    notes = getattr(raised.value, "__notes__", [])
    assert any("No space left on device" in note for note in notes), notes
    assert lake.pins(where, "north") == []
