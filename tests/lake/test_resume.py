"""A lake sync stopped mid-walk resumes from its last staged page, and loses nothing.

The walk runs in a child process that ``os._exit``s after its first staged part (a
SIGKILL, a power cut); the next run must ask for the pages from the last staged one
on, not from the first, and the lake must then hold the deployment's list as read
over plain HTTP (with Polars' ``read_delta``, no pmtk). Hostile stages (an uncounted
part, a garbage checkpoint, a second run holding the folder) never reach the lake.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl

from tests.conftest import toolkit_client
from tests.lake.conftest import delta_rows, ground_truth
from toolkit import lake
from toolkit.lake.location import Location
from toolkit.lake.stage import stage_folder

KILLER = """
import os, sys
from toolkit import lake
from toolkit.client import Client
def die(part):
    os._exit(9)  # after the first part and its checkpoint: no cleanup, no commit
with Client(base_url=os.environ["PM_BASE_URL"], client_id=os.environ["PM_CLIENT_ID"],
            client_secret=os.environ["PM_CLIENT_SECRET"], progress=False,
            requests_per_minute=None) as client:
    lake.sync(client, sys.argv[1], deployment="north", resources=["Appointment"], after_part=die)
"""


def _killed_mid_walk(dep: Any, where: Path) -> None:
    env = {
        **os.environ,
        "PM_BASE_URL": dep.base_url,
        "PM_CLIENT_ID": dep.client_id,
        "PM_CLIENT_SECRET": dep.client_secret,
    }
    done = subprocess.run([sys.executable, "-c", KILLER, str(where)], env=env, timeout=120)
    assert done.returncode == 9


def _stage(where: Path) -> Path:
    return stage_folder(Location.of(where).uri, "north", "Appointment")


def _sync(dep: Any, where: Path) -> lake.LakeSyncSummary:
    with toolkit_client(dep) as client:
        return lake.sync(client, where, deployment="north", resources=["Appointment"])


def _stored(where: Path) -> dict[str, str]:
    raw = delta_rows(where, "_raw_Appointment", "north")
    assert raw["id"].n_unique() == raw.height, "a record is stored twice"
    return dict(zip(raw["id"], raw["last_updated"], strict=True))


def test_a_walk_killed_mid_way_resumes_from_its_last_staged_page(
    tmp_path: Path, fresh_mock: Any
) -> None:
    where = tmp_path / "lake"
    truth = ground_truth(fresh_mock, "Appointment")
    pages = -(-len(truth) // 100)
    assert pages > 20  # more than one part of 20 pages
    _killed_mid_walk(fresh_mock, where)
    assert not (where / "tables" / "Appointment").exists()  # nothing committed
    # Records move between pages while the run is stopped: three of page 1 deleted.
    gone = list(truth)[:3]
    fresh_mock.delete("Appointment", gone)
    summary = _sync(fresh_mock, where)
    done = summary["Appointment"]
    # From the last staged page (20, read again), not from the first.
    assert done.resumed_from_page == 20
    assert done.pages == pages - 19
    now = ground_truth(fresh_mock, "Appointment")
    stored = _stored(where)
    # Nothing missed (the records that moved onto page 20 were read again) ...
    assert {k: v for k, v in stored.items() if k in now} == now
    # ... and what else is stored is only what was deleted after the walk began.
    assert set(stored) - set(now) <= set(gone)
    assert done.records_fetched == len(now)  # each record of the list counted once
    assert list(_stage(where).glob("*/part-*.parquet")) == []  # emptied once committed


def test_a_part_the_checkpoint_does_not_count_never_reaches_the_lake(
    tmp_path: Path, fresh_mock: Any
) -> None:
    where = tmp_path / "lake"
    _killed_mid_walk(fresh_mock, where)
    # As a crash after a part's files and before its checkpoint leaves them: a part
    # numbered past the checkpoint, holding a forged version of a record.
    stage = _stage(where)
    raw = pl.read_parquet(next((stage / "_raw_Appointment").glob("part-*.parquet")))
    forged = raw.head(1).with_columns(pl.lit("2099-01-01T00:00:00Z").alias("last_updated"))
    forged.write_parquet(stage / "_raw_Appointment" / "part-000009.parquet")
    _sync(fresh_mock, where)
    assert _stored(where) == ground_truth(fresh_mock, "Appointment")


def test_a_damaged_checkpoint_starts_the_walk_over(tmp_path: Path, fresh_mock: Any) -> None:
    where = tmp_path / "lake"
    _killed_mid_walk(fresh_mock, where)
    (_stage(where) / "checkpoint.json").write_text('{"format": 1, "parts": "many"')
    done = _sync(fresh_mock, where)["Appointment"]
    assert done.resumed_from_page is None
    assert _stored(where) == ground_truth(fresh_mock, "Appointment")


def test_a_second_run_of_the_resource_stages_privately(tmp_path: Path, fresh_mock: Any) -> None:
    where = tmp_path / "lake"
    _killed_mid_walk(fresh_mock, where)
    stage = _stage(where)
    kept = sorted(p.read_bytes() for p in stage.glob("*/part-*.parquet"))
    with open(stage / "lock", "a+") as held:  # another run holds the folder
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        done = _sync(fresh_mock, where)["Appointment"]
    assert done.resumed_from_page is None
    assert _stored(where) == ground_truth(fresh_mock, "Appointment")
    # The holder's pages are untouched (it resumes them itself).
    assert sorted(p.read_bytes() for p in stage.glob("*/part-*.parquet")) == kept
