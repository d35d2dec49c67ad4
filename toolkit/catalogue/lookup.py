"""Questions asked of the catalogue: a resource by name, a field by path, search keywords."""

from __future__ import annotations

from functools import cache

import pycountry

from toolkit.catalogue.endpoints import (
    COMMON_SEARCH_PARAMETERS,
    SEARCH_ALIASES,
    SEARCH_PARAMETERS,
)
from toolkit.catalogue.model import Field, Resource
from toolkit.catalogue.resources import RESOURCES
from toolkit.errors import unknown_name


def resource(name: str) -> Resource:
    """The catalogue entry for ``name``; :class:`~toolkit.errors.UnknownName` otherwise."""
    try:
        return RESOURCES[name]
    except (KeyError, TypeError):
        raise unknown_name("resource type", name, RESOURCES) from None


def search_keywords(resource_type: str) -> dict[str, str]:
    """Python keyword -> API parameter, for every search a list of ``resource_type`` takes.

    The common parameters (``_id``, ``_lastUpdated``, ``_sort``, ``_count``, ``page``,
    ``_total``, ``_summary``, ``_include``) and the resource's own (facts), with the
    spellings :func:`toolkit.client.search_params` accepts.

    Examples
    --------
    >>> search_keywords("Appointment")["date"]
    'date'
    >>> search_keywords("Appointment")["last_updated"]
    '_lastUpdated'
    """
    resource(resource_type)
    out = {**SEARCH_ALIASES, "page": "page"}
    for name in (*COMMON_SEARCH_PARAMETERS, "_summary", "_include"):
        out[name] = name
    for name in SEARCH_PARAMETERS.get(resource_type, ()):
        out[name.replace("-", "_")] = name
    return out


def field_at(resource_name: str, path: str) -> Field:
    """The field at a dotted path, for example ``field_at("Referral", "limitMoney.amount")``."""
    parts = path.split(".")
    f = resource(resource_name).field(parts[0])
    for part in parts[1:]:
        f = f.child(part)
    return f


def walk_fields(
    fields: tuple[Field, ...], prefix: str = ""
) -> list[tuple[str, Field]]:  # pragma: no cover - trivial
    """Every (dotted path, field) pair below ``fields``, depth first."""
    out: list[tuple[str, Field]] = []
    for f in fields:
        path = f"{prefix}{f.name}"
        out.append((path, f))
        if f.fields:
            out.extend(walk_fields(f.fields, path + "."))
    return out


@cache
def country_codes() -> frozenset[str]:
    """ISO 3166-1 alpha-2 codes (from pycountry)."""
    return frozenset(c.alpha_2 for c in pycountry.countries)


@cache
def currency_codes() -> frozenset[str]:
    """ISO 4217 alphabetic codes (from pycountry)."""
    return frozenset(c.alpha_3 for c in pycountry.currencies)


_FORMAT_PATTERNS: dict[str, str] = {
    "phone": r"^\+[1-9][0-9]{5,14}$",
    "country": r"^[A-Z]{2}$",
    "currency": r"^[A-Z]{3}$",
    "date": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
    "date-time": (
        r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$"
    ),
    "base64": r"^[A-Za-z0-9+/]*={0,2}$",
    "canonical": r"^/main/ChargeItemDefinition/[A-Za-z0-9.\-]+$",
}


def format_pattern(fmt: str) -> str:
    """Anchored regex (Rust- and Python-compatible) for a format rule's *shape*.

    Country and currency also need membership in :func:`country_codes` and
    :func:`currency_codes`; dates also need to be real calendar dates.
    """
    return _FORMAT_PATTERNS[fmt]
