"""The store's commit and verify under a crash at each step and a hostile manifest.

Written against the public behaviour only (``sync``, ``verify``, ``load``, the
files on disk and the manifest's table entries), so that they hold whichever
module does the commit. A crash is simulated the way a power cut leaves a
disk: the sync runs against the real mock over loopback, and just before each
rename that commits a data file or the manifest (``os.replace`` into the store,
outside its staging area) the whole store folder is copied. Each copy is a store
as a crash at that step would leave it; each must still verify and read as the
previous version, and the next sync must finish the commit, leaving exactly the
files the manifest names. ``tools/mutation.py commit`` runs this file.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest

from tests.conftest import copied_store, synced_store
from tests.store.organization_manifest import RESOURCE, manifest_tables, write_manifest_tables
from toolkit.store import StoreError, StoreWriteError, load, sync, verify


def frames(store: Path) -> dict[str, pl.DataFrame]:
    out = {}
    for table in manifest_tables(store):
        frame = load(RESOURCE, store, table=table)
        assert isinstance(frame, pl.DataFrame)
        out[table] = frame
    return out


def assert_only_named_files(store: Path) -> None:
    """Every data file the manifest names is there, and no other file is left behind."""
    named = {str(info["path"]) for info in manifest_tables(store).values()}
    files = {str(p.relative_to(store)) for p in store.rglob("*") if p.is_file()}
    assert files - {"manifest.json", ".lock"} == named


def assert_recommitted(store: Path, before_tables: dict[str, Any], ids: list[str]) -> None:
    """A new commit landed whole: new files named, all intact, nothing else left, ``ids`` in."""
    assert manifest_tables(store) != before_tables
    assert verify(store).ok
    assert_only_named_files(store)
    assert frames(store)[RESOURCE].filter(pl.col("id").is_in(ids)).height == len(ids)


@pytest.fixture
def synced(dep: Any, new_client: Any, tmp_path: Path) -> Path:
    """A store of one resource, freshly synced from the module's deployment."""
    return synced_store(dep, tmp_path / "pmtk-store", [RESOURCE])


