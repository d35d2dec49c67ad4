"""One generic walk of the catalogue's Field tree over real JSON.

:func:`walk_resource` visits every field of a resource as the catalogue
describes it (nested objects, arrays, extension-encoded fields, references) and
returns the rule violations it finds, each tagged with the contract category it
belongs to (``prefix``, ``enum``, ``reference``, ``format``, ``schema``), plus
what it saw (enum values, id prefixes, shapes) for the report's observations.

It is pure: no HTTP, no pytest, so the rules can be unit-tested on hand-made JSON.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from toolkit import catalogue as cat

__all__ = ["Problem", "Seen", "check_reference", "walk_resource"]

ALTERNATE_SHAPES: frozenset[tuple[str, str]] = frozenset({("Practitioner", "name")})
"""(resource, field) whose spec shape and client-observed shape are both accepted."""

_PREFIX_RE = re.compile(r"^([A-Z]{2}-)")


@dataclass(frozen=True, slots=True)
class Problem:
    """One rule violation at a JSON path of one resource."""

    category: str
    resource_type: str
    resource_id: str
    path: str
    message: str

    def text(self) -> str:
        return f"{self.resource_type}/{self.resource_id} {self.path}: {self.message}"


@dataclass
class Seen:
    """What the walk observed, accumulated over many resources."""

    enum_values: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    open_enum_outside: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    id_prefixes: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    shapes: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    resources: Counter[str] = field(default_factory=Counter)

    def enum_report(self) -> dict[str, dict[str, list[str]]]:
        """Per enum field: values seen, allowed values never seen, values outside the list."""
        out: dict[str, dict[str, list[str]]] = {}
        for key, allowed in _enum_fields().items():
            res = key.split(".", 1)[0]
            if self.resources[res] == 0:
                continue
            seen = self.enum_values.get(key, Counter())
            out[key] = {
                "seen": sorted(seen),
                "never_seen": [_enum_key(v) for v in allowed if _enum_key(v) not in seen],
                "outside_open_enum": sorted(self.open_enum_outside.get(key, Counter())),
            }
        return out


def _enum_key(value: object) -> str:
    return "null" if value is None else str(value)


@cache
def _enum_fields() -> dict[str, tuple[str | None, ...]]:
    out: dict[str, tuple[str | None, ...]] = {}
    for name in cat.LISTED_RESOURCES:
        res = cat.resource(name)
        for path, f in cat.walk_fields(res.fields):
            if f.enum and not f.write_only:
                out[f"{name}.{path}"] = f.enum
    return out


# --------------------------------------------------------------------------- format rules


def format_problem(fmt: str, value: object) -> str | None:
    """Why ``value`` breaks format ``fmt``, or None when it conforms."""
    if not isinstance(value, str):
        return f"expected a string in {fmt} format, got {type(value).__name__} {value!r}"
    if not re.match(cat.format_pattern(fmt), value):
        return f"{value!r} is not a valid {fmt} value (pattern {cat.format_pattern(fmt)})"
    try:
        if fmt == "date":
            dt.date.fromisoformat(value)
        elif fmt == "date-time":
            dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return f"{value!r} is not a real calendar {fmt}"
    if fmt == "country" and value not in cat.country_codes():
        return f"{value!r} is not an ISO 3166 alpha-2 country code"
    if fmt == "currency" and value not in cat.currency_codes():
        return f"{value!r} is not an ISO 4217 currency code"
    return None


def check_reference(ref: cat.Ref, value: object) -> str | None:
    """Why a reference object breaks ``ref`` (shape, target type, prefix), or None."""
    if not isinstance(value, dict):
        return f"expected a reference object, got {type(value).__name__} {value!r}"
    reference = value.get("reference")
    if not isinstance(reference, str):
        return f"reference object has no string 'reference': {value!r}"
    parts = reference.split("/")
    if len(parts) != 4 or parts[0] != "" or "/" + parts[1] != cat.API_PREFIX:
        return f"{reference!r} does not have the shape {cat.API_PREFIX}/<Type>/<id>"
    path_type, ident = parts[2], parts[3]
    target = ref.target_for(path_type)
    if target is None:
        return f"{reference!r} points at {path_type}, allowed: {', '.join(ref.types)}"
    declared = value.get("type")
    if declared is not None and declared != path_type:
        return f"type {declared!r} disagrees with the reference path {reference!r}"
    if target.prefixes and not ident.startswith(target.prefixes):
        return (
            f"{reference!r}: a {path_type} id here must start with {' or '.join(target.prefixes)}"
        )
    if not re.match(ref.pattern, reference):
        return f"{reference!r} does not match {ref.pattern}"
    return None


# --------------------------------------------------------------------------- walk

_TYPE_CHECKS: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "code": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
    "date": (str,),
    "date-time": (str,),
    "canonical": (str,),
    "base64": (str,),
}


class _Walk:
    def __init__(self, resource_type: str, resource_id: str, seen: Seen) -> None:
        self.resource_type = resource_type
        self.resource_id = resource_id
        self.seen = seen
        self.problems: list[Problem] = []

    def problem(self, category: str, path: str, message: str) -> None:
        self.problems.append(Problem(category, self.resource_type, self.resource_id, path, message))

    def fields(
        self, owner: str, fields: tuple[cat.Field, ...], obj: dict[str, Any], path: str
    ) -> None:
        for f in fields:
            if f.write_only:
                continue
            key = f"{path}{f.name}"
            if f.extension is not None:
                present, value = _extension_value(obj, f.extension)
                if not present:
                    continue
                if f.extension.value_key == "valueCoding" and f.type != "object":
                    value = value.get("code") if isinstance(value, dict) else value
                self.value(owner, f, value, key, many=False)
                continue
            if f.name not in obj or (obj[f.name] is None and None not in f.enum):
                if f.required:
                    self.problem("format", key, "required field is missing")
                continue
            self.value(owner, f, obj[f.name], key, many=f.many)

    def value(self, owner: str, f: cat.Field, value: Any, path: str, *, many: bool) -> None:
        shape_key = f"{owner}.{f.name}"
        if (self.resource_type, f.name) in ALTERNATE_SHAPES and owner == self.resource_type:
            self.seen.shapes[shape_key]["array" if isinstance(value, list) else "object"] += 1
            if isinstance(value, list):
                for i, item in enumerate(value):
                    self.value(owner, f, item, f"{path}[{i}]", many=False)
                return
        if many:
            if not isinstance(value, list):
                self.problem("schema", path, f"expected an array, got {type(value).__name__}")
                return
            for i, item in enumerate(value):
                self.value(owner, f, item, f"{path}[{i}]", many=False)
            return
        if f.ref is not None:
            message = check_reference(f.ref, value)
            if message:
                self.problem("reference", path, message)
            return
        if f.type == "object":
            if not isinstance(value, dict):
                self.problem("schema", path, f"expected an object, got {type(value).__name__}")
                return
            self.fields(f"{owner}.{f.name}", f.fields, value, f"{path}.")
            self._conditional_formats(f, value, path)
            return
        if f.enum:
            enum_key = _enum_path(self.resource_type, path)
            if value in f.enum:
                self.seen.enum_values[enum_key][_enum_key(value)] += 1
            elif f.open_enum:
                self.seen.open_enum_outside[enum_key][_enum_key(value)] += 1
            else:
                allowed = ", ".join(_enum_key(v) for v in f.enum)
                self.problem("enum", path, f"{value!r} is not one of the allowed values: {allowed}")
            return
        if value is None:
            return
        expected = _TYPE_CHECKS.get(f.type)
        if expected and (not isinstance(value, expected) or _is_bool_as_number(f, value)):
            self.problem("schema", path, f"expected {f.type}, got {type(value).__name__}")
            return
        fmt = f.format or (f.type if f.type in ("date", "date-time") else None)
        if fmt and f.format_when is None:
            message = format_problem(fmt, value)
            if message:
                self.problem("format", path, message)

    def _conditional_formats(self, f: cat.Field, obj: dict[str, Any], path: str) -> None:
        for sub in f.fields:
            if sub.format is None or sub.format_when is None or sub.name not in obj:
                continue
            sibling, values = sub.format_when
            if obj.get(sibling) in values:
                message = format_problem(sub.format, obj[sub.name])
                if message:
                    self.problem("format", f"{path}.{sub.name}", message)


def _is_bool_as_number(f: cat.Field, value: object) -> bool:
    return f.type in ("integer", "number") and isinstance(value, bool)


_INDEX_RE = re.compile(r"\[\d+\]")


def _enum_path(resource_type: str, path: str) -> str:
    return resource_type + "." + _INDEX_RE.sub("", path)


def _extension_value(obj: dict[str, Any], ext: cat.Extension) -> tuple[bool, Any]:
    items = obj.get(ext.container)
    if not isinstance(items, list):
        return False, None
    for item in items:
        if isinstance(item, dict) and item.get("url") == ext.url and ext.value_key in item:
            return True, item[ext.value_key]
    return False, None


def walk_resource(resource_type: str, data: Any, seen: Seen | None = None) -> list[Problem]:
    """Every catalogue rule ``data`` (one resource's JSON) breaks.

    ``seen`` (optional) accumulates observations over many calls.
    """
    seen = seen if seen is not None else Seen()
    if not isinstance(data, dict):
        return [Problem("schema", resource_type, "?", "", "resource is not a JSON object")]
    res = cat.resource(resource_type)
    rid = data.get("id")
    walk = _Walk(resource_type, str(rid), seen)
    seen.resources[resource_type] += 1
    declared = data.get("resourceType")
    if declared != resource_type:
        walk.problem("schema", "resourceType", f"expected {resource_type!r}, got {declared!r}")
    if not isinstance(rid, str) or not rid:
        walk.problem("prefix", "id", f"missing or non-string id {rid!r}")
    else:
        m = _PREFIX_RE.match(rid)
        seen.id_prefixes[resource_type][m.group(1) if m else "(none)"] += 1
        if res.id_prefixes and not rid.startswith(res.id_prefixes):
            allowed = ", ".join(res.id_prefixes)
            walk.problem(
                "prefix", "id", f"{rid!r} does not start with an allowed prefix ({allowed})"
            )
        elif not re.match(res.id_pattern, rid):
            walk.problem("prefix", "id", f"{rid!r} does not match {res.id_pattern}")
    walk.fields(resource_type, tuple(f for f in res.fields if f.name != "id"), data, "")
    return walk.problems
