"""A store never takes over a user's folder, and notices damage to its own files.

Every sync here runs against the real mock over loopback; damage is done to the
bytes on disk, the way a failing disk, a stray editor or a bad copy would.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from typer.testing import CliRunner

from toolkit import catalogue
from toolkit.store import (
    STORE_KIND,
    ManifestDamaged,
    NotAStore,
    StoreDamaged,
    StoreError,
    check_folder,
    declared_schemas,
    load,
    read_manifest,
    sync,
    verify,
)


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (folders as empty markers)."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"<dir>")
        for p in sorted(root.rglob("*"))
    }


def _cli(args: list[str], dep: Any | None = None) -> Any:
    from toolkit.cli import app

    env = {"COLUMNS": "300"}
    if dep is not None:
        args = [*args, "--base-url", dep.base_url, "--client-id", dep.client_id]
        env["PM_CLIENT_SECRET"] = dep.client_secret
    return CliRunner().invoke(app, args, env=env)


def _copy(synced: Any, tmp_path: Path) -> Path:
    store = tmp_path / "store"
    shutil.copytree(synced.path, store)
    return store


def _path_of(store: Path, resource: str, table: str | None = None) -> Path:
    entry = read_manifest(store)["resources"][resource]
    return store / entry["tables"][table or resource]["path"]


def _tables_equal(a: Path, b: Path, resource: str) -> None:
    for table in declared_schemas(resource):
        left = load(resource, a, table=table)
        right = load(resource, b, table=table)
        assert isinstance(left, pl.DataFrame) and isinstance(right, pl.DataFrame)
        keys = ["id"] if "id" in left.columns else [left.columns[0], "index"]
        assert left.sort(keys).equals(right.sort(keys)), table


# --------------------------------------------------------------------------- a user's folder


@pytest.fixture
def users_folder(tmp_path: Path) -> Path:
    """A folder of the user's own: it even has a ``Referral/data.parquet`` of its own."""
    folder = tmp_path / "analysis"
    (folder / "Referral").mkdir(parents=True)
    pl.DataFrame({"id": ["mine-1", "mine-2"], "note": ["keep", "me"]}).write_parquet(
        folder / "Referral" / "data.parquet"
    )
    (folder / "notes.txt").write_text("my notes\n")
    return folder


def test_sync_refuses_a_users_folder_and_writes_nothing(
    users_folder: Path, synced: Any, new_client: Any
) -> None:
    before = _snapshot(users_folder)
    start = synced.dep.stats()["requests"]
    with new_client(synced.dep) as client, pytest.raises(NotAStore) as info:
        sync(client, users_folder, resources=["Referral"], progress=False)
    message = str(info.value)
    assert str(users_folder) in message and "not a pmtk store" in message
    assert "Referral" in message and "notes.txt" in message  # says what it found
    assert _snapshot(users_folder) == before, "a refused sync must write nothing at all"
    assert not (users_folder / ".lock").exists()
    assert synced.dep.stats()["requests"] == start, "refusing must not even connect"


def test_pmtk_sync_refuses_a_users_folder_with_exit_code_2(users_folder: Path, synced: Any) -> None:
    before = _snapshot(users_folder)
    result = _cli(["sync", "--out", str(users_folder), "-r", "Referral"], synced.dep)
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1, result.stderr  # one line
    assert "refused" in result.stderr and "not a pmtk store" in result.stderr
    assert "Traceback" not in result.output
    assert _snapshot(users_folder) == before


@pytest.mark.parametrize(
    "content",
    [
        b'{"name": "My web app", "icons": [], "start_url": "/"}',  # a web-app manifest
        b'["a", "list"]',
        b'{"format": 3, "resources": {}}',  # looks close, but carries no pmtk marker
    ],
    ids=["web-app-manifest", "json-list", "no-marker"],
)
def test_a_foreign_manifest_json_is_not_a_store(tmp_path: Path, content: bytes) -> None:
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "manifest.json").write_bytes(content)
    (folder / "index.html").write_text("<html></html>")
    before = _snapshot(folder)
    with pytest.raises(NotAStore, match="not a pmtk manifest"):
        check_folder(folder)
    with pytest.raises(NotAStore):
        load("Referral", folder)
    assert _snapshot(folder) == before


