"""Validation of write bodies against the catalogue, before anything is sent.

A create, a merge patch or a ``$book`` Parameters body is checked field by
field against :mod:`toolkit.catalogue`: JSON types, closed enums, reference
shapes and id prefixes, formats (phone, country, currency, date, date-time,
canonical), required fields, and attachments (one of seven content types, valid
base64, at most ``MAX_ATTACHMENT_BYTES`` decoded). Every problem is collected;
if there is any, :class:`~toolkit.errors.RequestValidationError` lists them all
and the request is not sent.

Bodies may be plain dicts or pydantic models (dumped by alias, without unset
fields).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime
from functools import cache
from typing import Any, Literal

from toolkit import catalogue
from toolkit.catalogue import Field, Resource
from toolkit.errors import RequestValidationError

__all__ = [
    "CREATABLE",
    "NOT_PATCHABLE",
    "PATCHABLE",
    "as_body",
    "book_parameters",
    "check_book",
    "check_create",
    "check_patch",
    "reference_to",
]

Mode = Literal["create", "patch"]
Problems = list[tuple[str, str]]

CREATABLE: dict[str, str] = {e.resource: e.path for e in catalogue.ENDPOINTS if e.kind == "create"}
"""Resource type -> create path (note Coverage's trailing slash, spec section 4)."""

PATCHABLE: frozenset[str] = frozenset(e.resource for e in catalogue.ENDPOINTS if e.kind == "update")
"""Resource types with a PATCH endpoint."""

NOT_PATCHABLE: frozenset[str] = frozenset({"Practitioner", "PractitionerRole", "Organization"})
"""Resource types the API answers 405 to on PATCH (facts, client-observed)."""

_PHONE_SYSTEMS = frozenset({"phone", "sms", "fax"})
_TOP_LEVEL = frozenset({"resourceType", "id", "meta"})
_VALUE_KINDS = {
    "valueCode",
    "valueCoding",
    "valueReference",
    "valueBoolean",
    "valueString",
    "valueInteger",
}


def as_body(body: Any) -> dict[str, Any]:
    """A write body as a plain dict: pydantic models are dumped by alias, unset fields dropped."""
    dump = getattr(body, "model_dump", None)
    if callable(dump):
        out = dump(by_alias=True, exclude_none=True, mode="json")
        if isinstance(out, dict):
            return out
    if isinstance(body, Mapping):
        return dict(body)
    msg = f"a write body must be a dict or a pydantic model, got {type(body).__name__}"
    raise TypeError(msg)


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _fmt_ok(fmt: str, value: str) -> str | None:
    """``None`` when ``value`` satisfies format ``fmt``, else the reason."""
    if not _regex(catalogue.format_pattern(fmt)).fullmatch(value):
        examples = {
            "phone": "+{country code}{digits}, no spaces, e.g. '+61298765432'",
            "country": "an ISO 3166 alpha-2 code such as 'AU'",
            "currency": "an ISO 4217 code such as 'AUD'",
            "date": "YYYY-MM-DD",
            "date-time": "YYYY-MM-DDThh:mm:ss with Z or an offset",
            "canonical": "/main/ChargeItemDefinition/<id>",
            "base64": "base64 text",
        }
        return f"{value[:60]!r} is not {examples.get(fmt, fmt)}"
    try:
        if fmt == "date":
            date.fromisoformat(value)
        elif fmt == "date-time":
            datetime.fromisoformat(value)
    except ValueError:
        return f"{value!r} is not a real calendar {fmt}"
    if fmt == "country" and value not in catalogue.country_codes():
        return f"{value!r} is not an ISO 3166 alpha-2 country code"
    if fmt == "currency" and value not in catalogue.currency_codes():
        return f"{value!r} is not an ISO 4217 currency code"
    return None


def _check_base64(value: str, path: str, problems: Problems) -> None:
    if len(value) % 4 or not _regex(catalogue.format_pattern("base64")).fullmatch(value):
        problems.append((path, "is not valid base64 (standard alphabet, padded to 4 characters)"))
        return
    size = len(value) // 4 * 3 - value[-2:].count("=")
    if size > catalogue.MAX_ATTACHMENT_BYTES:
        limit = catalogue.MAX_ATTACHMENT_BYTES
        problems.append((path, f"decodes to {size} bytes, more than the {limit}-byte limit"))


def _check_reference(value: Any, field: Field, path: str, problems: Problems) -> None:
    ref = field.ref
    if not isinstance(value, dict):
        problems.append((path, f"must be a reference object {{reference, type}}, got {value!r}"))
        return
    text, kind = value.get("reference"), value.get("type")
    allowed = ", ".join(ref.types) if ref else "?"
    if not isinstance(text, str):
        problems.append((f"{path}.reference", "is required and must be a string"))
    elif ref is not None and not _regex(ref.pattern).fullmatch(text):
        shapes = " or ".join(
            f"/main/{t.type}/{'|'.join(t.prefixes) if t.prefixes else ''}<id>" for t in ref.targets
        )
        problems.append((f"{path}.reference", f"{text!r} does not have the shape {shapes}"))
    if not isinstance(kind, str):
        problems.append((f"{path}.type", f"is required: one of {allowed}"))
    elif ref is not None and kind not in ref.types:
        problems.append((f"{path}.type", f"{kind!r} is not one of {allowed}"))
    elif isinstance(text, str) and text.split("/")[2:3] != [kind]:
        problems.append((f"{path}.type", f"{kind!r} does not match the reference {text!r}"))
    for key in value:
        if key not in ("reference", "type", "display"):
            problems.append((f"{path}.{key}", "is not a field of a reference"))


def _check_value(value: Any, field: Field, path: str, problems: Problems, mode: Mode) -> None:
    """Check one (non-list) value against ``field``."""
    if value is None:
        if None in field.enum or mode == "patch":
            return
        problems.append((path, "must not be null"))
        return
    kind = field.type
    if kind == "reference":
        _check_reference(value, field, path, problems)
    elif kind == "object":
        if not isinstance(value, dict):
            problems.append((path, f"must be an object, got {type(value).__name__}"))
        else:
            _check_object(value, field.fields, path, problems, mode, nested=True)
    elif kind == "boolean":
        if not isinstance(value, bool):
            problems.append((path, f"must be true or false, got {value!r}"))
    elif kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append((path, f"must be an integer, got {value!r}"))
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            problems.append((path, f"must be a number, got {value!r}"))
    elif not isinstance(value, str):
        problems.append((path, f"must be a string, got {value!r}"))
    elif kind == "base64":
        _check_base64(value, path, problems)
    elif kind == "code" and field.enum and not field.open_enum and value not in field.enum:
        allowed = ", ".join(repr(v) for v in field.enum if v is not None)
        problems.append((path, f"{value!r} is not one of {allowed}"))
    elif field.format is not None and field.format != "base64":
        reason = _fmt_ok(field.format, value)
        if reason:
            problems.append((path, reason))


def _check_field(value: Any, field: Field, path: str, problems: Problems, mode: Mode) -> None:
    if field.many:
        if value is None and mode == "patch":
            return
        if not isinstance(value, list):
            problems.append((path, f"must be an array, got {type(value).__name__}"))
            return
        for i, item in enumerate(value):
            _check_value(item, field, f"{path}[{i}]", problems, mode)
    else:
        _check_value(value, field, path, problems, mode)


def _check_extension_value(
    item: dict[str, Any], field: Field, path: str, problems: Problems
) -> None:
    ext = field.extension
    assert ext is not None
    key = ext.value_key
    if key not in item:
        problems.append((path, f"extension {ext.url!r} carries its value in {key!r}"))
        return
    value = item[key]
    vpath = f"{path}.{key}"
    if key == "valueCoding" and field.type == "code":
        if not isinstance(value, dict):
            problems.append((vpath, "must be a Coding object with a 'code'"))
            return
        _check_value(value.get("code"), field, f"{vpath}.code", problems, "create")
        return
    _check_value(value, field, vpath, problems, "create")


def _check_extensions(
    items: Any, container: str, fields: tuple[Field, ...], path: str, problems: Problems
) -> None:
    by_url = {
        f.extension.url: f
        for f in fields
        if f.extension is not None and f.extension.container == container
    }
    if not isinstance(items, list):
        problems.append((path, "must be an array of {url, value[x]} objects"))
        return
    for i, item in enumerate(items):
        ipath = f"{path}[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            problems.append((ipath, "must be an object with a 'url'"))
            continue
        field = by_url.get(item["url"])
        if field is None:
            known = ", ".join(sorted(by_url)) or "none here"
            problems.append(
                (f"{ipath}.url", f"{item['url']!r} is not a known {container} ({known})")
            )
            continue
        _check_extension_value(item, field, ipath, problems)
        for key in item:
            if key != "url" and key not in _VALUE_KINDS:
                problems.append((f"{ipath}.{key}", "is not a field of an extension"))


def _check_telecom_phone(item: Any, path: str, problems: Problems) -> None:
    if isinstance(item, dict) and item.get("system") in _PHONE_SYSTEMS:
        value = item.get("value")
        if isinstance(value, str):
            reason = _fmt_ok("phone", value)
            if reason:
                problems.append((f"{path}.value", reason))


def _check_object(
    obj: dict[str, Any],
    fields: tuple[Field, ...],
    path: str,
    problems: Problems,
    mode: Mode,
    *,
    nested: bool,
) -> None:
    prefix = f"{path}." if path else ""
    plain = {f.name: f for f in fields if f.extension is None}
    containers = {f.extension.container for f in fields if f.extension is not None}
    for key, value in obj.items():
        kpath = f"{prefix}{key}"
        if key in plain:
            field = plain[key]
            _check_field(value, field, kpath, problems, mode)
            if field.name == "telecom" and isinstance(value, list):
                for i, item in enumerate(value):
                    _check_telecom_phone(item, f"{kpath}[{i}]", problems)
        elif key in ("extension", "modifierExtension") and key in containers:
            _check_extensions(value, key, fields, kpath, problems)
        elif not nested and key in _TOP_LEVEL:
            continue
        else:
            ext_field = next((f for f in fields if f.extension and f.extension.url == key), None)
            if ext_field is not None and ext_field.extension is not None:
                e = ext_field.extension
                hint = f"send it as {e.container}[url={e.url!r}].{e.value_key}"
                problems.append((kpath, f"is an extension field: {hint}"))
            else:
                problems.append((kpath, "is not a field known to the catalogue"))
    # Required sub-fields (attachments' contentType/data/title) apply in every mode.
    if nested or mode == "create":
        for f in fields:
            if f.required and f.extension is None and obj.get(f.name) is None:
                problems.append((f"{prefix}{f.name}", "is required"))


def _check_id(res: Resource, value: Any, prefixes: tuple[str, ...], problems: Problems) -> None:
    if not isinstance(value, str) or not _regex(res.id_pattern).fullmatch(value):
        want = " or ".join(f"{p}<id>" for p in res.id_prefixes) or "letters, digits, '.', '-'"
        problems.append(("id", f"{value!r} is not a {res.name} id ({want})"))
    elif prefixes and not value.startswith(prefixes):
        problems.append(("id", f"{value!r}: new {res.name} ids start with {' or '.join(prefixes)}"))


def _start_body(
    resource_type: str, body: Any, problems: Problems
) -> tuple[Resource, dict[str, Any]]:
    res = catalogue.resource(resource_type)
    data = as_body(body)
    kind = data.get("resourceType")
    if kind is not None and kind != resource_type:
        problems.append(("resourceType", f"{kind!r} does not match {resource_type!r}"))
    return res, data


def check_create(resource_type: str, body: Any) -> dict[str, Any]:
    """Validate a create body; return it as a dict with ``resourceType`` set.

    Raises
    ------
    RequestValidationError
        Listing every problem, when there is any (or when the type has no create endpoint).
    """
    problems: Problems = []
    if resource_type not in CREATABLE:
        known = ", ".join(sorted(CREATABLE))
        problems.append(("", f"{resource_type} has no create endpoint; creatable: {known}"))
        raise RequestValidationError(resource_type, problems)
    res, data = _start_body(resource_type, body, problems)
    _check_object(data, res.fields, "", problems, "create", nested=False)
    for name in res.create_required:
        if data.get(name) is None:
            problems.append((name, f"is required to create a {resource_type}"))
    if "id" in data:
        _check_id(res, data["id"], res.create_prefixes, problems)
    if problems:
        raise RequestValidationError(resource_type, problems)
    return {"resourceType": resource_type, **{k: v for k, v in data.items() if k != "resourceType"}}


def check_patch(resource_type: str, record_id: str, changes: Any) -> dict[str, Any]:
    """Validate a merge patch for ``resource_type/record_id``; return it as a dict.

    ``null`` values are allowed (a merge patch removes those fields), required
    fields need not be present, but every value that is present must be valid.

    Raises
    ------
    RequestValidationError
        Listing every problem; also for types the API refuses to patch (405).
    """
    problems: Problems = []
    if resource_type in NOT_PATCHABLE or resource_type not in PATCHABLE:
        reason = (
            f"{resource_type} does not accept PATCH (the API answers 405 Method Not Allowed)"
            if resource_type in NOT_PATCHABLE
            else f"{resource_type} has no update endpoint"
        )
        known = ", ".join(sorted(PATCHABLE - NOT_PATCHABLE))
        problems.append(("", f"{reason}; patchable: {known}"))
        raise RequestValidationError(resource_type, problems)
    res, data = _start_body(resource_type, changes, problems)
    _check_id(res, record_id, (), problems)
    if "id" in data and data["id"] != record_id:
        problems.append(("id", f"{data['id']!r} differs from the id patched, {record_id!r}"))
    if not data:
        problems.append(("", "the patch is empty"))
    _check_object(data, res.fields, "", problems, "patch", nested=False)
    if problems:
        raise RequestValidationError(resource_type, problems)
    return data


def reference_to(resource_type: str, value: Any) -> dict[str, Any]:
    """A reference object from an id, a ``/main/...`` path or a reference dict.

    Examples
    --------
    >>> reference_to("Patient", "123")
    {'reference': '/main/Patient/123', 'type': 'Patient'}
    >>> reference_to("PractitionerRole", "/main/PractitionerRole/PR-9")
    {'reference': '/main/PractitionerRole/PR-9', 'type': 'PractitionerRole'}
    """
    if isinstance(value, Mapping):
        return dict(value)
    text = str(value)
    if not text.startswith("/"):
        text = f"{catalogue.API_PREFIX}/{resource_type}/{text}"
    return {"reference": text, "type": resource_type}


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            msg = f"datetime {value!r} has no timezone; pass an aware datetime"
            raise ValueError(msg)
        return value.isoformat()
    return str(value)


def book_parameters(
    *,
    start: datetime | str,
    end: datetime | str,
    practitioner_role: Any,
    patient: Any,
    healthcare_service: Any = None,
    location_type: str = "clinic",
    status: str = "booked",
    description: str | None = None,
) -> dict[str, Any]:
    """The ``Parameters`` body of ``POST /main/Appointment/$book`` (facts, Writes).

    ``practitioner_role``, ``patient`` and ``healthcare_service`` accept an id
    (``"PR-1234"``), a ``/main/...`` path or a reference dict. ``minutesDuration``
    is computed from ``start`` and ``end``.
    """
    problems: Problems = []
    try:
        start_s, end_s = _iso(start), _iso(end)
    except ValueError as exc:
        raise RequestValidationError("Appointment", [("start/end", str(exc))]) from None
    minutes = 0
    try:
        delta = datetime.fromisoformat(end_s) - datetime.fromisoformat(start_s)
        minutes = int(delta.total_seconds() // 60)
    except (TypeError, ValueError):
        problems.append(("start/end", "start and end must be ISO 8601 date-times with an offset"))
    if problems:
        raise RequestValidationError("Appointment", problems)
    appointment: dict[str, Any] = {
        "resourceType": "Appointment",
        "start": start_s,
        "end": end_s,
        "minutesDuration": minutes,
        "participant": [
            {
                "type": [{"coding": [{"code": "ATND"}]}],
                "actor": reference_to("PractitionerRole", practitioner_role),
            }
        ],
    }
    if description is not None:
        appointment["description"] = description
    parameter: list[dict[str, Any]] = [
        {"name": "appt-resource", "resource": appointment},
        {"name": "patient-id", "valueReference": reference_to("Patient", patient)},
    ]
    if healthcare_service is not None:
        parameter.append(
            {
                "name": "healthcare-service-id",
                "valueReference": reference_to("HealthcareService", healthcare_service),
            }
        )
    parameter.append({"name": "location-type", "valueCode": location_type})
    parameter.append({"name": "status", "valueCode": status})
    return {"resourceType": "Parameters", "parameter": parameter}


_BOOK_REFS = {
    "patient-id": catalogue.Ref((catalogue.Target("Patient"),)),
    "healthcare-service-id": catalogue.Ref((catalogue.Target("HealthcareService"),)),
    "appt-id": catalogue.Ref((catalogue.Target("Appointment"),)),
}


def check_book(body: Any) -> dict[str, Any]:
    """Validate a ``$book`` Parameters body; return it as a dict.

    Raises
    ------
    RequestValidationError
        Listing every problem.
    """
    problems: Problems = []
    data = as_body(body)
    if data.get("resourceType") != "Parameters":
        problems.append(("resourceType", "a $book body is a 'Parameters' resource"))
    params = data.get("parameter")
    if not isinstance(params, list) or not params:
        problems.append(("parameter", "must be a non-empty array"))
        raise RequestValidationError("Appointment", problems)
    appt = catalogue.resource("Appointment")
    seen: set[str] = set()
    for i, p in enumerate(params):
        path = f"parameter[{i}]"
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            problems.append((path, "must be an object with a 'name'"))
            continue
        name = p["name"]
        seen.add(name)
        if name == "appt-resource":
            res = p.get("resource")
            if not isinstance(res, dict):
                problems.append((f"{path}.resource", "must be an Appointment object"))
                continue
            _check_object(res, appt.fields, f"{path}.resource", problems, "create", nested=False)
            start, end = str(res.get("start")), str(res.get("end"))
            try:
                backwards = datetime.fromisoformat(end) <= datetime.fromisoformat(start)
            except (TypeError, ValueError):
                backwards = False  # already reported as a format problem
            if backwards:
                problems.append((f"{path}.resource.end", "must be after start"))
            actors = [
                (x or {}).get("actor", {}).get("type")
                for x in res.get("participant") or []
                if isinstance(x, dict)
            ]
            if "PractitionerRole" not in actors:
                problems.append(
                    (f"{path}.resource.participant", "needs a PractitionerRole actor (ATND)")
                )
        elif name in _BOOK_REFS:
            field = Field(name, "reference", ref=_BOOK_REFS[name])
            _check_value(
                p.get("valueReference"), field, f"{path}.valueReference", problems, "create"
            )
        elif name in ("location-type", "status"):
            if not isinstance(p.get("valueCode"), str) or not p["valueCode"]:
                problems.append((f"{path}.valueCode", "must be a non-empty code"))
        else:
            problems.append((f"{path}.name", f"{name!r} is not a $book parameter"))
    if ("appt-resource" in seen) == ("appt-id" in seen):
        problems.append(("parameter", "needs exactly one of 'appt-resource' and 'appt-id'"))
    if "patient-id" not in seen:
        problems.append(("parameter", "needs a 'patient-id' parameter"))
    if problems:
        raise RequestValidationError("Appointment", problems)
    return data
