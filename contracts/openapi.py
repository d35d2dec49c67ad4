"""Generate ``contracts/openapi.yaml`` (OpenAPI 3.1) from the catalogue.

The document is derived, never edited by hand: ``python -m contracts.openapi``
rewrites it, and a test fails when the committed file differs from what
:func:`build_openapi` produces. Every pattern is taken from the catalogue and is
ECMA-262 compatible (no look-around, no backreferences, no possessive groups).

Response schemas hold only the spec's rules (``Field.source_of`` is ``spec``)
and accept every form of "Shapes seen on the live service" (extension urls by
their last path segment, coded values in any of three keys, absolute and
``Type/id`` references, Practitioner ``name`` as an object or an array, Quantity
and Reference alternates), so that schemathesis never fails a deployment over a
fact or pmtk's own reading; the contract suite reports those as observations.
Request schemas (create bodies) hold every catalogue rule: what pmtk sends.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import yaml

from contracts.walker import ALTERNATE_SHAPES
from toolkit import catalogue as cat
from toolkit import rules

__all__ = [
    "OPENAPI_PATH",
    "build_openapi",
    "dump_openapi",
    "load_openapi",
    "operation_id",
    "render_openapi",
]

OPENAPI_PATH = Path(__file__).with_name("openapi.yaml")
FHIR_JSON = "application/fhir+json"
MERGE_PATCH = "application/merge-patch+json"

JsonSchema = dict[str, Any]


_SCALARS: dict[str, JsonSchema] = {
    "string": {"type": "string"},
    "boolean": {"type": "boolean"},
    "integer": {"type": "integer"},
    "number": {"type": "number"},
    "code": {"type": "string"},
}

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


# --------------------------------------------------------------------------- field schemas


def _ref(name: str) -> JsonSchema:
    return {"$ref": f"#/components/schemas/{name}"}


def _format_schema(fmt: str) -> JsonSchema:
    if fmt == "country":
        return {"$ref": "#/components/schemas/CountryCode"}
    if fmt == "currency":
        return {"$ref": "#/components/schemas/CurrencyCode"}
    out: JsonSchema = {"type": "string", "pattern": cat.format_pattern(fmt)}
    if fmt in ("date", "date-time"):
        out["format"] = fmt
    if fmt == "base64":
        out["contentEncoding"] = "base64"
    return out


def reference_schema(
    ref: cat.Ref, *, live: bool = False, strict_targets: bool = True
) -> JsonSchema:
    """A reference object: ``reference`` matching the catalogue pattern, ``type`` an allowed one.

    ``live`` (response schemas) also accepts the absolute (``https://host/main/Type/id``)
    and ``Type/id`` forms the live service uses; without ``strict_targets`` (a target or
    prefix rule that is not the spec's) any ``Type/id`` is accepted.
    """
    if strict_targets:
        tail = "|".join(f"{t.type}/{t.id_pattern}" for t in ref.targets)
    else:
        tail = "[A-Z][A-Za-z]+/[A-Za-z0-9.\\-]+"
    pattern = f"^{cat.API_PREFIX}/(?:{tail})$"
    if live:
        pattern = f"^(?:(?:https?://[^/?#]+)?{cat.API_PREFIX}/)?(?:{tail})$"
    props: dict[str, JsonSchema] = {
        "reference": {"type": "string", "pattern": pattern},
        "type": {"type": "string"},
        "display": {"type": "string"},
    }
    if strict_targets:
        props["type"]["enum"] = list(ref.types)
    return {"type": "object", "required": ["reference"], "properties": props}


def _single_schema(
    field: cat.Field, *, for_request: bool = False, src: cat.Source = "spec"
) -> JsonSchema:
    """Schema of one value of ``field`` (ignores ``many``).

    Request schemas hold every catalogue rule (what pmtk sends). Response schemas hold
    only the spec's rules and accept every form the live service is known to use, so
    that schemathesis never fails a deployment over a fact or over pmtk's own reading.
    """
    live = not for_request
    src = cat.weakest(src, field.source)

    def spec(aspect: cat.Aspect) -> bool:
        return for_request or cat.weakest(src, field.source_of(aspect)) == "spec"

    if live and src != "spec":
        return {}
    if live and (classify := LIVE_ALTERNATES.get_path(field)) is not None:
        return classify
    if live and not spec("type"):
        return {}
    if field.ref is not None:
        return reference_schema(field.ref, live=live, strict_targets=spec("reference"))
    if field.type == "object":
        props: dict[str, JsonSchema] = {}
        required: list[str] = []
        for sub in field.fields:
            props[sub.name] = field_schema(sub, for_request=for_request, src=src)
            if sub.required and (for_request or sub.source_of("required") == "spec"):
                required.append(sub.name)
        out: JsonSchema = {"type": "object", "properties": props}
        if required:
            out["required"] = required
        return out
    if field.enum and not field.open_enum and spec("enum"):
        values = list(field.enum)
        if None in values:
            return {"type": ["string", "null"], "enum": values}
        return {"type": "string", "enum": values}
    if field.format is not None and field.format_when is None and spec("format"):
        return _format_schema(field.format)
    if field.type in ("date", "date-time", "base64", "canonical") and spec("format"):
        return _format_schema(field.type)
    return dict(_SCALARS.get(field.type, {"type": "string"}))


class _Alternates:
    """Response schemas of the fields :data:`toolkit.rules.LIVE_ALTERNATES` lists."""

    SCHEMAS: ClassVar[dict[str, JsonSchema]] = {
        "Referral.limitQuantity.quantity": {
            "anyOf": [
                {"type": "number"},
                {"type": "object", "properties": {"value": {"type": "number"}}},
            ]
        },
        "Referral.referralDefinition": {
            "anyOf": [
                {"type": "string"},
                {
                    "type": "object",
                    "properties": {
                        "reference": {"type": "string"},
                        "display": {"type": "string"},
                    },
                },
            ]
        },
    }

    def __init__(self) -> None:
        missing = set(rules.LIVE_ALTERNATES) ^ set(self.SCHEMAS)
        assert not missing, f"alternate schemas out of step with toolkit.rules: {missing}"
        self._by_field = {id(cat.field_at(*p.split(".", 1))): s for p, s in self.SCHEMAS.items()}

    def get_path(self, field: cat.Field) -> JsonSchema | None:
        return self._by_field.get(id(field))


LIVE_ALTERNATES = _Alternates()


def field_schema(
    field: cat.Field, *, for_request: bool = False, src: cat.Source = "spec"
) -> JsonSchema:
    """Schema of ``field``'s JSON value (an array when ``many``)."""
    single = _single_schema(field, for_request=for_request, src=src)
    if not single:
        return single
    if field.many:
        many: JsonSchema = {"type": "array", "items": single}
        if not for_request and cat.weakest(src, field.source_of("type")) != "spec":
            return {"anyOf": [single, many]}
        return many
    return single


def _extension_item_schema(
    fields: list[cat.Field], *, for_request: bool, src: cat.Source = "spec"
) -> JsonSchema:
    """Items of ``extension``/``modifierExtension``: per-url value constraints via if/then.

    Response schemas match a url on its last path segment (a bare name or the full
    canonical url) and take a coded value from ``valueCoding``, ``valueCode`` or
    ``valueString``.
    """
    conditions: list[JsonSchema] = []
    for f in fields:
        assert f.extension is not None
        value = _single_schema(f, for_request=for_request, src=src)
        key = f.extension.value_key
        coded = key in rules.CODED_KEYS
        if key == "valueCoding" and f.type != "object":
            coding = {
                "type": "object",
                "properties": {"code": value, "display": {"type": "string"}},
            }
            values = {"valueCoding": coding}
            if not for_request:
                values |= {"valueCode": value, "valueString": value}
        elif coded and not for_request and f.type == "object":
            code = value.get("properties", {}).get("code", {"type": "string"})
            values = {key: value, "valueCode": code, "valueString": code}
        elif coded and not for_request:
            coding = {"type": "object", "properties": {"code": value}}
            values = {"valueCoding": coding, "valueCode": value, "valueString": value}
        else:
            values = {key: value}
        url: JsonSchema = {"const": f.extension.url}
        if not for_request:
            url = {"type": "string", "pattern": f"(^|/){f.extension.url}$"}
        conditions.append(
            {
                "if": {"type": "object", "properties": {"url": url}, "required": ["url"]},
                "then": {"properties": values},
            }
        )
    out: JsonSchema = {
        "type": "object",
        "required": ["url"],
        "properties": {"url": {"type": "string"}},
    }
    if conditions:
        out["allOf"] = conditions
    return out


def _object_properties(
    owner: str, fields: tuple[cat.Field, ...], *, for_request: bool, src: cat.Source = "spec"
) -> tuple[dict[str, JsonSchema], list[str]]:
    props: dict[str, JsonSchema] = {}
    required: list[str] = []
    by_container: dict[str, list[cat.Field]] = {}
    for f in fields:
        if f.extension is not None:
            by_container.setdefault(f.extension.container, []).append(f)
            continue
        if f.write_only and not for_request:
            continue
        schema = field_schema(f, for_request=for_request, src=src)
        if (owner, f.name) in ALTERNATE_SHAPES:
            if "type" in schema and schema.get("type") == "array":
                schema = {"anyOf": [schema["items"], schema]}
            else:
                schema = {"anyOf": [schema, {"type": "array", "items": schema}]}
        elif f.fields and f.type == "object" and schema:
            schema = _with_nested_extensions(owner, f, schema, for_request=for_request, src=src)
        props[f.name] = schema
        if f.required and (for_request or cat.weakest(src, f.source_of("required")) == "spec"):
            required.append(f.name)
    for container, ext_fields in by_container.items():
        item = _extension_item_schema(ext_fields, for_request=for_request, src=src)
        props[container] = {"type": "array", "items": item}
    return props, required


def _with_nested_extensions(
    owner: str, field: cat.Field, schema: JsonSchema, *, for_request: bool, src: cat.Source
) -> JsonSchema:
    """Nested objects (participant) may hold extension-encoded sub-fields too."""
    if not any(sub.extension is not None for sub in field.fields):
        return schema
    props, required = _object_properties(
        f"{owner}.{field.name}",
        field.fields,
        for_request=for_request,
        src=cat.weakest(src, field.source),
    )
    single: JsonSchema = {"type": "object", "properties": props}
    if required:
        single["required"] = required
    return {"type": "array", "items": single} if field.many else single


def resource_schema(res: cat.Resource, *, for_request: bool = False) -> JsonSchema:
    """The JSON schema of one resource (response shape, or a create body)."""
    props, required = _object_properties(
        res.name, res.fields, for_request=for_request, src=res.source
    )
    props = {"resourceType": {"type": "string", "const": res.name}, **props}
    if res.id_prefixes and "id" in props and (for_request or res.source == "spec"):
        props["id"] = {"type": "string", "pattern": res.id_pattern}
    if for_request:
        props.pop("id", None)
        props.pop("meta", None)
        required = [r for r in required if r in props]
        required = sorted(set(required) | {r for r in res.create_required if r in props})
    else:
        required = ["resourceType", "id", *required]
    out: JsonSchema = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out


def bundle_schema(resource_name: str) -> JsonSchema:
    return {
        "type": "object",
        "required": ["resourceType", "type"],
        "properties": {
            "resourceType": {"type": "string", "const": "Bundle"},
            "type": {"type": "string", "const": "searchset"},
            "total": {"type": "integer", "minimum": 0},
            "link": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["relation", "url"],
                    "properties": {"relation": {"type": "string"}, "url": {"type": "string"}},
                },
            },
            "entry": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["resource"],
                    "properties": {
                        "fullUrl": {"type": "string"},
                        "resource": {"$ref": f"#/components/schemas/{resource_name}"},
                    },
                },
            },
        },
    }


