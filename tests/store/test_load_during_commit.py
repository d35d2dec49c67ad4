"""``load`` while a writer commits: a replaced file is read again, never called damage.

A store kept current by ``pmtk listen`` commits every few hundred milliseconds. Each
commit writes the table's new file, swaps the manifest, then removes the old file. A
``load`` that read the manifest just before the swap found its file gone and said the
store was damaged ("not a readable Parquet file ... run pmtk sync --full"), found by a
CI run of ``tests/listen/test_catch_up_beside_worker.py``. The commit here is a real
:func:`apply_changes` run at the worst moment: between ``load`` reading the manifest
and reading the file.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.conftest import synced_store
from toolkit.client import Client
from toolkit.store import StoreDamaged, StoreError, apply_changes, load


@pytest.fixture
def store(dep: Any, tmp_path: Path) -> Path:
    return synced_store(dep, tmp_path / "store", ["Appointment"])


def _commit_before_reads(
    store: Path, client: Client, monkeypatch: pytest.MonkeyPatch, *, every: bool
) -> tuple[str, list[str]]:
    """Make a real commit land between ``load`` reading the manifest and reading the
    file: before the first read only, or (``every``) before each. Returns the record's
    id (committed as ``commit N``, N the read it came before) and the files read."""
    import toolkit.store.read as reading  # where load reads a store's table

    rid = str(load("Appointment", store)["id"][0])
    record = client.read("Appointment", rid)
    real = reading._read_stored
    reads: list[str] = []

    def commit_first(root: Path, rtype: str, path: Path, declared: Any) -> pl.LazyFrame:
        reads.append(path.name)
        if len(reads) > 3 * reading.READ_RACES:
            raise RuntimeError("load kept reading")
        if every or len(reads) == 1:
            newer = copy.deepcopy(record)
            newer["description"] = f"commit {len(reads)}"
            newer["meta"]["lastUpdated"] = f"2099-01-01T00:00:{len(reads):02d}Z"
            apply_changes("Appointment", store, upserts=[newer])
            assert not path.exists()  # the old file is gone
        return real(root, rtype, path, declared)

    monkeypatch.setattr(reading, "_read_stored", commit_first)
    return rid, reads


def test_a_load_whose_file_a_commit_replaces_reads_the_new_one(
    store: Path, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid, reads = _commit_before_reads(store, client, monkeypatch, every=False)
    frame = load("Appointment", store)
    assert len(reads) == 2  # the replaced file, then the new one
    assert frame.filter(pl.col("id") == rid)["description"].item() == "commit 1"


def test_a_file_the_manifest_still_names_but_is_gone_is_damage(store: Path) -> None:
    """The retry is for a replaced file only: a missing file the current manifest still
    names is reported at once, as before."""
    files = list((store / "Appointment").glob("data-*.parquet"))
    assert len(files) == 1
    files[0].unlink()
    with pytest.raises(StoreDamaged, match="missing"):
        load("Appointment", store)


def test_a_writer_that_replaces_the_file_at_every_read_is_given_up_on(
    store: Path, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``load`` tries :data:`READ_RACES` times, then says what happened; it never spins."""
    from toolkit.store.read import READ_RACES

    _rid, reads = _commit_before_reads(store, client, monkeypatch, every=True)
    with pytest.raises(StoreError, match="not a readable Parquet file"):
        load("Appointment", store)
    assert len(reads) == READ_RACES
    assert len(set(reads)) == READ_RACES  # each try read the file of its manifest
