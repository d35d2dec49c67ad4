"""The store's files: fsynced writes, Parquet I/O, the manifest, the folder claim and the lock."""

from __future__ import annotations

import contextlib
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

from toolkit.errors import IncompleteResult
from toolkit.store.results import (
    DEFAULT_STORE,
    MANIFEST,
    STORE_FORMAT,
    STORE_KIND,
    ManifestDamaged,
    NotAStore,
    StoreError,
    StoreWriteError,
    _writing,
)


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


ROW_GROUP_ROWS = 32_768
"""Rows per Parquet row group of a merged table: what a sink buffers and a batched read
holds at once, so a sync's memory does not grow with the size of the practice."""


def _sink_parquet(frame: pl.LazyFrame, target: Path, step: str, *, durable: bool = True) -> None:
    """Stream ``frame`` into ``target`` through a temporary file (fsynced when ``durable``)."""
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        with _writing(tmp, step):
            frame.sink_parquet(tmp, row_group_size=ROW_GROUP_ROWS)
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
    parts.append("raw:id,last_updated,json")  # the raw records (toolkit.store.raw)
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return f"{STORE_FORMAT}-{digest}"


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


def _update_manifest(root: Path, resource_type: str, entry: dict[str, Any] | None) -> None:
    """Write ``resource_type``'s manifest entry (``None``: remove it)."""
    manifest = _load_manifest_for_write(root)
    manifest["kind"] = STORE_KIND
    manifest["format"] = STORE_FORMAT
    if entry is None:
        manifest["resources"].pop(resource_type, None)
    else:
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