OPERATION_OUTCOME: JsonSchema = {
    "type": "object",
    "required": ["resourceType", "issue"],
    "properties": {
        "resourceType": {"type": "string", "const": "OperationOutcome"},
        "issue": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["severity", "code"],
                "properties": {
                    "severity": {
                        "type": "string",
                        "enum": ["fatal", "error", "warning", "information"],
                    },
                    "code": {"type": "string"},
                    "diagnostics": {"type": "string"},
                    "details": {"type": "object", "properties": {"text": {"type": "string"}}},
                },
            },
        },
    },
}


# --------------------------------------------------------------------------- operations


def _rate_limit_headers() -> dict[str, Any]:
    limit, remaining = cat.RATE_LIMIT_HEADERS
    return {
        limit: {"$ref": "#/components/headers/RateLimitLimit"},
        remaining: {"$ref": "#/components/headers/RateLimitRemaining"},
    }


def _json_response(description: str, schema: JsonSchema, *, headers: bool = True) -> JsonSchema:
    out: JsonSchema = {"description": description, "content": {FHIR_JSON: {"schema": schema}}}
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
    for name in cat.SEARCH_PARAMETERS.get(resource_name, ()):
        schema: JsonSchema = {"type": "string", "minLength": 1}
        if name == "date":
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


