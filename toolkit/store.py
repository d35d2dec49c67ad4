"""A local Parquet store of the deployment's records, kept current by incremental sync.

Layout of a store directory (``pmtk-store`` unless told otherwise)::

    pmtk-store/
      manifest.json                    "kind": "pmtk-store"; what is stored, how fresh,
                                       which schema, and the sha256 of every data file
      Appointment/data-<sha16>.parquet one dataset per resource ...
      appointment_participant/data-<sha16>.parquet   ... and per child table of its view
      Referral/data-<sha16>.parquet
      .staging/<Resource>/             only while a sync of <Resource> is unfinished
        state.json                     the checkpoint: query, pages done, high-water mark
        <table>/part-000001.parquet    one part file per fetched page and table
        merged/<table>.parquet         merged datasets waiting to be swapped in
      .lock                            held (flock) while a sync writes

How a resource is synced (:func:`sync`):

1. **Fetch.** The list endpoint is walked page by page (``_count=100``). Each
   page is flattened with :func:`toolkit.views.flatten_tables` and written as
   its own part file, then the checkpoint is replaced atomically. Memory holds
   one page (plus a few prefetched ones), never the resource.
2. **Validate.** The staged rows are validated with
   :func:`toolkit.schemas.validate` in bounded batches.
3. **Merge.** The parts are merged by ``id`` into the current dataset with
   ``scan_parquet``/``sink_parquet`` (streaming): the newest staged version of a
   record replaces the stored one, and the child-table rows of a replaced
   record are replaced as a whole.
4. **Commit.** Each merged file is fsynced and moved to a new name derived
   from its sha256 (``data-<first 16 hex digits>.parquet``), beside the file
   it replaces, and the manifest, which names the files and their checksums,
   is replaced last: that single :func:`os.replace` switches the resource from
   the old files to the new ones. The files of the previous version are then
   deleted. The checkpoint records the commit first, so a crash half-way
   through is rolled forward by the next run; until then the old manifest
   still names the old files, which are intact. Every file, and every folder
   whose entries changed, is fsynced before the manifest points at it.

The store never takes over a folder it did not create: :func:`sync` writes only
into a missing or empty folder, or into a folder whose ``manifest.json`` carries
``"kind": "pmtk-store"`` (:class:`NotAStore` otherwise, before writing
anything). A damaged manifest is never overwritten (:class:`ManifestDamaged`).
:func:`load` and :func:`verify` compare every data file with the checksum the
manifest recorded (:class:`StoreDamaged`), and a local write failure (disk full,
read-only or forbidden folder) is one :class:`StoreWriteError` naming the file.

Incremental semantics: the manifest keeps, per resource, the server-side
high-water mark (the greatest ``meta.lastUpdated`` stored). The next sync asks
for ``_lastUpdated=ge<mark>`` -- ``ge``, not ``gt``, so that a record written
in the same clock tick as the mark, after the previous sync read that tick, is
not lost. The records at the mark come back again; merging by ``id`` makes that
harmless, and when every returned row equals the stored one the dataset is left
untouched. A re-sync with nothing changed therefore costs one list request per
resource (plus a token).

A changed view (the schema version, a hash of every table's columns and dtypes)
forces a full sync of that resource, as does ``full=True``.
"""

from __future__ import annotations

import contextlib
import email.utils
import errno
import hashlib
import inspect
import os
import queue
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol

import orjson
import polars as pl

from toolkit import catalogue
from toolkit.errors import IncompleteResult, PagingLoop, PmtkError

__all__ = [
    "DEFAULT_STORE",
    "PAGE_SIZE",
    "STORE_FORMAT",
    "STORE_KIND",
    "ChangeResult",
    "FileProblem",
    "ManifestDamaged",
    "NotAStore",
    "PageProgress",
    "PageSource",
    "ResourceSync",
    "StoreDamaged",
    "StoreError",
    "StoreWriteError",
    "SyncFailed",
    "SyncProgress",
    "SyncSummary",
    "VerifyReport",
    "apply_changes",
    "check_folder",
    "declared_schemas",
    "delete",
    "load",
    "one_line",
    "read_manifest",
    "schema_version",
    "sync",
    "upsert",
    "verify",
]

DEFAULT_STORE = "pmtk-store"
"""Directory used when no ``out``/``store`` is given."""

STORE_FORMAT = 2
"""Version of the on-disk layout and of ``manifest.json``.

2 added the ``kind`` marker, a sha256 per data file and content-named data
files. A format-1 store is still recognised as pmtk's own; its resources carry
another :func:`schema_version`, so the next sync rebuilds each in full.
"""

STORE_KIND = "pmtk-store"
"""The ``kind`` of a pmtk manifest: what makes a folder recognisably a pmtk store."""

PAGE_SIZE = catalogue.MAX_PAGE_SIZE
"""``_count`` of every list request: the largest page the API serves."""

VALIDATION_BATCH_ROWS = 50_000
"""Staged rows validated at once: bounds the memory validation needs."""

COMPARE_LIMIT = 5_000
"""Largest incremental fetch compared row by row with the store to detect "unchanged"."""

PREFETCH_PAGES = 8
"""Pages fetched ahead of the one being written (and the most flattened into one part)."""

MANIFEST = "manifest.json"
STAGING = ".staging"
STATE_FILE = "state.json"
PART_COLUMN = "_part"

Mode = Literal["full", "incremental"]
ErrorsMode = Literal["raise", "warn"]


class StoreError(PmtkError, FileNotFoundError):
    """The store, a resource in it, or one of its files is missing, locked or unreadable.

    Subclasses::

        StoreError
        ├── NotAStore          the folder is not empty and is not a pmtk store: nothing written
        ├── ManifestDamaged    manifest.json is unreadable or malformed: nothing written
        ├── StoreDamaged       a data file is missing or fails its recorded sha256
        └── StoreWriteError    disk full, read-only or forbidden folder while writing
    """

    def __str__(self) -> str:  # FileNotFoundError would otherwise format (errno, strerror)
        return str(self.args[0]) if self.args else ""


class NotAStore(StoreError):
    """The folder exists, is not empty, and holds no pmtk manifest; pmtk wrote nothing to it."""


class ManifestDamaged(StoreError):
    """``manifest.json`` cannot be read or understood; pmtk will not overwrite it."""


@dataclass(frozen=True, slots=True)
class FileProblem:
    """One data file that failed verification.

    Attributes
    ----------
    resource
        The resource whose table it holds.
    table
        The table (the resource's main table or a child table).
    path
        The file, as the manifest names it (relative to the store).
    problem
        ``"missing"``, ``"checksum mismatch"``, ``"unreadable"`` or ``"no checksum"``
        (a table written by a pmtk older than store format 2).
    expected, actual
        The recorded and the computed sha256 (``None`` when unknown).
    """

    resource: str
    table: str
    path: str
    problem: str
    expected: str | None = None
    actual: str | None = None

    def describe(self, root: Path) -> str:
        """One line: which file, what is wrong, and the command that repairs it."""
        detail = self.problem
        if self.problem == "checksum mismatch" and self.expected and self.actual:
            detail += f" (recorded sha256 {self.expected[:16]}..., file has {self.actual[:16]}...)"
        return (
            f"{root / self.path} ({self.resource}, table {self.table}): {detail}; "
            f"repair: {_repair_command(root, self.resource)}"
        )


def _repair_command(root: Path, resource_type: str) -> str:
    return f"pmtk sync --out {root} --full --resource {resource_type}"


class StoreDamaged(StoreError):
    """A data file is missing or its bytes differ from the sha256 the manifest recorded.

    ``problems`` lists every :class:`FileProblem` found; the message names each
    file and the ``pmtk sync --full --resource ...`` command that rebuilds it.
    """

    def __init__(self, root: Path, problems: Sequence[FileProblem]) -> None:
        self.root = root
        self.problems = list(problems)
        lines = [p.describe(root) for p in self.problems]
        head = "damaged data in the pmtk store" if len(lines) > 1 else "damaged data file"
        super().__init__(f"{head}: " + "; ".join(lines))


class StoreWriteError(StoreError):
    """Writing the store failed on the local file system (disk full, read-only, permission).

    The data committed before is intact: a failed write never replaces a file
    that the manifest names. ``errno`` is the OS error number (e.g.
    :data:`errno.ENOSPC`), ``path`` the file or folder, ``step`` what was being
    written.
    """

    def __init__(self, path: Path, err: int | None, step: str, detail: str) -> None:
        self.path = path
        self.step = step
        reason = _ERRNO_REASONS.get(err, detail) if err is not None else detail
        msg = (
            f"cannot write the store: {reason} while {step} ({path}); "
            "the data stored before is unchanged. Free space or fix the folder's "
            "permissions, then run the same command again to resume."
        )
        super().__init__(msg)
        self.errno = err


_ERRNO_REASONS: dict[int | None, str] = {
    errno.ENOSPC: "the disk is full (ENOSPC)",
    errno.EDQUOT: "the disk quota is exhausted (EDQUOT)",
    errno.EROFS: "the file system is read-only (EROFS)",
    errno.EACCES: "permission denied (EACCES)",
    errno.EPERM: "operation not permitted (EPERM)",
    errno.EIO: "an I/O error from the device (EIO)",
}
_OS_ERROR_TEXT = re.compile(r"os error (\d+)")


