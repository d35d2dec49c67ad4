"""What a reading process keeps of a lake (``toolkit.lake.snapshots``) never shows old data.

``lake.load`` keeps the state table open and each version's pins and file lists
between reads. Each test reads once (so something is kept), changes the lake the way
a user or another writer would, and reads again: the second read must be the lake as
it is now, compared with the deployment's own list over plain HTTP or with the lake
read by Polars alone.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import toolkit_client
from tests.lake.conftest import delta_rows, ground_truth
from toolkit import lake
from toolkit.lake.location import LakeDamaged, Location
from toolkit.lake.state import read_pins


def _sync(dep: Any, where: Path, name: str = "north") -> None:
    with toolkit_client(dep) as client:
        lake.sync(client, where, deployment=name, resources=["Organization"])


def _stored(where: Path) -> dict[str, str]:
    frame = lake.load("Organization", where, deployment="north", table="_raw_Organization")
    return dict(zip(frame["id"], frame["last_updated"], strict=True))


def test_a_lake_made_again_at_the_same_path_is_read_afresh(
    tmp_path: Path, two_mocks: tuple[Any, Any]
) -> None:
    first, second = two_mocks
    where = tmp_path / "lake"
    _sync(first, where)
    assert _stored(where) == ground_truth(first, "Organization")
    shutil.rmtree(where)
    _sync(second, where)  # the same name, another deployment: versions numbered anew
    assert _stored(where) == ground_truth(second, "Organization")
    assert ground_truth(second, "Organization") != ground_truth(first, "Organization")


def test_a_commit_after_a_read_is_seen_by_the_next_read(tmp_path: Path, fresh_mock: Any) -> None:
    where = tmp_path / "lake"
    _sync(fresh_mock, where)
    before = _stored(where)
    changed = sorted(before)[0]
    fresh_mock.touch("Organization", [changed])
    _sync(fresh_mock, where)
    after = _stored(where)
    assert after == ground_truth(fresh_mock, "Organization")
    assert after[changed] != before[changed]
    polars_alone = delta_rows(where, "_raw_Organization", "north")
    assert after == dict(zip(polars_alone["id"], polars_alone["last_updated"], strict=True))


def test_changing_the_pins_a_read_returned_changes_nothing_kept(
    tmp_path: Path, mock_deployment: Any
) -> None:
    where = tmp_path / "lake"
    _sync(mock_deployment, where)
    expected = _stored(where)
    for pin in read_pins(Location.of(where)):
        pin.versions.clear()
        pin.files.clear()
    assert _stored(where) == expected


def test_a_file_damaged_after_a_kept_read_is_still_refused(
    tmp_path: Path, mock_deployment: Any
) -> None:
    where = tmp_path / "lake"
    _sync(mock_deployment, where)
    _stored(where)
    (target,) = (where / "tables" / "_raw_Organization").glob("deployment=north/*.parquet")
    blob = bytearray(target.read_bytes())
    blob[len(blob) // 2] ^= 0x01
    target.write_bytes(bytes(blob))
    with pytest.raises(LakeDamaged, match="sha256"):
        _stored(where)


def test_a_second_read_opens_no_table_again(
    tmp_path: Path, mock_deployment: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What is kept is used: a second read of an unchanged lake replays no Delta log
    (each open costs milliseconds, on every read of a notebook)."""
    import deltalake

    where = tmp_path / "lake"
    _sync(mock_deployment, where)
    expected = _stored(where)
    opened: list[str] = []

    class Counting(deltalake.DeltaTable):
        def __init__(self, uri: Any, *args: Any, **kwargs: Any) -> None:
            opened.append(str(uri))
            super().__init__(uri, *args, **kwargs)

    monkeypatch.setattr(deltalake, "DeltaTable", Counting)
    assert _stored(where) == expected
    assert opened == []
