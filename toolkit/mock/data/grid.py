"""The slot grid of ``$find`` and ``$book``: which 30-minute units of which role are taken.

Apart from the resource modules because the app keeps using it after generation:
every booking, PATCH and delete moves occupancy on it.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from toolkit.mock.data.base import (
    ANCHOR,
    DAY,
    GRID_MINUTES,
    GRID_START_HOUR,
    GRID_UNITS,
    SLOT_HORIZON_DAYS,
)

__all__ = ["DayGrid"]


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

    @staticmethod
    def on_grid(start: int, minutes: int) -> bool:
        """Whether [start, start + minutes) lies on the slot grid of one weekday."""
        if minutes <= 0 or start % (GRID_MINUTES * 60):
            return False
        if start < ANCHOR or start >= ANCHOR + SLOT_HORIZON_DAYS * DAY:
            return False
        day = start - start % DAY
        if time.gmtime(day).tm_wday >= 5:
            return False
        first = day + GRID_START_HOUR * 3600
        last = first + GRID_UNITS * GRID_MINUTES * 60
        return first <= start and start + minutes * 60 <= last