def test_a_file_is_refused_as_a_store(tmp_path: Path) -> None:
    target = tmp_path / "report.csv"
    target.write_text("a,b\n")
    with pytest.raises(NotAStore, match="is a file"):
        check_folder(target)
    assert target.read_text() == "a,b\n"


def test_an_empty_folder_or_one_left_by_a_killed_first_sync_is_accepted(
    tmp_path: Path, synced: Any, new_client: Any
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    check_folder(empty)
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / ".lock").touch()  # a first sync killed before it wrote its manifest
    (killed / ".manifest.json.4242.tmp").write_bytes(b'{"kind": "pm')
    with new_client(synced.dep) as client:
        sync(client, killed, resources=["Organization"], progress=False)
    manifest = read_manifest(killed)
    assert manifest["kind"] == STORE_KIND
    assert list(manifest["resources"]) == ["Organization"]
    assert not (killed / ".manifest.json.4242.tmp").exists(), "pmtk's own leftover stays"
    _tables_equal(killed, synced.path, "Organization")


def test_the_manifest_is_written_before_any_data(
    tmp_path: Path, synced: Any, new_client: Any
) -> None:
    """Killed at its first staged page, a first sync leaves a folder pmtk recognises."""
    store = tmp_path / "first"

    def die(event: Any) -> None:
        raise KeyboardInterrupt

    with new_client(synced.dep) as client:
        with pytest.raises(KeyboardInterrupt):
            sync(client, store, resources=["Appointment"], progress=die)
        assert read_manifest(store)["kind"] == STORE_KIND
        check_folder(store)
        sync(client, store, resources=["Appointment"], progress=False)
    _tables_equal(store, synced.path, "Appointment")


def test_a_damaged_manifest_is_never_overwritten(
    synced: Any, tmp_path: Path, new_client: Any
) -> None:
    store = _copy(synced, tmp_path)
    manifest = store / "manifest.json"
    manifest.write_bytes(manifest.read_bytes()[:200])  # torn by a bad copy
    before = _snapshot(store)
    with new_client(synced.dep) as client, pytest.raises(ManifestDamaged) as info:
        sync(client, store, resources=["Referral"], progress=False)
    assert "will not overwrite" in str(info.value) and "new folder" in str(info.value)
    assert _snapshot(store) == before
    result = _cli(["sync", "--out", str(store), "-r", "Referral"], synced.dep)
    assert result.exit_code == 2, result.output
    assert "unreadable" in result.stderr and result.stderr.count("\n") == 1
    assert _snapshot(store) == before
    assert _cli(["sync", "--out", str(store), "--verify"]).exit_code == 2


def test_a_manifest_of_a_newer_pmtk_is_refused(synced: Any, tmp_path: Path) -> None:
    store = _copy(synced, tmp_path)
    manifest = orjson.loads((store / "manifest.json").read_bytes())
    manifest["format"] = 99
    (store / "manifest.json").write_bytes(orjson.dumps(manifest))
    with pytest.raises(StoreError, match="newer pmtk"):
        check_folder(store)


