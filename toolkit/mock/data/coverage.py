"""Coverage: each patient's funders (a government scheme, sometimes a private insurer too).

Drawn right after each patient (:mod:`toolkit.mock.data.patients`), so a
patient's coverages sit next to it in the order of random draws.
"""

from __future__ import annotations

import random

from toolkit.mock.data.base import ANCHOR, DAY, iso_date, meta, past, ref
from toolkit.mock.data.organizations import DVA, FUNDERS, MEDICARE, NDIS
from toolkit.mock.store import Collection, Record

__all__ = ["COVERAGE_BASE", "Cover", "add_coverages"]

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
        "payor": ref("Organization", funder),
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
                "valueReference": ref("Organization", funder),
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
