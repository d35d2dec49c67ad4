"""A lake commit's memory does not grow with the table it writes."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from toolkit.lake.commit import ROW_GROUP_ROWS, _write_table
from toolkit.lake.location import Location
from toolkit.store.raw import RAW_SCHEMA


def test_a_large_write_is_cut_into_bounded_row_groups(tmp_path: Path) -> None:
    """A commit's memory must not grow with the table: the Parquet writer holds a whole
    row group, so every row group of every file has at most ``ROW_GROUP_ROWS`` rows
    (read back with pyarrow, not pmtk). Its default, a million rows, would hold a large
    raw table whole."""
    rows = ROW_GROUP_ROWS + 1_000
    assert rows < 1_048_576  # the writer's default would take them in one group
    frame = pl.LazyFrame(
        {
            "id": [f"r{i:07d}" for i in range(rows)],
            "last_updated": ["2026-01-01T00:00:00Z"] * rows,
            "json": [b"{}"] * rows,
        },
        schema=RAW_SCHEMA,
    )
    loc = Location.of(tmp_path / "lake")
    _write_table(loc, "north", "_raw_Organization", "id", frame, [], RAW_SCHEMA, {})
    files = list((tmp_path / "lake" / "tables" / "_raw_Organization").rglob("*.parquet"))
    groups = [
        pq.ParquetFile(f).metadata.row_group(i).num_rows
        for f in files
        for i in range(pq.ParquetFile(f).metadata.num_row_groups)
    ]
    assert sum(groups) == rows
    assert max(groups) <= ROW_GROUP_ROWS, groups
