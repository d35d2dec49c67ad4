"""Reading a lake through pmtk: each resource at its pinned versions, checked paths, verify.

:func:`load` reads a resource's table of one deployment or of all of them, each at
the version its pin names (so every table of a resource is seen at one committed
point), optionally ``as_of`` an earlier state of the lake (a version of its state
table, or a time). :func:`verify` reads every data file the pins name and compares
its sha256 with the one recorded when it was written: Delta checksums no whole file,
so a flipped bit in a Parquet page would otherwise go unnoticed until it is read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from toolkit.lake import snapshots
from toolkit.lake.commit import lake_tables, partition_files
from toolkit.lake.location import LakeDamaged, LakeError, Location, check_deployment_name
from toolkit.lake.state import Pin, is_lake, pins, read_pins, resolve
from toolkit.store.identity import deployment_of


def _selected(
    loc: Location, resource: str, deployment: str | None, as_of: int | datetime | None
) -> list[Pin]:
    if not is_lake(loc):
        raise LakeError(f"{loc.uri} is not a pmtk lake (it has no _pmtk/deployments table)")
    if deployment is not None:
        check_deployment_name(deployment)
    every = read_pins(loc, deployment) if as_of is None else pins(loc, deployment, as_of)
    chosen = [p for p in every if p.resource == resource]
    if deployment is not None and not chosen:
        msg = f"the lake {loc.uri} has no committed {resource} of deployment {deployment!r}"
        if as_of is not None:
            msg += f" as of {as_of}"
        raise LakeError(msg)
    return chosen


def load(
    resource: str,
    lake: str | os.PathLike[str] | Location,
    *,
    deployment: Any = None,
    table: str | None = None,
    as_of: int | datetime | None = None,
    lazy: bool = False,
    verify: bool = True,
    storage_options: dict[str, str] | None = None,
) -> Any:
    """One table of a resource from a lake, with the ``deployment`` column first.

    Parameters
    ----------
    resource
        A resource type with a view, e.g. ``"Appointment"``.
    lake
        A local folder or an ``s3://`` URL.
    deployment
        One deployment's short name (or a :class:`toolkit.Client`: the lake's
        deployment of that client); ``None`` reads every deployment of the lake.
    table
        A child, extension or raw table (default the main table).
    as_of
        A version of the lake's state table (see :func:`toolkit.lake.history`) or a
        time: the resource as it was committed then.
    lazy
        Return a ``pl.LazyFrame``.
    verify
        Compare each data file read with the sha256 recorded when it was written
        (as the store's ``load`` does); a mismatch raises :class:`LakeDamaged`.
    """
    loc = Location.of(lake, storage_options)
    if deployment is not None and not isinstance(deployment, str):
        deployment = _name_of(loc, deployment)
    name, schema = _table_schema(resource, table)
    frames = []
    for pin in _selected(loc, resource, deployment, as_of):
        version = pin.versions.get(name)
        if version is None:
            continue
        frames.append(_scan(loc, pin, name, version, schema, verify=verify))
    out = pl.concat(frames, how="vertical") if frames else pl.LazyFrame(schema=schema)
    return out if lazy else out.collect()


def _name_of(loc: Location, client: Any) -> str:
    """The lake's short name of a client's deployment (refused if the lake has none)."""
    return resolve(loc, deployment_of(client), None).name


def _table_schema(resource: str, table: str | None) -> tuple[str, pl.Schema]:
    """The table's name and its columns as read: the deployment first."""
    tables = lake_tables(resource)
    name = table or resource
    if name not in tables:
        known = ", ".join(tables)
        raise LakeError(f"{resource} has no table {name!r} in a lake; its tables: {known}")
    return name, pl.Schema({"deployment": pl.String(), **tables[name]})


def _scan(
    loc: Location, pin: Pin, table: str, version: int, schema: pl.Schema, *, verify: bool
) -> pl.LazyFrame:
    from deltalake import DeltaTable

    uri = loc.table_uri("tables", table)
    loc.check_local_links("tables", table)

    def opened() -> Any:
        return DeltaTable(uri, version=version, storage_options=loc.storage_options)

    # an object store's table is opened once here (nothing is kept for it); a local
    # one only when its file list is not kept already
    dt = None if loc.local else opened()

    def listed() -> tuple[bool, dict[str, int]]:
        table_at = dt if dt is not None else opened()  # every path the log names, checked:
        return _plain(table_at), partition_files(table_at, table, pin.deployment)

    plain, files = snapshots.at_version(loc, uri, version, pin.deployment, listed)
    if verify:
        recorded = pin.files.get(table, {})
        for path in sorted(files):
            try:
                digest = loc.sha256(uri, path)
            except FileNotFoundError:
                msg = (
                    f"{pin.deployment}/{table}: {path}, named by this version, is gone from "
                    "storage (a rebind of the deployment or a vacuum removed it); read a later "
                    "version"
                )
                raise LakeError(msg) from None
            if recorded.get(path) != digest:
                msg = (
                    f"{pin.deployment}/{table}: {path} does not match the sha256 recorded when "
                    "it was written; nothing was read (pmtk sync --out LAKE --verify lists "
                    "every damaged file)"
                )
                raise LakeDamaged(msg)
    if loc.local and plain:
        # The files the log names (checked above) are the rows: read them as Parquet,
        # without building a pyarrow dataset of the table (about 3 ms a read).
        paths = [os.path.join(uri, path) for path in sorted(files)]
        frame = (
            pl.scan_parquet(
                paths, hive_partitioning=False, missing_columns="insert", extra_columns="ignore"
            ).with_columns(pl.lit(pin.deployment, pl.String).alias("deployment"))
            if paths
            else pl.LazyFrame(schema=schema)
        )
    else:
        frame = pl.scan_delta(dt if dt is not None else opened()).filter(
            pl.col("deployment") == pin.deployment
        )
    return frame.select([pl.col(c).cast(t) for c, t in schema.items()])


def _plain(dt: Any) -> bool:
    """Whether the table's data files hold its rows as they are: reader version 1, so no
    deletion vectors or column mapping (pmtk's tables; another writer may add them)."""
    protocol = dt.protocol()
    return bool(protocol.min_reader_version == 1 and not protocol.reader_features)


@dataclass(slots=True)
class LakeVerifyReport:
    """What :func:`verify` found: ``problems`` (empty when every file is intact)."""

    lake: str
    files: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def raise_for_problems(self) -> None:
        if self.problems:
            raise LakeDamaged(f"the lake {self.lake} is damaged: " + "; ".join(self.problems))


def verify(
    lake: str | os.PathLike[str] | Location,
    *,
    deployment: str | None = None,
    storage_options: dict[str, str] | None = None,
) -> LakeVerifyReport:
    """Check every data file the pins name against its recorded sha256 (nothing written)."""
    from deltalake import DeltaTable

    loc = Location.of(lake, storage_options)
    report = LakeVerifyReport(loc.uri)
    if not is_lake(loc):
        report.problems.append(f"{loc.uri} is not a pmtk lake")
        return report
    for pin in pins(loc, deployment):
        for table, version in sorted(pin.versions.items()):
            where = f"{pin.deployment}/{table}@{version}"
            try:
                uri = loc.table_uri("tables", table)
                loc.check_local_links("tables", table)
                dt = DeltaTable(uri, version=version, storage_options=loc.storage_options)
                files = partition_files(dt, table, pin.deployment)
            except Exception as exc:  # a missing or forged log: reported, not raised
                report.problems.append(f"{where}: {type(exc).__name__}: {exc}")
                continue
            recorded = pin.files.get(table, {})
            for path in sorted(set(files) | set(recorded)):
                report.files += 1
                if path not in files:
                    report.problems.append(f"{where}: {path} is recorded but not in the table")
                    continue
                if path not in recorded:
                    report.problems.append(f"{where}: {path} has no recorded sha256")
                    continue
                try:
                    digest = loc.sha256(uri, path)
                except OSError as exc:
                    report.problems.append(f"{where}: {path} cannot be read: {exc}")
                    continue
                if digest != recorded[path]:
                    report.problems.append(
                        f"{where}: {path} has sha256 {digest[:16]}, "
                        f"recorded {recorded[path][:16]} (the file changed since it was written)"
                    )
    return report
