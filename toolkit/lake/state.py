"""pmtk's own tables in a lake: the deployments, each resource's pin and lease, the history.

They are Delta tables too (``_pmtk/deployments``, ``_pmtk/state``, ``_pmtk/history``),
so a lake on object storage needs nothing but what delta-rs already does, and every
change to them is one Delta commit:

* **deployments**: one row per deployment the lake holds (its short name, the
  normalised base URL and the hash of the client id, as a store's manifest records).
  Added by a ``MERGE`` that inserts only when the name is new: two writers adding the
  same name cannot both succeed.
* **state**: one row per (deployment, resource), partitioned by deployment. It is the
  *pin*: which version of each of the resource's tables holds its last committed
  change, with the sha256 of every data file of the deployment's partition, the
  high-water mark and how the last sync went. Readers through pmtk read each table at
  its pinned version, so a resource's main, child, extension and raw tables are always
  seen at one consistent point, whatever a writer is doing. The same row is the
  resource's *lease*: a writer takes it (a ``MERGE`` that succeeds only when the row
  has no live owner), commits, and clears it in the same ``MERGE`` that moves the pin,
  which also checks that the pin is still the one it started from (compare-and-swap).
  Delta's optimistic concurrency makes each of these ``MERGE`` statements atomic: of
  two writers, one commits and the other gets a conflict and tries again.
* **history**: one row appended per commit (append-only; appends never conflict).
"""

from __future__ import annotations

import json
import os
import random
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import polars as pl
import pyarrow as pa

from toolkit.lake import snapshots
from toolkit.lake.location import LakeDamaged, LakeError, Location, check_deployment_name
from toolkit.store.identity import Deployment, WrongDeployment

T = TypeVar("T")

LEASE_SECONDS = 600.0
"""How long a writer's lease on (deployment, resource) lasts without being renewed.

A writer that crashed holds its lease until then; a writer alive renews it at each step.
"""

COMMIT_RETRIES = 40
"""How often a conflicting Delta commit of pmtk's own tables is tried again."""

DEPLOYMENTS_SCHEMA = pa.schema(
    [
        ("name", pa.string()),
        ("base_url", pa.string()),
        ("client_id_sha256", pa.string()),
        ("embedded_mock", pa.bool_()),
        ("added_at", pa.string()),
    ]
)
STATE_SCHEMA = pa.schema(
    [
        ("deployment", pa.string()),
        ("resource", pa.string()),
        ("seq", pa.int64()),
        ("lease_owner", pa.string()),
        ("lease_expires_ms", pa.int64()),
        ("pin", pa.string()),
    ]
)
HISTORY_SCHEMA = pa.schema(
    [
        ("deployment", pa.string()),
        ("resource", pa.string()),
        ("seq", pa.int64()),
        ("committed_at", pa.string()),
        ("kind", pa.string()),
        ("upserted", pa.int64()),
        ("stale", pa.int64()),
        ("deleted", pa.int64()),
        ("records_fetched", pa.int64()),
        ("versions", pa.string()),
    ]
)


class LakeBusy(LakeError):
    """Another writer holds the resource's lease for longer than this writer would wait."""


class LeaseLost(LakeError):
    """This writer's lease ran out and another writer committed: its pin was not moved."""


class UnknownDeployment(LakeError):
    """The lake holds no deployment of that name (or none matching the client)."""


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def owner_id() -> str:
    """This writer, as a lease names it: host, process and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def retrying(action: Callable[[], T], what: str, attempts: int = COMMIT_RETRIES) -> T:
    """Run one Delta commit, again on a concurrent writer's conflict (with jitter)."""
    from deltalake.exceptions import CommitFailedError

    delay = 0.02
    for attempt in range(attempts):
        try:
            return action()
        except CommitFailedError as exc:
            if attempt == attempts - 1:
                msg = f"{what}: still conflicting with other writers after {attempts} tries: {exc}"
                raise LakeBusy(msg) from exc
        time.sleep(delay * (1 + random.random()))
        delay = min(delay * 2, 1.0)
    raise AssertionError("unreachable")  # pragma: no cover


