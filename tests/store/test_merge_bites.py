"""Tests that bite for the store's merge of single changes (``toolkit.store.merge``).

Each test states one rule of the module docstring or the spec's webhook flow and
checks what the store holds afterwards (the tables, the raw records, the manifest),
not what pmtk says it did: the newest ``meta.lastUpdated`` wins at microsecond
precision, a tie goes to the change (it arrived later), a delete beats an upsert of
the same id, nothing is written when nothing changed, the event counters count the
ids changed, a catch-up bound only moves forward, ``drop_missing`` spares what is not
older than the list. Stores are built in process from a list source (no HTTP).
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.store.test_commit_bites import rename_onto_fails
from tests.store.test_precedence_paths import RT, ListSource, record, stored_versions
from toolkit.errors import ConfigurationError, DataValidationError
from toolkit.schemas import PmtkDataWarning
from toolkit.store import (
    SyncFailed,
    apply_changes,
    delete,
    load,
    read_manifest,
    sync,
    upsert,
    verify,
)
from toolkit.store.layout import parent_key
from toolkit.store.merge import (
    drop_missing,
    drop_missing_waiting,
    record_catch_up,
    warm,
)
from toolkit.store.precedence import instant
from toolkit.store.results import STAGING, StoreDamaged, StoreError, StoreWriteError

T0 = "2026-03-01T12:00:00Z"
T1 = "2026-03-01T12:00:01Z"
T2 = "2026-03-01T12:00:02Z"


def synced(out: Path, versions: dict[str, str]) -> ListSource:
    source = ListSource()
    source.records = [record(rid, when, "v1") for rid, when in versions.items()]
    sync(source, out, resources=[RT], progress=False, full=True)
    return source


def manifest(out: Path) -> dict[str, Any]:
    return orjson.loads((out / "manifest.json").read_bytes())


def ids(out: Path) -> list[str]:
    return sorted(load(RT, out)["id"].to_list())


# -- which version wins ---------------------------------------------------------------


def test_a_change_wins_a_tie_at_the_microsecond_and_loses_to_a_newer_stored_one(
    tmp_path: Path,
) -> None:
    out = tmp_path / "s"
    synced(out, {"tie": "2026-03-01T12:00:00.123456Z", "old": T1, "new": T0})
    done = apply_changes(
        RT,
        out,
        upserts=[
            # the same instant, written at +10:00 with digits beyond the microsecond
            record("tie", "2026-03-01T22:00:00.1234569+10:00", "hook"),
            record("old", "2026-03-01T12:00:00.999999Z", "hook"),  # 1 µs older: stale
            record("new", "2026-03-01T12:00:00.000001Z", "hook"),  # 1 µs newer
            record("brand", T0, "hook"),  # not stored: new
        ],
    )
    assert done.resource == RT
    assert sorted(done.upserted) == ["brand", "new", "tie"]
    assert done.stale == ["old"]
    assert done.deleted == []
    assert done.written is True
    notes = {rid: note for rid, (_, note) in stored_versions(out).items()}
    assert notes == {"tie": "hook", "old": "v1", "new": "hook", "brand": "hook"}
    assert ids(out) == ["brand", "new", "old", "tie"]
    assert verify(out).ok


def test_repeated_ids_in_one_call_keep_the_newest_then_the_later(tmp_path: Path) -> None:
    out = tmp_path / "s"
    done = apply_changes(
        RT,
        out,
        upserts=[
            record("a", T2, "newest"),
            record("a", T1, "older, later"),
            record("b", T1, "first"),
            record("b", "2026-03-01T13:00:01+01:00", "same instant, later"),
        ],
    )
    assert sorted(done.upserted) == ["a", "b"]
    notes = {rid: note for rid, (_, note) in stored_versions(out).items()}
    assert notes == {"a": "newest", "b": "same instant, later"}


@pytest.mark.parametrize("rid", ["missing", "", 7, None])
def test_a_record_without_an_id_is_refused_and_nothing_is_written(
    tmp_path: Path, rid: object
) -> None:
    out = tmp_path / "s"
    rec = record("x", T0, "v" * 300)
    if rid == "missing":
        del rec["id"]
    else:
        rec["id"] = rid
    with pytest.raises(ValueError, match=r"^a record to upsert has no id: ") as caught:
        apply_changes(RT, out, upserts=[record("ok", T0, "v"), rec])
    assert len(str(caught.value)) <= len("a record to upsert has no id: ") + 120
    assert "'resourceType': 'Referral'" in str(caught.value)  # the record, cut short
    assert not (out / "manifest.json").exists()


# -- deletes --------------------------------------------------------------------------


def test_a_delete_beats_an_upsert_of_the_same_id_and_only_stored_ids_count(
    tmp_path: Path,
) -> None:
    out = tmp_path / "s"
    synced(out, {"a": T0, "b": T0, "c": T0})
    done = apply_changes(
        RT,
        out,
        upserts=[record("a", T2, "hook"), record("b", T2, "hook")],
        deletes=["c", "a", "never-stored", "", 5],  # type: ignore[list-item]
    )
    assert done.upserted == ["b"]
    assert done.deleted == ["a", "c"]  # sorted, and only what was stored
    assert done.stale == []
    assert ids(out) == ["b"]
    assert set(stored_versions(out)) == {"b"}
    assert manifest(out)["events"]["applied"] == 3


def test_nothing_changed_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "s"
    synced(out, {"a": T1})
    before = (out / "manifest.json").read_bytes()
    done = apply_changes(RT, out, upserts=[record("a", T0, "old")], deletes=["zz"])
    assert (done.upserted, done.stale, done.deleted, done.written) == ([], ["a"], [], False)
    assert (out / "manifest.json").read_bytes() == before


def test_an_event_is_recorded_with_the_count_of_ids_changed(tmp_path: Path) -> None:
    out = tmp_path / "s"
    synced(out, {"a": T1, "b": T0})
    event = {"id": "ev-1", "type": "update"}
    apply_changes(RT, out, upserts=[record("a", T0, "old")], event=event)  # stale
    first = manifest(out)["events"]
    assert first["applied"] == 0
    assert first["last_applied"]["id"] == "ev-1" and "applied_at" in first["last_applied"]
    apply_changes(
        RT, out, upserts=[record("b", T1, "n"), record("c", T1, "n")], deletes=["a"], event=None
    )
    second = manifest(out)["events"]
    assert second["applied"] == 3
    assert second["last_applied"] == first["last_applied"]  # no new event: kept
    entry = manifest(out)["resources"][RT]
    assert entry["status"] == "ok"
    changed_at = instant(entry["changed_at"])  # when the change was written, a FHIR instant
    assert changed_at is not None
    assert abs(datetime.now(UTC) - changed_at) < timedelta(minutes=5)
    assert entry["high_water_mark"] == T1  # a sync's mark is left alone


def test_a_first_change_makes_a_store_a_later_sync_fetches_in_full(tmp_path: Path) -> None:
    out = tmp_path / "s"
    done = apply_changes(RT, out, upserts=[record("a", T0, "hook")], event={"id": "e"})
    assert done.written
    data = manifest(out)
    entry = data["resources"][RT]
    assert entry["high_water_mark"] is None
    assert entry["status"] == "ok"
    assert entry["schema_version"]
    assert set(entry["tables"]) >= {RT, f"_raw_{RT}"}
    assert data["kind"] and data["format"]
    assert data["events"]["applied"] == 1
    assert verify(out).ok


# -- the lock -------------------------------------------------------------------------


def test_a_change_waits_for_the_lock_and_a_user_folder_is_never_written(tmp_path: Path) -> None:
    out = tmp_path / "s"
    synced(out, {"a": T0})
    with (out / ".lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        released = threading.Event()

        def release() -> None:
            fcntl.flock(held, fcntl.LOCK_UN)
            released.set()

        timer = threading.Timer(0.2, release)
        timer.start()
        gone = drop_missing_waiting(out, RT, set(), older_than=T2, lock_timeout=10)
        timer.join()
    assert released.is_set()
    assert gone == ["a"]
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep", encoding="utf-8")
    with pytest.raises(StoreError):
        apply_changes(RT, user, upserts=[record("a", T0, "v")], lock_timeout=0.1)
    assert sorted(p.name for p in user.iterdir()) == ["notes.txt"]


def test_a_lock_held_past_the_timeout_gives_up_promptly(tmp_path: Path) -> None:
    out = tmp_path / "s"
    synced(out, {"a": T0})
    with (out / ".lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        started = time.monotonic()
        with pytest.raises(StoreError, match="another pmtk sync"):
            drop_missing_waiting(out, RT, set(), older_than=T2, lock_timeout=0.3)
        waited = time.monotonic() - started
    assert 0.25 <= waited < 5
    assert ids(out) == ["a"]


# -- drop_missing ---------------------------------------------------------------------


def test_drop_missing_removes_what_the_list_lacks_and_spares_the_bound(tmp_path: Path) -> None:
    out = tmp_path / "s"
    synced(out, {"listed": T0, "before": T0, "at": T1, "after": T2})
    gone = drop_missing_waiting(out, RT, {"listed"}, older_than=T1)
    assert sorted(gone) == ["before"]  # "at" is not older than the bound: spared
    assert ids(out) == ["after", "at", "listed"]
    assert set(stored_versions(out)) == {"after", "at", "listed"}
    assert verify(out).ok


def test_drop_missing_without_bound_or_entry_or_anything_missing(tmp_path: Path) -> None:
    out = tmp_path / "s"
    synced(out, {"a": T0, "b": T0})
    assert drop_missing(out, "Patient", set()) == []  # no entry for the resource
    assert drop_missing(out, RT, set(), older_than="not a time") == []
    assert drop_missing(out, RT, {"a", "b"}) == []
    assert ids(out) == ["a", "b"]
    before = (out / "manifest.json").read_bytes()
    assert sorted(drop_missing(out, RT, {"a"})) == ["b"]
    assert (out / "manifest.json").read_bytes() != before
    assert ids(out) == ["a"]


# -- record_catch_up ------------------------------------------------------------------


def test_record_catch_up_moves_the_bound_forward_only(tmp_path: Path) -> None:
    out = tmp_path / "s"
    synced(out, {"a": T0})
    entry = manifest(out)["resources"][RT]
    held = entry["next_since"]
    kwargs = {"started_at": "2026-03-01T12:30:00Z", "fetched": 4, "pages": 2}
    # a mark and a server time not later than the held bound: nothing moves
    assert not record_catch_up(out, RT, newest=None, server_time=None, **kwargs)
    assert manifest(out)["resources"][RT] == entry
    moved = record_catch_up(
        out, RT, newest="2026-03-01T12:10:00Z", server_time="2026-03-01T12:20:00Z", **kwargs
    )
    assert moved
    now = manifest(out)["resources"][RT]
    assert now["high_water_mark"] == "2026-03-01T12:10:00Z"
    assert now["server_time"] == "2026-03-01T12:20:00Z"
    assert now["next_since"] == "gt2026-03-01T12:10:00Z" != held
    assert now["last_sync"] == {
        "started_at": "2026-03-01T12:30:00Z",
        "records_fetched": 4,
        "pages": 2,
        "status": "caught up",
        "by": "pmtk listen (catch-up)",
    }
    # an older catch-up finishing later: the bound stays
    assert not record_catch_up(
        out, RT, newest="2026-03-01T12:05:00Z", server_time="2026-03-01T12:06:00Z", **kwargs
    )
    assert manifest(out)["resources"][RT] == now
    # the same bound again: not moved
    assert not record_catch_up(
        out, RT, newest="2026-03-01T12:10:00Z", server_time="2026-03-01T12:20:00Z", **kwargs
    )


def test_record_catch_up_leaves_a_resource_no_sync_made(tmp_path: Path) -> None:
    out = tmp_path / "s"
    apply_changes(RT, out, upserts=[record("a", T0, "hook")])
    before = (out / "manifest.json").read_bytes()
    assert not record_catch_up(
        out, RT, newest=T2, server_time=T2, started_at=T2, fetched=1, pages=1
    )
    assert not record_catch_up(
        out, "Patient", newest=T2, server_time=T2, started_at=T2, fetched=1, pages=1
    )
    assert (out / "manifest.json").read_bytes() == before
    assert read_manifest(out)["resources"][RT].get("last_sync") is None


# -- warm -----------------------------------------------------------------------------


def test_warm_builds_nothing_on_disk_and_refuses_a_type_without_a_view(tmp_path: Path) -> None:
    warm(RT)
    warm("Appointment")
    with pytest.raises(ConfigurationError):
        warm("NoSuchResource")
    assert not list(tmp_path.iterdir())


# -- child rows, raw records, damaged entries, the shorthands ---------------------------


def child_ids(out: Path) -> list[str]:
    """The parent ids of the child table's rows (one extension per record here)."""
    frame = load(RT, out, table="referral_extension")
    return sorted(frame[parent_key(RT)].to_list())


