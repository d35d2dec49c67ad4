"""The slot grid of ``$find`` and ``$book``: which 30-minute units of which role are taken.

Apart from the resource modules because the app keeps using it after generation:
every booking, PATCH and delete moves occupancy on it.

Clinic hours are kept in each clinic's own time: a role works weekdays from
09:00 to 17:00 on the clock of its clinic's time zone (the state of the clinic's
address), so a Sydney role's day starts at 22:00 or 23:00 UTC the day before, and
a weekday is a weekday where the clinic is.
"""

from __future__ import annotations

import collections
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

from toolkit.mock.data.base import (
    ANCHOR,
    DAY,
    GRID_MINUTES,
    GRID_START_HOUR,
    GRID_UNITS,
    SLOT_HORIZON_DAYS,
)

__all__ = ["UTC_ZONE", "DayGrid", "local_date", "opening", "weekdays"]

UTC_ZONE = ZoneInfo("UTC")
UNIT = GRID_MINUTES * 60


def opening(zone: ZoneInfo, day: dt.date) -> int:
    """The epoch of 09:00 (the grid's first hour) on ``day`` in ``zone``."""
    return int(dt.datetime.combine(day, dt.time(GRID_START_HOUR), tzinfo=zone).timestamp())


def local_date(zone: ZoneInfo, epoch: float) -> dt.date:
    """The calendar date in ``zone`` at ``epoch``."""
    return dt.datetime.fromtimestamp(epoch, zone).date()


def weekdays(first: int, days: int) -> list[dt.date]:
    """The Monday-to-Friday calendar dates of the ``days`` days from the UTC date of ``first``."""
    start = dt.datetime.fromtimestamp(first, dt.UTC).date()
    return [day for day in (start + dt.timedelta(days=d) for d in range(days)) if day.weekday() < 5]


@dataclass(slots=True)
class DayGrid:
    """The slot grid: which 30-minute units of which PractitionerRole are taken."""

    taken: collections.Counter[tuple[int, int]] = field(default_factory=collections.Counter)
    """How many non-cancelled appointments cover each (role index, unit start epoch).

    A count, not a set: a PATCH may move a second appointment onto a taken unit,
    and moving one of the two away again must leave the unit taken.
    """

    on_change: Callable[[int, int], None] | None = None
    """Called with (role index, unit start epoch) when a unit turns taken or free again
    (the Slot collection's records follow the grid)."""

    zones: list[ZoneInfo] = field(default_factory=list)
    """Each role's time zone (its clinic's), by role index; UTC for a role past the end."""

    def zone(self, role: int) -> ZoneInfo:
        """The time zone whose clock ``role``'s working hours follow."""
        return self.zones[role] if 0 <= role < len(self.zones) else UTC_ZONE

    def units(self, start: int, minutes: int) -> list[int]:
        """The grid units [start, start + minutes) touches, aligned to the grid.

        An appointment PATCHed to 09:15 occupies the 09:00 and 09:30 units; without
        the alignment it would occupy units no booking ever looks at.
        """
        unit = GRID_MINUTES * 60
        first = start - start % unit
        end = start + max(1, minutes) * 60
        return list(range(first, end, unit))

    def is_free(self, role: int, start: int, minutes: int) -> bool:
        return all(self.taken[(role, u)] <= 0 for u in self.units(start, minutes))

    def take(self, role: int, start: int, minutes: int) -> None:
        for u in self.units(start, minutes):
            self.taken[(role, u)] += 1
            if self.taken[(role, u)] == 1 and self.on_change is not None:
                self.on_change(role, u)

    def release(self, role: int, start: int, minutes: int) -> None:
        for u in self.units(start, minutes):
            held = self.taken[(role, u)]
            if held > 1:
                self.taken[(role, u)] = held - 1
                continue
            del self.taken[(role, u)]
            if held == 1 and self.on_change is not None:
                self.on_change(role, u)

    def on_grid(self, role: int, start: int, minutes: int) -> bool:
        """Whether [start, start + minutes) lies on ``role``'s grid of one local weekday."""
        if minutes <= 0 or start < ANCHOR or start >= ANCHOR + SLOT_HORIZON_DAYS * DAY:
            return False
        zone = self.zone(role)
        day = local_date(zone, start)
        if day.weekday() >= 5:
            return False
        first = opening(zone, day)
        last = first + GRID_UNITS * UNIT
        return first <= start and (start - first) % UNIT == 0 and start + minutes * 60 <= last
