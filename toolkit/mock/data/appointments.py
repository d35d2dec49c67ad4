"""Appointments on the slot grid, kept as compact columns and built into records when read.

Every practice role has 30-minute units from 09:00 to 17:00 UTC on weekdays,
for the :data:`~toolkit.mock.data.base.PAST_DAYS` before the anchor and the
:data:`~toolkit.mock.data.base.SLOT_HORIZON_DAYS` after it. A unit starts an
appointment (of one or two units) with the probability that fills the scale's
count; past appointments are mostly attended, future ones booked or confirmed.
Non-cancelled appointments take their units on the :class:`DayGrid`. The
large scale has about 500,000 of them, hence columns, not dicts.
"""

from __future__ import annotations

import calendar
import random
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

from toolkit.mock.data.base import (
    ANCHOR,
    DAY,
    GRID_MINUTES,
    GRID_UNITS,
    PAST_DAYS,
    SLOT_HORIZON_DAYS,
    codes,
    extension,
    iso,
    link,
    meta,
    mix,
)
from toolkit.mock.data.grid import UTC_ZONE, DayGrid, local_date, opening, weekdays
from toolkit.mock.store import Record

__all__ = [
    "APPOINTMENT_BASE",
    "ATTENDED",
    "BOOKED",
    "CANCELLED",
    "CONFIRMED",
    "NOSHOW",
    "STATUS_NAMES",
    "AppointmentBuilder",
    "Appointments",
    "sample_appointments",
]

APPOINTMENT_BASE = 10_000_001
"""Id of the first Appointment (ids rise with the start time)."""
IN_CLINIC, TELEHEALTH = codes("Appointment", "location-type", "clinic", "telehealth")
LOCATION_TYPE = extension("Appointment", "location-type")
PARTICIPANT_STATUS = extension("Appointment", "participant.appointment-participant-status")
PARTICIPANT_INVOICE = extension("Appointment", "participant.appointment-participant-invoice")
SUPPORTING = link("Appointment", "supportingInformation")
ROLE_ACTOR = link("Appointment", "participant.actor", "PractitionerRole")
PATIENT_ACTOR = link("Appointment", "participant.actor", "Patient")
INVOICE = link("Appointment", "participant.appointment-participant-invoice")
PARTICIPATION_TYPE_SYSTEM = "http://terminology.hl7.org/CodeSystem/v3-ParticipationType"
"""FHIR's participation types; the facts name ATND for the practitioner (not in the catalogue)."""

# appointment status codes (participant status): column values, named from the catalogue
BOOKED, CONFIRMED, ATTENDED, CANCELLED, NOSHOW = range(5)
STATUS_NAMES = codes(
    "Appointment",
    "participant.appointment-participant-status",
    "booked",
    "confirmed",
    "attended",
    "cancelled",
    "noshow",
)
"""Codes by status column value (the mock never leaves an appointment ``arrived``)."""
DESCRIPTIONS = (
    "Follow-up session",
    "Review of home exercise programme",
    "Discuss progress with carer present",
)


@dataclass(slots=True)
class Appointments:
    """The appointments as columns, one entry per appointment index (chronological)."""

    start: list[int] = field(default_factory=list)
    minutes: list[int] = field(default_factory=list)
    role: list[int] = field(default_factory=list)
    patient: list[int] = field(default_factory=list)
    status: list[int] = field(default_factory=list)
    service: list[int] = field(default_factory=list)
    """Index in :data:`~toolkit.mock.data.services.SERVICES`."""
    created: list[int] = field(default_factory=list)
    zones: list[ZoneInfo] = field(default_factory=list)
    """Each role's time zone, by role index (not a column: the clock of each role)."""

    def local_day(self, i: int, epoch: int) -> int:
        """Midnight (UTC) of the calendar date ``epoch`` falls on in appointment ``i``'s
        clinic: the date a clinic writes on its papers, as a date search reads it."""
        role = self.role[i]
        zone = self.zones[role] if role < len(self.zones) else UTC_ZONE
        return calendar.timegm(local_date(zone, epoch).timetuple())

    def updated(self, i: int) -> int:
        """``meta.lastUpdated`` of appointment ``i``: after the visit, or when booked."""
        if self.start[i] < ANCHOR:
            return min(self.start[i] + self.minutes[i] * 60 + 1800, ANCHOR - 60)
        return self.created[i]

    def columns(self) -> tuple[list[int], ...]:
        """Every column, in declaration order."""
        return (
            self.start,
            self.minutes,
            self.role,
            self.patient,
            self.status,
            self.service,
            self.created,
        )


