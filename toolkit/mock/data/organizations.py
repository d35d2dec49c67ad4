"""Organizations: the practice group, its clinics, funders, other organizations, external practices.

One practice group (``PG-``) with clinics (``CL-``, ``partOf`` the group, in
Sydney, Brisbane and Perth first: :data:`CLINIC_SITES`); funders (``FD-``:
Medicare, DVA, NDIS and private insurers); other organizations (``OG-``) and
the external practices (``SP-``) of the professional contacts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from toolkit import catalogue
from toolkit.mock.data.base import (
    AT_WORK,
    EMAIL,
    FAMILY,
    FAX,
    FOR_BILLING,
    PHONE,
    SUBURBS,
    USE_WORK,
    Scale,
    address,
    link,
    meta,
    org_type,
    past,
    phone,
)
from toolkit.mock.store import Collection, Record, Store

__all__ = [
    "CLINIC_SITES",
    "DVA",
    "EXTERNAL_PRACTICE_BASE",
    "FUNDERS",
    "MEDICARE",
    "NDIS",
    "OTHER_ORGS",
    "STATE_ZONES",
    "Organizations",
    "add_organizations",
    "clinic_zone",
]

# id prefixes by their meaning in spec section 1 (the catalogue holds the prefixes)
GROUP = catalogue.PRACTICE_GROUP_PREFIX
CLINIC = catalogue.CLINIC_PREFIX
FUNDER = catalogue.id_prefix("Funder")
OTHER = catalogue.id_prefix("Organization")
EXTERNAL_PRACTICE = catalogue.id_prefix("Professional contact's practice")
PART_OF = link("Organization", "partOf")
PROVIDER, GOVERNMENT, INSURER, OTHER_TYPE = (
    ("prov", "Healthcare Provider"),
    ("govt", "Government"),
    ("ins", "Insurance Company"),
    ("other", "Other"),
)
"""Organization type codes (spec: "not shown"); the catalogue gives their system only."""
CLINIC_SITES = (
    # suburb, state, postcode: clinic i sits at CLINIC_SITES[i % 12]. The first three put the
    # group in three time zones that differ in both offset and daylight saving: Sydney
    # (UTC+10, +11 in summer), Brisbane (UTC+10 all year) and Perth (UTC+8 all year).
    ("Newtown", "NSW", "2042"), ("Paddington", "QLD", "4064"), ("Fremantle", "WA", "6160"),
    ("Fitzroy", "VIC", "3065"), ("Glenelg", "SA", "5045"), ("Sandy Bay", "TAS", "7005"),
    ("Braddon", "ACT", "2612"), ("Darwin City", "NT", "0800"), ("Parramatta", "NSW", "2150"),
    ("Toowoomba", "QLD", "4350"), ("Geelong", "VIC", "3220"), ("Manly", "NSW", "2095"),
)  # fmt: skip
STATE_ZONES = {
    "NSW": "Australia/Sydney",
    "ACT": "Australia/Sydney",
    "VIC": "Australia/Melbourne",
    "TAS": "Australia/Hobart",
    "QLD": "Australia/Brisbane",
    "SA": "Australia/Adelaide",
    "NT": "Australia/Darwin",
    "WA": "Australia/Perth",
}
"""The IANA time zone of each state a clinic may sit in: the clock its hours follow
(the same zones a reader finds from the address, ``toolkit.analysis.clock``)."""


def clinic_zone(clinic: dict[str, Any]) -> str:
    """The time zone of a clinic's Organization record, from its address's state."""
    for addr in clinic.get("address") or []:
        zone = STATE_ZONES.get(str(addr.get("state", "")).upper())
        if zone is not None:
            return zone
    return "UTC"


FUNDERS = (
    ("Medicare", *GOVERNMENT),
    ("Department of Veterans' Affairs (DVA)", *GOVERNMENT),
    ("National Disability Insurance Scheme (NDIS)", *GOVERNMENT),
    ("Bupa", *INSURER),
    ("Medibank", *INSURER),
    ("HCF", *INSURER),
    ("nib", *INSURER),
    ("ahm", *INSURER),
)
"""Funder name and organization type (code, display)."""
EXTERNAL_PRACTICE_BASE = 5001
"""Number of the first external practice (``SP-5001``); created ones continue the count."""
MEDICARE, DVA, NDIS = 0, 1, 2
"""Indices of the government funders in :data:`FUNDERS`; from 3 on they are private insurers."""
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


@dataclass(frozen=True, slots=True)
class Organizations:
    """The ids the later resources point at."""

    group: str
    clinics: list[str]
    funders: list[str]
    """By index of :data:`FUNDERS`."""
    external_practices: list[str]


def _add(orgs: Collection, rid: str, record: Record, updated: int) -> None:
    record = {"resourceType": "Organization", "id": rid, "meta": meta(updated), **record}
    orgs.add(rid, record, updated=updated)


def _clinic_address(rng: random.Random, site: tuple[str, str, str]) -> dict[str, Any]:
    """A clinic's street address at ``site``: its state decides the clinic's time zone.

    The random draws are those of :func:`~toolkit.mock.data.base.address`, so the rest
    of the data stays the same for a seed whatever the site table says.
    """
    addr = address(rng, AT_WORK)
    suburb, state, postcode = site
    addr.update(city=suburb, state=state, postalCode=postcode)
    if "text" in addr:
        addr["text"] = f"{addr['line'][0]}, {suburb} {state} {postcode}"
    return addr


def _add_group(orgs: Collection, rng: random.Random) -> str:
    group_id = f"{GROUP}1000"
    record = {
        "active": True,
        "type": org_type(*PROVIDER),
        "name": "Harbourside Allied Health Group",
        "telecom": [
            {"system": PHONE, "value": phone(rng), "use": USE_WORK},
            {"system": EMAIL, "value": "admin@harbourside.example", "use": USE_WORK},
        ],
        "address": [address(rng, FOR_BILLING)],
    }
    _add(orgs, group_id, record, past(rng, 300, 400))
    return group_id


def _add_clinics(orgs: Collection, rng: random.Random, count: int, group_id: str) -> list[str]:
    clinic_ids: list[str] = []
    for i in range(count):
        cid = f"{CLINIC}{2001 + i}"
        site = CLINIC_SITES[i % len(CLINIC_SITES)]
        suburb = site[0] + ("" if i < len(CLINIC_SITES) else f" {i + 1}")
        rec: Record = {
            "active": True,
            "type": org_type(*PROVIDER),
            "name": f"Harbourside Allied Health {suburb}",
            "telecom": [{"system": PHONE, "value": phone(rng), "use": USE_WORK}],
            "address": [_clinic_address(rng, site)],
            "partOf": PART_OF(group_id),
        }
        if i % 3 == 2:
            rec["telecom"].append({"system": FAX, "value": phone(rng), "use": USE_WORK})
        _add(orgs, cid, rec, past(rng, 30, 300))
        clinic_ids.append(cid)
    return clinic_ids


def _add_funders(orgs: Collection, rng: random.Random) -> list[str]:
    funder_ids: list[str] = []
    for i, (name, code, display) in enumerate(FUNDERS):
        fid = f"{FUNDER}{3001 + i}"
        rec: Record = {"active": True, "type": org_type(code, display), "name": name}
        if i >= 3:
            rec["telecom"] = [{"system": PHONE, "value": "+6113" + f"{1000 + i * 37:04d}"}]
        _add(orgs, fid, rec, past(rng, 200, 400))
        funder_ids.append(fid)
    return funder_ids


def _add_others(orgs: Collection, rng: random.Random, count: int) -> None:
    for i in range(count):
        rec: Record = {
            "active": rng.random() < 0.9,
            "type": org_type(*OTHER_TYPE),
            "name": OTHER_ORGS[i % len(OTHER_ORGS)],
            "address": [address(rng, AT_WORK)],
        }
        _add(orgs, f"{OTHER}{4001 + i}", rec, past(rng, 10, 360))


def _external_practice(rng: random.Random, i: int) -> Record:
    suburb, _, _ = rng.choice(SUBURBS)
    name = f"{suburb} Medical Centre" if i % 2 == 0 else f"{rng.choice(FAMILY)} Family Practice"
    country = "AU" if i % 10 else rng.choice(("NZ", "GB", "AU"))
    rec: Record = {
        "active": True,
        "type": org_type(*PROVIDER),
        "name": name,
        "telecom": [{"system": PHONE, "value": phone(rng), "use": USE_WORK}],
        "address": [address(rng, AT_WORK, country)],
    }
    if rng.random() < 0.3:
        rec["telecom"].append(
            {"system": EMAIL, "value": f"reception{i}@practice.example", "use": USE_WORK}
        )
    return rec


def _add_external_practices(orgs: Collection, rng: random.Random, count: int) -> list[str]:
    sp_ids: list[str] = []
    for i in range(count):
        sid = f"{EXTERNAL_PRACTICE}{EXTERNAL_PRACTICE_BASE + i}"
        rec = _external_practice(rng, i)
        _add(orgs, sid, rec, past(rng, 1, 360))
        sp_ids.append(sid)
    return sp_ids


def add_organizations(store: Store, rng: random.Random, sc: Scale) -> Organizations:
    """Add every Organization of the practice, in a fixed order of draws from ``rng``."""
    orgs = store.collection("Organization")
    group = _add_group(orgs, rng)
    clinics = _add_clinics(orgs, rng, sc.clinics, group)
    funders = _add_funders(orgs, rng)
    _add_others(orgs, rng, sc.organizations)
    practices = _add_external_practices(orgs, rng, sc.external_practices)
    return Organizations(group, clinics, funders, practices)
