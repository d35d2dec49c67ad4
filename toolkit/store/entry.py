"""The entry points: :func:`sync` over every resource, and :func:`load` of a stored table."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from toolkit import catalogue
from toolkit.errors import MethodNotAllowed, NotFound, PmtkError
from toolkit.store.identity import (
    Deployment,
    WrongDeployment,
    check_deployment,
    default_store,
    deployment_of,
)
from toolkit.store.layout import (
    _bind,
    _claim,
    _init_manifest,
    _linked_message,
    _locked,
    _manifest_path,
    _scoped_to_resource,
    _snake,
    _update_manifest,
    declared_schemas,
    read_manifest,
)
from toolkit.store.merge import drop_missing
from toolkit.store.progress import SyncProgress
from toolkit.store.results import (
    NOT_SERVED,
    PAGE_SIZE,
    ErrorsMode,
    FileProblem,
    PageSource,
    ProgressCallback,
    ResourceSync,
    StoreDamaged,
    StoreError,
    StoreLinked,
    SyncFailed,
    SyncSummary,
    _repair_command,
    one_line,
)
from toolkit.store.syncer import _check_table, _ResourceSyncer


def sync(
    client: PageSource | None = None,
    out: str | os.PathLike[str] | None = None,
    resources: Sequence[str] | None = None,
    full: bool = False,
    progress: bool | ProgressCallback | SyncProgress | None = None,
    *,
    errors: ErrorsMode = "raise",
    reconcile: bool = False,
    rebind: bool = False,
) -> SyncSummary:
    """Bring the Parquet store at ``out`` up to date with the deployment.

    Parameters
    ----------
    client
        A :class:`PageSource`, normally a :class:`toolkit.Client`. ``None`` uses
        :func:`toolkit.connect` (``PM_*`` settings, or the embedded mock).
    out
        The store directory: missing, empty, or a pmtk store of the client's
        deployment. A stored file that fails its checksum makes that resource
        sync in full (listed in ``ResourceSync.repaired``). Default
        ``pmtk-store``, or ``pmtk-store-mock`` for the embedded mock.
    resources
        Resource types to sync; default every listed resource
        (:data:`toolkit.catalogue.LISTED_RESOURCES`).
    full
        Re-fetch everything instead of only what changed since the last sync.
    progress
        ``None`` shows a progress bar when stderr is a terminal, ``True``
        always, ``False`` never. The bar says when the client waits for the
        rate limit or retries a request. A :class:`SyncProgress` is used as
        given (``SyncProgress("lines")`` writes those notices as lines). A
        callable is instead called with a :class:`PageProgress` after each
        page is staged (raising from it interrupts the sync; the next run
        resumes).
    errors
        Validation mode passed to :func:`toolkit.schemas.validate`: ``"raise"``
        stores nothing of a resource that fails, ``"warn"`` stores the data anyway.
    reconcile
        After an incremental sync of a resource, also walk its whole list and
        drop the stored records the deployment no longer has (an incremental
        sync by ``_lastUpdated`` never sees a deletion). It costs one list
        request per 100 records of the resource. Patient needs no walk: every
        incremental sync asks ``$export-ids`` for its ids (one request) and
        drops deleted patients, with or without ``reconcile``.
    rebind
        Make a store of another deployment (or of an unrecorded one) this
        client's: its data is discarded and every resource synced in full.
        Without it such a store is refused (:class:`WrongDeployment`).

    Returns
    -------
    SyncSummary
        Rows, pages and time per resource; ``summary.table()`` renders it.

    Notes
    -----
    A failure that concerns one resource -- its data failed validation, its
    page walk was incomplete, or the API answered an error for its list --
    does not stop the others: they are synced and committed, and
    :class:`SyncFailed` is raised at the end, carrying the whole summary. A
    failure that would hit every resource in turn stops the run at once and
    is raised as it is (an unreachable deployment, a refused token, a rate
    limit that outlasted every wait, a local write failure, Ctrl-C).

    Raises
    ------
    NotAStore
        When ``out`` exists, is not empty and is not a pmtk store (nothing is written).
    ManifestDamaged
        When the store's ``manifest.json`` is unreadable (nothing is written).
    WrongDeployment
        When the store records another deployment than the client's, or holds
        data and records none (nothing is written, nothing requested).
    StoreWriteError
        When the disk is full or the folder read-only or forbidden; the data
        committed before is unchanged and the next run resumes.
    StoreError
        When another sync holds the store's lock.
    SyncFailed
        At the end, when one or more resources failed on their own (a frame
        failed its schema with ``errors="raise"``, an incomplete walk, an API
        error for that list) while the others were synced; ``.summary`` and
        ``.errors`` (the original exceptions, e.g.
        :class:`~toolkit.errors.DataValidationError`) say which and why.
    toolkit.errors.TransportError, toolkit.errors.AuthError, toolkit.errors.RateLimited
        When the deployment cannot be reached, refuses the token, or stays
        rate limited; the staged pages are kept and the next run resumes.

    Examples
    --------
    >>> from toolkit.mock import serve
    >>> from toolkit import Client
    >>> import tempfile
    >>> with serve(scale="small") as dep, Client(
    ...     dep.base_url, dep.client_id, dep.client_secret, user_agent="Docs (docs@example.org)"
    ... ) as client, tempfile.TemporaryDirectory() as out:
    ...     summary = sync(client, out, resources=["Referral"], progress=False)
    ...     load("Referral", out).height == summary["Referral"].rows["Referral"]
    True
    """
    wanted = _listed(resources)
    if out is None:
        out = default_store(client)
    root = Path(out)
    _claim(root)  # before connecting: refusing costs nothing
    owned: Any = None
    if client is None:
        import toolkit

        owned = toolkit.connect()
        client = owned
    current = deployment_of(client)
    try:
        _check_bound(root, current, rebind=rebind)  # before the lock: a refusal touches nothing
    except BaseException:
        if owned is not None:
            owned.close()
        raise
    started = time.monotonic()
    summary = SyncSummary(out=root)
    display, callback = _display_for(progress)
    failures: dict[str, BaseException] = {}
    try:
        _claim(root)  # before anything is written: a user's folder is never touched
        with (
            _locked(root),
            display,
            display.attach(client),
        ):
            _claim(root)  # again under the lock: another process may have written meanwhile
            _init_manifest(root)
            _bind(root, current, rebind=rebind)
            for rt in wanted:
                syncer = _ResourceSyncer(
                    root=root,
                    resource_type=rt,
                    client=client,
                    full=full,
                    errors=errors,
                    on_page=callback or display,
                )
                failure = _sync_one(syncer, display, summary, optional=resources is None)
                if failure is None and summary.resources[-1].status == NOT_SERVED:
                    continue
                if failure is None:
                    failure = _drop_deleted(root, client, summary.resources[-1], reconcile)
                if failure is not None:
                    failures[rt] = failure
    finally:
        if owned is not None:
            close = getattr(owned, "close", None)
            if close is not None:
                close()
    summary.elapsed = time.monotonic() - started
    if failures:
        only = next(iter(failures.values())) if len(failures) == 1 else None
        raise SyncFailed(summary, failures) from only
    return summary


def _check_bound(root: Path, current: Deployment | None, *, rebind: bool) -> None:
    """Refuse a store of another deployment before anything is locked or written."""
    if current is None or not _manifest_path(root).is_file():
        return
    check_deployment(root, read_manifest(root), current, rebind=rebind)


def _drop_deleted(
    root: Path, client: PageSource, result: ResourceSync, reconcile: bool
) -> PmtkError | None:
    """Drop the records the deployment no longer has, after an incremental sync.

    The ids come from ``$export-ids`` where the type has it (one request), else,
    with ``reconcile``, from a walk of the whole list. A failure here is the
    resource's failure (its data stays synced); nothing is dropped then.
    """
    if result.mode != "incremental":
        return None  # a full sync stored exactly what the deployment has
    rt = result.resource
    sent = client.requests_sent
    try:
        present = client.export_ids(rt) if rt in catalogue.EXPORT_IDS else None
        if present is None and reconcile:
            present = set()
            for page in client.walk(rt, params={"_count": PAGE_SIZE}, progress=False):
                present.update(str(r.get("id")) for r in page.records)
    except PmtkError as exc:
        result.error = f"finding deleted records: {one_line(exc)}"
        return exc
    finally:
        result.requests += client.requests_sent - sent
    if present is not None:
        result.deleted = len(drop_missing(root, rt, present))
    return None


def _listed(resources: Sequence[str] | None) -> list[str]:
    """The resources to sync, in order; a type without a list endpoint is refused."""
    wanted = list(resources) if resources else list(catalogue.LISTED_RESOURCES)
    unknown = [r for r in wanted if r not in catalogue.LISTED_RESOURCES]
    if unknown:
        from toolkit.errors import ConfigurationError

        known = ", ".join(catalogue.LISTED_RESOURCES)
        msg = f"cannot sync {', '.join(unknown)}: not a listed resource (choose from {known})"
        raise ConfigurationError(msg)
    return wanted


def _display_for(progress: Any) -> tuple[SyncProgress, ProgressCallback | None]:
    """The progress display (and the user's callback, if ``progress`` is one)."""
    if isinstance(progress, SyncProgress):
        return progress, None
    if callable(progress):
        return SyncProgress("off"), progress
    show = sys.stderr.isatty() if progress is None else progress is True
    return SyncProgress("bars" if show else "off"), None


def _sync_one(
    syncer: _ResourceSyncer, display: SyncProgress, summary: SyncSummary, *, optional: bool
) -> BaseException | None:
    """Sync one resource; its own failure is returned (and summarised), others raise.

    With ``optional`` (the default set of types, not a list the user named), a type
    whose list the spec does not have and that the deployment does not serve (404 or
    405 on its first page) is ``not served``: summarised, its stored data kept as it
    was, and not a failure.
    """
    display.start(syncer.rt)
    began = time.monotonic()
    try:
        result = syncer.run()
    except (Exception, KeyboardInterrupt) as exc:
        failure = _failure(syncer, exc, time.monotonic() - began)
        if optional and _not_served(syncer, exc):
            # The manifest keeps what it said before: a type never stored stays absent.
            _update_manifest(syncer.root, syncer.rt, syncer.entry_before_failure)
            failure.status = NOT_SERVED
            display.done(failure)
            summary.resources.append(failure)
            return None
        display.failed(failure)
        if isinstance(exc, KeyboardInterrupt) or not _scoped_to_resource(exc):
            raise
        summary.resources.append(failure)
        return exc
    display.done(result)
    summary.resources.append(result)
    return None


def _not_served(syncer: _ResourceSyncer, exc: BaseException) -> bool:
    """Whether ``exc`` says the deployment lacks the list of a type outside the spec."""
    if not isinstance(exc, NotFound | MethodNotAllowed) or syncer.staged_pages:
        return False
    return catalogue.endpoint_source(syncer.rt, "list") != "spec"


def _failure(syncer: _ResourceSyncer, exc: BaseException, elapsed: float) -> ResourceSync:
    """The :class:`ResourceSync` of a resource whose run raised ``exc``."""
    cp = syncer.cp
    sent = syncer.client.requests_sent
    before = syncer.sent_before
    return ResourceSync(
        resource=syncer.rt,
        mode=syncer.mode,
        status="failed",
        fetched=cp.records if cp is not None else 0,
        pages=cp.pages_done if cp is not None else 0,
        requests=sent - before if before is not None else 0,
        elapsed=elapsed,
        error="interrupted" if isinstance(exc, KeyboardInterrupt) else one_line(exc),
        staged_pages=syncer.staged_pages,
    )


def load(
    resource_type: str,
    store: str | os.PathLike[str] | None = None,
    *,
    table: str | None = None,
    lazy: bool = False,
    verify: bool = True,
    deployment: Any = None,
) -> pl.DataFrame | pl.LazyFrame:
    """Read a stored table back with the dtypes its view declares.

    Parameters
    ----------
    resource_type
        The resource, e.g. ``"Appointment"``.
    store
        The store directory written by :func:`sync`; default ``pmtk-store`` when
        a deployment is configured (``PM_BASE_URL``), else ``pmtk-store-mock``.
    table
        A child table such as ``"appointment_participant"`` (or just
        ``"participant"``); default the resource's main table.
    lazy
        Return a :class:`polars.LazyFrame` over the file instead of reading it.
    verify
        Compare the file's sha256 with the one the manifest recorded before
        reading it (a full read of the file; about 2 ms per MB, see
        ``docs/store.md``). ``False`` skips the check.
    deployment
        The deployment the data must come from: a :class:`toolkit.Client` (or a
        :class:`Deployment`). A store that records another one, or none, is
        refused (:class:`WrongDeployment`). ``None`` reads whatever the store holds.

    Returns
    -------
    polars.DataFrame or polars.LazyFrame

    Raises
    ------
    StoreDamaged
        When the file is missing or fails its checksum (or, written by a pmtk
        before store format 2, has none); the message names the file and the
        ``pmtk sync --full --resource ...`` command that rebuilds it.
    WrongDeployment
        When ``deployment`` is given and the store was made from another one.
    StoreLinked
        When the manifest, the table's folder or its file is a symbolic link.
    StoreError
        When the store, the resource or the table is missing, the file is
        unreadable, or was written with another schema than the current view.
    """
    root = Path(store if store is not None else default_store())
    if deployment is not None:
        current = deployment_of(deployment)
        if current is not None and check_deployment(root, read_manifest(root), current) != "keep":
            # no deployment recorded, but nothing another deployment's either: no sync
            # of this one has run, so nothing vouches for the data
            msg = (
                f"the store at {root} is not bound to {current.describe()} yet (no sync "
                f"of it has run); run `pmtk sync --out {root}` first"
            )
            raise WrongDeployment(msg)
    name, info = _stored_table(root, resource_type, table)
    path = root / str(info.get("path"))
    for hop in (_manifest_path(root), path.parent, path):
        if hop.is_symlink():  # the data would come from outside the store
            raise StoreLinked(_linked_message(root, hop))
    if not path.is_file():
        missing = FileProblem(resource_type, name, str(info.get("path")), "missing")
        raise StoreDamaged(root, [missing])
    if verify:
        problem = _check_table(root, resource_type, name, info)
        if problem is not None:
            raise StoreDamaged(root, [problem])
    declared = declared_schemas(resource_type).get(name)
    # A damaged file can make Polars panic (a BaseException) rather than raise.
    unreadable = (pl.exceptions.PolarsError, pl.exceptions.PanicException, OSError)
    try:
        frame = pl.scan_parquet(path)
        stored_schema = frame.collect_schema()
    except unreadable as exc:
        msg = (
            f"{path} is not a readable Parquet file ({exc}); "
            f"run `{_repair_command(root, resource_type)}`"
        )
        raise StoreError(msg) from exc
    if declared is not None:
        if list(stored_schema.names()) != list(declared.names()):
            msg = (
                f"{path} was written for another version of the {resource_type} view; "
                f"run `pmtk sync --full --resource {resource_type}`"
            )
            raise StoreError(msg)
        frame = frame.cast(declared)
    if lazy:
        return frame
    try:
        return frame.collect()
    except unreadable as exc:
        msg = (
            f"{path} is not a readable Parquet file ({exc}); "
            f"run `{_repair_command(root, resource_type)}`"
        )
        raise StoreError(msg) from exc


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
    if name not in tables and f"{_snake(resource_type)}_{name}" in tables:
        name = f"{_snake(resource_type)}_{name}"
    if name not in tables:
        msg = f"{resource_type} has no table {table!r} in {root}; tables: {', '.join(tables)}"
        raise StoreError(msg)
    return name, tables[name] if isinstance(tables[name], dict) else {}
