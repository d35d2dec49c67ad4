"""The store's transaction (staging, merge, commit) and verify: a crash at each step, hostile input.

Written against the public behaviour only (``sync``, ``verify``, ``load``, the
files on disk and the manifest's table entries), so that they hold whichever
module does the commit. A crash is simulated the way a power cut leaves a
disk: the sync runs against the real mock over loopback, and just before each
rename that commits a data file or the manifest (``os.replace`` into the store,
outside its staging area) the whole store folder is copied. Each copy is a store
as a crash at that step would leave it; each must still verify and read as the
previous version, and the next sync must finish the commit, leaving exactly the
files the manifest names. ``tools/mutation.py commit`` runs this file.

The staging tests sync Referral records from a list served in process
(:mod:`tests.store.paged_source`, one staged part per page) and take their
expectations from the precedence rule written out here (the newest
``meta.lastUpdated`` wins, the later arrival on a tie) and from the list itself:
a crash (a copy of the store before each rename, staging included) or a Ctrl-C
at each state change, a journal that is not this run's, a part file that a power
cut left unreadable or that went missing, a record staged more than once.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest

from tests.conftest import copied_store, synced_store
from tests.store.organization_manifest import RESOURCE, manifest_tables, write_manifest_tables
from tests.store.paged_source import (
    CHILD,
    KEY,
    RAW,
    RT,
    PagedSource,
    child_notes,
    contents,
    referral,
    versions,
)
from toolkit import views
from toolkit.errors import DataValidationError
from toolkit.schemas import PmtkDataWarning
from toolkit.store import (
    ResourceSync,
    StoreError,
    StoreWriteError,
    SyncFailed,
    apply_changes,
    load,
    read_manifest,
    sync,
    syncer,
    verify,
)
from toolkit.store.layout import empty_tables, init_manifest, locked
from toolkit.store.raw import raw_frame
from toolkit.store.results import COMPARE_LIMIT, VALIDATION_BATCH_ROWS
from toolkit.store.resume import Checkpoint
from toolkit.store.transaction import Transaction


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


# --------------------------------------------------------------------------- staging

S0 = "2026-03-01T12:00:00Z"
S1 = "2026-03-01T12:00:01Z"
S2 = "2026-03-01T12:00:02Z"
S3 = "2026-03-01T12:00:03Z"
LISTED = [referral(f"r{i:03d}", S0, "v1") for i in range(150)]
"""A list of two pages (100 records a page)."""


def fhir_instant(text: str) -> datetime:
    """A FHIR instant (every stamp here has its zone) as an aware datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def newest_each(*arrivals: list[dict[str, Any]]) -> dict[str, tuple[str, list[str]]]:
    """``id -> (lastUpdated, notes)`` of the version the precedence rule keeps, a plain loop:
    the newest instant, and on a tie the one that arrived later."""
    chosen: dict[str, tuple[str, list[str]]] = {}
    for records in arrivals:
        for rec in records:
            when = rec["meta"]["lastUpdated"]
            held = chosen.get(rec["id"])
            if held is None or fhir_instant(when) >= fhir_instant(held[0]):
                chosen[rec["id"]] = (when, [e["valueString"] for e in rec.get("extension", [])])
    return chosen


def children(kept: dict[str, tuple[str, list[str]]]) -> dict[str, list[str]]:
    """The child rows the kept versions have: one per extension."""
    return {rid: notes for rid, (_, notes) in kept.items() if notes}


def sync_rt(source: PagedSource, out: Path, **options: Any) -> ResourceSync:
    summary = sync(source, out, resources=[RT], progress=False, **options)
    return summary[RT]


def journal(out: Path) -> dict[str, Any]:
    state: dict[str, Any] = orjson.loads((out / ".staging" / RT / "state.json").read_bytes())
    return state


def assert_committed(out: Path, kept: dict[str, tuple[str, list[str]]]) -> None:
    """The store holds ``kept`` in every table, intact, each file described by its entry,
    no other file left and no staging."""
    assert versions(out) == kept
    assert child_notes(out) == children(kept)
    main = load(RT, out)
    assert isinstance(main, pl.DataFrame)
    assert sorted(main["id"]) == sorted(kept)
    assert verify(out).ok
    tables = read_manifest(out)["resources"][RT]["tables"]
    for table, info in tables.items():
        path = out / info["path"]
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert info["path"] == f"{table}/data-{digest[:16]}.parquet"
        assert (info["sha256"], info["bytes"]) == (digest, path.stat().st_size)
        assert info["rows"] == pl.read_parquet(path).height
    files = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert files - {"manifest.json", ".lock"} == {str(i["path"]) for i in tables.values()}
    assert not (out / ".staging" / RT).exists()


@pytest.fixture
def one_part_a_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each page staged as a part of its own (pages read ahead are otherwise staged together)."""
    monkeypatch.setattr(syncer, "PREFETCH_PAGES", 1)


def copy_before_each_rename(store: Path, into: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Copy ``store`` just before each rename into it, staging included: every file the
    store writes is written aside and renamed in, so each copy is the store a crash at
    that step leaves."""
    copies: list[Path] = []
    real = os.replace

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if Path(dst).is_relative_to(store):
            copies.append(shutil.copytree(store, into / f"crash-{len(copies):02d}", symlinks=True))
        real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    return copies


