"""Deterministic synthetic practice data for the mock deployment.

Everything is drawn from one ``random.Random(seed)`` in a fixed order, so a
seed always gives the same records, whatever day the mock is started. Dates
are anchored to :data:`ANCHOR` (2026-11-01T00:00:00Z): appointments cover the
365 days before it and the 61 days after it, and nothing generated is
"last updated" after it.

The practice: one practice group (``PG-``) with clinics (``CL-``, ``partOf``
the group, in Sydney, Brisbane and Perth first: :data:`CLINIC_SITES`); funders
(``FD-``: Medicare, DVA, NDIS and private insurers); other organizations
(``OG-``); external practices (``SP-``) and their practitioners (``EP-``); the
group's practitioners (``PR-``), each with a PractitionerRole at one clinic;
patients, coverages, referrals, appointments on a 30-minute grid (09:00 to
17:00 UTC on weekdays, whatever the clinic's zone), invoices and invoice lines.
Referral ``quantityUsed`` and ``amountUsed`` are computed from the appointments
and invoice lines that draw on the referral.

Appointments, invoices and invoice lines are stored as compact columns and
turned into JSON records only when first read, so that the large scale
(about 500,000 appointments) starts in seconds.

One module per resource family, each drawing its records from the shared
generator; :mod:`~toolkit.mock.data.practice` calls them in order:

* :mod:`~toolkit.mock.data.base`: the anchor, the grid constants, scales and helpers
* :mod:`~toolkit.mock.data.organizations`: group, clinics, funders, others, external practices
* :mod:`~toolkit.mock.data.practitioners`: practitioners and their roles
* :mod:`~toolkit.mock.data.services`: HealthcareServices and ChargeItemDefinitions (the fees)
* :mod:`~toolkit.mock.data.patients` and :mod:`~toolkit.mock.data.coverage`
* :mod:`~toolkit.mock.data.referrals`: referrals and their usage
* :mod:`~toolkit.mock.data.appointments`: the appointments on the slot grid
* :mod:`~toolkit.mock.data.billing`: invoices and invoice lines
* :mod:`~toolkit.mock.data.grid`: the slot grid the app books on
"""

from __future__ import annotations

from toolkit.mock.data.base import (
    ANCHOR,
    DAY,
    GRID_MINUTES,
    GRID_START_HOUR,
    GRID_UNITS,
    PAST_DAYS,
    SCALES,
    SLOT_HORIZON_DAYS,
    Scale,
    ScaleName,
    iso,
    iso_date,
    ref,
)
from toolkit.mock.data.grid import DayGrid
from toolkit.mock.data.organizations import CLINIC_SITES
from toolkit.mock.data.practice import PracticeData, generate

__all__ = [
    "ANCHOR",
    "CLINIC_SITES",
    "DAY",
    "GRID_MINUTES",
    "GRID_START_HOUR",
    "GRID_UNITS",
    "PAST_DAYS",
    "SCALES",
    "SLOT_HORIZON_DAYS",
    "DayGrid",
    "PracticeData",
    "Scale",
    "ScaleName",
    "generate",
    "iso",
    "iso_date",
    "ref",
]
