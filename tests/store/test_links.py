"""No writes through links: a symbolic link inside a store is refused, never followed.

The store is synced over loopback HTTP from a small deployment written from the spec
(``tests/spec_server.py``); then a link is put where pmtk would write, pointing at a
folder outside the store that holds a file of the user's. Nothing outside may change.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import toolkit_client
from tests.spec_server import SpecDeployment, referral, serve_spec
from toolkit.store import StoreLinked, check_folder, load, sync
from toolkit.store.layout import write_json


@pytest.fixture(scope="module")
def dep() -> Iterator[SpecDeployment]:
    records = {"Referral": [referral(f"R-{i}") for i in range(1, 6)]}
    with serve_spec(SpecDeployment(records=records, page_size=2)) as deployment:
        yield deployment


@pytest.fixture
def store(dep: SpecDeployment, tmp_path: Path) -> Path:
    root = tmp_path / "store"
    with toolkit_client(dep) as client:
        sync(client, root, resources=["Referral"], progress=False)
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder of the user's, outside the store, holding files a sync must not touch."""
    folder = tmp_path / "outside"
    (folder / "Referral" / "Referral").mkdir(parents=True)
    (folder / "keep.txt").write_text("the user's notes")
    (folder / "Referral" / "state.json").write_text("not pmtk's")
    (folder / "Referral" / "Referral" / "part-000009.parquet").write_bytes(b"user data")
    return folder


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_linked_staging_folder_is_refused_and_nothing_outside_is_deleted(
    dep: SpecDeployment, store: Path, outside: Path
) -> None:
    before = _files(outside)
    shutil.rmtree(store / ".staging", ignore_errors=True)
    (store / ".staging").symlink_to(outside, target_is_directory=True)
    with (
        toolkit_client(dep) as client,
        pytest.raises(StoreLinked, match=r"\.staging .*symbolic link"),
    ):
        sync(client, store, resources=["Referral"], full=True, progress=False)
    assert _files(outside) == before
    # the command says it in one line and exits 2 before connecting
    from toolkit.cli import app

    sent = len(dep.seen)
    result = CliRunner().invoke(
        app,
        ["sync", "--out", str(store), "-r", "Referral", "--base-url", dep.base_url],
        env={"PM_CLIENT_ID": dep.client_id, "PM_CLIENT_SECRET": dep.client_secret},
    )
    assert result.exit_code == 2, result.output
    assert next(ln for ln in result.output.splitlines() if ln.strip()).startswith("refused:")
    assert len(dep.seen) == sent
    assert _files(outside) == before


def test_a_linked_table_folder_receives_no_data(
    dep: SpecDeployment, store: Path, tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    for data in (store / "Referral").iterdir():
        data.rename(target / data.name)
    (store / "Referral").rmdir()
    (store / "Referral").symlink_to(target, target_is_directory=True)
    before = _files(target)
    with toolkit_client(dep) as client, pytest.raises(StoreLinked, match="Referral"):
        sync(client, store, resources=["Referral"], full=True, progress=False)
    assert _files(target) == before  # no new data file, none deleted
    with pytest.raises(StoreLinked):
        load("Referral", store)


def test_a_linked_data_file_manifest_or_lock_is_refused(
    dep: SpecDeployment, store: Path, tmp_path: Path
) -> None:
    data = next((store / "Referral").glob("data-*.parquet"))
    copy = tmp_path / "copy.parquet"
    copy.write_bytes(data.read_bytes())
    data.unlink()
    data.symlink_to(copy)
    with pytest.raises(StoreLinked, match="data-"):
        load("Referral", store)
    with pytest.raises(StoreLinked):
        check_folder(store)
    data.unlink()
    data.write_bytes(copy.read_bytes())
    check_folder(store)  # a real file again: accepted

    lock_target = tmp_path / "lock-target"
    (store / ".lock").unlink()
    (store / ".lock").symlink_to(lock_target)
    with toolkit_client(dep) as client, pytest.raises(StoreLinked, match=r"\.lock"):
        sync(client, store, resources=["Referral"], progress=False)
    assert not lock_target.exists()  # not even created through the link
    (store / ".lock").unlink()

    manifest = store / "manifest.json"
    real = tmp_path / "manifest.json"
    real.write_bytes(manifest.read_bytes())
    manifest.unlink()
    manifest.symlink_to(real)
    before = real.read_bytes()
    with toolkit_client(dep) as client, pytest.raises(StoreLinked, match=r"manifest\.json"):
        sync(client, store, resources=["Referral"], progress=False)
    assert real.read_bytes() == before


def test_a_file_is_created_without_following_a_link_at_its_name(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "manifest.json"
    # the temporary name write_json uses, planted as a link to the user's file
    (tmp_path / f".manifest.json.{os.getpid()}.tmp").symlink_to(victim)
    write_json(target, {"ok": True}, durable=False)
    assert victim.read_text() == "precious"
    assert target.read_bytes().startswith(b"{")
    assert not target.is_symlink()
