"""The API's operations and searches, gathered from each resource's declaration."""

from __future__ import annotations

from toolkit.catalogue.model import Endpoint, Source
from toolkit.catalogue.resources import RESOURCES

TOKEN_ENDPOINT = Endpoint("POST", "/main/oauth/token", "Get Token", "Token", "token")

ENDPOINTS: tuple[Endpoint, ...] = (
    TOKEN_ENDPOINT,
    *(e for r in RESOURCES.values() for e in r.endpoints),
)
"""Every operation of spec section 4 (each resource's, in spec order) and the token's."""

SEARCH_PARAMETERS: dict[str, tuple[str, ...]] = {
    r.name: r.search for r in RESOURCES.values() if r.listed
}
"""Per-resource search parameters (facts); all lists also take the common ones."""

EXPORT_IDS: dict[str, str] = {"Patient": "/main/Patient/$export-ids"}
"""Resource type -> the operation answering a Parameters resource of every id it holds
(facts: a live endpoint outside the spec). One request tells which records were deleted."""

COMMON_SEARCH_PARAMETERS = ("_id", "_lastUpdated", "_sort", "_count", "page", "_total")

SEARCH_ALIASES: dict[str, str] = {
    "id": "_id",
    "ids": "_id",
    "last_updated": "_lastUpdated",
    "lastUpdated": "_lastUpdated",
    "count": "_count",
    "sort": "_sort",
    "total": "_total",
    "summary": "_summary",
    "include": "_include",
}
"""Python keyword -> API parameter for the common searches whose names are not valid or
idiomatic Python (pmtk); other keywords map ``_`` to ``-`` (``practitioner_role``)."""


def endpoint_source(resource: str, kind: str) -> Source | None:
    """Where ``resource``'s ``kind`` operation (``list``, ``read``...) is known from, or
    None when the catalogue has no such operation.

    >>> endpoint_source("Referral", "list"), endpoint_source("PractitionerRole", "list")
    ('spec', 'facts')
    """
    for e in ENDPOINTS:
        if e.resource == resource and e.kind == kind:
            return e.source
    return None


LISTED_RESOURCES: tuple[str, ...] = tuple(e.resource for e in ENDPOINTS if e.kind == "list")
"""Resources with a list endpoint, in spec order."""

CREATE_PATHS: dict[str, str] = {e.resource: e.path for e in ENDPOINTS if e.kind == "create"}
"""Resource type -> create path (note Coverage's trailing slash, spec section 4)."""

PATCHABLE: frozenset[str] = frozenset(e.resource for e in ENDPOINTS if e.kind == "update")
"""Types with a PATCH endpoint (spec section 4)."""

PATCH_ANSWERS_EMPTY_405: frozenset[str] = frozenset(
    {"Practitioner", "PractitionerRole", "Organization"}
)
"""Types whose PATCH the live service refuses with a 405 and an empty body (facts,
client-observed); other types without a PATCH endpoint get a 405 OperationOutcome."""

OWNER_SEARCH: dict[str, tuple[str, str]] = {
    r.name: r.owner_search for r in RESOURCES.values() if r.owner_search is not None
}
"""Resource type -> (search parameter, field path) naming the patient a record belongs
to (facts). For Appointment the field is the participant whose actor is a Patient."""

DATE_SEARCH: dict[str, tuple[tuple[str, ...], str]] = {
    r.name: r.date_search for r in RESOURCES.values() if r.date_search is not None
}
"""Resource type -> (the names a date search or ``_sort`` accepts, the field they select
on). pmtk's reading of the facts' ``date`` parameter and ``_sort``."""

NAME_ARRAYS: frozenset[str] = frozenset({"Practitioner.name"})
"""Catalogue paths the live service sends as an array of names although the spec shows
one object (facts, "Shapes seen on the live service")."""

CONTRACT_CATEGORIES: tuple[str, ...] = (
    "auth",
    "token-lifetime",
    "rate-limit",
    "prefix",
    "enum",
    "reference",
    "format",
    "schema",
    "paging",
    "write",
)
"""The kinds of conformance the contract suite checks, in the order its reports list them
(access, then the data, then writes). Every check belongs to one; each mock fault profile
names the one that must catch it, so the suite and the mock take the names from here."""
