"""The lake over real loopback HTTP: many deployments, consistent pins, nothing lost or mixed.

Each test compares what the lake holds, read with ``deltalake``/Polars alone (no pmtk),
with what the deployment lists over plain HTTP (:func:`ground_truth`).
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from tests.conftest import toolkit_client
from tests.lake.conftest import delta_rows, ground_truth
from toolkit import lake
from toolkit.cli import app
from toolkit.lake.location import Location
from toolkit.lake.state import LakeBusy, owner_id, pin_of, release_lease, take_lease
from toolkit.store.identity import WrongDeployment

RESOURCES = ["Organization", "Appointment"]


def _sync(dep: Any, where: Path | str, name: str | None, **kwargs: Any) -> lake.LakeSyncSummary:
    with toolkit_client(dep) as client:
        return lake.sync(client, where, deployment=name, resources=RESOURCES, **kwargs)


def _assert_matches(where: Path, name: str, dep: Any) -> None:
    """Every table of ``name`` in the lake equals the deployment's list, read without pmtk."""
    for resource in RESOURCES:
        truth = ground_truth(dep, resource)
        main = delta_rows(where, resource, name)
        assert main["id"].n_unique() == main.height, f"{resource}: duplicate ids"
        assert set(main["id"].to_list()) == set(truth), resource
        raw = delta_rows(where, f"_raw_{resource}", name)
        assert dict(zip(raw["id"], raw["last_updated"], strict=True)) == truth


def test_two_deployments_share_a_lake_without_mixing(tmp_path: Path, two_mocks: Any) -> None:
    a, b = two_mocks
    where = tmp_path / "lake"
    _sync(a, where, "north")
    _sync(b, where, "south")
    _assert_matches(where, "north", a)
    _assert_matches(where, "south", b)
    assert set(ground_truth(a, "Appointment").items()) != set(
        ground_truth(b, "Appointment").items()
    )
    # pmtk's load reads one deployment or all, the deployment column first
    both = lake.load("Appointment", where)
    assert both.columns[0] == "deployment"
    assert both.group_by("deployment").len().sort("deployment").rows() == [
        ("north", len(ground_truth(a, "Appointment"))),
        ("south", len(ground_truth(b, "Appointment"))),
    ]
    one = lake.load("Appointment", where, deployment="south", table="appointment_participant")
    assert set(one["deployment"]) == {"south"}
    direct = delta_rows(where, "appointment_participant", "south")
    assert one.height == direct.height
    # the partitions keep the deployments apart on disk too
    assert {p.name for p in (where / "tables" / "Appointment").glob("deployment=*")} == {
        "deployment=north",
        "deployment=south",
    }
    assert lake.verify(where).ok


def test_a_deployment_the_lake_does_not_know_is_refused(tmp_path: Path, two_mocks: Any) -> None:
    a, b = two_mocks
    where = tmp_path / "lake"
    _sync(a, where, "north")
    before = lake.pins(str(where))
    with pytest.raises(WrongDeployment, match="holds no deployment"):
        _sync(b, where, None)  # no name: b is not north
    with pytest.raises(WrongDeployment, match="Choose another --deployment name"):
        _sync(b, where, "north")  # north's name for another deployment
    assert lake.pins(str(where)) == before
    assert set(lake.deployments(str(where))) == {"north"}
    summary = _sync(a, where, None)  # the known deployment by identity alone
    assert summary.deployment == "north"
    assert all(r.mode == "incremental" for r in summary.resources.values())


@pytest.mark.parametrize("name", ["North", "ok\n", "../x", "", "a/b", "x" * 64, "-x"])
def test_deployment_names_must_fully_match(tmp_path: Path, name: str) -> None:
    from toolkit.errors import ConfigurationError
    from toolkit.lake.location import check_deployment_name

    with pytest.raises(ConfigurationError, match="is not allowed"):
        check_deployment_name(name)
    assert check_deployment_name("x" * 63) == "x" * 63


