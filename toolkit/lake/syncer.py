"""``pmtk sync --out LAKE --deployment NAME``: one deployment's resources into a lake.

Each resource is walked (incrementally from its pin's ``_lastUpdated`` mark, or in
full), its pages flattened with the resource's view and validated batch by batch
into a staging folder on the local disk (never in the lake; :mod:`toolkit.lake.stage`
keeps it across an interruption so that the next run resumes the walk), then committed
with :func:`toolkit.lake.commit.commit`. Two runs never touch each other's pages (a
second run of the same resource on one machine stages privately); only the commit is
shared, and it is serialised per (deployment, resource) by the lease.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from toolkit import catalogue, views
from toolkit._threads import daemon_pool
from toolkit.errors import ConfigurationError
from toolkit.lake.commit import PART, Change, commit, lake_tables
from toolkit.lake.location import Location
from toolkit.lake.rebind import rebind as rebind_name
from toolkit.lake.stage import Stage, StageCheckpoint, stage_for
from toolkit.lake.state import Pin, UnknownDeployment, deployments, init_lake, pin_of, resolve
from toolkit.store.identity import deployment_of
from toolkit.store.layout import later, schema_version
from toolkit.store.precedence import one_version_each
from toolkit.store.rawtable import raw_frame, raw_table
from toolkit.store.results import PAGE_SIZE, PREFETCH_PAGES, ErrorsMode, PageSource
from toolkit.store.resume import Prefetch, since_after
from toolkit.store.source import connected, listed_resources

BATCH_PAGES = 20
"""Pages flattened and validated together into one staged part."""


@dataclass(slots=True)
class LakeResourceSync:
    """What a lake sync did for one resource."""

    resource: str
    mode: str = "full"
    status: str = "ok"
    records_fetched: int = 0
    pages: int = 0
    upserted: int = 0
    stale: int = 0
    deleted: int = 0
    requests: int = 0
    elapsed: float = 0.0
    high_water_mark: str | None = None
    error: str | None = None
    resumed_from_page: int | None = None
    """The page a resumed walk started from (``None``: walked from the first page)."""


@dataclass(slots=True)
class LakeSyncSummary:
    """What :func:`sync` did: the lake, the deployment's name and each resource's result."""

    lake: str
    deployment: str
    resources: dict[str, LakeResourceSync] = field(default_factory=dict)

    def __getitem__(self, resource: str) -> LakeResourceSync:
        return self.resources[resource]

    @property
    def requests(self) -> int:
        return sum(r.requests for r in self.resources.values())

    @property
    def ok(self) -> bool:
        return all(r.status == "ok" for r in self.resources.values())


def sync(
    client: PageSource | None = None,
    lake: str | os.PathLike[str] | Location = "pmtk-lake",
    *,
    deployment: str | None = None,
    resources: Sequence[str] | None = None,
    full: bool = False,
    reconcile: bool = False,
    errors: ErrorsMode = "raise",
    storage_options: dict[str, str] | None = None,
    lock_timeout: float = 60.0,
    after_table: Callable[[str], None] | None = None,
    rebind: bool = False,
    after_part: Callable[[int], None] | None = None,
) -> LakeSyncSummary:
    """Sync one deployment's resources into a lake (see the module's docstring).

    A run stopped before a resource's commit leaves its staged pages on the local
    disk (:mod:`toolkit.lake.stage`); the next run of the same walk resumes it.

    Parameters
    ----------
    client
        A :class:`toolkit.Client` (default :func:`toolkit.connect`: the configured
        deployment, else the embedded mock).
    lake
        A local folder or an ``s3://bucket/prefix`` URL (with ``storage_options`` or
        the ``AWS_*`` environment variables).
    deployment
        The deployment's short name in the lake. A name the lake does not know is
        added for this client's deployment; a known name must be this deployment. With
        no name, the lake's one deployment matching the client is used, and a client
        the lake does not know is refused (``WrongDeployment``): nothing mixes by accident.
    resources
        Resource types (default every listed one).
    full
        Walk each whole list instead of what changed since the last sync; records the
        deployment no longer lists are then deleted.
    reconcile
        After an incremental walk, also walk the whole list and delete what it lacks.
    lock_timeout
        Seconds a commit waits for another writer of the same deployment and resource.
    rebind
        Give ``deployment``, a name the lake holds for another deployment, to this
        client's: every row and file of the old one is removed first
        (:func:`toolkit.lake.rebind`), then this sync reads everything in full.
    after_table, after_part
        Tests: called with each table's name once its ``MERGE`` committed, and with
        each staged part's number once it and its checkpoint are on disk.
    """

    loc = Location.of(lake, storage_options)
    wanted = listed_resources(resources)
    if rebind and deployment is None:
        msg = "a rebind names the deployment to give to this client (deployment=NAME)"
        raise ConfigurationError(msg)
    with connected(client) as source:
        init_lake(loc)
        if rebind and deployment in deployments(loc):
            every = list(catalogue.LISTED_RESOURCES)
            identity = deployment_of(source)
            rebind_name(loc, deployment, identity, every, lock_timeout=lock_timeout)
        known = resolve(loc, deployment_of(source), deployment)
        summary = LakeSyncSummary(loc.uri, known.name)
        run = _Run(
            loc, known.name, source, full, reconcile, errors, lock_timeout, after_table, after_part
        )
        _walk_and_commit(run, wanted, summary)
    return summary


def _walk_and_commit(run: _Run, wanted: Sequence[str], summary: LakeSyncSummary) -> None:
    """Walk each resource in turn; commit each on a thread while the next one is walked.

    A walk waits on the deployment's request budget and a commit on the lake, so a
    commit beside the next walk costs no wall time (about 0.3 s a resource: a lease,
    a ``MERGE`` per table, a pin and a history row). At most one commit runs at a time
    (one walk's staged parts and one commit in memory). A commit that fails stops the
    sync before the next commit starts; the resource it was walking keeps its staged
    pages, as a run stopped at that point would. Whatever happens, the commit under way
    ends before this returns or raises.
    """
    from concurrent.futures import Future

    # a daemon worker (see daemon_pool): a Ctrl-C can never leave it holding the exit
    with daemon_pool(1, "pmtk-lake-commit") as pool:
        running: Future[None] | None = None
        try:
            for rt in wanted:
                summary.resources[rt] = LakeResourceSync(rt)
                walked = _walk_one(run, summary.resources[rt])
                try:
                    if running is not None:
                        running.result()  # the commit before this one, and its exception
                except BaseException as exc:
                    walked.keep(exc)
                    raise
                running = pool.submit(_commit_walked, run, walked)
            if running is not None:
                running.result()
        except BaseException as exc:
            # a walk that failed while a commit ran: the commit ends first, and its own
            # failure is named too
            failed = running.exception() if running is not None else None
            if failed is not None and failed is not exc:
                exc.add_note(f"the commit before it failed as well: {failed!r}")
            raise


@dataclass(slots=True)
class _Run:
    """The options of one :func:`sync`, shared by its resources."""

    loc: Location
    deployment: str
    source: PageSource
    full: bool
    reconcile: bool
    errors: ErrorsMode
    lock_timeout: float
    after_table: Callable[[str], None] | None
    after_part: Callable[[int], None] | None = None


@dataclass(slots=True)
class _Walked:
    """A resource walked and staged, its commit still to come (:func:`_walk_and_commit`)."""

    result: LakeResourceSync
    staging: contextlib.ExitStack
    """Holds the resource's staging folder (locked) until its commit ends."""
    change: Change
    pin: Pin
    started: float

    def keep(self, exc: BaseException) -> None:
        """No commit: the staged pages stay for the next run (which resumes the walk)."""
        self.staging.__exit__(type(exc), exc, exc.__traceback__)


def _walk_one(run: _Run, result: LakeResourceSync) -> _Walked:
    """Walk one resource (from its pin's mark, or in full) into its staging folder.

    The pages are staged in the resource's staging folder (:mod:`toolkit.lake.stage`),
    so a run stopped before its commit is resumed by the next one.
    """
    rt = result.resource
    started = time.monotonic()
    sent = run.source.requests_sent
    previous = pin_of(run.loc, run.deployment, rt)
    incremental = (
        not run.full
        and previous.seq > 0
        and previous.schema_version == schema_version(rt)
        and previous.high_water_mark is not None
    )
    result.mode = "incremental" if incremental else "full"
    since = (previous.next_since or f"ge{previous.high_water_mark}") if incremental else None
    wanted = StageCheckpoint(
        run.loc.uri, run.deployment, rt, schema_version(rt), result.mode, since
    )
    staging = contextlib.ExitStack()
    stage = staging.enter_context(stage_for(wanted))
    try:
        staged = _walk(stage, run.source, rt, run.errors, result, run.after_part)
        present = (
            _present(run.source, rt, run.reconcile)
            if incremental and (rt == "Patient" or run.reconcile)
            else None
            if incremental
            else staged.ids(rt)
        )
    except BaseException as exc:
        staging.__exit__(type(exc), exc, exc.__traceback__)
        raise
    result.requests = run.source.requests_sent - sent  # a commit sends none
    change = Change(
        staged.tables(rt),
        present=present,
        present_since=staged.server_time,
        walked_from=previous,
    )
    pin = _next_pin(run.deployment, previous, staged, result)
    return _Walked(result, staging, change, pin, started)


def _commit_walked(run: _Run, walked: _Walked) -> None:
    """Commit a walked resource; its staged pages are removed once the commit is done."""
    result = walked.result
    with walked.staging:  # an exception keeps the staged pages (stage_for)
        done = commit(
            run.loc,
            run.deployment,
            result.resource,
            walked.change,
            pin=walked.pin,
            kind=f"sync-{result.mode}",
            lock_timeout=run.lock_timeout,
            counts={"records_fetched": result.records_fetched},
            after_table=run.after_table,
        )
    result.upserted, result.stale = done.upserted_ids.len(), done.stale_ids.len()
    result.deleted = done.deleted_ids.len()
    result.high_water_mark = done.pin.high_water_mark if done.pin else None
    result.elapsed = time.monotonic() - walked.started


def _next_pin(deployment: str, previous: Pin, staged: _Staged, result: LakeResourceSync) -> Pin:
    """The marks a sync's commit leaves: the high-water mark and the next search's bound."""
    mark = staged.max_last_updated
    hwm = later(previous.high_water_mark, mark) if result.mode == "incremental" else mark
    return Pin(
        deployment,
        result.resource,
        seq=previous.seq,
        high_water_mark=hwm,
        next_since=since_after(hwm, staged.server_time),
        server_time=staged.server_time,
        last_sync={
            "mode": result.mode,
            "records_fetched": result.records_fetched,
            "pages": result.pages,
        },
    )


@dataclass(slots=True)
class _Staged:
    folder: Path
    parts: int = 0
    max_last_updated: str | None = None
    server_time: str | None = None

    def ids(self, rt: str) -> pl.Series:
        """Every id the stage holds (a resumed run's earlier parts too): a full walk's
        list of what the deployment has, as one Arrow column (a million ids as Python
        strings in a set would cost some 100 MB)."""
        files = sorted((self.folder / raw_table(rt)).glob("part-*.parquet"))
        if not files:
            return pl.Series("id", [], dtype=pl.String)
        return pl.scan_parquet(files).select(pl.col("id").cast(pl.String)).collect()["id"]

    def tables(self, rt: str) -> dict[str, list[pl.LazyFrame]]:
        """Every table's staged parts, one scan a part: the commit writes them one after
        another (:func:`toolkit.lake.commit.stream`), holding one part at a time."""
        out = {}
        for name, schema in lake_tables(rt).items():
            files = sorted((self.folder / name).glob("*.parquet"))
            full_schema = pl.Schema({**schema, PART: pl.Int64()})
            out[name] = [
                pl.scan_parquet(f).select(list(full_schema)).cast(full_schema) for f in files
            ] or [pl.LazyFrame(schema=full_schema)]
        return out


def _walk(
    stage: Stage,
    source: PageSource,
    rt: str,
    errors: ErrorsMode,
    result: LakeResourceSync,
    after_part: Callable[[int], None] | None = None,
) -> _Staged:
    """Walk the list from the stage's resume point, staging a part every few pages."""
    cp = stage.checkpoint
    first = stage.resume_point()
    staged = _Staged(stage.folder, parts=cp.parts, server_time=cp.server_time)
    staged.max_last_updated = cp.max_last_updated
    if stage.resumed:
        result.resumed_from_page = first
    result.records_fetched = cp.records
    params: dict[str, Any] = {"_count": PAGE_SIZE}
    if cp.since is not None:
        params[catalogue.LAST_UPDATED] = cp.since
    if first > 1:
        params["page"] = first
    walk = source.walk(rt, params=params, skipped=(first - 1) * PAGE_SIZE, progress=False)
    batch: list[Any] = []
    pages = first - 1
    # pages are fetched on a thread while the ones before are flattened and staged here
    with Prefetch(iter(walk), PREFETCH_PAGES) as prefetch:
        for fetched in prefetch.batches(PREFETCH_PAGES):
            for page in fetched:
                if staged.server_time is None:
                    staged.server_time = walk.summary.started_at
                batch.append(page)
                result.pages += 1
                if len(batch) >= BATCH_PAGES:
                    pages += len(batch)
                    _stage_part(stage, staged, rt, batch, errors, result, pages)
                    if after_part is not None:
                        after_part(staged.parts)
                    batch = []
    if batch:
        _stage_part(stage, staged, rt, batch, errors, result, pages + len(batch))
    if staged.server_time is None:
        staged.server_time = walk.summary.started_at
    return staged


def _stage_part(
    stage: Stage,
    staged: _Staged,
    rt: str,
    pages: list[Any],
    errors: ErrorsMode,
    result: LakeResourceSync,
    pages_done: int,
) -> None:
    """Stage one part, then the checkpoint that counts it (in that order)."""
    _stage(staged, rt, pages, errors, result)
    cp = stage.checkpoint
    cp.pages_done, cp.parts, cp.records = pages_done, staged.parts, result.records_fetched
    cp.server_time, cp.max_last_updated = staged.server_time, staged.max_last_updated
    stage.save()


def _stage(
    staged: _Staged, rt: str, pages: list[Any], errors: ErrorsMode, result: LakeResourceSync
) -> None:
    from toolkit import schemas

    records = [r for page in pages for r in page.records]
    result.records_fetched += len(records)
    if not records:  # an empty list (nothing changed): nothing to flatten, check or stage
        return
    for record in records:
        stamp = (record.get("meta") or {}).get("lastUpdated")
        if isinstance(stamp, str):
            staged.max_last_updated = later(staged.max_last_updated, stamp)
    # one version of a record per part (a record changed during the walk is read twice);
    # the commit picks among parts
    raws, kept = one_version_each([page.raw for page in pages], records)
    tables = views.flatten_tables(rt, raws)
    for name, frame in tables.items():
        schemas.validate(frame, rt, table=None if name == rt else name, errors=errors)
    tables[raw_table(rt)] = raw_frame(rt, [dict(r) for r in kept])
    staged.parts += 1
    for name, frame in tables.items():
        target = staged.folder / name
        target.mkdir(parents=True, exist_ok=True)
        frame.with_columns(pl.lit(staged.parts, pl.Int64).alias(PART)).write_parquet(
            target / f"part-{staged.parts:06d}.parquet"
        )


def _present(source: PageSource, rt: str, reconcile: bool) -> set[str] | None:
    """Every id the deployment holds: ``$export-ids`` where it has it, else a whole walk."""

    present = source.export_ids(rt) if rt in catalogue.EXPORT_IDS else None
    if present is None and reconcile:
        present = set()
        for page in source.walk(rt, params={"_count": PAGE_SIZE}, progress=False):
            present.update(str(r.get("id")) for r in page.records)
    return present


def apply_changes(
    lake: str | os.PathLike[str] | Location,
    deployment: str,
    resource_type: str,
    *,
    upserts: Sequence[Mapping[str, Any]] = (),
    deletes: Sequence[str] = (),
    errors: ErrorsMode = "raise",
    lock_timeout: float = 60.0,
    storage_options: dict[str, str] | None = None,
) -> Any:
    """Write single records into one deployment of a lake (a webhook's changes).

    The records are flattened with the resource's view and validated before anything
    is taken or written (a bad record raises and changes nothing); then one commit as
    a sync's, with the same precedence (a version older than the stored one is
    ``stale`` and not written). The high-water mark is left alone: an event does not
    prove that nothing else changed. ``deletes`` must be ids the API itself said are
    gone (a 404 or 410 OperationOutcome).
    """
    loc = Location.of(lake, storage_options)
    if deployment not in deployments(loc):
        raise UnknownDeployment(f"the lake {loc.uri} holds no deployment {deployment!r}")
    tables = _validated_tables(resource_type, upserts, errors)
    previous = pin_of(loc, deployment, resource_type)
    pin = Pin(
        deployment,
        resource_type,
        seq=previous.seq,
        high_water_mark=previous.high_water_mark,
        next_since=previous.next_since,
        server_time=previous.server_time,
        last_sync=previous.last_sync,
    )
    return commit(
        loc,
        deployment,
        resource_type,
        Change(tables, deletes={d for d in deletes if isinstance(d, str) and d}),
        pin=pin,
        kind="change",
        lock_timeout=lock_timeout,
    )


def _validated_tables(
    resource_type: str, upserts: Sequence[Mapping[str, Any]], errors: ErrorsMode
) -> dict[str, pl.DataFrame]:
    """The records flattened into every table of a lake and validated (before any write)."""
    from toolkit import schemas

    records = [dict(r) for r in upserts if r.get("resourceType") == resource_type]
    page = orjson.dumps(
        {"resourceType": "Bundle", "type": "searchset", "entry": [{"resource": r} for r in records]}
    )
    tables = views.flatten_tables(resource_type, [page])
    for name, frame in tables.items():
        schemas.validate(
            frame, resource_type, table=None if name == resource_type else name, errors=errors
        )
    tables[raw_table(resource_type)] = raw_frame(resource_type, records)
    return {
        name: tables.get(name, pl.DataFrame(schema=schema))
        .select(list(schema))
        .with_columns(pl.lit(1, pl.Int64).alias(PART))
        for name, schema in lake_tables(resource_type).items()
    }
