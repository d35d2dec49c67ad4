"""Coverage: each patient's funders (a government scheme, sometimes a private insurer too).

Drawn right after each patient (:mod:`toolkit.mock.data.patients`), so a
patient's coverages sit next to it in the order of random draws.
"""

from __future__ import annotations

import random

from toolkit.mock.data.base import ANCHOR, DAY, codes, extension, iso_date, link, meta, past
from toolkit.mock.data.organizations import DVA, FUNDERS, MEDICARE, NDIS
from toolkit.mock.store import Collection, Record

__all__ = ["COVERAGE_BASE", "Cover", "add_coverages"]

PAYER = extension("Coverage", "coverage-payer")
ANONYMOUS = extension("Coverage", "coverage-patient-anonymous")
ORGANISATION = extension("Coverage", "coverage-organisation")
(PAYER_ORGANISATION,) = codes("Coverage", "coverage-payer.code", "30")
ACTIVE, CANCELLED = codes("Coverage", "status", "active", "cancelled")
BENEFICIARY = link("Coverage", "beneficiary")
SUBSCRIBER = link("Coverage", "subscriber", "Patient")
PAYOR = link("Coverage", "payor", "Organization")
ORGANISATION_LINK = link("Coverage", "coverage-organisation")
IDENTIFIER_SYSTEMS = {
    MEDICARE: "http://ns.electronichealth.net.au/id/medicare-number",
    DVA: "http://ns.electronichealth.net.au/id/dva-number",
}
"""Identifier systems of Medicare and DVA coverages (the catalogue leaves the structure open)."""
COVERAGE_BASE = 200001
"""Id of the first Coverage."""

Cover = tuple[str, int]
"""A patient's coverage: (Coverage id, funder index in :data:`FUNDERS`)."""


def _coverage(
    rng: random.Random, cov_id: str, pid: str, funder: str, f: int
) -> tuple[Record, int, int]:
    """A Coverage record, its period start and its last update (epochs)."""
    start = past(rng, 30, 1500)
    updated = min(ANCHOR - 3600, start + rng.randrange(0, 200) * DAY)
    cov: Record = {
        "resourceType": "Coverage",
        "id": cov_id,
        "meta": meta(updated),
        "extension": [
            {
                "url": PAYER[0],
                PAYER[1]: {"code": PAYER_ORGANISATION, "display": "Organisation"},
            },
            {"url": ANONYMOUS[0], ANONYMOUS[1]: False},
        ],
        "status": ACTIVE if rng.random() < 0.93 else CANCELLED,
        "beneficiary": BENEFICIARY(pid),
        "subscriber": SUBSCRIBER(pid),
        "subscriberID": str(rng.randrange(10**9, 10**10)),
        "period": {"start": iso_date(start)},
        "payor": PAYOR(funder),
    }
    if f in (MEDICARE, DVA):
        cov["dependent"] = str(rng.randrange(1, 6))
        cov["identifier"] = {
            "system": IDENTIFIER_SYSTEMS[f],
            "value": cov["subscriberID"],
        }
    if f >= 3 and rng.random() < 0.5:
        cov["extension"].append(
            {
                "url": ORGANISATION[0],
                ORGANISATION[1]: ORGANISATION_LINK(funder),
            }
        )
    return cov, start, updated


def add_coverages(
    coverages: Collection, rng: random.Random, pid: str, funder_ids: list[str]
) -> list[Cover]:
    """A government coverage for patient ``pid`` and, for some, a private one."""
    primary = rng.choices((MEDICARE, DVA, NDIS), (80, 10, 10))[0]
    funders = [primary]
    if rng.random() < 0.4:
        funders.append(rng.randrange(3, len(FUNDERS)))
    covers: list[Cover] = []
    for f in funders:
        cov_id = str(COVERAGE_BASE + len(coverages))
        cov, start, updated = _coverage(rng, cov_id, pid, funder_ids[f], f)
        coverages.add(cov_id, cov, updated=updated, date=float(start), owner=pid)
        covers.append((cov_id, f))
    return covers
