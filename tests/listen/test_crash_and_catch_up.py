"""Nothing acknowledged is lost: kill -9 between the 202 and the store write, then restart.

``pmtk listen`` runs in a child process. The test holds the store's lock (as a
long ``pmtk sync`` would), so the child acknowledges events and fetches the
records but cannot write them; then the child is killed with SIGKILL. A new
receiver on the same store must apply the queued events from disk alone (its
catch-up sync is off, so the queue is the only way the change can arrive).
"""

from __future__ import annotations

import fcntl
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest

from tests.conftest import api_client, describe
from tests.listen.conftest import SECRET_HEADER, listen_process, notification
from toolkit.client import Client
from toolkit.store import load, read_manifest, verify
from toolkit.webhooks import listen

NAME, VALUE = SECRET_HEADER


@pytest.fixture
def api(dep: Any) -> Iterator[httpx.Client]:
    with api_client(dep) as c:
        yield c


def _unapplied(store: Path) -> list[str]:
    """Record ids the journal holds unapplied, read with plain ``sqlite3``."""
    import contextlib
    import sqlite3

    with contextlib.closing(sqlite3.connect(store / ".webhooks" / "journal.sqlite3")) as db:
        rows = db.execute(
            "SELECT rid FROM changes WHERE state IN ('queued', 'claimed', 'read')"
        ).fetchall()
    return [str(rid) for (rid,) in rows]


def _description(store: Path, rid: str) -> str | None:
    rows = load("Appointment", store).filter(pl.col("id") == rid)
    value: str | None = rows["description"].item() if rows.height else None
    return value


def test_events_acknowledged_before_a_kill_9_are_applied_after_restart(
    dep: Any, store: Path, api: httpx.Client, client: Client
) -> None:
    ids = [str(i) for i in load("Appointment", store)["id"][20:23]]
    changed, deleted = ids[:2], ids[2]
    env = {"PM_WEBHOOK_AUTH_HEADER": f"{NAME}: {VALUE}"}
    lock = None
    options = ["--store", str(store), "--port", "0", "--no-catch-up", "--base-url", dep.base_url]
    with listen_process(dep, options, env=env) as proc:
        try:
            assert proc.stdout is not None
            first = "".join(proc.stdout.readline() for _ in range(3))  # URL, store, header
            assert first.startswith("webhook URL: http://127.0.0.1:"), first
            url = first.splitlines()[0].split(": ", 1)[1].strip()
            # A writer holds the store now: the child can acknowledge but not apply.
            lock = (store / ".lock").open("a+")
            fcntl.flock(lock, fcntl.LOCK_EX)
            for n, rid in enumerate(changed):
                describe(api, rid, f"after the crash {n}")
            dep.delete("Appointment", [deleted])
            headers = {NAME: VALUE.encode(), "Content-Type": "application/fhir+json"}
            bodies = [
                notification(*[("Appointment", rid) for rid in changed]),
                notification(("Appointment", deleted), delete=True),
                notification(("Appointment", changed[0])),  # a duplicate
            ]
            for body in bodies:
                assert httpx.post(url, content=body, headers=headers).status_code == 202
            assert len(_unapplied(store)) == 4  # three notifications, four changes
            time.sleep(0.5)  # let the child fetch and block on the lock
        finally:
            proc.send_signal(signal.SIGKILL)
            rest, errors = proc.communicate(timeout=10)
            if lock is not None:
                fcntl.flock(lock, fcntl.LOCK_UN)
                lock.close()
    assert proc.returncode == -signal.SIGKILL
    out = first + rest + errors
    assert VALUE not in out and "(value hidden)" in out
    # Killed before applying: the store still holds the old versions.
    assert all(_description(store, rid) != f"after the crash {n}" for n, rid in enumerate(changed))
    assert _description(store, deleted) is not None or deleted in load("Appointment", store)["id"]
    assert len(_unapplied(store)) in (3, 4)  # the worker may have merged the duplicate

    with listen(store, client=client, catch_up=False, no_auth=True) as receiver:
        assert receiver.wait_idle(30), receiver.stats
        # one per change; the duplicate once more when the killed child had already
        # read (and journaled) the batch before it arrived
        assert receiver.stats.applied in (3, 4)
    for n, rid in enumerate(changed):
        assert _description(store, rid) == f"after the crash {n}"
    assert deleted not in load("Appointment", store)["id"].to_list()
    assert not _unapplied(store)
    assert read_manifest(store)["events"]["last_applied"]["type"] == "Appointment"
    assert verify(store).ok


def test_the_catch_up_sync_covers_changes_made_while_the_receiver_was_down(
    dep: Any, store: Path, api: httpx.Client, client: Client, tmp_path: Path
) -> None:
    import shutil

    control = tmp_path / "control"
    shutil.copytree(store, control)
    rid = str(load("Appointment", store)["id"][30])
    dep.advance_clock(5)
    describe(api, rid, "changed while nobody listened")
    with listen(control, client=client, catch_up=False, no_auth=True) as receiver:
        assert receiver.wait_idle(30)
        assert receiver.stats.catch_up == "skipped"
    assert _description(control, rid) != "changed while nobody listened"
    sent_before = client.requests_sent
    with listen(store, client=client, catch_up=True, no_auth=True) as receiver:
        assert receiver.wait_idle(60)
        assert receiver.stats.catch_up.startswith("ok"), receiver.stats.catch_up
    assert _description(store, rid) == "changed while nobody listened"
    # incremental: a few list pages, not the whole resource again
    assert client.requests_sent - sent_before <= 4
