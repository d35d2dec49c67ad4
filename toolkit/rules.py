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

Every :class:`Violation` carries the ``source`` of the rule it breaks: the
least authoritative of the resource's, the enclosing fields' and the field's own
source for that aspect (:meth:`toolkit.catalogue.Field.source_of`). Only ``spec``
rules are the spec's; the contract suite fails a deployment on those alone.

``Options(live_forms=True)`` accepts every form of "Shapes seen on the live
service" (``public-docs-facts.md``) and reports each form it met as an
:class:`Observation` of kind ``form``: extension urls matched on their last path
segment (``url:full``), a coded value in ``valueCoding``, ``valueCode`` or
``valueString`` (``value:<key>``), absolute and ``Type/id`` references
(``reference:absolute``, ``reference:type-id``; the spec's ``/main/Type/id`` is
``reference:relative``), and the alternates of :data:`LIVE_ALTERNATES`.

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
from toolkit.catalogue import Aspect, Field, Ref, Resource, Source, forms, weakest

__all__ = [
    "LIVE_ALTERNATES",
    "Category",
    "Mode",
    "Observation",
    "ObservationKind",
    "Options",
    "RuleSource",
    "Violation",
    "check_resource",
    "check_value",
    "format_problem",
    "id_problem",
    "non_spec_rules",
    "non_spec_rules_table",
    "reference_form",
    "reference_problem",
]