def _ensure(loc: Location, name: str, schema: pa.Schema, partition_by: list[str] | None) -> str:
    from deltalake import DeltaTable, write_deltalake

    uri = loc.table_uri("_pmtk", name)
    loc.check_local_links("_pmtk", name)
    if DeltaTable.is_deltatable(uri, storage_options=loc.storage_options):
        return uri
    try:
        write_deltalake(
            uri,
            schema.empty_table(),
            partition_by=partition_by,
            mode="error",
            storage_options=loc.storage_options,
        )
    except Exception:  # a concurrent creator won: fine if the table is there now
        if not DeltaTable.is_deltatable(uri, storage_options=loc.storage_options):
            raise
    return uri


def is_lake(loc: Location) -> bool:
    from deltalake import DeltaTable

    return bool(
        DeltaTable.is_deltatable(
            loc.table_uri("_pmtk", "deployments"), storage_options=loc.storage_options
        )
    )


def init_lake(loc: Location) -> None:
    """Create pmtk's tables of a new lake (idempotent; safe against a concurrent creator)."""
    _ensure(loc, "deployments", DEPLOYMENTS_SCHEMA, None)
    _ensure(loc, "state", STATE_SCHEMA, ["deployment"])
    _ensure(loc, "history", HISTORY_SCHEMA, ["deployment"])


def _table(loc: Location, name: str, version: int | datetime | None = None) -> Any:
    from deltalake import DeltaTable

    uri = loc.table_uri("_pmtk", name)
    loc.check_local_links("_pmtk", name)
    dt = DeltaTable(uri, storage_options=loc.storage_options)
    if version is not None:
        dt.load_as_version(version)
    return dt


def _frame(dt: Any) -> pl.DataFrame:
    return pl.DataFrame(pl.from_arrow(dt.to_pyarrow_table()))


# -- deployments -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LakeDeployment:
    """A deployment a lake holds: its short name and identity."""

    name: str
    identity: Deployment
    added_at: str = ""


def deployments(loc: Location) -> dict[str, LakeDeployment]:
    if not is_lake(loc):
        return {}
    out: dict[str, LakeDeployment] = {}
    for row in _frame(_table(loc, "deployments")).iter_rows(named=True):
        ident = Deployment(row["base_url"], row["client_id_sha256"], bool(row["embedded_mock"]))
        out[row["name"]] = LakeDeployment(row["name"], ident, row["added_at"] or "")
    return out


def _deployment_row(name: str, identity: Deployment) -> pa.Table:
    """The deployments table's row naming ``identity`` ``name``, added now."""
    return pa.table(
        {
            "name": [name],
            "base_url": [identity.base_url],
            "client_id_sha256": [identity.client_id_sha256],
            "embedded_mock": [identity.embedded_mock],
            "added_at": [now_iso()],
        },
        schema=DEPLOYMENTS_SCHEMA,
    )


def register(loc: Location, name: str, identity: Deployment) -> LakeDeployment:
    """Add ``name`` for ``identity`` unless the lake has it (then it must be the same)."""

    check_deployment_name(name)
    init_lake(loc)
    row = _deployment_row(name, identity)

    def add() -> None:
        (
            _table(loc, "deployments")
            .merge(row, predicate="t.name = s.name", source_alias="s", target_alias="t")
            .when_not_matched_insert_all()
            .execute()
        )

    retrying(add, f"adding deployment {name!r}")
    known = deployments(loc)[name]
    if not known.identity.same_as(identity):
        msg = (
            f"the lake {loc.uri} names {known.identity.describe()} {name!r}, not "
            f"{identity.describe()}; nothing was written. Choose another --deployment name"
        )
        raise WrongDeployment(msg)
    return known


