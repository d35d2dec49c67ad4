"""A deployment's name in a lake given to another deployment, with nothing of the old one left.

A store's ``--rebind`` discards the old practice's data before the new one's first
sync; a lake does the same for one name (one partition of every table), leaving the
other deployments alone. The steps, each under the leases of every resource of that
name (so no sync or webhook batch of it commits meanwhile):

1. **pins**: every resource's pin is emptied (its ``seq`` still moves on), so readers
   through pmtk see nothing of the name from here on;
2. **rows**: a Delta ``DELETE`` of the name's partition in every table (whole files,
   nothing rewritten);
3. **files**: the partition's data files, no longer named by any table's current
   version, are removed from storage, so time travel cannot bring them back;
4. **identity**: the name is bound to the new deployment, by a compare-and-swap on the
   old identity.

The identity moves last: until then the name still belongs to the old deployment,
whose client may sync it again, and the new one's client is refused. A crash at any
step leaves a state that the same command finishes (each step is idempotent), and no
state in which the new deployment's records could be written beside the old one's.

Delta's log keeps, for each removed file, its path, row count and the minimum and
maximum of the columns it keeps statistics for; tables created by this pmtk keep
statistics only for the record key (:func:`toolkit.lake.commit.stats_columns`), so what
remains of the old deployment is record ids, never names, dates or other values.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolkit.lake.commit import lake_tables, open_data_table, partition_files
from toolkit.lake.location import DATA_FILE, LakeDamaged, Location, check_deployment_name
from toolkit.lake.state import (
    Pin,
    UnknownDeployment,
    append_history,
    deployments,
    move_pin,
    owner_id,
    pin_of,
    release_lease,
    retrying,
    set_identity,
    take_lease,
)
from toolkit.store.identity import Deployment

STEPS = ("leases", "pins", "rows", "files", "identity")
"""The steps of a rebind, in order (``after_step`` is called with each name)."""


@dataclass(slots=True)
class RebindResult:
    """What a rebind did: rows deleted and files removed per table (empty: nothing to do)."""

    deployment: str
    rows: dict[str, int] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return bool(self.rows or self.files)


def rebind(
    loc: Location,
    name: str,
    identity: Deployment | None,
    resources: list[str],
    *,
    lock_timeout: float = 60.0,
    after_step: Callable[[str], None] | None = None,
) -> RebindResult:
    """Give ``name`` to ``identity`` (see the module's docstring); a no-op if it has it."""
    check_deployment_name(name)
    if identity is None:
        msg = "a rebind gives the name to a client's deployment: this source names none"
        raise UnknownDeployment(msg)
    known = deployments(loc).get(name)
    if known is None:
        raise UnknownDeployment(f"the lake {loc.uri} holds no deployment {name!r} to rebind")
    result = RebindResult(name)
    if known.identity.same_as(identity):
        return result

    def step(what: str) -> None:
        if after_step is not None:
            after_step(what)

    owner = owner_id()
    held: list[str] = []
    try:
        for rt in resources:
            take_lease(loc, name, rt, owner, lock_timeout)
            held.append(rt)
        step("leases")
        emptied = [_empty_pin(loc, name, rt, owner) for rt in resources]
        step("pins")
        tables = [t for rt in resources for t in lake_tables(rt)]
        for table in tables:
            result.rows[table] = _delete_partition(loc, table, name)
        step("rows")
        for table in tables:
            result.files[table] = _remove_files(loc, table, name)
        step("files")
        set_identity(loc, name, known.identity, identity)
        step("identity")
    finally:
        for rt in held:
            with contextlib.suppress(Exception):
                release_lease(loc, name, rt, owner)
    for pin in emptied:
        append_history(loc, pin, "rebind", {"deleted": result.rows.get(pin.resource, 0)})
    return result


def _empty_pin(loc: Location, name: str, rt: str, owner: str) -> Pin:
    """The resource's pin emptied (seq moved on), the lease kept."""
    now = pin_of(loc, name, rt)
    empty = Pin(name, rt, seq=now.seq + 1, last_sync={"rebind": True})
    move_pin(loc, empty, now.seq, owner, release=False)
    return empty


def _delete_partition(loc: Location, table: str, name: str) -> int:
    """Delete the name's partition from ``table`` (a Delta ``DELETE``); rows deleted."""
    dt = open_data_table(loc, table)
    if dt is None or not partition_files(dt, table, name):
        return 0

    def delete() -> int:
        fresh = open_data_table(loc, table)
        metrics: dict[str, Any] = fresh.delete(predicate=f"deployment = '{name}'")
        return int(metrics.get("num_deleted_rows") or 0)

    return retrying(delete, f"deleting {name} from {table}")


def _remove_files(loc: Location, table: str, name: str) -> int:
    """Remove the partition's data files that the table's current version does not name."""
    from pyarrow import fs as pafs

    dt = open_data_table(loc, table)
    if dt is None:
        return 0
    named = set(partition_files(dt, table, name))
    folder = f"deployment={name}"
    loc.check_local_links("tables", table, folder)
    filesystem, root = loc.filesystem(loc.table_uri("tables", table))
    try:
        selector = pafs.FileSelector(f"{root}/{folder}", allow_not_found=True)
        found = filesystem.get_file_info(selector)
    except OSError as exc:
        raise LakeDamaged(f"{table}: cannot list {folder}: {exc}") from exc
    removed = 0
    for info in found:
        rel = f"{folder}/{info.base_name}"
        if info.type != pafs.FileType.File or DATA_FILE.fullmatch(rel) is None or rel in named:
            continue
        filesystem.delete_file(info.path)
        removed += 1
    return removed


__all__ = ["STEPS", "RebindResult", "rebind"]
