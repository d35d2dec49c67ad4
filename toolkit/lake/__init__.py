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

import polars as pl

from toolkit.lake.commit import Change, CommitResult, commit, lake_tables
from toolkit.lake.location import LakeDamaged, LakeError, Location
from toolkit.lake.read import LakeVerifyReport, load, verify
from toolkit.lake.state import (
    LakeBusy,
    LakeDeployment,
    LeaseLost,
    UnknownDeployment,
    is_lake,
    pins,
)
from toolkit.lake.state import deployments as _deployments
from toolkit.lake.state import history as _history
from toolkit.lake.sync import LakeResourceSync, LakeSyncSummary, sync


def deployments(
    lake: str, storage_options: dict[str, str] | None = None
) -> dict[str, LakeDeployment]:
    """The deployments a lake holds, by short name."""
    return _deployments(Location.of(lake, storage_options))


def history(
    lake: str, deployment: str | None = None, storage_options: dict[str, str] | None = None
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
    "UnknownDeployment",
    "commit",
    "deployments",
    "history",
    "is_lake",
    "lake_tables",
    "load",
    "pins",
    "sync",
    "verify",
]
