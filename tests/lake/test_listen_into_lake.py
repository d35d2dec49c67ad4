"""``pmtk listen --store LAKE --deployment NAME``: webhook changes land in a lake.

A real ``pmtk listen`` process receives notifications over loopback HTTP (written by
hand from the facts file) and commits them through ``toolkit.lake.apply_changes``
while a sync of the same deployment runs at the same time. The lake is then read by
``toolkit.load`` and by ``polars.scan_delta`` alone: each change is there, and the
sync lost nothing of what it wrote.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import polars as pl

from tests.conftest import api_client, describe, toolkit_client
from tests.lake.conftest import ground_truth
from tests.listen.conftest import listen_process, notification
from toolkit import lake
from toolkit.mock import serve

NAME = "clinic"


def _listen(dep: Any, where: Path) -> subprocess.Popen[str]:
    options = ["--store", str(where), "--deployment", NAME, "--port", "0", "--no-auth"]
    options += ["--no-catch-up", "--base-url", dep.base_url]
    return listen_process(dep, options)


def _scanned(where: Path) -> dict[str, str | None]:
    """``id -> description`` of the deployment's Appointments, read by Polars alone."""
    rows = (
        pl.scan_delta(str(where / "tables" / "Appointment"))
        .filter(pl.col("deployment") == NAME)
        .select("id", "description")
        .collect()
    )
    return dict(zip(rows["id"].to_list(), rows["description"].to_list(), strict=True))


def _until(condition: Any, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def test_a_change_posted_to_pmtk_listen_lands_in_the_lake_beside_a_running_sync(
    tmp_path: Path,
) -> None:
    import toolkit

    where = tmp_path / "lake"
    with serve(seed=0, scale="small", test_controls=True) as dep:
        with toolkit_client(dep) as client:
            lake.sync(client, where, deployment=NAME, resources=["Appointment"])
        ids = [str(i) for i in sorted(_scanned(where))[:12]]
        with api_client(dep) as api:
            for n, rid in enumerate(ids):
                describe(api, rid, f"from a webhook {n}")
        with _listen(dep, where) as proc:
            try:
                assert proc.stdout is not None
                url = proc.stdout.readline().split(": ", 1)[1].strip()
                failures: list[BaseException] = []
                syncing = threading.Thread(target=_sync_again, args=(dep, where, failures))
                syncing.start()  # a sync of the same deployment, at the same time
                for rid in ids:
                    body = notification(("Appointment", rid))
                    answer = httpx.post(
                        url, content=body, headers={"Content-Type": "application/fhir+json"}
                    )
                    assert answer.status_code == 202, answer.text
                syncing.join(300)
                assert not syncing.is_alive(), "the sync beside the receiver did not end"
                assert not failures, f"the sync beside the receiver failed: {failures!r}"
                # after the sync: only the receiver can bring these into the lake
                later = ids[:4]
                with api_client(dep) as api:
                    for rid in later:
                        describe(api, rid, f"after the sync {rid}")
                for rid in later:
                    # a new event: the vendor stamps it anew (a byte-identical body is a
                    # replay, which the receiver rightly does not queue again)
                    body = notification(("Appointment", rid)).replace(
                        b"2026-11-23T10:00:00Z", b"2026-11-23T11:00:00Z"
                    )
                    answer = httpx.post(
                        url, content=body, headers={"Content-Type": "application/fhir+json"}
                    )
                    assert answer.status_code == 202, answer.text
                wanted = {rid: f"from a webhook {n}" for n, rid in enumerate(ids)}
                wanted |= {rid: f"after the sync {rid}" for rid in later}
                landed = _until(lambda: {r: _scanned(where).get(r) for r in ids} == wanted)
            finally:
                proc.send_signal(signal.SIGINT)
                _out, errors = proc.communicate(timeout=30)
        assert landed, errors
        loaded = toolkit.load("Appointment", where, deployment=NAME)
        described = dict(zip(loaded["id"], loaded["description"], strict=True))
        assert {rid: described.get(rid) for rid in ids} == wanted, _what_was_committed(where)
        # the sync lost nothing: every record the deployment lists, at its version
        truth = ground_truth(dep, "Appointment")
        raw = pl.read_delta(str(where / "tables" / "_raw_Appointment")).filter(
            pl.col("deployment") == NAME
        )
        assert dict(zip(raw["id"], raw["last_updated"], strict=True)) == truth


def _sync_again(dep: Any, where: Path, failures: list[BaseException]) -> None:
    try:
        with toolkit_client(dep) as client:
            lake.sync(
                client,
                where,
                deployment=NAME,
                resources=["Appointment"],
                full=True,
                lock_timeout=240,
            )
    except BaseException as exc:  # reported by the test, not lost in the thread
        failures.append(exc)


def _what_was_committed(where: Path) -> str:
    """The pins and the main table's versions, so that a failure can be explained."""
    from deltalake import DeltaTable

    lines = [f"pin {p.resource} seq {p.seq}: {p.versions}" for p in lake.pins(where, NAME)]
    table = DeltaTable(str(where / "tables" / "Appointment"))
    for entry in table.history():
        lines.append(f"Appointment v{entry.get('version')}: {entry.get('operation')}")
    lines += [f"commit {h}" for h in lake.history(where, NAME).iter_rows(named=True)]
    return "\n".join(lines)


def test_dead_letters_and_status_take_the_lake_and_deployment(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from toolkit.cli import app
    from toolkit.webhooks import Change, Event, EventQueue

    where = tmp_path / "lake"
    journal = EventQueue(where / "_pmtk_listen" / NAME)
    journal.bury(Change(Event("Appointment", "1"), 0, attempts=3), "gave up: 500")
    journal.close()
    args = ["listen", "--store", str(where), "--deployment", NAME]
    listed = CliRunner().invoke(app, [*args, "--dead-letters"])
    assert listed.exit_code == 0, listed.output
    assert "Appointment/1, 3 attempt(s): gave up: 500" in listed.output
    status = CliRunner().invoke(app, [*args, "--status", "--port", "1", "--no-auth"])
    assert status.exit_code == 0, status.output
    assert "dead letters: 1" in status.output


def test_a_second_receiver_of_one_lake_deployment_is_refused(tmp_path: Path) -> None:
    """One worker per journal holds for a lake as for a store: the journal of a lake
    deployment is its own folder, and a second ``listen`` of it is refused (a receiver
    of another deployment of the same lake is not)."""
    from toolkit.errors import ConfigurationError
    from toolkit.webhooks import listen

    where = tmp_path / "lake"
    with serve(seed=0, scale="small") as dep, toolkit_client(dep) as client:
        lake.sync(client, where, deployment=NAME, resources=["Organization"])
        lake.sync(client, where, deployment="other", resources=["Organization"])
        first = listen(where, client=client, deployment=NAME, no_auth=True, catch_up=False)
        with first as running:
            second = listen(where, client=client, deployment=NAME, no_auth=True, catch_up=False)
            try:
                with second:
                    raise AssertionError("a second receiver of one lake deployment started")
            except ConfigurationError as exc:
                assert f":{running.port}" in str(exc) and "--take-over" in str(exc)
            other = listen(where, client=client, deployment="other", no_auth=True, catch_up=False)
            with other as beside:
                assert beside.port != running.port
