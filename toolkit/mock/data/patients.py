"""Patients, each followed by its coverages (:mod:`toolkit.mock.data.coverage`).

A third of the patients have a second given name (the live shape then adds a
``usual`` name); most have a mobile and an address; many name an external
practitioner as their general practitioner.
"""

from __future__ import annotations

import random
import re
import unicodedata
from dataclasses import dataclass

from toolkit.mock.data.base import (
    ANCHOR,
    AT_HOME,
    DAY,
    EMAIL,
    GIVEN,
    SMS,
    USE_MOBILE,
    Scale,
    address,
    codes,
    extension,
    iso_date,
    link,
    meta,
    past,
    person_name,
    phone,
)
from toolkit.mock.data.coverage import Cover, add_coverages
from toolkit.mock.store import Record, Store

__all__ = ["PATIENT_BASE", "Patients", "add_patients"]

PATIENT_STATUS = extension("Patient", "patient-status")
STATUSES = codes(
    "Patient", "patient-status", "current", "contact", "archived", "blocked", "deceased"
)
STATUS_WEIGHTS = (90, 4, 4, 1, 1)
ARCHIVED = STATUSES[2]
GENDERS = codes("Patient", "gender", "female", "male", "other", "unknown")
GENDER_WEIGHTS = (52, 45, 2, 1)
(OFFICIAL,) = codes("Patient", "name.use", "official")
GENERAL_PRACTITIONER = link("Patient", "generalPractitioner", "PractitionerRole")
PATIENT_BASE = 100001
"""Id of the first Patient."""


@dataclass(frozen=True, slots=True)
class Patients:
    """Patient ids by patient index, and each patient's coverages."""

    ids: list[str]
    cover: list[list[Cover]]


def _email(given: str, family: str, pid: str) -> str:
    """A patient's email, made from the name without a random draw (so no other value
    moves); every seventh has a ``+`` tag, which a search must send encoded (facts)."""
    local = ".".join(
        re.sub(r"[^a-z0-9]+", "", unicodedata.normalize("NFKD", part).casefold())
        for part in (given, family)
    )
    tag = f"+pm{pid[-3:]}" if int(pid) % 7 == 0 else pid[-3:]
    return f"{local}{tag}@example.com"


def _patient(rng: random.Random, pid: str, externals: list[str]) -> tuple[Record, int]:
    given, family = person_name(rng)
    updated = past(rng, 0.5, 380)
    status = rng.choices(STATUSES, STATUS_WEIGHTS)[0]
    rec: Record = {
        "resourceType": "Patient",
        "id": pid,
        "meta": meta(updated),
        "extension": [{"url": PATIENT_STATUS[0], PATIENT_STATUS[1]: status}],
        "name": [{"use": OFFICIAL, "given": [given], "family": family}],
        # FHIR R4's Patient.active, read-only (facts): an archived record is not in use
        "active": status != ARCHIVED,
        "gender": rng.choices(GENDERS, GENDER_WEIGHTS)[0],
        "birthDate": iso_date(ANCHOR - rng.randrange(3 * 365, 90 * 365) * DAY),
    }
    if rng.random() < 0.3:
        rec["name"][0]["given"].append(rng.choice(GIVEN))
    if rng.random() < 0.85:
        rec["telecom"] = [{"system": SMS, "value": phone(rng, True), "use": USE_MOBILE}]
        if int(pid) % 4:
            rec["telecom"].append({"system": EMAIL, "value": _email(given, family, pid)})
    if rng.random() < 0.75:
        rec["address"] = [address(rng, AT_HOME)]
    if externals and rng.random() < 0.6:
        rec["generalPractitioner"] = [GENERAL_PRACTITIONER(rng.choice(externals))]
    return rec, updated


def add_patients(
    store: Store, rng: random.Random, sc: Scale, externals: list[str], funder_ids: list[str]
) -> Patients:
    """Add every Patient and, right after each, its Coverages."""
    patients = store.collection("Patient")
    coverages = store.collection("Coverage")
    out = Patients([], [])
    for i in range(sc.patients):
        pid = str(PATIENT_BASE + i)
        rec, updated = _patient(rng, pid, externals)
        patients.add(pid, rec, updated=updated)
        out.ids.append(pid)
        out.cover.append(add_coverages(coverages, rng, pid, funder_ids))
    return out
