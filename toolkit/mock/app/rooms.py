"""The mock's handlers, room by room, joined into one application object."""

from __future__ import annotations

from toolkit.mock.app.controls import ControlRoom
from toolkit.mock.app.scheduling import SchedulingRoom


class MockApp(SchedulingRoom, ControlRoom):
    """Handlers bound to one :class:`MockState`: every room's, over ``MockCore``.

    Scheduling builds on the listing and writing rooms (a ``$find`` answer is a
    Bundle page; ``$book`` creates an Appointment), so it is their subclass.
    """