def _sample_day(
    out: Appointments, rand: random.Random, r: int, base: int, pool: list[int], p_start: float
) -> None:
    """Fill one role's day from ``base`` (its 09:00, local): a unit starts an appointment
    with probability ``p_start``."""
    draw = rand.random
    unit = GRID_MINUTES * 60
    u = 0
    while u < GRID_UNITS:
        if draw() >= p_start:
            u += 1
            continue
        units = 2 if draw() < 0.35 and u + 1 < GRID_UNITS else 1
        start = base + u * unit
        u += units
        out.start.append(start)
        out.minutes.append(units * GRID_MINUTES)
        out.role.append(r)
        out.patient.append(pool[int(draw() * len(pool))])
        x = draw()
        if start < ANCHOR:
            status = ATTENDED if x < 0.82 else CANCELLED if x < 0.94 else NOSHOW
        else:
            status = BOOKED if x < 0.6 else CONFIRMED if x < 0.95 else CANCELLED
        out.status.append(status)
        service = (0 if draw() < 0.2 else 2) if units == 2 else (1 if draw() < 0.8 else 3)
        out.service.append(service)
        out.created.append(min(start - int(draw() * 40 * DAY) - 3600, ANCHOR - 7200))


def _chronological(cols: Appointments) -> Appointments:
    # chronological order gives appointment ids rising with time, like a real system
    order = sorted(range(len(cols.start)), key=cols.start.__getitem__)
    start, minutes, role, patient, status, service, created = (
        [column[i] for i in order] for column in cols.columns()
    )
    return Appointments(start, minutes, role, patient, status, service, created, cols.zones)


def sample_appointments(
    rng: random.Random, count: int, role_patients: list[list[int]], grid: DayGrid
) -> Appointments:
    """About ``count`` appointments over every role's weekdays, in chronological order.

    Each role's appointments go to its own patients; non-cancelled ones take
    their units on ``grid``.
    """
    days = weekdays(ANCHOR - PAST_DAYS * DAY, PAST_DAYS + SLOT_HORIZON_DAYS)
    per_day = count / (len(role_patients) * len(days))
    p_start = per_day / (GRID_UNITS - 0.35 * per_day)
    cols = Appointments()
    for r, pool in enumerate(role_patients):
        zone = grid.zone(r)
        for day in days:
            first = len(cols.start)
            _sample_day(cols, rng, r, opening(zone, day), pool, p_start)
            for i in range(first, len(cols.start)):
                if cols.status[i] != CANCELLED:
                    grid.take(r, cols.start[i], cols.minutes[i])
    cols.zones = list(grid.zones)
    return _chronological(cols)


def _attender() -> list[Record]:
    """The participant ``type`` of the practitioner (a fresh copy: records are edited in place)."""
    return [
        {
            "coding": [
                {
                    "system": PARTICIPATION_TYPE_SYSTEM,
                    "code": "ATND",
                    "display": "attender",
                }
            ]
        }
    ]


@dataclass(frozen=True, slots=True)
class AppointmentBuilder:
    """Builds appointment ``i``'s record from the columns (the collection's lazy builder)."""

    seed: int
    appts: Appointments
    invoice_of: list[int]
    """The invoice index of each appointment (-1 for none)."""
    patient_ids: list[str]
    roles: list[str]
    role_services: list[list[str]]
    """Per role, the HealthcareService ids of its clinic (by service index)."""
    invoice_base: int

    def _patient(self, i: int) -> Record:
        part: Record = {
            "actor": PATIENT_ACTOR(self.patient_ids[self.appts.patient[i]]),
            "modifierExtension": [
                {
                    "url": PARTICIPANT_STATUS[0],
                    PARTICIPANT_STATUS[1]: {"code": STATUS_NAMES[self.appts.status[i]]},
                }
            ],
        }
        if self.invoice_of[i] >= 0:
            part["extension"] = [
                {
                    "url": PARTICIPANT_INVOICE[0],
                    PARTICIPANT_INVOICE[1]: INVOICE(str(self.invoice_base + self.invoice_of[i])),
                }
            ]
        return part

    def _practitioner(self, i: int) -> Record:
        status = self.appts.status[i]
        code = STATUS_NAMES[status if status in (ATTENDED, CANCELLED) else BOOKED]
        return {
            "type": _attender(),
            "actor": ROLE_ACTOR(self.roles[self.appts.role[i]]),
            "modifierExtension": [
                {"url": PARTICIPANT_STATUS[0], PARTICIPANT_STATUS[1]: {"code": code}}
            ],
        }

    def __call__(self, i: int) -> Record:
        a = self.appts
        start, minutes, service = a.start[i], a.minutes[i], a.service[i]
        h = mix(self.seed, i, 1)
        rec: Record = {
            "resourceType": "Appointment",
            "id": str(APPOINTMENT_BASE + i),
            "meta": meta(a.updated(i)),
            "extension": [
                {
                    "url": LOCATION_TYPE[0],
                    LOCATION_TYPE[1]: TELEHEALTH if service == 3 else IN_CLINIC,
                }
            ],
            "start": iso(start),
            "end": iso(start + minutes * 60),
            "minutesDuration": minutes,
            "created": iso(a.created[i]),
            "supportingInformation": [SUPPORTING(self.role_services[a.role[i]][service])],
            "participant": [self._practitioner(i), self._patient(i)],
        }
        if h % 10 < 3:
            rec["description"] = DESCRIPTIONS[h % 3]
        if h % 17 == 0:
            del rec["minutesDuration"]
        return rec