def test_a_format_1_store_is_recognised_and_rebuilt_with_checksums(
    synced: Any, tmp_path: Path, new_client: Any
) -> None:
    """A store written before the marker existed: data.parquet files, no kind, no sha256."""
    store = _copy(synced, tmp_path)
    manifest = orjson.loads((store / "manifest.json").read_bytes())
    del manifest["kind"]
    manifest["format"] = 1
    for entry in manifest["resources"].values():
        entry["schema_version"] = "1-" + entry["schema_version"].split("-", 1)[1]
        for table, info in entry["tables"].items():
            old = store / table / "data.parquet"
            (store / info["path"]).rename(old)
            info["path"] = f"{table}/data.parquet"
            del info["sha256"]
    (store / "manifest.json").write_bytes(orjson.dumps(manifest))
    check_folder(store)
    with pytest.raises(StoreDamaged, match="no checksum"):
        load("Referral", store)
    legacy = load("Referral", store, verify=False)
    assert isinstance(legacy, pl.DataFrame) and legacy.height > 0
    with new_client(synced.dep) as client:
        summary = sync(client, store, resources=["Referral", "Patient"], progress=False)
    assert summary["Referral"].mode == "full" and summary["Patient"].mode == "full"
    assert read_manifest(store)["kind"] == STORE_KIND
    assert verify(store, ["Referral", "Patient"]).ok
    assert not (store / "Referral" / "data.parquet").exists(), "superseded file left behind"
    _tables_equal(store, synced.path, "Patient")


# --------------------------------------------------------------------------- checksums


def test_every_one_of_200_bit_flips_in_a_stored_file_is_detected(
    synced: Any, tmp_path: Path
) -> None:
    store = _copy(synced, tmp_path)
    path = _path_of(store, "Appointment", "appointment_participant")
    original = path.read_bytes()
    rng = random.Random(11)
    silent = 0
    for _ in range(200):
        offset = rng.randrange(len(original))
        flipped = bytearray(original)
        flipped[offset] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(flipped))
        with pytest.raises(StoreDamaged) as info:
            load("Appointment", store, table="appointment_participant")
        assert str(path) in str(info.value), offset
        assert "--full --resource Appointment" in str(info.value)
        assert [p.problem for p in info.value.problems] == ["checksum mismatch"]
        report = verify(store, ["Appointment"])
        assert [p.path for p in report.problems] == [str(path.relative_to(store))]
        try:  # without verification, how many flips would have gone unnoticed?
            load("Appointment", store, table="appointment_participant", verify=False)
            silent += 1
        except StoreError:
            pass
    path.write_bytes(original)
    assert verify(store).ok
    # the probe found 151 of 200 flips silent; this is what verification is for
    assert silent > 0


def test_bit_flips_in_the_manifest_raise_or_change_nothing(synced: Any, tmp_path: Path) -> None:
    """A damaged manifest never makes load return other data than was stored."""
    store = _copy(synced, tmp_path)
    manifest = store / "manifest.json"
    original = manifest.read_bytes()
    expected = load("Organization", store, table="organization_telecom")
    assert isinstance(expected, pl.DataFrame)
    rng = random.Random(5)
    for _ in range(200):
        offset = rng.randrange(len(original))
        flipped = bytearray(original)
        flipped[offset] ^= 1 << rng.randrange(8)
        manifest.write_bytes(bytes(flipped))
        try:
            got = load("Organization", store, table="organization_telecom")
        except StoreError:
            continue
        assert isinstance(got, pl.DataFrame)
        assert got.equals(expected), f"flip at byte {offset} changed the data silently"


def test_a_sync_rebuilds_a_damaged_resource_in_full(
    synced: Any, tmp_path: Path, new_client: Any
) -> None:
    """An incremental merge would copy the damaged rows under a fresh checksum: never."""
    store = _copy(synced, tmp_path)
    path = _path_of(store, "Practitioner", "practitioner_telecom")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    with new_client(synced.dep) as client:
        summary = sync(client, store, resources=["Practitioner", "Organization"], progress=False)
    assert summary["Practitioner"].mode == "full"
    assert summary["Practitioner"].repaired == [str(path.relative_to(store))]
    assert summary["Organization"].mode == "incremental" and not summary["Organization"].repaired
    assert verify(store).ok
    _tables_equal(store, synced.path, "Practitioner")