def test_child_rows_follow_their_record_when_replaced_and_deleted(tmp_path: Path) -> None:
    out = tmp_path / "s"
    synced(out, {"a": T0, "b": T0, "c": T0})
    assert child_ids(out) == ["a", "b", "c"]
    apply_changes(RT, out, upserts=[record("a", T1, "hook"), record("d", T1, "new")], deletes=["b"])
    assert child_ids(out) == ["a", "c", "d"]  # one row each: the replaced one is gone
    assert ids(out) == ["a", "c", "d"]


def test_a_store_without_raw_records_is_not_given_a_partial_raw_table(tmp_path: Path) -> None:
    out = tmp_path / "s"
    synced(out, {"a": T0})
    data = manifest(out)
    del data["resources"][RT]["tables"][f"_raw_{RT}"]  # a store from before raw records
    (out / "manifest.json").write_bytes(orjson.dumps(data))
    done = apply_changes(RT, out, upserts=[record("b", T1, "hook")])
    assert done.upserted == ["b"]
    assert f"_raw_{RT}" not in manifest(out)["resources"][RT]["tables"]
    assert ids(out) == ["a", "b"]


def test_an_entry_missing_a_child_table_is_damaged_and_nothing_is_written(tmp_path: Path) -> None:
    out = tmp_path / "s"
    synced(out, {"a": T0})
    data = manifest(out)
    del data["resources"][RT]["tables"]["referral_extension"]
    (out / "manifest.json").write_bytes(orjson.dumps(data))
    before = (out / "manifest.json").read_bytes()
    with pytest.raises(StoreDamaged) as caught:
        apply_changes(RT, out, upserts=[record("b", T1, "hook")])
    assert [(p.resource, p.table, p.path, p.problem) for p in caught.value.problems] == [
        (RT, "referral_extension", "referral_extension/?", "missing")
    ]
    assert (out / "manifest.json").read_bytes() == before