def test_changes_and_deletes_are_merged_by_key(tmp_path: Path, fresh_mock: Any) -> None:
    where = tmp_path / "lake"
    _sync(fresh_mock, where, "north")
    ids = sorted(ground_truth(fresh_mock, "Appointment"))
    gone, changed = ids[0], ids[1]
    fresh_mock.touch("Appointment", [changed])
    fresh_mock.delete("Appointment", [gone])
    summary = _sync(fresh_mock, where, "north", reconcile=True)
    result = summary["Appointment"]
    assert (result.mode, result.upserted, result.deleted) == ("incremental", 1, 1)
    _assert_matches(where, "north", fresh_mock)
    for table in ("appointment_participant", "appointment_supporting_information"):
        rows = delta_rows(where, table, "north")
        assert gone not in rows["appointment_id"].to_list()
    participants = delta_rows(where, "appointment_participant", "north")
    counts = participants.group_by("appointment_id").agg(pl.col("index").n_unique(), pl.len())
    assert (counts["index"] == counts["len"]).all(), "a replaced record left its old child rows"
    history = lake.history(str(where), "north").filter(pl.col("resource") == "Appointment")
    assert history["kind"].to_list() == ["sync-full", "sync-incremental"]
    assert history["deleted"].to_list() == [0, 1]


def test_a_crash_between_two_tables_is_invisible_and_repaired(
    tmp_path: Path, fresh_mock: Any
) -> None:
    where = tmp_path / "lake"
    _sync(fresh_mock, where, "north")
    before = lake.load("Appointment", where, deployment="north")
    changed = sorted(ground_truth(fresh_mock, "Appointment"))[5]
    fresh_mock.touch("Appointment", [changed])
    written: list[str] = []

    def crash(table: str) -> None:
        written.append(table)
        if len(written) == 2:
            raise KeyboardInterrupt  # the process dies between two tables' commits

    with pytest.raises(KeyboardInterrupt):
        _sync(fresh_mock, where, "north", after_table=crash)
    # the latest Delta version of the first two tables holds the change...
    raw = delta_rows(where, "_raw_Appointment", "north")
    stamps = dict(zip(raw["id"], raw["last_updated"], strict=True))
    assert any(t in written for t in ("Appointment", "_raw_Appointment")) or stamps
    # ...but a reader through pmtk sees every table at the last committed pin
    assert lake.load("Appointment", where, deployment="north").equals(before)
    # the lease was released, so the next sync runs at once and repairs
    summary = _sync(fresh_mock, where, "north")
    assert summary["Appointment"].upserted == 1
    _assert_matches(where, "north", fresh_mock)
    after = lake.load("Appointment", where, deployment="north").filter(pl.col("id") == changed)
    assert after["last_updated"][0] > before.filter(pl.col("id") == changed)["last_updated"][0]
    assert lake.verify(where).ok


def test_as_of_reads_an_earlier_commit(tmp_path: Path, fresh_mock: Any) -> None:
    where = tmp_path / "lake"
    _sync(fresh_mock, where, "north")
    first = lake.load("Appointment", where)
    version = _state_version(where)
    between = datetime.now(UTC)  # after the first sync's commits, before the second's
    time.sleep(0.01)
    gone = sorted(ground_truth(fresh_mock, "Appointment"))[3]
    fresh_mock.delete("Appointment", [gone])
    _sync(fresh_mock, where, "north", full=True)
    assert gone not in lake.load("Appointment", where)["id"].to_list()
    old = lake.load("Appointment", where, as_of=version)
    assert old.equals(first)
    # by time: a moment between the two syncs
    history = lake.history(str(where), "north").filter(pl.col("resource") == "Appointment")
    assert between < datetime.fromisoformat(history["committed_at"][1])
    assert lake.load("Appointment", where, as_of=between).equals(first)


def _state_version(where: Path) -> int:
    from deltalake import DeltaTable

    return int(DeltaTable(str(where / "_pmtk" / "state")).version())


