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
from collections.abc import Callable
from datetime import datetime

import polars as pl

from toolkit import catalogue
from toolkit.lake.commit import Change, CommitResult, commit, lake_tables
from toolkit.lake.location import LakeDamaged, LakeError, Location
from toolkit.lake.read import LakeVerifyReport, load, verify
from toolkit.lake.rebind import RebindResult
from toolkit.lake.rebind import rebind as _rebind
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
from toolkit.store.identity import deployment_of
from toolkit.store.results import PageSource
from toolkit.store.source import connected


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


def rebind(
    lake: str | os.PathLike[str],
    deployment: str,
    client: PageSource | None = None,
    *,
    storage_options: dict[str, str] | None = None,
    lock_timeout: float = 60.0,
    after_step: Callable[[str], None] | None = None,
) -> RebindResult:
    """Give the lake's name ``deployment`` to ``client``'s deployment (default the configured one).

    Every row and data file of the deployment the name had is removed first; the other
    deployments are untouched. See :mod:`toolkit.lake.rebind` for the steps and what a
    crash at each leaves; ``after_step`` (tests) is called with each step's name.
    """

    loc = Location.of(lake, storage_options)
    every = list(catalogue.LISTED_RESOURCES)
    with connected(client) as source:
        return _rebind(
            loc, deployment, deployment_of(source), every,
            lock_timeout=lock_timeout, after_step=after_step,
        )  # fmt: skip


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
    "RebindResult",
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
    "rebind",
    "sync",
    "verify",
]
