"""The API's operations and searches: endpoints, search parameters and what they select."""

from __future__ import annotations

from toolkit.catalogue.model import Endpoint

ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("POST", "/main/oauth/token", "Get Token", "Token", "token"),
    Endpoint("GET", "/main/Referral", "List Referrals", "Referral", "list"),
    Endpoint("GET", "/main/Referral/{id}", "Get Referral", "Referral", "read"),
    Endpoint("POST", "/main/Referral", "Create Referral", "Referral", "create", 201),
    Endpoint("PATCH", "/main/Referral/{id}", "Update Referral", "Referral", "update"),
    Endpoint("GET", "/main/Appointment", "List Appointments", "Appointment", "list"),
    Endpoint("GET", "/main/Appointment/{id}", "Get Appointment", "Appointment", "read"),
    Endpoint("POST", "/main/Appointment/$book", "Book Appointment", "Appointment", "book", 201),
    Endpoint("PATCH", "/main/Appointment/{id}", "Update Appointment", "Appointment", "update"),
    Endpoint(
        "GET", "/main/Appointment/$find", "Find Available Appointments", "Appointment", "find"
    ),
    Endpoint("GET", "/main/Coverage", "List Coverage", "Coverage", "list"),
    Endpoint("GET", "/main/Coverage/{id}", "Get Coverage", "Coverage", "read"),
    Endpoint("POST", "/main/Coverage/", "Create Coverage", "Coverage", "create", 201),
    Endpoint("PATCH", "/main/Coverage/{id}", "Update Coverage", "Coverage", "update"),
    Endpoint("GET", "/main/Organization", "List Organizations", "Organization", "list"),
    Endpoint("GET", "/main/Organization/{id}", "Get Organization", "Organization", "read"),
    Endpoint(
        "POST",
        "/main/Organization",
        "Create Organization (professional contact practice)",
        "Organization",
        "create",
        201,
    ),
    Endpoint("GET", "/main/Practitioner", "List Practitioners", "Practitioner", "list"),
    Endpoint("GET", "/main/Practitioner/{id}", "Get Practitioner", "Practitioner", "read"),
    Endpoint(
        "POST",
        "/main/Practitioner",
        "Create Practitioner (professional contact)",
        "Practitioner",
        "create",
        201,
    ),
    Endpoint("GET", "/main/InvoiceLine", "List InvoiceLines", "InvoiceLine", "list"),
    Endpoint("GET", "/main/InvoiceLine/{id}", "Get InvoiceLine", "InvoiceLine", "read"),
    Endpoint("GET", "/main/Patient", "List patients", "Patient", "list"),
)

SEARCH_PARAMETERS: dict[str, tuple[str, ...]] = {
    "Appointment": ("date", "patient"),
    "Referral": ("subject",),
    "Coverage": ("beneficiary",),
    "InvoiceLine": ("subject",),
    "Patient": ("name", "family", "given"),
    "Organization": ("name",),
    "Practitioner": (),
}
"""Per-resource search parameters (facts); all lists also take the common ones."""

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
    "Appointment": ("patient", "participant.actor"),
    "Referral": ("subject", "subject"),
    "Coverage": ("beneficiary", "beneficiary"),
    "InvoiceLine": ("subject", "subject"),
}
"""Resource type -> (search parameter, field path) naming the patient a record belongs
to (facts). For Appointment the field is the participant whose actor is a Patient."""

DATE_SEARCH: dict[str, tuple[tuple[str, ...], str]] = {
    "Appointment": (("date", "start"), "start"),
    "Referral": (("created",), "created"),
    "Coverage": (("period",), "period.start"),
    "InvoiceLine": (("enteredDate", "date"), "enteredDate"),
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
