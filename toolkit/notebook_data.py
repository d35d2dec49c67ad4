"""The notebooks' data: an incremental sync into a store of their own, then tables from it.

A notebook used to list whole resource types from the API on every run (notebook
03 at medium scale: 643 requests, 74 s at 500 a minute). Instead,
:func:`notebook_data` brings a Parquet store up to date with
:func:`toolkit.sync` (after the first run, about one request per resource when
little changed) and the notebook reads its tables with :func:`toolkit.load`.
What a sync cannot hold (``$find`` proposals, computed for a time window) is
asked of the API and kept beside the store while fresh (:meth:`NotebookData.find`).

Where the store lives
    ``$PM_NOTEBOOK_STORE`` when set; otherwise a folder under pmtk's cache
    (``$XDG_CACHE_HOME/pmtk`` or ``~/.cache/pmtk``), ``notebook-stores/<target>``,
    where ``<target>`` names the deployment: ``embedded-mock-<scale>-seed<seed>-<shapes>``
    for the embedded mock (whose address changes with every start, while its
    data does not), else the host and path of the base URL plus a 12-character
    hash of the base URL and client id (two keys to one host get two stores).
    It is never ``pmtk-store`` nor inside the repository, so the notebooks
    neither mix with the store a person syncs by hand nor land in git.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from toolkit.notebook_target import embedded_options, store_target

if TYPE_CHECKING:
    from toolkit.find_cache import Availability
    from toolkit.store.results import SyncSummary

__all__ = [
    "STORE_ENV",
    "NotebookData",
    "notebook_data",
    "notebook_store_dir",
    "store_target",
]

#: Environment variable naming the notebooks' store folder explicitly.
STORE_ENV = "PM_NOTEBOOK_STORE"

# sync() refuses a store whose lock another writer holds with this text; two
# notebooks run side by side (nbmake with xdist) then take turns.
_BUSY = "another pmtk sync"


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pmtk"


def notebook_store_dir(client: Any) -> Path:
    """The folder of the notebooks' store for ``client``'s deployment.

    Parameters
    ----------
    client
        The notebook's client.

    Returns
    -------
    Path
        ``$PM_NOTEBOOK_STORE`` when set, else
        ``<pmtk cache>/notebook-stores/<store_target(client)>``.
    """
    explicit = os.environ.get(STORE_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    return _cache_dir() / "notebook-stores" / store_target(client)


@dataclass
class NotebookData:
    """The store a notebook reads, after :func:`notebook_data` brought it up to date.

    Attributes
    ----------
    store
        The store folder.
    requests
        HTTP requests the sync sent (token requests excluded).
    seconds
        Wall-clock time of the sync.
    modes
        ``"full"`` or ``"incremental"`` per resource synced.
    unavailable
        Resources this run could not bring up to date, with the one-line reason
        (a type the deployment does not list, a list it refused). A resource
        here that the store held from an earlier run is still read; one it
        never held reads as missing (see :meth:`frame`).
    """

    store: Path
    requests: int = 0
    seconds: float = 0.0
    modes: dict[str, str] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)

    def holds(self, resource: str) -> bool:
        """Whether the store has data for ``resource``."""
        from toolkit.store.layout import read_manifest

        try:
            entry = read_manifest(self.store)["resources"].get(resource)
        except (OSError, ValueError):
            return False
        return isinstance(entry, dict) and bool(entry.get("tables"))

    def tables(self, resource: str) -> dict[str, pl.DataFrame]:
        """Every stored table of ``resource``: the main table and its child tables.

        Parameters
        ----------
        resource
            The resource type, e.g. ``"Appointment"``.

        Returns
        -------
        dict[str, pl.DataFrame]
            The same keys as ``client.frames(resource)`` (``"Appointment"``,
            ``"appointment_participant"``, ...), with the view's dtypes.

        Raises
        ------
        toolkit.store.StoreError
            When the store holds no data of ``resource``; the message says why
            this run could not fetch it, when it could not.
        """
        from toolkit.store import StoreError, load
        from toolkit.store.layout import read_manifest

        if not self.holds(resource):
            why = self.unavailable.get(resource)
            msg = f"the notebook store at {self.store} holds no {resource} data" + (
                f" ({why})" if why else ""
            )
            raise StoreError(msg)
        from toolkit.store.raw import raw_table

        names = read_manifest(self.store)["resources"][resource]["tables"]
        out: dict[str, pl.DataFrame] = {}
        for name in names:
            if name == raw_table(resource):
                continue  # the records' raw JSON, kept for rebuilds: not a table of the view
            frame = load(resource, self.store, table=name)
            assert isinstance(frame, pl.DataFrame)  # lazy=False
            out[name] = frame
        return out

    def frame(self, resource: str, default: pl.DataFrame | None = None) -> pl.DataFrame:
        """The main table of ``resource``, or ``default`` when the store has none.

        Parameters
        ----------
        resource
            The resource type.
        default
            Returned when the deployment never served the type (a list outside
            the spec that it refuses). ``None`` makes that an error.

        Returns
        -------
        pl.DataFrame
        """
        from toolkit.store import load

        if default is not None and not self.holds(resource):
            return default
        if not self.holds(resource):
            self.tables(resource)  # raises, saying why
        frame = load(resource, self.store)
        assert isinstance(frame, pl.DataFrame)  # lazy=False
        return frame

    def find(
        self,
        client: Any,
        start: Any,
        end: Any,
        duration: int,
        *,
        max_age: float | None = None,
        **filters: Any,
    ) -> Availability:
        """Free slots (``client.find``), kept in this store while fresh.

        See :func:`toolkit.find_cache.cached_find`: the kept answer is used for
        ``max_age`` seconds (an hour by default) unless the store's appointments
        changed since; :meth:`Availability.line` says how old it is.
        """
        from toolkit.find_cache import FIND_MAX_AGE, cached_find

        age = FIND_MAX_AGE if max_age is None else max_age
        return cached_find(client, self.store, start, end, duration, max_age=age, **filters)

    @classmethod
    def from_sync(cls, folder: Path, summary: SyncSummary, failed: dict[str, str]) -> NotebookData:
        """What a sync of ``folder`` did; ``failed`` gives the errors of failed resources."""
        return cls(
            store=folder,
            requests=summary.requests,
            seconds=summary.elapsed,
            modes={r.resource: r.mode for r in summary.resources},
            unavailable={
                **{
                    r.resource: r.error or r.status
                    for r in summary.resources
                    if r.status == "not served"
                },
                **failed,
            },
        )

    def line(self) -> str:
        """One line saying what the sync did, for the notebook's output."""
        modes = set(self.modes.values())
        mode = modes.pop() if len(modes) == 1 else "mixed"
        text = (
            f"store {self.store}: {mode} sync of {len(self.modes)} resources, "
            f"{self.requests} requests in {self.seconds:.1f} s"
        )
        if self.unavailable:
            text += "; not brought up to date: " + ", ".join(sorted(self.unavailable))
        return text


