"""The entry points: :func:`sync` over every resource, and :func:`load` of a stored table.

How :func:`sync` fails
----------------------
A failure that concerns one resource -- its data failed validation, its
page walk was incomplete, or the API answered an error for its list --
does not stop the others: they are synced and committed, and
:class:`SyncFailed` is raised at the end, carrying the whole summary
(``.summary``; ``.errors`` holds the original exceptions, e.g.
:class:`~toolkit.errors.DataValidationError`). A failure that would hit
every resource in turn stops the run at once and is raised as it is:

- :class:`NotAStore` when ``out`` exists, is not empty and is not a pmtk
  store, :class:`ManifestDamaged` when its ``manifest.json`` is unreadable,
  :class:`WrongDeployment` when the store records another deployment than
  the client's, or holds data and records none (nothing is written or
  requested in these three cases);
- :class:`StoreWriteError` when the disk is full or the folder read-only or
  forbidden (the data committed before is unchanged and the next run
  resumes); :class:`StoreError` when another sync holds the store's lock;
- :class:`~toolkit.errors.TransportError`, :class:`~toolkit.errors.AuthError`,
  :class:`~toolkit.errors.RateLimited` when the deployment cannot be reached,
  refuses the token or stays rate limited (the staged pages are kept and the
  next run resumes); ``KeyboardInterrupt``.

A stored file that fails its checksum makes that resource sync in full
(listed in ``ResourceSync.repaired``). With ``progress=None`` a bar shows
when stderr is a terminal; it says when the client waits for the rate limit
or retries a request (``SyncProgress("lines")`` writes those notices as
lines). A ``progress`` callable is called with a :class:`PageProgress` after
each staged page; raising from it interrupts the sync, and the next run
resumes. ``reconcile`` costs one list request per 100 records of the
resource; Patient needs no walk: every incremental sync asks
``$export-ids`` for its ids (one request) and drops deleted patients.

>>> from toolkit.mock import serve
>>> from toolkit import Client
>>> import tempfile
>>> with serve(scale="small") as dep, Client(
...     dep.base_url, dep.client_id, dep.client_secret, user_agent="Docs (docs@example.org)"
... ) as client, tempfile.TemporaryDirectory() as out:
...     summary = sync(client, out, resources=["Referral"], progress=False)
...     load("Referral", out).height == summary["Referral"].rows["Referral"]
True

How :func:`load` reads
----------------------
With ``verify=True`` (the default) the file's sha256 is compared with the
one the manifest recorded before reading it (a full read of the file; about
2 ms per MB, see ``docs/store.md``). It raises :class:`StoreDamaged` when the
file is missing or fails its checksum (or, written by a pmtk before store
format 2, has none), naming the file and the ``pmtk sync --full --resource
...`` command that rebuilds it; :class:`WrongDeployment` when ``deployment``
is given and the store was made from another one (or no sync of it has run);
:class:`StoreLinked` when the manifest, the table's folder or its file is a
symbolic link; :class:`StoreError` when the store, the resource or the table
is missing, the file is unreadable, or was written with another schema than
the current view.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from toolkit import catalogue
from toolkit.errors import MethodNotAllowed, NotFound, PmtkError
from toolkit.store.identity import (
    Deployment,
    bind,
    check_deployment,
    default_store,
    deployment_of,
)
from toolkit.store.layout import (
    claim,
    init_manifest,
    locked,
    manifest_path,
    read_manifest,
    scoped_to_resource,
    update_manifest,
)
from toolkit.store.merge import drop_missing
from toolkit.store.progress import SyncProgress
from toolkit.store.read import read_table
from toolkit.store.results import (
    NOT_SERVED,
    PAGE_SIZE,
    ErrorsMode,
    PageSource,
    ProgressCallback,
    ResourceSync,
    SyncFailed,
    SyncSummary,
    one_line,
)
from toolkit.store.source import connected, listed_resources
from toolkit.store.syncer import ResourceSyncer


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

    What fails how (one resource, or the whole run): see this module's docstring.

    Parameters
    ----------
    client
        A :class:`PageSource` (a :class:`toolkit.Client`); ``None``: :func:`toolkit.connect`.
    out
        A missing or empty folder, or a pmtk store of this deployment (:func:`default_store`).
    resources
        Resource types to sync; default :data:`toolkit.catalogue.LISTED_RESOURCES`.
    full
        Re-fetch everything instead of only what changed since the last sync.
    progress
        ``None``: a bar when stderr is a terminal; ``True``/``False``; a
        :class:`SyncProgress`; or a callable given each :class:`PageProgress`.
    errors
        ``"raise"`` stores nothing of a resource that fails validation; ``"warn"`` stores it.
    reconcile
        After an incremental sync, also walk the list to drop records the deployment deleted.
    rebind
        Make a store of another (or no recorded) deployment this client's, synced in full.

    Returns
    -------
    SyncSummary
        Rows, pages and time per resource (``summary.table()`` renders it).
    """
    wanted = listed_resources(resources)
    root = Path(out if out is not None else default_store(client))
    claim(root)  # before connecting: refusing costs nothing
    run = _Run(root, full=full, errors=errors, reconcile=reconcile, optional=resources is None)
    with connected(client) as source:
        current = deployment_of(source)
        _check_bound(root, current, rebind=rebind)  # before the lock: a refusal touches nothing
        summary = run.all(source, wanted, current, progress, rebind=rebind)
    return run.checked(summary)