def resolve(loc: Location, identity: Deployment | None, name: str | None) -> LakeDeployment:
    """The lake's deployment for a client: by ``name`` (added if new), else by identity."""

    if name is not None:
        check_deployment_name(name)
        if identity is None:
            known = deployments(loc).get(name)
            if known is None:
                raise UnknownDeployment(f"the lake {loc.uri} holds no deployment {name!r}")
            return known
        return register(loc, name, identity)
    if identity is None:
        msg = "name the deployment (--deployment NAME): this source names none"
        raise UnknownDeployment(msg)
    matches = [d for d in deployments(loc).values() if d.identity.same_as(identity)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        msg = (
            f"the lake {loc.uri} holds no deployment for {identity.describe()}; nothing was "
            "written. Add it by name: pmtk sync --out LAKE --deployment NAME"
        )
        raise WrongDeployment(msg)
    names = ", ".join(sorted(d.name for d in matches))
    raise WrongDeployment(f"several deployments of the lake match: {names}; name one")


# -- pins and leases ---------------------------------------------------------------


@dataclass(slots=True)
class Pin:
    """What a resource of one deployment has committed (see the module's docstring)."""

    deployment: str
    resource: str
    seq: int = 0
    versions: dict[str, int] = field(default_factory=dict)
    files: dict[str, dict[str, str]] = field(default_factory=dict)
    high_water_mark: str | None = None
    next_since: str | None = None
    server_time: str | None = None
    fetched_at: str | None = None
    schema_version: str | None = None
    last_sync: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "versions": self.versions,
                "files": self.files,
                "high_water_mark": self.high_water_mark,
                "next_since": self.next_since,
                "server_time": self.server_time,
                "fetched_at": self.fetched_at,
                "schema_version": self.schema_version,
                "last_sync": self.last_sync,
            },
            sort_keys=True,
        )

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Pin:
        try:
            data = json.loads(row["pin"] or "{}")
            versions = {str(k): int(v) for k, v in dict(data.get("versions") or {}).items()}
            files = {
                str(t): {str(p): str(s) for p, s in dict(f).items()}
                for t, f in dict(data.get("files") or {}).items()
            }
        except (TypeError, ValueError, AttributeError) as exc:
            msg = f"the pin of {row.get('deployment')}/{row.get('resource')} is unreadable: {exc}"
            raise LakeDamaged(msg) from exc
        return cls(
            deployment=row["deployment"],
            resource=row["resource"],
            seq=int(row["seq"] or 0),
            versions=versions,
            files=files,
            high_water_mark=data.get("high_water_mark"),
            next_since=data.get("next_since"),
            server_time=data.get("server_time"),
            fetched_at=data.get("fetched_at"),
            schema_version=data.get("schema_version"),
            last_sync=dict(data.get("last_sync") or {}),
        )


def pins(
    loc: Location, deployment: str | None = None, as_of: int | datetime | None = None
) -> list[Pin]:
    """Every committed pin (of one deployment), as the state table is now or was ``as_of``."""
    if not is_lake(loc):
        return []
    frame = _frame(_table(loc, "state", as_of))
    if deployment is not None:
        frame = frame.filter(pl.col("deployment") == deployment)
    return _pins_of(frame)


def read_pins(loc: Location, deployment: str | None = None) -> list[Pin]:
    """:func:`pins` as the state table is now, for a reader: the table kept open and each
    version's pins decoded once per process (:mod:`toolkit.lake.snapshots`)."""

    if not is_lake(loc):
        return []
    loc.check_local_links("_pmtk", "state")
    every = snapshots.at_latest(
        loc,
        loc.table_uri("_pmtk", "state"),
        lambda: _table(loc, "state"),
        lambda dt: _pins_of(_frame(dt)),
    )
    return [pin for pin in every if deployment is None or pin.deployment == deployment]


def _pins_of(frame: pl.DataFrame) -> list[Pin]:
    return [
        Pin.from_row(row)
        for row in frame.sort("deployment", "resource").iter_rows(named=True)
        if row["seq"]
    ]


def pin_of(loc: Location, deployment: str, resource: str) -> Pin:
    for pin in pins(loc, deployment):
        if pin.resource == resource:
            return pin
    return Pin(deployment, resource)


def _state_row(deployment: str, resource: str, owner: str, expires: int, pin: str) -> pa.Table:
    return pa.table(
        {
            "deployment": [deployment],
            "resource": [resource],
            "seq": [0],
            "lease_owner": [owner],
            "lease_expires_ms": [expires],
            "pin": [pin],
        },
        schema=STATE_SCHEMA,
    )


