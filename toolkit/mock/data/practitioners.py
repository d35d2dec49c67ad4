"""Practitioners and their PractitionerRoles: the group's own (``PR-``) and external ones (``EP-``).

Each of the group's practitioners has one PractitionerRole of the same id at one
clinic (round robin); each external practitioner one at an external practice.
The roles are what appointments and slots hang on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from toolkit import catalogue
from toolkit.mock.data.base import (
    EMAIL,
    PHONE,
    USE_MOBILE,
    USE_WORK,
    Scale,
    codes,
    link,
    meta,
    past,
    person_name,
    phone,
)
from toolkit.mock.store import Collection, Record, Store

__all__ = [
    "EXTERNAL_BASE",
    "PROFESSIONS",
    "Practitioners",
    "add_practitioners",
    "link_role_services",
]

PROFESSIONS = (
    ("psychologist", "Psychologist"),
    ("physiotherapist", "Physiotherapist"),
    ("occupational-therapist", "Occupational Therapist"),
    ("dietitian", "Dietitian"),
    ("speech-pathologist", "Speech Pathologist"),
    ("exercise-physiologist", "Exercise Physiologist"),
)
PRACTICE = catalogue.id_prefix("Practitioner or administrator within the practice group")
EXTERNAL = catalogue.id_prefix("External practitioner from the professional contacts list")
(OFFICIAL,) = codes("Practitioner", "name.use", "official")
PRACTITIONER = link("PractitionerRole", "practitioner")
ORGANIZATION = link("PractitionerRole", "organization")
SERVICE = link("PractitionerRole", "healthcareService")
EXTERNAL_BASE = 7001
"""Number of the first external practitioner (``EP-7001``); created ones continue the count."""


@dataclass(frozen=True, slots=True)
class Practitioners:
    """The ids the later resources point at."""

    roles: list[str]
    """Ids of the group's PractitionerRoles (``PR-...``), by role index."""
    role_clinic: list[str]
    """The clinic of each role, by role index."""
    externals: list[str]
    """Ids of the external practitioners' roles (``EP-...``)."""


def _role(rid: str, updated: int, active: bool, organization: str) -> Record:
    return {
        "resourceType": "PractitionerRole",
        "id": rid,
        "meta": meta(updated),
        "active": active,
        "practitioner": PRACTITIONER(rid),
        "organization": ORGANIZATION(organization),
    }


def _practitioner(rng: random.Random, i: int, pid: str) -> tuple[Record, int]:
    given, family = person_name(rng)
    prof = i % len(PROFESSIONS)
    updated = past(rng, 5, 300)
    rec: Record = {
        "resourceType": "Practitioner",
        "id": pid,
        "meta": meta(updated),
        "identifier": [{"value": str(rng.randrange(100000, 999999))}],
        "name": {"use": OFFICIAL, "given": [given], "family": family},
        "telecom": [
            {"system": PHONE, "value": phone(rng, mobile=True), "use": USE_MOBILE},
            {"system": EMAIL, "value": f"pr{6001 + i}@harbourside.example", "use": USE_WORK},
        ],
        "active": i % 9 != 8,
        "qualification": [
            {
                "code": {
                    "coding": [
                        {
                            "system": catalogue.PROFESSION_SYSTEM,
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
    return rec, updated


def _add_practice(
    prs: Collection, roles: Collection, rng: random.Random, count: int, clinics: list[str]
) -> tuple[list[str], list[str]]:
    role_ids: list[str] = []
    role_clinic: list[str] = []
    for i in range(count):
        pid = f"{PRACTICE}{6001 + i}"
        rec, updated = _practitioner(rng, i, pid)
        prs.add(pid, rec, updated=updated)
        clinic = clinics[i % len(clinics)]
        roles.add(pid, _role(pid, updated, rec["active"], clinic), updated=updated)
        role_ids.append(pid)
        role_clinic.append(clinic)
    return role_ids, role_clinic


def _external(rng: random.Random, eid: str) -> tuple[Record, int]:
    given, family = person_name(rng)
    updated = past(rng, 1, 360)
    rec: Record = {
        "resourceType": "Practitioner",
        "id": eid,
        "meta": meta(updated),
        "name": {"use": OFFICIAL, "given": [given], "family": family, "prefix": ["Dr"]},
        "active": True,
    }
    if rng.random() < 0.6:
        rec["identifier"] = [{"value": f"{rng.randrange(1000000, 9999999)}A"}]
    if rng.random() < 0.7:
        rec["telecom"] = [{"system": PHONE, "value": phone(rng), "use": USE_WORK}]
    return rec, updated


def _add_externals(
    prs: Collection, roles: Collection, rng: random.Random, count: int, practices: list[str]
) -> list[str]:
    ep_ids: list[str] = []
    for i in range(count):
        eid = f"{EXTERNAL}{EXTERNAL_BASE + i}"
        rec, updated = _external(rng, eid)
        prs.add(eid, rec, updated=updated)
        practice = practices[i % len(practices)]
        roles.add(eid, _role(eid, updated, True, practice), updated=updated)
        ep_ids.append(eid)
    return ep_ids


def add_practitioners(
    store: Store, rng: random.Random, sc: Scale, clinics: list[str], practices: list[str]
) -> Practitioners:
    """Add the group's practitioners, then the external ones, each with its role."""
    prs = store.collection("Practitioner")
    roles = store.collection("PractitionerRole")
    role_ids, role_clinic = _add_practice(prs, roles, rng, sc.practitioners, clinics)
    externals = _add_externals(prs, roles, rng, sc.externals, practices)
    return Practitioners(role_ids, role_clinic, externals)


def link_role_services(store: Store, roles: list[str], role_services: list[list[str]]) -> None:
    """Name on each of the group's roles the HealthcareServices of its clinic (drawn later)."""
    coll = store.collection("PractitionerRole")
    for rid, services in zip(roles, role_services, strict=True):
        index = coll.pos[rid]
        record = coll.record(index)
        coll.set_built(index, {**record, "healthcareService": [SERVICE(s) for s in services]})
