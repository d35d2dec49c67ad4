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
"""

from __future__ import annotations

import calendar
import collections
import functools
import random
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from toolkit.mock.shapes import Shapes, to_stored
from toolkit.mock.store import Record, Store

__all__ = [
    "ANCHOR",
    "GRID_MINUTES",
    "SCALES",
    "SLOT_HORIZON_DAYS",
    "DayGrid",
    "PracticeData",
    "Scale",
    "generate",
    "iso",
    "iso_date",
    "ref",
]

ANCHOR = calendar.timegm((2026, 11, 1, 0, 0, 0))
"""Epoch seconds of 2026-11-01T00:00:00Z, the fixed date the data is anchored to."""
DAY = 86_400
GRID_MINUTES = 30
GRID_START_HOUR = 9
GRID_UNITS = 16  # 09:00 to 17:00 in 30-minute units
PAST_DAYS = 365
SLOT_HORIZON_DAYS = 61
"""Slots (and future appointments) exist from ANCHOR to ANCHOR + 61 days."""

ScaleName = Literal["small", "medium", "large"]


@dataclass(frozen=True, slots=True)
class Scale:
    clinics: int
    practitioners: int
    patients: int
    externals: int
    external_practices: int
    organizations: int
    appointments: int


SCALES: dict[str, Scale] = {
    # three clinics even at the small scale: Sydney, Brisbane and Perth (see CLINIC_SITES),
    # so that the notebooks read a group spread over three Australian time zones
    "small": Scale(3, 6, 300, 24, 8, 3, 2_000),
    "medium": Scale(5, 40, 5_000, 200, 60, 6, 50_000),
    "large": Scale(20, 240, 40_000, 1_000, 300, 10, 500_000),
}

GIVEN = (
    "Zoë", "Søren", "José", "Chloé", "Olivia", "Liam", "Aisha", "Wei", "Priya", "Noah",
    "Amelia", "Jack", "Isla", "Mateo", "Łukasz", "Björn", "Siobhán", "Thảo", "Mia", "Oliver",
    "Charlotte", "Hamish", "Ngaio", "Ravi", "Fatima", "Hiroshi", "Ana", "Lachlan", "Grace", "Tom",
)  # fmt: skip
FAMILY = (
    "Nguyễn", "Smith", "Jones", "Williams", "Brown", "Wilson", "Taylor", "Müller", "García",
    "O'Brien", "Kowalski", "Chen", "Patel", "Singh", "Kim", "Rossi", "Papadopoulos",
    "Andersen", "Tran", "Lee", "Walker", "Martin", "Thompson", "Kelly", "Novak", "Dubois",
)  # fmt: skip
SUBURBS = (
    ("Newtown", "NSW", "2042"), ("Parramatta", "NSW", "2150"), ("Fitzroy", "VIC", "3065"),
    ("Fremantle", "WA", "6160"), ("Paddington", "QLD", "4064"), ("Glenelg", "SA", "5045"),
    ("Sandy Bay", "TAS", "7005"), ("Braddon", "ACT", "2612"), ("Darwin City", "NT", "0800"),
    ("Manly", "NSW", "2095"), ("Geelong", "VIC", "3220"), ("Toowoomba", "QLD", "4350"),
)  # fmt: skip
CLINIC_SITES = (
    # suburb, state, postcode: clinic i sits at CLINIC_SITES[i % 12]. The first three put the
    # group in three time zones that differ in both offset and daylight saving: Sydney
    # (UTC+10, +11 in summer), Brisbane (UTC+10 all year) and Perth (UTC+8 all year).
    ("Newtown", "NSW", "2042"), ("Paddington", "QLD", "4064"), ("Fremantle", "WA", "6160"),
    ("Fitzroy", "VIC", "3065"), ("Glenelg", "SA", "5045"), ("Sandy Bay", "TAS", "7005"),
    ("Braddon", "ACT", "2612"), ("Darwin City", "NT", "0800"), ("Parramatta", "NSW", "2150"),
    ("Toowoomba", "QLD", "4350"), ("Geelong", "VIC", "3220"), ("Manly", "NSW", "2095"),
)  # fmt: skip
STREETS = (
    "King Street",
    "George Street",
    "High Street",
    "Church Road",
    "Beach Road",
    "Victoria Parade",
    "Station Street",
    "Bay Road",
    "Oxford Street",
    "Main Road",
)
PROFESSIONS = (
    ("psychologist", "Psychologist"),
    ("physiotherapist", "Physiotherapist"),
    ("occupational-therapist", "Occupational Therapist"),
    ("dietitian", "Dietitian"),
    ("speech-pathologist", "Speech Pathologist"),
    ("exercise-physiologist", "Exercise Physiologist"),
)
FUNDERS = (
    ("Medicare", "govt", "Government"),
    ("Department of Veterans' Affairs (DVA)", "govt", "Government"),
    ("National Disability Insurance Scheme (NDIS)", "govt", "Government"),
    ("Bupa", "ins", "Insurance Company"),
    ("Medibank", "ins", "Insurance Company"),
    ("HCF", "ins", "Insurance Company"),
    ("nib", "ins", "Insurance Company"),
    ("ahm", "ins", "Insurance Company"),
)
MEDICARE, DVA, NDIS = 0, 1, 2
OTHER_ORGS = (
    "Sydney Local Health District",
    "icare NSW (workers compensation)",
    "Lifeline Australia",
    "Department of Education",
    "TAC Victoria",
    "Comcare",
    "Red Cross",
    "Beyond Blue",
    "Headspace",
    "St Vincent's Hospital",
)
SERVICES = (
    # name, minutes, fee code, price
    ("Initial consultation", 60, "10968", 180.0),
    ("Standard consultation", 30, "10960", 110.0),
    ("Extended consultation", 60, "10962", 160.0),
    ("Telehealth review", 30, "91172", 100.0),
)
PRODUCTS = (("Theraband (1 m)", "P100", 25.0), ("Report writing", "P200", 90.0))
NOSHOW_FEE = ("Non-attendance fee", "NA01", 50.0)
REFERRAL_TYPES = (
    # definition, funder index, quantity, money amount (None = appointment-count referral)
    ("Medicare Chronic Disease Management", MEDICARE, 5, None),
    ("Mental Health Treatment Plan", MEDICARE, 10, None),
    ("DVA D904 referral", DVA, 12, None),
    ("NDIS service agreement", NDIS, 20, 4000.0),
    ("Private health referral", 3, 8, 1200.0),
)
LOCATIONS = ("clinic", "telehealth", "phone", "online")

# appointment status codes (participant status)
BOOKED, CONFIRMED, ATTENDED, CANCELLED, NOSHOW = range(5)
STATUS_NAMES = ("booked", "confirmed", "attended", "cancelled", "noshow")


def iso(epoch: float) -> str:
    """Epoch seconds as an ISO 8601 UTC date-time (``2026-11-01T09:30:00Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def iso_date(epoch: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(epoch))


def ref(type_name: str, rid: str) -> dict[str, str]:
    """A catalogue reference object."""
    return {"reference": f"/main/{type_name}/{rid}", "type": type_name}


def _mix(seed: int, index: int, salt: int) -> int:
    """A cheap deterministic hash for per-record choices of lazily built records."""
    x = ((index + 1) * 0x9E3779B1 ^ (salt + 1) * 0x85EBCA6B ^ seed * 0xC2B2AE35) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x2C1B3C6D) & 0xFFFFFFFF
    x ^= x >> 12
    return x