def test_a_resumed_incremental_sync_is_discarded_when_the_data_under_it_is_damaged(
    synced: Any, tmp_path: Path, new_client: Any
) -> None:
    store = _copy(synced, tmp_path)

    def die(event: Any) -> None:
        raise KeyboardInterrupt

    with new_client(synced.dep) as client:
        with pytest.raises(KeyboardInterrupt):
            sync(client, store, resources=["Referral"], progress=die)
        state = orjson.loads((store / ".staging" / "Referral" / "state.json").read_bytes())
        assert state["mode"] == "incremental"
        _path_of(store, "Referral").write_bytes(b"PAR1 damaged PAR1")
        summary = sync(client, store, resources=["Referral"], progress=False)
    assert summary["Referral"].mode == "full" and not summary["Referral"].resumed
    assert verify(store).ok
    _tables_equal(store, synced.path, "Referral")


def test_pmtk_sync_verify_lists_damaged_files_and_the_repair_works(
    synced: Any, tmp_path: Path
) -> None:
    store = _copy(synced, tmp_path)
    clean = _cli(["sync", "--out", str(store), "--verify"])
    assert clean.exit_code == 0, clean.output
    assert "all match their sha256" in clean.stdout
    files = sum(len(e["tables"]) for e in read_manifest(store)["resources"].values())
    assert f"verified {files} files" in clean.stdout

    damaged = _path_of(store, "InvoiceLine", "invoice_line_price_component")
    data = bytearray(damaged.read_bytes())
    data[100] ^= 0x01
    damaged.write_bytes(bytes(data))
    missing = _path_of(store, "Coverage")
    missing.unlink()
    before = _snapshot(store)
    result = _cli(["sync", "--out", str(store), "--verify"])
    assert result.exit_code == 3, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("damaged")]
    assert len(lines) == 2, result.stderr
    assert any(str(damaged) in line and "checksum mismatch" in line for line in lines)
    assert any(str(missing) in line and "missing" in line for line in lines)
    assert any("--full --resource InvoiceLine" in line for line in lines)
    assert "2 of" in result.stderr
    assert _snapshot(store) == before, "--verify must not write"
    only = _cli(["sync", "--out", str(store), "--verify", "-r", "Referral"])
    assert only.exit_code == 0, only.output

    for resource in ("InvoiceLine", "Coverage"):
        repair = _cli(
            ["sync", "--out", str(store), "--full", "-r", resource, "--quiet"], synced.dep
        )
        assert repair.exit_code == 0, repair.output
    again = _cli(["sync", "--out", str(store), "--verify"])
    assert again.exit_code == 0, again.output
    for resource in ("InvoiceLine", "Coverage"):
        _tables_equal(store, synced.path, resource)


def test_verify_of_a_missing_store_or_resource_says_so(synced: Any, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no pmtk store"):
        verify(tmp_path / "nowhere")
    store = _copy(synced, tmp_path)
    with pytest.raises(StoreError, match="holds no Location data"):
        verify(store, ["Location"])
    report = verify(store)
    assert report.ok and report.bytes > 0
    # every declared table, and one raw-record table per resource (toolkit.store.raw)
    tables = sum(len(declared_schemas(r)) + 1 for r in catalogue.LISTED_RESOURCES)
    assert len(report.files) == tables


def test_a_staged_page_lost_to_a_power_cut_makes_the_resource_start_over(
    synced: Any, tmp_path: Path, new_client: Any
) -> None:
    """Staged parts are not fsynced; one that did not reach the disk must not be merged."""
    store = tmp_path / "store"
    seen: list[Any] = []

    def die_after_three(event: Any) -> None:
        seen.append(event)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with new_client(synced.dep) as client:
        with pytest.raises(KeyboardInterrupt):
            sync(client, store, resources=["Appointment"], progress=die_after_three)
        part = sorted((store / ".staging" / "Appointment" / "Appointment").glob("part-*"))[0]
        part.write_bytes(b"\0" * part.stat().st_size)  # what a lost write-back leaves
        summary = sync(client, store, resources=["Appointment"], progress=False)
    assert not summary["Appointment"].resumed
    assert verify(store).ok
    _tables_equal(store, synced.path, "Appointment")