def _operation(endpoint: cat.Endpoint) -> JsonSchema:
    res_ref = {"$ref": f"#/components/schemas/{endpoint.resource}"}
    op: JsonSchema = {
        "operationId": operation_id(endpoint),
        "summary": endpoint.operation,
        "tags": [endpoint.resource],
    }
    kind = endpoint.kind
    if kind == "token":
        op["security"] = []
        op["requestBody"] = {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/TokenRequest"}}
            },
        }
        op["responses"] = {
            "200": {
                "description": "An access token",
                "content": {
                    FHIR_JSON: {"schema": {"$ref": "#/components/schemas/TokenResponse"}},
                    "application/json": {"schema": {"$ref": "#/components/schemas/TokenResponse"}},
                },
            },
            "400": {"$ref": "#/components/responses/Error400"},
            "401": {"$ref": "#/components/responses/Error401"},
            "429": {"$ref": "#/components/responses/TooManyRequests"},
        }
        return op
    if kind == "list":
        op["parameters"] = _list_parameters(endpoint.resource)
        op["responses"] = {
            "200": _json_response(
                f"A Bundle of {endpoint.resource}",
                {"$ref": f"#/components/schemas/{endpoint.resource}Bundle"},
            ),
            **_error_responses("400", "401", "403", "422", "500", "503"),
        }
    elif kind == "read":
        op["parameters"] = [_id_parameter(endpoint.resource)]
        op["responses"] = {
            "200": _json_response(f"One {endpoint.resource}", res_ref),
            **_error_responses("400", "401", "403", "404", "500", "503"),
        }
    elif kind == "find":
        op["parameters"] = _find_parameters()
        op["responses"] = {
            "200": _json_response(
                "A Bundle of proposed Appointments",
                {"$ref": "#/components/schemas/ProposedAppointmentBundle"},
            ),
            **_error_responses("400", "401", "403", "422", "500", "503"),
        }
    elif kind == "create":
        op["requestBody"] = {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"$ref": f"#/components/schemas/{endpoint.resource}Create"}
                }
            },
        }
        op["responses"] = {
            str(endpoint.success): _json_response(f"The created {endpoint.resource}", res_ref),
            **_error_responses("400", "401", "403", "422", "500", "503"),
        }
    elif kind == "update":
        body = {"type": "object"}
        op["parameters"] = [_id_parameter(endpoint.resource)]
        op["requestBody"] = {
            "required": True,
            "content": {MERGE_PATCH: {"schema": body}, "application/json": {"schema": body}},
        }
        op["responses"] = {
            "200": _json_response(f"The updated {endpoint.resource}", res_ref),
            "405": {"description": "The resource does not accept PATCH (empty body)"},
            **_error_responses("400", "401", "403", "404", "422", "500", "503"),
        }
    elif kind == "book":
        op["requestBody"] = {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/Parameters"}}
            },
        }
        op["responses"] = {
            str(endpoint.success): _json_response("The booked Appointment", res_ref),
            "409": {"$ref": "#/components/responses/Error409"},
            **_error_responses("400", "401", "403", "422", "500", "503"),
        }
    return op