@dataclass(slots=True)
class DayGrid:
    """The slot grid: which 30-minute units of which PractitionerRole are taken."""

    taken: collections.Counter[tuple[int, int]] = field(default_factory=collections.Counter)
    """How many non-cancelled appointments cover each (role index, unit start epoch).

    A count, not a set: a PATCH may move a second appointment onto a taken unit,
    and moving one of the two away again must leave the unit taken.
    """

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

    def release(self, role: int, start: int, minutes: int) -> None:
        for u in self.units(start, minutes):
            left = self.taken[(role, u)] - 1
            if left > 0:
                self.taken[(role, u)] = left
            else:
                del self.taken[(role, u)]

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


def _phone(rng: random.Random, mobile: bool = False) -> str:
    if mobile:
        return "+614" + "".join(str(rng.randrange(10)) for _ in range(8))
    return "+61" + rng.choice("2378") + "".join(str(rng.randrange(10)) for _ in range(8))


def _address(rng: random.Random, use: str, country: str = "AU") -> dict[str, Any]:
    suburb, state, postcode = rng.choice(SUBURBS)
    line = f"{rng.randrange(1, 300)} {rng.choice(STREETS)}"
    addr: dict[str, Any] = {
        "use": use,
        "type": rng.choice(("physical", "both")),
        "text": f"{line}, {suburb} {state} {postcode}",
        "line": [line],
        "city": suburb,
        "state": state,
        "postalCode": postcode,
        "country": country,
    }
    if rng.random() < 0.15:
        del addr["text"]
    return addr


def _clinic_address(rng: random.Random, site: tuple[str, str, str]) -> dict[str, Any]:
    """A clinic's street address at ``site``: its state decides the clinic's time zone.

    The random draws are those of :func:`_address`, so the rest of the data stays the
    same for a seed whatever the site table says.
    """
    addr = _address(rng, "work")
    suburb, state, postcode = site
    addr.update(city=suburb, state=state, postalCode=postcode)
    if "text" in addr:
        addr["text"] = f"{addr['line'][0]}, {suburb} {state} {postcode}"
    return addr


def _meta(epoch: float) -> dict[str, str]:
    return {"lastUpdated": iso(epoch)}


