"""The catalogue's rules applied to JSON, written once for every consumer.

:func:`check_resource` walks a resource's :class:`~toolkit.catalogue.Field` tree
over a JSON value (:func:`check_value` does the same for one field) and returns
each broken rule as a :class:`Violation`: a path such as
``attachments[0].contentType``, a category and a message. The rules:

* ``type``: JSON types (booleans are not numbers), arrays for ``many`` fields,
  JSON null only where the enum allows it.
* ``required``: ``Field.required`` at every level, plus the resource's
  ``create_required`` in create mode.
* ``enum``: closed enums; a value outside an *open* enum is an
  :class:`Observation`, never a violation.
* ``reference``: ``{"reference": "/main/<Type>/<prefix><id>", "type": "<Type>"}``
  with an allowed target, the target's id prefix, and ``type`` agreeing.
* ``prefix``: the resource's own ``id``.
* ``format``: :func:`toolkit.catalogue.format_pattern` plus real calendar dates,
  ISO 3166 and ISO 4217 membership and padded base64, honouring ``Field.format_when``.
* ``attachment``: the attachment content types and decoded size.
* ``unknown``: keys the catalogue does not describe (only with ``closed``).

Extension-encoded fields are read from ``extension`` / ``modifierExtension`` by
url and ``value_key`` (``valueCoding`` carries its ``code`` for code fields).

What differs between the mock, the client and the contract suite is an
:class:`Options` value: the mode (``create``, ``patch`` where null deletes and
top-level requirements are waived, ``read`` where null means absent and
write-only fields are skipped), server-maintained fields, strictness, a
``resolves`` hook, the attachment limits and an ``observe`` callback.

Examples
--------
>>> from toolkit.rules import Options, check_resource
>>> body = {"name": "X", "telecom": [{"system": "phone", "value": "+61 2 9876"}]}
>>> [(v.path, v.category) for v in check_resource("Organization", body)]
[('telecom[0].value', 'format')]
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from toolkit import catalogue
from toolkit.catalogue import Field, Ref, Resource

__all__ = [
    "Category",
    "Mode",
    "Observation",
    "ObservationKind",
    "Options",
    "Violation",
    "check_resource",
    "check_value",
    "format_problem",
    "id_problem",
    "reference_problem",
]

Mode = Literal["create", "patch", "read"]
Category = Literal[
    "type", "required", "enum", "reference", "prefix", "format", "attachment", "unknown"
]
ObservationKind = Literal["enum", "open-enum", "shape"]
CONTAINERS = ("extension", "modifierExtension")


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: where (``path``), which kind (``category``) and why."""

    path: str
    category: Category
    message: str


@dataclass(frozen=True, slots=True)
class Observation:
    """Something seen that is not a fault.

    ``kind`` is ``enum`` (a listed value, ``"null"`` for JSON null),
    ``open-enum`` (a value outside an open enum) or ``shape`` (``"array"`` or
    ``"object"`` for a field in ``Options.accept_arrays``). ``field_path`` is the
    catalogue path without indices (``Appointment.participant.type``), ``path``
    the JSON path.
    """

    kind: ObservationKind
    field_path: str
    path: str
    value: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """What differs between the consumers of the rules.

    ``server_fields`` are top-level keys the server maintains: skipped. ``closed``
    reports keys the catalogue does not describe, references without ``type``
    and unknown extension urls. ``resolves(reference) -> bool`` checks that a
    well-formed reference points at an existing record. ``max_attachment_bytes``
    defaults to :data:`toolkit.catalogue.MAX_ATTACHMENT_BYTES` (read at call
    time). ``accept_arrays`` lists catalogue paths (``Practitioner.name``) of
    single objects that may also arrive as arrays. ``observe`` receives every
    :class:`Observation`.
    """

    mode: Mode = "create"
    server_fields: frozenset[str] = frozenset()
    closed: bool = False
    resolves: Callable[[str], bool] | None = None
    max_attachment_bytes: int | None = None
    check_attachment_types: bool = True
    accept_arrays: frozenset[str] = frozenset()
    observe: Callable[[Observation], None] | None = None


# --------------------------------------------------------------------------- single rules

