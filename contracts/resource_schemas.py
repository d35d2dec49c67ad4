"""JSON Schemas of the catalogue's resources: what a body must look like, field by field.

Apart from :mod:`contracts.openapi`, which wraps these in the HTTP surface
(operations, parameters, responses, the document), because the rules of a body
(formats, references, extensions, live alternates, spec-only response rules) are
the long and subtle part and change for different reasons than the endpoints do.

Response schemas hold only the spec's rules (``Field.source_of`` is ``spec``) and
accept every form of "Shapes seen on the live service"; request schemas (create
bodies) hold every catalogue rule: what pmtk sends.
"""

from __future__ import annotations

from typing import Any

from toolkit import catalogue as cat
from toolkit import rules
from toolkit.catalogue import forms

__all__ = [
    "OPERATION_OUTCOME",
    "JsonSchema",
    "bundle_schema",
    "field_schema",
    "reference_schema",
    "resource_schema",
]

JsonSchema = dict[str, Any]

_SCALARS: dict[str, JsonSchema] = {
    "string": {"type": "string"},
    "boolean": {"type": "boolean"},
    "integer": {"type": "integer"},
    "number": {"type": "number"},
    "code": {"type": "string"},
}


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
    if live and src != "spec":
        return {}
    canonical = _canonical_schema(field, for_request=for_request, src=src)
    if live and (alternates := forms.response_schema(field, canonical)) is not None:
        return alternates  # the catalogue's alternative forms (toolkit.catalogue.forms)
    return canonical


def _canonical_schema(field: cat.Field, *, for_request: bool, src: cat.Source) -> JsonSchema:
    """Schema of one value of ``field`` in the catalogue's own form (see :func:`_single_schema`)."""
    live = not for_request

    def spec(aspect: cat.Aspect) -> bool:
        return for_request or cat.weakest(src, field.source_of(aspect)) == "spec"

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
        if forms.checked_array(f):
            schema = forms.array_schema(f, schema)
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