@pytest.fixture(scope="module")
def synced_once(dep: Any, new_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synced_store(dep, tmp_path_factory.mktemp("store") / "pmtk-store", [RESOURCE])


@pytest.fixture
def stored(synced_once: Path, tmp_path: Path) -> Path:
    """A copy of a synced store, for the tests of verify (which never fetch)."""
    return copied_store(synced_once, tmp_path / "pmtk-store")


# --------------------------------------------------------------------------- a crash at each step


def test_a_crash_at_each_commit_step_leaves_the_old_version_or_rolls_forward(
    dep: Any, new_client: Any, synced: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before_tables = manifest_tables(synced)
    before = frames(synced)
    with new_client(dep) as c:
        ids = [str(i) for i in before[RESOURCE]["id"][:3]]
    dep.touch(RESOURCE, ids)  # a new version: new lastUpdated, moved last in the list

    snapshots: list[Path] = []
    real_replace = os.replace

    def crash_point(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        target = Path(dst)
        into_store = target.parent == synced or target.parent.parent == synced
        committing = target.name == "manifest.json" or target.name.startswith("data-")
        if into_store and committing:
            snap = tmp_path / f"crash-{len(snapshots)}"
            shutil.copytree(synced, snap, symlinks=True)
            snapshots.append(snap)
        real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", crash_point)
    with new_client(dep) as c:
        summary = sync(c, synced, resources=[RESOURCE], progress=False)
    monkeypatch.setattr(os, "replace", real_replace)
    assert summary.resources[0].status == "updated"
    after_tables = manifest_tables(synced)
    after = frames(synced)
    assert after_tables != before_tables
    superseded = [t for t in before_tables if before_tables[t]["path"] != after_tables[t]["path"]]
    assert superseded  # the touched records changed at least one table's file
    assert_only_named_files(synced)
    # one snapshot before each data file's rename and before the manifest's
    assert len(snapshots) >= len(after_tables) + 1

    for n, snap in enumerate(snapshots):
        # a crash before the manifest switch leaves the old version, intact and readable
        assert manifest_tables(snap) == before_tables, n
        assert verify(snap).ok, n
        assert all(frames(snap)[t].equals(before[t]) for t in before), n
        with new_client(dep) as c:
            again = sync(c, snap, resources=[RESOURCE], progress=False)
        assert again.resources[0].repaired == [], n
        # rolled forward: the very files of the uninterrupted commit, and nothing else
        assert manifest_tables(snap) == after_tables, n
        assert verify(snap).ok, n
        assert all(frames(snap)[t].equals(after[t]) for t in after), n
        assert_only_named_files(snap)


def test_a_commit_whose_staged_files_were_removed_starts_over_and_loses_nothing(
    dep: Any, new_client: Any, synced: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash in the commit, then the staged files deleted by hand (the journal kept)."""
    with new_client(dep) as c:
        main = load(RESOURCE, synced)
        assert isinstance(main, pl.DataFrame)
        ids = [str(i) for i in main["id"][3:5]]
    dep.touch(RESOURCE, ids)
    before_tables = manifest_tables(synced)
    # a crash after two data files are committed
    monkeypatch.setattr(os, "replace", data_renames(synced, 3, KeyboardInterrupt(), []))
    with new_client(dep) as c, pytest.raises(KeyboardInterrupt):
        sync(c, synced, resources=[RESOURCE], progress=False)
    monkeypatch.undo()
    assert manifest_tables(synced) == before_tables
    assert verify(synced).ok
    staged = [p for p in synced.rglob("*.parquet") if p.parent.parent != synced]
    assert staged  # the commit's files were waiting outside the table folders
    for path in staged:
        path.unlink()
    with new_client(dep) as c:
        sync(c, synced, resources=[RESOURCE], progress=False)
        fresh = tmp_path / "fresh"
        sync(c, fresh, resources=[RESOURCE], progress=False)
    assert verify(synced).ok
    assert_only_named_files(synced)
    got, want = frames(synced), frames(fresh)
    assert set(got) == set(want)
    for table, frame in want.items():
        key = [c for c in frame.columns if frame[c].dtype.is_nested() is False]
        assert got[table].sort(key).equals(frame.sort(key)), table
    touched = got[RESOURCE].filter(pl.col("id").is_in(ids))
    assert touched.height == len(ids)


def test_a_sync_with_nothing_new_keeps_the_files_and_leaves_nothing_behind(
    dep: Any, new_client: Any, synced: Path
) -> None:
    before_tables = manifest_tables(synced)
    stats = {p: p.stat().st_ino for p in synced.rglob("data-*.parquet")}
    with new_client(dep) as c:
        summary = sync(c, synced, resources=[RESOURCE], progress=False)
    assert summary.resources[0].status == "unchanged"
    assert manifest_tables(synced) == before_tables
    assert {p: p.stat().st_ino for p in synced.rglob("data-*.parquet")} == stats
    assert_only_named_files(synced)


def data_renames(store: Path, fail_at: int, exc: BaseException, failed: list[Path]) -> Any:
    """An ``os.replace`` that raises ``exc`` at the ``fail_at``-th commit of a data file
    (whose target it adds to ``failed``)."""
    real_replace = os.replace
    seen = {"data": 0}

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        target = Path(dst)
        if target.parent.parent == store and target.name.startswith("data-"):
            seen["data"] += 1
            if seen["data"] == fail_at:
                failed.append(target)
                raise exc
        real_replace(src, dst, *args, **kwargs)

    return replace


def touch_some(dep: Any, store: Path, rows: slice) -> list[str]:
    """Give some stored records a new version on the mock, so the next sync commits."""
    main = load(RESOURCE, store)
    assert isinstance(main, pl.DataFrame)
    ids = [str(i) for i in main["id"][rows]]
    dep.touch(RESOURCE, ids)
    return ids


def test_a_failed_rename_of_a_data_file_names_its_table_and_the_next_sync_finishes(
    dep: Any, new_client: Any, synced: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The device answers EIO when the second table's new file is moved in."""
    before_tables, before = manifest_tables(synced), frames(synced)
    ids = touch_some(dep, synced, slice(5, 7))
    failed: list[Path] = []
    eio = OSError(errno.EIO, "I/O error")
    monkeypatch.setattr(os, "replace", data_renames(synced, 2, eio, failed))
    with new_client(dep) as c, pytest.raises(StoreWriteError) as info:
        sync(c, synced, resources=[RESOURCE], progress=False)
    monkeypatch.undo()
    [target] = failed
    table = target.parent.name
    assert f"an I/O error from the device (EIO) while committing {table} ({target})" in str(
        info.value
    )
    assert (info.value.step, info.value.path, info.value.errno) == (
        f"committing {table}",
        target,
        errno.EIO,
    )
    # the manifest still names the previous files, untouched
    assert manifest_tables(synced) == before_tables
    assert verify(synced).ok
    assert all(frames(synced)[t].equals(before[t]) for t in before)
    with new_client(dep) as c:
        again = sync(c, synced, resources=[RESOURCE], progress=False)
    assert again.resources[0].repaired == []
    assert_recommitted(synced, before_tables, ids)


def test_a_file_where_a_table_folder_belongs_fails_the_commit_naming_it(
    dep: Any, new_client: Any, synced: Path
) -> None:
    """A stray file has the name of a table's folder: the commit cannot create the folder."""
    before_tables = manifest_tables(synced)
    child = next(t for t in before_tables if t != RESOURCE)
    folder = synced / child
    shutil.rmtree(folder)
    folder.write_bytes(b"a file, not the table's folder")
    with new_client(dep) as c, pytest.raises(StoreWriteError) as info:
        sync(c, synced, resources=[RESOURCE], progress=False)
    assert info.value.step == f"committing {child}"
    assert f"while committing {child} ({folder})" in str(info.value)
    assert manifest_tables(synced) == before_tables
    assert folder.read_bytes() == b"a file, not the table's folder"
    folder.unlink()
    with new_client(dep) as c:
        sync(c, synced, resources=[RESOURCE], progress=False)
    assert verify(synced).ok
    assert_only_named_files(synced)
    assert (synced / manifest_tables(synced)[child]["path"]).is_file()


def test_a_commit_journal_without_its_manifest_entry_is_dropped_not_a_crash(
    dep: Any, new_client: Any, synced: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal in its commit phase whose entry is null (hand-edited, or a foreign tool's)."""
    ids = touch_some(dep, synced, slice(7, 9))
    before_tables = manifest_tables(synced)
    monkeypatch.setattr(os, "replace", data_renames(synced, 1, KeyboardInterrupt(), []))
    with new_client(dep) as c, pytest.raises(KeyboardInterrupt):
        sync(c, synced, resources=[RESOURCE], progress=False)
    monkeypatch.undo()
    [journal] = synced.glob(f".staging/{RESOURCE}/state.json")
    state = orjson.loads(journal.read_bytes())
    assert state["phase"] == "commit" and state["entry"] is not None
    journal.write_bytes(orjson.dumps({**state, "entry": None}))
    with new_client(dep) as c:
        summary = sync(c, synced, resources=[RESOURCE], progress=False)
    # nothing to roll forward: the staged commit is dropped and the sync starts over
    assert summary.resources[0].status == "updated"
    assert_recommitted(synced, before_tables, ids)


def test_a_folder_named_like_a_data_file_is_left_and_the_commit_stands(
    dep: Any, new_client: Any, synced: Path
) -> None:
    """Removing superseded files meets one it cannot unlink (a folder): a leftover, no failure."""
    before_tables = manifest_tables(synced)
    stray = synced / RESOURCE / "data-0123456789abcdef.parquet"
    stray.mkdir()
    (stray / "kept.txt").write_bytes(b"the user's")
    ids = touch_some(dep, synced, slice(9, 11))
    with new_client(dep) as c:
        summary = sync(c, synced, resources=[RESOURCE], progress=False)
    assert summary.resources[0].status == "updated"
    after_tables = manifest_tables(synced)
    assert after_tables[RESOURCE]["path"] != before_tables[RESOURCE]["path"]
    assert verify(synced).ok
    assert (stray / "kept.txt").read_bytes() == b"the user's"
    assert frames(synced)[RESOURCE].filter(pl.col("id").is_in(ids)).height == len(ids)
    assert not synced.joinpath(".staging", RESOURCE).exists()


# --------------------------------------------------------------------------- verify


def test_verify_reports_a_table_entry_without_a_path_or_checksum_and_goes_on(
    stored: Path,
) -> None:
    tables = manifest_tables(stored)
    main = tables[RESOURCE]
    first_child = next(t for t in tables if t != RESOURCE)
    damaged = dict(tables)
    damaged[RESOURCE] = {k: v for k, v in main.items() if k != "path"}
    damaged[first_child] = {**tables[first_child], "sha256": ""}
    write_manifest_tables(stored, damaged)
    report = verify(stored)
    problems = {p.table: p for p in report.problems}
    assert set(problems) == {RESOURCE, first_child}
    assert (problems[RESOURCE].problem, problems[RESOURCE].path) == ("missing", f"{RESOURCE}/?")
    assert problems[RESOURCE].expected == main["sha256"]
    assert problems[first_child].problem == "no checksum"
    assert problems[first_child].path == tables[first_child]["path"]
    assert problems[first_child].expected is None and problems[first_child].actual is None
    assert report.files[0] == RESOURCE  # the table named where the path is missing
    assert report.files[1:] == [str(tables[t]["path"]) for t in list(tables)[1:]]
    intact = [t for t in tables if t not in problems]
    assert report.bytes == sum((stored / tables[t]["path"]).stat().st_size for t in intact)


@pytest.mark.parametrize("checksum", [None, 5, ["abc"]])
def test_a_checksum_that_is_not_text_is_no_checksum(stored: Path, checksum: Any) -> None:
    tables = manifest_tables(stored)
    tables[RESOURCE] = {**tables[RESOURCE], "sha256": checksum}
    write_manifest_tables(stored, tables)
    [problem] = verify(stored).problems
    assert (problem.table, problem.problem) == (RESOURCE, "no checksum")


def test_a_missing_file_without_a_recorded_checksum_expects_none(stored: Path) -> None:
    tables = manifest_tables(stored)
    (stored / tables[RESOURCE]["path"]).unlink()
    tables[RESOURCE] = {**tables[RESOURCE], "sha256": ""}
    write_manifest_tables(stored, tables)
    [problem] = verify(stored).problems
    assert (problem.problem, problem.expected, problem.actual) == ("missing", None, None)


def test_a_table_entry_that_is_not_an_object_is_missing_not_a_crash(stored: Path) -> None:
    tables: dict[str, Any] = manifest_tables(stored)
    tables[RESOURCE] = "data.parquet"
    write_manifest_tables(stored, tables)
    report = verify(stored)
    [problem] = report.problems
    assert (problem.table, problem.problem, problem.path) == (RESOURCE, "missing", f"{RESOURCE}/?")
    assert report.files[0] == RESOURCE


def test_a_checksum_of_another_file_is_a_mismatch_with_both_sums(stored: Path) -> None:
    tables = manifest_tables(stored)
    child = next(t for t in tables if t != RESOURCE)
    tables[RESOURCE] = {**tables[RESOURCE], "sha256": tables[child]["sha256"]}
    write_manifest_tables(stored, tables)
    [problem] = verify(stored).problems
    actual = hashlib.sha256((stored / tables[RESOURCE]["path"]).read_bytes()).hexdigest()
    assert (problem.problem, problem.expected, problem.actual) == (
        "checksum mismatch",
        tables[child]["sha256"],
        actual,
    )


def test_a_folder_where_a_data_file_should_be_is_missing(stored: Path) -> None:
    path = stored / manifest_tables(stored)[RESOURCE]["path"]
    path.unlink()
    path.mkdir()
    [problem] = verify(stored).problems
    assert problem.problem == "missing"


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="uses /proc/self/mem")
def test_an_unreadable_file_names_the_os_error_once(stored: Path) -> None:
    path = stored / manifest_tables(stored)[RESOURCE]["path"]
    path.unlink()
    path.symlink_to("/proc/self/mem")
    [problem] = verify(stored).problems
    assert problem.problem == "unreadable (Input/output error)"
    assert problem.expected is None and problem.actual is None


def test_verify_of_an_empty_store_says_it_holds_nothing(stored: Path) -> None:
    path = stored / "manifest.json"
    manifest = orjson.loads(path.read_bytes())
    manifest["resources"] = {}
    path.write_bytes(orjson.dumps(manifest))
    with pytest.raises(
        StoreError, match=r"holds no Organization, Patient data \(it holds: nothing\)"
    ):
        verify(stored, [RESOURCE, "Patient"])
    assert verify(stored).files == []


def test_verify_names_only_the_resources_it_lacks(stored: Path) -> None:
    with pytest.raises(StoreError) as info:
        verify(stored, [RESOURCE, "Patient"])
    assert "holds no Patient data (it holds: Organization)" in str(info.value)
    assert str(stored) in str(info.value)


def test_verify_times_only_its_own_work(stored: Path) -> None:
    started = time.monotonic()
    report = verify(stored)
    took = time.monotonic() - started
    assert 0.0 <= report.elapsed <= took
    assert report.store == stored


def test_a_damaged_report_raises_store_damaged_naming_each_file(stored: Path) -> None:
    tables = manifest_tables(stored)
    for table in list(tables)[:2]:
        (stored / tables[table]["path"]).unlink()
    report = verify(stored)
    assert not report.ok
    with pytest.raises(StoreError) as info:
        report.raise_for_problems()
    for table in list(tables)[:2]:
        assert tables[table]["path"] in str(info.value)
