"""The store's files: fsynced writes, Parquet I/O, the manifest, the folder claim and the lock."""

from __future__ import annotations

import contextlib
import contextvars
import errno
import hashlib
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from toolkit import views
from toolkit.errors import (
    ApiError,
    AuthError,
    ConfigurationError,
    DataValidationError,
    IncompleteResult,
    RateLimited,
)
from toolkit.redaction import redact_json
from toolkit.store.precedence import newest
from toolkit.store.results import (
    DEFAULT_STORE,
    MANIFEST,
    STORE_FORMAT,
    STORE_KIND,
    ManifestDamaged,
    NotAStore,
    StoreError,
    StoreLinked,
    StoreWriteError,
    writing,
)

_ROOT: contextvars.ContextVar[Path | None] = contextvars.ContextVar("pmtk_store_root", default=None)
"""The store whose lock this thread holds: every write below it is checked for links."""

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def linked_message(root: Path, link: Path) -> str:
    try:
        target = os.readlink(link)
    except OSError:
        target = "?"
    try:
        shown = link.relative_to(root)
    except ValueError:
        shown = link
    return (
        f"refused: {shown} inside the store {root} is a symbolic link (to {target}); pmtk "
        "never writes or deletes through a link inside a store and wrote nothing. Replace "
        "the link by a real folder or file (or remove it), or sync into a new folder "
        "(--out NEW-FOLDER)"
    )


def _refuse_links(root: Path) -> None:
    """Raise :class:`StoreLinked` when any entry inside ``root`` is a symbolic link.

    The store folder itself may be a link (a user's choice of where it lives); what
    is inside it is pmtk's, and a link there could make a sync write, or delete,
    outside the store.
    """
    if not root.is_dir():
        return
    # scandir's d_type answers is_symlink without a stat per entry (a resumable sync's
    # staging can hold thousands of part files); linked folders are never entered.
    folders = [str(root)]
    while folders:
        with os.scandir(folders.pop()) as listing:
            for entry in listing:
                if entry.is_symlink():
                    raise StoreLinked(linked_message(root, Path(entry.path)))
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)


def guard(path: Path) -> None:
    """Refuse to write at ``path`` when a link sits between the held store and it.

    Checked at every write (not only when a sync starts), so that a link put in
    place while a sync runs is refused too. A path outside the held store, or a
    thread holding no store, is not checked here.
    """
    root = _ROOT.get()
    if root is None:
        return
    try:
        rel = path.relative_to(root)
    except ValueError:
        return
    current = root
    for part in rel.parts:
        current = current / part
        if current.is_symlink():
            raise StoreLinked(linked_message(root, current))


def _create_new(path: Path) -> int:
    """Open ``path`` for writing (created or truncated), never through a link.

    ``O_NOFOLLOW`` makes the open fail (``ELOOP``) when the name is a symbolic link;
    such a link (planted, or a leftover) is then unlinked, which removes the link and
    never its target, and the file is created anew with ``O_EXCL``, so the file
    written is the one created here.
    """
    guard(path.parent)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW
    try:
        return os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
    path.unlink()
    return os.open(path, flags | os.O_EXCL, 0o644)


def rmtree(path: Path) -> None:
    """Remove a folder of the store (never through a link to a folder outside it)."""
    import shutil

    guard(path)
    shutil.rmtree(path, ignore_errors=True)


def scoped_to_resource(exc: BaseException) -> bool:
    """Whether a failure concerns one resource only, so that the others may still sync.

    A schema failure, a broken page walk or an API error answered for one list
    stays with that resource. Everything that would fail every resource in turn
    stops the run: an interruption, a local store or write problem, an
    unreachable deployment, a refused token, a rate limit that outlasted the
    waits, a configuration error.
    """

    if isinstance(exc, DataValidationError | IncompleteResult):
        return True
    if isinstance(exc, RateLimited):
        return False
    if isinstance(exc, AuthError):
        return not exc.url.endswith("/oauth/token")  # a refused token fails every resource
    return isinstance(exc, ApiError)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def instant(text: str) -> datetime:
    when = datetime.fromisoformat(text)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def later(a: str | None, b: str | None) -> str | None:
    """The newer of two ``meta.lastUpdated`` stamps: :func:`toolkit.store.precedence.newest`."""

    return newest(a, b)


