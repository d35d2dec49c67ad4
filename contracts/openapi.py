"""Generate ``contracts/openapi.yaml`` (OpenAPI 3.1) from the catalogue.

The document is derived, never edited by hand: ``python -m contracts.openapi``
rewrites it, and a test fails when the committed file differs from what
:func:`build_openapi` produces. Every pattern is taken from the catalogue and is
ECMA-262 compatible (no look-around, no backreferences, no possessive groups).

This module holds the HTTP surface (operations, parameters, responses, the
document); the bodies' schemas come from :mod:`contracts.resource_schemas`.
Response schemas hold only the spec's rules (``Field.source_of`` is ``spec``)
and accept every form of "Shapes seen on the live service" (extension urls by
their last path segment, coded values in any of three keys, absolute and
``Type/id`` references, Practitioner ``name`` as an object or an array, Quantity
and Reference alternates), so that schemathesis never fails a deployment over a
fact or pmtk's own reading; the contract suite reports those as observations.
Request schemas (create bodies) hold every catalogue rule: what pmtk sends.
Only the spec's operations are paths: an endpoint known from the facts or from pmtk
(PractitionerRole, Invoice...) is walked by the data checks, which report what
they find, and its absence, as observations.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from contracts.resource_schemas import (
    OPERATION_OUTCOME,
    JsonSchema,
    bundle_schema,
    resource_schema,
)
from toolkit import catalogue as cat

__all__ = [
    "OPENAPI_PATH",
    "build_openapi",
    "dump_openapi",
    "load_openapi",
    "operation_id",
    "render_openapi",
]

OPENAPI_PATH = Path(__file__).with_name("openapi.yaml")


_ERROR_STATUSES: dict[str, str] = {
    "400": "Bad request (OperationOutcome)",
    "401": "Missing, invalid or expired token (OperationOutcome)",
    "403": "Forbidden, for example a missing permission or User-Agent (OperationOutcome)",
    "404": "No record with that id (OperationOutcome)",
    "422": "Unprocessable request (OperationOutcome)",
    "500": "Server error (OperationOutcome)",
    "503": "Service unavailable (OperationOutcome)",
}


def operation_id(endpoint: cat.Endpoint) -> str:
    """A stable operationId, for example ``listReferral`` or ``bookAppointment``."""
    verbs = {
        "list": "list",
        "read": "get",
        "create": "create",
        "update": "update",
        "book": "book",
        "find": "find",
        "token": "get",
    }
    return f"{verbs[endpoint.kind]}{endpoint.resource}"


# --------------------------------------------------------------------------- operations


def _rate_limit_headers() -> dict[str, Any]:
    limit, remaining = cat.RATE_LIMIT_HEADERS
    return {
        limit: {"$ref": "#/components/headers/RateLimitLimit"},
        remaining: {"$ref": "#/components/headers/RateLimitRemaining"},
    }


def _json_response(description: str, schema: JsonSchema, *, headers: bool = True) -> JsonSchema:
    out: JsonSchema = {"description": description, "content": {cat.FHIR_JSON: {"schema": schema}}}
    if headers:
        out["headers"] = _rate_limit_headers()
    return out


def _error_responses(*statuses: str) -> dict[str, Any]:
    out: dict[str, Any] = {s: {"$ref": f"#/components/responses/Error{s}"} for s in statuses}
    out["429"] = {"$ref": "#/components/responses/TooManyRequests"}
    return out


_DATE = "20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])"
_TIME = "T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](Z|[+-](0[0-9]|1[0-4]):[0-5][0-9])"
SEARCH_DATE = f"{_DATE}({_TIME})?"
"""Query-side dates: the shape *and* a real calendar day, so generated searches are valid."""


def _list_parameters(resource_name: str) -> list[JsonSchema]:
    params: list[JsonSchema] = [
        {"$ref": "#/components/parameters/count"},
        {"$ref": "#/components/parameters/page"},
        {"$ref": "#/components/parameters/lastUpdated"},
        {"$ref": "#/components/parameters/sort"},
        {"$ref": "#/components/parameters/ids"},
        {"$ref": "#/components/parameters/total"},
    ]
    date_names = cat.DATE_SEARCH.get(resource_name, ((), ""))[0]
    for name in cat.SEARCH_PARAMETERS.get(resource_name, ()):
        schema: JsonSchema = {"type": "string", "minLength": 1}
        if name in date_names or cat.search_type(resource_name, name) == "date":
            schema = {"type": "string", "pattern": f"^(eq|ne|gt|ge|lt|le)?{SEARCH_DATE}$"}
        params.append({"name": name, "in": "query", "required": False, "schema": schema})
    return params


def _id_parameter(resource_name: str) -> JsonSchema:
    res = cat.resource(resource_name)
    return {
        "name": "id",
        "in": "path",
        "required": True,
        "description": "Resource id (with its prefix for Organization and Practitioner).",
        "schema": {"type": "string", "pattern": res.id_pattern},
    }


def _find_parameters() -> list[JsonSchema]:
    dt = {"type": "string", "format": "date-time", "pattern": f"^{_DATE}{_TIME}$"}
    return [
        {"name": "start", "in": "query", "required": True, "schema": dt},
        {"name": "end", "in": "query", "required": True, "schema": dt},
        {
            "name": "duration",
            "in": "query",
            "required": True,
            "schema": {"type": "integer", "minimum": 1, "maximum": 480},
        },
        {"name": "practitioner-role", "in": "query", "schema": {"type": "string"}},
        {"name": "practitioner", "in": "query", "schema": {"type": "string"}},
        {"name": "organization", "in": "query", "schema": {"type": "string"}},
        {"name": "show", "in": "query", "schema": {"type": "string", "enum": ["first-available"]}},
        {"name": "_sort", "in": "query", "schema": {"type": "string", "enum": ["start", "-start"]}},
    ]


def _book_body() -> JsonSchema:
    return {
        "type": "object",
        "required": ["resourceType", "parameter"],
        "properties": {
            "resourceType": {"type": "string", "const": "Parameters"},
            "parameter": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string"},
                        "resource": {"type": "object"},
                        "valueReference": {"type": "object"},
                        "valueCode": {"type": "string"},
                    },
                },
            },
        },
    }


def _token_operation(endpoint: cat.Endpoint, op: JsonSchema) -> None:
    op["security"] = []
    op["requestBody"] = {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TokenRequest"}}},
    }
    token_ref = "#/components/schemas/TokenResponse"
    op["responses"] = {
        "200": {
            "description": "An access token",
            "content": {
                cat.FHIR_JSON: {"schema": {"$ref": token_ref}},
                "application/json": {"schema": {"$ref": token_ref}},
            },
        },
        "400": {"$ref": "#/components/responses/Error400"},
        "401": {"$ref": "#/components/responses/Error401"},
        "429": {"$ref": "#/components/responses/TooManyRequests"},
    }


def _list_operation(endpoint: cat.Endpoint, op: JsonSchema) -> None:
    op["parameters"] = _list_parameters(endpoint.resource)
    op["responses"] = {
        "200": _json_response(
            f"A Bundle of {endpoint.resource}",
            {"$ref": f"#/components/schemas/{endpoint.resource}Bundle"},
        ),
        **_error_responses("400", "401", "403", "422", "500", "503"),
    }


def _read_operation(endpoint: cat.Endpoint, op: JsonSchema) -> None:
    op["parameters"] = [_id_parameter(endpoint.resource)]
    op["responses"] = {
        "200": _json_response(f"One {endpoint.resource}", _resource_ref(endpoint)),
        **_error_responses("400", "401", "403", "404", "500", "503"),
    }


def _find_operation(endpoint: cat.Endpoint, op: JsonSchema) -> None:
    op["parameters"] = _find_parameters()
    op["responses"] = {
        "200": _json_response(
            "A Bundle of proposed Appointments",
            {"$ref": "#/components/schemas/ProposedAppointmentBundle"},
        ),
        **_error_responses("400", "401", "403", "422", "500", "503"),
    }


def _create_operation(endpoint: cat.Endpoint, op: JsonSchema) -> None:
    create_ref = {"$ref": f"#/components/schemas/{endpoint.resource}Create"}
    op["requestBody"] = {
        "required": True,
        "content": {"application/json": {"schema": create_ref}},
    }
    op["responses"] = {
        str(endpoint.success): _json_response(
            f"The created {endpoint.resource}", _resource_ref(endpoint)
        ),
        **_error_responses("400", "401", "403", "422", "500", "503"),
    }


def _update_operation(endpoint: cat.Endpoint, op: JsonSchema) -> None:
    body = {"type": "object"}
    op["parameters"] = [_id_parameter(endpoint.resource)]
    op["requestBody"] = {
        "required": True,
        "content": {cat.MERGE_PATCH_JSON: {"schema": body}, "application/json": {"schema": body}},
    }
    op["responses"] = {
        "200": _json_response(f"The updated {endpoint.resource}", _resource_ref(endpoint)),
        "405": {"description": "The resource does not accept PATCH (empty body)"},
        **_error_responses("400", "401", "403", "404", "422", "500", "503"),
    }


def _book_operation(endpoint: cat.Endpoint, op: JsonSchema) -> None:
    op["requestBody"] = {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Parameters"}}},
    }
    op["responses"] = {
        str(endpoint.success): _json_response("The booked Appointment", _resource_ref(endpoint)),
        "409": {"$ref": "#/components/responses/Error409"},
        **_error_responses("400", "401", "403", "422", "500", "503"),
    }


def _resource_ref(endpoint: cat.Endpoint) -> JsonSchema:
    return {"$ref": f"#/components/schemas/{endpoint.resource}"}


_OPERATIONS: dict[str, Callable[[cat.Endpoint, JsonSchema], None]] = {
    "token": _token_operation,
    "list": _list_operation,
    "read": _read_operation,
    "find": _find_operation,
    "create": _create_operation,
    "update": _update_operation,
    "book": _book_operation,
}
"""Endpoint kind -> the step that adds its parameters, request body and responses."""


def _operation(endpoint: cat.Endpoint) -> JsonSchema:
    op: JsonSchema = {
        "operationId": operation_id(endpoint),
        "summary": endpoint.operation,
        "tags": [endpoint.resource],
    }
    _OPERATIONS[endpoint.kind](endpoint, op)
    return op


# --------------------------------------------------------------------------- document


def _resource_schemas() -> dict[str, JsonSchema]:
    """Per resource: its response schema, its Bundle (when listed), its create body."""
    schemas: dict[str, JsonSchema] = {}
    listed = set(cat.LISTED_RESOURCES)
    created = set(cat.CREATE_PATHS)
    for name, res in cat.RESOURCES.items():
        schemas[name] = resource_schema(res)
        if name in listed:
            schemas[f"{name}Bundle"] = bundle_schema(name)
        if name in created:
            schemas[f"{name}Create"] = resource_schema(res, for_request=True)
    proposed = resource_schema(cat.resource("Appointment"))
    proposed["properties"]["id"] = {"type": "string"}
    schemas["ProposedAppointment"] = proposed
    schemas["ProposedAppointmentBundle"] = bundle_schema("ProposedAppointment")
    return schemas


_TOKEN_SCHEMAS: dict[str, JsonSchema] = {
    "TokenRequest": {
        "type": "object",
        "required": ["grant_type", "client_id", "client_secret"],
        "properties": {
            "grant_type": {"type": "string", "const": "client_credentials"},
            "client_id": {"type": "string"},
            "client_secret": {"type": "string", "format": "password"},
        },
    },
    "TokenResponse": {
        "type": "object",
        "required": ["token_type", "expires_in", "access_token"],
        "properties": {
            "token_type": {"type": "string", "const": "Bearer"},
            "expires_in": {"type": "integer", "minimum": 1},
            "access_token": {"type": "string", "minLength": 1},
        },
    },
}


def _schemas() -> dict[str, JsonSchema]:
    schemas = _resource_schemas()
    schemas["OperationOutcome"] = OPERATION_OUTCOME
    schemas["Parameters"] = _book_body()
    schemas["CountryCode"] = {
        "type": "string",
        "pattern": cat.format_pattern("country"),
        "enum": sorted(cat.country_codes()),
    }
    schemas["CurrencyCode"] = {
        "type": "string",
        "pattern": cat.format_pattern("currency"),
        "enum": sorted(cat.currency_codes()),
    }
    schemas.update(copy.deepcopy(_TOKEN_SCHEMAS))
    return schemas


def _responses() -> dict[str, JsonSchema]:
    """The shared error responses (OperationOutcome bodies) and the 429 with retry-after."""
    error_ref = {"$ref": "#/components/schemas/OperationOutcome"}
    responses: dict[str, JsonSchema] = {}
    for status, text in {**_ERROR_STATUSES, "409": "Conflict, for example a slot taken"}.items():
        responses[f"Error{status}"] = {
            "description": text,
            "content": {cat.FHIR_JSON: {"schema": error_ref}},
        }
    responses["TooManyRequests"] = {
        "description": "Rate limit exceeded; wait retry-after seconds",
        "headers": {
            cat.RETRY_AFTER_HEADER: {
                "required": True,
                "description": "Seconds to wait before the next request",
                "schema": {"type": "integer", "minimum": 0},
            },
        },
        "content": {cat.FHIR_JSON: {"schema": error_ref}},
    }
    return responses


def _headers() -> dict[str, JsonSchema]:
    limit_header, remaining_header = cat.RATE_LIMIT_HEADERS
    return {
        "RateLimitLimit": {
            "required": True,
            "description": f"{limit_header}: requests allowed per one-minute sliding window",
            "schema": {"type": "integer", "minimum": 1},
        },
        "RateLimitRemaining": {
            "required": True,
            "description": f"{remaining_header}: requests left in the current window",
            "schema": {"type": "integer", "minimum": 0},
        },
    }


def _parameters() -> dict[str, JsonSchema]:
    """The query parameters every list takes (referenced from each list operation)."""
    return {
        "count": {
            "name": "_count",
            "in": "query",
            "description": f"Page size; {cat.DEFAULT_PAGE_SIZE} when absent",
            "schema": {"type": "integer", "minimum": 1, "maximum": cat.MAX_PAGE_SIZE},
        },
        "page": {
            "name": "page",
            "in": "query",
            "description": "1-based page number",
            "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
        },
        "lastUpdated": {
            "name": "_lastUpdated",
            "in": "query",
            "schema": {"type": "string", "pattern": f"^(gt|ge|lt|le)?{SEARCH_DATE}$"},
        },
        "sort": {
            "name": "_sort",
            "in": "query",
            "description": "A leading '-' sorts descending",
            "schema": {"type": "string", "enum": ["_lastUpdated", "-_lastUpdated", "_id", "-_id"]},
        },
        "ids": {
            "name": "_id",
            "in": "query",
            "description": "Comma-separated ids",
            "schema": {"type": "string", "pattern": "^[A-Za-z0-9.\\-]+(,[A-Za-z0-9.\\-]+)*$"},
        },
        "total": {
            "name": "_total",
            "in": "query",
            "schema": {"type": "string", "enum": ["none", "accurate"]},
        },
    }


def _components() -> JsonSchema:
    return {
        "schemas": _schemas(),
        "responses": _responses(),
        "headers": _headers(),
        "parameters": _parameters(),
        "securitySchemes": {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "bearerFormat": "JWT",
                "description": "OAuth 2.0 client credentials via POST /main/oauth/token",
            },
        },
    }


def build_openapi() -> JsonSchema:
    """The whole OpenAPI 3.1 document, as a plain dict."""
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in cat.ENDPOINTS:
        if endpoint.source != "spec":  # reported by the data checks, as observations
            continue
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = _operation(endpoint)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Practice Management API (pmtk contract)",
            "version": "1.0.0",
            "description": "Generated from toolkit/catalogue/ by contracts/openapi.py; "
            "do not edit by hand.",
        },
        "servers": [{"url": url.removesuffix(cat.API_PREFIX)} for url in cat.REGIONS.values()],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": _components(),
    }


def render_openapi() -> str:
    """The YAML text of :func:`build_openapi` (deterministic)."""
    header = "# Generated by `python -m contracts.openapi` from toolkit/catalogue/. Do not edit.\n"
    body = yaml.safe_dump(build_openapi(), sort_keys=False, allow_unicode=True, width=100)
    return header + body


@cache
def load_openapi(path: Path = OPENAPI_PATH) -> JsonSchema:
    """The committed document, parsed once per process (the C loader when available)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    data: JsonSchema = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    return data


def dump_openapi(path: Path = OPENAPI_PATH) -> Path:
    """Write the generated document to ``path`` and return it."""
    path.write_text(render_openapi(), encoding="utf-8")
    return path


if __name__ == "__main__":  # pragma: no cover - developer entry point
    out = dump_openapi(Path(sys.argv[1]) if len(sys.argv) > 1 else OPENAPI_PATH)
    print(f"wrote {out}")
