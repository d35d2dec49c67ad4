"""Free slots (``$find``) kept beside the notebooks' store, and reread only when stale.

``$find`` proposals are computed by the deployment for a time window, so a sync
cannot hold them; notebook 03 asked for them on every run (at medium scale 129
of a rerun's 135 requests). :func:`cached_find` keeps the answer in the store's
folder (``find-cache/``) and gives it back, with no request, while all of these
hold:

- the same deployment (:func:`toolkit.notebook_target.store_target`) and the same
  question (window, duration, filters);
- it is younger than ``max_age`` (an hour by default): availability also moves
  with rosters and leave, which no stored table shows;
- the store's Appointment records are the ones it had when ``$find`` answered
  (the raw table's sha256): a booking, a cancellation or a moved appointment
  synced since then changes the free time, so the slots are asked for again.

Otherwise (or when the kept answer cannot be read: a half-written file, one
edited by hand, a clock that went backwards) ``$find`` is asked again and its
answer replaces the kept one. :class:`Availability` says which happened and how
old the slots are, for the report.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from toolkit.notebook_target import store_target
from toolkit.store.layout import read_manifest
from toolkit.store.raw import raw_table
from toolkit.words import plural

__all__ = ["FIND_MAX_AGE", "Availability", "cached_find"]

FIND_MAX_AGE = 3600.0
"""Seconds a kept ``$find`` answer is used for (when the appointments did not change)."""

CACHE_FOLDER = "find-cache"


@dataclass(frozen=True)
class Availability:
    """Free slots, and where they came from.

    Attributes
    ----------
    slots
        ``client.find``'s frame.
    fetched_at
        When ``$find`` answered (UTC).
    requests
        Requests this call sent: 0 when the kept answer was used.
    cached
        Whether the slots were read from the store (no request).
    max_age
        Seconds the answer is kept for.
    """

    slots: pl.DataFrame
    fetched_at: dt.datetime
    requests: int
    cached: bool
    max_age: float = FIND_MAX_AGE

    def line(self, now: dt.datetime | None = None) -> str:
        """One sentence for the report: where the slots come from and how old they are."""
        now = now or dt.datetime.now(dt.UTC)
        minutes = max(0, int((now - self.fetched_at).total_seconds() // 60))
        age = "under a minute" if minutes == 0 else plural(minutes, "minute")
        asked = f"$find answered at {self.fetched_at:%d %b %Y %H:%M} UTC ({age} ago)"
        if self.cached:
            return (
                f"free slots kept from an earlier run: {asked}; asked again after "
                f"{plural(round(self.max_age / 60), 'minute')} or when appointments change"
            )
        sent = plural(self.requests, "request")
        return f"free slots asked of the deployment this run ({sent}, {self.fetched_at:%H:%M} UTC)"


def _appointments_version(store: Path) -> str | None:
    """The sha256 of the store's raw Appointment records, or None when it has none."""

    try:
        entry = read_manifest(store)["resources"].get("Appointment") or {}
        table = entry.get("tables", {}).get(raw_table("Appointment"))
    except (OSError, ValueError, AttributeError):
        return None
    sha = table.get("sha256") if isinstance(table, dict) else None
    return sha if isinstance(sha, str) else None


def _key(target: str, query: dict[str, str]) -> str:
    blob = json.dumps({"target": target, "query": query}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def _kept(
    folder: Path, key: str, version: str | None, max_age: float, now: dt.datetime
) -> tuple[pl.DataFrame, dt.datetime] | None:
    """The kept answer under ``key`` when still good, else None (stale, changed, unreadable)."""
    meta_path, data_path = folder / f"{key}.json", folder / f"{key}.parquet"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        fetched = dt.datetime.fromisoformat(meta["fetched_at"])
        age = (now - fetched).total_seconds()
        if version is None or meta.get("appointments") != version or not 0 <= age <= max_age:
            return None
        if meta.get("sha256") != hashlib.sha256(data_path.read_bytes()).hexdigest():
            return None  # a half-written or edited file: asked again
        return pl.read_parquet(data_path), fetched
    except (OSError, ValueError, KeyError, TypeError, pl.exceptions.PolarsError):
        return None


def _keep(
    folder: Path, key: str, slots: pl.DataFrame, version: str | None, fetched: dt.datetime
) -> None:
    """Write the answer, data first and its metadata (with the data's sha256) last,
    each through a temporary file renamed into place."""
    folder.mkdir(parents=True, exist_ok=True)
    data_path = folder / f"{key}.parquet"
    tmp = folder / f".{key}.{os.getpid()}.parquet.tmp"
    slots.write_parquet(tmp)
    os.replace(tmp, data_path)
    meta = {
        "fetched_at": fetched.isoformat(),
        "appointments": version,
        "sha256": hashlib.sha256(data_path.read_bytes()).hexdigest(),
    }
    tmp_meta = folder / f".{key}.{os.getpid()}.json.tmp"
    tmp_meta.write_text(json.dumps(meta), encoding="utf-8")
    os.replace(tmp_meta, folder / f"{key}.json")


def cached_find(
    client: Any,
    store: str | os.PathLike[str],
    start: dt.datetime | dt.date | str,
    end: dt.datetime | dt.date | str,
    duration: int,
    *,
    max_age: float = FIND_MAX_AGE,
    now: dt.datetime | None = None,
    **filters: Any,
) -> Availability:
    """``client.find(start, end, duration, **filters)``, kept in ``store`` while fresh.

    Parameters
    ----------
    client
        The notebook's client.
    store
        The notebooks' store folder (``NotebookData.store``), synced first.
    start, end, duration, **filters
        As :meth:`toolkit.Client.find`.
    max_age
        Seconds a kept answer is used for; 0 always asks.
    now
        The current time (UTC); the clock's when None.

    Returns
    -------
    Availability
        The slots, when ``$find`` answered, and the requests sent (0: kept).
    """

    now = now or dt.datetime.now(dt.UTC)
    folder = Path(store) / CACHE_FOLDER
    query = {k: str(v) for k, v in {"start": start, "end": end, "duration": duration}.items()}
    query |= {k: str(v) for k, v in filters.items()}
    key = _key(store_target(client), query)
    version = _appointments_version(Path(store))
    kept = _kept(folder, key, version, max_age, now)
    if kept is not None:
        return Availability(kept[0], kept[1], 0, True, max_age)
    before = client.requests_sent
    slots = client.find(start, end, duration, **filters)
    sent = client.requests_sent - before
    if version is not None:
        _keep(folder, key, slots, version, now)
    return Availability(slots, now, sent, False, max_age)