def test_a_flipped_bit_is_found_by_verify(tmp_path: Path, mock_deployment: Any) -> None:
    where = tmp_path / "lake"
    _sync(mock_deployment, where, "north")
    data = sorted((where / "tables" / "appointment_participant").glob("deployment=north/*.parquet"))
    assert data
    target = data[0]
    blob = bytearray(target.read_bytes())
    blob[len(blob) // 2] ^= 0x01
    target.write_bytes(bytes(blob))
    report = lake.verify(where)
    assert not report.ok
    assert any(target.name in p and "sha256" in p for p in report.problems), report.problems
    result = CliRunner().invoke(app, ["sync", "--out", str(where), "--verify"])
    assert result.exit_code == 3, result.output


def _forge_add(table_dir: Path, path: str, deployment: str = "north") -> None:
    log = table_dir / "_delta_log"
    last = max(int(p.stem) for p in log.glob("*.json"))
    action = {
        "add": {
            "path": path,
            "partitionValues": {"deployment": deployment},
            "size": 100,
            "modificationTime": 1,
            "dataChange": True,
        }
    }
    (log / f"{last + 1:020d}.json").write_text(json.dumps(action) + "\n")


@pytest.mark.parametrize(
    "forged",
    [
        "../outside/deployment=north/part-00000-11111111-2222-3333-4444-555555555555-c000.snappy.parquet",
        "/tmp/part-00000-11111111-2222-3333-4444-555555555555-c000.snappy.parquet",
        "deployment=south/part-00000-11111111-2222-3333-4444-555555555555-c000.snappy.parquet",
        "deployment=north/part-00000-11111111-2222-3333-4444-555555555555-c000.snappy.parquet\n",
    ],
)
def test_a_log_naming_a_path_outside_its_partition_is_refused(
    tmp_path: Path, mock_deployment: Any, forged: str
) -> None:
    from toolkit.lake import LakeDamaged

    where = tmp_path / "lake"
    with toolkit_client(mock_deployment) as client:
        lake.sync(client, where, deployment="north", resources=["Organization"])
    _forge_add(where / "tables" / "Organization", forged)
    pin = pin_of(Location.of(where), "north", "Organization")
    pin_version = pin.versions["Organization"]
    # the pinned version is still clean; a pin moved to the forged version is refused
    assert lake.load("Organization", where).height > 0
    from deltalake import DeltaTable

    from toolkit.lake.commit import partition_files

    with pytest.raises(LakeDamaged, match=r"not a data file|for deployment"):
        partition_files(DeltaTable(str(where / "tables" / "Organization")), "Organization", "north")
    assert pin_version == 0
    with toolkit_client(mock_deployment) as client, pytest.raises(LakeDamaged):
        mock_deployment.touch(
            "Organization", [sorted(ground_truth(mock_deployment, "Organization"))[0]]
        )
        lake.sync(client, where, deployment="north", resources=["Organization"])


def test_a_lease_held_by_a_live_writer_makes_the_other_wait_then_stop(
    tmp_path: Path, mock_deployment: Any
) -> None:
    where = tmp_path / "lake"
    with toolkit_client(mock_deployment) as client:
        lake.sync(client, where, deployment="north", resources=["Organization"])
    loc = Location.of(where)
    before = pin_of(loc, "north", "Organization")
    other = owner_id()
    take_lease(loc, "north", "Organization", other, wait=0)
    with toolkit_client(mock_deployment) as client, pytest.raises(LakeBusy, match="another writer"):
        lake.sync(client, where, deployment="north", resources=["Organization"], lock_timeout=0.3)
    assert pin_of(loc, "north", "Organization") == before
    release_lease(loc, "north", "Organization", other)
    with toolkit_client(mock_deployment) as client:
        done = lake.sync(client, where, deployment="north", resources=["Organization"])
    assert done["Organization"].mode == "incremental"
    assert pin_of(loc, "north", "Organization").seq == before.seq + 1


def test_an_expired_lease_is_taken_over(
    tmp_path: Path, mock_deployment: Any, monkeypatch: Any
) -> None:
    from toolkit.lake import state

    where = tmp_path / "lake"
    with toolkit_client(mock_deployment) as client:
        lake.sync(client, where, deployment="north", resources=["Organization"])
    loc = Location.of(where)
    monkeypatch.setattr(state, "LEASE_SECONDS", -1.0)  # the crashed writer's lease has run out
    take_lease(loc, "north", "Organization", "crashed-writer", wait=0)
    monkeypatch.setattr(state, "LEASE_SECONDS", 600.0)
    with toolkit_client(mock_deployment) as client:
        done = lake.sync(
            client, where, deployment="north", resources=["Organization"], lock_timeout=0
        )
    assert done["Organization"].mode == "incremental"


def test_the_command_line_syncs_two_practices_and_refuses_a_store(
    tmp_path: Path, two_mocks: Any, monkeypatch: Any
) -> None:
    a, b = two_mocks
    where = tmp_path / "lake"
    runner = CliRunner()
    for dep, name in ((a, "north"), (b, "south")):
        env = {
            "PM_BASE_URL": dep.base_url,
            "PM_CLIENT_ID": dep.client_id,
            "PM_CLIENT_SECRET": dep.client_secret,
        }
        result = runner.invoke(
            app,
            [
                "sync",
                "--out",
                str(where),
                "--deployment",
                name,
                "-r",
                "Organization",
                "--output",
                "json",
            ],
            env=env,
        )
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout.strip().splitlines()[-1])
        assert doc["deployment"] == name
        assert dep.client_secret not in result.output
    frame = pl.read_delta(str(where / "tables" / "Organization"))
    assert set(frame["deployment"]) == {"north", "south"}
    # a Parquet store is never written as a lake
    store = tmp_path / "store"
    store.mkdir()
    (store / "manifest.json").write_text('{"kind": "pmtk-store", "format": 2, "resources": {}}')
    result = runner.invoke(app, ["sync", "--out", str(store), "--deployment", "north"])
    assert result.exit_code == 2
    assert "Parquet store" in result.output
    assert sorted(os.listdir(store)) == ["manifest.json"]
    result = runner.invoke(app, ["sync", "--out", str(where), "--deployment", "x", "--rebuild"])
    assert result.exit_code == 2 and "--rebuild" in result.output
    # "north" given to the second deployment: refused without --rebind, done with it
    args = ["sync", "--out", str(where), "--deployment", "north", "-r", "Organization"]
    result = runner.invoke(app, args, env=env)  # the second deployment's settings
    assert result.exit_code == 2 and "Choose another --deployment name" in result.output
    result = runner.invoke(app, [*args, "--rebind", "--quiet"], env=env)
    assert result.exit_code == 0, result.output
    north = delta_rows(where, "_raw_Organization", "north")
    assert dict(zip(north["id"], north["last_updated"], strict=True)) == ground_truth(
        b, "Organization"
    )


