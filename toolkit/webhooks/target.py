"""Where the receiver applies its changes: a Parquet store, or one deployment of a lake.

Both answer the same five questions: where the journal lives, which resource types a
sync has made tables of, how a batch of changes is committed, how a catch-up sync
runs, and which version of a record is stored. The store's are
:func:`toolkit.store.apply_changes` and :func:`toolkit.store.sync`; the lake's are
:func:`toolkit.lake.apply_changes` (made for webhook batches, safe beside a sync of
the same deployment) and :func:`toolkit.lake.sync`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.errors import PmtkError
from toolkit.store import apply_changes, load, read_manifest, sync
from toolkit.store.merge import drop_missing_waiting, record_catch_up
from toolkit.store.resume import next_since

LAKE_JOURNALS = "_pmtk_listen"
"""``LAKE/_pmtk_listen/<deployment>/.webhooks/``: a lake receiver's journal and notes."""


def synced_types(store: Path) -> frozenset[str]:
    """The resource types whose table a sync made (an entry with ``last_sync``).

    A table that webhook deliveries alone would make holds a handful of records and
    looks complete; changes of a type without a synced table wait instead.
    """
    try:
        resources = read_manifest(store).get("resources") or {}
    except PmtkError:
        return frozenset()
    return frozenset(
        rtype
        for rtype, entry in resources.items()
        if isinstance(entry, dict) and entry.get("last_sync") is not None
    )


@dataclass(frozen=True, slots=True)
class Synced:
    """One resource of a catch-up sync: its status, records fetched and error."""

    resource: str
    status: str
    fetched: int
    error: str | None


def _stamps(frame: Any, ids: Sequence[str]) -> dict[str, str | None]:
    import polars as pl

    lazy = frame if isinstance(frame, pl.LazyFrame) else frame.lazy()
    rows = (
        lazy.filter(pl.col("id").is_in(list(ids)))
        .select("id", pl.col("last_updated").dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ"))
        .collect()
    )
    return dict(zip(rows["id"].to_list(), rows["last_updated"].to_list(), strict=True))


class StoreTarget:
    """A Parquet store (``pmtk listen --store DIR``): the journal in ``DIR/.webhooks/``.

    Its catch-up walks beside the worker (:mod:`toolkit.webhooks.catchup`): a type
    with a synced table is walked from :meth:`since` and written through
    :meth:`apply`; a type without one is synced (:meth:`sync`, under the store's lock).
    """

    walks_beside_worker = True

    def __init__(self, root: Path) -> None:
        self.root = root
        self.journal_root = root
        self.shown = str(root)

    def since(self, rtype: str) -> str | None:
        """The ``_lastUpdated`` bound a catch-up of ``rtype`` walks from; ``None`` when no
        sync has made its table (or the store cannot be read: a sync repairs or refuses)."""

        try:
            entry = (read_manifest(self.root).get("resources") or {}).get(rtype)
        except PmtkError:
            return None
        if not isinstance(entry, dict) or entry.get("last_sync") is None:
            return None
        if entry.get("status") != "ok" or not entry.get("tables"):
            return None
        return next_since(entry)

    def drop_missing(self, rtype: str, present: set[str], older_than: str) -> list[str]:
        return drop_missing_waiting(self.root, rtype, present, older_than=older_than)

    def record_catch_up(self, rtype: str, **walk: Any) -> bool:
        return record_catch_up(self.root, rtype, **walk)

    def synced_types(self) -> frozenset[str]:
        return synced_types(self.root)

    def apply(
        self,
        rtype: str,
        upserts: Sequence[Mapping[str, Any]],
        deletes: Sequence[str],
        event: Mapping[str, Any] | None,
        errors: Any,
    ) -> Any:
        return apply_changes(
            rtype, self.root, upserts=upserts, deletes=deletes, event=event, errors=errors
        )

    def sync(self, client: Any, types: Sequence[str]) -> list[Synced]:
        summary = sync(client, self.root, resources=list(types), progress=False)
        return [Synced(r.resource, r.status, r.fetched, r.error) for r in summary.resources]

    def stamps(self, rtype: str, ids: Sequence[str]) -> dict[str, str | None]:
        try:
            return _stamps(load(rtype, self.root, lazy=True), ids)
        except PmtkError:
            return {}  # no table yet


class LakeTarget:
    """One deployment of a lake at a local path (``pmtk listen --store LAKE --deployment
    NAME``, as ``pmtk sync --out LAKE --deployment NAME``)."""

    def __init__(self, lake: Path, deployment: str) -> None:
        from toolkit.lake.location import check_deployment_name

        self.lake = lake
        self.deployment = check_deployment_name(deployment)
        self.journal_root = lake / LAKE_JOURNALS / self.deployment
        self.shown = f"{lake} (deployment {self.deployment})"

    def synced_types(self) -> frozenset[str]:
        from toolkit.lake import is_lake, pins

        try:
            if not is_lake(str(self.lake)):
                return frozenset()
            return frozenset(p.resource for p in pins(self.lake, self.deployment) if p.last_sync)
        except PmtkError:
            return frozenset()

    def apply(
        self,
        rtype: str,
        upserts: Sequence[Mapping[str, Any]],
        deletes: Sequence[str],
        event: Mapping[str, Any] | None,
        errors: Any,
    ) -> Any:
        from toolkit.lake import apply_changes as apply_to_lake

        del event  # the lake keeps its own history of commits
        return apply_to_lake(
            self.lake, self.deployment, rtype, upserts=upserts, deletes=deletes, errors=errors
        )

    def sync(self, client: Any, types: Sequence[str]) -> list[Synced]:
        from toolkit.lake import sync as sync_lake

        summary = sync_lake(client, self.lake, deployment=self.deployment, resources=list(types))
        return [
            Synced(r.resource, r.status, r.records_fetched, r.error)
            for r in summary.resources.values()
        ]

    def stamps(self, rtype: str, ids: Sequence[str]) -> dict[str, str | None]:
        from toolkit.lake import load as load_lake

        try:
            return _stamps(load_lake(rtype, self.lake, deployment=self.deployment, lazy=True), ids)
        except PmtkError:
            return {}  # no table yet
