"""In-memory record store of the mock: one :class:`Collection` per resource type.

Records are kept as serialised JSON bytes (orjson) so that reads and Bundle
pages are built by joining bytes, not by re-encoding dicts. The large
collections (Appointment, InvoiceLine, Invoice) are *lazy*: a record is built
from compact per-index columns the first time it is asked for, which keeps the
large scale's start-up fast. Search keys (last updated, the resource's date,
the patient it belongs to) are plain per-index columns, so filtering and
sorting never have to materialise records.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

__all__ = ["Collection", "Store"]

Record = dict[str, Any]

_CACHE_LIMIT = 200_000


class Collection:
    """Records of one resource type, in insertion order (the unsorted list order)."""

    def __init__(self, name: str, builder: Callable[[int], Record] | None = None) -> None:
        self.name = name
        self.ids: list[str] = []
        self.pos: dict[str, int] = {}
        self.updated: list[float] = []
        """meta.lastUpdated per index, as epoch seconds."""
        self.date: list[float | None] = []
        """The resource's own date (Appointment start, Referral created...) per index."""
        self.owner: list[str | None] = []
        """The Patient id the record belongs to (subject, beneficiary, patient)."""
        self._builder = builder
        self._records: dict[int, Record] = {}
        self._bytes: OrderedDict[int, bytes] = OrderedDict()
        self._order: list[int] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, rid: object) -> bool:
        return rid in self.pos

    def add(
        self,
        rid: str,
        record: Record | None,
        *,
        updated: float,
        date: float | None = None,
        owner: str | None = None,
    ) -> int:
        """Append a record (or, with ``record=None``, a lazily built one)."""
        index = len(self.ids)
        self.ids.append(rid)
        self.pos[rid] = index
        self.updated.append(updated)
        self.date.append(date)
        self.owner.append(owner)
        if record is not None:
            self._records[index] = record
        if self._order is not None:
            self._order.append(index)
        return index

    def order(self) -> Sequence[int]:
        """Indices in the default list order: the order records were last written.

        The seeded data comes in generation order; every create appends, and every
        PATCH or touch moves the record to the end (:meth:`move_to_end`). So a
        record written while a client walks the pages moves, and the walk sees one
        record twice and misses another, as it would on a changing collection.
        """
        return range(len(self.ids)) if self._order is None else self._order

    def move_to_end(self, index: int) -> None:
        """Put ``index`` last in the default list order (it was just written)."""
        if self._order is None:
            self._order = list(range(len(self.ids)))
        self._order.remove(index)
        self._order.append(index)

    def remove(self, rid: str) -> int:
        """Delete a record: it leaves the list order and its id stops resolving.

        The index keeps its search columns (indices are positions), but nothing
        reaches it any more: reads and references go through :attr:`pos`, lists
        through :meth:`order`.
        """
        index = self.pos.pop(rid)
        if self._order is None:
            self._order = list(range(len(self.ids)))
        self._order.remove(index)
        self._records.pop(index, None)
        self._bytes.pop(index, None)
        return index

    def rebuild(self, index: int, *, updated: float) -> None:
        """A lazily built record changed at ``updated``: build it again when next read,
        and move it last in list order (it was just written)."""
        self._records.pop(index, None)
        self._bytes.pop(index, None)
        self.updated[index] = updated
        self.move_to_end(index)

    def records_built(self) -> list[tuple[int, Record]]:
        """The records held as dicts so far (eager ones, lazily built ones once read)."""
        return list(self._records.items())

    def set_built(self, index: int, record: Record) -> None:
        """Replace a held record without touching its search keys (a change of form)."""
        self._records[index] = record
        self._bytes.pop(index, None)

    def wrap_builder(self, convert: Callable[[Record], Record]) -> None:
        """Pass every lazily built record through ``convert``."""
        inner = self._builder
        if inner is not None:
            self._builder = lambda index: convert(inner(index))

    def prime(self, index: int, data: bytes) -> None:
        """Cache ``data`` as the JSON of record ``index`` (already serialised by the caller)."""
        self._bytes[index] = data

    def record(self, index: int) -> Record:
        """The record at ``index`` as a dict (shared: copy before changing it)."""
        rec = self._records.get(index)
        if rec is None:
            if self._builder is None:
                msg = f"{self.name} record {index} has no data"
                raise LookupError(msg)
            rec = self._builder(index)
            if len(self._records) < _CACHE_LIMIT:
                self._records[index] = rec
        return rec

    def get(self, rid: str) -> Record | None:
        index = self.pos.get(rid)
        return None if index is None else self.record(index)

    def raw(self, index: int) -> bytes:
        """The record at ``index`` as JSON bytes, cached."""
        data = self._bytes.get(index)
        if data is None:
            data = orjson.dumps(self.record(index))
            self._bytes[index] = data
            if len(self._bytes) > _CACHE_LIMIT:
                self._bytes.popitem(last=False)
        return data

    def replace(
        self,
        index: int,
        record: Record,
        *,
        updated: float,
        date: float | None = None,
        owner: str | None = None,
    ) -> None:
        """Store a changed record (a fresh dict) in place of the old one."""
        self._records[index] = record
        self._bytes.pop(index, None)
        self.updated[index] = updated
        self.date[index] = date
        self.owner[index] = owner


class Store:
    """Every collection of one mock deployment, by resource type."""

    def __init__(self) -> None:
        self.collections: dict[str, Collection] = {}

    def collection(self, name: str, builder: Callable[[int], Record] | None = None) -> Collection:
        coll = self.collections.get(name)
        if coll is None:
            coll = Collection(name, builder)
            self.collections[name] = coll
        return coll

    def __getitem__(self, name: str) -> Collection:
        return self.collections[name]

    def names(self, types: Iterable[str]) -> dict[str, list[tuple[str, str]]]:
        """``(id, name)`` of every record of ``types`` with a string ``name``, in list order."""
        out: dict[str, list[tuple[str, str]]] = {}
        for rtype in sorted(types):
            coll = self.collections.get(rtype)
            if coll is not None:
                records = ((coll.ids[i], coll.record(i).get("name")) for i in coll.order())
                out[rtype] = [(rid, name) for rid, name in records if isinstance(name, str)]
        return out

    def resolves(self, reference: str) -> bool:
        """Whether ``/main/<Type>/<id>`` names a record of this store."""
        parts = reference.split("/")
        if len(parts) != 4 or parts[0] != "" or parts[1] != "main":
            return False
        coll = self.collections.get(parts[2])
        return coll is not None and parts[3] in coll
