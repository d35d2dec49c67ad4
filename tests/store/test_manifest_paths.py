"""A manifest's table path never leads out of its table's folder (issue 33).

Forged as a hostile user would: an entry whose ``path`` is ``../outside/...`` or
absolute, pointing at a byte-identical copy (so the checksum matches); two
tables' entries swapped; a file name with a trailing newline. Every reader and
writer refuses them with :class:`StoreDamaged` naming the entry: ``load``,
``verify`` (and ``pmtk sync --verify``), ``apply_changes``, a sync, a rebuild.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import copied_store, synced_store
from tests.store.organization_manifest import RESOURCE, manifest_tables, write_manifest_tables
from toolkit.cli import app
from toolkit.store import StoreDamaged, apply_changes, load, verify
from toolkit.store.paths import path_problem


@pytest.fixture(scope="module")
def synced_one(dep: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synced_store(dep, tmp_path_factory.mktemp("store") / "pmtk-store", [RESOURCE])


@pytest.fixture
def store(synced_one: Path, tmp_path: Path) -> Path:
    return copied_store(synced_one, tmp_path / "pmtk-store")


def _outside(store: Path, how: str) -> str:
    """A byte-identical copy of the main table outside the store, named as ``how`` says."""
    info = manifest_tables(store)[RESOURCE]
    source = store / info["path"]
    if how == "relative":
        target = store.parent / "outside" / RESOURCE / source.name
        rel = f"../outside/{RESOURCE}/{source.name}"
    elif how == "absolute":
        target = store.parent / "elsewhere" / source.name
        rel = str(target)
    elif how == "dotted":  # inside the store, but through a detour that leaves and returns
        target = source
        rel = f"{RESOURCE}/../{info['path']}"
    else:  # a trailing newline: '$' would match before it, fullmatch does not
        target = source.with_name(source.name + "\n")
        rel = info["path"] + "\n"
    target.parent.mkdir(parents=True, exist_ok=True)
    if target != source:
        shutil.copyfile(source, target)
    tables = manifest_tables(store)
    tables[RESOURCE] = {**info, "path": rel}
    write_manifest_tables(store, tables)
    return rel


HOW = ["relative", "absolute", "dotted", "newline"]


@pytest.mark.parametrize("how", HOW)
def test_load_refuses_a_path_outside_its_table_folder(store: Path, how: str) -> None:
    rel = _outside(store, how)
    for verify_first in (True, False):
        with pytest.raises(StoreDamaged, match=r"outside its table's folder|not a data file") as e:
            load(RESOURCE, store, verify=verify_first)
        [problem] = e.value.problems
        assert (problem.resource, problem.table, problem.path) == (RESOURCE, RESOURCE, rel)


@pytest.mark.parametrize("how", HOW)
def test_verify_reports_a_path_outside_its_table_folder(store: Path, how: str) -> None:
    rel = _outside(store, how)
    report = verify(store)
    assert not report.ok
    assert [(p.table, p.path) for p in report.problems] == [(RESOURCE, rel)]
    result = CliRunner().invoke(app, ["sync", "--out", str(store), "--verify"])
    assert result.exit_code == 3, result.output


@pytest.mark.parametrize("how", HOW)
def test_changes_refuse_a_path_outside_and_write_nothing(store: Path, how: str) -> None:
    _outside(store, how)
    before = {p: p.read_bytes() for p in store.parent.rglob("*") if p.is_file()}
    with pytest.raises(StoreDamaged, match=RESOURCE):
        apply_changes(RESOURCE, store, deletes=["CL-1"])
    assert {p: p.read_bytes() for p in store.parent.rglob("*") if p.is_file()} == before


def test_two_tables_entries_swapped_are_refused_by_load_and_verify(store: Path) -> None:
    tables = manifest_tables(store)
    child = "organization_type"
    tables[RESOURCE], tables[child] = tables[child], tables[RESOURCE]
    write_manifest_tables(store, tables)
    with pytest.raises(StoreDamaged):
        load(RESOURCE, store)
    report = verify(store)
    assert sorted(p.table for p in report.problems) == sorted([RESOURCE, child])
    assert all("outside its table's folder" in p.problem for p in report.problems)


def test_an_entry_of_another_resources_table_is_refused(store: Path) -> None:
    tables = manifest_tables(store)
    tables["Patient"] = tables[RESOURCE]  # a table Organization does not have
    write_manifest_tables(store, tables)
    report = verify(store)
    assert [p.table for p in report.problems] == ["Patient"]
    assert "not a table of Organization" in report.problems[0].problem


@pytest.mark.parametrize(
    ("table", "path"),
    [
        ("Organization", "Organization/data-0123456789abcdef.parquet"),
        ("Organization", "Organization/data.parquet"),
        ("_raw_Organization", "_raw_Organization/data-0123456789abcdef.parquet"),
    ],
)
def test_the_paths_pmtk_writes_pass_the_rule(table: str, path: str) -> None:
    assert path_problem(RESOURCE, table, {"path": path}) is None


@pytest.mark.parametrize(
    "path",
    [
        "/Organization/data-0123456789abcdef.parquet",
        "C:/Organization/data-0123456789abcdef.parquet",
        "Organization\\data-0123456789abcdef.parquet",
        "Organization//data-0123456789abcdef.parquet",
        "./Organization/data-0123456789abcdef.parquet",
        "Organization/sub/data-0123456789abcdef.parquet",
        "organization_type/data-0123456789abcdef.parquet",
        "Organization/data-0123456789ABCDEF.parquet",
        "Organization/data-0123456789abcdef.parquet\n",
        "Organization/data-0123456789abcdef.parquetx",
        "Organization/",
        "Organization",
        "",
    ],
)
def test_every_other_path_breaks_the_rule(path: str) -> None:
    assert path_problem(RESOURCE, RESOURCE, {"path": path}) is not None


def test_a_forged_commit_journal_never_writes_outside_the_store(store: Path) -> None:
    """A crash-recovery journal naming ``../outside`` is refused, not rolled forward."""
    from toolkit.store.layout import schema_version
    from toolkit.store.resume import Checkpoint
    from toolkit.store.transaction import Transaction

    info = manifest_tables(store)
    txn = Transaction(store, RESOURCE)
    merged = txn.stage / "merged" / f"{RESOURCE}.parquet"
    merged.parent.mkdir(parents=True)
    shutil.copyfile(store / info[RESOURCE]["path"], merged)
    forged = {**info, RESOURCE: {**info[RESOURCE], "path": f"../outside/{RESOURCE}/x.parquet"}}
    cp = Checkpoint(
        resource=RESOURCE,
        schema_version=schema_version(RESOURCE),
        mode="full",
        since=None,
        started_at="2026-01-01T00:00:00+00:00",
        phase="commit",
        entry={"status": "ok", "tables": forged},
    )
    txn.save(cp)
    manifest = (store / "manifest.json").read_bytes()
    with pytest.raises(StoreDamaged, match="outside its table's folder"):
        apply_changes(RESOURCE, store, deletes=["CL-1"])
    assert not (store.parent / "outside").exists()
    assert (store / "manifest.json").read_bytes() == manifest
