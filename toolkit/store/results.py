"""What a sync reports and raises: its constants, errors, progress protocol and summaries."""

from __future__ import annotations

import contextlib
import errno
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import polars as pl

from toolkit import catalogue
from toolkit.errors import PmtkError

if TYPE_CHECKING:
    from toolkit.page import Page
    from toolkit.paging import FetchSummary

DEFAULT_STORE = "pmtk-store"
"""Directory used when no ``out``/``store`` is given and a deployment is configured."""


MOCK_STORE = "pmtk-store-mock"
"""Directory used when no ``out``/``store`` is given and the embedded mock is used:
never the folder of a real deployment's store."""


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


VALIDATION_BATCH_ROWS = 16_384
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
        ├── StoreLinked        a symbolic link inside the store: nothing written through it
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
            f"repair: {repair_command(root, self.resource)}"
        )


def repair_command(root: Path, resource_type: str) -> str:
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


class RebuildRefused(StoreError):
    """The raw records of a resource cannot rebuild its tables; nothing was written.

    They hold fewer records than its main table (a rebuild would lose rows), or a
    record that is not the JSON object of its row (truncated, another id, another
    type). The message names the resource, the counts or the record, and the
    ``pmtk sync --full`` command that fetches the records again.
    """


class StoreLinked(StoreError):
    """A symbolic link inside the store (staging, a table folder, a data file, the manifest).

    pmtk never reads, writes or deletes through a link inside a store, so that no
    sync can write into, or delete from, a folder outside it. Nothing was written.
    """


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


def os_errno(exc: BaseException) -> int | None:
    """The OS error number behind ``exc``: an OSError's, or one Polars quotes in its text."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno
    match = _OS_ERROR_TEXT.search(str(exc))
    return int(match.group(1)) if match else None


@contextlib.contextmanager
def writing(path: Path, step: str) -> Iterator[None]:
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
        err = os_errno(exc)
        if err is None:
            raise
        raise StoreWriteError(path, err, step, str(exc)) from exc


class PageWalk(Protocol):
    """A list walk under way: its pages, each parsed once, and its summary."""

    @property
    def summary(self) -> FetchSummary:
        """Filled in as pages arrive: ``started_at`` (server time at the start) from page 1."""
        ...

    def __iter__(self) -> Iterator[Page]:
        """The walk's pages in order (recovery pages after them), each parsed once."""
        ...


class PageSource(Protocol):
    """What :func:`sync` needs from a client; :class:`toolkit.Client` is one.

    A client that also has ``throttle``, ``retry_policy`` and ``base_url`` (as
    :class:`toolkit.Client` does) gets its waits and retries shown by the
    store's progress display.
    """

    @property
    def requests_sent(self) -> int:
        """HTTP requests sent so far (for each resource's request count)."""
        ...

    def walk(
        self,
        resource_type: str,
        /,
        *,
        params: Mapping[str, Any] | None = None,
        skipped: int = 0,
        progress: bool | None = None,
    ) -> PageWalk:
        """A list walk (see :meth:`toolkit.Client.walk`); ``skipped`` marks a resumed one."""
        ...

    def export_ids(self, resource_type: str) -> set[str] | None:
        """Every id the deployment holds of the type in one request, or ``None`` (no such
        operation); see :meth:`toolkit.Client.export_ids`."""
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


NOT_SERVED = "not served"
"""The status of a type outside the spec that the deployment does not serve."""


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
        ``"updated"`` (the datasets were replaced), ``"unchanged"``,
        ``"not served"`` (a type outside the spec whose list the deployment does
        not have; its stored data, if any, is kept; ``error`` says what it
        answered), or ``"failed"`` (nothing of this run was stored; ``error``
        says why).
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
    deleted
        Stored records dropped because the deployment no longer has them (an
        incremental sync: Patient through ``$export-ids``, every type with
        ``reconcile=True``).
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
    deleted: int = 0


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
        deleted = any(r.deleted for r in self.resources)
        names = ("fetched", "rows", "child rows", *(("deleted",) if deleted else ()))
        for name in (*names, "pages", "requests", "elapsed"):
            t.add_column(name, justify="right")
        failed = self.failed
        problems = any(r.error for r in self.resources)
        if problems:
            t.add_column("problem", no_wrap=True, overflow="ellipsis", max_width=90)
        for r in self.resources:
            t.add_row(*_table_cells(r, deleted=deleted, problems=problems))
        caption = f"{self.requests} requests ({self.pages} pages) in {self.elapsed:.1f} s"
        if failed:
            caption += f"; {len(failed)} of {len(self.resources)} resources failed"
        absent = [r.resource for r in self.resources if r.status == NOT_SERVED]
        if absent:
            caption += f"; not served by this deployment (outside the spec): {', '.join(absent)}"
        t.caption = Text(caption)
        return t


def _table_cells(r: ResourceSync, *, deleted: bool, problems: bool) -> list[Any]:
    """One resource's row of :meth:`SyncSummary.table`, every cell a plain ``Text``."""
    from rich.text import Text

    main = r.rows.get(r.resource, 0)
    children = sum(n for table, n in r.rows.items() if table != r.resource)
    status = Text(r.status + (" (repaired)" if r.repaired else ""))
    if r.status == "failed":
        status.stylize("bold red")
    elif r.status == NOT_SERVED:
        status.stylize("yellow")
    cells = [
        Text(r.resource),
        Text(r.mode + (" (resumed)" if r.resumed else "")),
        status,
        Text(f"{r.fetched:,}"),
        Text(f"{main:,}" if r.rows else "-"),
        Text(f"{children:,}" if r.rows else "-"),
        *((Text(f"{r.deleted:,}"),) if deleted else ()),
        Text(str(r.pages)),
        Text(str(r.requests)),
        Text(f"{r.elapsed:.1f} s"),
    ]
    if problems:
        cells.append(Text(r.error or ""))
    return cells


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