def _org_type(code: str, display: str) -> list[dict[str, Any]]:
    return [
        {
            "coding": [
                {
                    "system": "http://terminology.hl7.org/CodeSystem/organization-type",
                    "code": code,
                    "display": display,
                }
            ]
        }
    ]


def generate(seed: int = 0, scale: str = "small", shapes: Shapes = "live") -> PracticeData:
    """Build the whole store for ``seed`` and ``scale`` (deterministic).

    ``shapes`` is the JSON form of the records (:mod:`toolkit.mock.shapes`); the
    same seed gives the same practice in both forms.
    """
    if scale not in SCALES:
        msg = f"unknown scale {scale!r}; choose one of {', '.join(SCALES)}"
        raise ValueError(msg)
    if shapes not in ("live", "spec"):
        msg = f"unknown shapes {shapes!r}; choose live or spec"
        raise ValueError(msg)
    sc = SCALES[scale]
    rng = random.Random(seed)
    store = Store()

    def past(days_min: float, days_max: float) -> int:
        return int(ANCHOR - rng.uniform(days_min, days_max) * DAY)

    # ---------------------------------------------------------------- organizations
    orgs = store.collection("Organization")

    def add_org(rid: str, record: Record, updated: int) -> None:
        record = {"resourceType": "Organization", "id": rid, "meta": _meta(updated), **record}
        orgs.add(rid, record, updated=updated)

    group_id = "PG-1000"
    add_org(
        group_id,
        {
            "active": True,
            "type": _org_type("prov", "Healthcare Provider"),
            "name": "Harbourside Allied Health Group",
            "telecom": [
                {"system": "phone", "value": _phone(rng), "use": "work"},
                {"system": "email", "value": "admin@harbourside.example", "use": "work"},
            ],
            "address": [_address(rng, "billing")],
        },
        past(300, 400),
    )
    clinic_ids: list[str] = []
    for i in range(sc.clinics):
        cid = f"CL-{2001 + i}"
        site = CLINIC_SITES[i % len(CLINIC_SITES)]
        suburb = site[0] + ("" if i < len(CLINIC_SITES) else f" {i + 1}")
        rec: Record = {
            "active": True,
            "type": _org_type("prov", "Healthcare Provider"),
            "name": f"Harbourside Allied Health {suburb}",
            "telecom": [{"system": "phone", "value": _phone(rng), "use": "work"}],
            "address": [_clinic_address(rng, site)],
            "partOf": ref("Organization", group_id),
        }
        if i % 3 == 2:
            rec["telecom"].append({"system": "fax", "value": _phone(rng), "use": "work"})
        add_org(cid, rec, past(30, 300))
        clinic_ids.append(cid)
    funder_ids: list[str] = []
    for i, (name, code, display) in enumerate(FUNDERS):
        fid = f"FD-{3001 + i}"
        rec = {"active": True, "type": _org_type(code, display), "name": name}
        if i >= 3:
            rec["telecom"] = [{"system": "phone", "value": "+6113" + f"{1000 + i * 37:04d}"}]
        add_org(fid, rec, past(200, 400))
        funder_ids.append(fid)
    for i in range(sc.organizations):
        oid = f"OG-{4001 + i}"
        rec = {
            "active": rng.random() < 0.9,
            "type": _org_type("other", "Other"),
            "name": OTHER_ORGS[i % len(OTHER_ORGS)],
            "address": [_address(rng, "work")],
        }
        add_org(oid, rec, past(10, 360))
    sp_ids: list[str] = []
    for i in range(sc.external_practices):
        sid = f"SP-{5001 + i}"
        suburb, _, _ = rng.choice(SUBURBS)
        name = f"{suburb} Medical Centre" if i % 2 == 0 else f"{rng.choice(FAMILY)} Family Practice"
        country = "AU" if i % 10 else rng.choice(("NZ", "GB", "AU"))
        rec = {
            "active": True,
            "type": _org_type("prov", "Healthcare Provider"),
            "name": name,
            "telecom": [{"system": "phone", "value": _phone(rng), "use": "work"}],
            "address": [_address(rng, "work", country)],
        }
        if rng.random() < 0.3:
            rec["telecom"].append(
                {"system": "email", "value": f"reception{i}@practice.example", "use": "work"}
            )
        add_org(sid, rec, past(1, 360))
        sp_ids.append(sid)

    # ---------------------------------------------------------------- practitioners and roles
    prs = store.collection("Practitioner")
    roles_coll = store.collection("PractitionerRole")
    services = store.collection("HealthcareService")
    cids = store.collection("ChargeItemDefinition")

    def person_name() -> tuple[str, str]:
        return rng.choice(GIVEN), rng.choice(FAMILY)

    role_ids: list[str] = []
    role_clinic: list[str] = []
    role_profession: list[int] = []
    for i in range(sc.practitioners):
        pid = f"PR-{6001 + i}"
        given, family = person_name()
        prof = i % len(PROFESSIONS)
        updated = past(5, 300)
        rec = {
            "resourceType": "Practitioner",
            "id": pid,
            "meta": _meta(updated),
            "identifier": [{"value": str(rng.randrange(100000, 999999))}],
            "name": {"use": "official", "given": [given], "family": family},
            "telecom": [
                {"system": "phone", "value": _phone(rng, mobile=True), "use": "mobile"},
                {"system": "email", "value": f"pr{6001 + i}@harbourside.example", "use": "work"},
            ],
            "active": i % 9 != 8,
            "qualification": [
                {
                    "code": {
                        "coding": [
                            {
                                "system": "https://terminology.halaxy.com/CodeSystem/profession",
                                "code": PROFESSIONS[prof][0],
                                "display": PROFESSIONS[prof][1],
                            }
                        ]
                    }
                }
            ],
        }
        if rng.random() < 0.4:
            rec["name"]["prefix"] = ["Dr"]
        if rng.random() < 0.2:
            del rec["telecom"]
        prs.add(pid, rec, updated=updated)
        clinic = clinic_ids[i % len(clinic_ids)]
        roles_coll.add(
            pid,
            {
                "resourceType": "PractitionerRole",
                "id": pid,
                "meta": _meta(updated),
                "active": rec["active"],
                "practitioner": ref("Practitioner", pid),
                "organization": ref("Organization", clinic),
            },
            updated=updated,
        )
        role_ids.append(pid)
        role_clinic.append(clinic)
        role_profession.append(prof)
    ep_ids: list[str] = []
    for i in range(sc.externals):
        eid = f"EP-{7001 + i}"
        given, family = person_name()
        updated = past(1, 360)
        rec = {
            "resourceType": "Practitioner",
            "id": eid,
            "meta": _meta(updated),
            "name": {"use": "official", "given": [given], "family": family, "prefix": ["Dr"]},
            "active": True,
        }
        if rng.random() < 0.6:
            rec["identifier"] = [{"value": f"{rng.randrange(1000000, 9999999)}A"}]
        if rng.random() < 0.7:
            rec["telecom"] = [{"system": "phone", "value": _phone(rng), "use": "work"}]
        prs.add(eid, rec, updated=updated)
        roles_coll.add(
            eid,
            {
                "resourceType": "PractitionerRole",
                "id": eid,
                "meta": _meta(updated),
                "active": True,
                "practitioner": ref("Practitioner", eid),
                "organization": ref("Organization", sp_ids[i % len(sp_ids)]),
            },
            updated=updated,
        )
        ep_ids.append(eid)

    service_ids: list[list[str]] = []  # per clinic: one id per SERVICES entry
    for c, clinic in enumerate(clinic_ids):
        row = []
        for s, (name, _minutes, _code, _price) in enumerate(SERVICES):
            hid = str(8001 + c * len(SERVICES) + s)
            updated = past(100, 400)
            services.add(
                hid,
                {
                    "resourceType": "HealthcareService",
                    "id": hid,
                    "meta": _meta(updated),
                    "name": name,
                    "active": True,
                    "providedBy": ref("Organization", clinic),
                },
                updated=updated,
            )
            row.append(hid)
        service_ids.append(row)
    clinic_index = {cid: c for c, cid in enumerate(clinic_ids)}
    fee_items = [(name, code, price) for name, _m, code, price in SERVICES]
    fee_items += [*PRODUCTS, NOSHOW_FEE]
    for k, (title, code, price) in enumerate(fee_items):
        did = str(9001 + k)
        updated = past(200, 400)
        cids.add(
            did,
            {
                "resourceType": "ChargeItemDefinition",
                "id": did,
                "meta": _meta(updated),
                "title": title,
                "code": code,
                "price": {"value": price, "currency": "AUD"},
            },
            updated=updated,
        )

    # ---------------------------------------------------------------- patients and coverage
    patients = store.collection("Patient")
    coverages = store.collection("Coverage")
    patient_ids: list[str] = []
    patient_cover: list[list[tuple[str, int]]] = []  # (coverage id, funder index)
    for i in range(sc.patients):
        pid = str(100001 + i)
        given, family = person_name()
        updated = past(0.5, 380)
        rec = {
            "resourceType": "Patient",
            "id": pid,
            "meta": _meta(updated),
            "extension": [
                {
                    "url": "patient-status",
                    "valueCode": rng.choices(
                        ("current", "contact", "archived", "blocked", "deceased"),
                        (90, 4, 4, 1, 1),
                    )[0],
                }
            ],
            "name": [{"use": "official", "given": [given], "family": family}],
            "gender": rng.choices(("female", "male", "other", "unknown"), (52, 45, 2, 1))[0],
            "birthDate": iso_date(ANCHOR - rng.randrange(3 * 365, 90 * 365) * DAY),
        }
        if rng.random() < 0.3:
            rec["name"][0]["given"].append(rng.choice(GIVEN))
        if rng.random() < 0.85:
            rec["telecom"] = [{"system": "sms", "value": _phone(rng, True), "use": "mobile"}]
        if rng.random() < 0.75:
            rec["address"] = [_address(rng, "home")]
        if ep_ids and rng.random() < 0.6:
            rec["generalPractitioner"] = [ref("PractitionerRole", rng.choice(ep_ids))]
        patients.add(pid, rec, updated=updated)
        patient_ids.append(pid)
        covers: list[tuple[str, int]] = []
        primary = rng.choices((MEDICARE, DVA, NDIS), (80, 10, 10))[0]
        funders = [primary]
        if rng.random() < 0.4:
            funders.append(rng.randrange(3, len(FUNDERS)))
        for f in funders:
            cov_id = str(200001 + len(coverages))
            start = past(30, 1500)
            cupdated = min(ANCHOR - 3600, start + rng.randrange(0, 200) * DAY)
            cov: Record = {
                "resourceType": "Coverage",
                "id": cov_id,
                "meta": _meta(cupdated),
                "extension": [
                    {
                        "url": "coverage-payer",
                        "valueCoding": {"code": "30", "display": "Organisation"},
                    },
                    {"url": "coverage-patient-anonymous", "valueBoolean": False},
                ],
                "status": "active" if rng.random() < 0.93 else "cancelled",
                "beneficiary": ref("Patient", pid),
                "subscriber": ref("Patient", pid),
                "subscriberID": str(rng.randrange(10**9, 10**10)),
                "period": {"start": iso_date(start)},
                "payor": ref("Organization", funder_ids[f]),
            }
            if f in (MEDICARE, DVA):
                cov["dependent"] = str(rng.randrange(1, 6))
                system = "medicare-number" if f == MEDICARE else "dva-number"
                cov["identifier"] = {
                    "system": f"http://ns.electronichealth.net.au/id/{system}",
                    "value": cov["subscriberID"],
                }
            if f >= 3 and rng.random() < 0.5:
                cov["extension"].append(
                    {
                        "url": "coverage-organisation",
                        "valueReference": ref("Organization", funder_ids[f]),
                    }
                )
            coverages.add(cov_id, cov, updated=cupdated, date=float(start), owner=pid)
            covers.append((cov_id, f))
        patient_cover.append(covers)

    # ---------------------------------------------------------------- referrals
    n_roles = len(role_ids)
    role_patients: list[list[int]] = [[] for _ in range(n_roles)]
    patient_role: list[int] = []
    for p in range(sc.patients):
        r = rng.randrange(n_roles)
        patient_role.append(r)
        role_patients[r].append(p)
    for r in range(n_roles):
        if not role_patients[r]:
            role_patients[r].append(rng.randrange(sc.patients))

    @dataclass(slots=True)
    class Ref_:  # a referral's generation-time state
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
        used: int = 0
        amount: float = 0.0

    referrals = store.collection("Referral")
    referral_state: list[Ref_] = []
    referral_records: list[Record] = []
    patient_referrals: dict[int, list[int]] = {}
    for p in range(sc.patients):
        if rng.random() >= 0.55:
            continue
        covers = patient_cover[p]
        kind = rng.randrange(len(REFERRAL_TYPES))
        definition, funder, quantity, money = REFERRAL_TYPES[kind]
        chosen = next((c for c in covers if c[1] == funder), covers[0])
        if funder >= 3:
            chosen = next((c for c in covers if c[1] >= 3), covers[0])
        created = past(20, 420)
        start = created - created % DAY
        end = start + 365 * DAY
        rid = str(300001 + len(referrals))
        include_cancelled = rng.random() < 0.3
        all_fees = rng.random() < 0.3
        offset = rng.choice((0, 0, 0, 1, 2))
        rec = {
            "resourceType": "Referral",
            "id": rid,
            "meta": _meta(created),
            "coverage": ref("Coverage", chosen[0]),
            "period": {"start": iso_date(start), "end": iso_date(end)},
            "performer": ref("Practitioner", role_ids[patient_role[p]]),
            "requester": ref("PractitionerRole", rng.choice(ep_ids)),
            "referralDefinition": definition,
            "created": iso(created),
            "active": end > ANCHOR,
            "limitQuantity": {"quantity": quantity, "quantityOffset": offset, "quantityUsed": 0},
            "allocationType": "All fee types" if all_fees else "Appointments only",
            "subject": ref("Patient", patient_ids[p]),
            "includeCancelledAppointment": include_cancelled,
            "priority": rng.random() < 0.8,
        }
        if money is not None:
            rec["limitMoney"] = {
                "amount": {"value": money, "currency": "AUD"},
                "amountUsed": 0.0,
            }
        if funder in (MEDICARE, DVA):
            rec["expiryType"] = rng.choices(("standard", "non-standard", "indefinite"), (8, 1, 1))[
                0
            ]
        if rng.random() < 0.25:
            rec["comment"] = rng.choice(
                (
                    "Please see for ongoing management.",
                    "Review after 6 sessions and report back to GP.",
                    "Patient prefers telehealth where possible.",
                )
            )
        if rng.random() < 0.1:
            del rec["period"]["end"]
            end = ANCHOR + 10 * 365 * DAY
        referral_state.append(
            Ref_(
                len(referral_records),
                p,
                patient_role[p],
                start,
                end,
                quantity,
                offset,
                include_cancelled,
                all_fees,
                money,
            )
        )
        referral_records.append(rec)
        referrals.add(rid, None, updated=created, date=float(created), owner=patient_ids[p])
        patient_referrals.setdefault(p, []).append(len(referral_records) - 1)

    # ---------------------------------------------------------------- appointments (columns)
    first_day = ANCHOR - PAST_DAYS * DAY
    days = [
        first_day + d * DAY
        for d in range(PAST_DAYS + SLOT_HORIZON_DAYS)
        if time.gmtime(first_day + d * DAY).tm_wday < 5
    ]
    per_day = sc.appointments / (n_roles * len(days))
    p_start = per_day / (GRID_UNITS - 0.35 * per_day)
    grid = DayGrid()
    a_start: list[int] = []
    a_minutes: list[int] = []
    a_role: list[int] = []
    a_patient: list[int] = []
    a_status: list[int] = []
    a_service: list[int] = []
    a_created: list[int] = []
    unit = GRID_MINUTES * 60
    rand = rng.random
    for r in range(n_roles):
        pool = role_patients[r]
        npool = len(pool)
        for day in days:
            u = 0
            base = day + GRID_START_HOUR * 3600
            while u < GRID_UNITS:
                if rand() >= p_start:
                    u += 1
                    continue
                units = 2 if rand() < 0.35 and u + 1 < GRID_UNITS else 1
                start = base + u * unit
                u += units
                a_start.append(start)
                a_minutes.append(units * GRID_MINUTES)
                a_role.append(r)
                a_patient.append(pool[int(rand() * npool)])
                x = rand()
                if start < ANCHOR:
                    status = ATTENDED if x < 0.82 else CANCELLED if x < 0.94 else NOSHOW
                else:
                    status = BOOKED if x < 0.6 else CONFIRMED if x < 0.95 else CANCELLED
                a_status.append(status)
                service = (0 if rand() < 0.2 else 2) if units == 2 else (1 if rand() < 0.8 else 3)
                a_service.append(service)
                a_created.append(min(start - int(rand() * 40 * DAY) - 3600, ANCHOR - 7200))
                if status != CANCELLED:
                    grid.take(r, start, units * GRID_MINUTES)

    # chronological order gives appointment ids rising with time, like a real system
    order = sorted(range(len(a_start)), key=a_start.__getitem__)
    a_start = [a_start[i] for i in order]
    a_minutes = [a_minutes[i] for i in order]
    a_role = [a_role[i] for i in order]
    a_patient = [a_patient[i] for i in order]
    a_status = [a_status[i] for i in order]
    a_service = [a_service[i] for i in order]
    a_created = [a_created[i] for i in order]
    n_appts = len(a_start)

    # invoice lines: a consult line per attended appointment (plus sometimes a product),
    # a non-attendance fee for some no-shows
    a_invoice: list[int] = [-1] * n_appts
    inv_appt: list[int] = []
    line_appt: list[int] = []
    line_kind: list[int] = []  # 0 consult, 1 product 0, 2 product 1, 3 no-show fee
    a_referral: list[int] = [-1] * n_appts
    for i in range(n_appts):
        status = a_status[i]
        if status == ATTENDED:
            kinds = [0]
            if rand() < 0.12:
                kinds.append(1 if rand() < 0.6 else 2)
        elif status == NOSHOW and rand() < 0.5:
            kinds = [3]
        else:
            kinds = []
        if kinds:
            a_invoice[i] = len(inv_appt)
            inv_appt.append(i)
            for k in kinds:
                line_appt.append(i)
                line_kind.append(k)
    a_lines: dict[int, list[int]] = {}
    for li, ai in enumerate(line_appt):
        a_lines.setdefault(ai, []).append(li)

    def line_components(li: int) -> list[tuple[str, float]]:
        kind = line_kind[li]
        if kind == 0:
            price = SERVICES[a_service[line_appt[li]]][3]
            comps = [("base", price)]
            h = _mix(seed, li, 7) % 100
            if h < 12:
                comps.append(("surcharge", 15.0))
            elif h < 22:
                comps.append(("discount", -10.0))
            return comps
        if kind in (1, 2):
            price = PRODUCTS[kind - 1][2]
            return [("base", price), ("tax", round(price * 0.1, 2))]
        return [("base", NOSHOW_FEE[2])]

    # referral usage, in chronological order
    for i in range(n_appts):
        status = a_status[i]
        if a_start[i] >= ANCHOR:
            continue
        candidates = patient_referrals.get(a_patient[i])
        if not candidates:
            continue
        for k in candidates:
            st = referral_state[k]
            if st.role != a_role[i] or not st.start <= a_start[i] < st.end:
                continue
            if status == CANCELLED and not st.include_cancelled:
                continue
            if st.offset + st.used >= st.quantity:
                continue
            st.used += 1
            a_referral[i] = k
            for li in a_lines.get(i, ()):
                if line_kind[li] == 0 or st.all_fees:
                    st.amount += sum(v for t, v in line_components(li))
            break
    for st in referral_state:
        rec = referral_records[st.index]
        rec["limitQuantity"]["quantityUsed"] = st.used
        if "limitMoney" in rec:
            rec["limitMoney"]["amountUsed"] = round(st.amount, 2)
    for k, rec in enumerate(referral_records):
        referrals.replace(
            k,
            rec,
            updated=referrals.updated[k],
            date=referrals.date[k],
            owner=referrals.owner[k],
        )

    # ---------------------------------------------------------------- lazy builders
    appt_base = 10_000_001
    invoice_base = 20_000_001
    line_base = 30_000_001

    def role_service_id(r: int, service: int) -> str:
        return service_ids[clinic_index[role_clinic[r]]][service]

    def appointment_updated(i: int) -> int:
        if a_start[i] < ANCHOR:
            return min(a_start[i] + a_minutes[i] * 60 + 1800, ANCHOR - 60)
        return a_created[i]

    def build_appointment(i: int) -> Record:
        start = a_start[i]
        minutes = a_minutes[i]
        status = a_status[i]
        h = _mix(seed, i, 1)
        patient_part: Record = {
            "actor": ref("Patient", patient_ids[a_patient[i]]),
            "modifierExtension": [
                {
                    "url": "appointment-participant-status",
                    "valueCoding": {"code": STATUS_NAMES[status]},
                }
            ],
        }
        if a_invoice[i] >= 0:
            patient_part["extension"] = [
                {
                    "url": "appointment-participant-invoice",
                    "valueReference": ref("Invoice", str(invoice_base + a_invoice[i])),
                }
            ]
        rec: Record = {
            "resourceType": "Appointment",
            "id": str(appt_base + i),
            "meta": _meta(appointment_updated(i)),
            "extension": [
                {"url": "location-type", "valueCode": LOCATIONS[1 if a_service[i] == 3 else 0]}
            ],
            "start": iso(start),
            "end": iso(start + minutes * 60),
            "minutesDuration": minutes,
            "created": iso(a_created[i]),
            "supportingInformation": [
                ref("HealthcareService", role_service_id(a_role[i], a_service[i]))
            ],
            "participant": [
                {
                    "type": [
                        {
                            "coding": [
                                {
                                    "system": "http://terminology.hl7.org/CodeSystem/"
                                    "v3-ParticipationType",
                                    "code": "ATND",
                                    "display": "attender",
                                }
                            ]
                        }
                    ],
                    "actor": ref("PractitionerRole", role_ids[a_role[i]]),
                    "modifierExtension": [
                        {
                            "url": "appointment-participant-status",
                            "valueCoding": {
                                "code": "attended"
                                if status == ATTENDED
                                else "cancelled"
                                if status == CANCELLED
                                else "booked"
                            },
                        }
                    ],
                },
                patient_part,
            ],
        }
        if h % 10 < 3:
            rec["description"] = (
                "Follow-up session",
                "Review of home exercise programme",
                "Discuss progress with carer present",
            )[h % 3]
        if h % 17 == 0:
            del rec["minutesDuration"]
        return rec

    def build_invoice(k: int) -> Record:
        i = inv_appt[k]
        lines = a_lines.get(i, [])
        total = round(sum(v for li in lines for _t, v in line_components(li)), 2)
        h = _mix(seed, k, 2) % 100
        status = "issued" if h < 85 else "active" if h < 97 else "write-off"
        paid = total if status == "issued" and h < 75 else 0.0
        return {
            "resourceType": "Invoice",
            "id": str(invoice_base + k),
            "meta": _meta(appointment_updated(i)),
            "status": status,
            "subject": ref("Patient", patient_ids[a_patient[i]]),
            "date": iso(a_start[i] + a_minutes[i] * 60),
            "totalNet": {"value": total, "currency": "AUD"},
            "totalGross": {"value": total, "currency": "AUD"},
            "totalBalance": {"value": round(total - paid, 2), "currency": "AUD"},
            "totalPaid": {"value": paid, "currency": "AUD"},
        }

    def line_funder(li: int) -> str | None:
        i = line_appt[li]
        k = a_referral[i]
        covers = patient_cover[a_patient[i]]
        if k >= 0:
            cov_id = referral_records[k]["coverage"]["reference"].rsplit("/", 1)[1]
            for c, f in covers:
                if c == cov_id:
                    return funder_ids[f]
        h = _mix(seed, li, 3) % 10
        private = [f for _c, f in covers if f >= 3]
        if private and h < 6:
            return funder_ids[private[0]]
        if h < 7:
            return funder_ids[covers[0][1]]
        return None  # paid privately by the patient

    def build_line(li: int) -> Record:
        i = line_appt[li]
        kind = line_kind[li]
        if kind == 0:
            name, _m, code, _price = SERVICES[a_service[i]]
            definition = str(9001 + a_service[i])
            res_type = "service"
        elif kind in (1, 2):
            name, code, _price = PRODUCTS[kind - 1]
            definition = str(9001 + len(SERVICES) + kind - 1)
            res_type = "product"
        else:
            name, code, _price = NOSHOW_FEE
            definition = str(9001 + len(SERVICES) + len(PRODUCTS))
            res_type = "service"
        h = _mix(seed, li, 4) % 100
        status = None if h < 88 else "locked" if h < 95 else "voided" if h < 98 else "write-off"
        entered = a_start[i] + a_minutes[i] * 60 + 300
        rec: Record = {
            "resourceType": "InvoiceLine",
            "id": str(line_base + li),
            "meta": _meta(min(entered + 600, ANCHOR - 60)),
            "resource": {"type": res_type, "display": name},
            "description": name,
            "definition": f"/main/ChargeItemDefinition/{definition}",
            "status": status,
            "code": code,
            "subject": ref("Patient", patient_ids[a_patient[i]]),
            "context": ref("Appointment", str(appt_base + i)),
            "enteredDate": iso(entered),
            "performer": ref("Practitioner", role_ids[a_role[i]]),
            "invoice": ref("Invoice", str(invoice_base + a_invoice[i])),
            "quantity": 1,
            "unitPriceComponent": [
                {"type": t, "amount": {"value": v, "currency": "AUD"}}
                for t, v in line_components(li)
            ],
        }
        funder = line_funder(li)
        if funder is not None:
            rec["extension"] = [
                {"url": "invoice-line-funder", "valueReference": ref("Organization", funder)}
            ]
        if h % 7 == 3:
            del rec["resource"]
        return rec

    appointments = store.collection("Appointment", build_appointment)
    for i in range(n_appts):
        appointments.add(
            str(appt_base + i),
            None,
            updated=appointment_updated(i),
            date=float(a_start[i]),
            owner=patient_ids[a_patient[i]],
        )
    invoices = store.collection("Invoice", build_invoice)
    for k, i in enumerate(inv_appt):
        invoices.add(
            str(invoice_base + k),
            None,
            updated=appointment_updated(i),
            date=float(a_start[i]),
            owner=patient_ids[a_patient[i]],
        )
    lines_coll = store.collection("InvoiceLine", build_line)
    for li, i in enumerate(line_appt):
        entered = a_start[i] + a_minutes[i] * 60 + 300
        lines_coll.add(
            str(line_base + li),
            None,
            updated=min(entered + 600, ANCHOR - 60),
            date=float(entered),
            owner=patient_ids[a_patient[i]],
        )

    if shapes == "live":
        _live_forms(store)
    return PracticeData(
        store=store,
        seed=seed,
        grid=grid,
        roles=role_ids,
        role_clinic=role_clinic,
        role_service=[role_service_id(r, 1) for r in range(n_roles)],
        next_ids={
            "Appointment": appt_base + n_appts,
            "Referral": 300001 + len(referrals),
            "Coverage": 200001 + len(coverages),
            "SP-": 5001 + len(sp_ids),
            "EP-": 7001 + len(ep_ids),
        },
    )


def _live_forms(store: Store) -> None:
    """Turn every generated record (built in the spec's form) into the live forms.

    Eager records are converted now; lazily built ones convert as they are built.
    Patients with a second given name also get a ``usual`` name (the facts: a
    Patient may hold both a usual and an official name).
    """
    for coll in store.collections.values():
        for index, rec in list(coll.records_built()):
            rec = to_stored(coll.name, rec, "live")
            if coll.name == "Patient":
                official = rec["name"][0]
                if len(official["given"]) > 1:
                    usual = {"use": "usual", "given": [official["given"][1]]}
                    rec["name"] = [*rec["name"], {**usual, "family": official["family"]}]
            coll.set_built(index, rec)
        coll.wrap_builder(functools.partial(_to_live, coll.name))


def _to_live(rtype: str, record: Record) -> Record:
    return to_stored(rtype, record, "live")
