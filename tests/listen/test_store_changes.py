"""``toolkit.store.apply_changes`` keeps the store's invariants for single records.

Records here are written by hand in the live service's forms (full extension
urls, absolute references) rather than taken from pmtk's mock.
"""

from __future__ import annotations

import fcntl
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest

from toolkit.errors import DataValidationError
from toolkit.store import (
    StoreDamaged,
    StoreError,
    apply_changes,
    delete,
    load,
    read_manifest,
    sync,
    upsert,
    verify,
)
from toolkit.views import table_names

STATUS_URL = "https://terminology.halaxy.com/StructureDefinition/appointment-participant-status"
BASE = "https://au-api.halaxy.com/main"


def appointment(rid: str, stamp: str, description: str, patients: tuple[str, ...] = ("7",)) -> Any:
    return {
        "resourceType": "Appointment",
        "id": rid,
        "meta": {"lastUpdated": stamp},
        "description": description,
        "start": "2026-12-01T09:00:00Z",
        "end": "2026-12-01T09:30:00Z",
        "minutesDuration": 30,
        "participant": [
            {
                "type": [{"coding": [{"code": "ATND"}]}],
                "actor": {"reference": f"{BASE}/PractitionerRole/PR-1", "type": "PractitionerRole"},
                "modifierExtension": [{"url": STATUS_URL, "valueCoding": {"code": "booked"}}],
            },
            *[
                {
                    "actor": {"reference": f"{BASE}/Patient/{p}", "type": "Patient"},
                    "modifierExtension": [{"url": STATUS_URL, "valueCoding": {"code": "booked"}}],
                }
                for p in patients
            ],
        ],
    }


def participants(store: Path, rid: str) -> list[str]:
    rows = load("Appointment", store, table="participant").filter(pl.col("appointment_id") == rid)
    return sorted(str(a) for a in rows["actor_id"].to_list())


def test_newest_last_updated_wins_whatever_the_order(tmp_path: Path) -> None:
    old = appointment("1", "2026-11-01T10:00:00Z", "old", ("7",))
    new = appointment("1", "2026-11-02T10:00:00Z", "new", ("7", "8"))
    first = upsert("Appointment", [new], tmp_path)
    late = upsert("Appointment", [old], tmp_path)
    assert first.upserted == ["1"] and late.stale == ["1"] and not late.written
    assert load("Appointment", tmp_path)["description"].to_list() == ["new"]
    assert participants(tmp_path, "1") == ["7", "8", "PR-1"]
    both = upsert("Appointment", [new, old], tmp_path / "other")  # within one batch too
    assert both.upserted == ["1"]
    assert load("Appointment", tmp_path / "other")["description"].to_list() == ["new"]


def test_replacing_a_record_replaces_its_child_rows(tmp_path: Path) -> None:
    upsert("Appointment", [appointment("1", "2026-11-01T10:00:00Z", "a", ("7", "8"))], tmp_path)
    upsert("Appointment", [appointment("2", "2026-11-01T10:00:00Z", "b", ("9",))], tmp_path)
    upsert("Appointment", [appointment("1", "2026-11-03T10:00:00Z", "a2", ("8",))], tmp_path)
    assert participants(tmp_path, "1") == ["8", "PR-1"]
    assert participants(tmp_path, "2") == ["9", "PR-1"]


def test_a_delete_removes_the_row_and_its_child_rows(tmp_path: Path) -> None:
    upsert(
        "Appointment",
        [
            appointment("1", "2026-11-01T10:00:00Z", "a"),
            appointment("2", "2026-11-01T10:00:00Z", "b"),
        ],
        tmp_path,
    )
    gone = delete("Appointment", ["1", "404"], tmp_path)
    assert gone.deleted == ["1"]  # an id that was never stored is no change
    assert load("Appointment", tmp_path)["id"].to_list() == ["2"]
    assert participants(tmp_path, "1") == []
    again = delete("Appointment", ["1"], tmp_path)
    assert again.deleted == [] and not again.written


def test_every_commit_is_checksummed_and_old_files_are_removed(tmp_path: Path) -> None:
    for n in range(3):
        upsert("Appointment", [appointment("1", f"2026-11-0{n + 1}T10:00:00Z", str(n))], tmp_path)
    report = verify(tmp_path)
    # every table of the view, and the raw records (what ViewDefinitions and a rebuild read)
    assert report.ok and len(report.files) == len(table_names("Appointment")) + 1
    for table in ("Appointment", "appointment_participant", "_raw_Appointment"):
        files = sorted(p.name for p in (tmp_path / table).iterdir())
        assert len(files) == 1 and files[0].startswith("data-"), files
    assert read_manifest(tmp_path)["events"]["applied"] == 3


