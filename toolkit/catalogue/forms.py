"""Alternative forms: the other shapes a field's value may arrive in, in one registry.

A field of the catalogue declares the forms it may arrive in beside its own
(``Field.forms``, a tuple of :class:`~toolkit.catalogue.model.Alternative`); this
module says, once per form, what every consumer does with one:

* ``read``: how the tolerant reader (:mod:`toolkit.views`) turns it into the
  catalogue's (canonical) form, keeping what it does not use in ``extra``;
* ``classify``: how the rules (:mod:`toolkit.rules`, with ``live_forms``) name the
  form of a value, or None for a value in no known form;
* ``schema``: the JSON schema (``contracts/openapi.yaml``) of a value in either form,
  from the schema of the catalogue's form;
* ``array``: the form is an array of the declared value (or one value where the
  catalogue declares an array): the rules' ``Options.accept_arrays``, the mock's
  stored shape;
* ``fhirpath``: the FHIRPath that reads a value in either form as the reader does, for
  the declared views exported as ViewDefinitions (:mod:`toolkit.viewdefs.declared`).

The mock's search reads a value through every declared form (:func:`readings`).
The tables below are derived from the declarations and are what the views, the
rules, the contract walk and the mock import: no module names a resource type to
decide how to read a field. Facts: ``public-docs-facts.md``, "Shapes seen on the
live service".

Examples
--------
>>> READERS[("Referral", "limitQuantity.quantity")]({"value": 10, "unit": "x"}, "q", extra := {})
10
>>> extra
{'q.unit': 'x'}
>>> sorted(ACCEPT_ARRAYS), LIVE_ALTERNATES["Referral.referralDefinition"]({"display": "GP"})
(['Practitioner.name'], 'Reference')
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from toolkit.catalogue.constants import API_PREFIX
from toolkit.catalogue.model import Alternative, Field
from toolkit.catalogue.resources import RESOURCES
from toolkit.errors import ConfigurationError, unknown_name

__all__ = [
    "ACCEPT_ARRAYS",
    "CODED_KEYS",
    "CONVERTED",
    "FORMS",
    "LIVE_ALTERNATES",
    "LIVE_ARRAYS",
    "NAMED_TARGETS",
    "NO_NAMES",
    "PREFERRED",
    "READERS",
    "READ_AS_ARRAY",
    "VIEW_FORMS",
    "Form",
    "Names",
    "array_schema",
    "checked",
    "checked_array",
    "in_one_form",
    "readings",
    "response_schema",
    "to_canonical",
    "to_live",
]

Leftovers = dict[str, Any]
Reader = Callable[[Any, str, Leftovers], Any]
"""``(value, path, extra) -> value``: the canonical form of a value in this form (a value
in another form unchanged); the keys it does not use go to ``extra`` by path."""
Classifier = Callable[[object], str | None]
JsonSchema = dict[str, Any]
PathReader = Callable[[str, str, str], str]
"""``(value, rest, type) -> FHIRPath``: ``rest`` (a dotted path, or ``""``) of ``value`` (a
FHIRPath; ``""`` is the focus itself) read in either form, the result of FHIR ``type``
(``integer``, ``decimal``, ``string``, ...), as the reader reads it."""

CODED_KEYS = ("valueCoding", "valueCode", "valueString")
"""The keys a coded extension value arrives under (facts, "Shapes seen on the live
service"): a Coding (its ``code`` is read), a bare code, or a string; the first present
wins. The reader's read schema and its ``coded()`` step, and the exported views' FHIRPath,
are derived from this one declaration."""


@dataclass(frozen=True, slots=True)
class Names:
    """The records of each type by name, for a form that names a record (a ``reference``
    form's ``target``): ``by_id`` type -> id -> name, ``by_name`` type -> name -> the
    first id of that name."""

    by_id: Mapping[str, Mapping[str, str]]
    by_name: Mapping[str, Mapping[str, str]]

    @classmethod
    def of(cls, named: Mapping[str, Iterable[tuple[str, str]]]) -> Names:
        """From ``(id, name)`` pairs per type, in the order of the records."""
        by_id: dict[str, dict[str, str]] = {}
        by_name: dict[str, dict[str, str]] = {}
        for rtype, pairs in named.items():
            ids, names = by_id.setdefault(rtype, {}), by_name.setdefault(rtype, {})
            for rid, name in pairs:
                ids[rid] = name
                names.setdefault(name, rid)
        return cls(by_id, by_name)


NO_NAMES = Names({}, {})
"""No record names: a reference form then serves a Reference with a ``display`` only."""

Converter = Callable[[Any, Alternative, Names], Any]
"""``(value, declaration, names) -> value``: one value turned into another form."""


@dataclass(frozen=True, slots=True)
class Form:
    """One alternative form and what the reader, the rules, the schema and the mock do with it.

    ``array``: the form is about array-ness (one value or an array of them); it applies
    to the whole value of the field, where the others apply to each single value (each
    item of an array field).
    """

    name: str
    doc: str
    read: Reader
    classify: Classifier | None = None
    schema: Callable[[JsonSchema], JsonSchema] | None = None
    array: bool = False
    live: Converter | None = None
    """The catalogue's form as this form (the mock serves the live service's shapes)."""
    canonical: Converter | None = None
    """A written value in this form as the catalogue's (the mock's writes; unlike ``read``,
    a value it cannot turn is left for the checker to refuse)."""
    fhirpath: PathReader | None = None
    """The FHIRPath of a value read in either form (None for an ``array`` form: FHIRPath
    reads one value and an array of one alike)."""


# ------------------------------------------------------------------------- readers


def _one_as_array(value: Any, path: str, extra: Leftovers) -> Any:
    """The spec's single object (a HumanName), as the live service's one-element array."""
    return [value] if isinstance(value, dict) else value


def _quantity_value(value: Any, path: str, extra: Leftovers) -> Any:
    """A Quantity ``{"value": 10, ...}`` (the live form) read as its number."""
    if not isinstance(value, dict) or "value" not in value:
        return value
    for key, other in value.items():
        if key != "value":
            extra[f"{path}.{key}"] = other
    return value["value"]


def _reference_display(value: Any, path: str, extra: Leftovers) -> Any:
    """A Reference ``{"reference": ..., "display": ...}`` read as its display, else reference."""
    if not isinstance(value, dict):
        return value
    chosen = "display" if isinstance(value.get("display"), str) else "reference"
    for key, other in value.items():
        if key != chosen:
            extra[f"{path}.{key}"] = other
    return value.get(chosen)


def _codeable_as_coding(value: Any, path: str, extra: Leftovers) -> Any:
    """A FHIR CodeableConcept ``{"coding": [{system, code, display}]}`` read as its first coding.

    The spec gives Organization ``type`` items as ``{system, code, display}``;
    FHIR servers (and pmtk's mock) wrap them in ``coding``. Further codings and
    other keys (``text``) are kept in ``extra``.
    """
    if not isinstance(value, dict) or not isinstance(value.get("coding"), list) or "code" in value:
        return value
    coding = value["coding"]
    for key, other in value.items():
        if key != "coding":
            extra[f"{path}.{key}"] = other
    for i, other in enumerate(coding[1:], 1):
        extra[f"{path}.coding[{i}]"] = other
    return coding[0] if coding else None


# ------------------------------------------------------------------------- classifiers


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number_or_quantity(value: object) -> str | None:
    if _is_number(value):
        return "number"
    if isinstance(value, dict) and _is_number(value.get("value")):
        return "Quantity"
    return None


def _string_or_reference(value: object) -> str | None:
    if isinstance(value, str):
        return "string"
    if (
        isinstance(value, dict)
        and value
        and all(isinstance(value.get(k), str) for k in ("reference", "display") if k in value)
    ):
        return "Reference"
    return None


# ------------------------------------------------------------------------- FHIRPath


def _then(value: str, step: str) -> str:
    return f"{value}.{step}" if value else step


def _primitive_only(form: str, value: str, rest: str) -> None:
    if rest:
        msg = f"{value}.{rest}: a {form} form is read as one value; nothing is read below it"
        raise ConfigurationError(msg)


def _quantity_path(value: str, rest: str, kind: str) -> str:
    """The Quantity's ``value``, else the bare number (:func:`_quantity_value`)."""
    _primitive_only("quantity", value, rest)
    return f"({_then(value, 'value')} | {_then(value, f'ofType({kind})')}).first()"


def _reference_path(value: str, rest: str, kind: str) -> str:
    """The Reference's ``display``, else its ``reference``, else the string
    (:func:`_reference_display`)."""
    _primitive_only("reference", value, rest)
    text = _then(value, "ofType(string)")
    return f"({_then(value, 'display')} | {_then(value, 'reference')} | {text}).first()"


def _codeable_path(value: str, rest: str, kind: str) -> str:
    """``rest`` of the first coding, else of the bare Coding (:func:`_codeable_as_coding`)."""
    return f"({_then(value, f'coding.first().{rest}')} | {_then(value, rest)}).first()"


# ------------------------------------------------------------------------- schemas


def _one_or_many_schema(schema: JsonSchema) -> JsonSchema:
    if "type" in schema and schema.get("type") == "array":
        return {"anyOf": [schema["items"], schema]}
    return {"anyOf": [schema, {"type": "array", "items": schema}]}


def _quantity_schema(_canonical: JsonSchema) -> JsonSchema:
    # A bare number or a Quantity's value: any number, whatever the catalogue's reading.
    return {
        "anyOf": [
            {"type": "number"},
            {"type": "object", "properties": {"value": {"type": "number"}}},
        ]
    }


def _reference_schema(_canonical: JsonSchema) -> JsonSchema:
    return {
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
    }


# ------------------------------------------------------------------------- the mock's converters


def _quantity_live(value: Any, _alt: Alternative, _names: Names) -> Any:
    return {"value": value} if _is_number(value) else value


def _quantity_canonical(value: Any, _alt: Alternative, _names: Names) -> Any:
    if isinstance(value, dict) and set(value) <= {"value", "unit", "system", "code"}:
        return value.get("value")
    return value


def _codeable_live(value: Any, _alt: Alternative, _names: Names) -> Any:
    """A bare Coding as a CodeableConcept of that one coding."""
    if isinstance(value, dict) and "coding" not in value:
        return {"coding": [value]}
    return value


def _reference_live(value: Any, alt: Alternative, names: Names) -> Any:
    """A name as a Reference to the target's record of that name (``display`` only when
    none has it: FHIR allows a Reference with only a display)."""
    if not isinstance(value, str):
        return value
    rid = names.by_name.get(alt.target or "", {}).get(value)
    if rid is None:
        return {"display": value}
    return {"reference": f"{API_PREFIX}/{alt.target}/{rid}", "display": value}


def _reference_canonical(value: Any, alt: Alternative, names: Names) -> Any:
    """A Reference as its ``display``, else as the name of the target record it points at."""
    if not isinstance(value, dict):
        return value
    if isinstance(value.get("display"), str):
        return value["display"]
    reference = value.get("reference")
    if isinstance(reference, str) and alt.target:
        kind, _, rid = reference.rstrip("/").rpartition("/")
        name = names.by_id.get(alt.target, {}).get(rid)
        if kind.endswith(alt.target) and name is not None:
            return name
    return value


# ------------------------------------------------------------------------- the registry

FORMS: dict[str, Form] = {
    f.name: f
    for f in (
        Form(
            "one-or-many",
            "one object or an array of them (the reader reads an array)",
            _one_as_array,
            schema=_one_or_many_schema,
            array=True,
        ),
        Form(
            "quantity",
            "a Quantity read by its `value`, or a bare number",
            _quantity_value,
            _number_or_quantity,
            _quantity_schema,
            live=_quantity_live,
            canonical=_quantity_canonical,
            fhirpath=_quantity_path,
        ),
        Form(
            "reference",
            "a Reference read by its `display` (else its `reference`), or a string",
            _reference_display,
            _string_or_reference,
            _reference_schema,
            live=_reference_live,
            canonical=_reference_canonical,
            fhirpath=_reference_path,
        ),
        Form(
            "codeable-concept",
            "a CodeableConcept read as its first coding, or a bare Coding",
            _codeable_as_coding,
            live=_codeable_live,
            fhirpath=_codeable_path,
        ),
    )
}
"""Every alternative form, by the name a field's :class:`Alternative` gives."""


def _form(alt: Alternative, where: str) -> Form:
    try:
        return FORMS[alt.form]
    except KeyError:
        raise unknown_name("alternative form", alt.form, FORMS, f" on {where}") from None


def checked(field: Field) -> tuple[Form, ...]:
    """The forms of ``field`` the checker accepts (declared and not ``reader_only``)."""
    return tuple(_form(a, field.name) for a in field.forms if not a.reader_only)


def checked_array(field: Field) -> bool:
    """Whether the checker accepts ``field``'s value as one value or an array of them."""
    return any(form.array for form in checked(field))


def response_schema(field: Field, single: JsonSchema) -> JsonSchema | None:
    """The schema of one value of ``field`` in any checked form, or None when it has none.

    ``single`` is the schema of the catalogue's form; array forms are left to
    :func:`array_schema`.
    """
    out: JsonSchema | None = None
    for form in checked(field):
        if form.schema is not None and not form.array:
            out = form.schema(single if out is None else out)
    return out


def array_schema(field: Field, schema: JsonSchema) -> JsonSchema:
    """``schema`` (of ``field``'s whole value) widened by the field's checked array forms."""
    for form in checked(field):
        if form.array and form.schema is not None:
            schema = form.schema(schema)
    return schema


def readings(field: Field, value: Any) -> list[Any]:
    """``value`` and what each of ``field``'s forms reads it as, for a search of any form.

    Every declared form counts (a search reads tolerantly); a form that leaves the
    value as it is adds nothing; an item form reads each item of an array field.

    >>> readings(RESOURCES["Referral"].field("referralDefinition"), {"display": "GP"})
    [{'display': 'GP'}, 'GP']
    """
    out = [value]
    for alt in field.forms:
        form = _form(alt, field.name)
        if form.array or not field.many:
            read = form.read(value, "", {})
        elif isinstance(value, list):
            read = [form.read(item, "", {}) for item in value]
        else:
            continue
        if read is not value and read != value:
            out.append(read)
    return out


# ------------------------------------------------------------------------- derived tables


def _declared() -> list[tuple[str, str, tuple[str, ...], Field, Alternative, Form]]:
    """(resource, dotted path, parent path, field, declaration, form) of every declared form."""
    out: list[tuple[str, str, tuple[str, ...], Field, Alternative, Form]] = []

    def visit(res: str, fields: tuple[Field, ...], parent: tuple[str, ...]) -> None:
        for f in fields:
            path = ".".join((*parent, f.name))
            if f.forms and f.extension is not None:
                msg = f"{res}.{path}: an extension-encoded field cannot declare forms"
                raise ConfigurationError(msg)
            for alt in f.forms:
                out.append((res, path, parent, f, alt, _form(alt, f"{res}.{path}")))
            visit(res, f.fields, (*parent, f.name))

    for res in RESOURCES.values():
        visit(res.name, res.fields, ())
    return out


_DECLARED = _declared()


def _readers(
    declared: list[tuple[str, str, tuple[str, ...], Field, Alternative, Form]],
) -> dict[tuple[str, str], Reader]:
    """The reader's table: one form per value (the reader applies one), else refused."""
    out: dict[tuple[str, str], Reader] = {}
    for res, path, _parent, f, _alt, form in declared:
        key = (res, path if form.array or not f.many else f"{path}[]")
        if key in out:
            msg = f"{res}.{path}: two alternative forms of one value; the reader applies one"
            raise ConfigurationError(msg)
        out[key] = form.read
    return out


READERS: dict[tuple[str, str], Reader] = _readers(_DECLARED)
"""(resource, field path) -> the reader of its alternative form (``[]``: each item of an
array field), for the tolerant reader (``toolkit.views.conform``)."""

VIEW_FORMS: dict[tuple[str, str], Form] = {
    (res, path): form for res, path, _parent, _f, _alt, form in _DECLARED if not form.array
}
"""(resource, field path) -> the form of a single value the reader reads (every declared
one, ``reader_only`` included): the exported views read it with its ``fhirpath``."""

READ_AS_ARRAY: frozenset[tuple[str, str]] = frozenset(
    (res, f.name)
    for res, _path, parent, f, _alt, form in _DECLARED
    if form.array and not parent and not f.many
)
"""(resource, field) of one value that may arrive as an array: the reader reads an array,
and the catalogue's single value is the alternative form."""

PREFERRED: dict[tuple[str, str], tuple[str, str]] = {
    (res.name, f.name): f.prefer for res in RESOURCES.values() for f in res.fields if f.prefer
}
"""(resource, field) -> (sub-field, value) of the preferred entry of a repeating object."""

LIVE_ALTERNATES: dict[str, Classifier] = {
    f"{res}.{path}": form.classify
    for res, path, _parent, _f, alt, form in _DECLARED
    if not alt.reader_only and not form.array and form.classify is not None
}
"""Catalogue path -> the classifier of its checked forms (``toolkit.rules``, live forms)."""

ACCEPT_ARRAYS: frozenset[str] = frozenset(
    f"{res}.{path}"
    for res, path, _parent, _f, alt, form in _DECLARED
    if form.array and not alt.reader_only
)
"""Catalogue paths whose value the checker accepts as one value or an array of them
(``toolkit.rules.Options.accept_arrays`` of the contract walk and the mock's writes)."""


def _live_arrays() -> dict[str, frozenset[str]]:
    out: dict[str, set[str]] = {}
    for res, path, parent, f, alt, form in _DECLARED:
        if form.array and not alt.reader_only and not parent and not f.many:
            out.setdefault(res, set()).add(path)
    return {res: frozenset(names) for res, names in out.items()}


LIVE_ARRAYS: dict[str, frozenset[str]] = _live_arrays()
"""Resource -> its top-level fields of one value that the live service sends as an array
of them: the mock serves the array (``live``) or the single value (``spec``)."""


Converted = tuple[tuple[str, ...], bool, Alternative, Form]


def _converted() -> dict[str, tuple[Converted, ...]]:
    out: dict[str, list[Converted]] = {}
    for res, path, _parent, f, alt, form in _DECLARED:
        if not alt.reader_only and not form.array and form.live and form.canonical:
            out.setdefault(res, []).append((tuple(path.split(".")), f.many, alt, form))
    return {res: tuple(items) for res, items in out.items()}


CONVERTED: dict[str, tuple[Converted, ...]] = _converted()
"""Resource -> (path, many, declaration, form) of each field the live service sends in
another form than the catalogue's (checked forms that are not about array-ness): the
mock serves it in that form (:func:`to_live`) and reads it back (:func:`to_canonical`)."""

NAMED_TARGETS: frozenset[str] = frozenset(
    alt.target for items in CONVERTED.values() for _p, _m, alt, _f in items if alt.target
)
"""The resource types whose records a form names (the mock builds :class:`Names` of them)."""


def _at(value: Any, path: tuple[str, ...], many: bool, change: Callable[[Any], Any]) -> Any:
    """``value`` with ``change`` applied at ``path`` (copied where it changes)."""
    if isinstance(value, list):
        return [_at(v, path, many, change) for v in value]
    if not isinstance(value, dict) or path[0] not in value:
        return value
    item = value[path[0]]
    if len(path) > 1:
        new = _at(item, path[1:], many, change)
    elif many and isinstance(item, list):
        new = [change(v) for v in item]
    else:
        new = change(item)
    return value if new is item else {**value, path[0]: new}


def _convert(rtype: str, record: dict[str, Any], names: Names, *, live: bool) -> dict[str, Any]:
    for path, many, alt, form in CONVERTED.get(rtype, ()):
        turn = form.live if live else form.canonical
        assert turn is not None  # CONVERTED keeps only forms with both
        record = _at(record, path, many, functools.partial(_turn, turn, alt, names))
    return record


def _turn(turn: Converter, alt: Alternative, names: Names, value: Any) -> Any:
    return turn(value, alt, names)


def to_live(rtype: str, record: dict[str, Any], names: Names = NO_NAMES) -> dict[str, Any]:
    """A ``rtype`` record in the catalogue's forms as the live service sends it.

    >>> to_live("Referral", {"limitQuantity": {"quantity": 6}, "referralDefinition": "GP"})
    {'limitQuantity': {'quantity': {'value': 6}}, 'referralDefinition': {'display': 'GP'}}
    """
    return _convert(rtype, record, names, live=True)


def to_canonical(rtype: str, record: dict[str, Any], names: Names = NO_NAMES) -> dict[str, Any]:
    """A written ``rtype`` record (or merge patch) with each converted field in the
    catalogue's form; a value no form turns is left for the checker to refuse.

    >>> names = Names.of({"ReferralDefinition": [("3", "GP")]})
    >>> written = {"referralDefinition": {"reference": "ReferralDefinition/3"}}
    >>> to_canonical("Referral", written, names)
    {'referralDefinition': 'GP'}
    """
    return _convert(rtype, record, names, live=False)


def in_one_form(rtype: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` (of ``rtype``) with each declared form's values in one form, for a reader
    that infers one type per field from the data (the ViewDefinition runner's general read).

    Where one field's values arrive in both the catalogue's form and a declared other form
    (a page of the spec's bare numbers beside the live service's Quantities), the fewer
    are turned into the form most of them are in: into the other form by its ``live``
    converter, into the catalogue's by ``read`` (a tie gives the catalogue's). Records in
    one form already come back as they are, the same objects: a view written for the
    form the data has sees no change.

    >>> mixed = [{"limitQuantity": {"quantity": {"value": 6}}}, {"limitQuantity": {"quantity": 4}},
    ...          {"limitQuantity": {"quantity": {"value": 2}}}]
    >>> [r["limitQuantity"]["quantity"] for r in in_one_form("Referral", mixed)]
    [{'value': 6}, {'value': 4}, {'value': 2}]
    """
    for res, path, _parent, field, alt, form in _DECLARED:
        if res != rtype or form.array:
            continue
        steps = tuple(path.split("."))
        counts = {"canonical": 0, "other": 0}

        def count(value: Any, form: Form = form, counts: dict[str, int] = counts) -> Any:
            if value is not None:
                counts["other" if form.read(value, "", {}) is not value else "canonical"] += 1
            return value

        for record in records:
            _at(record, steps, field.many, count)
        if not (counts["canonical"] and counts["other"]):
            continue
        if counts["other"] <= counts["canonical"]:
            change = functools.partial(_read_alone, form.read)
        elif form.live is not None:
            change = functools.partial(_turn, form.live, alt, NO_NAMES)
        else:  # no way into the other form: the reader's own rule takes the fewer
            continue
        records = [_at(record, steps, field.many, change) for record in records]
    return records


def _read_alone(read: Reader, value: Any) -> Any:
    """``value`` in the catalogue's form; what the form does not use is dropped (unlike the
    declared reader, a frame of resources has no ``extra`` to keep it in)."""
    return read(value, "", {})
