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
  stored shape.

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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toolkit.catalogue.model import Alternative, Field
from toolkit.catalogue.resources import RESOURCES

__all__ = [
    "ACCEPT_ARRAYS",
    "FORMS",
    "LIVE_ALTERNATES",
    "LIVE_ARRAYS",
    "PREFERRED",
    "READERS",
    "READ_AS_ARRAY",
    "Form",
    "array_schema",
    "checked",
    "checked_array",
    "readings",
    "response_schema",
]

Leftovers = dict[str, Any]
Reader = Callable[[Any, str, Leftovers], Any]
"""``(value, path, extra) -> value``: the canonical form of a value in this form (a value
in another form unchanged); the keys it does not use go to ``extra`` by path."""
Classifier = Callable[[object], str | None]
JsonSchema = dict[str, Any]


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
        ),
        Form(
            "reference",
            "a Reference read by its `display` (else its `reference`), or a string",
            _reference_display,
            _string_or_reference,
            _reference_schema,
        ),
        Form(
            "codeable-concept",
            "a CodeableConcept read as its first coding, or a bare Coding",
            _codeable_as_coding,
        ),
    )
}
"""Every alternative form, by the name a field's :class:`Alternative` gives."""


def _form(alt: Alternative, where: str) -> Form:
    try:
        return FORMS[alt.form]
    except KeyError:
        from toolkit.errors import unknown_name

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
                from toolkit.errors import ConfigurationError

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
            from toolkit.errors import ConfigurationError

            msg = f"{res}.{path}: two alternative forms of one value; the reader applies one"
            raise ConfigurationError(msg)
        out[key] = form.read
    return out


READERS: dict[tuple[str, str], Reader] = _readers(_DECLARED)
"""(resource, field path) -> the reader of its alternative form (``[]``: each item of an
array field), for the tolerant reader (``toolkit.views.conform``)."""

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