_FORMAT_HINTS: dict[str, str] = {
    "phone": "+{country code}{digits}, no spaces, e.g. '+61298765432'",
    "country": "an ISO 3166 alpha-2 code such as 'AU'",
    "currency": "an ISO 4217 code such as 'AUD'",
    "date": "YYYY-MM-DD",
    "date-time": "YYYY-MM-DDThh:mm:ss with Z or an offset",
    "canonical": "/main/ChargeItemDefinition/<id>",
    "base64": "standard-alphabet base64",
}


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def format_problem(fmt: str, value: str) -> str | None:
    """Why ``value`` breaks format ``fmt``, or None when it conforms.

    Examples
    --------
    >>> format_problem("country", "AU") is None
    True
    >>> format_problem("date", "2026-02-30")
    "'2026-02-30' is not a real calendar date"
    """
    if not _compiled(catalogue.format_pattern(fmt)).fullmatch(value):
        return f"{value[:60]!r} is not a valid {fmt} ({_FORMAT_HINTS.get(fmt, fmt)})"
    try:
        if fmt == "date":
            dt.date.fromisoformat(value)
        elif fmt == "date-time":
            dt.datetime.fromisoformat(value)
    except ValueError:
        return f"{value!r} is not a real calendar {fmt}"
    if fmt == "base64" and len(value) % 4:
        return "is not valid base64 (standard alphabet, padded to 4 characters)"
    if fmt == "country" and value not in catalogue.country_codes():
        return f"{value!r} is not an ISO 3166 alpha-2 country code"
    if fmt == "currency" and value not in catalogue.currency_codes():
        return f"{value!r} is not an ISO 4217 currency code"
    return None


def reference_problem(ref: Ref, text: str) -> str | None:
    """Why a ``reference`` string breaks ``ref`` (shape, target, id prefix), or None.

    Examples
    --------
    >>> ref = catalogue.field_at("Referral", "performer").ref
    >>> reference_problem(ref, "/main/Practitioner/EP-1")
    "'/main/Practitioner/EP-1': a Practitioner id here starts with PR-"
    """
    if _compiled(ref.pattern).fullmatch(text):
        return None
    parts = text.split("/")
    if len(parts) == 4 and parts[0] == "" and f"/{parts[1]}" == catalogue.API_PREFIX:
        target = ref.target_for(parts[2])
        if target is None:
            return f"{text!r} points at {parts[2]}; allowed: {', '.join(ref.types)}"
        if target.prefixes and not parts[3].startswith(target.prefixes):
            return f"{text!r}: a {parts[2]} id here starts with {' or '.join(target.prefixes)}"
    shapes = " or ".join(
        f"{catalogue.API_PREFIX}/{t.type}/{'|'.join(t.prefixes)}<id>" for t in ref.targets
    )
    return f"{text!r} does not have the shape {shapes}"


def id_problem(resource: Resource, value: object, prefixes: tuple[str, ...] = ()) -> str | None:
    """Why ``value`` is not an id of ``resource`` starting with one of ``prefixes``, or None."""
    if not isinstance(value, str) or not value:
        return f"missing or non-string id {value!r}"
    if prefixes and not value.startswith(prefixes):
        return f"{value!r} does not start with an allowed prefix ({', '.join(prefixes)})"
    if not _compiled(resource.id_pattern).fullmatch(value):
        want = " or ".join(f"{p}<id>" for p in resource.id_prefixes) or "letters, digits, '.', '-'"
        return f"{value!r} is not a {resource.name} id ({want})"
    return None


def _base64_size(value: str) -> int:
    """Decoded size of padded base64 text, without decoding it."""
    return len(value) // 4 * 3 - value[-2:].count("=")


_TYPE_WORDS: dict[str, str] = {
    "boolean": "a boolean",
    "integer": "an integer",
    "number": "a number",
    "object": "an object",
    "reference": "a reference object {reference, type}",
}


def _type_ok(kind: str, value: object) -> bool:
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in ("integer", "number"):
        allowed: tuple[type, ...] = (int,) if kind == "integer" else (int, float)
        return isinstance(value, allowed) and not isinstance(value, bool)
    if kind in ("object", "reference"):
        return isinstance(value, dict)
    return isinstance(value, str)


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    kind = {bool: "boolean", int: "integer", float: "number", str: "string"}.get(
        type(value), type(value).__name__
    )
    return f"{kind} {value!r:.60}"


# --------------------------------------------------------------------------- the walk


