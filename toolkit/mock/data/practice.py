"""The orchestrator: one seeded ``random.Random`` through every resource module, in a fixed order.

The order of the steps below *is* the data: each module draws from the same
generator, so moving a step (or adding a draw inside one) changes every
record after it. ``tests/mock/test_data_pinned.py`` pins the result.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import random
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo

from toolkit.catalogue import forms
from toolkit.mock.data.appointments import (
    APPOINTMENT_BASE,
    AppointmentBuilder,
    Appointments,
    sample_appointments,
)
from toolkit.mock.data.base import ANCHOR, FAMILIES, SCALES, Drawing, Scale, codes
from toolkit.mock.data.billing import (
    INVOICE_BASE,
    LINE_BASE,
    Billing,
    InvoiceBuilder,
    LineBuilder,
    bill,
)
from toolkit.mock.data.coverage import COVERAGE_BASE
from toolkit.mock.data.grid import DayGrid
from toolkit.mock.data.organizations import (
    EXTERNAL_PRACTICE_BASE,
    Organizations,
    add_organizations,
    clinic_zone,
)
from toolkit.mock.data.patients import PATIENT_BASE, Patients, add_patients
from toolkit.mock.data.practitioners import (
    EXTERNAL_BASE,
    Practitioners,
    add_practitioners,
    link_role_services,
)
from toolkit.mock.data.referrals import (
    REFERRAL_BASE,
    Referrals,
    add_referrals,
    assign_roles,
    record_usage,
)
from toolkit.mock.data.services import add_charge_items, add_services
from toolkit.mock.data.slots import SlotIndex, add_slots
from toolkit.mock.shapes import Shapes, to_stored
from toolkit.mock.store import Record, Store

__all__ = ["PracticeData", "generate"]

(USUAL,) = codes("Patient", "name.use", "usual")


@dataclass(slots=True)
class PracticeData:
    """The generated store plus the lookups the app needs for $find and $book."""

    store: Store
    seed: int
    grid: DayGrid
    roles: list[str]
    """Ids of the group's PractitionerRoles (``PR-...``), by role index."""
    role_clinic: list[str]
    role_service: list[str]
    """The HealthcareService id a proposed appointment of each role is for."""
    next_ids: dict[str, int]
    slots: SlotIndex
    """Where each grid unit's Slot sits in the Slot collection."""


def _check(scale: str, shapes: str) -> None:
    if scale not in SCALES:
        msg = f"unknown scale {scale!r}; choose one of {', '.join(SCALES)}"
        raise ValueError(msg)
    if shapes not in ("live", "spec"):
        msg = f"unknown shapes {shapes!r}; choose live or spec"
        raise ValueError(msg)


def _add_lazy(
    store: Store,
    appts: Appointments,
    billing: Billing,
    builders: tuple[AppointmentBuilder, InvoiceBuilder, LineBuilder],
    patient_ids: list[str],
) -> None:
    """Index appointments, invoices and lines; their records are built when first read."""
    appt_builder, invoice_builder, line_builder = builders
    appointments = store.collection("Appointment", appt_builder)
    for i in range(len(appts.start)):
        appointments.add(
            str(APPOINTMENT_BASE + i),
            None,
            updated=appts.updated(i),
            date=float(appts.start[i]),
            owner=patient_ids[appts.patient[i]],
        )
    invoices = store.collection("Invoice", invoice_builder)
    for k, i in enumerate(billing.invoice_appt):
        invoices.add(
            str(INVOICE_BASE + k),
            None,
            updated=appts.updated(i),
            date=float(billing.invoice_day(k)),
            owner=patient_ids[appts.patient[i]],
        )
    lines = store.collection("InvoiceLine", line_builder)
    for li, i in enumerate(billing.line_appt):
        entered = billing.entered(li)
        lines.add(
            str(LINE_BASE + li),
            None,
            updated=min(entered + 600, ANCHOR - 60),
            date=float(entered),
            owner=patient_ids[appts.patient[i]],
        )


@dataclass(frozen=True, slots=True)
class _Directory:
    """The records drawn eagerly, which the appointments and their bills point at."""

    orgs: Organizations
    prs: Practitioners
    patients: Patients
    refs: Referrals
    role_patients: list[list[int]]
    """Each role's patients (by patient index)."""
    role_services: list[list[str]]
    """Each role's HealthcareService ids (those of its clinic, by service index)."""