def test_upsert_and_delete_pass_the_event_on(tmp_path: Path) -> None:
    out = tmp_path / "s"
    assert upsert(RT, [record("a", T0, "v")], out, event={"id": "e1"}).upserted == ["a"]
    assert manifest(out)["events"]["last_applied"]["id"] == "e1"
    assert delete(RT, ["a"], out, event={"id": "e2"}).deleted == ["a"]
    assert manifest(out)["events"]["last_applied"]["id"] == "e2"
    assert manifest(out)["events"]["applied"] == 2
    assert ids(out) == []


def test_record_catch_up_keeps_the_stored_mark_when_the_walk_read_nothing_newer(
    tmp_path: Path,
) -> None:
    out = tmp_path / "s"
    synced(out, {"a": T1})
    assert manifest(out)["resources"][RT]["high_water_mark"] == T1
    moved = record_catch_up(
        out,
        RT,
        newest=None,  # the walk read nothing: the stored mark stays the mark
        server_time="2026-03-01T12:20:00Z",
        started_at="2026-03-01T12:19:59Z",
        fetched=0,
        pages=1,
    )
    assert moved
    entry = manifest(out)["resources"][RT]
    assert entry["high_water_mark"] == T1
    assert entry["next_since"] == f"gt{T1}"


def test_upsert_passes_the_validation_mode_on(tmp_path: Path) -> None:
    bad = {"resourceType": "Appointment", "id": "1", "meta": {"lastUpdated": T0}}
    bad["start"] = "next tuesday"  # not a dateTime
    with pytest.raises(DataValidationError):
        upsert("Appointment", [bad], tmp_path)
    with pytest.warns(PmtkDataWarning):
        done = upsert("Appointment", [bad], tmp_path, errors="warn")
    assert done.upserted == ["1"]


