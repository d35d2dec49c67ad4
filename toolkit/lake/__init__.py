"""Many deployments in one Delta Lake (delta-rs), read by any engine, written by many.

>>> import tempfile, toolkit
>>> from toolkit import lake
>>> with tempfile.TemporaryDirectory() as where, toolkit.connect() as client:
...     done = lake.sync(client, where, deployment="demo", resources=["Organization"])
...     frame = lake.load("Organization", where, deployment="demo")
...     (done.deployment, frame.columns[0], frame.height == done["Organization"].upserted)
('demo', 'deployment', True)

See ``docs/lake.md`` for the layout, the guarantees and how the failures are handled.
"""

import os
from datetime import datetime

import polars as pl

from toolkit.lake.commit import Change, CommitResult, commit, lake_tables
from toolkit.lake.location import LakeDamaged, LakeError, Location
from toolkit.lake.read import LakeVerifyReport, load, verify
from toolkit.lake.state import (
    LakeBusy,
    LakeDeployment,
    LeaseLost,
    Pin,
    UnknownDeployment,
)
from toolkit.lake.state import deployments as _deployments
from toolkit.lake.state import history as _history
from toolkit.lake.state import is_lake as _is_lake
from toolkit.lake.state import pins as _pins
from toolkit.lake.syncer import LakeResourceSync, LakeSyncSummary, apply_changes, sync
from toolkit.lake.upgrade import StoreNotImportable, import_store


def is_lake(lake: str | os.PathLike[str], storage_options: dict[str, str] | None = None) -> bool:
    """Whether ``lake`` is a pmtk lake (it has pmtk's deployments table)."""
    return _is_lake(Location.of(lake, storage_options))


def pins(
    lake: str | os.PathLike[str],
    deployment: str | None = None,
    as_of: int | datetime | None = None,
    storage_options: dict[str, str] | None = None,
) -> list[Pin]:
    """The committed pin of every (deployment, resource), now or ``as_of`` a state version."""
    return _pins(Location.of(lake, storage_options), deployment, as_of)


def deployments(
    lake: str, storage_options: dict[str, str] | None = None
) -> dict[str, LakeDeployment]:
    """The deployments a lake holds, by short name."""
    return _deployments(Location.of(lake, storage_options))


def history(
    lake: str | os.PathLike[str],
    deployment: str | None = None,
    storage_options: dict[str, str] | None = None,
) -> pl.DataFrame:
    """Every commit of the lake (``pl.DataFrame``), oldest first."""
    return _history(Location.of(lake, storage_options), deployment)


__all__ = [
    "Change",
    "CommitResult",
    "LakeBusy",
    "LakeDamaged",
    "LakeDeployment",
    "LakeError",
    "LakeResourceSync",
    "LakeSyncSummary",
    "LakeVerifyReport",
    "LeaseLost",
    "Location",
    "Pin",
    "StoreNotImportable",
    "UnknownDeployment",
    "apply_changes",
    "commit",
    "deployments",
    "history",
    "import_store",
    "is_lake",
    "lake_tables",
    "load",
    "pins",
    "sync",
    "verify",
]