def _directory(store: Store, rng: random.Random, sc: Scale) -> _Directory:
    """Organizations, practitioners, services, fees, patients, coverage and referrals."""
    orgs = add_organizations(store, rng, sc)
    prs = add_practitioners(store, rng, sc, orgs.clinics, orgs.external_practices)
    service_ids = add_services(store, rng, orgs.clinics)
    add_charge_items(store, rng)
    patients = add_patients(store, rng, sc, prs.externals, orgs.funders)
    role_patients, patient_role = assign_roles(rng, sc.patients, len(prs.roles))
    refs = add_referrals(
        store,
        rng,
        patient_ids=patients.ids,
        patient_cover=patients.cover,
        patient_role=patient_role,
        roles=prs.roles,
        externals=prs.externals,
    )
    clinic_index = {cid: c for c, cid in enumerate(orgs.clinics)}
    role_services = [service_ids[clinic_index[c]] for c in prs.role_clinic]
    link_role_services(store, prs.roles, role_services)
    return _Directory(orgs, prs, patients, refs, role_patients, role_services)


def _visits(store: Store, rng: random.Random, seed: int, count: int, d: _Directory) -> DayGrid:
    """Appointments, their bills and the referral usage; returns the booked slot grid."""
    orgs = store["Organization"]
    grid = DayGrid(
        zones=[ZoneInfo(clinic_zone(orgs.record(orgs.pos[c]))) for c in d.prs.role_clinic]
    )
    appts = sample_appointments(rng, count, d.role_patients, grid)
    billing = bill(rng, seed, appts)
    referral_of = record_usage(store, d.refs, appts, billing)
    ids, roles = d.patients.ids, d.prs.roles
    lines = LineBuilder(
        billing, ids, roles, referral_of, d.refs.records, d.patients.cover, d.orgs.funders
    )
    builders = (
        AppointmentBuilder(
            seed, appts, billing.invoice_of, ids, roles, d.role_services, INVOICE_BASE
        ),
        InvoiceBuilder(billing, ids, lines.funder),
        lines,
    )
    _add_lazy(store, appts, billing, builders, ids)
    return grid


def generate(seed: int = 0, scale: str = "small", shapes: Shapes = "live") -> PracticeData:
    """Build the whole store for ``seed`` and ``scale`` (deterministic).

    ``shapes`` is the JSON form of the records (:mod:`toolkit.mock.shapes`); the
    same seed gives the same practice in both forms.
    """
    _check(scale, shapes)
    sc = SCALES[scale]
    rng = random.Random(seed)
    store = Store()
    d = _directory(store, rng, sc)
    grid = _visits(store, rng, seed, sc.appointments, d)
    role_service = [services[1] for services in d.role_services]
    slots = add_slots(store, grid, d.prs.roles, role_service)
    _draw_families(store, seed, sc)
    if shapes == "live":
        _live_forms(store)
    return PracticeData(
        store=store,
        seed=seed,
        grid=grid,
        roles=d.prs.roles,
        role_clinic=d.prs.role_clinic,
        role_service=role_service,
        slots=slots,
        next_ids={
            "Appointment": APPOINTMENT_BASE + len(store["Appointment"]),
            "Referral": REFERRAL_BASE + len(store["Referral"]),
            "Coverage": COVERAGE_BASE + len(store["Coverage"]),
            "Patient": PATIENT_BASE + len(store["Patient"]),
            "SP-": EXTERNAL_PRACTICE_BASE + len(d.orgs.external_practices),
            "EP-": EXTERNAL_BASE + len(d.prs.externals),
        },
    )


def _draw_families(store: Store, seed: int, sc: Scale) -> None:
    """Every registered family (:func:`~toolkit.mock.data.base.family`), in name order."""
    # the family modules beside this one (each registers itself when imported), found
    # by folder: this module needs its siblings, not the package face that imports it
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        importlib.import_module(f"{__package__}.{module.name}")
    for name in sorted(FAMILIES):
        FAMILIES[name](Drawing(store, random.Random(f"{seed}:{name}"), sc))


def _live_forms(store: Store) -> None:
    """Turn every generated record (built in the spec's form) into the live forms.

    Eager records are converted now; lazily built ones convert as they are built.
    Patients with a second given name also get a ``usual`` name (the facts: a
    Patient may hold both a usual and an official name).
    """
    names = forms.Names.of(store.names(forms.NAMED_TARGETS))
    for coll in store.collections.values():
        for index, rec in list(coll.records_built()):
            rec = to_stored(coll.name, rec, "live", names)
            if coll.name == "Patient":
                official = rec["name"][0]
                if len(official["given"]) > 1:
                    usual = {"use": USUAL, "given": [official["given"][1]]}
                    rec["name"] = [*rec["name"], {**usual, "family": official["family"]}]
            coll.set_built(index, rec)
        coll.wrap_builder(functools.partial(_to_live, coll.name, names))


def _to_live(rtype: str, names: forms.Names, record: Record) -> Record:
    return to_stored(rtype, record, "live", names)
