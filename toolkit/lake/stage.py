"""A lake sync's staged pages on the local disk, kept across an interruption to resume the walk.

Each (lake, deployment, resource) has one staging folder under :func:`stage_root`
(``$PMTK_LAKE_STAGE``, else ``$XDG_CACHE_HOME/pmtk/lake-stage``, else
``~/.cache/pmtk/lake-stage``): the parts staged so far and ``checkpoint.json``, saved
after each part. A run that stops before its commit (Ctrl-C, a failed request, a
crash) leaves them; the next run of the same walk (same mode, same ``_lastUpdated``
bound, same view) continues from the last staged page instead of from the first.
The folder is removed once the commit is done.

What can go wrong, and what happens:

- **A crash between a part's files and its checkpoint**: parts the checkpoint does
  not count are removed before the walk goes on (:meth:`Stage.resume_point`).
- **A checkpoint that is unreadable, of another walk or of another view**: the
  folder is emptied and the walk starts from its first page (``resumed`` is false).
- **Two runs of the same resource on one machine**: the first holds the folder's
  lock; the second stages into a private temporary folder (it cannot resume, and
  never touches the first one's pages). Runs on other machines have their own disks.
- **Records moving between pages while the run was stopped**: the last staged page
  is read again, and a record read twice is decided by the one precedence rule at
  the commit.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from toolkit.store.results import PAGE_SIZE

STAGE_ENV = "PMTK_LAKE_STAGE"
_FORMAT = 1


def stage_root() -> Path:
    """Where lake syncs stage their pages (see the module's docstring)."""
    given = os.environ.get(STAGE_ENV)
    if given:
        return Path(given)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "pmtk" / "lake-stage"


@dataclass(slots=True)
class StageCheckpoint:
    """How far a walk has staged: which walk it is, and what its parts hold."""

    lake: str
    deployment: str
    resource: str
    schema_version: str
    mode: str
    since: str | None
    pages_done: int = 0
    parts: int = 0
    records: int = 0
    server_time: str | None = None
    max_last_updated: str | None = None

    def same_walk(self, other: StageCheckpoint) -> bool:
        keys = ("lake", "deployment", "resource", "schema_version", "mode", "since")
        return all(getattr(self, k) == getattr(other, k) for k in keys)

    @classmethod
    def from_json(cls, data: Any) -> StageCheckpoint:
        """The checkpoint of ``data``; ``ValueError`` when it is not one this pmtk wrote."""
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError("not a lake stage checkpoint of this pmtk")
        texts = ("lake", "deployment", "resource", "schema_version", "mode")
        counts = ("pages_done", "parts", "records")
        optional = ("since", "server_time", "max_last_updated")
        if not all(isinstance(data.get(k), str) for k in texts):
            raise ValueError("a checkpoint field is missing")
        if not all(isinstance(data.get(k), int) and data[k] >= 0 for k in counts):
            raise ValueError("a checkpoint count is not a whole number")
        if not all(data.get(k) is None or isinstance(data[k], str) for k in optional):
            raise ValueError("a checkpoint time is not text")
        values: dict[str, Any] = {k: data.get(k) for k in (*texts, *counts, *optional)}
        return cls(**values)


class Stage:
    """One walk's staging folder and checkpoint (use :func:`stage_for`)."""

    def __init__(self, folder: Path, checkpoint: StageCheckpoint, *, resumed: bool) -> None:
        self.folder = folder
        self.checkpoint = checkpoint
        self.resumed = resumed

    def save(self) -> None:
        """Write the checkpoint durably (after the part it counts is on disk)."""
        path = self.folder / "checkpoint.json"
        tmp = path.with_suffix(".tmp")
        data = {"format": _FORMAT, **asdict(self.checkpoint)}
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def resume_point(self) -> int:
        """The first page to ask for; parts the checkpoint does not count are removed."""
        cp = self.checkpoint
        for part in self.folder.glob("*/part-*.parquet"):
            number = part.stem.removeprefix("part-")
            if not number.isdigit() or int(number) > cp.parts:
                part.unlink()
        if cp.pages_done == 0:
            return 1
        # The last staged page is read again: its records were counted, so count only
        # the full pages before it.
        cp.records = min(cp.records, (cp.pages_done - 1) * PAGE_SIZE)
        return cp.pages_done


def _clear(folder: Path) -> None:
    for child in folder.iterdir():
        if child.name == "lock":
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _locked(folder: Path) -> IO[str] | None:
    """The folder's lock, held; ``None`` when another run holds it."""
    handle = open(folder / "lock", "a+", encoding="utf-8")  # noqa: SIM115 - held until the end
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def stage_folder(lake: str, deployment: str, resource: str) -> Path:
    """The staging folder of a (lake, deployment, resource): its URI as pmtk resolved it."""
    key = "\0".join((lake, deployment, resource))
    return stage_root() / hashlib.sha256(key.encode()).hexdigest()[:32]


@contextlib.contextmanager
def stage_for(wanted: StageCheckpoint) -> Iterator[Stage]:
    """The staging folder of ``wanted``'s walk, resumed if its checkpoint is of that walk.

    The folder's content is removed when the block ends without an exception (the
    commit is done); after an exception it is kept for the next run.
    """
    folder = stage_folder(wanted.lake, wanted.deployment, wanted.resource)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = _locked(folder)
    if lock is None:  # another run of this resource stages here: a private folder
        with tempfile.TemporaryDirectory(prefix="pmtk-lake-stage-") as private:
            yield Stage(Path(private), wanted, resumed=False)
        return
    try:
        stage = Stage(folder, wanted, resumed=False)
        try:
            found = StageCheckpoint.from_json(json.loads((folder / "checkpoint.json").read_text()))
        except (OSError, ValueError):
            found = None
        if found is not None and found.same_walk(wanted) and found.parts > 0:
            stage = Stage(folder, found, resumed=True)
        else:
            _clear(folder)
        yield stage
        _clear(folder)
    finally:
        lock.close()