KILLER = """
import os, sys
from toolkit import lake
from toolkit.client import Client
step = int(sys.argv[2])
seen = []
def die(table):
    seen.append(table)
    if len(seen) == step:
        os._exit(9)  # no cleanup, no lease released: as a SIGKILL or a power cut
with Client(base_url=os.environ["PM_BASE_URL"], client_id=os.environ["PM_CLIENT_ID"],
            client_secret=os.environ["PM_CLIENT_SECRET"], progress=False) as client:
    lake.sync(client, sys.argv[1], deployment="north", resources=["Organization"], after_table=die)
"""


@pytest.mark.parametrize("step", [1, 3, 6])
def test_a_writer_killed_at_each_table_loses_nothing(
    tmp_path: Path, fresh_mock: Any, step: int
) -> None:
    import subprocess
    import sys

    where = tmp_path / "lake"
    with toolkit_client(fresh_mock) as client:
        lake.sync(client, where, deployment="north", resources=["Organization"])
    before = lake.load("Organization", where, table="organization_telecom")
    ids = sorted(ground_truth(fresh_mock, "Organization"))
    fresh_mock.touch("Organization", ids[:3])
    fresh_mock.delete("Organization", [ids[-1]])
    env = {
        **os.environ,
        "PM_BASE_URL": fresh_mock.base_url,
        "PM_CLIENT_ID": fresh_mock.client_id,
        "PM_CLIENT_SECRET": fresh_mock.client_secret,
    }
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, str(where), str(step)], env=env, timeout=120, check=False
    )
    assert killed.returncode == 9
    # readers see the last commit, whole
    assert lake.load("Organization", where, table="organization_telecom").equals(before)
    # the dead writer's lease is taken over at once on this host; nothing is lost
    with toolkit_client(fresh_mock) as client:
        lake.sync(
            client,
            where,
            deployment="north",
            resources=["Organization"],
            full=True,
            lock_timeout=5,
        )
    truth = ground_truth(fresh_mock, "Organization")
    raw = lake.load("Organization", where, table="_raw_Organization")
    assert dict(zip(raw["id"], raw["last_updated"], strict=True)) == truth
    main = lake.load("Organization", where)
    assert sorted(main["id"].to_list()) == sorted(truth)
    assert lake.verify(where).ok


def test_toolkit_load_reads_a_lake_and_checks_each_file(tmp_path: Path, two_mocks: Any) -> None:
    import toolkit
    from toolkit.lake import LakeDamaged

    a, b = two_mocks
    where = tmp_path / "lake"
    _sync(a, where, "north")
    _sync(b, where, "south")
    both = toolkit.load("Organization", where)
    assert set(both["deployment"]) == {"north", "south"}
    with toolkit_client(b) as client:  # a client picks its own deployment
        mine = toolkit.load("Organization", where, deployment=client)
    assert set(mine["deployment"]) == {"south"}
    assert mine.height == len(ground_truth(b, "Organization"))
    data = sorted((where / "tables" / "Organization").glob("deployment=south/*.parquet"))[0]
    blob = bytearray(data.read_bytes())
    blob[-100] ^= 0x01
    data.write_bytes(bytes(blob))
    with pytest.raises(LakeDamaged, match="does not match the sha256"):
        toolkit.load("Organization", where, deployment="south")
    assert toolkit.load("Organization", where, deployment="north").height > 0