def fsync_file(path: Path) -> None:
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


def mkdir(path: Path, step: str) -> None:
    """Create ``path`` (and parents); fsync each parent whose entries changed."""
    guard(path)
    if path.is_dir():
        return
    with writing(path, step):
        missing = [p for p in (path, *path.parents) if not p.exists()]
        path.mkdir(parents=True, exist_ok=True)
        for created in reversed(missing):
            _fsync_dir(created.parent)
    guard(path)  # a link made while the folders were created


def replace(src: Path, dst: Path, step: str, *, durable: bool = True) -> None:
    """Rename ``src`` over ``dst`` and (when ``durable``) make the rename durable."""
    guard(src)
    guard(dst)
    with writing(dst, step):
        os.replace(src, dst)
        if durable:
            _fsync_dir(dst.parent)


def write_json(
    path: Path, obj: Any, step: str = "writing the manifest", *, durable: bool = True
) -> None:
    """Replace ``path`` atomically (and durably): a reader sees the old or the new file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # The redaction boundary: an error a server echoed a secret into is stored without it.
    data = orjson.dumps(redact_json(obj), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    try:
        with writing(tmp, step), os.fdopen(_create_new(tmp), "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        replace(tmp, path, step, durable=durable)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def read_json(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def write_parquet(df: pl.DataFrame, path: Path) -> None:
    """Write a staged part file, atomically but not fsynced.

    Staged parts are not worth an fsync per page (it doubled the time of an
    unpaced full sync): after a power loss, a part that did not reach the disk
    is found unreadable on resume and the resource starts over
    (:meth:`toolkit.store.transaction.Transaction.pending`).
    """
    tmp = path.with_name(f".{path.name}.tmp")
    step = f"staging {path.parent.name}/{path.name}"
    try:
        with writing(tmp, step):
            # created here, without following a link; Polars then writes into this file
            os.close(_create_new(tmp))
            df.write_parquet(tmp)
        replace(tmp, path, step, durable=False)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


ROW_GROUP_ROWS = 32_768
"""Rows per Parquet row group of a merged table: what a sink buffers and a batched read
holds at once, so a sync's memory does not grow with the size of the practice."""


def sink_parquet(frame: pl.LazyFrame, target: Path, step: str, *, durable: bool = True) -> None:
    """Stream ``frame`` into ``target`` through a temporary file (fsynced when ``durable``)."""
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        with writing(tmp, step):
            # created here, without following a link; Polars then writes into this file
            os.close(_create_new(tmp))
            frame.sink_parquet(tmp, row_group_size=ROW_GROUP_ROWS)
            if durable:
                fsync_file(tmp)
        replace(tmp, target, step, durable=durable)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def data_name(digest: str) -> str:
    """The file name of a committed table: named by its content, so it never overwrites."""
    return f"data-{digest[:16]}.parquet"


DATA_FILE_NAME = re.compile(r"(data(-[0-9a-f]{16})?\.parquet|\.data(-[0-9a-f]{16})?\.parquet\.tmp)")


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name.replace("-", "_")).lower()


def _views(resource_type: str) -> tuple[Any, ...]:
    if resource_type not in views.VIEWS:
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


def parent_key(resource_type: str) -> str:
    """Column of a child table that holds its parent's id, e.g. ``appointment_id``."""
    for v in _views(resource_type):
        if v.key is not None:
            return str(v.key)
    return f"{snake(resource_type)}_id"


def empty_tables(resource_type: str) -> dict[str, pl.DataFrame]:
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
    parts.append("raw:id,last_updated,json")  # the raw records (toolkit.store.raw)
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return f"{STORE_FORMAT}-{digest}"


