"""The store's commit and verify, each guard pinned: what is deleted, what is reported.

A store of one resource is synced from the embedded mock over loopback HTTP,
then copied per test and damaged by hand: a data file removed, a byte flipped,
a file the OS cannot read (a symlink to ``/proc/self/mem``, whose first page
answers EIO even to root), foreign files left in a table folder.
``tools/mutation.py commit`` runs these tests against mutants of the commit
(the store's ``Transaction``, ``toolkit/store/transaction.py``) and of ``verify``
(``toolkit/store/checksums.py``).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import copied_store, synced_store
from tests.store.organization_manifest import RESOURCE, manifest_tables, write_manifest_tables
from toolkit.store import FileProblem, StoreDamaged, StoreError, apply_changes, sync, verify


@pytest.fixture(scope="module")
def synced_one(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of one resource synced from the mock (built once per mutation run when
    ``PMTK_MUTATION_STORE`` names a folder: tools/mutation.py runs every mutant in a
    fresh process, and the tests of verify need no mock of their own)."""
    cached = os.environ.get("PMTK_MUTATION_STORE")
    path = Path(cached) if cached else tmp_path_factory.mktemp("store") / "pmtk-store"
    if not (path / "manifest.json").is_file():
        dep = request.getfixturevalue("dep")
        synced_store(dep, path, [RESOURCE])
    return path


@pytest.fixture
def store(synced_one: Path, tmp_path: Path) -> Path:
    return copied_store(synced_one, tmp_path / "pmtk-store")