def interrupt_before(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C just before the first rename onto a file called ``name``."""
    real = os.replace

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if Path(dst).name == name:
            monkeypatch.setattr(os, "replace", real)
            raise KeyboardInterrupt
        real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)


@pytest.fixture(scope="module")
def interrupted_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A full sync of :data:`LISTED` stopped by a Ctrl-C once its first page was staged and
    journalled (before the second page's part)."""
    out = tmp_path_factory.mktemp("interrupted") / "store"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(syncer, "PREFETCH_PAGES", 1)
        interrupt_before("part-000002.parquet", mp)
        with pytest.raises(KeyboardInterrupt):
            sync_rt(PagedSource(LISTED), out)
    return out


@pytest.fixture
def interrupted(interrupted_once: Path, tmp_path: Path, one_part_a_page: None) -> Path:
    out = copied_store(interrupted_once, tmp_path / "store")
    state = journal(out)
    assert (state["phase"], state["parts"], state["pages_done"], state["staged"]) == (
        "fetch",
        1,
        1,
        100,
    )
    return out


def part(out: Path, table: str, number: int) -> Path:
    return out / ".staging" / RT / table / f"part-{number:06d}.parquet"


def test_a_crash_at_each_step_of_an_incremental_sync_is_resumed_to_the_same_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_part_a_page: None
) -> None:
    """Every rename of the sync (parts, journal, new and merged files, commit) a crash point."""
    out = tmp_path / "store"
    sync_rt(PagedSource(LISTED), out)
    hook = referral("r001", S3, "hook")  # a webhook's version, newer than the list's
    apply_changes(RT, out, upserts=[hook])
    listed = [
        referral(f"r{i:03d}", S2 if i == 1 else S1, *([] if i % 4 == 0 else [f"v2-{i}", "two"]))
        for i in range(110)
    ]
    listed += LISTED[110:]  # unchanged: read again at the mark (no server time: ge the mark)
    listed += [referral(f"n{i}", S1, "new") for i in range(10)]
    source = PagedSource(listed)
    before = contents(out)
    kept = newest_each(LISTED, [hook], listed)
    real_replace = os.replace
    copies = copy_before_each_rename(out, tmp_path, monkeypatch)
    done = sync_rt(source, out)
    monkeypatch.setattr(os, "replace", real_replace)
    assert (done.mode, done.status, done.fetched) == ("incremental", "updated", 160)
    assert_committed(out, kept)
    after = contents(out)
    # the journal at the start, 2 pages of 3 parts and a checkpoint, the merge checkpoint,
    # 3 new files, 3 merged ones, the commit checkpoint, 3 data files and the manifest
    assert len(copies) >= 1 + 2 * 4 + 1 + 3 + 3 + 1 + 3 + 1
    for n, copy in enumerate(copies):
        assert contents(copy) == before, n  # the previous version until the manifest switch
        sync_rt(source, copy)
        assert contents(copy) == after, n
        assert_committed(copy, kept)


def test_a_resumed_sync_keeps_the_newest_of_the_versions_staged_twice(
    interrupted: Path,
) -> None:
    """The last staged page is read again on resume; the list changed meanwhile."""
    listed = [
        referral("r000", S1, "newer", "two"),  # newer: wins, with its two child rows
        referral("r001", "2026-03-01T11:59:59Z", "older"),  # older than the staged one
        referral("r002", "2026-03-01T13:00:00+01:00", "tie, later"),  # S0 at +01:00
        referral("r003", S1),  # newer, without extensions: its child row goes
        *LISTED[4:],
    ]
    source = PagedSource(listed)
    done = sync_rt(source, interrupted)
    assert done.resumed
    assert [w.get("page") for w in source.walks] == [None]  # from page 1, staged already
    assert_committed(interrupted, newest_each(LISTED[:100], listed))
    assert versions(interrupted)["r001"] == (S0, ["v1"])


def test_a_walk_that_read_one_record_again_keeps_its_newest_version(
    tmp_path: Path, one_part_a_page: None
) -> None:
    """The client's recovery read one changed record again, on the walk's last page."""
    out = tmp_path / "store"
    listed = [*LISTED, referral("r007", S1, "changed during the walk")]
    done = sync_rt(PagedSource(listed), out)
    assert done.fetched == len(listed)
    assert_committed(out, newest_each(listed))
    assert versions(out)["r007"] == (S1, ["changed during the walk"])


def test_a_part_staged_but_not_journalled_is_dropped_on_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_part_a_page: None
) -> None:
    """A crash after a page's part files, before its checkpoint; the page then changes."""
    out = tmp_path / "store"
    first = [referral(f"r{i:02d}", S0, "v1", "w") for i in range(30)]
    copies = copy_before_each_rename(out, tmp_path, monkeypatch)
    sync_rt(PagedSource(first), out)
    monkeypatch.undo()
    monkeypatch.setattr(syncer, "PREFETCH_PAGES", 1)
    # the copy before the checkpoint that follows the page's last part (the raw records)
    crashed = next(c for c in copies if part(c, RAW, 1).is_file())
    assert part(crashed, CHILD, 1).is_file()
    assert journal(crashed)["parts"] == 0
    part(crashed, CHILD, 1).with_name("part-copy.parquet").write_bytes(b"not a part")
    now = [referral(f"r{i:02d}", S1) for i in range(30)]  # no extensions any more
    done = sync_rt(PagedSource(now), crashed)
    assert done.resumed
    assert_committed(crashed, newest_each(now))
    assert child_notes(crashed) == {}