def manifest_path(root: Path) -> Path:
    return root / MANIFEST


def _check_manifest(root: Path, manifest: Any) -> dict[str, Any]:
    """Accept a parsed manifest as pmtk's own, or say why it is not."""
    path = manifest_path(root)
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
    path = manifest_path(root)
    if not path.is_file():
        what = "does not exist" if not root.exists() else "has no manifest.json"
        msg = f"no pmtk store at {root}: the directory {what}; run `pmtk sync --out {root}` first"
        raise StoreError(msg)
    try:
        manifest = read_json(path)
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
    claim(Path(out))


def claim(root: Path) -> None:
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
    if os.path.lexists(manifest_path(root)):
        _refuse_links(root)  # before reading: the manifest itself may be the link
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


def init_manifest(root: Path) -> None:
    """Mark a claimed folder as a pmtk store before anything else is written into it.

    Called under the lock, so a temporary manifest left behind is a dead
    writer's (killed between writing and renaming it) and can go.
    """
    _refuse_links(root)
    for leftover in root.glob(".manifest.json.*.tmp"):
        with contextlib.suppress(OSError):
            leftover.unlink()
    if not manifest_path(root).exists():
        write_json(
            manifest_path(root),
            # "deployment": null marks a store this pmtk created and no client has bound
            # yet (records written by upsert/apply_changes alone); the first sync binds it
            {"kind": STORE_KIND, "format": STORE_FORMAT, "deployment": None, "resources": {}},
            "creating the store's manifest",
        )


def load_manifest_for_write(root: Path) -> dict[str, Any]:
    if not manifest_path(root).exists():
        return {"kind": STORE_KIND, "format": STORE_FORMAT, "resources": {}}
    # A damaged manifest raises here: overwriting it would lose what it says.
    return read_manifest(root)


def update_manifest(root: Path, resource_type: str, entry: dict[str, Any] | None) -> None:
    """Write ``resource_type``'s manifest entry (``None``: remove it)."""
    manifest = load_manifest_for_write(root)
    manifest["kind"] = STORE_KIND
    manifest["format"] = STORE_FORMAT
    if entry is None:
        manifest["resources"].pop(resource_type, None)
    else:
        manifest["resources"][resource_type] = entry
    write_json(manifest_path(root), manifest)


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """Hold an exclusive lock on the store; a second writer fails fast.

    ``filelock`` picks the operating system's lock (``flock`` on POSIX, ``msvcrt`` on
    Windows), so no platform runs without one. A lock file that is a link is refused
    (never opened through it).
    """
    import filelock

    mkdir(root, "creating the store folder")
    path = root / ".lock"
    if path.is_symlink():
        raise StoreLinked(linked_message(root, path))
    lock = filelock.FileLock(path, blocking=False, thread_local=False)
    # A read-only or forbidden folder gives the same one line as any other write.
    with writing(path, "creating the store's lock file"):
        try:
            lock.acquire()
        except filelock.Timeout as exc:  # a TimeoutError, hence checked inside writing
            msg = f"another pmtk sync is writing to {root}; wait for it to finish"
            raise StoreError(msg) from exc
    held = _ROOT.set(root)
    try:
        yield
    finally:
        _ROOT.reset(held)
        lock.release()


@contextlib.contextmanager
def locked_if_free(root: Path) -> Iterator[bool]:
    """Hold the store's lock when no other writer does: yields ``True``, else ``False``.

    For a cleanup that may only touch what no one else is writing: a folder whose
    lock another process holds is that process's, whatever this one made of it.
    Nothing is created: a missing folder yields ``False``.
    """
    if not root.is_dir() or (root / ".lock").is_symlink():
        yield False
        return
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(locked(root))
        except StoreError as exc:
            if "another pmtk sync" not in str(exc):
                raise
            yield False
            return
        yield True
