"""Single records into a lake (what a webhook receiver writes): precedence, deletes, refusals.

The records are written here by hand in the live service's shape (facts file,
"Shapes seen on the live service"), not taken from pmtk's mock.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.conftest import toolkit_client
from toolkit import lake
from toolkit.errors import PmtkError


def organization(rid: str, when: str, name: str) -> dict[str, Any]:
    return {
        "resourceType": "Organization",
        "id": rid,
        "meta": {"lastUpdated": when},
        "name": name,
        "active": True,
        "telecom": [{"system": "phone", "value": "+61299990000"}],
    }


@pytest.fixture
def synced(tmp_path: Path, mock_deployment: Any) -> Path:
    where = tmp_path / "lake"
    with toolkit_client(mock_deployment) as client:
        lake.sync(client, where, deployment="north", resources=["Organization"])
    return where


def _names(where: Path) -> dict[str, str]:
    frame = lake.load("Organization", where, deployment="north", table="_raw_Organization")
    return dict(zip(frame["id"], frame["last_updated"], strict=True))


def test_newer_wins_older_is_stale_tie_goes_to_the_change(synced: Path) -> None:
    done = lake.apply_changes(
        synced,
        "north",
        "Organization",
        upserts=[organization("CL-990001", "2026-11-02T10:00:00+11:00", "First")],
    )
    assert done.upserted == ["CL-990001"]
    # the same instant in another offset: a tie, so the change is written again
    tie = lake.apply_changes(
        synced,
        "north",
        "Organization",
        upserts=[organization("CL-990001", "2026-11-01T23:00:00Z", "Tie")],
    )
    assert tie.upserted == ["CL-990001"]
    older = lake.apply_changes(
        synced,
        "north",
        "Organization",
        upserts=[organization("CL-990001", "2026-11-01T22:59:59.999Z", "Older")],
    )
    assert older.stale == ["CL-990001"] and not older.written
    assert _names(synced)["CL-990001"] == "2026-11-01T23:00:00Z"
    telecom = lake.load("Organization", synced, table="organization_telecom")
    assert telecom.filter(pl.col("organization_id") == "CL-990001").height == 1
    assert lake.verify(synced).ok


def test_a_delete_removes_every_table_s_rows_and_an_unknown_id_is_no_delete(
    synced: Path,
) -> None:
    held = sorted(_names(synced))[0]
    done = lake.apply_changes(synced, "north", "Organization", deletes=[held, "no-such-id"])
    assert done.deleted == [held]
    for table in lake.lake_tables("Organization"):
        frame = lake.load("Organization", synced, table=table)
        key = "id" if table in ("Organization", "_raw_Organization") else "organization_id"
        assert held not in frame[key].to_list(), table


def test_a_bad_record_changes_nothing(synced: Path) -> None:
    before = lake.pins(synced)
    bad = organization("CL-990002", "2026-11-02T00:00:00Z", "Bad")
    bad["active"] = "yes"  # a boolean in the spec
    with pytest.raises(PmtkError, match=r"active|invalid"):
        lake.apply_changes(synced, "north", "Organization", upserts=[bad])
    assert lake.pins(synced) == before
    with pytest.raises(lake.UnknownDeployment):
        lake.apply_changes(synced, "south", "Organization", upserts=[])


def test_a_store_is_brought_into_a_lake_and_goes_on_incrementally(
    tmp_path: Path, fresh_mock: Any
) -> None:
    from typer.testing import CliRunner

    from tests.conftest import synced_store
    from tests.lake.conftest import ground_truth
    from toolkit.cli import app
    from toolkit.store import load as store_load

    store = synced_store(fresh_mock, tmp_path / "store", ["Organization", "Referral"])
    where = tmp_path / "lake"
    env = {
        "PM_BASE_URL": fresh_mock.base_url,
        "PM_CLIENT_ID": fresh_mock.client_id,
        "PM_CLIENT_SECRET": fresh_mock.client_secret,
    }
    changed = sorted(ground_truth(fresh_mock, "Referral"))[0]
    fresh_mock.touch("Referral", [changed])
    args = [
        "sync",
        "--out",
        str(where),
        "--deployment",
        "north",
        "--from-store",
        str(store),
        "-r",
        "Organization",
        "-r",
        "Referral",
        "--output",
        "json",
    ]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    for rt in ("Organization", "Referral"):
        for table in lake.lake_tables(rt):
            mine = lake.load(rt, where, table=table).drop("deployment")
            theirs = store_load(rt, store, table=table)
            key = mine.columns[:2]
            if rt == "Referral" and table in ("Referral", "_raw_Referral"):
                mine = mine.filter(pl.col("id") != changed)
                theirs = theirs.filter(pl.col("id") != changed)
            assert mine.sort(key).equals(theirs.sort(key)), (rt, table)
    doc = json.loads(result.stdout.strip().splitlines()[-1])
    modes = {r["resource"]: (r["mode"], r["upserted"]) for r in doc["resources"]}
    assert modes == {"Organization": ("incremental", 0), "Referral": ("incremental", 1)}
    raw = lake.load("Referral", where, table="_raw_Referral")
    assert dict(zip(raw["id"], raw["last_updated"], strict=True)) == ground_truth(
        fresh_mock, "Referral"
    )


def test_a_damaged_store_is_not_brought_in(tmp_path: Path, mock_deployment: Any) -> None:
    from tests.conftest import synced_store

    store = synced_store(mock_deployment, tmp_path / "store", ["Organization"])
    data = sorted((store / "Organization").glob("data-*.parquet"))[0]
    blob = bytearray(data.read_bytes())
    blob[len(blob) // 2] ^= 0x01
    data.write_bytes(bytes(blob))
    with pytest.raises(lake.StoreNotImportable, match="fails verification"):
        lake.import_store(store, tmp_path / "lake", deployment="north")
    assert not lake.pins(tmp_path / "lake")


def test_webhook_changes_and_a_sync_of_one_deployment_run_at_once(
    synced: Path, mock_deployment: Any
) -> None:
    """A receiver's changes and a full sync commit in turn; the newest version of each wins."""
    import threading

    from tests.lake.conftest import ground_truth

    truth = ground_truth(mock_deployment, "Organization")
    ids = sorted(truth)[:6]
    errors: list[BaseException] = []

    def receiver() -> None:
        try:
            for n, rid in enumerate(ids):  # each newer than anything the server holds
                record = organization(rid, f"2099-01-0{n + 1}T00:00:00Z", f"From a hook {n}")
                lake.apply_changes(synced, "north", "Organization", upserts=[record])
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=receiver)
    thread.start()
    with toolkit_client(mock_deployment) as client:
        for _ in range(2):
            lake.sync(client, synced, deployment="north", resources=["Organization"], full=True)
    thread.join(120)
    assert not errors, errors
    held = _names(synced)
    for n, rid in enumerate(ids):
        assert held[rid] == f"2099-01-0{n + 1}T00:00:00Z", rid  # never overwritten by the sync
    assert {k: v for k, v in held.items() if k not in ids} == {
        k: v for k, v in truth.items() if k not in ids
    }
    seqs = lake.history(synced, "north")["seq"].to_list()
    assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))  # every commit counted once
    assert lake.verify(synced).ok


