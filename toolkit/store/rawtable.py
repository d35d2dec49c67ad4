"""The raw-record table of a resource: its name, its columns and its rows.

Below everything that stages, merges, commits or reads it (the store's transaction,
merge and syncer, the lake's commit and sync); what is read from it and served
(``pmtk sync --rebuild``, views) is :mod:`toolkit.store.raw`, which re-exports these.
"""

from __future__ import annotations

from typing import Any

import orjson
import polars as pl

RAW_SCHEMA = pl.Schema({"id": pl.String(), "last_updated": pl.String(), "json": pl.Binary()})
"""The columns of a raw-record table."""


def raw_table(resource_type: str) -> str:
    """The name of a resource's raw-record table (``_raw_Appointment``)."""
    return f"_raw_{resource_type}"


def raw_frame(resource_type: str, records: list[dict[str, Any]]) -> pl.DataFrame:
    """The raw-record rows of ``records`` (those of ``resource_type`` with an id)."""
    kept = [
        r
        for r in records
        if r.get("resourceType") == resource_type and isinstance(r.get("id"), str)
    ]
    stamps = []
    for r in kept:
        meta = r.get("meta")
        stamp = meta.get("lastUpdated") if isinstance(meta, dict) else None
        stamps.append(stamp if isinstance(stamp, str) else None)
    return pl.DataFrame(
        {
            "id": [r["id"] for r in kept],
            "last_updated": stamps,
            "json": [orjson.dumps(r) for r in kept],
        },
        schema=RAW_SCHEMA,
    )