@dataclass
class _Run:
    """The options of one :func:`sync` and the resources that failed on their own."""

    root: Path
    full: bool
    errors: ErrorsMode
    reconcile: bool
    optional: bool
    """Whether the resources are the default set (a type the deployment lacks is skipped)."""
    failures: dict[str, BaseException] = field(default_factory=dict)

    def all(
        self,
        client: PageSource,
        wanted: list[str],
        current: Deployment | None,
        progress: bool | ProgressCallback | SyncProgress | None,
        *,
        rebind: bool,
    ) -> SyncSummary:
        """Sync every wanted resource under the store's lock, one after the other."""
        root = self.root
        started = time.monotonic()
        summary = SyncSummary(out=root)
        display, callback = _display_for(progress)
        claim(root)  # before anything is written: a user's folder is never touched
        with locked(root), display, display.attach(client):
            claim(root)  # again under the lock: another process may have written meanwhile
            init_manifest(root)
            bind(root, current, rebind=rebind)
            for rt in wanted:
                self.one(client, rt, display, callback or display, summary)
        summary.elapsed = time.monotonic() - started
        return summary

    def one(
        self,
        client: PageSource,
        rt: str,
        display: SyncProgress,
        on_page: ProgressCallback | SyncProgress,
        summary: SyncSummary,
    ) -> None:
        """Sync one resource, then drop what the deployment deleted; note its own failure."""
        syncer = ResourceSyncer(
            root=self.root,
            resource_type=rt,
            client=client,
            full=self.full,
            errors=self.errors,
            on_page=on_page,
        )
        failure = _sync_one(syncer, display, summary, optional=self.optional)
        if failure is None and summary.resources[-1].status == NOT_SERVED:
            return
        if failure is None:
            failure = _drop_deleted(self.root, client, summary.resources[-1], self.reconcile)
        if failure is not None:
            self.failures[rt] = failure

    def checked(self, summary: SyncSummary) -> SyncSummary:
        """``summary``; :class:`SyncFailed` if resources failed on their own (one: its cause)."""
        if self.failures:
            failures = self.failures
            only = next(iter(failures.values())) if len(failures) == 1 else None
            raise SyncFailed(summary, failures) from only
        return summary


def _check_bound(root: Path, current: Deployment | None, *, rebind: bool) -> None:
    """Refuse a store of another deployment before anything is locked or written."""
    if current is None or not manifest_path(root).is_file():
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


def _display_for(progress: Any) -> tuple[SyncProgress, ProgressCallback | None]:
    """The progress display (and the user's callback, if ``progress`` is one)."""
    if isinstance(progress, SyncProgress):
        return progress, None
    if callable(progress):
        return SyncProgress("off"), progress
    show = sys.stderr.isatty() if progress is None else progress is True
    return SyncProgress("bars" if show else "off"), None


def _sync_one(
    syncer: ResourceSyncer, display: SyncProgress, summary: SyncSummary, *, optional: bool
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
            update_manifest(syncer.root, syncer.rt, syncer.entry_before_failure)
            failure.status = NOT_SERVED
            display.done(failure)
            summary.resources.append(failure)
            return None
        display.failed(failure)
        if isinstance(exc, KeyboardInterrupt) or not scoped_to_resource(exc):
            raise
        summary.resources.append(failure)
        return exc
    display.done(result)
    summary.resources.append(result)
    return None


def _not_served(syncer: ResourceSyncer, exc: BaseException) -> bool:
    """Whether ``exc`` says the deployment lacks the list of a type outside the spec."""
    if not isinstance(exc, NotFound | MethodNotAllowed) or syncer.staged_pages:
        return False
    return catalogue.endpoint_source(syncer.rt, "list") != "spec"


def _failure(syncer: ResourceSyncer, exc: BaseException, elapsed: float) -> ResourceSync:
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

    What is checked and raised is in this module's docstring.

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
        Compare the file's sha256 with the one the manifest recorded before reading it.
    deployment
        The deployment the data must come from (a :class:`toolkit.Client` or a
        :class:`Deployment`); ``None`` reads whatever the store holds. For a lake
        (``store`` a lake folder or an ``s3://`` URL, see ``docs/lake.md``) also a
        deployment's short name; ``None`` reads every deployment of the lake.

    Returns
    -------
    polars.DataFrame or polars.LazyFrame
    """
    # A misspelt type is named as such, before the store is opened: "did you mean
    # 'Appointment'?", never "run pmtk sync --resource Appointmnet".
    catalogue.resource(resource_type)
    if store is not None and _is_lake(store):  # a lake: one deployment or all of them
        return _lake_load(resource_type, store, deployment, table=table, lazy=lazy, verify=verify)
    return read_table(
        resource_type, store, table=table, lazy=lazy, verify=verify, deployment=deployment
    )


def _is_lake(store: str | os.PathLike[str]) -> bool:
    """Whether ``store`` is a lake folder or an ``s3://`` URL rather than a store."""
    text = os.fspath(store)
    root = Path(text)
    if "://" not in text and (root / "manifest.json").is_file() and not (root / "_pmtk").exists():
        # A store: known without importing the lake (deltalake and pyarrow, some 56 MB and
        # over a second), which reading a store's table never needs.
        return False
    from toolkit.lake.command import is_lake_target

    return is_lake_target(text, None)


def _lake_load(
    resource_type: str,
    store: str | os.PathLike[str],
    deployment: Any,
    *,
    table: str | None,
    lazy: bool,
    verify: bool,
) -> pl.DataFrame | pl.LazyFrame:
    """:func:`toolkit.lake.load`: one deployment of the lake (``deployment``) or all of them."""
    from toolkit import lake

    return lake.load(
        resource_type,
        os.fspath(store),
        deployment=deployment,
        table=table,
        lazy=lazy,
        verify=verify,
    )
