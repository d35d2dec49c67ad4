"""Slots: every 30-minute unit of the slot grid, per group role, free or busy.

A Slot is built when read, from the grid as it is then: ``busy`` while an
appointment that is not cancelled covers it, else ``free`` (what ``$find`` proposes
from). The collection holds one index per unit of the grid's horizon (weekdays,
09:00 to 17:00 on the clock of each role's clinic), ordered by local date, unit of
the day, then role (so by start time within one time zone). When a booking, PATCH, cancel or
delete turns a unit taken or free again, :func:`slot_changed` stamps that Slot with
the time of the change and moves it last, like any other write.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from toolkit.mock.data.base import (
    ANCHOR,
    DAY,
    GRID_MINUTES,
    GRID_UNITS,
    SLOT_HORIZON_DAYS,
    codes,
    iso,
    link,
    meta,
)
from toolkit.mock.data.grid import DayGrid, local_date, opening, weekdays
from toolkit.mock.store import Collection, Record, Store

__all__ = ["SLOTS_PUBLISHED", "SlotIndex", "add_slots", "slot_changed"]

FREE, BUSY = codes("Slot", "status", "free", "busy")
ROLE = link("Slot", "practitionerRole")
SERVICE = link("Slot", "healthcareService")
SCHEDULE = link("Slot", "schedule")
SLOTS_PUBLISHED = ANCHOR - 7 * DAY
"""``meta.lastUpdated`` of a Slot nothing has changed since the schedule was published."""
UNIT = GRID_MINUTES * 60


@dataclass(frozen=True, slots=True)
class SlotIndex:
    """Where the Slot of (role index, unit start) sits in the collection."""

    days: tuple[dt.date, ...]
    """The local weekdays of the horizon, in order (the same dates in every zone)."""
    roles: int
    position: dict[dt.date, int]
    """Each of :attr:`days` -> its position."""
    zones: tuple[ZoneInfo, ...]
    """Each role's time zone."""
    openings: tuple[tuple[int, ...], ...]
    """``openings[role][k]``: the epoch of 09:00 on ``days[k]`` in the role's zone."""

    def __call__(self, role: int, unit: int) -> int | None:
        """The index of that Slot; ``None`` for a unit outside the grid."""
        if not 0 <= role < self.roles:
            return None
        k = self.position.get(local_date(self.zones[role], unit))
        if k is None:
            return None
        offset = unit - self.openings[role][k]
        if offset < 0 or offset % UNIT or offset // UNIT >= GRID_UNITS:
            return None
        return (k * GRID_UNITS + offset // UNIT) * self.roles + role

    def unit(self, index: int) -> tuple[int, int]:
        """(role index, unit start epoch) of the Slot at ``index``."""
        slot, role = divmod(index, self.roles)
        k, u = divmod(slot, GRID_UNITS)
        return role, self.openings[role][k] + u * UNIT


@dataclass(slots=True)
class _SlotBuilder:
    grid: DayGrid
    index: SlotIndex
    roles: list[str]
    role_service: list[str]
    updated: list[float]
    """The collection's ``updated`` column (``meta.lastUpdated`` of each Slot), set once
    the collection exists."""

    def __call__(self, index: int) -> Record:
        role, unit = self.index.unit(index)
        return {
            "resourceType": "Slot",
            "id": f"{self.roles[role]}-{unit}",
            "meta": meta(self.updated[index]),
            "start": iso(unit),
            "end": iso(unit + UNIT),
            "status": BUSY if self.grid.taken[(role, unit)] > 0 else FREE,
            "practitionerRole": ROLE(self.roles[role]),
            "healthcareService": SERVICE(self.role_service[role]),
            # the role's Schedule (toolkit.mock.data.schedules): SC- and the role's number
            "schedule": SCHEDULE(f"SC-{self.roles[role].removeprefix('PR-')}"),
        }


def add_slots(store: Store, grid: DayGrid, roles: list[str], role_service: list[str]) -> SlotIndex:
    """Index every Slot of the horizon; their records are built when read."""
    days = weekdays(ANCHOR, SLOT_HORIZON_DAYS)
    zones = tuple(grid.zone(r) for r in range(len(roles)))
    openings = tuple(tuple(opening(zone, day) for day in days) for zone in zones)
    index = SlotIndex(
        tuple(days), len(roles), {day: k for k, day in enumerate(days)}, zones, openings
    )
    builder = _SlotBuilder(grid, index, roles, role_service, [])
    coll = store.collection("Slot", builder)
    builder.updated = coll.updated
    for k in range(len(days)):
        for u in range(GRID_UNITS):
            for r, rid in enumerate(roles):
                start = openings[r][k] + u * UNIT
                coll.add(f"{rid}-{start}", None, updated=SLOTS_PUBLISHED, date=float(start))
    return index


def slot_changed(coll: Collection, index: SlotIndex, role: int, unit: int, now: float) -> None:
    """The grid unit (``role``, ``unit``) turned taken or free at ``now``."""
    position = index(role, unit)
    if position is not None and coll.ids[position] in coll:  # not deleted by a test control
        coll.rebuild(position, updated=now)
