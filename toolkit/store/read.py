"""A table of a Parquet store read back: :func:`read_table`, the store's half of ``load``.

:func:`toolkit.store.load` (``entry.py``) reads a lake when it is given one and a store
otherwise; this module reads the store, checked as that function's docstring says
(the file's sha256, the deployment, links, the view's columns, a commit racing the
read). The lake's import of a store (:func:`toolkit.lake.import_store`) reads it here,
below the entry points that dispatch to the lake.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import polars as pl

from toolkit.store.identity import WrongDeployment, check_deployment, default_store, deployment_of
from toolkit.store.layout import (
    declared_schemas,
    linked_message,
    manifest_path,
    read_manifest,
    snake,
)
from toolkit.store.paths import table_path
from toolkit.store.results import (
    FileProblem,
    StoreDamaged,
    StoreError,
    StoreLinked,
    repair_command,
)
from toolkit.store.transaction import check_table


def read_table(
    resource_type: str,
    store: str | os.PathLike[str] | None = None,
    *,
    table: str | None = None,
    lazy: bool = False,
    verify: bool = True,
    deployment: Any = None,
) -> pl.DataFrame | pl.LazyFrame:
    """A stored table with the dtypes its view declares (:func:`toolkit.store.load`'s
    parameters and errors; ``store`` is a store, never a lake)."""
    root = Path(store if store is not None else default_store())
    if deployment is not None:
        _check_source(root, deployment)
    name, info = _stored_table(root, resource_type, table)
    for attempt in range(1, READ_RACES + 1):
        try:
            path = _checked_file(root, resource_type, name, info, verify=verify)
            frame = _read_stored(
                root, resource_type, path, declared_schemas(resource_type).get(name)
            )
            return frame if lazy else _collected(frame, root, resource_type, path)
        except StoreError:
            # a writer's commit (pmtk listen, a sync) replaced the file after the manifest
            # was read and removed the old one: not damage; read what the store holds now
            now = _stored_table(root, resource_type, table)
            if attempt == READ_RACES or now[1] == info:
                raise
            name, info = now
    raise AssertionError("unreachable")  # pragma: no cover - the last attempt raises


READ_RACES = 5
"""Reads of a table :func:`load` tries when each finds its file replaced by a commit
(a store kept current by ``pmtk listen`` commits every few hundred milliseconds)."""


UNREADABLE = (pl.exceptions.PolarsError, pl.exceptions.PanicException, OSError)
"""What reading a damaged file raises (Polars can panic, a BaseException, rather than raise)."""


def _collected(frame: pl.LazyFrame, root: Path, resource_type: str, path: Path) -> pl.DataFrame:
    """``frame`` read, a damaged file raised as the store error that says so."""
    try:
        return frame.collect()
    except UNREADABLE as exc:
        raise unreadable_error(root, resource_type, path, exc) from exc


def unreadable_error(root: Path, resource_type: str, path: Path, exc: BaseException) -> StoreError:
    msg = (
        f"{path} is not a readable Parquet file ({exc}); "
        f"run `{repair_command(root, resource_type)}`"
    )
    return StoreError(msg)


def _check_source(root: Path, deployment: Any) -> None:
    """Refuse a store that is not bound to ``deployment`` (:class:`WrongDeployment`)."""
    current = deployment_of(deployment)
    if current is not None and check_deployment(root, read_manifest(root), current) != "keep":
        # no deployment recorded, but nothing another deployment's either: no sync
        # of this one has run, so nothing vouches for the data
        msg = (
            f"the store at {root} is not bound to {current.describe()} yet (no sync "
            f"of it has run); run `pmtk sync --out {root}` first"
        )
        raise WrongDeployment(msg)


def _checked_file(
    root: Path, resource_type: str, name: str, info: dict[str, Any], *, verify: bool
) -> Path:
    """The stored file of a table: inside its table's folder, present and (``verify``) intact."""
    if "path" not in info:
        missing = FileProblem(resource_type, name, f"{name}/?", "missing")
        raise StoreDamaged(root, [missing])
    path = table_path(root, resource_type, name, info)  # StoreDamaged naming the entry
    for hop in (manifest_path(root), path.parent, path):
        if hop.is_symlink():  # the data would come from outside the store
            raise StoreLinked(linked_message(root, hop))
    if not path.is_file():
        missing = FileProblem(resource_type, name, str(info.get("path")), "missing")
        raise StoreDamaged(root, [missing])
    if verify:
        problem = check_table(root, resource_type, name, info)
        if problem is not None:
            raise StoreDamaged(root, [problem])
    return path


def _read_stored(
    root: Path, resource_type: str, path: Path, declared: pl.Schema | None
) -> pl.LazyFrame:
    """A scan of the file, cast to the view's dtypes; refused if its columns differ."""
    try:
        frame = pl.scan_parquet(path)
        stored_schema = frame.collect_schema()
    except UNREADABLE as exc:
        raise unreadable_error(root, resource_type, path, exc) from exc
    if declared is None:
        return frame
    if list(stored_schema.names()) != list(declared.names()):
        msg = (
            f"{path} was written for another version of the {resource_type} view; "
            f"run `pmtk sync --full --resource {resource_type}`"
        )
        raise StoreError(msg)
    return frame.cast(declared)


def _stored_table(root: Path, resource_type: str, table: str | None) -> tuple[str, dict[str, Any]]:
    """The table's name in the manifest (``participant`` finds ``appointment_participant``)
    and what the manifest records of it; :class:`StoreError` naming what is there otherwise."""
    manifest = read_manifest(root)
    entry = manifest["resources"].get(resource_type)
    if not isinstance(entry, dict) or not entry.get("tables"):
        stored = ", ".join(sorted(manifest["resources"])) or "nothing"
        msg = (
            f"the store at {root} holds no {resource_type} data (it holds: {stored}); "
            f"run `pmtk sync --out {root} --resource {resource_type}`"
        )
        raise StoreError(msg)
    tables: dict[str, Any] = entry["tables"]
    name = table or resource_type
    if name not in tables and f"{snake(resource_type)}_{name}" in tables:
        name = f"{snake(resource_type)}_{name}"
    if name not in tables:
        msg = f"{resource_type} has no table {table!r} in {root}; tables: {', '.join(tables)}"
        raise StoreError(msg)
    return name, tables[name] if isinstance(tables[name], dict) else {}
