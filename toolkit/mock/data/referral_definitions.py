"""ReferralDefinitions: one per referral type the referrals are drawn from.

A Referral names its type by :data:`~toolkit.mock.data.referrals.REFERRAL_TYPES`'s
name (its ``referralDefinition``); the definition of that name carries the funder
and the default limits the referrals of the type start with.
"""

from __future__ import annotations

from toolkit.mock.data.base import CURRENCY, Drawing, family, link, meta, past
from toolkit.mock.data.organizations import FUNDER
from toolkit.mock.data.referrals import REFERRAL_TYPES

__all__ = ["REFERRAL_DEFINITION_BASE", "add_referral_definitions"]

REFERRAL_DEFINITION_BASE = 501
"""Id of the first ReferralDefinition, in :data:`REFERRAL_TYPES` order."""
FUNDER_LINK = link("ReferralDefinition", "funder")


@family("referral_definitions")
def add_referral_definitions(drawing: Drawing) -> None:
    """Add one ReferralDefinition per :data:`REFERRAL_TYPES` entry."""
    coll = drawing.store.collection("ReferralDefinition")
    for k, (name, funder, quantity, money) in enumerate(REFERRAL_TYPES):
        rid = str(REFERRAL_DEFINITION_BASE + k)
        updated = past(drawing.rng, 200, 600)
        record = {
            "resourceType": "ReferralDefinition",
            "id": rid,
            "meta": meta(updated),
            "name": name,
            "active": True,
            "funder": FUNDER_LINK(f"{FUNDER}{3001 + funder}"),
            "limitQuantity": {"quantity": quantity},
        }
        if money is not None:
            record["limitMoney"] = {"amount": {"value": money, "currency": CURRENCY}}
        coll.add(rid, record, updated=updated)
