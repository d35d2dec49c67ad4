"""The API's numbers, addresses and media types: each stated once (spec or facts)."""

from __future__ import annotations

API_PREFIX = "/main"
"""Every resource path begins with this (spec section 9)."""

REGIONS: dict[str, str] = {
    "au": "https://au-api.halaxy.com/main",
    "eu": "https://eu-api.halaxy.com/main",
}
"""Regional base URLs (facts, Addresses). EU countries and the UK use ``eu``."""

EU_UK_COUNTRIES: frozenset[str] = frozenset(
    {
        "AT", "BE", "BG", "HR", "CY", "CZ", "DK", "EE", "FI", "FR", "DE", "GR", "HU", "IE",
        "IT", "LV", "LT", "LU", "MT", "NL", "PL", "PT", "RO", "SK", "SI", "ES", "SE", "GB",
    }
)  # fmt: skip
"""ISO 3166 alpha-2 codes of the 27 EU member states plus the UK (spec section 1)."""

RATE_LIMIT_PER_MINUTE = 500
RATE_LIMIT_WINDOW_SECONDS = 60
RATE_LIMIT_HEADERS = ("x-ratelimit-limit", "x-ratelimit-remaining")
RETRY_AFTER_HEADER = "retry-after"
"""Sliding-window request limit per OAuth client (spec section 8)."""
TOKEN_LIFETIME_STATED = 900
"""The documented access-token lifetime: 15 minutes (spec sections 5 and 8)."""
EXPIRES_IN_STATED = 3600
"""The ``expires_in`` the token endpoint reports (spec section 5)."""
DEFAULT_PAGE_SIZE = 30
"""``_count`` when absent (facts, client-observed)."""
MAX_PAGE_SIZE = 100
"""Largest accepted ``_count`` (facts, client-observed)."""
MAX_ATTACHMENT_BYTES = 200 * 1024 * 1024
"""Attachment size limit, "200MB" (spec section 8), read as 200 MiB of decoded content."""

ATTACHMENT_CONTENT_TYPES: tuple[str, ...] = (
    "application/msword",
    "application/vnd.ms-excel",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "application/pdf",
    "image/jpeg",
    "image/png",
)

ORGANIZATION_TYPE_SYSTEM = "http://terminology.hl7.org/CodeSystem/organization-type"
PROFESSION_SYSTEM = "https://terminology.halaxy.com/CodeSystem/profession"
LIVE_EXTENSION_BASE = "https://terminology.halaxy.com/StructureDefinition/"
"""The live service writes extension urls in full, under this base (public-docs-facts.md,
"Extension urls are full canonical urls"); the spec writes the bare name."""


ID_PREFIX_MEANINGS: dict[str, tuple[str, str]] = {
    "PG-": ("Organization", "Practice group"),
    "CL-": ("Organization", "Clinic"),
    "OG-": ("Organization", "Organization"),
    "FD-": ("Organization", "Funder"),
    "SP-": ("Organization", "Professional contact's practice"),
    "PR-": ("Practitioner", "Practitioner or administrator within the practice group"),
    "EP-": ("Practitioner", "External practitioner from the professional contacts list"),
}
"""Spec section 1: id prefixes exist only in the API, never in the product UI."""


def id_prefix(meaning: str) -> str:
    """The id prefix spec section 1 gives ``meaning`` (``"Clinic"`` -> ``"CL-"``).

    >>> id_prefix("Practice group")
    'PG-'
    """
    for prefix, (_type, text) in ID_PREFIX_MEANINGS.items():
        if text == meaning:
            return prefix
    msg = f"the catalogue has no id prefix meaning {meaning!r}"
    raise LookupError(msg)


def prefixes_of(resource_type: str) -> tuple[str, ...]:
    """Every id prefix spec section 1 gives ``resource_type``, in the spec's order.

    >>> prefixes_of("Practitioner")
    ('PR-', 'EP-')
    """
    return tuple(p for p, (rtype, _text) in ID_PREFIX_MEANINGS.items() if rtype == resource_type)


PRACTICE_GROUP_PREFIX = id_prefix("Practice group")
"""The practice group's Organization id prefix (the one whose address gives the practice's zone)."""
CLINIC_PREFIX = id_prefix("Clinic")
"""A clinic's Organization id prefix."""

FHIR_JSON = "application/fhir+json"
"""The media type of every resource body, sent and received (spec section 9)."""
MERGE_PATCH_JSON = "application/merge-patch+json"
"""The media type of a PATCH body: a JSON merge patch (facts)."""
