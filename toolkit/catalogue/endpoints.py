"""The API's operations and searches, gathered from each resource's declaration."""

from __future__ import annotations

import re

from toolkit.catalogue.model import Endpoint, Field, Include, Resource, Source
from toolkit.catalogue.resources import RESOURCES

TOKEN_ENDPOINT = Endpoint("POST", "/main/oauth/token", "Get Token", "Token", "token")

ENDPOINTS: tuple[Endpoint, ...] = (
    TOKEN_ENDPOINT,
    *(e for r in RESOURCES.values() for e in r.endpoints),
)
"""Every operation of spec section 4 (each resource's, in spec order) and the token's."""

SEARCH_PARAMETERS: dict[str, tuple[str, ...]] = {
    r.name: (*r.search, *r.fhir_search) for r in RESOURCES.values() if r.listed
}
"""Per-resource search parameters (facts, then the FHIR-standard ones of
:data:`FHIR_SEARCH`); all lists also take the common ones."""

FHIR_SEARCH: dict[str, tuple[str, ...]] = {
    r.name: r.fhir_search for r in RESOURCES.values() if r.listed and r.fhir_search
}
"""Per-resource FHIR R4 standard search parameters that no source says the vendor serves
(:attr:`~toolkit.catalogue.model.Resource.fhir_search`): a deployment without them is
observed, never failed."""

EXPORT_IDS: dict[str, str] = {"Patient": "/main/Patient/$export-ids"}
"""Resource type -> the operation answering a Parameters resource of every id it holds
(facts: a live endpoint outside the spec). One request tells which records were deleted."""

LAST_UPDATED = "_lastUpdated"
"""The search parameter on ``meta.lastUpdated`` (FHIR R4); incremental syncs walk it."""

COMMON_SEARCH_PARAMETERS = ("_id", LAST_UPDATED, "_sort", "_count", "page", "_total")

SEARCH_ALIASES: dict[str, str] = {
    "id": "_id",
    "ids": "_id",
    "last_updated": LAST_UPDATED,
    "lastUpdated": LAST_UPDATED,
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

INCLUDE_PARAMETER_NAMES: dict[str, str] = {
    "Appointment.supportingInformation": "supporting-info",
    "HealthcareService.providedBy": "organization",
    "PractitionerRole.healthcareService": "service",
}
"""FHIR R4's own search parameter names where they differ from the kebab-case rule of
:func:`includes_of` (a server speaking FHIR answers to these)."""


def _kebab(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", name).lower()


def _reference_paths(
    fields: tuple[Field, ...], prefix: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], Field]]:
    """Every plain reference field below ``fields`` (objects walked, extensions not)."""
    out: list[tuple[tuple[str, ...], Field]] = []
    for f in fields:
        if f.extension is not None or f.write_only:
            continue
        path = (*prefix, f.name)
        if f.type == "reference" and f.ref is not None:
            out.append((path, f))
        elif f.fields:
            out.extend(_reference_paths(f.fields, path))
    return out


def includes_of(resource: Resource) -> tuple[Include, ...]:
    """The ``_include`` names a list of ``resource`` takes, derived from its reference fields.

    The naming rule (FHIR's ``Source:param[:Target]``):

    * each plain reference field, at any depth of its objects, gives
      ``Source:<param>``, where ``<param>`` is the field's JSON name in kebab case
      (``generalPractitioner`` -> ``general-practitioner``; a nested field by its
      own name: ``participant.actor`` -> ``actor``), or FHIR R4's name where it
      differs (:data:`INCLUDE_PARAMETER_NAMES`: ``supporting-info``, ``service``,
      ``organization``);
    * a field that may point at several types also gives ``Source:<param>:<Type>``
      per type (``Appointment:actor:PractitionerRole``);
    * the patient search of :attr:`~toolkit.catalogue.model.Resource.owner_search`,
      when its name is not already a field's, gives ``Source:<search>`` for the
      Patient of its field (``Appointment:patient``: the actor that is a Patient).

    Left out: extension-encoded references (no search parameter names them) and
    references to the resource's own type (``Organization.partOf``: included rows
    could not be told from the matches of the same type).

    >>> [i.name for i in includes_of(RESOURCES["Appointment"])]  # doctest: +NORMALIZE_WHITESPACE
    ['Appointment:supporting-info', 'Appointment:actor', 'Appointment:actor:PractitionerRole',
     'Appointment:actor:Patient', 'Appointment:patient']
    """
    out: list[Include] = []
    by_path: dict[tuple[str, ...], tuple[str, ...]] = {}
    for path, f in _reference_paths(resource.fields):
        assert f.ref is not None
        targets = tuple(t for t in dict.fromkeys(f.ref.types) if t != resource.name)
        if not targets:
            continue
        key = f"{resource.name}.{'.'.join(path)}"
        param = INCLUDE_PARAMETER_NAMES.get(key, _kebab(path[-1]))
        by_path[path] = targets
        out.append(Include(resource.name, param, path, targets))
        if len(targets) > 1:
            out.extend(Include(resource.name, param, path, (t,), narrowed=True) for t in targets)
    if resource.owner_search is not None:
        param, dotted = resource.owner_search
        path = tuple(dotted.split("."))
        if "Patient" in by_path.get(path, ()) and all(i.param != param for i in out):
            out.append(Include(resource.name, param, path, ("Patient",)))
    return tuple(out)


INCLUDES: dict[str, dict[str, Include]] = {
    r.name: {i.name: i for i in includes_of(r)} for r in RESOURCES.values() if r.listed
}
"""Per listed resource type, its ``_include`` names (see :func:`includes_of`)."""

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


WEBHOOK_EVENTS: dict[str, tuple[str, ...]] = {
    "Patient": ("create", "update"),
    "Appointment": ("create", "update", "delete"),
    "Invoice": ("create", "update", "delete"),
}
"""The changes the live service announces as webhooks, per resource type (facts,
"Events"): what the mock's sender announces and what ``pmtk listen`` keeps current."""