class _Walk:
    def __init__(self, options: Options) -> None:
        self.o = options
        self.read = options.mode == "read"
        limit = options.max_attachment_bytes
        self.max_bytes = catalogue.MAX_ATTACHMENT_BYTES if limit is None else limit
        self.out: list[Violation] = []

    def fail(self, path: str, category: Category, message: str) -> None:
        self.out.append(Violation(path, category, message))

    def see(self, kind: ObservationKind, fpath: str, path: str, value: str) -> None:
        if self.o.observe is not None:
            self.o.observe(Observation(kind, fpath, path, value))

    # ------------------------------------------------------------------ objects

    def members(
        self,
        fields: tuple[Field, ...],
        obj: dict[str, Any],
        path: str,
        fpath: str,
        *,
        top: bool = False,
        to_create: Mapping[str, str] | None = None,
    ) -> None:
        """Check the members of ``obj``; ``to_create`` maps extra required names to messages."""
        prefix = f"{path}." if path else ""
        skip: frozenset[str] = (self.o.server_fields | {"id"}) if top else frozenset()
        waived = top and self.o.mode == "patch"
        for f in fields:
            if f.name in skip or (self.read and f.write_only):
                continue
            key = f"{prefix}{f.name}"
            need = None if waived else (to_create or {}).get(f.name)
            if f.required and not waived:
                need = "is required"
            if f.extension is not None:
                if need and not self._extension_items(obj, f):
                    self.fail(key, "required", need)
                continue
            value = obj.get(f.name)
            if value is None and not (f.name in obj and None in f.enum):
                if need:
                    self.fail(key, "required", need)
                elif f.name in obj and self.o.mode == "create":
                    self.fail(key, "type", "must not be null")
                continue
            use_format = f.format_when is None or obj.get(f.format_when[0]) in f.format_when[1]
            self.field(f, value, key, f"{fpath}.{f.name}", use_format)
        self.extensions(fields, obj, prefix, fpath)
        if self.o.closed:
            self.unknown_keys(fields, obj, prefix, (skip | {"resourceType"}) if top else skip)

    @staticmethod
    def _extension_items(obj: dict[str, Any], f: Field) -> list[Any]:
        assert f.extension is not None
        items = obj.get(f.extension.container)
        if not isinstance(items, list):
            return []
        return [i for i in items if isinstance(i, dict) and i.get("url") == f.extension.url]

    def extensions(
        self, fields: tuple[Field, ...], obj: dict[str, Any], prefix: str, fpath: str
    ) -> None:
        declared = {
            f.extension.url: f
            for f in fields
            if f.extension is not None and not (self.read and f.write_only)
        }
        used = {f.extension.container for f in declared.values() if f.extension is not None}
        for container in CONTAINERS:
            items = obj.get(container)
            if items is None or (self.o.closed and container not in used):
                continue
            cpath = f"{prefix}{container}"
            if not isinstance(items, list):
                self.fail(cpath, "type", f"expected an array of extensions, got {_describe(items)}")
                continue
            for n, item in enumerate(items):
                self.extension(declared, container, item, f"{cpath}[{n}]", fpath)

    def extension(
        self, declared: dict[str, Field], container: str, item: Any, ipath: str, fpath: str
    ) -> None:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            self.fail(ipath, "type", "an extension must be an object with a string 'url'")
            return
        url = item["url"]
        f = declared.get(url)
        if f is None or f.extension is None:
            if self.o.closed:
                known = ", ".join(sorted(declared)) or "none here"
                message = f"{url!r} is not a known {container} ({known})"
                self.fail(f"{ipath}.url", "unknown", message)
            return
        ext = f.extension
        if ext.container != container:
            self.fail(ipath, "type", f"{f.name} belongs in {ext.container}")
            return
        key = ext.value_key
        if self.o.closed:
            for extra in item.keys() - {"url", key}:
                self.fail(f"{ipath}.{extra}", "unknown", "is not a field of this extension")
        if key not in item:
            self.fail(f"{ipath}.{key}", "required", f"is required: {url!r} carries its value in it")
            return
        value, vpath = item[key], f"{ipath}.{key}"
        if key == "valueCoding" and f.type != "object":
            if not isinstance(value, dict):
                self.fail(vpath, "type", "expected a Coding object with a 'code'")
                return
            value, vpath = value.get("code"), f"{vpath}.code"
        if value is None and None not in f.enum:
            if not self.read:
                self.fail(vpath, "type", "must not be null")
            return
        self.field(f, value, vpath, f"{fpath}.{f.name}")

    def unknown_keys(
        self, fields: tuple[Field, ...], obj: dict[str, Any], prefix: str, known: frozenset[str]
    ) -> None:
        plain = {f.name for f in fields if f.extension is None}
        by_url = {f.extension.url: f.extension for f in fields if f.extension is not None}
        containers = {e.container for e in by_url.values()}
        for key in obj:
            if key in plain or key in known or key in containers:
                continue
            ext = by_url.get(key)
            if ext is not None:
                hint = f"send it as {ext.container}[url={ext.url!r}].{ext.value_key}"
                self.fail(f"{prefix}{key}", "unknown", f"is an extension field: {hint}")
            else:
                self.fail(f"{prefix}{key}", "unknown", "is not a field known to the catalogue")

    # ------------------------------------------------------------------ values

    def field(self, f: Field, value: Any, path: str, fpath: str, use_format: bool = True) -> None:
        either = fpath in self.o.accept_arrays
        if either:
            self.see("shape", fpath, path, "array" if isinstance(value, list) else "object")
        if f.many or (either and isinstance(value, list)):
            if not isinstance(value, list):
                self.fail(path, "type", f"expected an array, got {_describe(value)}")
                return
            for n, item in enumerate(value):
                self.single(f, item, f"{path}[{n}]", fpath, use_format)
            return
        self.single(f, value, path, fpath, use_format)

    def single(self, f: Field, value: Any, path: str, fpath: str, use_format: bool) -> None:
        if value is None:
            if None in f.enum:
                self.see("enum", fpath, path, "null")
            elif not self.read:
                self.fail(path, "type", "must not be null")
            return
        if not _type_ok(f.type, value):
            word = _TYPE_WORDS.get(f.type, "a string")
            self.fail(path, "type", f"expected {word}, got {_describe(value)}")
            return
        if f.type == "reference":
            if f.ref is not None:
                self.reference(f.ref, value, path)
            return
        if f.type == "object":
            self.members(f.fields, value, path, fpath)
            return
        if f.enum:
            self.enum(f, value, path, fpath)
            return
        fmt = f.format or (f.type if f.type in ("date", "date-time") else None)
        if fmt is None or not use_format:
            return
        problem = format_problem(fmt, value)
        if problem is not None:
            self.fail(path, "format", problem)
        elif fmt == "base64" and (size := _base64_size(value)) > self.max_bytes:
            self.fail(
                path,
                "attachment",
                f"decodes to {size} bytes, more than the {self.max_bytes}-byte limit",
            )

    def enum(self, f: Field, value: str, path: str, fpath: str) -> None:
        if value in f.enum:
            self.see("enum", fpath, path, value)
            return
        if f.open_enum:
            self.see("open-enum", fpath, path, value)
            return
        attachment = f.enum == catalogue.ATTACHMENT_CONTENT_TYPES
        if attachment and not self.o.check_attachment_types:
            return
        allowed = ", ".join(repr(v) for v in f.enum if v is not None)
        if None in f.enum:
            allowed += " or null"
        message = f"{value!r} is not one of {allowed}"
        self.fail(path, "attachment" if attachment else "enum", message)

    def reference(self, ref: Ref, value: dict[str, Any], path: str) -> None:
        if self.o.closed:
            for extra in value.keys() - {"reference", "type", "display"}:
                self.fail(f"{path}.{extra}", "unknown", "is not a field of a reference")
        text = value.get("reference")
        if not isinstance(text, str):
            self.fail(f"{path}.reference", "reference", "is required and must be a string")
            return
        problem = reference_problem(ref, text)
        if problem is not None:
            self.fail(f"{path}.reference", "reference", problem)
            return
        named, declared = text.split("/")[2], value.get("type")
        if declared is None:
            if self.o.closed:
                message = f"is required: one of {', '.join(ref.types)}"
                self.fail(f"{path}.type", "reference", message)
        elif declared != named:
            self.fail(f"{path}.type", "reference", f"{declared!r} does not match the reference")
            return
        if self.o.resolves is not None and not self.o.resolves(text):
            self.fail(f"{path}.reference", "reference", f"{text} does not exist")