@pytest.mark.parametrize("table", [RT, CHILD, RAW])
def test_a_part_a_power_cut_left_unreadable_starts_the_resource_over(
    interrupted: Path, table: str
) -> None:
    path = part(interrupted, table, 1)
    path.write_bytes(path.read_bytes()[:20])  # the journal promised it; the disk lost it
    # not a part (a copy's name, listed before the parts): passed over, not the end of the check
    path.with_name("part-(copy).parquet").write_bytes(b"the user's")
    source = PagedSource(LISTED)
    done = sync_rt(source, interrupted)
    assert not done.resumed
    assert done.fetched == len(LISTED)
    assert_committed(interrupted, newest_each(LISTED))


def test_a_part_beyond_the_journal_or_not_a_part_is_dropped_and_the_run_resumed(
    interrupted: Path,
) -> None:
    part(interrupted, RAW, 2).write_bytes(b"written after the last checkpoint, half")
    part(interrupted, RT, 1).with_name("part-old.parquet").write_bytes(b"not a part")
    done = sync_rt(PagedSource(LISTED), interrupted)
    assert done.resumed
    assert_committed(interrupted, newest_each(LISTED))


@pytest.mark.parametrize(
    "forge",
    [
        lambda s: {**s, "resource": "Patient"},
        lambda s: {**s, "schema_version": "1-an-older-view"},
        lambda s: {**s, "format": 1},
        lambda s: {k: v for k, v in s.items() if k != "started_at"},
        lambda s: {**s, "page_size": None},
        lambda s: [s],  # JSON, not an object: stopped every sync and change with an
        lambda s: "commit",  # AttributeError until the staging folder was removed by hand
    ],
    ids=[
        "another resource",
        "another view",
        "another format",
        "a key missing",
        "a null",
        "a list",
        "a string",
    ],
)
def test_a_journal_that_is_not_this_runs_is_not_resumed(interrupted: Path, forge: Any) -> None:
    path = interrupted / ".staging" / RT / "state.json"
    path.write_bytes(orjson.dumps(forge(journal(interrupted))))
    done = sync_rt(PagedSource(LISTED), interrupted)
    assert not done.resumed
    assert_committed(interrupted, newest_each(LISTED))


def test_a_journal_that_is_not_json_is_not_resumed(interrupted: Path) -> None:
    (interrupted / ".staging" / RT / "state.json").write_bytes(b'{"phase": "fe')
    done = sync_rt(PagedSource(LISTED), interrupted)
    assert not done.resumed
    assert_committed(interrupted, newest_each(LISTED))


