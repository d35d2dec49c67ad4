"""Referrals, and how much of each the past appointments and invoice lines used.

Each patient is cared for by one practitioner role (:func:`assign_roles`); about
half the patients hold a referral to that role, from an external practitioner,
drawing on one of the patient's coverages. ``quantityUsed`` and ``amountUsed``
are computed after the appointments and invoice lines exist
(:func:`record_usage`): an appointment draws on the first referral of its
patient and role whose period covers it and that has quantity left.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from toolkit.mock.data.appointments import CANCELLED, Appointments
from toolkit.mock.data.base import ANCHOR, CURRENCY, DAY, codes, iso, iso_date, link, meta, past
from toolkit.mock.data.billing import Billing
from toolkit.mock.data.coverage import Cover
from toolkit.mock.data.organizations import DVA, MEDICARE, NDIS
from toolkit.mock.store import Record, Store

__all__ = [
    "REFERRAL_BASE",
    "REFERRAL_TYPES",
    "ReferralState",
    "Referrals",
    "add_referrals",
    "assign_roles",
    "record_usage",
]

REFERRAL_BASE = 300001
"""Id of the first Referral."""
REFERRAL_TYPES = (
    # definition, funder index, quantity, money amount (None = appointment-count referral)
    ("Medicare Chronic Disease Management", MEDICARE, 5, None),
    ("Mental Health Treatment Plan", MEDICARE, 10, None),
    ("DVA D904 referral", DVA, 12, None),
    ("NDIS service agreement", NDIS, 20, 4000.0),
    ("Private health referral", 3, 8, 1200.0),
)
APPOINTMENTS_ONLY, ALL_FEE_TYPES = codes(
    "Referral", "allocationType", "Appointments only", "All fee types"
)
EXPIRY_TYPES = codes("Referral", "expiryType", "standard", "non-standard", "indefinite")
EXPIRY_WEIGHTS = (8, 1, 1)
COVERAGE = link("Referral", "coverage")
PERFORMER = link("Referral", "performer")
REQUESTER = link("Referral", "requester")
SUBJECT = link("Referral", "subject")
COMMENTS = (
    "Please see for ongoing management.",
    "Review after 6 sessions and report back to GP.",
    "Patient prefers telehealth where possible.",
)


@dataclass(slots=True)
class ReferralState:
    """A referral's generation-time state: what it covers and how much is used."""

    index: int
    patient: int
    role: int
    start: int
    end: int
    quantity: int
    offset: int
    include_cancelled: bool
    all_fees: bool
    money: float | None
    kind: int
    """Index in :data:`REFERRAL_TYPES`."""
    used: int = 0
    amount: float = 0.0


@dataclass(slots=True)
class Referrals:
    """Every referral's record and state (same index), and each patient's referral indices."""

    records: list[Record] = field(default_factory=list)
    state: list[ReferralState] = field(default_factory=list)
    by_patient: dict[int, list[int]] = field(default_factory=dict)


def assign_roles(
    rng: random.Random, n_patients: int, n_roles: int
) -> tuple[list[list[int]], list[int]]:
    """Each patient's role, and each role's patients (never empty: a role gets one patient)."""
    role_patients: list[list[int]] = [[] for _ in range(n_roles)]
    patient_role: list[int] = []
    for p in range(n_patients):
        r = rng.randrange(n_roles)
        patient_role.append(r)
        role_patients[r].append(p)
    for r in range(n_roles):
        if not role_patients[r]:
            role_patients[r].append(rng.randrange(n_patients))
    return role_patients, patient_role


def _chosen_cover(covers: list[Cover], funder: int) -> Cover:
    """The patient's coverage a referral of ``funder`` draws on (the first one otherwise)."""
    if funder >= 3:
        return next((c for c in covers if c[1] >= 3), covers[0])
    return next((c for c in covers if c[1] == funder), covers[0])


@dataclass(frozen=True, slots=True)
class _Parties:
    """Who a referral links: its coverage, performer, possible requesters and subject."""

    coverage: str
    performer: str
    requesters: list[str]
    subject: str


def _record(
    rng: random.Random, rid: str, created: int, state: ReferralState, parties: _Parties
) -> Record:
    """The referral's record; the requester and the priority are drawn in key order."""
    return {
        "resourceType": "Referral",
        "id": rid,
        "meta": meta(created),
        "coverage": COVERAGE(parties.coverage),
        "period": {"start": iso_date(state.start), "end": iso_date(state.end)},
        "performer": PERFORMER(parties.performer),
        "requester": REQUESTER(rng.choice(parties.requesters)),
        "referralDefinition": REFERRAL_TYPES[state.kind][0],
        "created": iso(created),
        "active": state.end > ANCHOR,
        "limitQuantity": {
            "quantity": state.quantity,
            "quantityOffset": state.offset,
            "quantityUsed": 0,
        },
        "allocationType": ALL_FEE_TYPES if state.all_fees else APPOINTMENTS_ONLY,
        "subject": SUBJECT(parties.subject),
        "includeCancelledAppointment": state.include_cancelled,
        "priority": rng.random() < 0.8,
    }


