"""A Parquet store (``pmtk sync --out DIR``) brought into a lake as one deployment.

``pmtk sync --out LAKE --deployment NAME --from-store DIR`` (and
:func:`import_store`) checks every file of the store against its sha256 first (a
damaged store is refused whole, nothing written), then commits each resource's
tables, raw records and marks into the lake under ``NAME``, bound to the deployment
the store's manifest records. A store that records no deployment (written by an older
pmtk) is refused: nobody can say whose data it holds. The store itself is not
changed, and the next ``pmtk sync --out LAKE`` of that deployment goes on
incrementally from the store's own high-water marks.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import polars as pl

from toolkit.lake.commit import PART, Change, commit, lake_tables
from toolkit.lake.location import LakeError, Location
from toolkit.lake.state import Pin, init_lake, pin_of, register
from toolkit.store.checksums import verify
from toolkit.store.identity import recorded_deployment
from toolkit.store.layout import read_manifest, schema_version
from toolkit.store.read import read_table


class StoreNotImportable(LakeError):
    """The store cannot be brought into the lake as asked; nothing was written."""


def import_store(
    store: str | os.PathLike[str],
    lake: str | os.PathLike[str] | Location,
    *,
    deployment: str,
    storage_options: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Bring every resource of ``store`` into ``lake`` as ``deployment``; per resource, rows."""

    root = Path(store)
    manifest = read_manifest(root)
    identity = recorded_deployment(manifest)
    if identity is None:
        msg = (
            f"the store {root} records no deployment (an older pmtk wrote it), so nobody can "
            "say whose data it holds; nothing was written. Sync the deployment into the lake "
            "instead (pmtk sync --out LAKE --deployment NAME)"
        )
        raise StoreNotImportable(msg)
    report = verify(root)
    if not report.ok:
        problems = "; ".join(p.describe(root) for p in report.problems[:5])
        raise StoreNotImportable(f"the store {root} fails verification: {problems}")
    loc = Location.of(lake, storage_options)
    init_lake(loc)
    register(loc, deployment, identity)
    done: dict[str, Any] = {}
    for rt, entry in sorted(manifest.get("resources", {}).items()):
        if not isinstance(entry, dict) or not entry.get("tables"):
            continue
        if entry.get("schema_version") != schema_version(rt):
            continue  # written for another view: the next sync of the lake fetches it in full
        tables = _stored_tables(root, rt, entry)
        previous = pin_of(loc, deployment, rt)
        pin = Pin(
            deployment,
            rt,
            seq=previous.seq,
            high_water_mark=entry.get("high_water_mark"),
            next_since=entry.get("next_since"),
            server_time=entry.get("server_time"),
            last_sync={"mode": "import", "from_store": str(root)},
        )
        result = commit(loc, deployment, rt, Change(tables), pin=pin, kind="import")
        done[rt] = result.upserted_ids.len()
    return done


def _stored_tables(root: Path, rt: str, entry: dict[str, Any]) -> dict[str, pl.DataFrame]:
    """Every lake table of ``rt`` as the store holds it (checked against its sha256)."""

    tables: dict[str, pl.DataFrame] = {}
    for name, schema in lake_tables(rt).items():
        if name in entry["tables"]:
            loaded = read_table(rt, root, table=name)
            frame = loaded.collect() if isinstance(loaded, pl.LazyFrame) else loaded
        else:
            frame = pl.DataFrame(schema=schema)
        tables[name] = frame.select(list(schema)).with_columns(pl.lit(1, pl.Int64).alias(PART))
    return tables
