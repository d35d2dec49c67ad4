"""Schedules: one per group PractitionerRole, the frame its Slots hang in.

FHIR's Schedule is whose time is bookable and over what horizon; the facts say the
vendor documents ``GET /main/Schedule`` and a public client uses it. Each group
role (a ``PR-`` role at a clinic) gets one, active, over the Slots' horizon, with
its working hours and its clinic's time zone in ``comment`` (the clock the grid
follows, :mod:`toolkit.mock.data.grid`).
"""

from __future__ import annotations

from toolkit.mock.data.base import (
    ANCHOR,
    DAY,
    GRID_MINUTES,
    GRID_START_HOUR,
    GRID_UNITS,
    SLOT_HORIZON_DAYS,
    Drawing,
    family,
    iso,
    link,
    meta,
    past,
)
from toolkit.mock.data.organizations import clinic_zone

__all__ = ["add_schedules"]

ACTOR = link("Schedule", "actor", "PractitionerRole")


def _hours() -> str:
    close = GRID_START_HOUR * 60 + GRID_UNITS * GRID_MINUTES
    return f"{GRID_START_HOUR:02d}:00-{close // 60:02d}:{close % 60:02d}"


@family("schedules")
def add_schedules(drawing: Drawing) -> None:
    """Add one Schedule per group PractitionerRole, in role order."""
    roles = drawing.store["PractitionerRole"]
    orgs = drawing.store["Organization"]
    coll = drawing.store.collection("Schedule")
    for i in roles.order():
        role = roles.record(i)
        rid = roles.ids[i]
        clinic = (role.get("organization") or {}).get("reference", "").rsplit("/", 1)[-1]
        if not rid.startswith("PR-") or clinic not in orgs.pos:
            continue  # an external role books nothing here
        zone = clinic_zone(orgs.record(orgs.pos[clinic]))
        sid = f"SC-{rid.removeprefix('PR-')}"
        updated = past(drawing.rng, 7, 60)
        record = {
            "resourceType": "Schedule",
            "id": sid,
            "meta": meta(updated),
            "active": True,
            "actor": [ACTOR(rid)],
            "planningHorizon": {
                "start": iso(ANCHOR),
                "end": iso(ANCHOR + SLOT_HORIZON_DAYS * DAY),
            },
            "comment": f"Weekdays {_hours()} {zone}",
        }
        coll.add(sid, record, updated=updated)