def _optional_parts(rng: random.Random, rec: Record, state: ReferralState) -> None:
    """Money limit, expiry type, comment and an open end, each for some referrals."""
    _definition, funder, _quantity, money = REFERRAL_TYPES[state.kind]
    if money is not None:
        rec["limitMoney"] = {
            "amount": {"value": money, "currency": CURRENCY},
            "amountUsed": 0.0,
        }
    if funder in (MEDICARE, DVA):
        rec["expiryType"] = rng.choices(EXPIRY_TYPES, EXPIRY_WEIGHTS)[0]
    if rng.random() < 0.25:
        rec["comment"] = rng.choice(COMMENTS)
    if rng.random() < 0.1:
        del rec["period"]["end"]
        state.end = ANCHOR + 10 * 365 * DAY


def _referral(
    rng: random.Random, index: int, p: int, role: int, covers: list[Cover]
) -> tuple[ReferralState, str, int]:
    """Draw a referral's kind, dates and terms: its state, coverage id and creation epoch."""
    kind = rng.randrange(len(REFERRAL_TYPES))
    _definition, funder, quantity, money = REFERRAL_TYPES[kind]
    chosen = _chosen_cover(covers, funder)
    created = past(rng, 20, 420)
    start = created - created % DAY
    include_cancelled = rng.random() < 0.3
    all_fees = rng.random() < 0.3
    offset = rng.choice((0, 0, 0, 1, 2))
    state = ReferralState(
        index, p, role, start, start + 365 * DAY, quantity, offset, include_cancelled,
        all_fees, money, kind,
    )  # fmt: skip
    return state, chosen[0], created


def add_referrals(
    store: Store,
    rng: random.Random,
    *,
    patient_ids: list[str],
    patient_cover: list[list[Cover]],
    patient_role: list[int],
    roles: list[str],
    externals: list[str],
) -> Referrals:
    """Referrals for about half the patients (records held here until usage is known)."""
    coll = store.collection("Referral")
    out = Referrals()
    for p, pid in enumerate(patient_ids):
        if rng.random() >= 0.55:
            continue
        rid = str(REFERRAL_BASE + len(coll))
        index = len(out.records)
        role = patient_role[p]
        state, coverage, created = _referral(rng, index, p, role, patient_cover[p])
        parties = _Parties(coverage, roles[role], externals, pid)
        rec = _record(rng, rid, created, state, parties)
        _optional_parts(rng, rec, state)
        out.state.append(state)
        out.records.append(rec)
        coll.add(rid, None, updated=created, date=float(created), owner=pid)
        out.by_patient.setdefault(p, []).append(index)
    return out


def _draws_on(st: ReferralState, appts: Appointments, i: int) -> bool:
    """Whether appointment ``i`` can draw on referral ``st``."""
    if st.role != appts.role[i] or not st.start <= appts.start[i] < st.end:
        return False
    if appts.status[i] == CANCELLED and not st.include_cancelled:
        return False
    return st.offset + st.used < st.quantity


def record_usage(store: Store, refs: Referrals, appts: Appointments, billing: Billing) -> list[int]:
    """Charge past appointments (and their lines) to referrals; the referral of each appointment.

    In chronological order, so that the earliest appointments use a referral up.
    Returns the referral index per appointment (-1 for none) and stores the
    referral records with their ``quantityUsed`` and ``amountUsed``.
    """
    a_referral = [-1] * len(appts.start)
    for i in range(len(appts.start)):
        if appts.start[i] >= ANCHOR:
            continue
        for k in refs.by_patient.get(appts.patient[i], ()):
            st = refs.state[k]
            if not _draws_on(st, appts, i):
                continue
            st.used += 1
            a_referral[i] = k
            for li in billing.lines_of.get(i, ()):
                if billing.kind[li] == 0 or st.all_fees:
                    st.amount += sum(v for _t, v in billing.components(li))
            break
    _store_usage(store, refs)
    return a_referral


def _store_usage(store: Store, refs: Referrals) -> None:
    coll = store["Referral"]
    for st in refs.state:
        rec = refs.records[st.index]
        rec["limitQuantity"]["quantityUsed"] = st.used
        if "limitMoney" in rec:
            rec["limitMoney"]["amountUsed"] = round(st.amount, 2)
    for k, rec in enumerate(refs.records):
        coll.replace(k, rec, updated=coll.updated[k], date=coll.date[k], owner=coll.owner[k])