def _os_errno(exc: BaseException) -> int | None:
    """The OS error number behind ``exc``: an OSError's, or one Polars quotes in its text."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno
    match = _OS_ERROR_TEXT.search(str(exc))
    return int(match.group(1)) if match else None


@contextlib.contextmanager
def _writing(path: Path, step: str) -> Iterator[None]:
    """Turn a file-system failure while doing ``step`` on ``path`` into a :class:`StoreWriteError`.

    Polars reports an I/O failure as a ``ComputeError`` quoting ``(os error 28)``;
    Python as an :class:`OSError`. Both become one line naming the file.
    """
    try:
        yield
    except PmtkError:
        raise
    except OSError as exc:
        raise StoreWriteError(path, exc.errno, step, exc.strerror or str(exc)) from exc
    except pl.exceptions.PolarsError as exc:
        err = _os_errno(exc)
        if err is None:
            raise
        raise StoreWriteError(path, err, step, str(exc)) from exc


class PageSource(Protocol):
    """What :func:`sync` needs from a client: raw Bundle pages of a search."""

    def pages(self, resource_type: str, /, **search: Any) -> Iterator[bytes]:
        """Yield each page of a search as the raw Bundle bytes."""
        ...


@dataclass(frozen=True, slots=True)
class PageProgress:
    """Passed to a ``progress`` callable after each page is safely staged.

    Attributes
    ----------
    resource
        The resource type being synced.
    page
        Page number (1-based) of the page just staged.
    pages
        Pages staged so far in this run.
    records
        Records staged for this resource so far (including before a resume).
    total
        ``Bundle.total`` of the search, when the server reports it.
    """

    resource: str
    page: int
    pages: int
    records: int
    total: int | None


ProgressCallback = Callable[[PageProgress], None]


@dataclass(slots=True)
class ResourceSync:
    """What one resource's sync did.

    Attributes
    ----------
    resource
        The resource type.
    mode
        ``"full"`` or ``"incremental"``.
    status
        ``"updated"`` (the datasets were replaced), ``"unchanged"``, or
        ``"failed"`` (nothing of this run was stored; ``error`` says why).
    resumed
        Whether the run continued an interrupted one.
    fetched
        Records received from the server (including before a resume).
    rows
        Rows now stored, per table.
    pages
        List pages requested in this run.
    requests
        HTTP requests the client sent for them (retries and 429 waits included,
        token requests excluded); equals ``pages`` when the client cannot tell.
    elapsed
        Seconds spent on this resource in this run.
    high_water_mark
        Greatest ``meta.lastUpdated`` stored (server time), or ``None``.
    repaired
        Stored files (relative paths) that were missing or failed their checksum
        before this run; the resource was then re-fetched in full.
    error
        For a failed resource: what went wrong, on one line.
    staged_pages
        For a failed resource: list pages staged and kept for the next run
        (0 when a rerun starts the resource from its first page).
    """

    resource: str
    mode: Mode
    status: str = "updated"
    resumed: bool = False
    fetched: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    pages: int = 0
    requests: int = 0
    elapsed: float = 0.0
    high_water_mark: str | None = None
    repaired: list[str] = field(default_factory=list)
    error: str | None = None
    staged_pages: int = 0


@dataclass(slots=True)
class SyncSummary:
    """The outcome of :func:`sync`: one :class:`ResourceSync` per resource.

    Attributes
    ----------
    out
        The store directory.
    resources
        One entry per synced resource, in the order synced.
    elapsed
        Wall-clock seconds of the whole sync.
    """

    out: Path
    resources: list[ResourceSync] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def failed(self) -> list[ResourceSync]:
        """The resources that failed (their previous data is kept, unchanged)."""
        return [r for r in self.resources if r.status == "failed"]

    @property
    def pages(self) -> int:
        """List pages requested by the whole sync."""
        return sum(r.pages for r in self.resources)

    @property
    def requests(self) -> int:
        """HTTP requests sent by the whole sync (token requests not counted)."""
        return sum(r.requests for r in self.resources)

    def __getitem__(self, resource_type: str) -> ResourceSync:
        for r in self.resources:
            if r.resource == resource_type:
                return r
        msg = f"{resource_type!r} was not part of this sync"
        raise KeyError(msg)

    def table(self) -> Any:
        """A :class:`rich.table.Table`: rows, pages, requests and time per resource.

        When a resource failed, a ``problem`` column gives its one-line reason.
        Every cell is a :class:`rich.text.Text`, so a server's ``[security]`` or
        ``[/`` is shown as written, never read as markup.
        """
        from rich.table import Table
        from rich.text import Text

        t = Table(title=Text(f"pmtk sync -> {self.out}"))
        t.add_column("resource", no_wrap=True)
        t.add_column("mode", no_wrap=True)
        t.add_column("status", no_wrap=True)
        for name in ("fetched", "rows", "child rows", "pages", "requests", "elapsed"):
            t.add_column(name, justify="right")
        failed = self.failed
        if failed:
            t.add_column("problem", no_wrap=True, overflow="ellipsis", max_width=90)
        for r in self.resources:
            main = r.rows.get(r.resource, 0)
            children = sum(n for table, n in r.rows.items() if table != r.resource)
            status = Text(r.status + (" (repaired)" if r.repaired else ""))
            if r.status == "failed":
                status.stylize("bold red")
            cells = [
                Text(r.resource),
                Text(r.mode + (" (resumed)" if r.resumed else "")),
                status,
                Text(f"{r.fetched:,}"),
                Text(f"{main:,}" if r.rows else "-"),
                Text(f"{children:,}" if r.rows else "-"),
                Text(str(r.pages)),
                Text(str(r.requests)),
                Text(f"{r.elapsed:.1f} s"),
            ]
            if failed:
                cells.append(Text(r.error or ""))
            t.add_row(*cells)
        caption = f"{self.requests} requests ({self.pages} pages) in {self.elapsed:.1f} s"
        if failed:
            caption += f"; {len(failed)} of {len(self.resources)} resources failed"
        t.caption = Text(caption)
        return t


class SyncFailed(PmtkError):
    """One or more resources failed while the others were synced.

    Raised by :func:`sync` at the end of the run, after every other resource
    was fetched and committed. A failed resource keeps its previous data.

    Attributes
    ----------
    summary
        The :class:`SyncSummary` of the whole run; failed resources have
        ``status == "failed"`` and a one-line ``error``.
    errors
        The original exception of each failed resource, by resource type.
    """

    def __init__(self, summary: SyncSummary, errors: Mapping[str, BaseException]) -> None:
        self.summary = summary
        self.errors = dict(errors)
        parts = "; ".join(f"{r.resource}: {r.error}" for r in summary.failed)
        n, total = len(summary.failed), len(summary.resources)
        super().__init__(f"{n} of {total} resources failed to sync ({parts})")


def one_line(exc: BaseException) -> str:
    """An exception as one line: its class and its message, whitespace collapsed.

    Examples
    --------
    >>> one_line(ValueError("two\\nlines"))
    'ValueError: two lines'
    """
    text = " ".join(str(exc).split())
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def _scoped_to_resource(exc: BaseException) -> bool:
    """Whether a failure concerns one resource only, so that the others may still sync.

    A schema failure, a broken page walk or an API error answered for one list
    stays with that resource. Everything that would fail every resource in turn
    stops the run: an interruption, a local store or write problem, an
    unreachable deployment, a refused token, a rate limit that outlasted the
    waits, a configuration error.
    """
    from toolkit.errors import ApiError, AuthError, DataValidationError, RateLimited

    if isinstance(exc, DataValidationError | IncompleteResult):
        return True
    if isinstance(exc, RateLimited):
        return False
    if isinstance(exc, AuthError):
        return not exc.url.endswith("/oauth/token")  # a refused token fails every resource
    return isinstance(exc, ApiError)


# --------------------------------------------------------------------------- small helpers


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _instant(text: str) -> datetime:
    when = datetime.fromisoformat(text)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _later(a: str | None, b: str | None) -> str | None:
    if a is None:
        return b
    if b is None:
        return a
    return b if _instant(b) > _instant(a) else a


def _fsync_file(path: Path) -> None:
    """Flush a written file's bytes to the device (a rename alone orders nothing)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    """Make the entries of a folder (created, renamed, removed files) durable."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    try:
        fd = os.open(path, flags)
    except (IsADirectoryError, PermissionError):  # pragma: no cover - Windows: no dir fsync
        return
    try:
        os.fsync(fd)
    except OSError as exc:  # pragma: no cover - file systems without directory fsync
        if exc.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _mkdir(path: Path, step: str) -> None:
    """Create ``path`` (and parents); fsync each parent whose entries changed."""
    if path.is_dir():
        return
    with _writing(path, step):
        missing = [p for p in (path, *path.parents) if not p.exists()]
        path.mkdir(parents=True, exist_ok=True)
        for created in reversed(missing):
            _fsync_dir(created.parent)


def _replace(src: Path, dst: Path, step: str, *, durable: bool = True) -> None:
    """Rename ``src`` over ``dst`` and (when ``durable``) make the rename durable."""
    with _writing(dst, step):
        os.replace(src, dst)
        if durable:
            _fsync_dir(dst.parent)


def _write_json(
    path: Path, obj: Any, step: str = "writing the manifest", *, durable: bool = True
) -> None:
    """Replace ``path`` atomically (and durably): a reader sees the old or the new file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    try:
        with _writing(tmp, step), tmp.open("wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        _replace(tmp, path, step, durable=durable)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def _read_json(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def _write_parquet(df: pl.DataFrame, path: Path) -> None:
    """Write a staged part file, atomically but not fsynced.

    Staged parts are not worth an fsync per page (it doubled the time of an
    unpaced full sync): after a power loss, a part that did not reach the disk
    is found unreadable on resume and the resource starts over
    (:meth:`_ResourceSyncer._resume_point`).
    """
    tmp = path.with_name(f".{path.name}.tmp")
    step = f"staging {path.parent.name}/{path.name}"
    try:
        with _writing(tmp, step):
            df.write_parquet(tmp)
        _replace(tmp, path, step, durable=False)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def _sink_parquet(frame: pl.LazyFrame, target: Path, step: str, *, durable: bool = True) -> None:
    """Stream ``frame`` into ``target`` through a temporary file (fsynced when ``durable``)."""
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        with _writing(tmp, step):
            frame.sink_parquet(tmp)
            if durable:
                _fsync_file(tmp)
        _replace(tmp, target, step, durable=durable)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _data_name(digest: str) -> str:
    """The file name of a committed table: named by its content, so it never overwrites."""
    return f"data-{digest[:16]}.parquet"


_DATA_FILE_NAME = re.compile(
    r"(data(-[0-9a-f]{16})?\.parquet|\.data(-[0-9a-f]{16})?\.parquet\.tmp)"
)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name.replace("-", "_")).lower()


def _views(resource_type: str) -> tuple[Any, ...]:
    from toolkit import views

    if resource_type not in views.VIEWS:
        from toolkit.errors import ConfigurationError

        known = ", ".join(views.VIEWS)
        msg = f"no view for resource type {resource_type!r}; known types: {known}"
        raise ConfigurationError(msg)
    return views.VIEWS[resource_type]


def declared_schemas(resource_type: str) -> dict[str, pl.Schema]:
    """Column names and dtypes of every table of a resource's view, main table first.

    Parameters
    ----------
    resource_type
        A resource with a declared view, e.g. ``"Appointment"``.

    Returns
    -------
    dict of str to polars.Schema
        Keyed by table name: the resource name, then child tables such as
        ``appointment_participant`` (see :data:`toolkit.views.VIEWS`).

    Examples
    --------
    >>> list(declared_schemas("Appointment"))[:2]
    ['Appointment', 'appointment_supporting_information']
    """
    return {v.name: v.schema for v in _views(resource_type)}


def _parent_key(resource_type: str) -> str:
    """Column of a child table that holds its parent's id, e.g. ``appointment_id``."""
    for v in _views(resource_type):
        if v.key is not None:
            return str(v.key)
    return f"{_snake(resource_type)}_id"


def _empty_tables(resource_type: str) -> dict[str, pl.DataFrame]:
    return {
        name: pl.DataFrame(schema=schema)
        for name, schema in declared_schemas(resource_type).items()
    }


def schema_version(resource_type: str) -> str:
    """A short hash of every table's columns and dtypes in a resource's view.

    A store whose manifest records another version for a resource is re-synced
    in full, because its stored frames no longer match the view.

    Parameters
    ----------
    resource_type
        A resource with a declared view.

    Returns
    -------
    str
        ``"<STORE_FORMAT>-<16 hex digits>"``.
    """
    parts = [
        f"{table}:" + ",".join(f"{col}={dtype!r}" for col, dtype in schema.items())
        for table, schema in declared_schemas(resource_type).items()
    ]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return f"{STORE_FORMAT}-{digest}"


# --------------------------------------------------------------------------- manifest


def _manifest_path(root: Path) -> Path:
    return root / MANIFEST


def _check_manifest(root: Path, manifest: Any) -> dict[str, Any]:
    """Accept a parsed manifest as pmtk's own, or say why it is not."""
    path = _manifest_path(root)
    if not isinstance(manifest, dict):
        msg = (
            f"{path} is not a pmtk manifest (a JSON {type(manifest).__name__}, not an object), "
            f"so {root} is not a pmtk store; pmtk writes nothing there. Choose another --out"
        )
        raise NotAStore(msg)
    kind = manifest.get("kind")
    legacy = kind is None and manifest.get("format") == 1  # written before the marker existed
    if kind != STORE_KIND and not legacy:
        msg = (
            f'{path} is not a pmtk manifest (no "kind": "{STORE_KIND}"), so {root} is not '
            "a pmtk store; pmtk writes nothing there. Choose another --out"
        )
        raise NotAStore(msg)
    fmt = manifest.get("format")
    if isinstance(fmt, int) and fmt > STORE_FORMAT:
        msg = (
            f"the store at {root} was written by a newer pmtk (store format {fmt}, this pmtk "
            f"reads up to {STORE_FORMAT}); upgrade pmtk"
        )
        raise StoreError(msg)
    resources = manifest.get("resources")
    if (
        not isinstance(fmt, int)
        or not isinstance(resources, dict)
        or not all(isinstance(e, dict) for e in resources.values())
    ):
        raise ManifestDamaged(_damaged_message(root, "its format or resources are malformed"))
    return manifest


def _damaged_message(root: Path, reason: str) -> str:
    return (
        f"the manifest of the store at {root} is unreadable ({reason}). pmtk cannot tell what "
        "the store holds and will not overwrite it. Restore manifest.json from a backup, or "
        f"sync into a new folder (`pmtk sync --out NEW-FOLDER`) and then remove {root}"
    )


def read_manifest(store: str | os.PathLike[str] = DEFAULT_STORE) -> dict[str, Any]:
    """The parsed ``manifest.json`` of a store.

    Parameters
    ----------
    store
        The store directory.

    Returns
    -------
    dict
        ``{"kind": "pmtk-store", "format": 2, "resources": {<type>: {...}}}``;
        see ``docs/store.md``.

    Raises
    ------
    StoreError
        When the directory or its manifest is missing.
    NotAStore
        When ``manifest.json`` is not a pmtk manifest.
    ManifestDamaged
        When ``manifest.json`` is unreadable or malformed.
    """
    root = Path(store)
    path = _manifest_path(root)
    if not path.is_file():
        what = "does not exist" if not root.exists() else "has no manifest.json"
        msg = f"no pmtk store at {root}: the directory {what}; run `pmtk sync --out {root}` first"
        raise StoreError(msg)
    try:
        manifest = _read_json(path)
    except OSError as exc:
        raise ManifestDamaged(_damaged_message(root, exc.strerror or str(exc))) from exc
    except orjson.JSONDecodeError as exc:
        raise ManifestDamaged(_damaged_message(root, f"not valid JSON: {exc}")) from exc
    return _check_manifest(root, manifest)


_OWN_LEFTOVERS = re.compile(r"\.lock|\.manifest\.json\.\d+\.tmp")
"""Entries pmtk may leave in a folder before its first manifest exists."""


def check_folder(out: str | os.PathLike[str]) -> None:
    """Raise unless :func:`sync` may write into ``out``; writes nothing.

    ``out`` may be missing, empty, or a pmtk store (a ``manifest.json`` with
    ``"kind": "pmtk-store"``).

    Parameters
    ----------
    out
        The folder a sync would write into.

    Raises
    ------
    NotAStore
        ``out`` is a file, or a non-empty folder without a pmtk manifest.
    ManifestDamaged
        ``out`` has a ``manifest.json`` that cannot be read.
    """
    _claim(Path(out))


def _claim(root: Path) -> None:
    """Refuse, before writing anything, a folder that pmtk must not write into.

    Accepted: a missing folder, an empty one (or one holding only pmtk's lock
    file from a first sync killed before its manifest was written), and a pmtk
    store. Anything else -- a file, a folder with other contents, a foreign or
    damaged ``manifest.json`` -- raises, so that a user's own files are never
    overwritten.
    """
    if not root.exists():
        return
    if not root.is_dir():
        msg = f"{root} is a file, not a folder; choose another --out for the pmtk store"
        raise NotAStore(msg)
    if _manifest_path(root).exists():
        read_manifest(root)
        return
    try:
        others = sorted(e.name for e in root.iterdir() if not _OWN_LEFTOVERS.fullmatch(e.name))
    except OSError as exc:
        raise StoreWriteError(root, exc.errno, "listing the folder", str(exc)) from exc
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        msg = (
            f"{root} is not empty and is not a pmtk store (it has no pmtk manifest.json; it "
            f"holds {shown}). pmtk writes only into a missing or empty folder or its own "
            "store, and wrote nothing. Choose another --out"
        )
        raise NotAStore(msg)


def _init_manifest(root: Path) -> None:
    """Mark a claimed folder as a pmtk store before anything else is written into it.

    Called under the lock, so a temporary manifest left behind is a dead
    writer's (killed between writing and renaming it) and can go.
    """
    for leftover in root.glob(".manifest.json.*.tmp"):
        with contextlib.suppress(OSError):
            leftover.unlink()
    if not _manifest_path(root).exists():
        _write_json(
            _manifest_path(root),
            {"kind": STORE_KIND, "format": STORE_FORMAT, "resources": {}},
            "creating the store's manifest",
        )


def _load_manifest_for_write(root: Path) -> dict[str, Any]:
    if not _manifest_path(root).exists():
        return {"kind": STORE_KIND, "format": STORE_FORMAT, "resources": {}}
    # A damaged manifest raises here: overwriting it would lose what it says.
    return read_manifest(root)


def _update_manifest(root: Path, resource_type: str, entry: dict[str, Any]) -> None:
    manifest = _load_manifest_for_write(root)
    manifest["kind"] = STORE_KIND
    manifest["format"] = STORE_FORMAT
    manifest["resources"][resource_type] = entry
    _write_json(_manifest_path(root), manifest)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Hold an exclusive lock on the store; a second writer fails fast."""
    _mkdir(root, "creating the store folder")
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX: no lock, single writer assumed
        yield
        return
    with _writing(root / ".lock", "creating the store's lock file"):
        handle = (root / ".lock").open("a+")
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            msg = f"another pmtk sync is writing to {root}; wait for it to finish"
            raise StoreError(msg) from exc
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- prefetch


class _Prefetch:
    """Iterate ``pages`` in a worker thread, at most ``depth`` pages ahead.

    Errors (and ``KeyboardInterrupt``) raised while fetching are re-raised in
    the consuming thread, at the point where the failed page would have come.
    """

    def __init__(self, pages: Iterator[bytes], depth: int) -> None:
        self._pages = pages
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pmtk-sync-prefetch", daemon=True)
        self._thread.start()

    def _put(self, item: tuple[str, Any]) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
            except queue.Full:
                continue
            return True
        return False

    def _run(self) -> None:
        item: tuple[str, Any] = ("done", None)
        try:
            for page in self._pages:
                if not self._put(("page", page)):
                    return
        except BaseException as exc:  # handed to the consumer, which re-raises it
            item = ("error", exc)
        finally:
            close = getattr(self._pages, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    close()
        self._put(item)

    def batches(self, limit: int) -> Iterator[list[bytes]]:
        """Yield the pages in order, grouped: one page, plus any already fetched (<= limit).

        When writing keeps up with the network every batch is a single page;
        when it falls behind, the waiting pages are flattened together, which
        amortises the per-call cost instead of letting the backlog grow.
        """
        while True:
            batch: list[bytes] = []
            end: tuple[str, Any] | None = None
            kind, value = self._queue.get()
            while True:
                if kind != "page":
                    end = (kind, value)
                    break
                batch.append(value)
                if len(batch) >= limit:
                    break
                try:
                    kind, value = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch:
                yield batch
            if end is not None:
                if end[0] == "error":
                    raise end[1]
                return

    def __enter__(self) -> _Prefetch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


# --------------------------------------------------------------------------- one resource


@dataclass(slots=True)
class _Checkpoint:
    """The state file of an unfinished sync of one resource."""

    resource: str
    schema_version: str
    mode: Mode
    since: str | None
    started_at: str
    server_time: str | None = None
    phase: Literal["fetch", "merge", "commit"] = "fetch"
    page_size: int = PAGE_SIZE
    pages_done: int = 0
    parts: int = 0
    records: int = 0
    total: int | None = None
    next_url: str | None = None
    max_last_updated: str | None = None
    entry: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": STORE_FORMAT,
            "resource": self.resource,
            "schema_version": self.schema_version,
            "mode": self.mode,
            "since": self.since,
            "server_time": self.server_time,
            "started_at": self.started_at,
            "phase": self.phase,
            "page_size": self.page_size,
            "pages_done": self.pages_done,
            "parts": self.parts,
            "records": self.records,
            "total": self.total,
            "next_url": self.next_url,
            "max_last_updated": self.max_last_updated,
            "entry": self.entry,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> _Checkpoint:
        if data.get("format") != STORE_FORMAT:
            msg = "checkpoint of another store format"
            raise ValueError(msg)
        return cls(
            resource=str(data["resource"]),
            schema_version=str(data["schema_version"]),
            mode=data["mode"],
            since=data["since"],
            server_time=data.get("server_time"),
            started_at=str(data["started_at"]),
            phase=data["phase"],
            page_size=int(data["page_size"]),
            pages_done=int(data["pages_done"]),
            parts=int(data["parts"]),
            records=int(data["records"]),
            total=data["total"],
            next_url=data["next_url"],
            max_last_updated=data["max_last_updated"],
            entry=data["entry"],
        )


class _ResourceSyncer:
    """Fetch, stage, validate, merge and commit one resource."""

    def __init__(
        self,
        *,
        root: Path,
        resource_type: str,
        client: PageSource,
        full: bool,
        errors: ErrorsMode,
        on_page: Callable[[PageProgress], None],
    ) -> None:
        self.root = root
        self.rt = resource_type
        self.client = client
        self.full = full
        self.errors = errors
        self.on_page = on_page
        self.stage = root / STAGING / resource_type
        self.state_path = self.stage / STATE_FILE
        self.version = schema_version(resource_type)
        self.empty = _empty_tables(resource_type)
        self.key = _parent_key(resource_type)
        self.stored: dict[str, Path] = {}
        """The committed file of each table, when an incremental sync builds on it."""
        self.cp: _Checkpoint | None = None
        """The checkpoint of the run under way (for reporting a failure)."""
        self.sent_before: int | None = None
        """The client's request count when the run began (for reporting a failure)."""

    @property
    def mode(self) -> Mode:
        """The mode of the run under way (``"full"`` before it is decided)."""
        return self.cp.mode if self.cp is not None else "full"

    @property
    def staged_pages(self) -> int:
        """Pages staged and kept for the next run (every page, once the fetch ended)."""
        cp = self.cp
        if cp is None or not self.state_path.is_file():
            return 0
        return cp.pages_done

    # -- paths ---------------------------------------------------------------------

    def _final(self, table: str) -> Path:
        return self.stored[table]

    def _parts_dir(self, table: str) -> Path:
        return self.stage / table

    def _merged(self, table: str) -> Path:
        return self.stage / "merged" / f"{table}.parquet"

    def _save(self, cp: _Checkpoint) -> None:
        # Only the checkpoints that end the fetch are fsynced: losing a per-page one
        # to a power cut costs a re-fetch, never data (see _resume_point).
        _write_json(
            self.state_path,
            cp.to_json(),
            f"writing the {self.rt} sync checkpoint",
            durable=cp.phase != "fetch",
        )

    def _parts_readable(self, cp: _Checkpoint) -> bool:
        """Whether every part the checkpoint counts can be read (after a power cut, maybe not)."""
        for table in self.empty:
            for path in self._part_files(table):
                match = re.fullmatch(r"part-(\d+)\.parquet", path.name)
                if match is None or int(match.group(1)) > cp.parts:
                    continue
                try:
                    pl.read_parquet_schema(path)
                except (OSError, pl.exceptions.PolarsError, pl.exceptions.PanicException):
                    return False
        return True

    # -- planning ------------------------------------------------------------------

    def _previous(self) -> dict[str, Any] | None:
        if not _manifest_path(self.root).exists():
            return None
        entry = _load_manifest_for_write(self.root)["resources"].get(self.rt)
        return entry if isinstance(entry, dict) else None

    def _stored_ok(self, entry: Mapping[str, Any] | None, problems: list[FileProblem]) -> bool:
        """Whether an incremental sync can build on the stored data: same view, intact files.

        Verifying the checksums here matters: an incremental merge copies the
        stored rows into the new file, so a damaged file would otherwise come
        back under a fresh, valid checksum.
        """
        if (
            entry is None
            or entry.get("schema_version") != self.version
            or entry.get("high_water_mark") is None
        ):
            return False
        tables = entry.get("tables")
        if not isinstance(tables, dict) or set(tables) != set(self.empty):
            return False
        problems.extend(_verify_entry(self.root, self.rt, entry))
        if problems:
            return False
        self.stored = {t: self.root / str(tables[t]["path"]) for t in self.empty}
        return True

    def _resume_point(self) -> _Checkpoint | None:
        if not self.state_path.is_file():
            return None
        try:
            cp = _Checkpoint.from_json(_read_json(self.state_path))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if cp.resource != self.rt or cp.schema_version != self.version:
            return None
        if cp.phase == "commit":
            return cp  # always rolled forward: the datasets may already be half swapped
        if self.full and cp.mode != "full":
            return None
        if not self._parts_readable(cp):
            return None
        return cp

    # -- the run -------------------------------------------------------------------

    def run(self) -> ResourceSync:
        try:
            return self._run()
        except PmtkError:
            raise
        except (OSError, pl.exceptions.PolarsError) as exc:
            # A write step without its own _writing() context: still one clear line.
            err = _os_errno(exc)
            if err is None:
                raise
            where = Path(getattr(exc, "filename", None) or self.root)
            raise StoreWriteError(where, err, f"syncing {self.rt}", str(exc)) from exc

    def _run(self) -> ResourceSync:
        started = time.monotonic()
        previous = self._previous()
        cp = self._resume_point()
        if cp is not None and cp.phase == "commit":
            self._commit(cp)
            previous = self._previous()
            cp = None
        problems: list[FileProblem] = []
        stored_ok = self._stored_ok(previous, problems)
        if cp is not None and cp.mode == "incremental" and not stored_ok:
            cp = None  # it would merge into data that is gone or damaged
        resumed = cp is not None
        if cp is None:
            shutil.rmtree(self.stage, ignore_errors=True)
            incremental = not self.full and stored_ok
            cp = _Checkpoint(
                resource=self.rt,
                schema_version=self.version,
                mode="incremental" if incremental else "full",
                since=_next_since(previous) if incremental and previous else None,
                started_at=_now_iso(),
            )
            _mkdir(self.stage, f"staging {self.rt}")
            self._save(cp)
        self.cp = cp
        result = ResourceSync(resource=self.rt, mode=cp.mode, resumed=resumed)
        result.repaired = [p.path for p in problems]
        sent_before = self.sent_before = _requests_sent(self.client)
        try:
            if cp.phase == "fetch":
                result.pages = self._fetch(cp)
            sent = _requests_sent(self.client)
            result.requests = (
                sent - sent_before if sent is not None and sent_before is not None else result.pages
            )
            result.fetched = cp.records
            self._finish(cp, previous, result)
        except BaseException as exc:
            self._record_failure(previous, exc)
            raise
        result.elapsed = time.monotonic() - started
        return result

    def _record_failure(self, previous: dict[str, Any] | None, exc: BaseException) -> None:
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        entry = dict(previous or {"tables": {}, "high_water_mark": None})
        entry.update(
            status=status,
            error=f"{type(exc).__name__}: {exc}"[:500],
            failed_at=_now_iso(),
            resumable=self.state_path.is_file(),
        )
        with contextlib.suppress(OSError):
            _update_manifest(self.root, self.rt, entry)

    def _search(self, cp: _Checkpoint, first_page: int) -> dict[str, Any]:
        params: dict[str, Any] = {"_count": cp.page_size}
        if first_page > 1:
            params["page"] = first_page
        if cp.since is not None:
            params["_lastUpdated"] = cp.since
        return params

    def _fetch(self, cp: _Checkpoint) -> int:
        """Walk the search from the checkpoint, staging each page; return pages requested."""
        # On resume, the last staged page is read again: if records moved between
        # pages while the run was interrupted, the overlap (merged by id) keeps
        # them from falling into the gap.
        first_page = max(cp.pages_done, 1)
        self._drop_unrecorded_parts(cp)
        requested = 0
        pages = self._pages(cp, first_page)
        try:
            with _Prefetch(iter(pages), PREFETCH_PAGES) as prefetch:
                for batch in prefetch.batches(PREFETCH_PAGES):
                    self._stage_pages(cp, batch, first_page + requested)
                    requested += len(batch)
                    self.on_page(
                        PageProgress(
                            resource=self.rt,
                            page=cp.pages_done,
                            pages=requested,
                            records=cp.records,
                            total=cp.total,
                        )
                    )
        except IncompleteResult as exc:
            # a fresh walk's tail also starts at page 2 (page 1 came through request())
            start = first_page if first_page > 1 else 2
            if not _resumed_walk_complete(cp, start, requested, exc):
                raise
        cp.phase = "merge"
        cp.next_url = None
        # The staged parts were written without fsync; the "merge" checkpoint is
        # durable and promises them all, so flush them first (one call, not one per page).
        sync_all = getattr(os, "sync", None)
        if sync_all is not None:
            sync_all()
        self._save(cp)
        return requested

    def _pages(self, cp: _Checkpoint, first_page: int) -> Iterator[bytes]:
        """The pages of the walk from ``first_page``; notes the server's time at its start.

        A fresh walk is one ``client.pages`` walk: when records change during it,
        the client appends recovery pages (newer versions come later, so the
        merge's "newest part wins" keeps them) and ``client.last_summary``
        carries the server time of its first page. A resumed walk starts at
        ``first_page``, so it is short of ``Bundle.total`` by design: recovery
        is switched off and :func:`_resumed_walk_complete` judges it.
        """
        search = self._search(cp, first_page)
        pages = self.client.pages
        if first_page > 1:
            if "recover" in inspect.signature(pages).parameters:
                yield from pages(self.rt, params=search, recover=False)
            else:
                yield from pages(self.rt, params=search)
            return
        for page in pages(self.rt, params=search):
            if cp.server_time is None:
                summary = getattr(self.client, "last_summary", None)
                started = getattr(summary, "started_at", None)
                cp.server_time = started if isinstance(started, str) else None
            yield page

    def _drop_unrecorded_parts(self, cp: _Checkpoint) -> None:
        """Remove part files written after the last checkpoint (a crash mid-page)."""
        for table in self.empty:
            directory = self._parts_dir(table)
            if not directory.is_dir():
                continue
            for path in directory.iterdir():
                match = re.fullmatch(r"part-(\d+)\.parquet", path.name)
                if match is None or int(match.group(1)) > cp.parts:
                    path.unlink(missing_ok=True)

    def _stage_pages(self, cp: _Checkpoint, pages: list[bytes], page_number: int) -> None:
        """Flatten consecutive pages (from ``page_number``) into one part; checkpoint."""
        from toolkit import views

        last_updated: str | None = None
        n_entries = 0
        bundle: dict[str, Any] = {}
        for page in pages:
            bundle = orjson.loads(page)
            entries = bundle.get("entry") or []
            n_entries += len(entries)
            for e in entries:
                stamp = ((e.get("resource") or {}).get("meta") or {}).get("lastUpdated")
                if isinstance(stamp, str):
                    last_updated = _later(last_updated, stamp)
        tables = views.flatten_tables(self.rt, pages)
        part = cp.parts + 1
        for table, df in tables.items():
            if df.height == 0:
                continue
            directory = self._parts_dir(table)
            _mkdir(directory, f"staging {self.rt}")
            staged = df.with_columns(pl.lit(part, dtype=pl.Int32).alias(PART_COLUMN))
            _write_parquet(staged, directory / f"part-{part:06d}.parquet")
        next_url = next(
            (
                link.get("url")
                for link in bundle.get("link") or []
                if link.get("relation") == "next"
            ),
            None,
        )
        cp.parts = part
        cp.pages_done = page_number + len(pages) - 1
        cp.records += n_entries
        if isinstance(bundle.get("total"), int):
            cp.total = bundle["total"]
        cp.next_url = next_url
        cp.max_last_updated = _later(cp.max_last_updated, last_updated)
        self._save(cp)

    # -- merge and commit ----------------------------------------------------------

    def _part_files(self, table: str) -> list[Path]:
        directory = self._parts_dir(table)
        if not directory.is_dir():
            return []
        return sorted(directory.glob("part-*.parquet"))

    def _scan_parts(self, table: str) -> pl.LazyFrame:
        files = self._part_files(table)
        if not files:
            return (
                self.empty[table].lazy().with_columns(pl.lit(0, dtype=pl.Int32).alias(PART_COLUMN))
            )
        return pl.scan_parquet(files)

    def _latest(self) -> pl.LazyFrame:
        """``(id, _part)`` of the newest staged version of every staged record."""
        return self._scan_parts(self.rt).group_by("id").agg(pl.col(PART_COLUMN).max())

    def _dedupe(self, table: str) -> pl.LazyFrame:
        """The staged rows of ``table`` that belong to the newest version of each record."""
        latest = self._latest()
        scanned = self._scan_parts(table)
        if table == self.rt:
            rows = scanned.join(latest, on=["id", PART_COLUMN], how="semi")
            rows = rows.unique(subset=["id"], keep="any")
        else:
            rows = scanned.join(
                latest.rename({"id": self.key}), on=[self.key, PART_COLUMN], how="semi"
            )
        return rows.drop(PART_COLUMN)

    def _new_file(self, table: str) -> Path:
        return self.stage / "new" / f"{table}.parquet"

    def _write_new(self) -> None:
        """Sink the deduplicated staged rows of every table to one file each (streaming)."""
        _mkdir(self.stage / "new", f"merging the staged pages of {self.rt}")
        for table, empty in self.empty.items():
            _sink_parquet(
                self._dedupe(table).select(empty.columns).cast(empty.schema),
                self._new_file(table),
                f"merging the staged pages of {table}",
                durable=False,  # an intermediate: the merge and its checkpoint come after
            )

    def _new_rows(self, table: str) -> pl.LazyFrame:
        return pl.scan_parquet(self._new_file(table))

    def _validate_new(self) -> None:
        """Validate the new rows with the table's schema, a bounded batch at a time."""
        from toolkit import schemas

        for table in self.empty:
            scan = self._new_rows(table)
            height = scan.select(pl.len()).collect().item()
            for offset in range(0, max(height, 1), VALIDATION_BATCH_ROWS):
                frame = scan.slice(offset, VALIDATION_BATCH_ROWS).collect()
                schemas.validate(
                    frame,
                    self.rt,
                    table=None if table == self.rt else table,
                    errors=self.errors,
                )

    def _unchanged(self, cp: _Checkpoint) -> bool:
        """Whether every staged row is already stored as is (an incremental no-op)."""
        if cp.mode != "incremental":
            return False
        if cp.records == 0:
            return True
        if cp.records > COMPARE_LIMIT:
            return False
        ids = self._new_rows(self.rt).select("id")
        for table in self.empty:
            key = "id" if table == self.rt else self.key
            new = self._new_rows(table).collect()
            old = (
                pl.scan_parquet(self._final(table))
                .join(ids.rename({"id": key}), on=key, how="semi")
                .collect()
            )
            if new.height != old.height or new.schema != old.schema:
                return False
            if _row_hashes(new) != _row_hashes(old):
                return False
        return True

    def _merge(self, cp: _Checkpoint) -> dict[str, dict[str, Any]]:
        """Write each table's merged dataset; return its manifest entry (path, rows, sha256)."""
        _mkdir(self.stage / "merged", f"merging {self.rt}")
        ids = self._new_rows(self.rt).select("id")
        tables: dict[str, dict[str, Any]] = {}
        for table, empty in self.empty.items():
            new = self._new_rows(table)
            if cp.mode == "incremental":
                key = "id" if table == self.rt else self.key
                old = pl.scan_parquet(self._final(table)).join(
                    ids.rename({"id": key}), on=key, how="anti"
                )
                frame = pl.concat([old.select(empty.columns), new.select(empty.columns)])
            else:
                frame = new
            target = self._merged(table)
            _sink_parquet(frame.cast(empty.schema), target, f"writing the merged {table} table")
            digest = _sha256(target)
            tables[table] = {
                "path": f"{table}/{_data_name(digest)}",
                "rows": pl.scan_parquet(target).select(pl.len()).collect().item(),
                "bytes": target.stat().st_size,
                "sha256": digest,
            }
        return tables

    def _entry(
        self,
        cp: _Checkpoint,
        previous: Mapping[str, Any] | None,
        tables: Mapping[str, Mapping[str, Any]],
    ) -> dict[str, Any]:
        hwm = cp.max_last_updated
        if cp.mode == "incremental" and previous is not None:
            hwm = _later(previous.get("high_water_mark"), hwm)
        return {
            "status": "ok",
            "schema_version": self.version,
            "high_water_mark": hwm,
            "server_time": cp.server_time,
            "next_since": _since_after(hwm, cp.server_time),
            "fetched_at": _now_iso(),
            "mode": cp.mode,
            "tables": {table: dict(info) for table, info in tables.items()},
        }

    def _finish(
        self, cp: _Checkpoint, previous: dict[str, Any] | None, result: ResourceSync
    ) -> None:
        self._write_new()
        if self._unchanged(cp) and previous is not None:
            result.status = "unchanged"
            entry = self._entry(cp, previous, previous["tables"])
        else:
            try:
                self._validate_new()
            except PmtkError:
                # The staged pages hold the data that failed: resuming would fail on
                # them again even after the source is fixed, so the next run re-fetches.
                shutil.rmtree(self.stage, ignore_errors=True)
                raise
            entry = self._entry(cp, previous, self._merge(cp))
        entry["last_sync"] = {
            "started_at": cp.started_at,
            "records_fetched": cp.records,
            "pages": result.pages,
            "status": result.status,
        }
        cp.phase = "commit"
        cp.entry = entry
        self._save(cp)
        self._commit(cp)
        result.rows = {t: v["rows"] for t, v in entry["tables"].items()}
        result.high_water_mark = entry["high_water_mark"]

    def _commit(self, cp: _Checkpoint) -> None:
        """Move the merged files in beside the old ones, then switch the manifest.

        Safe to repeat after a crash at any point. Until the manifest is
        replaced it names the previous files, which nothing has touched, so a
        failure (a full disk, a read-only folder) leaves the store as it was.
        """
        if cp.entry is None:
            shutil.rmtree(self.stage, ignore_errors=True)
            return
        tables: dict[str, Any] = cp.entry["tables"]
        for table, info in tables.items():
            final = self.root / str(info["path"])
            merged = self._merged(table)
            if merged.is_file():
                _mkdir(final.parent, f"committing {table}")
                _replace(merged, final, f"committing {table}")
            if not final.is_file():
                # Neither staged nor committed (staging removed by hand): start over.
                shutil.rmtree(self.stage, ignore_errors=True)
                return
        _update_manifest(self.root, self.rt, cp.entry)
        self._remove_superseded(tables)
        shutil.rmtree(self.stage, ignore_errors=True)

    def _remove_superseded(self, tables: Mapping[str, Any]) -> None:
        """Delete the data files the manifest no longer names (previous versions)."""
        for table, info in tables.items():
            keep = (self.root / str(info["path"])).name
            directory = self.root / table
            with contextlib.suppress(OSError):  # a leftover costs space, never correctness
                for path in directory.iterdir():
                    if path.name != keep and _DATA_FILE_NAME.fullmatch(path.name):
                        path.unlink()


def _server_time(date_header: str | None) -> str | None:
    """The server's clock from an HTTP ``Date`` header, as ISO 8601 UTC (or ``None``)."""
    if not date_header:
        return None
    try:
        when = email.utils.parsedate_to_datetime(date_header)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _since_after(mark: str | None, server_time: str | None) -> str | None:
    """The ``_lastUpdated`` bound of the next incremental sync.

    ``mark`` is the greatest ``lastUpdated`` stored and ``server_time`` the
    server's clock when the walk began (``Date`` of its first response).

    * ``mark < server_time``: the mark's clock tick had ended before anything
      was read, so any later write carries a greater ``lastUpdated`` and
      ``gt<mark>`` misses nothing (and re-reads nothing).
    * ``mark >= server_time``: records changed while the walk ran. ``ge`` the
      walk's start re-reads them (merged by id), and catches a record changed
      behind the walk or later in the mark's tick.
    * server time unknown: ``ge<mark>``, safe but it re-reads the records at the mark.
    """
    if mark is None:
        return None
    if server_time is None:
        return f"ge{mark}"
    if _instant(mark) < _instant(server_time):
        return f"gt{mark}"
    return f"ge{server_time}"


def _next_since(entry: Mapping[str, Any]) -> str | None:
    since = entry.get("next_since")
    if isinstance(since, str) and since[:2] in ("gt", "ge"):
        return since
    mark = entry.get("high_water_mark")
    return f"ge{mark}" if isinstance(mark, str) else None


def _requests_sent(client: Any) -> int | None:
    sent = getattr(client, "requests_sent", None)
    return sent if isinstance(sent, int) else None


def _resumed_walk_complete(
    cp: _Checkpoint, first_page: int, requested: int, exc: IncompleteResult
) -> bool:
    """Whether a walk that started at ``first_page`` really read everything.

    A client compares the records of *its* walk with ``Bundle.total``; a resumed
    walk skipped the full pages before ``first_page``, which the checkpoint has.
    """
    if first_page <= 1 or requested == 0 or isinstance(exc, PagingLoop):
        return False
    if cp.next_url is not None or exc.expected is None:
        return False
    return exc.received + (first_page - 1) * cp.page_size >= exc.expected


def _row_hashes(df: pl.DataFrame) -> list[int]:
    if df.height == 0:
        return []
    hashes = df.select(pl.struct(pl.all()).hash(seed=0).alias("h"))["h"]
    return sorted(hashes.to_list())


# --------------------------------------------------------------------------- progress


DisplayMode = Literal["bars", "lines", "off"]

NOTICE_MIN_WAIT = 1.0
"""Shortest wait written as a line in ``"lines"`` mode (pacing makes many tiny waits)."""

_CONNECT_CAUSES = ("ConnectError", "ConnectTimeout", "PoolTimeout")


class _StatusColumn:
    """Factory of a rich column showing a task's ``status`` field, counting down its wait."""

    @staticmethod
    def make() -> Any:
        from rich.progress import ProgressColumn
        from rich.text import Text

        class StatusColumn(ProgressColumn):
            def render(self, task: Any) -> Text:
                render = task.fields.get("status")
                text = render(time.monotonic()) if callable(render) else ""
                return Text(text, style="yellow", overflow="ellipsis", no_wrap=True)

        return StatusColumn()


class SyncProgress:
    """What a sync shows while it runs: a bar per resource with a status, or notice lines.

    The status says why the bar is not moving: ``waiting 12 s: rate limit (429)``
    while the client waits out the rate limit (told by the throttle's
    :meth:`~toolkit.throttle.Throttle.subscribe` hook), and ``connecting to
    host:port (retry 2/5 in 1.5 s; ConnectError)`` while a request is retried
    (told by :func:`toolkit.retries.listen`). Text from servers is never read as
    rich markup.

    Parameters
    ----------
    mode
        ``"bars"``: live progress bars (for a terminal); ``"lines"``: one plain
        line per retry and per wait of at least :data:`NOTICE_MIN_WAIT` seconds
        (for logs and pipes); ``"off"``: nothing.
    console
        Where to draw (default: a :class:`rich.console.Console` on stderr).

    Attributes
    ----------
    failures
        The failed resources reported so far (:class:`ResourceSync` with ``error``).
    """

    def __init__(self, mode: DisplayMode = "bars", *, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        if mode not in ("bars", "lines", "off"):
            msg = f"mode must be 'bars', 'lines' or 'off', got {mode!r}"
            raise ValueError(msg)
        self.mode: DisplayMode = mode
        self.console = console if console is not None else Console(stderr=True, soft_wrap=True)
        self.progress = Progress(
            TextColumn("{task.description:<14}", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("records"),
            TimeElapsedColumn(),
            _StatusColumn.make(),
            console=self.console,
            disable=mode != "bars",
        )
        self._tasks: dict[str, Any] = {}
        self._current: str | None = None
        self._origin: str | None = None
        self._attempts: int | None = None
        self.failures: list[ResourceSync] = []

    def __enter__(self) -> SyncProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    # -- what the sync reports -------------------------------------------------------

    def start(self, resource_type: str) -> None:
        """A resource's sync begins."""
        self._current = resource_type
        self._tasks[resource_type] = self.progress.add_task(resource_type, total=None, status=None)

    def __call__(self, event: PageProgress) -> None:
        """A page was staged: move the bar and clear any waiting state."""
        task = self._tasks.get(event.resource)
        if task is not None:
            self.progress.update(task, completed=event.records, total=event.total, status=None)

    def done(self, result: ResourceSync) -> None:
        """A resource was committed (or found unchanged)."""
        task = self._tasks.get(result.resource)
        if task is not None:
            total = self.progress.tasks[task].total
            completed = total if total is not None else result.fetched
            self.progress.update(task, completed=completed, status=None)

    def failed(self, result: ResourceSync) -> None:
        """A resource failed; ``result.error`` says why, on one line."""
        self.failures.append(result)
        task = self._tasks.get(result.resource)
        if task is not None:
            reason = f"failed: {result.error}"
            self.progress.update(task, status=lambda now: reason)

    # -- why nothing moves -----------------------------------------------------------

    def wait(self, seconds: float, reason: str) -> None:
        """The client waits ``seconds`` before its next request, for ``reason``."""
        until = time.monotonic() + seconds

        def render(now: float) -> str:
            left = until - now
            return f"waiting {left:.0f} s: {reason}" if left > 0 else ""

        self._status(render, seconds >= NOTICE_MIN_WAIT, f"waiting {seconds:.0f} s: {reason}")

    def retry(self, notice: Any) -> None:
        """A request failed and is retried (a :class:`toolkit.retries.RetryNotice`)."""
        url = getattr(notice, "url", None)
        if url is not None and self._origin is not None and _origin(url) != self._origin:
            return  # another client's retry
        host = _host(url) if url is not None else (self._origin or "the deployment")
        n, wait, cause = notice.retry, notice.wait, notice.cause
        of = f"/{self._attempts - 1}" if self._attempts and self._attempts > 1 else ""
        connecting = cause in _CONNECT_CAUSES
        until = time.monotonic() + wait

        def text(left: float | None) -> str:
            timing = f" in {left:.1f} s" if left is not None else ""
            if connecting:
                return f"connecting to {host} (retry {n}{of}{timing}; {cause})"
            return f"{host} answered {cause} (retry {n}{of}{timing})"

        def render(now: float) -> str:
            left = until - now
            return text(left if left > 0 else None)

        self._status(render, True, text(wait))

    def _status(self, render: Callable[[float], str], as_line: bool, line: str) -> None:
        resource = self._current
        if self.mode == "lines" and as_line:
            from rich.text import Text

            prefix = f"{resource}: " if resource else ""
            self.console.print(Text(prefix + line))
        task = self._tasks.get(resource) if resource is not None else None
        if task is not None:
            self.progress.update(task, status=render)

    def status(self, resource_type: str) -> str:
        """The status text shown now beside ``resource_type``'s bar (``""`` when none)."""
        task = self._tasks.get(resource_type)
        if task is None:
            return ""
        render = self.progress.tasks[task].fields.get("status")
        return render(time.monotonic()) if callable(render) else ""

    @contextlib.contextmanager
    def attach(self, client: Any) -> Iterator[None]:
        """Listen to ``client``'s throttle waits and retries for the duration of the block."""
        from toolkit import retries

        base_url = getattr(client, "base_url", None)
        self._origin = _origin(base_url) if isinstance(base_url, str) else None
        policy = getattr(client, "retry_policy", None)
        attempts = getattr(policy, "attempts", None)
        self._attempts = attempts if isinstance(attempts, int) else None
        throttle = getattr(client, "throttle", None)
        subscribe = getattr(throttle, "subscribe", None)
        unsubscribe = subscribe(self.wait) if callable(subscribe) else None
        try:
            with retries.listen(self.retry):
                yield
        finally:
            if callable(unsubscribe):
                unsubscribe()


def _origin(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.lower()}"


def _host(url: str) -> str:
    from urllib.parse import urlsplit

    return urlsplit(url).netloc or url


@contextlib.contextmanager
def _client_quiet(client: Any) -> Iterator[None]:
    """Silence a client's own per-walk progress bar: the store draws one per resource."""
    if not hasattr(client, "progress"):
        yield
        return
    before = client.progress
    client.progress = False
    try:
        yield
    finally:
        client.progress = before


# --------------------------------------------------------------------------- verification


def _check_table(
    root: Path, resource_type: str, table: str, info: Mapping[str, Any]
) -> FileProblem | None:
    """Compare one committed file with its recorded sha256 (``None`` when intact)."""
    rel = str(info.get("path", f"{table}/?"))
    path = root / rel
    expected = info.get("sha256")
    if not path.is_file():
        return FileProblem(resource_type, table, rel, "missing", expected if expected else None)
    if not isinstance(expected, str) or not expected:
        return FileProblem(resource_type, table, rel, "no checksum")
    try:
        actual = _sha256(path)
    except OSError as exc:
        return FileProblem(resource_type, table, rel, f"unreadable ({exc.strerror or exc})")
    if actual != expected:
        return FileProblem(resource_type, table, rel, "checksum mismatch", expected, actual)
    return None


def _verify_entry(root: Path, resource_type: str, entry: Mapping[str, Any]) -> list[FileProblem]:
    tables = entry.get("tables")
    if not isinstance(tables, dict):
        return []
    found = (
        _check_table(root, resource_type, table, info if isinstance(info, dict) else {})
        for table, info in tables.items()
    )
    return [p for p in found if p is not None]


@dataclass(slots=True)
class VerifyReport:
    """What :func:`verify` checked and what it found.

    Attributes
    ----------
    store
        The store directory.
    files
        Files checked (relative paths), in manifest order.
    bytes
        Bytes hashed.
    problems
        One :class:`FileProblem` per damaged, missing or unverifiable file.
    elapsed
        Seconds spent hashing.
    """

    store: Path
    files: list[str] = field(default_factory=list)
    bytes: int = 0
    problems: list[FileProblem] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every file matched its recorded checksum."""
        return not self.problems

    def raise_for_problems(self) -> None:
        """Raise :class:`StoreDamaged` listing every problem, if there is any."""
        if self.problems:
            raise StoreDamaged(self.store, self.problems)


def verify(
    store: str | os.PathLike[str] = DEFAULT_STORE,
    resources: Sequence[str] | None = None,
) -> VerifyReport:
    """Check every data file of a store against the sha256 its manifest recorded.

    Nothing is written and nothing is fetched. Hashing runs at the disk's
    read speed (see ``docs/store.md`` for figures).

    Parameters
    ----------
    store
        The store directory.
    resources
        Only these resource types (default every resource in the manifest).

    Returns
    -------
    VerifyReport
        ``report.ok`` is true when every file is intact; ``report.problems``
        names each damaged file. ``report.raise_for_problems()`` turns them into
        a :class:`StoreDamaged`.

    Raises
    ------
    StoreError
        When there is no store at ``store``, or it holds none of ``resources``.
    NotAStore, ManifestDamaged
        When the manifest is foreign or unreadable.
    """
    root = Path(store)
    started = time.monotonic()
    manifest = read_manifest(root)
    held: dict[str, Any] = manifest["resources"]
    wanted = list(resources) if resources else list(held)
    missing = [r for r in wanted if r not in held]
    if missing:
        stored = ", ".join(sorted(held)) or "nothing"
        msg = f"the store at {root} holds no {', '.join(missing)} data (it holds: {stored})"
        raise StoreError(msg)
    report = VerifyReport(store=root)
    for rt in wanted:
        tables = held[rt].get("tables")
        for table, info in (tables if isinstance(tables, dict) else {}).items():
            info = info if isinstance(info, dict) else {}
            report.files.append(str(info.get("path", table)))
            problem = _check_table(root, rt, table, info)
            if problem is not None:
                report.problems.append(problem)
            elif isinstance(info.get("path"), str):
                report.bytes += (root / info["path"]).stat().st_size
    report.elapsed = time.monotonic() - started
    return report


# --------------------------------------------------------------------------- public API


def sync(
    client: PageSource | None = None,
    out: str | os.PathLike[str] = DEFAULT_STORE,
    resources: Sequence[str] | None = None,
    full: bool = False,
    progress: bool | ProgressCallback | SyncProgress | None = None,
    *,
    errors: ErrorsMode = "raise",
) -> SyncSummary:
    """Bring the Parquet store at ``out`` up to date with the deployment.

    Parameters
    ----------
    client
        Anything with ``pages(resource_type, params=...)`` yielding raw Bundle
        bytes, normally a :class:`toolkit.Client`. ``None`` uses
        :func:`toolkit.connect` (``PM_*`` settings, or the embedded mock).
    out
        The store directory: missing, empty, or a pmtk store. A stored file
        that fails its checksum makes that resource sync in full (listed in
        ``ResourceSync.repaired``).
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
    root = Path(out)
    wanted = list(resources) if resources else list(catalogue.LISTED_RESOURCES)
    unknown = [r for r in wanted if r not in catalogue.LISTED_RESOURCES]
    if unknown:
        from toolkit.errors import ConfigurationError

        known = ", ".join(catalogue.LISTED_RESOURCES)
        msg = f"cannot sync {', '.join(unknown)}: not a listed resource (choose from {known})"
        raise ConfigurationError(msg)
    _claim(root)  # before connecting: refusing costs nothing
    owned: Any = None
    if client is None:
        import toolkit

        owned = toolkit.connect()
        client = owned
    started = time.monotonic()
    summary = SyncSummary(out=root)
    callback: ProgressCallback | None = None
    if isinstance(progress, SyncProgress):
        display = progress
    elif callable(progress):
        callback = progress
        display = SyncProgress("off")
    else:
        show = sys.stderr.isatty() if progress is None else progress is True
        display = SyncProgress("bars" if show else "off")
    failures: dict[str, BaseException] = {}
    try:
        _claim(root)  # before anything is written: a user's folder is never touched
        with (
            _locked(root),
            _client_quiet(client),
            display,
            display.attach(client),
        ):
            _claim(root)  # again under the lock: another process may have written meanwhile
            _init_manifest(root)
            for rt in wanted:
                display.start(rt)
                syncer = _ResourceSyncer(
                    root=root,
                    resource_type=rt,
                    client=client,
                    full=full,
                    errors=errors,
                    on_page=callback or display,
                )
                began = time.monotonic()
                try:
                    result = syncer.run()
                except (Exception, KeyboardInterrupt) as exc:
                    failure = _failure(syncer, exc, time.monotonic() - began)
                    display.failed(failure)
                    if isinstance(exc, KeyboardInterrupt) or not _scoped_to_resource(exc):
                        raise
                    summary.resources.append(failure)
                    failures[rt] = exc
                    continue
                display.done(result)
                summary.resources.append(result)
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


def _failure(syncer: _ResourceSyncer, exc: BaseException, elapsed: float) -> ResourceSync:
    """The :class:`ResourceSync` of a resource whose run raised ``exc``."""
    cp = syncer.cp
    sent = _requests_sent(syncer.client)
    before = syncer.sent_before
    return ResourceSync(
        resource=syncer.rt,
        mode=syncer.mode,
        status="failed",
        fetched=cp.records if cp is not None else 0,
        pages=cp.pages_done if cp is not None else 0,
        requests=sent - before if sent is not None and before is not None else 0,
        elapsed=elapsed,
        error="interrupted" if isinstance(exc, KeyboardInterrupt) else one_line(exc),
        staged_pages=syncer.staged_pages,
    )


def load(
    resource_type: str,
    store: str | os.PathLike[str] = DEFAULT_STORE,
    *,
    table: str | None = None,
    lazy: bool = False,
    verify: bool = True,
) -> pl.DataFrame | pl.LazyFrame:
    """Read a stored table back with the dtypes its view declares.

    Parameters
    ----------
    resource_type
        The resource, e.g. ``"Appointment"``.
    store
        The store directory written by :func:`sync`.
    table
        A child table such as ``"appointment_participant"`` (or just
        ``"participant"``); default the resource's main table.
    lazy
        Return a :class:`polars.LazyFrame` over the file instead of reading it.
    verify
        Compare the file's sha256 with the one the manifest recorded before
        reading it (a full read of the file; about 2 ms per MB, see
        ``docs/store.md``). ``False`` skips the check.

    Returns
    -------
    polars.DataFrame or polars.LazyFrame

    Raises
    ------
    StoreDamaged
        When the file is missing or fails its checksum (or, written by a pmtk
        before store format 2, has none); the message names the file and the
        ``pmtk sync --full --resource ...`` command that rebuilds it.
    StoreError
        When the store, the resource or the table is missing, the file is
        unreadable, or was written with another schema than the current view.
    """
    root = Path(store)
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
    info = tables[name] if isinstance(tables[name], dict) else {}
    path = root / str(info.get("path"))
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


# --------------------------------------------------------------------------- single-record changes


LOCK_WAIT = 30.0
"""Seconds :func:`apply_changes` waits for a sync (or another writer) to release the store."""


@contextlib.contextmanager
def _locked_waiting(root: Path, timeout: float) -> Iterator[None]:
    """Like :func:`_locked`, but wait up to ``timeout`` s: a change arrives while a sync runs."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with _locked(root):
                yield
            return
        except StoreError as exc:
            if isinstance(exc, StoreWriteError) or time.monotonic() >= deadline:
                raise
            if "another pmtk sync" not in str(exc):
                raise
        time.sleep(0.05)


@dataclass(slots=True)
class ChangeResult:
    """What :func:`apply_changes` did to one resource of a store.

    Attributes
    ----------
    resource
        The resource type.
    upserted
        Ids whose fetched version was written (new or newer than the stored one).
    stale
        Ids skipped because the store already holds a newer ``meta.lastUpdated``.
    deleted
        Ids removed (those that were stored).
    written
        Whether new data files were committed (false when nothing changed).
    """

    resource: str
    upserted: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    written: bool = False


def _stored_versions(path: Path, ids: Sequence[str]) -> dict[str, str | None]:
    """``id -> last_updated`` (ISO text or ``None``) of the stored rows among ``ids``."""
    if not ids:
        return {}
    rows = (
        pl.scan_parquet(path)
        .filter(pl.col("id").is_in(list(ids)))
        .select("id", pl.col("last_updated").cast(pl.String))
        .collect()
    )
    return dict(zip(rows["id"].to_list(), rows["last_updated"].to_list(), strict=True))


def _newest_per_id(records: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The newest record per id (by ``meta.lastUpdated``; the later one on a tie)."""
    chosen: dict[str, Mapping[str, Any]] = {}
    for record in records:
        rid = record.get("id")
        if not isinstance(rid, str) or not rid:
            msg = f"a record to upsert has no id: {str(record)[:120]}"
            raise ValueError(msg)
        held = chosen.get(rid)
        if held is None or not _is_newer(_stamp(held), _stamp(record)):
            chosen[rid] = record
    return chosen


def _stamp(record: Mapping[str, Any]) -> str | None:
    meta = record.get("meta")
    stamp = meta.get("lastUpdated") if isinstance(meta, Mapping) else None
    return stamp if isinstance(stamp, str) else None


def _is_newer(a: str | None, b: str | None) -> bool:
    """Whether ``a`` is strictly newer than ``b`` (an unknown time is never newer)."""
    if a is None:
        return False
    if b is None:
        return True
    try:
        return _instant(a.replace("Z", "+00:00")) > _instant(b.replace("Z", "+00:00"))
    except ValueError:
        return False


def _pending_commit(root: Path, resource_type: str) -> None:
    """Finish a sync's commit that a crash interrupted, before changing the resource."""
    syncer = _ResourceSyncer(
        root=root,
        resource_type=resource_type,
        client=_NoPages(),
        full=False,
        errors="raise",
        on_page=lambda _event: None,
    )
    cp = syncer._resume_point()
    if cp is not None and cp.phase == "commit":
        syncer._commit(cp)


class _NoPages:
    """A page source for a syncer that only finishes a commit (it never fetches)."""

    def pages(self, resource_type: str, /, **search: Any) -> Iterator[bytes]:
        msg = f"finishing a commit of {resource_type} fetches nothing"
        raise StoreError(msg)


def apply_changes(
    resource_type: str,
    store: str | os.PathLike[str] = DEFAULT_STORE,
    *,
    upserts: Sequence[Mapping[str, Any]] = (),
    deletes: Sequence[str] = (),
    event: Mapping[str, Any] | None = None,
    errors: ErrorsMode = "raise",
    lock_timeout: float = LOCK_WAIT,
) -> ChangeResult:
    """Write single records into a store (or remove them), keeping its invariants.

    This is how a webhook receiver (:mod:`toolkit.webhooks`) keeps a store
    current without a list walk. The records are flattened with the
    resource's view, validated, and merged by id into every table (child
    table rows of a replaced or removed record go with it); the new files are
    fsynced, named by their sha256 and switched in by replacing the manifest,
    exactly as a sync commits. The newest ``meta.lastUpdated`` wins: a record
    older than the stored version is skipped, so duplicate and out-of-order
    changes are harmless. The high-water mark of the resource is left alone,
    so the next incremental :func:`sync` still covers anything not announced.

    Parameters
    ----------
    resource_type
        A resource with a view, e.g. ``"Appointment"``.
    store
        The store directory (missing, empty or a pmtk store).
    upserts
        Whole records as the API serves them (``GET /main/<type>/<id>``).
    deletes
        Ids to remove. An id both upserted and deleted here is removed.
    event
        A small JSON object describing the last event these changes come from;
        recorded in the manifest under ``"events"`` (``last_applied``).
    errors
        Validation mode for the new rows (:func:`toolkit.schemas.validate`).
    lock_timeout
        Seconds to wait while a sync holds the store.

    Returns
    -------
    ChangeResult

    Raises
    ------
    toolkit.errors.DataValidationError
        A record fails its schema (with ``errors="raise"``); nothing is written.
    StoreDamaged
        The stored files of the resource fail their checksums; repair with
        ``pmtk sync --full --resource R`` first.
    StoreError
        The stored tables were written for another version of the view, or the
        store stayed locked for ``lock_timeout`` seconds.
    NotAStore, ManifestDamaged, StoreWriteError
        As for :func:`sync`.

    Examples
    --------
    >>> import tempfile
    >>> record = {"resourceType": "Referral", "id": "7",
    ...           "meta": {"lastUpdated": "2026-01-02T03:04:05Z"}}
    >>> with tempfile.TemporaryDirectory() as out:
    ...     done = upsert("Referral", [record], out)
    ...     gone = delete("Referral", ["7"], out)
    ...     (done.upserted, gone.deleted, load("Referral", out).height)
    (['7'], ['7'], 0)
    """
    from toolkit import schemas, views

    root = Path(store)
    empty = _empty_tables(resource_type)  # raises ConfigurationError for a type without a view
    version = schema_version(resource_type)
    key = _parent_key(resource_type)
    wanted = _newest_per_id(upserts)
    removed = {rid for rid in deletes if isinstance(rid, str) and rid}
    for rid in removed:
        wanted.pop(rid, None)
    # Flatten and validate before taking the lock: a bad record changes nothing.
    page = orjson.dumps(
        {
            "resourceType": "Bundle",
            "type": "searchset",
            "entry": [{"resource": dict(r)} for r in wanted.values()],
        }
    )
    new_tables = views.flatten_tables(resource_type, [page]) if wanted else empty
    for table, frame in new_tables.items():
        schemas.validate(
            frame, resource_type, table=None if table == resource_type else table, errors=errors
        )
    result = ChangeResult(resource=resource_type)
    _claim(root)
    with _locked_waiting(root, lock_timeout):
        _claim(root)
        _init_manifest(root)
        _pending_commit(root, resource_type)
        manifest = _load_manifest_for_write(root)
        entry = manifest["resources"].get(resource_type)
        stored: dict[str, Path] = {}
        if isinstance(entry, dict) and entry.get("tables"):
            if entry.get("schema_version") != version:
                msg = (
                    f"the stored {resource_type} tables were written for another version of "
                    f"its view; run `pmtk sync --out {root} --full --resource {resource_type}`"
                )
                raise StoreError(msg)
            problems = _verify_entry(root, resource_type, entry)
            if problems:
                raise StoreDamaged(root, problems)
            stored = {t: root / str(entry["tables"][t]["path"]) for t in empty}
        versions = _stored_versions(stored[resource_type], [*wanted, *removed]) if stored else {}
        for rid, record in wanted.items():
            if rid in versions and _is_newer(versions[rid], _stamp(record)):
                result.stale.append(rid)
            else:
                result.upserted.append(rid)
        result.deleted = sorted(r for r in removed if r in versions)
        changed = [*result.upserted, *result.deleted]
        tables_info: dict[str, Any] = dict(entry["tables"]) if stored and entry else {}
        if changed:
            keep = pl.DataFrame({"id": result.upserted}, schema={"id": pl.String})
            staging = root / STAGING / f".changes-{resource_type}"
            shutil.rmtree(staging, ignore_errors=True)
            _mkdir(staging, f"staging changes of {resource_type}")
            try:
                for table, schema_frame in empty.items():
                    k = "id" if table == resource_type else key
                    fresh = new_tables[table].join(keep.rename({"id": k}), on=k, how="semi")
                    parts = [fresh.lazy().select(schema_frame.columns)]
                    if stored:
                        old = pl.scan_parquet(stored[table]).filter(~pl.col(k).is_in(changed))
                        parts.insert(0, old.select(schema_frame.columns))
                    target = staging / f"{table}.parquet"
                    _sink_parquet(
                        pl.concat(parts).cast(schema_frame.schema),
                        target,
                        f"writing the changed {table} table",
                    )
                    digest = _sha256(target)
                    final = root / table / _data_name(digest)
                    tables_info[table] = {
                        "path": f"{table}/{_data_name(digest)}",
                        "rows": pl.scan_parquet(target).select(pl.len()).collect().item(),
                        "bytes": target.stat().st_size,
                        "sha256": digest,
                    }
                    _mkdir(final.parent, f"committing {table}")
                    _replace(target, final, f"committing {table}")
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            result.written = True
        new_entry = dict(entry) if isinstance(entry, dict) else {}
        if result.written:
            new_entry.setdefault("status", "ok")
            new_entry.setdefault("schema_version", version)
            new_entry.setdefault("high_water_mark", None)  # a later sync fetches in full
            new_entry["tables"] = tables_info
            new_entry["changed_at"] = _now_iso()
        manifest = _load_manifest_for_write(root)
        manifest["kind"] = STORE_KIND
        manifest["format"] = STORE_FORMAT
        if new_entry:
            manifest["resources"][resource_type] = new_entry
        if event is not None or result.written:
            held = manifest.get("events")
            events: dict[str, Any] = dict(held) if isinstance(held, dict) else {}
            events["applied"] = int(events.get("applied") or 0) + len(changed)
            if event is not None:
                events["last_applied"] = {**dict(event), "applied_at": _now_iso()}
            manifest["events"] = events
            _write_json(_manifest_path(root), manifest)
        if result.written:
            for table, info in tables_info.items():
                keep_name = Path(str(info["path"])).name
                with contextlib.suppress(OSError):
                    for path in (root / table).iterdir():
                        if path.name != keep_name and _DATA_FILE_NAME.fullmatch(path.name):
                            path.unlink()
    return result


def upsert(
    resource_type: str,
    records: Sequence[Mapping[str, Any]],
    store: str | os.PathLike[str] = DEFAULT_STORE,
    *,
    event: Mapping[str, Any] | None = None,
    errors: ErrorsMode = "raise",
) -> ChangeResult:
    """Insert or replace whole records in a store; the newest ``meta.lastUpdated`` wins.

    A shorthand for :func:`apply_changes` with ``upserts=records``.
    """
    return apply_changes(resource_type, store, upserts=records, event=event, errors=errors)


def delete(
    resource_type: str,
    ids: Sequence[str],
    store: str | os.PathLike[str] = DEFAULT_STORE,
    *,
    event: Mapping[str, Any] | None = None,
) -> ChangeResult:
    """Remove records (and their child-table rows) from a store.

    A shorthand for :func:`apply_changes` with ``deletes=ids``.
    """
    return apply_changes(resource_type, store, deletes=ids, event=event)
