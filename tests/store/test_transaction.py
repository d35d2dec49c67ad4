"""A change (``apply_changes``) meeting a sync's commit that a crash interrupted.

A sync from the embedded mock over loopback HTTP is stopped after its journal
records the commit and before the manifest is switched (``KeyboardInterrupt``
from the transaction's manifest update, as a crash would stop it there). The
next writer is a webhook change, not a sync: it must roll the journalled
commit forward first (``Transaction.recover``), then merge its record into the
committed data. Building on the manifest as it was would keep only the changed
record, and the journal, rolled forward later, would then overwrite the change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

import toolkit.store.transaction as transaction_module
from toolkit.store import apply_changes, load, read_manifest, sync, verify

RESOURCE = "Organization"


def _one_record(client: Any) -> dict[str, Any]:
    """The first record of the deployment's list, as the API serves it."""
    pages = client.pages(RESOURCE, params={"_count": 1})
    try:
        record = orjson.loads(next(pages))["entry"][0]["resource"]
    finally:
        pages.close()
    assert isinstance(record, dict)
    return record


def _crash_in_commit(
    dep: Any, new_client: Any, store: Path, monkeypatch: pytest.MonkeyPatch
) -> int:
    """Sync ``RESOURCE`` into ``store``, stopped between its journal and the manifest
    switch; return the number of records the sync fetched."""
    real = transaction_module.update_manifest
    fetched = {"records": 0}

    def crash_on_commit(root: Path, resource_type: str, entry: dict[str, Any] | None) -> None:
        if entry is not None and entry.get("status") == "ok":
            fetched["records"] = entry["last_sync"]["records_fetched"]
            raise KeyboardInterrupt
        real(root, resource_type, entry)

    with new_client(dep) as client:
        monkeypatch.setattr(transaction_module, "update_manifest", crash_on_commit)
        with pytest.raises(KeyboardInterrupt):
            sync(client, store, resources=[RESOURCE], progress=False)
        monkeypatch.setattr(transaction_module, "update_manifest", real)
    journal = orjson.loads((store / ".staging" / RESOURCE / "state.json").read_bytes())
    assert journal["phase"] == "commit"
    assert read_manifest(store)["resources"][RESOURCE]["status"] == "interrupted"
    assert fetched["records"] > 1
    return fetched["records"]


def test_a_change_first_rolls_forward_a_sync_commit_a_crash_interrupted(
    dep: Any, new_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    records = _crash_in_commit(dep, new_client, store, monkeypatch)
    with new_client(dep) as client:
        record = _one_record(client)
    record["name"] = "Renamed by an event"
    record["meta"]["lastUpdated"] = "2099-01-01T00:00:00Z"

    result = apply_changes(RESOURCE, store, upserts=[record])

    assert result.upserted == [record["id"]] and result.stale == []
    assert not (store / ".staging" / RESOURCE).exists()  # the journal is done with
    assert not (store / ".staging" / f".changes-{RESOURCE}").exists()
    entry = read_manifest(store)["resources"][RESOURCE]
    assert entry["status"] == "ok" and entry["high_water_mark"] is not None
    frame = load(RESOURCE, store)
    assert frame.height == records  # the sync's rows, the changed one replaced in place
    assert frame.filter(frame["id"] == record["id"])["name"].to_list() == [record["name"]]
    assert verify(store).ok
    for table, info in entry["tables"].items():  # only the files the manifest names remain
        names = [p.name for p in (store / table).iterdir()]
        assert names == [Path(info["path"]).name], table


def test_a_change_leaves_a_sync_interrupted_mid_fetch_to_resume(
    dep: Any, new_client: Any, tmp_path: Path
) -> None:
    """Only a journalled *commit* is rolled forward: a fetch under way is the sync's to resume."""
    store = tmp_path / "store"

    def stop(_progress: Any) -> None:
        raise KeyboardInterrupt

    with new_client(dep) as client:
        sync(client, store, resources=[RESOURCE], progress=False)
        record = _one_record(client)
        with pytest.raises(KeyboardInterrupt):
            sync(client, store, resources=[RESOURCE], full=True, progress=stop)
        journal = (store / ".staging" / RESOURCE / "state.json").read_bytes()
        assert orjson.loads(journal)["phase"] == "fetch"
        record["meta"]["lastUpdated"] = "2099-01-01T00:00:00Z"

        apply_changes(RESOURCE, store, upserts=[record])

        assert (store / ".staging" / RESOURCE / "state.json").read_bytes() == journal
        assert verify(store).ok
        summary = sync(client, store, resources=[RESOURCE], full=True, progress=False)
    assert summary[RESOURCE].resumed