Mode = Literal["create", "patch", "read"]
Category = Literal[
    "type", "required", "enum", "reference", "prefix", "format", "attachment", "unknown"
]
ObservationKind = Literal[
    "enum", "open-enum", "shape", "form", "present", "unknown-extension", "unknown-key"
]
CONTAINERS = ("extension", "modifierExtension")
CODED_KEYS = ("valueCoding", "valueCode", "valueString")
"""Value keys of a coded extension value: the spec's "coded value" covers all three (facts)."""


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: where (``path``), which kind (``category``), why, and whose rule.

    ``source`` is ``spec``, ``facts`` or ``pmtk`` (see the module docstring).
    """

    path: str
    category: Category
    message: str
    source: Source = "spec"


@dataclass(frozen=True, slots=True)
class Observation:
    """Something seen that is not a fault.

    ``kind`` is ``enum`` (a listed value, ``"null"`` for JSON null),
    ``open-enum`` (a value outside an open enum), ``shape`` (``"array"`` or
    ``"object"`` for a field in ``Options.accept_arrays``), ``form`` (a form met
    with ``live_forms``, e.g. ``reference:absolute``), ``present`` (the field holds
    a value; ``value`` is empty), ``unknown-extension`` (an extension url no
    field claims; ``field_path`` ends in the container) or ``unknown-key`` (a key
    the catalogue does not describe, when not ``closed``). ``field_path`` is the
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
    time). ``accept_arrays`` lists catalogue paths (``Practitioner.name``) whose
    value may arrive as one object or as an array of them, whichever the catalogue
    declares (the catalogue's checked ``one-or-many`` forms:
    :data:`toolkit.catalogue.forms.ACCEPT_ARRAYS`). ``live_forms`` accepts the live
    service's forms (module docstring).
    ``observe`` receives every :class:`Observation`.
    """

    mode: Mode = "create"
    server_fields: frozenset[str] = frozenset()
    closed: bool = False
    resolves: Callable[[str], bool] | None = None
    max_attachment_bytes: int | None = None
    check_attachment_types: bool = True
    accept_arrays: frozenset[str] = frozenset()
    live_forms: bool = False
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


# --------------------------------------------------------------------------- live forms

_ABSOLUTE_REF = re.compile(r"^https?://[^/?#\s]+(/main/[^/?#\s]+/[^/?#\s]+)$")
_TYPE_ID_REF = re.compile(r"^[A-Z][A-Za-z]+/[^/?#\s]+$")


def reference_form(text: str) -> tuple[str, str]:
    """The form of a ``reference`` string and its spec form (``/main/<Type>/<id>``).

    ``relative`` is the spec's form; ``absolute`` (``https://host/main/Type/id``) and
    ``type-id`` (``Type/id``) are the other forms the live service is known to use;
    anything else is ``other`` and is returned unchanged.

    Examples
    --------
    >>> reference_form("https://au-api.halaxy.com/main/Patient/123")
    ('absolute', '/main/Patient/123')
    >>> reference_form("Patient/123")
    ('type-id', '/main/Patient/123')
    """
    if text.startswith(catalogue.API_PREFIX + "/"):
        return "relative", text
    m = _ABSOLUTE_REF.fullmatch(text)
    if m:
        return "absolute", m.group(1)
    if _TYPE_ID_REF.fullmatch(text):
        return "type-id", f"{catalogue.API_PREFIX}/{text}"
    return "other", text


LIVE_ALTERNATES: dict[str, Callable[[object], str | None]] = forms.LIVE_ALTERNATES
"""Catalogue paths whose value has more than one known form (facts, "Shapes seen on the
live service"): a classifier naming the form of a value, or None for an unknown form.
With ``live_forms`` a value of a known form is accepted whatever the catalogue's type.
Derived from the catalogue's declarations (``Field.forms``, :mod:`toolkit.catalogue.forms`)."""


# --------------------------------------------------------------------------- the walk


class _Walk:
    def __init__(self, options: Options) -> None:
        self.o = options
        self.read = options.mode == "read"
        self.live = options.live_forms
        limit = options.max_attachment_bytes
        self.max_bytes = catalogue.MAX_ATTACHMENT_BYTES if limit is None else limit
        self.out: list[Violation] = []

    def fail(self, path: str, category: Category, message: str, source: Source = "spec") -> None:
        self.out.append(Violation(path, category, message, source))

    def see(self, kind: ObservationKind, fpath: str, path: str, value: str) -> None:
        if self.o.observe is not None:
            self.o.observe(Observation(kind, fpath, path, value))

    def ext_name(self, url: str) -> str:
        """The name an extension url stands for: with live forms, its last path segment."""
        return url.rstrip("/").rsplit("/", 1)[-1] if self.live else url

    # ------------------------------------------------------------------ objects

    def members(
        self,
        fields: tuple[Field, ...],
        obj: dict[str, Any],
        path: str,
        fpath: str,
        src: Source,
        *,
        top: bool = False,
        to_create: Mapping[str, str] | None = None,
        create_source: Source = "spec",
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
            need_src = weakest(src, create_source)
            if f.required and not waived:
                need, need_src = "is required", weakest(src, f.source_of("required"))
            if f.extension is not None:
                if need and not self._extension_items(obj, f):
                    self.fail(key, "required", need, need_src)
                continue
            value = obj.get(f.name)
            if value is None and not (f.name in obj and None in f.enum):
                if need:
                    self.fail(key, "required", need, need_src)
                elif f.name in obj and self.o.mode == "create":
                    self.fail(key, "type", "must not be null", weakest(src, f.source_of("type")))
                continue
            use_format = f.format_when is None or obj.get(f.format_when[0]) in f.format_when[1]
            self.field(f, value, key, f"{fpath}.{f.name}", src, use_format)
        self.extensions(fields, obj, prefix, fpath, src)
        if self.o.closed:
            self.unknown_keys(fields, obj, prefix, (skip | {"resourceType"}) if top else skip)
        elif self.o.observe is not None:
            names = {f.name for f in fields} | set(CONTAINERS) | {"resourceType", "id"}
            for key in obj.keys() - names:
                self.see("unknown-key", fpath, f"{prefix}{key}", key)

    def _extension_items(self, obj: dict[str, Any], f: Field) -> list[Any]:
        assert f.extension is not None
        items = obj.get(f.extension.container)
        if not isinstance(items, list):
            return []
        url = f.extension.url
        return [
            i
            for i in items
            if isinstance(i, dict)
            and isinstance(i.get("url"), str)
            and self.ext_name(i["url"]) == url
        ]

    def extensions(
        self, fields: tuple[Field, ...], obj: dict[str, Any], prefix: str, fpath: str, src: Source
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
                message = f"expected an array of extensions, got {_describe(items)}"
                self.fail(cpath, "type", message, weakest(src, "facts"))
                continue
            for n, item in enumerate(items):
                self.extension(declared, container, item, f"{cpath}[{n}]", fpath, src)

    def extension(
        self,
        declared: dict[str, Field],
        container: str,
        item: Any,
        ipath: str,
        fpath: str,
        src: Source,
    ) -> None:
        """Check one extension: a known url, in its container, with its value key."""
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            message = "an extension must be an object with a string 'url'"
            self.fail(ipath, "type", message, weakest(src, "facts"))
            return
        url = item["url"]
        f = declared.get(self.ext_name(url))
        if f is None or f.extension is None:
            self.see("unknown-extension", f"{fpath}.{container}", ipath, url)
            if self.o.closed:
                known = ", ".join(sorted(declared)) or "none here"
                message = f"{url!r} is not a known {container} ({known})"
                self.fail(f"{ipath}.url", "unknown", message, "pmtk")
            return
        ext = f.extension
        encoding = weakest(src, f.source_of("encoding"))
        field_path = f"{fpath}.{f.name}"
        if url != ext.url:
            self.see("form", field_path, f"{ipath}.url", "url:full")
        if ext.container != container:
            self.fail(ipath, "type", f"{f.name} belongs in {ext.container}", encoding)
            return
        key = ext.value_key
        if self.live and key in CODED_KEYS and key not in item:
            key = next((k for k in CODED_KEYS if k in item), key)
        if self.live and key in CODED_KEYS:
            self.see("form", field_path, f"{ipath}.{key}", f"value:{key}")
        if self.o.closed:
            for extra in item.keys() - {"url", key}:
                self.fail(f"{ipath}.{extra}", "unknown", "is not a field of this extension", "pmtk")
        if key not in item:
            message = f"is required: {url!r} carries its value in it"
            self.fail(f"{ipath}.{key}", "required", message, encoding)
            return
        self.extension_value(f, key, item[key], f"{ipath}.{key}", field_path, src)

    def extension_value(
        self, f: Field, key: str, value: Any, vpath: str, field_path: str, src: Source
    ) -> None:
        """Check an extension's value (under ``key``) as the field it encodes."""
        encoding = weakest(src, f.source_of("encoding"))
        if key == "valueCoding" and f.type != "object":
            if not isinstance(value, dict):
                self.fail(vpath, "type", "expected a Coding object with a 'code'", encoding)
                return
            value, vpath = value.get("code"), f"{vpath}.code"
        elif key in ("valueCode", "valueString") and f.type == "object":
            # A bare code standing for a Coding (coverage-payer): check it as the code.
            value = {"code": value}
        if value is None and None not in f.enum:
            if not self.read:
                self.fail(vpath, "type", "must not be null", weakest(src, f.source_of("type")))
            return
        self.field(f, value, vpath, field_path, src)

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
                self.fail(f"{prefix}{key}", "unknown", f"is an extension field: {hint}", "pmtk")
            else:
                message = "is not a field known to the catalogue"
                self.fail(f"{prefix}{key}", "unknown", message, "pmtk")

    # ------------------------------------------------------------------ values

    def field(
        self, f: Field, value: Any, path: str, fpath: str, src: Source, use_format: bool = True
    ) -> None:
        self.see("present", fpath, path, "")
        if self.live and (classify := LIVE_ALTERNATES.get(fpath)) is not None:
            form = classify(value)
            if form is not None:
                self.see("form", fpath, path, f"value:{form}")
                return
        either = fpath in self.o.accept_arrays
        if either:
            self.see("shape", fpath, path, "array" if isinstance(value, list) else "object")
            if f.many and isinstance(value, dict):
                self.single(f, value, path, fpath, src, use_format)
                return
        if f.many or (either and isinstance(value, list)):
            if not isinstance(value, list):
                message = f"expected an array, got {_describe(value)}"
                self.fail(path, "type", message, weakest(src, f.source_of("type")))
                return
            for n, item in enumerate(value):
                self.single(f, item, f"{path}[{n}]", fpath, src, use_format)
            return
        self.single(f, value, path, fpath, src, use_format)

    def single(
        self, f: Field, value: Any, path: str, fpath: str, src: Source, use_format: bool
    ) -> None:
        if value is None:
            if None in f.enum:
                self.see("enum", fpath, path, "null")
            elif not self.read:
                self.fail(path, "type", "must not be null", weakest(src, f.source_of("type")))
            return
        if not _type_ok(f.type, value):
            word = _TYPE_WORDS.get(f.type, "a string")
            message = f"expected {word}, got {_describe(value)}"
            self.fail(path, "type", message, weakest(src, f.source_of("type")))
            return
        if f.type == "reference":
            if f.ref is not None:
                self.reference(f, f.ref, value, path, fpath, src)
            return
        if f.type == "object":
            self.members(f.fields, value, path, fpath, weakest(src, f.source))
            return
        if f.enum:
            self.enum(f, value, path, fpath, src)
            return
        fmt = f.format or (f.type if f.type in ("date", "date-time") else None)
        if fmt is None or not use_format:
            return
        problem = format_problem(fmt, value)
        fsrc = weakest(src, f.source_of("format"))
        if problem is not None:
            self.fail(path, "format", problem, fsrc)
        elif fmt == "base64" and (size := _base64_size(value)) > self.max_bytes:
            self.fail(
                path,
                "attachment",
                f"decodes to {size} bytes, more than the {self.max_bytes}-byte limit",
                fsrc,
            )

    def enum(self, f: Field, value: str, path: str, fpath: str, src: Source) -> None:
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
        category: Category = "attachment" if attachment else "enum"
        self.fail(path, category, message, weakest(src, f.source_of("enum")))

    def reference(
        self, f: Field, ref: Ref, value: dict[str, Any], path: str, fpath: str, src: Source
    ) -> None:
        shape_src = weakest(src, f.source)
        target_src = weakest(src, f.source_of("reference"))
        if self.o.closed:
            for extra in value.keys() - {"reference", "type", "display"}:
                self.fail(f"{path}.{extra}", "unknown", "is not a field of a reference", "pmtk")
        text = value.get("reference")
        if not isinstance(text, str):
            message = "is required and must be a string"
            self.fail(f"{path}.reference", "reference", message, shape_src)
            return
        canonical = text
        if self.live:
            form, canonical = reference_form(text)
            self.see("form", fpath, f"{path}.reference", f"reference:{form}")
        problem = reference_problem(ref, canonical)
        if problem is not None:
            if canonical != text:
                # reference_problem's messages start with the text it was given (the
                # canonical form); only that part is replaced, not up to the first ": ",
                # which in "points at X; allowed: A, B" would drop what is wrong
                detail = problem.removeprefix(repr(canonical)).removeprefix(":").strip()
                problem = f"{text!r} ({canonical}): {detail}"
            parts = canonical.split("/")
            shaped = len(parts) == 4 and parts[0] == "" and f"/{parts[1]}" == catalogue.API_PREFIX
            self.fail(
                f"{path}.reference", "reference", problem, target_src if shaped else shape_src
            )
            return
        named, declared = canonical.split("/")[2], value.get("type")
        if declared is None:
            if self.o.closed:
                message = f"is required: one of {', '.join(ref.types)}"
                self.fail(f"{path}.type", "reference", message, "pmtk")
        elif declared != named:
            message = f"{declared!r} does not match the reference"
            self.fail(f"{path}.type", "reference", message, shape_src)
            return
        if self.o.resolves is not None and not self.o.resolves(canonical):
            self.fail(f"{path}.reference", "reference", f"{canonical} does not exist", shape_src)


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
        message = f"expected a {res.name} object, got {_describe(body)}"
        return [Violation(path, "type", message, res.source)]
    walk = _Walk(options)
    mode, skip = options.mode, options.server_fields
    declared = body.get("resourceType")
    if "resourceType" not in skip and declared != res.name and (declared or mode == "read"):
        # A record of another type breaks the spec's "a collection of the resource"; the
        # key itself is FHIR's (facts), so only its absence is a facts rule.
        src = weakest(res.source, "spec" if declared else "facts")
        walk.fail(f"{prefix}resourceType", "type", f"expected {res.name!r}, got {declared!r}", src)
    if "id" not in skip and ("id" in body or mode == "read"):
        prefixes = {"read": res.id_prefixes, "create": res.create_prefixes}.get(mode, ())
        problem = id_problem(res, body.get("id"), prefixes)
        if problem is not None:
            src = res.source if mode == "read" else weakest(res.source, res.create_source)
            walk.fail(f"{prefix}id", "prefix", problem, src)
    to_create = (
        {res.field(n).name: f"is required to create a {res.name}" for n in res.create_required}
        if mode == "create"
        else None
    )
    walk.members(
        res.fields,
        body,
        path,
        res.name,
        res.source,
        top=True,
        to_create=to_create,
        create_source=res.create_source,
    )
    return walk.out


def check_value(
    field: Field, value: object, options: Options = DEFAULT, *, path: str, field_path: str = ""
) -> list[Violation]:
    """Every rule ``value`` breaks as the value of ``field`` (null only where allowed)."""
    walk = _Walk(options)
    walk.field(field, value, path, field_path or field.name, "spec")
    return walk.out


# --------------------------------------------------------------------------- rule sources


@dataclass(frozen=True, slots=True)
class RuleSource:
    """A catalogue rule whose source is not the spec: where, which aspect, whose, what."""

    resource: str
    path: str
    aspect: str
    source: Source
    rule: str

    def row(self) -> str:
        """One markdown table row."""
        return f"| {self.resource} | `{self.path}` | {self.aspect} | {self.source} | {self.rule} |"


def _rule_text(f: Field, aspect: Aspect) -> str:
    if aspect == "enum":
        return ", ".join("null" if v is None else f"`{v}`" for v in f.enum) + (
            " (open)" if f.open_enum else ""
        )
    if aspect == "reference" and f.ref is not None:
        return " or ".join(f"{t.type}/{'|'.join(t.prefixes) or ''}<id>" for t in f.ref.targets)
    if aspect == "encoding" and f.extension is not None:
        e = f.extension
        return f"`{e.container}[url={e.url}].{e.value_key}`"
    if aspect == "format":
        return str(f.format or f.type)
    if aspect == "required":
        return "required"
    return f"{f.type}{' array' if f.many else ''}"


def _aspects(f: Field) -> list[Aspect]:
    out: list[Aspect] = ["type"]
    if f.required:
        out.append("required")
    if f.enum:
        out.append("enum")
    if f.ref is not None:
        out.append("reference")
    if f.format or f.type in ("date", "date-time"):
        out.append("format")
    if f.extension is not None:
        out.append("encoding")
    return out


def non_spec_rules() -> list[RuleSource]:
    """Every catalogue rule whose source is not the spec, shortest form first.

    A resource, or a field, that the spec does not describe at all is listed once
    (aspect ``all``) with nothing below it; otherwise each aspect of a spec field
    whose rule comes from the facts or from pmtk is listed.
    """
    out: list[RuleSource] = []

    def fields(res: str, items: tuple[Field, ...], prefix: str) -> None:
        for f in items:
            path = f"{prefix}{f.name}"
            if f.source != "spec":
                out.append(RuleSource(res, path, "all", f.source, f.doc or "not in the spec"))
                continue
            for aspect in _aspects(f):
                src = f.source_of(aspect)
                if src != "spec":
                    out.append(RuleSource(res, path, aspect, src, _rule_text(f, aspect)))
            fields(res, f.fields, path + ".")

    for res in catalogue.RESOURCES.values():
        if res.source != "spec":
            doc = res.doc or "fields not shown in the spec"
            out.append(RuleSource(res.name, "*", "all", res.source, doc))
            continue
        if res.create_required and res.create_source != "spec":
            rule = "create needs " + ", ".join(res.create_required)
            out.append(RuleSource(res.name, "(create)", "required", res.create_source, rule))
        fields(res.name, res.fields, "")
    return out


def non_spec_rules_table() -> str:
    """:func:`non_spec_rules` as a markdown table (the generated list in docs/contracts.md)."""
    head = "| Resource | Field | Aspect | Source | Rule |\n|---|---|---|---|---|\n"
    return head + "\n".join(r.row() for r in non_spec_rules()) + "\n"
