"""What every resource module of the generator shares: the anchor, the scales and small helpers.

Kept apart from the resource modules so that each of them imports only this
(and the catalogue), never another resource module: the order in which the
resources are drawn lives in one place, :mod:`toolkit.mock.data.practice`.
"""

from __future__ import annotations

import calendar
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from toolkit import catalogue

__all__ = [
    "ADDRESS_TYPES",
    "ANCHOR",
    "AT_HOME",
    "AT_WORK",
    "CURRENCY",
    "DAY",
    "EMAIL",
    "FAMILIES",
    "FAMILY",
    "FAX",
    "FOR_BILLING",
    "GIVEN",
    "GRID_MINUTES",
    "GRID_START_HOUR",
    "GRID_UNITS",
    "PAST_DAYS",
    "PHONE",
    "SCALES",
    "SLOT_HORIZON_DAYS",
    "SMS",
    "STREETS",
    "SUBURBS",
    "USE_MOBILE",
    "USE_WORK",
    "Drawing",
    "Family",
    "Link",
    "Scale",
    "ScaleName",
    "address",
    "codes",
    "extension",
    "family",
    "iso",
    "iso_date",
    "link",
    "meta",
    "mix",
    "org_type",
    "past",
    "person_name",
    "phone",
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


CURRENCY = "AUD"
"""The practice's currency (an ISO 4217 code, as the catalogue's currency format asks)."""


# --------------------------------------------------------------------------- catalogue facts
# The generator names *which* catalogue value it draws; the catalogue says what exists. Each
# helper below raises at import time when the catalogue does not list what the generator
# names, so the data can only ever hold what the catalogue allows.


def codes(resource: str, path: str, *values: str) -> tuple[str, ...]:
    """``values``, each checked against the enum of ``resource.path`` in the catalogue."""
    allowed = catalogue.field_at(resource, path).enum
    missing = [v for v in values if v not in allowed]
    if missing:
        msg = f"{resource}.{path} lists no {', '.join(map(repr, missing))} in the catalogue"
        raise LookupError(msg)
    return values


def extension(resource: str, path: str) -> tuple[str, str]:
    """``(url, value key)`` of the extension-encoded field ``resource.path`` (spec form)."""
    ext = catalogue.field_at(resource, path).extension
    if ext is None:
        msg = f"{resource}.{path} is not an extension in the catalogue"
        raise LookupError(msg)
    return ext.url, ext.value_key


@dataclass(frozen=True, slots=True)
class Link:
    """Builds references of one catalogue reference field to records of :attr:`type`."""

    type: str

    def __call__(self, rid: str) -> dict[str, str]:
        return ref(self.type, rid)


def link(resource: str, path: str, type_name: str | None = None) -> Link:
    """References for ``resource.path``, to its only target or to ``type_name`` among them."""
    shape = catalogue.field_at(resource, path).ref
    if shape is None:
        msg = f"{resource}.{path} is not a reference in the catalogue"
        raise LookupError(msg)
    if type_name is None and len(shape.targets) == 1:
        return Link(shape.targets[0].type)
    if type_name is not None and shape.target_for(type_name) is not None:
        return Link(type_name)
    msg = f"{resource}.{path} cannot point at {type_name!r} (targets: {shape.types})"
    raise LookupError(msg)


PHONE, EMAIL, FAX, SMS = codes("Organization", "telecom.system", "phone", "email", "fax", "sms")
USE_WORK, USE_MOBILE = codes("Organization", "telecom.use", "work", "mobile")
AT_HOME, AT_WORK, FOR_BILLING = codes("Patient", "address.use", "home", "work", "billing")
ADDRESS_TYPES = codes("Patient", "address.type", "physical", "both")


# --------------------------------------------------------------------------- helpers


def iso(epoch: float) -> str:
    """Epoch seconds as an ISO 8601 UTC date-time (``2026-11-01T09:30:00Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def iso_date(epoch: float) -> str:
    """Epoch seconds as an ISO 8601 UTC date (``2026-11-01``)."""
    return time.strftime("%Y-%m-%d", time.gmtime(epoch))


def ref(type_name: str, rid: str) -> dict[str, str]:
    """A catalogue reference object."""
    return {"reference": f"{catalogue.API_PREFIX}/{type_name}/{rid}", "type": type_name}


def mix(seed: int, index: int, salt: int) -> int:
    """A cheap deterministic hash for per-record choices of lazily built records."""
    x = ((index + 1) * 0x9E3779B1 ^ (salt + 1) * 0x85EBCA6B ^ seed * 0xC2B2AE35) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x2C1B3C6D) & 0xFFFFFFFF
    x ^= x >> 12
    return x


def past(rng: random.Random, days_min: float, days_max: float) -> int:
    """An epoch between ``days_max`` and ``days_min`` days before :data:`ANCHOR`."""
    return int(ANCHOR - rng.uniform(days_min, days_max) * DAY)


def person_name(rng: random.Random) -> tuple[str, str]:
    """A given and a family name."""
    return rng.choice(GIVEN), rng.choice(FAMILY)


def phone(rng: random.Random, mobile: bool = False) -> str:
    """An Australian number in the catalogue's phone format (``+61...``)."""
    if mobile:
        return "+614" + "".join(str(rng.randrange(10)) for _ in range(8))
    return "+61" + rng.choice("2378") + "".join(str(rng.randrange(10)) for _ in range(8))


def address(rng: random.Random, use: str, country: str = "AU") -> dict[str, Any]:
    """A street address in one of :data:`SUBURBS` (``text`` left out now and then)."""
    suburb, state, postcode = rng.choice(SUBURBS)
    line = f"{rng.randrange(1, 300)} {rng.choice(STREETS)}"
    addr: dict[str, Any] = {
        "use": use,
        "type": rng.choice(ADDRESS_TYPES),
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


def meta(epoch: float) -> dict[str, str]:
    """The ``meta`` of a record last updated at ``epoch``."""
    return {"lastUpdated": iso(epoch)}


def org_type(code: str, display: str) -> list[dict[str, Any]]:
    """An Organization ``type`` of one coding."""
    return [
        {
            "coding": [
                {
                    "system": catalogue.ORGANIZATION_TYPE_SYSTEM,
                    "code": code,
                    "display": display,
                }
            ]
        }
    ]


# ---------------------------------------------------------------- families added later


@dataclass(frozen=True, slots=True)
class Drawing:
    """What a registered family draws with: the store so far, its own generator, the scale.

    The generator is seeded from the seed and the family's name, so a new family
    never shifts what the others draw (their pinned digests stay as they are).
    """

    store: Any
    """The :class:`~toolkit.mock.store.Store` holding every record drawn before."""
    rng: random.Random
    scale: Scale


Family = Callable[[Drawing], None]

FAMILIES: dict[str, Family] = {}
"""Families drawn after the core practice, in name order; see :func:`family`."""


def family(name: str) -> Callable[[Family], Family]:
    """Register ``add(drawing)`` as the family ``name``, drawn after the core practice.

    A module of :mod:`toolkit.mock.data` that declares one is found without
    being listed anywhere: adding a resource type to the mock is its catalogue
    entry and this module. The family reads the ids it refers to from
    ``drawing.store`` and adds its records with the search columns the
    catalogue's ``date_search``/``owner_search`` select on.
    """

    def register(add: Family) -> Family:
        if name in FAMILIES:
            msg = f"a mock data family named {name!r} is already registered"
            raise ValueError(msg)
        FAMILIES[name] = add
        return add

    return register