# --------------------------------------------------------------------------- document


def _components() -> JsonSchema:
    schemas: dict[str, JsonSchema] = {}
    listed = set(cat.LISTED_RESOURCES)
    created = {e.resource for e in cat.ENDPOINTS if e.kind == "create"}
    for name, res in cat.RESOURCES.items():
        schemas[name] = resource_schema(res)
        if name in listed:
            schemas[f"{name}Bundle"] = bundle_schema(name)
        if name in created:
            schemas[f"{name}Create"] = resource_schema(res, for_request=True)
    proposed = resource_schema(cat.resource("Appointment"))
    proposed["properties"]["id"] = {"type": "string"}
    schemas["ProposedAppointment"] = proposed
    bundle = bundle_schema("ProposedAppointment")
    schemas["ProposedAppointmentBundle"] = bundle
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
    schemas["TokenRequest"] = {
        "type": "object",
        "required": ["grant_type", "client_id", "client_secret"],
        "properties": {
            "grant_type": {"type": "string", "const": "client_credentials"},
            "client_id": {"type": "string"},
            "client_secret": {"type": "string", "format": "password"},
        },
    }
    schemas["TokenResponse"] = {
        "type": "object",
        "required": ["token_type", "expires_in", "access_token"],
        "properties": {
            "token_type": {"type": "string", "const": "Bearer"},
            "expires_in": {"type": "integer", "minimum": 1},
            "access_token": {"type": "string", "minLength": 1},
        },
    }
    error_ref = {"$ref": "#/components/schemas/OperationOutcome"}
    responses: dict[str, JsonSchema] = {}
    for status, text in {**_ERROR_STATUSES, "409": "Conflict, for example a slot taken"}.items():
        responses[f"Error{status}"] = {
            "description": text,
            "content": {FHIR_JSON: {"schema": error_ref}},
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
        "content": {FHIR_JSON: {"schema": error_ref}},
    }
    limit_header, remaining_header = cat.RATE_LIMIT_HEADERS
    headers = {
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
    parameters = {
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
    return {
        "schemas": schemas,
        "responses": responses,
        "headers": headers,
        "parameters": parameters,
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
    header = (
        "# Generated by `python -m contracts.openapi` from toolkit/catalogue/. Do not edit.\n"
    )
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