def notebook_data(
    client: Any,
    resources: Sequence[str] | None = None,
    *,
    store: str | os.PathLike[str] | None = None,
    wait: float = 600.0,
    quiet: bool = False,
) -> NotebookData:
    """Bring the notebooks' store up to date with an incremental sync, and read from it.

    Parameters
    ----------
    client
        The notebook's client (``toolkit.connect()``).
    resources
        The resource types the notebook reads; every listed resource when ``None``.
    store
        The store folder; :func:`notebook_store_dir` when ``None``.
    wait
        Seconds to wait while another notebook syncs the same store.
    quiet
        Print nothing (the default prints one line: folder, requests, time).

    Returns
    -------
    NotebookData
        The store, what the sync did, and the resources it could not update.

    Raises
    ------
    toolkit.store.StoreError
        When the folder is not a pmtk store, is damaged, or stays locked for
        ``wait`` seconds.
    toolkit.errors.PmtkError
        When the deployment cannot be reached or refuses the credentials.
    """
    folder = Path(store) if store is not None else notebook_store_dir(client)
    folder.parent.mkdir(parents=True, exist_ok=True)
    # The notebook store is pmtk's own cache, named after its target: one of the embedded
    # mock that records no or another mock's deployment (an older pmtk, another seed)
    # holds nothing a user made, so it is started over instead of refused.
    rebind = embedded_options(client) is not None and store is None
    summary, failed = _sync_waiting(client, folder, resources, rebind=rebind, wait=wait)
    data = NotebookData.from_sync(folder, summary, failed)
    if not quiet:
        print(data.line(), file=sys.stderr)
    return data


def _sync_waiting(
    client: Any, folder: Path, resources: Sequence[str] | None, *, rebind: bool, wait: float
) -> tuple[SyncSummary, dict[str, str]]:
    """Sync ``folder``, retrying for ``wait`` seconds while another sync holds it.

    Returns the sync summary and, when some resources failed, their errors by resource.
    """
    from toolkit.store import StoreError, SyncFailed, sync

    deadline = time.monotonic() + wait
    while True:
        try:
            summary = sync(client, folder, resources=resources, progress=False, rebind=rebind)
            return summary, {}
        except SyncFailed as exc:
            failed = {r.resource: r.error or "failed" for r in exc.summary.failed}
            return exc.summary, failed
        except StoreError as exc:
            if _BUSY not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(0.5)