def test_a_change_leaves_a_syncs_staged_work_alone(tmp_path: Path) -> None:
    # an interrupted sync's staged pages (what `pmtk sync` resumes from) live in the
    # resource's own staging folder; a change stages in a folder of its own
    out = tmp_path / "s"
    synced(out, {"a": T0})
    staged = out / STAGING / RT / RT / "part-000001.parquet"
    staged.parent.mkdir(parents=True)
    staged.write_bytes(b"staged by an interrupted sync")
    assert apply_changes(RT, out, upserts=[record("b", T1, "hook")]).written
    assert staged.read_bytes() == b"staged by an interrupted sync"
    assert not (out / STAGING / f".changes-{RT}").exists()  # its own folder is gone


def test_a_staging_folder_that_cannot_be_made_is_named_and_nothing_changes(
    tmp_path: Path,
) -> None:
    out = tmp_path / "s"
    synced(out, {"a": T0})
    shutil.rmtree(out / STAGING, ignore_errors=True)
    (out / STAGING).write_text("a file where the staging folder belongs", encoding="utf-8")
    before = (out / "manifest.json").read_bytes()
    with pytest.raises(StoreWriteError, match=f"while staging changes of {RT} "):
        apply_changes(RT, out, upserts=[record("b", T1, "hook")])
    assert (out / "manifest.json").read_bytes() == before
    assert ids(out) == ["a"]


