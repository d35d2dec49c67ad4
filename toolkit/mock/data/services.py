"""What the practice sells: HealthcareServices per clinic and the ChargeItemDefinitions of its fees.

:data:`SERVICES`, :data:`PRODUCTS` and :data:`NOSHOW_FEE` are also the fee
schedule the invoice lines are priced from (:mod:`toolkit.mock.data.billing`).
"""

from __future__ import annotations

import random

from toolkit.mock.data.base import CURRENCY, link, meta, past
from toolkit.mock.store import Store

__all__ = [
    "CHARGE_ITEM_BASE",
    "NOSHOW_FEE",
    "PRODUCTS",
    "SERVICES",
    "add_charge_items",
    "add_services",
]

SERVICES = (
    # name, minutes, fee code, price
    ("Initial consultation", 60, "10968", 180.0),
    ("Standard consultation", 30, "10960", 110.0),
    ("Extended consultation", 60, "10962", 160.0),
    ("Telehealth review", 30, "91172", 100.0),
)
PRODUCTS = (("Theraband (1 m)", "P100", 25.0), ("Report writing", "P200", 90.0))
NOSHOW_FEE = ("Non-attendance fee", "NA01", 50.0)
PROVIDED_BY = link("HealthcareService", "providedBy")
CHARGE_ITEM_BASE = 9001
"""Id of the first ChargeItemDefinition: the services, then the products, then the no-show fee."""


def add_services(store: Store, rng: random.Random, clinics: list[str]) -> list[list[str]]:
    """One HealthcareService per clinic and :data:`SERVICES` entry; their ids per clinic."""
    services = store.collection("HealthcareService")
    service_ids: list[list[str]] = []  # per clinic: one id per SERVICES entry
    for c, clinic in enumerate(clinics):
        row = []
        for s, (name, _minutes, _code, _price) in enumerate(SERVICES):
            hid = str(8001 + c * len(SERVICES) + s)
            updated = past(rng, 100, 400)
            services.add(
                hid,
                {
                    "resourceType": "HealthcareService",
                    "id": hid,
                    "meta": meta(updated),
                    "name": name,
                    "active": True,
                    "providedBy": PROVIDED_BY(clinic),
                },
                updated=updated,
            )
            row.append(hid)
        service_ids.append(row)
    return service_ids


def add_charge_items(store: Store, rng: random.Random) -> None:
    """One ChargeItemDefinition per fee: the services, the products, the no-show fee."""
    cids = store.collection("ChargeItemDefinition")
    fee_items = [(name, code, price) for name, _m, code, price in SERVICES]
    fee_items += [*PRODUCTS, NOSHOW_FEE]
    for k, (title, code, price) in enumerate(fee_items):
        did = str(CHARGE_ITEM_BASE + k)
        updated = past(rng, 200, 400)
        cids.add(
            did,
            {
                "resourceType": "ChargeItemDefinition",
                "id": did,
                "meta": meta(updated),
                "title": title,
                "code": code,
                "price": {"value": price, "currency": CURRENCY},
            },
            updated=updated,
        )