def test_a_full_sync_resumes_an_interrupted_full_run_only(
    interrupted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = sync_rt(PagedSource(LISTED), interrupted, full=True)
    assert (done.resumed, done.mode) == (True, "full")
    # now an incremental run, interrupted in its fetch: a full sync starts over
    listed = [referral(rid, S1, "v2") for rid in sorted(versions(interrupted))]
    interrupt_before("part-000002.parquet", monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        sync_rt(PagedSource(listed), interrupted)
    assert (journal(interrupted)["mode"], journal(interrupted)["phase"]) == ("incremental", "fetch")
    source = PagedSource(listed)
    done = sync_rt(source, interrupted, full=True)
    assert (done.resumed, done.mode, done.fetched) == (False, "full", len(listed))
    assert source.walks == [{"_count": 100}]  # from the start, without a bound
    assert_committed(interrupted, newest_each(listed))


def test_a_part_file_gone_missing_fails_the_resource_and_the_next_run_starts_over(
    interrupted: Path,
) -> None:
    part(interrupted, RAW, 1).unlink()
    with pytest.raises(StoreError) as caught:
        sync_rt(PagedSource(LISTED), interrupted)
    # staged: 100 records of page 1, then pages 1 and 2 again (150); held: those 150
    assert str(caught.value) == (
        f"the staged pages of {RT} in {interrupted} hold 150 of the 250 records fetched "
        f"(a part file went missing); nothing of {RT} was committed; run the same command "
        "again to fetch it anew"
    )
    assert not (interrupted / ".staging" / RT).exists()
    assert RT not in read_manifest(interrupted)["resources"] or not read_manifest(interrupted)[
        "resources"
    ][RT].get("tables")
    done = sync_rt(PagedSource(LISTED), interrupted)
    assert not done.resumed
    assert_committed(interrupted, newest_each(LISTED))


def test_a_journal_of_an_older_pmtk_without_a_staged_count_is_resumed(interrupted: Path) -> None:
    path = interrupted / ".staging" / RT / "state.json"
    path.write_bytes(orjson.dumps({**journal(interrupted), "staged": None}))
    done = sync_rt(PagedSource(LISTED), interrupted)
    assert done.resumed
    assert_committed(interrupted, newest_each(LISTED))


@pytest.mark.parametrize("row", [0, 120])
def test_a_record_that_fails_its_schema_drops_the_staged_pages(
    tmp_path: Path, one_part_a_page: None, row: int
) -> None:
    out = tmp_path / "store"
    bad = {**LISTED[row], "created": "next tuesday"}  # not a dateTime
    with pytest.raises(SyncFailed, match="created failed 1 time"):
        sync_rt(PagedSource([*LISTED[:row], bad, *LISTED[row + 1 :]]), out)
    assert not (out / ".staging" / RT).exists()  # resuming would fail on them again
    done = sync_rt(PagedSource(LISTED), out)  # the list fixed
    assert not done.resumed
    assert_committed(out, newest_each(LISTED))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names fds through /proc")
def test_only_what_ends_the_fetch_is_fsynced_in_the_staging_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_part_a_page: None
) -> None:
    """Losing a page's checkpoint or part to a power cut costs a fetch (the part is found
    unreadable, the run starts over); losing the merge or commit checkpoint, which promises
    every staged part, or a file the commit moves in, would lose the run's data. The
    de-duplicated rows are an intermediate: flushed once, as the full sync's merged file."""
    out = tmp_path / "store"
    stage = out / ".staging" / RT
    flushed: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if path.is_file() and path.is_relative_to(stage):
            name = str(path.relative_to(stage))
            if path.name.startswith(".state.json."):
                name = f"journal: {orjson.loads(path.read_bytes())['phase']}"
            flushed.append(name)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    sync_rt(PagedSource(LISTED), out)
    assert sorted(flushed) == sorted(
        ["journal: merge", "journal: commit", *(f"new/{t}.parquet" for t in (RT, CHILD, RAW))]
    )


@pytest.mark.parametrize(
    ("change", "status", "at_mark"),
    [
        (lambda r: r, "unchanged", 3),
        (lambda r: r, "unchanged", 1),
        (
            lambda r: {**r, "extension": [{"url": "https://example.org/v", "valueString": "x"}]},
            "updated",
            1,
        ),
        (lambda r: {**r, "extension": [*r["extension"], *r["extension"]]}, "updated", 3),
        (lambda r: {**r, "comment": "said again"}, "updated", 1),
    ],
    ids=[
        "the same, three at the mark",
        "the same, one at the mark",
        "a child row changed",
        "a child row more",
        "a field changed",
    ],
)
def test_an_incremental_sync_compares_what_it_reads_again_at_the_mark(
    tmp_path: Path, change: Any, status: str, at_mark: int
) -> None:
    """Records at the mark are read again (``ge``); one with other content at the same
    instant is written (a tie goes to the later read), an identical one rewrites nothing."""
    out = tmp_path / "store"
    marked = {"r1", "r0", "r2"} if at_mark == 3 else {"r1"}
    first = [
        referral(f"r{i}", S0 if f"r{i}" in marked else "2026-03-01T11:00:00Z", "v1")
        for i in range(6)
    ]
    sync_rt(PagedSource(first), out)
    before = {p: p.stat().st_ino for p in out.rglob("data-*.parquet")}
    listed = [change(r) if r["id"] == "r1" else r for r in first]
    source = PagedSource(listed)
    done = sync_rt(source, out)
    assert (done.mode, done.fetched) == ("incremental", at_mark)  # those at the mark
    assert done.status == status
    kept = newest_each(first, [r for r in listed if r["id"] in marked])
    assert versions(out) == kept
    assert child_notes(out) == children(kept)
    main = load(RT, out)
    assert isinstance(main, pl.DataFrame)
    assert main.filter(pl.col("id") == "r1")["comment"].to_list() == [listed[1].get("comment")]
    if status == "unchanged":
        assert {p: p.stat().st_ino for p in out.rglob("data-*.parquet")} == before


@pytest.mark.parametrize(("records", "same"), [(COMPARE_LIMIT, True), (COMPARE_LIMIT + 1, False)])
def test_the_no_change_shortcut_compares_at_most_its_limit_of_records(
    tmp_path: Path, records: int, same: bool
) -> None:
    """An incremental run that read up to COMPARE_LIMIT records compares them with the
    stored rows; one that read more is merged whatever they hold (the compare holds them
    in memory). Here the stored files hold the very rows staged: all the same."""
    listed = [referral(f"r{i:05d}", S0) for i in range(records)]
    txn = Transaction(tmp_path / "store", RT)
    cp = Checkpoint(
        resource=RT, schema_version=txn.version, mode="incremental", since=None, started_at=S0
    )
    cp.parts, cp.staged, cp.unique, cp.records = 1, records, True, records
    txn.begin(cp)
    page = {"resourceType": "Bundle", "entry": [{"resource": r} for r in listed]}
    tables = views.flatten_tables(RT, [orjson.dumps(page)])
    tables[RAW] = raw_frame(RT, listed)
    txn.parts.write(1, tables)
    txn.write_new(cp)
    stored = {t: tmp_path / f"stored-{t}.parquet" for t in txn.empty}
    for table, empty in txn.empty.items():
        tables[table].select(empty.columns).cast(empty.schema).write_parquet(stored[table])
    assert txn.unchanged(cp, stored) is same


def test_a_change_first_rolls_a_syncs_interrupted_commit_forward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "store"
    copies = copy_before_each_rename(out, tmp_path, monkeypatch)
    sync_rt(PagedSource(LISTED), out)
    monkeypatch.undo()
    # the last copy whose journal is in its commit: just before the manifest switch
    crashed = [c for c in copies if (c / ".staging" / RT / "state.json").is_file()]
    crashed = [c for c in crashed if journal(c)["phase"] == "commit"]
    store = crashed[-1]
    assert RT not in read_manifest(store)["resources"]
    hook = referral("n1", S1, "hook")
    done = apply_changes(RT, store, upserts=[hook, referral("r005", S1, "hook")])
    assert sorted(done.upserted) == ["n1", "r005"]
    assert_committed(store, newest_each(LISTED, [hook, referral("r005", S1, "hook")]))


def test_a_change_leaves_a_syncs_interrupted_fetch_to_resume(interrupted: Path) -> None:
    staged = {p: p.read_bytes() for p in (interrupted / ".staging" / RT).rglob("*") if p.is_file()}
    hook = referral("r001", S1, "hook")
    assert apply_changes(RT, interrupted, upserts=[hook]).upserted == ["r001"]
    assert {
        p: p.read_bytes() for p in (interrupted / ".staging" / RT).rglob("*") if p.is_file()
    } == staged
    done = sync_rt(PagedSource(LISTED), interrupted)
    assert done.resumed
    assert sorted(versions(interrupted)) == sorted(r["id"] for r in LISTED)


def test_a_change_publishes_each_table_under_its_contents_name(tmp_path: Path) -> None:
    out = tmp_path / "store"
    records = [referral("a", S0, "one", "two"), referral("b", S1)]
    apply_changes(RT, out, upserts=records)
    assert_committed(out, newest_each(records))
    assert read_manifest(out)["resources"][RT]["tables"][CHILD]["rows"] == 2


def test_a_file_where_a_staging_folder_belongs_is_named_and_the_run_resumes_once_removed(
    interrupted: Path,
) -> None:
    folder = interrupted / ".staging" / RT / CHILD
    shutil.rmtree(folder)
    folder.write_bytes(b"a file, not the staged table's folder")
    with pytest.raises(StoreWriteError) as caught:
        sync_rt(PagedSource(LISTED), interrupted)
    assert (caught.value.step, caught.value.path) == (f"staging {RT}", folder)
    assert f"while staging {RT} ({folder})" in str(caught.value)
    folder.unlink()
    done = sync_rt(PagedSource(LISTED), interrupted)
    # resumed at the staged page, read again: its child rows, gone with the folder, come back
    assert done.resumed
    assert_committed(interrupted, newest_each(LISTED))


def test_a_transaction_without_raw_records_keeps_the_newest_staged_version_by_its_main_table(
    tmp_path: Path,
) -> None:
    """``Transaction(tables=...)`` of the view's tables alone (the raw records are optional)
    stages, de-duplicates by the main table's ``last_updated`` and commits as a sync does."""
    root = tmp_path / "store"
    txn = Transaction(root, RT, tables=empty_tables(RT))
    cp = Checkpoint(resource=RT, schema_version=txn.version, mode="full", since=None, started_at=S0)
    arrivals = [
        [referral("a", S1, "newer", "two"), referral("b", S0, "first"), referral("d", S0)],
        [
            referral("a", S0, "older"),
            referral("b", "2026-03-01T13:00:00+01:00", "tie, later"),  # S0 at +01:00
            referral("c", S0, "once"),
        ],
    ]
    with locked(root):
        init_manifest(root)
        txn.begin(cp)
        for number, records in enumerate(arrivals, start=1):
            page = {"resourceType": "Bundle", "entry": [{"resource": r} for r in records]}
            txn.parts.write(number, views.flatten_tables(RT, [orjson.dumps(page)]))
        cp.parts, cp.staged, cp.phase = 2, 6, "merge"
        txn.write_new(cp)
        tables = txn.merge(cp, {})
        cp.phase, cp.entry = (
            "commit",
            {"status": "ok", "schema_version": txn.version, "tables": tables},
        )
        txn.commit(cp)
    kept = newest_each(*arrivals)
    assert child_notes(root) == children(kept)
    main = load(RT, root)
    assert isinstance(main, pl.DataFrame)
    stamps = dict(zip(main["id"], main["last_updated"], strict=True))
    assert {rid: stamps[rid] for rid in kept} == {
        rid: fhir_instant(w) for rid, (w, _) in kept.items()
    }
    assert main.height == len(kept)
    assert set(read_manifest(root)["resources"][RT]["tables"]) == {RT, CHILD}
    assert verify(root).ok


def test_a_file_where_the_staging_folder_belongs_is_named_before_anything_is_fetched(
    tmp_path: Path,
) -> None:
    out = tmp_path / "store"
    sync_rt(PagedSource(LISTED[:5]), out)
    stage = out / ".staging" / RT
    stage.parent.mkdir(exist_ok=True)
    stage.write_bytes(b"a file, not the resource's staging folder")
    source = PagedSource(LISTED)
    with pytest.raises(StoreWriteError) as caught:
        sync_rt(source, out)
    assert (caught.value.step, caught.value.path) == (f"staging {RT}", stage)
    assert source.walks == []
    stage.unlink()
    sync_rt(source, out)
    assert_committed(out, newest_each(LISTED))


@pytest.mark.parametrize("where", ["a table folder", "a data file"])
def test_a_change_that_cannot_move_a_file_in_names_the_table_and_leaves_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A change publishes each table's new file before it switches the manifest."""
    out = tmp_path / "store"
    apply_changes("Organization", out, upserts=[{"resourceType": "Organization", "id": "OG-1"}])
    before = (out / "manifest.json").read_bytes()
    if where == "a table folder":  # a stray file where the first change makes a folder
        target = out / CHILD
        target.write_bytes(b"the user's")
        table = CHILD
    else:  # the device fails as the main table's file is moved in
        real = os.replace
        table, target = RT, out / RT

        def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            if Path(dst).parent == target:
                raise OSError(errno.EIO, "Input/output error")
            real(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(StoreWriteError) as caught:
        apply_changes(RT, out, upserts=[referral("a", S0, "hook")])
    assert caught.value.step == f"committing {table}"
    if where == "a table folder":
        assert caught.value.path == target
    else:  # the file's content name in the table's folder
        assert caught.value.path.parent == target
        assert caught.value.path.name.startswith("data-")
    assert (out / "manifest.json").read_bytes() == before
    assert not (out / ".staging" / f".changes-{RT}").exists()


def test_an_unjournalled_part_is_dropped_from_every_table_whatever_the_folders_staged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Organization has four child tables; its first page staged rows in one of them only
    (no type, telecom or address), and the run crashed before that page's checkpoint."""
    org = "Organization"
    out = tmp_path / "store"

    def organization(oid: str, *notes: str) -> dict[str, Any]:
        extensions = [{"url": "https://example.org/version", "valueString": n} for n in notes]
        rec = {"resourceType": org, "id": oid, "meta": {"lastUpdated": S0}, "name": oid}
        return {**rec, "extension": extensions} if notes else rec

    copies = copy_before_each_rename(out, tmp_path, monkeypatch)
    sync(
        PagedSource([organization(f"OG-{i}", "v1") for i in range(5)], org),
        out,
        resources=[org],
        progress=False,
    )
    monkeypatch.undo()
    staged = out / ".staging" / org
    crashed = next(c for c in copies if (c / staged.relative_to(out) / f"_raw_{org}").is_dir())
    folders = {p.name for p in (crashed / staged.relative_to(out)).iterdir() if p.is_dir()}
    assert folders == {org, "organization_extension", f"_raw_{org}"}
    now = [organization(f"OG-{i}") for i in range(5)]  # the extensions are gone
    summary = sync(PagedSource(now, org), crashed, resources=[org], progress=False)
    assert summary[org].resumed
    extensions = load(org, crashed, table="organization_extension")
    assert isinstance(extensions, pl.DataFrame)
    assert extensions.height == 0
    assert verify(crashed).ok


def test_validation_reads_a_batch_at_a_time_and_reports_each_failure_once(tmp_path: Path) -> None:
    """The new rows are validated in batches of VALIDATION_BATCH_ROWS (memory stays bounded):
    a bad row in the second batch is reported once, with the count of that batch."""
    n = VALIDATION_BATCH_ROWS + 1
    records = [referral(f"r{i:05d}", S0) for i in range(n)]
    records[-1] = {**records[-1], "created": "next tuesday"}  # the second batch's only row
    txn = Transaction(tmp_path / "store", RT)
    cp = Checkpoint(resource=RT, schema_version=txn.version, mode="full", since=None, started_at=S0)
    cp.parts, cp.staged, cp.unique = 1, n, True
    txn.begin(cp)
    page = {"resourceType": "Bundle", "entry": [{"resource": r} for r in records]}
    tables = views.flatten_tables(RT, [orjson.dumps(page)])
    tables[RAW] = raw_frame(RT, records)
    txn.parts.write(1, tables)
    txn.write_new(cp)
    with pytest.warns(PmtkDataWarning) as caught:
        txn.validate("warn")
    said = [str(w.message) for w in caught if isinstance(w.message, PmtkDataWarning)]
    assert said == [
        f"{RT}: 1 failure(s) against its schema:\n"
        "  - created: format: created failed 1 time(s), e.g. '\"next tuesday\"'"
    ]
    with pytest.raises(DataValidationError):
        txn.validate("raise")
    assert not txn.stage.exists()  # a failure drops the staged rows


@contextlib.contextmanager
def rename_onto_fails(target: Path) -> Iterator[None]:
    """Inside the block, the device answers EIO when a file is renamed onto ``target``."""
    real = os.replace

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if Path(dst) == target:
            raise OSError(errno.EIO, "Input/output error")
        real(src, dst, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "replace", replace)
        yield


@pytest.mark.parametrize(
    ("where", "step"),
    [
        ("new", f"merging the staged pages of {RT}"),
        (f"new/{CHILD}.parquet", f"merging the staged pages of {CHILD}"),
        ("merged", f"merging {RT}"),
        (f"merged/{CHILD}.parquet", f"writing the merged {CHILD} table"),
    ],
)
def test_a_merge_step_that_cannot_write_is_named_and_the_next_run_resumes(
    interrupted: Path, where: str, step: str
) -> None:
    """A file where a merge folder belongs, or an EIO as a merged file is moved in."""
    target = interrupted / ".staging" / RT / where
    failing: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if where.endswith(".parquet"):
        failing = rename_onto_fails(target)
    else:
        target.write_bytes(b"a file, not the folder")
    with failing, pytest.raises(StoreWriteError) as caught:
        sync_rt(PagedSource(LISTED), interrupted)
    assert (caught.value.step, caught.value.path) == (step, target)
    assert not read_manifest(interrupted)["resources"][RT]["tables"]
    assert journal(interrupted)["phase"] == "merge"  # every page staged, kept for the next run
    if target.is_file() and not where.endswith(".parquet"):
        target.unlink()
    done = sync_rt(PagedSource(LISTED), interrupted)
    assert done.resumed
    assert_committed(interrupted, newest_each(LISTED))


def test_an_incremental_merge_that_cannot_write_is_named_and_the_store_kept(tmp_path: Path) -> None:
    out = tmp_path / "store"
    sync_rt(PagedSource(LISTED[:10]), out)
    before = contents(out)
    listed = [referral(r["id"], S1, "v2") for r in LISTED[:10]]
    target = out / ".staging" / RT / "merged" / f"{RT}.parquet"
    with rename_onto_fails(target), pytest.raises(StoreWriteError) as caught:
        sync_rt(PagedSource(listed), out)
    assert (caught.value.step, caught.value.path) == (f"writing the merged {RT} table", target)
    assert contents(out) == before
    done = sync_rt(PagedSource(listed), out)
    assert (done.resumed, done.mode) == (True, "incremental")
    assert_committed(out, newest_each(listed))


def test_a_list_with_no_records_commits_empty_tables_and_then_changes_nothing(
    tmp_path: Path,
) -> None:
    out = tmp_path / "store"
    done = sync_rt(PagedSource([]), out)
    assert (done.status, done.fetched) == ("updated", 0)
    assert_committed(out, {})
    sync_rt(PagedSource(LISTED[:3]), out)
    before = contents(out)
    again = sync_rt(PagedSource([]), out)  # every record gone: an incremental walk reads none
    assert (again.mode, again.status, again.fetched) == ("incremental", "unchanged", 0)
    assert contents(out) == before


def test_a_checkpoint_that_cannot_be_written_is_named_and_the_run_resumes_from_the_last(
    interrupted: Path,
) -> None:
    state = interrupted / ".staging" / RT / "state.json"
    before = journal(interrupted)
    with rename_onto_fails(state), pytest.raises(StoreWriteError) as caught:
        sync_rt(PagedSource(LISTED), interrupted)
    assert (caught.value.step, caught.value.path) == (f"writing the {RT} sync checkpoint", state)
    assert journal(interrupted) == before
    done = sync_rt(PagedSource(LISTED), interrupted)
    assert done.resumed
    assert_committed(interrupted, newest_each(LISTED))


def stage_pages(txn: Transaction, arrivals: list[list[dict[str, Any]]]) -> None:
    """Stage each list of records as one part (a page), numbered from 1, raw records too."""
    for number, records in enumerate(arrivals, start=1):
        page = {"resourceType": "Bundle", "entry": [{"resource": r} for r in records]}
        tables = views.flatten_tables(RT, [orjson.dumps(page)])
        tables[RAW] = raw_frame(RT, records)
        txn.parts.write(number, tables)


def winning_parts(arrivals: list[list[dict[str, Any]]]) -> dict[str, int]:
    """``id -> part`` of the kept version of each id staged more than once, a plain loop:
    the newest instant, the later part on a tie."""
    seen: dict[str, list[tuple[datetime, int]]] = {}
    for number, records in enumerate(arrivals, start=1):
        for rec in records:
            seen.setdefault(rec["id"], []).append(
                (fhir_instant(rec["meta"]["lastUpdated"]), number)
            )
    return {rid: max(staged)[1] for rid, staged in seen.items() if len(staged) > 1}


@pytest.mark.parametrize(
    "arrivals",
    [
        [[referral("a", S0, "one"), referral("b", S1)], [referral("c", S0), referral("d", S2)]],
        [
            [referral("a", S1, "newer"), referral("b", S0), referral("d", S0)],
            [
                referral("a", S0, "older"),
                referral("b", "2026-03-01T13:00:00+01:00", "tie, later"),  # S0 at +01:00
                referral("c", S0, "once"),
            ],
            [referral("b", "2026-03-01T11:59:59Z"), referral("e", S3, "e")],
        ],
    ],
    ids=["no id twice", "three ids twice or more"],
)
def test_the_repeated_records_are_those_staged_more_than_once_with_their_winning_part(
    tmp_path: Path, arrivals: list[list[dict[str, Any]]]
) -> None:
    """``StagedParts.repeated`` names each id staged in more than one part, and the part of
    its kept version; none when no id came twice (every staged row then kept as it is),
    still the two columns the de-duplication joins on."""
    txn = Transaction(tmp_path / "store", RT)
    cp = Checkpoint(resource=RT, schema_version=txn.version, mode="full", since=None, started_at=S0)
    txn.begin(cp)
    stage_pages(txn, arrivals)
    repeated = txn.parts.repeated()
    assert repeated.schema == pl.Schema({"id": pl.String, "_part": pl.Int32})
    assert dict(repeated.iter_rows()) == winning_parts(arrivals)


def test_a_part_another_process_removes_as_the_resume_drops_it_is_no_error(
    interrupted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part written after the last checkpoint is dropped on resume; someone else (a user
    cleaning up, outside the store's lock) removed it between the listing and the unlink."""
    beyond = part(interrupted, RAW, 2)
    beyond.write_bytes(b"written after the last checkpoint, half")
    real_iterdir = Path.iterdir

    def listed_then_removed(self: Path) -> Any:
        for path in list(real_iterdir(self)):
            if path == beyond:
                path.unlink()  # the other process, after the listing
            yield path

    monkeypatch.setattr(Path, "iterdir", listed_then_removed)
    done = sync_rt(PagedSource(LISTED), interrupted)
    monkeypatch.setattr(Path, "iterdir", real_iterdir)
    assert done.resumed
    assert_committed(interrupted, newest_each(LISTED))


def staged_incremental(root: Path, records: list[dict[str, Any]], **kw: Any) -> Transaction:
    """A transaction of an incremental run that staged ``records`` as one page and wrote its
    new (de-duplicated) files; ``kw`` goes to :class:`Transaction`."""
    txn = Transaction(root, RT, **kw)
    cp = Checkpoint(
        resource=RT, schema_version=txn.version, mode="incremental", since=None, started_at=S0
    )
    cp.parts, cp.staged, cp.unique, cp.records = 1, len(records), True, len(records)
    txn.begin(cp)
    stage_pages(txn, [records])
    txn.write_new(cp)
    return txn


@pytest.mark.parametrize("table", [RT, CHILD, RAW])
def test_stored_rows_under_another_column_name_are_not_unchanged(
    tmp_path: Path, table: str
) -> None:
    """The no-change shortcut keeps the stored files only when they hold the staged rows as
    is: the same values under another column name (a file rewritten by another tool, its
    checksum recorded again) are a change."""
    listed = [referral(f"r{i}", S0, "v1") for i in range(3)]
    txn = staged_incremental(tmp_path / "store", listed)
    cp = txn.pending()
    assert cp is not None
    stored = {t: tmp_path / f"stored-{t}.parquet" for t in txn.empty}
    for name in txn.empty:
        pl.read_parquet(txn.stage / "new" / f"{name}.parquet").write_parquet(stored[name])
    assert txn.unchanged(cp, stored) is True  # the very rows staged
    rows = pl.read_parquet(stored[table])
    other = next(c for c in rows.columns if c not in ("id", KEY))
    rows.rename({other: f"{other}_renamed"}).write_parquet(stored[table])
    assert txn.unchanged(cp, stored) is False


def test_validation_checks_every_view_table_whatever_the_order_of_the_tables(
    tmp_path: Path,
) -> None:
    """``Transaction(tables=...)`` with the raw records first: the view's tables after them are
    validated still (the raw records, as sent, are not)."""
    records = [referral("a", S0), {**referral("b", S0), "created": "next tuesday"}]
    raw_first = {RAW: pl.DataFrame(schema=raw_frame(RT, []).schema), **empty_tables(RT)}
    txn = staged_incremental(tmp_path / "store", records, tables=raw_first)
    assert next(iter(txn.empty)) == RAW
    with pytest.raises(DataValidationError, match="created"):
        txn.validate("raise")
    assert not txn.stage.exists()


@pytest.mark.parametrize(
    "forged",
    [
        "../outside.parquet",
        "{outside}",  # absolute
        f"{RESOURCE}/../../outside.parquet",
        "{child}/{name}",  # another table's folder
    ],
)
def test_a_path_outside_its_table_folder_names_the_table_and_the_path_as_written(
    stored: Path, forged: str
) -> None:
    """A forged path is reported for its own table, as the manifest writes it, and nothing
    there is read: the file it names is intact, with its true sha256 recorded."""
    tables = manifest_tables(stored)
    main = stored / tables[RESOURCE]["path"]
    outside = stored.parent / "outside.parquet"
    shutil.copyfile(main, outside)
    child = next(t for t in tables if t != RESOURCE)
    path = forged.format(outside=outside, child=child, name=main.name)
    tables[RESOURCE] = {**tables[RESOURCE], "path": path}
    write_manifest_tables(stored, tables)
    [problem] = verify(stored).problems
    assert (problem.resource, problem.table, problem.path) == (RESOURCE, RESOURCE, path)
    assert "outside its table's folder" in problem.problem
    assert (problem.expected, problem.actual) == (None, None)


def test_removing_superseded_files_skips_each_forged_entry_and_goes_on(tmp_path: Path) -> None:
    """Only the folders of the resource's own tables are cleaned, each of the data files its
    entry does not name: a table that is not the resource's, a path into another table's
    folder or an entry that is no object deletes nothing, and the tables after it are
    cleaned still."""
    out = tmp_path / "store"
    sync_rt(PagedSource(LISTED[:3]), out)
    tables = read_manifest(out)["resources"][RT]["tables"]
    stale = "data-0000000000000000.parquet"  # a previous version the commit left behind
    for table, info in tables.items():
        shutil.copyfile(out / info["path"], out / table / stale)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / stale).write_bytes(b"the user's")
    forged = {
        "../outside": {"path": "../outside/data-1111111111111111.parquet"},
        RT: {**tables[RT], "path": f"{CHILD}/{Path(tables[CHILD]['path']).name}"},
        RAW: "not an object",
        CHILD: tables[CHILD],
    }
    with locked(out):
        Transaction(out, RT).remove_superseded(forged)
    assert (outside / stale).read_bytes() == b"the user's"
    for table in (RT, RAW):  # their entries are forged: nothing deleted in their folders
        assert {p.name for p in (out / table).iterdir()} == {
            stale,
            Path(tables[table]["path"]).name,
        }
    assert [p.name for p in (out / CHILD).iterdir()] == [Path(tables[CHILD]["path"]).name]


def test_a_full_sync_first_rolls_an_interrupted_incremental_commit_forward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit once journalled is always finished, whatever the next run: a full sync
    stopped before its first part leaves the incremental run's commit in, not the version
    before it."""
    out = tmp_path / "store"
    sync_rt(PagedSource(LISTED[:10]), out)
    listed = [referral(r["id"], S1, "v2") for r in LISTED[:10]]
    copies = copy_before_each_rename(out, tmp_path, monkeypatch)
    sync_rt(PagedSource(listed), out)
    monkeypatch.undo()
    in_commit = [c for c in copies if (c / ".staging" / RT / "state.json").is_file()]
    store = [c for c in in_commit if journal(c)["phase"] == "commit"][-1]  # before the switch
    assert journal(store)["mode"] == "incremental"
    assert versions(store) == newest_each(LISTED[:10])
    interrupt_before("part-000001.parquet", monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        sync_rt(PagedSource(listed), store, full=True)
    assert versions(store) == newest_each(listed)
    assert verify(store).ok