def test_what_a_commit_reports_is_what_the_lake_holds(synced: Path) -> None:
    """One change that upserts a stored record and names it among the deletes keeps it
    (the version the change carries) and reports it upserted, never also deleted; a
    stored id among the deletes is reported deleted exactly once."""
    held = sorted(_names(synced))
    kept, victim = held[0], held[1]
    done = lake.apply_changes(
        synced,
        "north",
        "Organization",
        upserts=[organization(kept, "2099-11-02T10:00:00Z", "Both")],
        deletes=[kept, victim, "CL-000000-unknown"],
    )
    names = _names(synced)
    assert names.get(kept) == "2099-11-02T10:00:00Z" and victim not in names
    assert done.upserted == [kept]
    assert done.deleted == [victim]
    assert done.upserted_ids.len() == 1 and done.deleted_ids.len() == 1


def test_a_delete_committed_while_a_sync_walks_is_not_written_back(
    tmp_path: Path, fresh_mock: Any
) -> None:
    """A full sync reads a record; the product deletes it and a receiver commits the
    API's confirmed delete; then the sync commits. The record must stay deleted, and
    the other records the walk read (one of them changed before it) are written."""
    import threading

    where = tmp_path / "lake"
    with toolkit_client(fresh_mock) as client:
        lake.sync(client, where, deployment="north", resources=["Organization"])
        before = _names_of(where)
        victim, changed = sorted(before)[0], sorted(before)[1]
        fresh_mock.advance_clock(5)
        fresh_mock.touch("Organization", [changed])
        read, go = threading.Event(), threading.Event()
        errors: list[BaseException] = []

        class Held:
            """The client, with a walk that waits after reading its first page."""

            def __getattr__(self, name: str) -> Any:
                return getattr(client, name)

            def walk(self, *args: Any, **kwargs: Any) -> Any:
                inner = client.walk(*args, **kwargs)

                class Walk:
                    summary = property(lambda _self: inner.summary)

                    def __iter__(self) -> Any:
                        for page in inner:
                            read.set()
                            assert go.wait(60)
                            yield page

                return Walk()

        def sync() -> None:
            try:
                lake.sync(Held(), where, deployment="north", resources=["Organization"], full=True)
            except BaseException as exc:  # reported by the assertion below
                errors.append(exc)

        thread = threading.Thread(target=sync)
        thread.start()
        assert read.wait(60)
        fresh_mock.delete("Organization", [victim])
        with pytest.raises(PmtkError):
            client.read("Organization", victim)  # the API's own word: gone
        lake.apply_changes(where, "north", "Organization", deletes=[victim])
        assert victim not in _names_of(where)
        go.set()
        thread.join(120)
    assert not errors, errors
    after = _names_of(where)
    assert victim not in after
    assert after[changed] > before[changed]  # the walk's newer version was written
    assert set(after) == set(before) - {victim}


def _names_of(where: Path) -> dict[str, str]:
    frame = lake.load("Organization", where, deployment="north", table="_raw_Organization")
    return dict(zip(frame["id"], frame["last_updated"], strict=True))