def test_a_record_failing_its_schema_changes_nothing(tmp_path: Path) -> None:
    upsert("Appointment", [appointment("1", "2026-11-01T10:00:00Z", "a")], tmp_path)
    before = (tmp_path / "manifest.json").read_bytes()
    bad = appointment("2", "2026-11-01T10:00:00Z", "b")
    bad["start"] = "next tuesday"
    with pytest.raises(DataValidationError):
        upsert("Appointment", [appointment("3", "2026-11-01T10:00:00Z", "c"), bad], tmp_path)
    assert (tmp_path / "manifest.json").read_bytes() == before
    assert load("Appointment", tmp_path)["id"].to_list() == ["1"]


def test_the_event_is_recorded_in_the_manifest_and_survives_a_sync(
    tmp_path: Path, dep: Any, client: Any
) -> None:
    event = {"type": "Appointment", "id": "1", "action": "update", "event_number": "41"}
    upsert("Appointment", [appointment("1", "2026-11-01T10:00:00Z", "a")], tmp_path, event=event)
    sync(client, tmp_path, resources=["Patient"], progress=False)
    last = read_manifest(tmp_path)["events"]["last_applied"]
    assert last["event_number"] == "41" and "applied_at" in last


def test_a_damaged_file_is_refused_not_built_upon(tmp_path: Path) -> None:
    upsert("Appointment", [appointment("1", "2026-11-01T10:00:00Z", "a")], tmp_path)
    entry = read_manifest(tmp_path)["resources"]["Appointment"]
    path = tmp_path / entry["tables"]["Appointment"]["path"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(StoreDamaged, match=r"pmtk sync .*--full --resource Appointment"):
        upsert("Appointment", [appointment("2", "2026-11-01T10:00:00Z", "b")], tmp_path)


def test_a_table_of_another_view_version_is_refused(tmp_path: Path) -> None:
    upsert("Appointment", [appointment("1", "2026-11-01T10:00:00Z", "a")], tmp_path)
    manifest = orjson.loads((tmp_path / "manifest.json").read_bytes())
    manifest["resources"]["Appointment"]["schema_version"] = "2-0000000000000000"
    (tmp_path / "manifest.json").write_bytes(orjson.dumps(manifest))
    with pytest.raises(StoreError, match="another version of its view"):
        upsert("Appointment", [appointment("2", "2026-11-01T10:00:00Z", "b")], tmp_path)


def test_a_change_waits_for_a_sync_holding_the_lock_then_gives_up_clearly(tmp_path: Path) -> None:
    upsert("Appointment", [appointment("1", "2026-11-01T10:00:00Z", "a")], tmp_path)
    with (tmp_path / ".lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(StoreError, match="another pmtk sync"):
            apply_changes(
                "Appointment",
                tmp_path,
                upserts=[appointment("2", "2026-11-01T10:00:00Z", "b")],
                lock_timeout=0.2,
            )
        release = threading.Timer(0.3, lambda: fcntl.flock(held, fcntl.LOCK_UN))
        release.start()
        started = time.monotonic()
        done = apply_changes(
            "Appointment",
            tmp_path,
            upserts=[appointment("2", "2026-11-01T10:00:00Z", "b")],
            lock_timeout=10,
        )
        release.join()
    assert done.upserted == ["2"] and time.monotonic() - started >= 0.25
    assert sorted(load("Appointment", tmp_path)["id"].to_list()) == ["1", "2"]


def test_a_resource_first_written_by_an_event_is_synced_in_full_next(
    tmp_path: Path, dep: Any, client: Any
) -> None:
    upsert("Patient", [{"resourceType": "Patient", "id": "999999", "gender": "other"}], tmp_path)
    summary = sync(client, tmp_path, resources=["Patient"], progress=False)
    assert summary["Patient"].mode == "full"
    ids = load("Patient", tmp_path)["id"].to_list()
    assert len(ids) == summary["Patient"].fetched > 1
    assert "999999" not in ids  # a full sync replaces the table with the deployment's truth