def _key(deployment: str) -> str:
    check_deployment_name(deployment)  # it is written into the predicate
    return (
        f"t.deployment = s.deployment AND t.resource = s.resource AND t.deployment = '{deployment}'"
    )


def take_lease(loc: Location, deployment: str, resource: str, owner: str, wait: float) -> None:
    """Hold (deployment, resource) for ``owner``, waiting up to ``wait`` s for another writer."""
    deadline = time.monotonic() + wait
    delay = 0.05
    while True:
        now = int(time.time() * 1000)
        row = _state_row(deployment, resource, owner, now + int(LEASE_SECONDS * 1000), "{}")

        def attempt(row: pa.Table = row, now: int = now) -> dict[str, Any]:
            result: dict[str, Any] = (
                _table(loc, "state")
                .merge(row, predicate=_key(deployment), source_alias="s", target_alias="t")
                .when_matched_update(
                    updates={
                        "lease_owner": "s.lease_owner",
                        "lease_expires_ms": "s.lease_expires_ms",
                    },
                    predicate=(
                        "t.lease_owner IS NULL OR t.lease_owner = s.lease_owner "
                        f"OR t.lease_expires_ms < {now}"
                    ),
                )
                .when_not_matched_insert_all()
                .execute()
            )
            return result

        metrics = retrying(attempt, f"taking the lease of {deployment}/{resource}")
        if metrics["num_target_rows_inserted"] + metrics["num_target_rows_updated"] == 1:
            return
        if _take_from_dead(loc, deployment, resource, owner):
            return
        if time.monotonic() >= deadline:
            msg = (
                f"{deployment}/{resource}: another writer is committing to the lake {loc.uri} "
                f"(waited {wait:.0f} s); nothing of this run was committed. Run again later"
            )
            raise LakeBusy(msg)
        time.sleep(delay * (1 + random.random()))
        delay = min(delay * 2, 1.0)


def _holder(loc: Location, deployment: str, resource: str) -> str | None:
    frame = _frame(_table(loc, "state")).filter(
        (pl.col("deployment") == deployment) & (pl.col("resource") == resource)
    )
    return frame["lease_owner"][0] if frame.height else None