def test_a_changed_table_that_cannot_be_written_is_named_and_the_store_keeps_its_version(
    tmp_path: Path,
) -> None:
    """The device fails while the child table's merged file is staged (after the main
    table's was already moved in): the error names that table and file, the manifest
    still names the previous files, and the next change commits cleanly."""
    out = tmp_path / "s"
    synced(out, {"a": T0, "b": T0})
    before = (out / "manifest.json").read_bytes()
    staged = out / STAGING / f".changes-{RT}" / "referral_extension.parquet"
    with rename_onto_fails(staged), pytest.raises(StoreWriteError) as caught:
        apply_changes(RT, out, upserts=[record("b", T1, "hook")])
    assert (caught.value.step, caught.value.path, caught.value.errno) == (
        "writing the changed referral_extension table",
        staged,
        errno.EIO,
    )
    assert f"while writing the changed referral_extension table ({staged})" in str(caught.value)
    assert (out / "manifest.json").read_bytes() == before
    assert verify(out).ok
    assert {rid: note for rid, (_, note) in stored_versions(out).items()} == {"a": "v1", "b": "v1"}
    assert not staged.parent.exists()  # the change's staging folder is removed
    assert apply_changes(RT, out, upserts=[record("b", T1, "hook")]).upserted == ["b"]
    assert {rid: note for rid, (_, note) in stored_versions(out).items()} == {
        "a": "v1",
        "b": "hook",
    }
    tables = read_manifest(out)["resources"][RT]["tables"]
    named = {str(info["path"]) for info in tables.values()}
    files = {str(p.relative_to(out)) for p in out.rglob("*.parquet")}
    assert files == named  # the main table's file of the failed change is gone too


