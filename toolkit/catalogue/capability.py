"""The CapabilityStatement (``GET /main/metadata``) of a deployment, from the catalogue.

The live service serves one (facts, "endpoints outside the spec"); the spec does
not. The mock serves :func:`capability_statement`; ``pmtk check`` reads a
deployment's and reports, as observations, what :func:`capability_differences`
finds between it and the catalogue; the client reads the search parameters a
server declares with :func:`declared_search`.

>>> statement = capability_statement()
>>> [r["type"] for r in statement["rest"][0]["resource"]][:2]
['Referral', 'Appointment']
>>> capability_differences(statement)
[]
>>> sorted(declared_search(statement)["Appointment"])[:3]
['_id', '_lastUpdated', 'actor']
>>> sorted(declared_includes(statement)["Appointment"])[:2]
['Appointment:actor', 'Appointment:actor:Patient']
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from toolkit.catalogue.endpoints import (
    COMMON_SEARCH_PARAMETERS,
    DATE_SEARCH,
    ENDPOINTS,
    FHIR_SEARCH,
    INCLUDES,
    LAST_UPDATED,
    OWNER_SEARCH,
    SEARCH_PARAMETERS,
)
from toolkit.catalogue.resources import RESOURCES

__all__ = [
    "METADATA_PATH",
    "RESULT_PARAMETERS",
    "capability_differences",
    "capability_statement",
    "declared_includes",
    "declared_search",
    "search_field",
    "search_type",
]

METADATA_PATH = "/main/metadata"
"""Where a deployment serves its CapabilityStatement (facts; not in the spec)."""

FHIR_VERSION = "4.0.1"

_KINDS = ("interaction", "operation", "searchParam", "searchInclude")
"""What a statement declares per resource, and what :func:`capability_differences` compares."""

_INTERACTIONS = {"list": "search-type", "read": "read", "create": "create", "update": "patch"}
"""Catalogue endpoint kind -> FHIR interaction code (the API's update is a PATCH)."""

RESULT_PARAMETERS = frozenset({"_count", "page", "_sort", "_total", "_summary", "_include"})
"""Common parameters that shape the result rather than select records (not declared)."""

COMMON_DECLARED = tuple(p for p in COMMON_SEARCH_PARAMETERS if p not in RESULT_PARAMETERS)
"""The common search parameters a statement declares for every resource."""


def search_type(resource: str, name: str) -> str:
    """FHIR R4's type of ``resource``'s search parameter ``name``: ``string``, ``token``,
    ``reference`` or ``date``, from the catalogue (the field it selects on).

    The statement declares it, and the mock's one search module
    (:mod:`toolkit.mock.app.search`) matches a value by it.

    >>> search_type("Appointment", "date"), search_type("Patient", "family")
    ('date', 'string')
    >>> search_type("Invoice", "recipient"), search_type("Slot", "status")
    ('reference', 'token')
    """
    if name == "_id":
        return "token"
    if name == LAST_UPDATED or name in DATE_SEARCH.get(resource, ((), ""))[0]:
        return "date"
    if OWNER_SEARCH.get(resource, ("", ""))[0] == name:
        return "reference"
    if name in _OTHER_TYPES:
        return _OTHER_TYPES[name]
    field = search_field(resource, name)
    kinds = {f.type for f in RESOURCES[resource].fields if f.name == field}
    if "reference" in kinds:
        return "reference"
    if kinds & {"date", "date-time"}:
        return "date"
    return "token" if kinds & {"code", "boolean"} else "string"


def search_field(resource: str, name: str) -> str:
    """The top-level field a search parameter of ``resource`` selects on: the field of
    that name, else the one whose kebab-case name it is (FHIR's naming:
    ``general-practitioner`` is ``Patient.generalPractitioner``), else ``name`` itself.

    FHIR also joins some words without a hyphen (``birthdate`` is ``Patient.birthDate``).

    >>> search_field("Patient", "general-practitioner"), search_field("Invoice", "recipient")
    ('generalPractitioner', 'recipient')
    >>> search_field("Patient", "birthdate")
    'birthDate'
    """
    fields = RESOURCES[resource].fields if resource in RESOURCES else ()
    if any(f.name == name for f in fields):
        return name
    kebab = (
        f.name
        for f in fields
        if name in (re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", f.name).lower(), f.name.lower())
    )
    return next(kebab, name)


_OTHER_TYPES = {
    "actor": "reference",
    "practitioner": "reference",
    "practitioner-role": "reference",
    "patient": "reference",
    "end": "date",
    "email": "token",
    "status": "token",
}
"""The type of the searches that select on no top-level field of their name (Appointment
``actor``, ``practitioner``, ``status``, Slot ``practitioner``, ``practitioner-role``,
``end``, Patient ``email``, Referral ``patient``: FHIR R4 types them so)."""


def capability_statement(*, fhir_search: bool = True) -> dict[str, Any]:
    """The statement a deployment that serves exactly the catalogue's API would publish;
    without ``fhir_search``, one that lacks the FHIR-standard searches of
    :data:`~toolkit.catalogue.FHIR_SEARCH` (what the vendor may well publish)."""
    resources: dict[str, dict[str, Any]] = {}
    for endpoint in ENDPOINTS:
        if endpoint.kind == "token":
            continue
        entry = resources.setdefault(
            endpoint.resource,
            {
                "type": endpoint.resource,
                "interaction": [],
                "operation": [],
                "searchParam": [],
                "searchInclude": [],
            },
        )
        code = _INTERACTIONS.get(endpoint.kind)
        if code is not None:
            entry["interaction"].append({"code": code})
        else:  # $book, $find
            entry["operation"].append({"name": endpoint.kind, "definition": endpoint.path})
    for name, entry in resources.items():
        standard = () if fhir_search else FHIR_SEARCH.get(name, ())
        params = (
            *COMMON_DECLARED,
            *(p for p in SEARCH_PARAMETERS.get(name, ()) if p not in standard),
        )
        if any(i["code"] == "search-type" for i in entry["interaction"]):
            entry["searchParam"] = [{"name": p, "type": search_type(name, p)} for p in params]
            entry["searchInclude"] = list(INCLUDES.get(name, {}))
        for key in ("operation", "searchParam", "searchInclude"):
            if not entry[key]:
                del entry[key]
    return {
        "resourceType": "CapabilityStatement",
        "status": "active",
        "kind": "instance",
        "fhirVersion": FHIR_VERSION,
        "format": ["json"],
        "rest": [{"mode": "server", "resource": list(resources.values())}],
    }


def _declared(statement: Any) -> dict[str, dict[str, set[str]]] | None:
    """Resource type -> {"interaction", "operation", "searchParam", "searchInclude"}, or None."""
    if not isinstance(statement, Mapping) or statement.get("resourceType") != "CapabilityStatement":
        return None
    out: dict[str, dict[str, set[str]]] = {}
    rests = statement.get("rest")
    for rest in rests if isinstance(rests, list) else []:
        if not isinstance(rest, Mapping) or rest.get("mode", "server") != "server":
            continue
        common = _names(rest.get("searchParam"), "name")
        entries = rest.get("resource")
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, Mapping) or not isinstance(entry.get("type"), str):
                continue
            found = out.setdefault(entry["type"], {kind: set() for kind in _KINDS})
            found["interaction"] |= _names(entry.get("interaction"), "code")
            found["operation"] |= {n.lstrip("$") for n in _names(entry.get("operation"), "name")}
            found["searchParam"] |= _names(entry.get("searchParam"), "name") | common
            includes = entry.get("searchInclude")
            found["searchInclude"] |= {
                i for i in (includes if isinstance(includes, list) else []) if isinstance(i, str)
            }
    return out


def _names(items: Any, key: str) -> set[str]:
    if not isinstance(items, list):
        return set()
    return {i[key] for i in items if isinstance(i, Mapping) and isinstance(i.get(key), str)}


def declared_search(statement: Any) -> dict[str, set[str]]:
    """Resource type -> the search parameters ``statement`` declares (empty if unreadable)."""
    declared = _declared(statement) or {}
    return {rtype: found["searchParam"] for rtype, found in declared.items()}


def declared_includes(statement: Any) -> dict[str, set[str]]:
    """Resource type -> the ``_include`` names ``statement`` declares (``searchInclude``)."""
    declared = _declared(statement) or {}
    return {rtype: found["searchInclude"] for rtype, found in declared.items()}


def capability_differences(statement: Any) -> list[str]:
    """How ``statement`` differs from the catalogue's API, one sentence per difference.

    Resources, interactions, operations, search parameters and includes, in both
    directions; a statement that is not a CapabilityStatement is one difference.
    """
    declared = _declared(statement)
    if declared is None:
        return ["the answer is not a CapabilityStatement"]
    expected = _declared(capability_statement())
    assert expected is not None
    problems: list[str] = []
    for rtype in sorted(set(expected) - set(declared)):
        problems.append(f"{rtype}: in the catalogue, not declared by the server")
    for rtype in sorted(set(declared) - set(expected)):
        problems.append(f"{rtype}: declared by the server, not in the catalogue")
    for rtype in sorted(set(expected) & set(declared)):
        for kind in _KINDS:
            want, have = expected[rtype][kind], declared[rtype][kind]
            fhir = set(FHIR_SEARCH.get(rtype, ())) if kind == "searchParam" else set()
            if (want - have) - fhir:
                missing = ", ".join(sorted(want - have - fhir))
                problems.append(f"{rtype}: {kind} {missing} not declared")
            if (want - have) & fhir:
                missing = ", ".join(sorted((want - have) & fhir))
                problems.append(
                    f"{rtype}: {kind} {missing} not declared (FHIR R4 standard, not known to be "
                    "served by the vendor)"
                )
            if have - want:
                problems.append(
                    f"{rtype}: {kind} {', '.join(sorted(have - want))} declared, "
                    "not in the catalogue"
                )
    return problems
