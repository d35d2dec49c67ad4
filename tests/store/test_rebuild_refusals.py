"""A rebuild from raw records that cannot rebuild every row is refused (issue 33).

Forged as a hostile (or unlucky) user would: the raw-record table of the 23
Organizations cut to 5 records, or one record's JSON truncated, each written
under a content name with the manifest's checksum line made to match, so that
``load`` and ``verify`` find nothing wrong. ``pmtk sync --rebuild`` must refuse
(exit 2, a one-line typed error naming the resource and the counts or the
record) and leave every file and the manifest as they were.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from tests.conftest import copied_store, synced_store
from tests.store.organization_manifest import RESOURCE, manifest_tables, write_manifest_tables
from toolkit.cli import app
from toolkit.store import RebuildRefused, load, verify
from toolkit.store.raw import rebuild

RAW = f"_raw_{RESOURCE}"


@pytest.fixture(scope="module")
def synced_one(dep: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synced_store(dep, tmp_path_factory.mktemp("store") / "pmtk-store", [RESOURCE])


@pytest.fixture
def store(synced_one: Path, tmp_path: Path) -> Path:
    return copied_store(synced_one, tmp_path / "pmtk-store")


def forge_raw(store: Path, frame: pl.DataFrame) -> None:
    """Replace the raw-record table by ``frame``, its manifest line made to match."""
    tables = manifest_tables(store)
    tmp = store / RAW / "forged.tmp"
    frame.write_parquet(tmp)
    digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
    name = f"{RAW}/data-{digest[:16]}.parquet"
    tmp.rename(store / name)
    tables[RAW] = {"path": name, "rows": frame.height, "bytes": (store / name).stat().st_size}
    tables[RAW]["sha256"] = digest
    write_manifest_tables(store, tables)
    assert verify(store).ok  # nothing a checksum could find


def snapshot(store: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in store.rglob("*") if p.is_file() and p.name != ".lock"}


def _raw(store: Path) -> pl.DataFrame:
    frame = load(RESOURCE, store, table=RAW)
    assert isinstance(frame, pl.DataFrame)
    return frame


def test_a_raw_table_holding_fewer_records_than_the_table_is_refused(store: Path) -> None:
    main = load(RESOURCE, store)
    assert isinstance(main, pl.DataFrame)
    assert main.height == 23
    forge_raw(store, _raw(store).head(5))
    before = snapshot(store)
    result = CliRunner().invoke(app, ["sync", "--out", str(store), "--rebuild"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "refused" in said and RESOURCE in said
    assert "hold 5 records" in said and "holds 23 rows" in said
    assert snapshot(store) == before
    with pytest.raises(RebuildRefused, match="18 rows"):
        rebuild(store, progress=False)
    assert snapshot(store) == before


@pytest.mark.parametrize("damage", ["truncated", "another id", "not an object"])
def test_a_damaged_raw_record_is_a_typed_refusal_not_a_traceback(store: Path, damage: str) -> None:
    raw = _raw(store)
    blob = raw["json"][3]
    forged = {
        "truncated": blob[: len(blob) // 2],
        "another id": blob.replace(raw["id"][3].encode(), b"someone-else", 1),
        "not an object": b"[1, 2]",
    }[damage]
    jsons = raw["json"].to_list()
    jsons[3] = forged
    forge_raw(store, raw.with_columns(pl.Series("json", jsons, dtype=pl.Binary)))
    before = snapshot(store)
    result = CliRunner().invoke(app, ["sync", "--out", str(store), "--rebuild"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    said = " ".join(result.output.split())
    assert f"the raw record '{raw['id'][3]}' of {RESOURCE}" in said
    assert "Traceback" not in result.output
    assert snapshot(store) == before


def test_a_whole_raw_table_rebuilds_as_before(store: Path) -> None:
    main = load(RESOURCE, store)
    result = CliRunner().invoke(app, ["sync", "--out", str(store), "--rebuild", "-q"])
    assert result.exit_code == 0, result.output
    rebuilt = load(RESOURCE, store)
    assert isinstance(main, pl.DataFrame) and isinstance(rebuilt, pl.DataFrame)
    assert rebuilt.sort("id").equals(main.sort("id"))


def test_a_lost_table_is_compared_by_its_recorded_row_count(store: Path) -> None:
    forge_raw(store, _raw(store).head(5))
    (store / manifest_tables(store)[RESOURCE]["path"]).unlink()  # what a rebuild repairs
    before = snapshot(store)
    with pytest.raises(RebuildRefused, match="hold 5 records but its table holds 23 rows"):
        rebuild(store, progress=False)
    assert snapshot(store) == before