def test_a_change_after_a_failed_first_sync_starts_the_tables_with_the_raw_records(
    tmp_path: Path,
) -> None:
    """A first sync that failed leaves an entry with no tables: a change starts them, raw
    records included (what a view and ``--rebuild`` read), and a later sync fetches in full."""
    out = tmp_path / "s"
    source = ListSource()
    bad = record("x", T0, "v")
    bad["created"] = "next tuesday"  # not a dateTime: the sync fails
    source.records = [bad]
    with pytest.raises(SyncFailed):
        sync(source, out, resources=[RT], progress=False)
    assert manifest(out)["resources"][RT]["tables"] == {}
    done = apply_changes(RT, out, upserts=[record("a", T0, "hook")])
    assert (done.upserted, done.written) == (["a"], True)
    entry = manifest(out)["resources"][RT]
    assert set(entry["tables"]) == {RT, "referral_extension", f"_raw_{RT}"}
    assert entry["high_water_mark"] is None
    assert {rid: note for rid, (_, note) in stored_versions(out).items()} == {"a": "hook"}
    assert verify(out).ok


def test_stored_tables_of_another_view_version_are_refused_naming_the_repair(
    tmp_path: Path,
) -> None:
    out = tmp_path / "s"
    synced(out, {"a": T0})
    data = manifest(out)
    data["resources"][RT]["schema_version"] = "1-an-older-view"
    (out / "manifest.json").write_bytes(orjson.dumps(data))
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(StoreError) as caught:
        apply_changes(RT, out, upserts=[record("b", T1, "hook")])
    assert str(caught.value) == (
        f"the stored {RT} tables were written for another version of its view; "
        f"run `pmtk sync --out {out} --full --resource {RT}`"
    )
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_change_first_rolls_forward_a_syncs_interrupted_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync stopped just before its manifest switch: the change finishes that commit,
    then merges into it (built on the old manifest, the journal rolled forward later
    would overwrite the change)."""
    out = tmp_path / "s"
    source = synced(out, {"a": T0, "b": T0})
    source.records = [record("a", T1, "v2"), record("b", T0, "v1"), record("c", T1, "v2")]
    journal = out / STAGING / RT / "state.json"
    real = os.replace

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        committing = journal.is_file() and orjson.loads(journal.read_bytes())["phase"] == "commit"
        if Path(dst).name == "manifest.json" and committing:
            monkeypatch.setattr(os, "replace", real)
            raise KeyboardInterrupt
        real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        sync(source, out, resources=[RT], progress=False)
    assert {rid: note for rid, (_, note) in stored_versions(out).items()} == {"a": "v1", "b": "v1"}
    done = apply_changes(RT, out, upserts=[record("b", T2, "hook")])
    assert done.upserted == ["b"]
    notes = {rid: note for rid, (_, note) in stored_versions(out).items()}
    assert notes == {"a": "v2", "b": "hook", "c": "v2"}
    assert not journal.exists()
    assert verify(out).ok


def test_a_change_into_an_entry_without_tables_starts_them(tmp_path: Path) -> None:
    """An entry that names no tables at all (hand-edited, or written by another tool) holds
    no data to merge with: the change starts the tables, as into a new store."""
    out = tmp_path / "s"
    synced(out, {"a": T0})
    data = manifest(out)
    del data["resources"][RT]["tables"]
    (out / "manifest.json").write_bytes(orjson.dumps(data))
    done = apply_changes(RT, out, upserts=[record("b", T1, "hook")])
    assert (done.upserted, done.written) == (["b"], True)
    assert set(manifest(out)["resources"][RT]["tables"]) == {RT, "referral_extension", f"_raw_{RT}"}
    assert {rid: note for rid, (_, note) in stored_versions(out).items()} == {"b": "hook"}
    assert verify(out).ok