def _dead_here(holder: str) -> bool:
    """Whether ``holder`` names a process of this host that no longer runs."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _take_from_dead(loc: Location, deployment: str, resource: str, owner: str) -> bool:
    """Take a lease whose holder was a process of this host that died (killed, crashed).

    Its lease would otherwise block the resource until it expires. The swap names the
    dead holder, so of two writers doing this at once only one succeeds.
    """
    holder = _holder(loc, deployment, resource)
    if holder is None or not _dead_here(holder):
        return False
    row = _state_row(
        deployment, resource, owner, int(time.time() * 1000 + LEASE_SECONDS * 1000), "{}"
    )
    dead = holder.replace("'", "''")

    def attempt() -> dict[str, Any]:
        result: dict[str, Any] = (
            _table(loc, "state")
            .merge(row, predicate=_key(deployment), source_alias="s", target_alias="t")
            .when_matched_update(
                updates={"lease_owner": "s.lease_owner", "lease_expires_ms": "s.lease_expires_ms"},
                predicate=f"t.lease_owner = '{dead}'",
            )
            .execute()
        )
        return result

    metrics = retrying(attempt, f"taking the lease of {deployment}/{resource} from {holder}")
    return bool(metrics["num_target_rows_updated"] == 1)


def release_lease(loc: Location, deployment: str, resource: str, owner: str) -> None:
    """Give the lease back without moving the pin (after a failed commit)."""
    row = _state_row(deployment, resource, owner, 0, "{}")

    def attempt() -> None:
        (
            _table(loc, "state")
            .merge(row, predicate=_key(deployment), source_alias="s", target_alias="t")
            .when_matched_update(
                updates={"lease_owner": "NULL", "lease_expires_ms": "NULL"},
                predicate="t.lease_owner = s.lease_owner",
            )
            .execute()
        )

    retrying(attempt, f"releasing the lease of {deployment}/{resource}")


def move_pin(
    loc: Location, pin: Pin, expected_seq: int, owner: str, *, release: bool = True
) -> None:
    """Commit ``pin`` (its seq one more than ``expected_seq``) and release the lease.

    One ``MERGE``: it changes the row only while ``owner`` still holds the lease and the
    row still has ``expected_seq``; otherwise :class:`LeaseLost` and nothing changes.
    ``release=False`` keeps the lease (a rebind's later steps need it).
    """
    row = _state_row(pin.deployment, pin.resource, owner, 0, pin.to_json())
    row = row.set_column(2, "seq", pa.array([expected_seq + 1], pa.int64()))
    updates = {"seq": "s.seq", "pin": "s.pin"}
    if release:
        updates |= {"lease_owner": "NULL", "lease_expires_ms": "NULL"}

    def attempt() -> dict[str, Any]:
        result: dict[str, Any] = (
            _table(loc, "state")
            .merge(row, predicate=_key(pin.deployment), source_alias="s", target_alias="t")
            .when_matched_update(
                updates=updates,
                predicate=f"t.lease_owner = s.lease_owner AND t.seq = {int(expected_seq)}",
            )
            .execute()
        )
        return result

    metrics = retrying(attempt, f"committing {pin.deployment}/{pin.resource}")
    if metrics["num_target_rows_updated"] != 1:
        msg = (
            f"{pin.deployment}/{pin.resource}: this writer's lease ran out and another writer "
            "committed meanwhile; this run's pin was not moved (its records are in the tables "
            "and the next sync reads them again). Run again"
        )
        raise LeaseLost(msg)


def set_identity(loc: Location, name: str, old: Deployment, new: Deployment) -> None:
    """Bind ``name`` to ``new``, only while it is still bound to ``old`` (compare-and-swap)."""

    check_deployment_name(name)
    row = _deployment_row(name, new)
    was = (
        f"t.base_url = '{_quoted(old.base_url)}' "
        f"AND t.client_id_sha256 = '{_quoted(old.client_id_sha256)}'"
    )

    def swap() -> dict[str, Any]:
        result: dict[str, Any] = (
            _table(loc, "deployments")
            .merge(row, predicate="t.name = s.name", source_alias="s", target_alias="t")
            .when_matched_update_all(predicate=was)
            .execute()
        )
        return result

    metrics = retrying(swap, f"binding {name!r} to {new.describe()}")
    if metrics["num_target_rows_updated"] != 1 and not deployments(loc)[name].identity.same_as(new):
        msg = f"{name!r} was bound to another deployment while it was being rebound; run again"
        raise WrongDeployment(msg)


def _quoted(text: str) -> str:
    return text.replace("'", "''")


def append_history(loc: Location, pin: Pin, kind: str, counts: dict[str, int]) -> None:
    from deltalake import write_deltalake

    row = pa.table(
        {
            "deployment": [pin.deployment],
            "resource": [pin.resource],
            "seq": [pin.seq],
            "committed_at": [pin.fetched_at or now_iso()],
            "kind": [kind],
            "upserted": [counts.get("upserted", 0)],
            "stale": [counts.get("stale", 0)],
            "deleted": [counts.get("deleted", 0)],
            "records_fetched": [counts.get("records_fetched", 0)],
            "versions": [json.dumps(pin.versions, sort_keys=True)],
        },
        schema=HISTORY_SCHEMA,
    )
    retrying(
        lambda: write_deltalake(
            loc.table_uri("_pmtk", "history"),
            row,
            mode="append",
            partition_by=["deployment"],
            storage_options=loc.storage_options,
        ),
        "recording the history",
    )


def history(loc: Location, deployment: str | None = None) -> pl.DataFrame:
    """Every commit of the lake (of one deployment), oldest first."""
    if not is_lake(loc):
        return pl.DataFrame(pl.from_arrow(HISTORY_SCHEMA.empty_table()))
    frame = _frame(_table(loc, "history"))
    if deployment is not None:
        frame = frame.filter(pl.col("deployment") == deployment)
    return frame.sort("committed_at", "deployment", "resource", "seq")
