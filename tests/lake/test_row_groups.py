"""A lake commit's memory does not grow with the table it writes."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from toolkit.lake.commit import PART, ROW_GROUP_ROWS, _write_table, lake_tables, stream
from toolkit.lake.location import Location
from toolkit.lake.syncer import _Staged
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
    _write_table(loc, "north", "_raw_Organization", "id", [frame], [], RAW_SCHEMA, {})
    files = list((tmp_path / "lake" / "tables" / "_raw_Organization").rglob("*.parquet"))
    groups = [
        pq.ParquetFile(f).metadata.row_group(i).num_rows
        for f in files
        for i in range(pq.ParquetFile(f).metadata.num_row_groups)
    ]
    assert sum(groups) == rows
    assert max(groups) <= ROW_GROUP_ROWS, groups


def test_a_commit_reads_its_pieces_one_after_another() -> None:
    """A sync's staged parts reach delta-rs one part at a time: the next part's query
    starts only once the one before has been read. (Given one query over every part,
    Polars' streaming engine reads them all ahead of delta-rs: 866 MB held for the
    large raw Appointment table against 137 MB part by part.)"""
    started: list[int] = []

    def piece(n: int) -> pl.LazyFrame:
        def note(frame: pl.DataFrame) -> pl.DataFrame:
            started.append(n)
            return frame

        rows = pl.LazyFrame({"id": [f"{n}-{i}" for i in range(10)]})
        return rows.map_batches(note, schema={"id": pl.String})

    reader = stream([piece(1), piece(2), piece(3)])
    first = reader.read_next_batch()
    assert started == [1]
    rest = reader.read_all()
    assert started == [1, 2, 3]
    assert first.num_rows + rest.num_rows == 30


def test_a_sync_stages_its_parts_as_separate_pieces(tmp_path: Path) -> None:
    """The staged parts are handed to the commit as one scan each, not one scan of all."""
    folder = tmp_path / "stage"
    for table, schema in lake_tables("Organization").items():
        (folder / table).mkdir(parents=True)
        for part in (1, 2, 3):
            pl.DataFrame(schema=schema).with_columns(
                pl.lit(part, pl.Int64).alias(PART)
            ).write_parquet(folder / table / f"part-{part:06d}.parquet")
    tables = _Staged(folder).tables("Organization")
    assert {len(scans) for scans in tables.values()} == {3}