@pytest.fixture(scope="module")
def synced_here(dep: Any, new_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of the module's own deployment (a store refuses another one's sync)."""
    return synced_store(dep, tmp_path_factory.mktemp("store") / "pmtk-store", [RESOURCE])


@pytest.fixture
def resynced(synced_here: Path, tmp_path: Path) -> Path:
    return copied_store(synced_here, tmp_path / "pmtk-store")


def data_file(store: Path, table: str = "Organization") -> Path:
    return store / manifest_tables(store)[table]["path"]


def test_an_intact_store_verifies_every_file_and_counts_its_bytes(store: Path) -> None:
    report = verify(store)
    info = manifest_tables(store)
    assert report.ok
    assert report.problems == []
    assert report.files == [str(t["path"]) for t in info.values()]
    assert len(report.files) >= 2  # the main table and child tables
    assert report.bytes == sum((store / t["path"]).stat().st_size for t in info.values())
    assert report.elapsed >= 0.0
    report.raise_for_problems()


def test_the_recorded_checksum_is_the_files_sha256(store: Path) -> None:
    for info in manifest_tables(store).values():
        assert info["sha256"] == hashlib.sha256((store / info["path"]).read_bytes()).hexdigest()


def test_a_missing_file_is_reported_with_its_expected_checksum(store: Path) -> None:
    path = data_file(store)
    expected = manifest_tables(store)["Organization"]["sha256"]
    path.unlink()
    report = verify(store)
    assert not report.ok
    [problem] = report.problems
    assert (problem.resource, problem.table, problem.problem) == (
        RESOURCE,
        "Organization",
        "missing",
    )
    assert problem.path == str(path.relative_to(store))
    assert problem.expected == expected
    assert len(report.files) == len(manifest_tables(store))  # the others were still checked
    with pytest.raises(StoreError, match="missing"):
        report.raise_for_problems()


def test_one_flipped_byte_is_a_checksum_mismatch_naming_both_sums(store: Path) -> None:
    path = data_file(store)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    [problem] = verify(store).problems
    assert problem.problem == "checksum mismatch"
    assert problem.expected == manifest_tables(store)["Organization"]["sha256"]
    assert problem.actual == hashlib.sha256(bytes(data)).hexdigest()


@pytest.mark.skipif(sys.platform != "linux", reason="uses /proc/self/mem for a read error")
def test_an_unreadable_file_is_reported_not_raised(store: Path) -> None:
    path = data_file(store)
    path.unlink()
    path.symlink_to("/proc/self/mem")
    report = verify(store)
    [problem] = report.problems
    assert problem.problem.startswith("unreadable (")
    assert "Input/output error" in problem.problem
    assert len(report.files) == len(manifest_tables(store))


def test_a_table_without_a_checksum_is_reported(store: Path) -> None:
    manifest_path = store / "manifest.json"
    manifest = orjson.loads(manifest_path.read_bytes())
    del manifest["resources"][RESOURCE]["tables"]["Organization"]["sha256"]
    manifest_path.write_bytes(orjson.dumps(manifest))
    try:
        report = verify(store)
    except StoreError:
        pytest.skip("this store format protects its manifest; no table can lack a checksum")
    [problem] = report.problems
    assert problem.problem == "no checksum"


def test_verify_of_a_resource_the_store_lacks_names_what_it_holds(store: Path) -> None:
    with pytest.raises(StoreError, match=r"holds no Patient data \(it holds: Organization\)"):
        verify(store, ["Patient"])
    assert verify(store, [RESOURCE]).ok


def test_verify_of_one_resource_checks_only_it(store: Path) -> None:
    data_file(store).unlink()
    assert [p.resource for p in verify(store, [RESOURCE]).problems] == [RESOURCE]


def test_a_commit_deletes_superseded_data_files_and_nothing_else(
    resynced: Path, dep: Any, new_client: Any
) -> None:
    folder = data_file(resynced).parent
    keep_names = {
        "notes.txt",
        "data.parquet.bak",
        "mydata-0123456789abcdef.parquet",
        "data-0123456789ABCDEF.parquet",  # not the store's lower-case hex
    }
    for name in keep_names:
        (folder / name).write_bytes(b"the user's own file")
    stale = ["data-0123456789abcdef.parquet", ".data-0123456789abcdef.parquet.tmp", "data.parquet"]
    for name in stale:
        (folder / name).write_bytes(b"an older version")
    with new_client(dep) as c:
        summary = sync(c, resynced, resources=[RESOURCE], progress=False)
    assert summary.resources[0].repaired == []  # an intact store is not rebuilt
    left = {p.name for p in folder.iterdir()}
    assert keep_names <= left
    assert not left & set(stale)
    assert data_file(resynced).is_file()
    assert verify(resynced).ok


def test_a_damaged_file_is_rebuilt_by_the_next_sync(
    resynced: Path, dep: Any, new_client: Any
) -> None:
    path = data_file(resynced)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    with new_client(dep) as c:
        summary = sync(c, resynced, resources=[RESOURCE], progress=False)
    assert summary.resources[0].repaired
    assert verify(resynced).ok


def test_a_missing_file_is_rebuilt_by_the_next_sync(
    resynced: Path, dep: Any, new_client: Any
) -> None:
    data_file(resynced, next(t for t in manifest_tables(resynced) if t != "Organization")).unlink()
    with new_client(dep) as c:
        summary = sync(c, resynced, resources=[RESOURCE], progress=False)
    assert summary.resources[0].repaired
    assert verify(resynced).ok


def mismatch(info: dict[str, dict[str, Any]], table: str, data: bytes) -> FileProblem:
    """The problem verify reports for ``table`` whose file now holds ``data``."""
    recorded = info[table]
    digest = hashlib.sha256(data).hexdigest()
    return FileProblem(
        RESOURCE, table, recorded["path"], "checksum mismatch", recorded["sha256"], digest
    )


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="uses /proc/self/mem")
def test_each_kind_of_problem_names_its_resource_table_and_file(store: Path) -> None:
    """Four tables damaged four ways in one store: every field of every problem."""
    info = manifest_tables(store)
    main, *children = list(info)
    flipped, gone, unsummed, unreadable = main, children[0], children[1], children[2]
    data = bytearray(data_file(store, flipped).read_bytes())
    data[len(data) // 3] ^= 0x04
    data_file(store, flipped).write_bytes(bytes(data))
    data_file(store, gone).unlink()
    data_file(store, unreadable).unlink()
    data_file(store, unreadable).symlink_to("/proc/self/mem")
    damaged = dict(info)
    damaged[unsummed] = {**info[unsummed], "sha256": ""}
    write_manifest_tables(store, damaged)
    report = verify(store)
    expected = {
        flipped: mismatch(info, flipped, bytes(data)),
        gone: FileProblem(RESOURCE, gone, info[gone]["path"], "missing", info[gone]["sha256"]),
        unsummed: FileProblem(RESOURCE, unsummed, info[unsummed]["path"], "no checksum"),
        unreadable: FileProblem(
            RESOURCE, unreadable, info[unreadable]["path"], "unreadable (Input/output error)"
        ),
    }
    assert report.problems == [expected[t] for t in info if t in expected]
    assert report.files == [str(t["path"]) for t in info.values()]
    intact = [t for t in info if t not in expected]
    assert report.bytes == sum((store / info[t]["path"]).stat().st_size for t in intact)


def test_verify_names_every_resource_the_store_holds(store: Path) -> None:
    """A second resource in the manifest (its entry naming the same files)."""
    path = store / "manifest.json"
    manifest = orjson.loads(path.read_bytes())
    manifest["resources"]["Location"] = manifest["resources"][RESOURCE]
    path.write_bytes(orjson.dumps(manifest))
    with pytest.raises(
        StoreError, match=r"holds no Patient data \(it holds: Location, Organization\)"
    ):
        verify(store, ["Patient"])
    report = verify(store)
    assert report.files == 2 * [str(t["path"]) for t in manifest_tables(store).values()]
    # Location's entry names Organization's files, tables Location does not have (issue 33:
    # a manifest path is read only in its own resource's table folders)
    assert {p.resource for p in report.problems} == {"Location"}
    assert len(report.problems) == len(manifest_tables(store))
    assert all("not a table of Location" in p.problem for p in report.problems)


@pytest.mark.parametrize("forged", [["Organization/data.parquet"], "Organization", 7])
def test_a_resource_whose_tables_are_not_an_object_has_its_main_table_missing(
    store: Path, forged: Any
) -> None:
    """A damaged entry names no file: not a crash, and not "ok" with nothing checked."""
    write_manifest_tables(store, forged)
    report = verify(store)
    assert report.problems == [FileProblem(RESOURCE, RESOURCE, f"{RESOURCE}/?", "missing")]
    assert report.files == [RESOURCE]
    assert report.bytes == 0
    said = rf"{RESOURCE}/\? \({RESOURCE}, table {RESOURCE}\): missing"
    with pytest.raises(StoreDamaged, match=said):
        report.raise_for_problems()


def test_a_resource_entry_without_tables_has_nothing_to_check(store: Path) -> None:
    path = store / "manifest.json"
    manifest = orjson.loads(path.read_bytes())
    del manifest["resources"][RESOURCE]["tables"]
    path.write_bytes(orjson.dumps(manifest))
    report = verify(store)
    assert (report.files, report.problems, report.ok) == ([], [], True)


@pytest.mark.parametrize(
    ("forge", "table"),
    [
        # tables that are not an object: apply_changes stopped with a TypeError there
        (lambda info: ["Organization/data.parquet"], RESOURCE),
        (lambda info: "Organization", RESOURCE),
        # an entry without one of the view's tables (not the raw records): a KeyError
        (
            lambda info: {t: v for t, v in info.items() if t != "organization_type"},
            "organization_type",
        ),
    ],
    ids=["tables a list", "tables a string", "a child table dropped"],
)
def test_changes_into_a_store_whose_entry_is_forged_are_refused(
    store: Path, forge: Any, table: str
) -> None:
    info = manifest_tables(store)
    assert "organization_type" in info
    write_manifest_tables(store, forge(info))
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    with pytest.raises(StoreDamaged) as caught:
        apply_changes(RESOURCE, store, deletes=["CL-1"])
    assert caught.value.problems == [FileProblem(RESOURCE, table, f"{table}/?", "missing")]
    assert f"--full --resource {RESOURCE}" in str(caught.value)
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == before


def test_changes_into_a_damaged_store_name_each_damaged_file_and_write_nothing(
    store: Path,
) -> None:
    """apply_changes checks the stored files first (it merges into them)."""
    info = manifest_tables(store)
    child = next(t for t in info if t != RESOURCE)
    path = data_file(store, child)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x02
    path.write_bytes(bytes(data))
    data_file(store).unlink()
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    some_id = "does-not-matter"
    with pytest.raises(StoreDamaged) as caught:
        apply_changes(RESOURCE, store, deletes=[some_id])
    assert caught.value.problems == [
        FileProblem(
            RESOURCE, RESOURCE, info[RESOURCE]["path"], "missing", info[RESOURCE]["sha256"]
        ),
        mismatch(info, child, bytes(data)),
    ]
    after = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    assert after == before


def test_a_table_entry_that_is_not_an_object_is_rebuilt_by_the_next_sync(
    resynced: Path, dep: Any, new_client: Any
) -> None:
    info = manifest_tables(resynced)
    child = next(t for t in info if t != RESOURCE)
    write_manifest_tables(resynced, {**info, child: info[child]["path"]})
    with new_client(dep) as c:
        summary = sync(c, resynced, resources=[RESOURCE], progress=False)
    assert summary.resources[0].repaired == [f"{child}/?"]
    assert verify(resynced).ok
    assert manifest_tables(resynced)[child]["path"] == info[child]["path"]