# --------------------------------------------------------------------------- entry points

DEFAULT = Options()


def check_resource(
    resource: Resource | str, body: object, options: Options = DEFAULT, *, path: str = ""
) -> list[Violation]:
    """Every catalogue rule ``body`` (one resource's JSON) breaks.

    ``resourceType`` must name ``resource`` when present (always, in read mode).
    The ``id`` must start with one of the resource's ``id_prefixes`` in read mode
    (where it is required) and with one of its ``create_prefixes`` in create
    mode, unless it is a server field. ``path`` prefixes every violation's path
    (a resource nested in a ``Parameters`` body).
    """
    res = catalogue.resource(resource) if isinstance(resource, str) else resource
    prefix = f"{path}." if path else ""
    if not isinstance(body, dict):
        return [Violation(path, "type", f"expected a {res.name} object, got {_describe(body)}")]
    walk = _Walk(options)
    mode, skip = options.mode, options.server_fields
    declared = body.get("resourceType")
    if "resourceType" not in skip and declared != res.name and (declared or mode == "read"):
        walk.fail(f"{prefix}resourceType", "type", f"expected {res.name!r}, got {declared!r}")
    if "id" not in skip and ("id" in body or mode == "read"):
        prefixes = {"read": res.id_prefixes, "create": res.create_prefixes}.get(mode, ())
        problem = id_problem(res, body.get("id"), prefixes)
        if problem is not None:
            walk.fail(f"{prefix}id", "prefix", problem)
    to_create = (
        {res.field(n).name: f"is required to create a {res.name}" for n in res.create_required}
        if mode == "create"
        else None
    )
    walk.members(res.fields, body, path, res.name, top=True, to_create=to_create)
    return walk.out


def check_value(
    field: Field, value: object, options: Options = DEFAULT, *, path: str, field_path: str = ""
) -> list[Violation]:
    """Every rule ``value`` breaks as the value of ``field`` (null only where allowed)."""
    walk = _Walk(options)
    walk.field(field, value, path, field_path or field.name)
    return walk.out
